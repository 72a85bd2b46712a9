"""The keyed-average job the Spark tests run, and the exact output it must publish.

docs/benchmarks.md's keyed average at N = 200,000 events over 10,000 keys (20
events per key, 2 averages per key): every run must publish exactly the
expected averages, once each, whatever fails on the way.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from keyed_average import expected

from weir.spark import StreamJob, sinks, sources

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from weir.spark import EpochProgress

N = 200_000
KEYS = 10_000
ROWS_PER_EPOCH = 40_000


def expected_pairs(n: int = N, keys: int = KEYS, start: int = 0) -> Counter[tuple[int, int]]:
    """Every ``(key, average)`` the job emits, with multiplicity; only those of
    events ``start`` and later (the output of a run restored at that position)."""
    counts: dict[int, int] = {}
    sums: dict[int, int] = {}
    out: Counter[tuple[int, int]] = Counter()
    for i in range(n):
        key = (i * 2654435761) % keys
        counts[key] = counts.get(key, 0) + 1
        sums[key] = sums.get(key, 0) + i % 1000
        if counts[key] == 10:
            if i >= start:
                out[(key, sums[key] // 10)] += 1
            counts[key] = sums[key] = 0
    return out


EXPECTED = expected_pairs()


def write_event_files(files: Path, count: int, rows: int, keys: int = 1_000) -> None:
    """``count`` Parquet files of ``rows`` events each (``000.parquet`` ...): the events of
    ``sources.generator``'s sequence over ``keys`` keys, in order
    (``expected_pairs(count * rows, keys)``)."""
    files.mkdir()
    for part in range(count):
        ids = range(part * rows, (part + 1) * rows)
        table = pa.table({"key": [(i * 2654435761) % keys for i in ids], "value": [i % 1000 for i in ids]})
        pq.write_table(table, files / f"{part:03d}.parquet")


def keyed_average_job(
    spark: SparkSession,
    tmp: Path,
    function: Any,
    *,
    n: int = N,
    rows_per_epoch: int = ROWS_PER_EPOCH,
    interval_ms: int = 300,
    out: Path | None = None,
    **options: Any,
) -> tuple[StreamJob, Path]:
    """The keyed-average job over generated events into a Parquet sink (``tmp/out`` by
    default), checkpointing under ``tmp/ckpt``."""
    out = out or tmp / "out"
    job = StreamJob(
        spark,
        name=options.pop("name", "avg"),
        checkpoint_dir=str(tmp / "ckpt"),
        parallelism=options.pop("parallelism", 2),
        max_parallelism=128,
        **options,
    )
    job.enable_checkpointing(interval_ms)
    events = job.from_source(sources.generator(n, keys=KEYS, rows_per_epoch=rows_per_epoch), uid="events")
    events.key_by("key").process(function, output_schema="key long, avg long", uid="avg").sink_to(
        sinks.parquet_files(str(out)), uid="out"
    )
    return job, out


def published(spark: SparkSession, out: Path) -> Counter[tuple[int, int]]:
    """What the Parquet sink published under ``out``."""
    rows = spark.read.parquet(str(out)).select("key", "avg").collect()
    return Counter((int(r["key"]), int(r["avg"])) for r in rows)


def assert_exactly_once(spark: SparkSession, out: Path) -> None:
    """The published averages are exactly the expected ones, each once."""
    got = published(spark, out)
    count, checksum = expected(N, KEYS)
    assert sum(got.values()) == count, f"{sum(got.values())} averages published, {count} expected"
    assert sum(k[1] * v for k, v in got.items()) == checksum
    assert got == EXPECTED, "duplicated or missing averages"


def assert_nothing_left_behind(out: Path, checkpoints: Path, savepoints: Path | None = None) -> None:
    """A finished job leaves no staged epoch in its Parquet sink and no checkpoint or
    savepoint directory without ``_metadata`` (the files of an aborted, subsumed or
    cancelled checkpoint): only what completed stays."""
    staged = sorted(p.name for p in (out / "_staging").glob("epoch=*"))
    assert not staged, f"staged epochs left in the sink: {staged}"
    directories = [*checkpoints.glob("*/chk-*"), *(savepoints.glob("*") if savepoints else [])]
    incomplete = sorted(str(p) for p in directories if p.is_dir() and not (p / "_metadata").exists())
    assert not incomplete, f"directories without _metadata left behind: {incomplete}"


def _proc_entries() -> Iterator[tuple[int, str, int]]:
    """``(pid, command line, parent pid)`` of every process readable in /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        yield int(entry), cmdline, int(stat.rsplit(")", 1)[1].split()[1])


def processes(*needles: str) -> list[int]:
    """The pids of processes whose command line holds every needle."""
    return [pid for pid, cmdline, _ in _proc_entries() if all(n in cmdline for n in needles)]


def children_of(parents: set[int]) -> set[int]:
    """The processes whose parent is one of ``parents``."""
    return {pid for pid, _, parent in _proc_entries() if parent in parents}


def descendants(root: int) -> set[int]:
    """Every process below ``root``."""
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = children_of(frontier) - found
        found |= frontier
    return found


def state_host_pids(job_name: str) -> list[int]:
    """The state host processes of runs of job ``job_name``."""
    return processes("weir-host", f"weir-{job_name}-")


def assert_hosts_stopped(job_name: str) -> None:
    """No state host of job ``job_name`` outlives its run (they are told to stop as
    the run ends; a few seconds bound how long exiting may take)."""
    deadline = time.monotonic() + 15
    while state_host_pids(job_name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not state_host_pids(job_name), f"state hosts of {job_name} outlived the run"


def checkpoints_completed(count: int) -> Callable[[EpochProgress], bool]:
    """True once the job completed ``count`` checkpoints."""
    return lambda progress: len(progress.checkpoints) >= count


def after_a_checkpoint(progress: EpochProgress) -> bool:
    """True once the job's first checkpoint completed. Give the job
    ``LONG_ENOUGH_FOR_A_CHECKPOINT``: on a fast machine five epochs of one Spark job
    can all end before the first checkpoint completes, and nothing would act."""
    return bool(progress.checkpoints)


LONG_ENOUGH_FOR_A_CHECKPOINT: dict[str, Any] = {"rows_per_epoch": N // 20, "epochs_per_job": 1}
"""``keyed_average_job`` options for a run that outlasts its first checkpoints: twenty
epochs, each its own Spark job (each tens of ms at least), so ``on_epoch`` sees them
complete while epochs are left to run (CI once ran all five epochs of the default job
in 0.3 s, the first checkpoint cutting after the last)."""


def from_epoch(epoch: int) -> Callable[[EpochProgress], bool]:
    """True once the newest successful epoch reaches ``epoch``: a Spark job may run several
    epochs, and an ``on_epoch`` callback sees only the last one of each."""
    return lambda progress: progress.epoch >= epoch


def stop_with_savepoint_when(
    job: StreamJob, when: Callable[[EpochProgress], bool]
) -> Callable[[EpochProgress], None]:
    """An ``on_epoch`` callback that asks ``job`` once for a stop-with-savepoint when
    ``when`` holds. The callback runs in the driver between Spark jobs, so the request
    reaches a job that is still running, however fast its epochs go."""
    asked: list[object] = []

    def on_epoch(progress: EpochProgress) -> None:
        if when(progress) and not asked:
            asked.append(job.stop_with_savepoint())

    return on_epoch


def kill_state_hosts_when(
    job_name: str, when: Callable[[EpochProgress], bool]
) -> tuple[Callable[[EpochProgress], None], list[int]]:
    """An ``on_epoch`` callback that SIGKILLs the state hosts of job ``job_name`` once, when
    ``when`` holds, and the list of the killed pids. Called between Spark jobs, it kills
    them while the job still has epochs to run (give it several) or output to publish."""
    killed: list[int] = []

    def on_epoch(progress: EpochProgress) -> None:
        if when(progress) and not killed:
            pids = state_host_pids(job_name)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            killed.extend(pids)

    return on_epoch, killed
