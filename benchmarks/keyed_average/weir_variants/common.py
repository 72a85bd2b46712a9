"""What the Weir variants share: a ``weir.spark.StreamJob`` over the generated event files,
a transactional Parquet sink, and the job's result turned into an Outcome."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from benchmarks.keyed_average.measure import Outcome, cpu_use
from benchmarks.keyed_average.spark_env import PARALLELISM, read_back
from benchmarks.keyed_average.workload import EVENT_DDL, event_table

if TYPE_CHECKING:
    from benchmarks.keyed_average.registry import RunContext
    from weir import StateBackend
    from weir.spark import DataStream, JobResult, KeyedStream

#: docs/benchmarks.md: checkpointing on, every 1 s, to local storage.
CHECKPOINT_INTERVAL_MS = 1000
MAX_PARALLELISM = 128
#: Each variant runs as often as the ceilings and reports the median. A fresh
#: worker's JVM keeps getting faster over its first runs (its compiler warms
#: up: 3.2, 2.7, 2.5 s for three heap runs), so a median of three would be the
#: second run while the ceilings' median of five is their third: fewer runs
#: would measure Weir in a colder JVM than the ceilings it is compared with.
WEIR_REPEATS = 5
#: The warm-up's events per file (``files_per_trigger`` files, a timed run's
#: first epoch) and keys: every key sees 100 events a file, so windows
#: fill and emit. A single small file left the executors of the local-cluster
#: variant cold: the first timed run's first large epoch took 3.2-3.3 s against
#: 1.5-1.7 s in later runs, and its checkpoint completed 2.3-2.5 s after its
#: trigger (stop 25's probe).
WARMUP_EVENTS_PER_FILE, WARMUP_KEYS = 100_000, 1_000
#: The slowest checkpoints of a run whose breakdown goes into the JSON.
SLOWEST_SHOWN = 3


def run_weir_job(
    ctx: RunContext,
    name: str,
    state_backend: StateBackend | str,
    attach: Callable[[KeyedStream], DataStream],
    checkpoint_interval_ms: int | None = CHECKPOINT_INTERVAL_MS,
) -> Outcome:
    """Run events -> key_by("key") -> ``attach`` (the stateful step) -> Parquet sink, with
    checkpoints every second (``None``: checkpointing off, output published at the end);
    time ``execute`` and read the published output back.

    The source reads the same files as the Spark peers, with the schema they are given too,
    in epochs sized by time (the file source's default: about one checkpoint interval of work
    each), starting from ``files_per_trigger`` files, the size of the peers' micro-batches.
    """
    from weir.spark import StreamJob, sinks, sources

    def build(job_name: str, events: Path, output: Path) -> StreamJob:
        job = StreamJob(
            ctx.spark,
            name=job_name,
            checkpoint_dir=ctx.checkpoint_uri,
            state_backend=state_backend,
            parallelism=PARALLELISM,
            max_parallelism=MAX_PARALLELISM,
            progress=False,
        )
        if checkpoint_interval_ms is not None:
            job.enable_checkpointing(checkpoint_interval_ms)
        source = sources.parquet_files(
            str(events), schema=EVENT_DDL, initial_files_per_epoch=ctx.params.files_per_trigger
        )
        stream = job.from_source(source, uid="events")
        attach(stream.key_by("key")).sink_to(sinks.parquet_files(str(output)), uid="out")
        return job

    # Warm the session (JVM code generation in the driver and the executors,
    # Python workers, the state host's first start) with one epoch of events,
    # untimed: the ceilings are medians of warm runs. Its keys repeat, so it
    # emits output too: a Python worker's first Arrow conversion of output
    # imports pandas (about 0.2 s).
    warm_events, warm_output = ctx.work_dir / "warmup-events", ctx.work_dir / "warmup-out"
    shutil.rmtree(warm_events, ignore_errors=True)
    shutil.rmtree(warm_output, ignore_errors=True)
    warm_events.mkdir(parents=True)
    for i in range(ctx.params.files_per_trigger):
        start = i * WARMUP_EVENTS_PER_FILE
        events = event_table(start, start + WARMUP_EVENTS_PER_FILE, WARMUP_KEYS)
        pq.write_table(events, warm_events / f"part-{i:05d}.parquet")
    build(f"{name}-warmup", warm_events, warm_output).execute()

    shutil.rmtree(ctx.output_dir, ignore_errors=True)
    shutil.rmtree(ctx.work_dir / "checkpoint", ignore_errors=True)
    job = build(name, ctx.events_dir, ctx.output_dir)
    with cpu_use() as cpu:
        start = time.perf_counter()
        result = job.execute()
        wall = time.perf_counter() - start
    count, checksum = read_back(ctx, "avg")
    sync_ms, async_ms = checkpoint_durations(result)
    return Outcome(
        wall_s=wall,
        count=count,
        checksum=checksum,
        checkpoints=len(result.checkpoints),
        checkpoint_sync_ms=sync_ms,
        checkpoint_async_ms=async_ms,
        extra={
            "epochs": result.epochs,
            "restarts": result.restarts,
            "remote_state_bytes_per_epoch": result.remote_state_bytes / max(result.epochs, 1),
            "cpu_s": cpu.seconds,
            **typical_epoch(result),
            **checkpoint_summary(result),
        },
    )


def typical_epoch(result: JobResult) -> dict[str, Any]:
    """The waterfall of the median Spark job by driver time (a job runs up to
    ``epochs_per_job`` epochs), among jobs that ran tasks, as JSON and text."""
    timed = [w for w in result.waterfalls if w.tasks]
    if not timed:
        return {}
    median = sorted(timed, key=lambda w: sum(w.driver.values()))[len(timed) // 2]
    return {"waterfall": median.to_dict(), "waterfall_text": median.render()}


def checkpoint_durations(result: JobResult) -> tuple[list[float], list[float]]:
    """Per completed checkpoint, the synchronous and asynchronous durations (ms) of its
    slowest subtask, from the coordinator's statistics (``history[].subtasks[]``)."""
    sync_ms: list[float] = []
    async_ms: list[float] = []
    for checkpoint in _completed(result):
        subtasks: list[dict[str, Any]] = checkpoint.get("subtasks") or []
        if subtasks:
            sync_ms.append(float(max(t.get("sync_millis", 0) for t in subtasks)))
            async_ms.append(float(max(t.get("async_millis", 0) for t in subtasks)))
    return sync_ms, async_ms


def _completed(result: JobResult) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = result.stats.get("history") or []
    return [c for c in history if c.get("kind") == "checkpoint" and c.get("status") == "completed"]


def checkpoint_summary(result: JobResult) -> dict[str, Any]:
    """The coordinator's counts, end-to-end durations and state sizes, for the JSON."""
    completed = _completed(result)
    slowest = sorted(completed, key=lambda c: c.get("end_to_end_millis") or 0)[-SLOWEST_SHOWN:]
    return {
        "checkpoint_counts": result.stats.get("counts"),
        "checkpoint_e2e_ms": [c.get("end_to_end_millis") for c in completed],
        "checkpoint_state_bytes": [c.get("state_size_bytes") for c in completed],
        "checkpoint_persisted_bytes": [c.get("persisted_bytes") for c in completed],
        "checkpoint_slowest": [_breakdown(c) for c in slowest],
    }


def _breakdown(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Where a checkpoint's time went: per subtask, the wait from the trigger until its
    snapshot began (the cut's epoch still running), then its synchronous and
    asynchronous parts."""
    subtasks: list[dict[str, Any]] = checkpoint.get("subtasks") or []
    return {
        "e2e_ms": checkpoint.get("end_to_end_millis"),
        "cut": checkpoint.get("cut"),
        "subtasks_start_sync_async_ms": [
            [t.get("start_delay_millis"), t.get("sync_millis"), t.get("async_millis")] for t in subtasks
        ],
    }
