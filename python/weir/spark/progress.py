"""What a running job prints: a line per epoch, checkpoint outcomes, a summary.

Lines go to standard error, prefixed with the job's name, when the job was
built with ``progress=True``; debug-level messages go to the ``weir.spark``
logger only.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import Accumulator

    from weir import _internal
    from weir.spark.runner import JobResult
    from weir.spark.waterfall import EpochWaterfall

log = logging.getLogger("weir.spark")


class Progress:
    """Progress output of one execution."""

    def __init__(self, job: str, *, enabled: bool, records: Accumulator[int]) -> None:
        self.job = job
        self.enabled = enabled
        self.records = records
        self.records_before = 0
        # What the finished tasks of failed epoch jobs counted: those epochs run again.
        self.discarded = 0
        self.last_epoch_s = 0.0

    def log(self, message: str, *, debug: bool = False) -> None:
        """Prints ``message`` (debug ones only to the logger)."""
        log.log(logging.DEBUG if debug else logging.INFO, "%s: %s", self.job, message)
        if self.enabled and not debug:
            print(f"[weir {self.job}] {message}", file=sys.stderr, flush=True)

    def epoch_ran(self, seconds: float) -> None:
        """The last epoch's Spark job took ``seconds``."""
        self.last_epoch_s = seconds

    def epoch_done(
        self, epoch: int, coordinator: _internal.Coordinator, waterfall: EpochWaterfall | None
    ) -> None:
        """Epoch ``epoch`` is final: its records, time, and the latest checkpoint;
        where its time went at debug level."""
        if waterfall is not None:
            self.log(waterfall.render(), debug=True)
        total = int(self.records.value)
        processed, self.records_before = total - self.records_before, total
        if not self.enabled:
            return
        summary = _checkpoint_summary(json.loads(coordinator.stats()))
        self.log(f"epoch {epoch}: {processed:,} records in {self.last_epoch_s:.2f}s{summary}")

    def epoch_failed(self) -> None:
        """An epoch's Spark job failed. Spark merged the counts of the job's tasks that
        finished; the epoch runs again, so they are not progress."""
        total = int(self.records.value)
        self.discarded += total - self.records_before
        self.records_before = total

    def summary(self, result: JobResult) -> None:
        """The end of the run: epochs, records, restarts, checkpoints."""
        stats = result.stats
        counts = stats.get("counts", {})
        history = [c for c in stats.get("history", []) if c.get("status") == "completed"]
        durations = sorted(c["end_to_end_millis"] for c in history)
        typical = f", median end to end {durations[len(durations) // 2]} ms" if durations else ""
        self.log(
            f"finished: {result.epochs} epochs, {int(self.records.value) - self.discarded:,} records, "
            f"{result.restarts} restarts; checkpoints: {counts.get('completed', 0)} completed, "
            f"{counts.get('failed', 0)} failed{typical}"
        )


def _checkpoint_summary(stats: dict[str, Any]) -> str:
    """The latest completed checkpoint: id, cut, size and its sync/async durations."""
    latest = stats.get("latest_completed")
    if not latest:
        return ""
    subtasks = latest.get("subtasks") or []
    sync = max((s["sync_millis"] for s in subtasks), default=0)
    upload = max((s["async_millis"] for s in subtasks), default=0)
    return (
        f"; checkpoint {latest['id']} (cut epoch {latest.get('cut')}): state "
        f"{_size(latest['state_size_bytes'])}, sync {sync} ms, async {upload} ms, "
        f"end to end {latest['end_to_end_millis']} ms"
    )


def _size(size: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
