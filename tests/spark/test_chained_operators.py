"""Jobs with several stateful steps: a three-step pipeline under faults and rescaling,
savepoint compatibility by uid (Flink's savepoint FAQ), and the buffering sink."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from keyed_average import FailingOnce
from keyed_jobs import after_a_checkpoint, from_epoch, kill_state_hosts_when, stop_with_savepoint_when
from pyspark.sql import functions as F
from three_step import (
    EVENT_SCHEMA,
    TOP_SCHEMA,
    USER_SCHEMA,
    BufferingSink,
    Dedup,
    PerUser,
    RegionTopN,
    event,
    expected,
)

from weir import KeyedProcessFunction, RuntimeContext, Types, ValueStateDescriptor
from weir.checkpoint import read_checkpoint
from weir.exceptions import InvalidArgumentError
from weir.spark import StreamJob, sinks, sources

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

N = 200_000
FILES = 10


def write_events(spark: SparkSession, directory: Path, n: int = N, files: int = FILES) -> Path:
    """Rows ``0 .. n-1`` of :func:`three_step.event` as ``files`` Parquet files, in order."""
    directory.mkdir(parents=True, exist_ok=True)
    per_file = n // files
    for f in range(files):
        staging = directory.parent / f"staging-{f}"
        spark.range(f * per_file, (f + 1) * per_file, numPartitions=1).selectExpr(
            "CASE WHEN id % 20 = 19 THEN id - 1 ELSE id END AS event_id"
        ).selectExpr("event_id", "pmod(event_id * 2654435761, 5000) AS user").selectExpr(
            "event_id", "user", "user % 7 AS region", "user % 97 + 1 AS amount"
        ).write.parquet(str(staging))
        (written,) = staging.glob("*.parquet")
        written.rename(directory / f"{f:03d}.parquet")
    return directory


@pytest.fixture(scope="module")
def events(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_events(spark, tmp_path_factory.mktemp("three-step") / "events")


def three_step_job(
    spark: SparkSession,
    tmp: Path,
    events: Path,
    parallelism: tuple[int, int, int] = (2, 3, 1),
    per_user: Any = None,
    **options: Any,
) -> tuple[StreamJob, Path]:
    out = tmp / "out"
    job = StreamJob(
        spark, name=options.pop("name", "three-step"), checkpoint_dir=str(tmp / "ckpt"), **options
    )
    job.enable_checkpointing(500)
    dedup, user, region = parallelism
    (
        job.from_source(sources.parquet_files(str(events), max_files_per_epoch=1), uid="events")
        .key_by("event_id")
        .process(Dedup(), EVENT_SCHEMA, uid="dedup", parallelism=dedup)
        .key_by("user")
        .process(per_user or PerUser(), USER_SCHEMA, uid="per-user", parallelism=user)
        .key_by("region")
        .process(RegionTopN(), TOP_SCHEMA, uid="top", parallelism=region)
        .sink_to(sinks.parquet_files(str(out)), uid="out")
    )
    return job, out


def assert_three_step_output(spark: SparkSession, out: Path, n: int = N) -> None:
    """Each region's updates numbered 1..k exactly once, ending in the final ranking."""
    per_region = (
        spark.read.parquet(str(out))
        .groupBy("region")
        .agg(
            F.count("*").alias("rows"),
            F.countDistinct("seq").alias("seqs"),
            F.min("seq").alias("first"),
            F.max("seq").alias("last"),
            F.max_by("top", "seq").alias("top"),
        )
        .collect()
    )
    updates, tops = expected(n)
    got = {r["region"]: (r["rows"], r["seqs"], r["first"], r["last"], r["top"]) for r in per_region}
    want = {region: (count, count, 1, count, tops[region]) for region, count in updates.items()}
    assert got == want, "updates published twice or missing, or a wrong final ranking"


def test_three_steps_without_faults(spark: SparkSession, tmp_path: Path, events: Path) -> None:
    job, out = three_step_job(spark, tmp_path, events)
    result = job.execute()
    assert result.restarts == 0 and result.checkpoints
    checkpoint = read_checkpoint(f"{tmp_path / 'ckpt' / 'three-step'}/chk-{result.checkpoints[-1]}")
    assert sorted(checkpoint.operators) == [("dedup", 2, 128), ("per-user", 3, 128), ("top", 1, 128)]
    assert_three_step_output(spark, out)


def test_three_steps_with_a_task_failure_in_the_second_step(
    spark: SparkSession, tmp_path: Path, events: Path
) -> None:
    marker, arm = tmp_path / "failed", tmp_path / "armed"
    failing = FailingOnce(PerUser(), str(marker), after=2_000, armed_by=str(arm))
    # Each epoch its own Spark job, so a checkpoint completes (and arms the
    # failure) while epochs are left (see keyed_jobs.after_a_checkpoint).
    job, out = three_step_job(spark, tmp_path, events, per_user=failing, epochs_per_job=1)
    result = job.execute(on_epoch=lambda p: arm.touch() if p.checkpoints else None)
    assert marker.exists() and result.restarts == 1
    assert_three_step_output(spark, out)


def test_three_steps_with_a_state_host_killed(spark: SparkSession, tmp_path: Path, events: Path) -> None:
    # Each epoch its own Spark job, so the callback sees the first checkpoint
    # complete while epochs are left (see keyed_jobs.after_a_checkpoint).
    job, out = three_step_job(spark, tmp_path, events, name="three-step-host-killed", epochs_per_job=1)
    kill, killed = kill_state_hosts_when("three-step-host-killed", after_a_checkpoint)
    result = job.execute(on_epoch=kill)
    assert killed and result.restarts >= 1
    assert_three_step_output(spark, out)


def test_three_steps_stopped_with_a_savepoint_and_resumed_rescaled_per_step(
    spark: SparkSession, tmp_path: Path, events: Path
) -> None:
    savepoints = tmp_path / "savepoints"
    job, out = three_step_job(spark, tmp_path, events, (2, 3, 1), savepoint_dir=str(savepoints))
    job.execute(on_epoch=stop_with_savepoint_when(job, from_epoch(4)))
    (savepoint,) = savepoints.iterdir()
    resumed, out2 = three_step_job(spark, tmp_path, events, (3, 1, 2), name="resumed", restore=str(savepoint))
    assert out2 == out
    resumed.execute()
    assert_three_step_output(spark, out)


# -- savepoint compatibility by uid (Flink's savepoint FAQ) ---------------------------

SMALL = 20_000


class FirstPerUser(KeyedProcessFunction):
    """Passes each user's first event on (keyed by ``user``)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.BOOLEAN()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
        if not self.seen.value():
            self.seen.update(True)
            yield value


@pytest.fixture(scope="module")
def small_events(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_events(spark, tmp_path_factory.mktemp("faq") / "events", n=SMALL, files=4)


def _steps(stream: Any, steps: str, *, transform: bool = False) -> Any:
    """``steps`` in order: "d" dedup by event, "f" first event per user, "u" per-user totals,
    "t" region top-N; ``transform`` puts a stateless step in front of each."""
    for step in steps:
        if transform:
            stream = stream.transform(lambda df: df.filter("1 = 1"))
        if step == "d":
            stream = stream.key_by("event_id").process(Dedup(), EVENT_SCHEMA, uid="dedup")
        elif step == "f":
            stream = stream.key_by("user").process(FirstPerUser(), EVENT_SCHEMA, uid="first")
        elif step == "u":
            stream = stream.key_by("user").process(PerUser(), USER_SCHEMA, uid="per-user")
        elif step == "t":
            stream = stream.key_by("region").process(RegionTopN(), TOP_SCHEMA, uid="top")
    return stream


def _run(
    spark: SparkSession,
    tmp: Path,
    events: Path,
    steps: str,
    *,
    stop_after: int | None = None,
    transform: bool = False,
    **options: Any,
) -> tuple[list[Any], str | None]:
    """Runs a job of ``steps`` over ``events``; with ``stop_after``, stops it with a
    savepoint after that many epochs. Returns the published rows and the savepoint."""
    savepoints = tmp / f"savepoints-{len(os.listdir(tmp))}"
    job = StreamJob(
        spark,
        name=f"faq-{len(os.listdir(tmp))}",
        checkpoint_dir=str(tmp / "ckpt"),
        parallelism=2,
        savepoint_dir=str(savepoints),
        progress=False,
        **options,
    )
    job.enable_checkpointing(300)
    sink = sinks.collect()
    _steps(
        job.from_source(sources.parquet_files(str(events), max_files_per_epoch=1), uid="events"),
        steps,
        transform=transform,
    ).sink_to(sink, uid="out")
    stop = (lambda p: job.stop_with_savepoint() if p.epoch == stop_after else None) if stop_after else None
    result = job.execute(on_epoch=stop)
    return sink.rows, result.savepoint


def _event_counts(n: int) -> dict[int, int]:
    """Distinct events per user in the first ``n`` rows."""
    seen: set[int] = set()
    counts: Counter[int] = Counter()
    for i in range(n):
        event_id, user, _, _ = event(i)
        if event_id not in seen:
            seen.add(event_id)
            counts[user] += 1
    return dict(counts)


def _final_counts(rows: list[Any]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for row in rows:
        counts[row["user"]] = max(counts.get(row["user"], 0), row["count"])
    return counts


def test_an_added_stateful_operator_starts_empty(
    spark: SparkSession, tmp_path: Path, small_events: Path
) -> None:
    _, savepoint = _run(spark, tmp_path, small_events, "du", stop_after=2)
    rows, _ = _run(spark, tmp_path, small_events, "dut", restore=savepoint)
    for region in {r["region"] for r in rows}:
        seqs = sorted(r["seq"] for r in rows if r["region"] == region)
        assert seqs == list(range(1, len(seqs) + 1)), "the new operator numbered its updates from 1"


def test_a_removed_stateful_operator_is_refused_unless_allowed(
    spark: SparkSession, tmp_path: Path, small_events: Path
) -> None:
    _, savepoint = _run(spark, tmp_path, small_events, "dut", stop_after=2)
    with pytest.raises(InvalidArgumentError, match="top"):
        _run(spark, tmp_path, small_events, "du", restore=savepoint)
    rows, _ = _run(spark, tmp_path, small_events, "du", restore=savepoint, allow_non_restored_state=True)
    # Per-user counts went on from the savepoint: after the last file they are the full counts.
    assert _final_counts(rows) == _event_counts(SMALL)


def test_reordered_operators_restore_by_uid(spark: SparkSession, tmp_path: Path, small_events: Path) -> None:
    before, savepoint = _run(spark, tmp_path, small_events, "df", stop_after=2)
    after, _ = _run(spark, tmp_path, small_events, "fd", restore=savepoint)
    # "first" found its state although it moved: no user's first event is passed on twice.
    users = Counter(r["user"] for r in before + after)
    assert set(users.values()) == {1}
    assert set(users) == set(_event_counts(SMALL))


def test_a_stateless_step_inserted_changes_nothing(
    spark: SparkSession, tmp_path: Path, small_events: Path
) -> None:
    _, savepoint = _run(spark, tmp_path, small_events, "du", stop_after=2)
    rows, _ = _run(spark, tmp_path, small_events, "du", restore=savepoint, transform=True)
    assert _final_counts(rows) == _event_counts(SMALL)


def test_a_changed_max_parallelism_is_refused(
    spark: SparkSession, tmp_path: Path, small_events: Path
) -> None:
    _, savepoint = _run(spark, tmp_path, small_events, "du", stop_after=2)
    with pytest.raises(InvalidArgumentError, match="max.parallelism"):
        _run(spark, tmp_path, small_events, "du", restore=savepoint, max_parallelism=256)


# -- the buffering sink ----------------------------------------------------------------


def test_the_buffering_sink_keeps_every_element_exactly_once_when_rescaled(
    spark: SparkSession, tmp_path: Path
) -> None:
    data = tmp_path / "numbers"
    data.mkdir()
    for f in range(6):
        staging = tmp_path / f"staging-{f}"
        spark.range(f * 1000, (f + 1) * 1000, numPartitions=1).selectExpr(
            "id AS a", "id * 2 AS b"
        ).write.parquet(str(staging))
        (written,) = staging.glob("*.parquet")
        written.rename(data / f"{f:03d}.parquet")

    def buffering_job(name: str, parallelism: int, sink: Any, **options: Any) -> StreamJob:
        job = StreamJob(spark, name=name, checkpoint_dir=str(tmp_path / "ckpt"), progress=False, **options)
        job.enable_checkpointing(300)
        job.from_source(sources.parquet_files(str(data), max_files_per_epoch=1), uid="numbers").process(
            BufferingSink(threshold=7), "a long, b long", uid="buffer", parallelism=parallelism
        ).sink_to(sink, uid="out")
        return job

    savepoints = tmp_path / "savepoints"
    first_sink = sinks.collect()
    first = buffering_job("buffer", 2, first_sink, savepoint_dir=str(savepoints))
    first.execute(on_epoch=stop_with_savepoint_when(first, from_epoch(3)))
    (savepoint,) = savepoints.iterdir()
    second_sink = sinks.collect()
    final = tmp_path / "final"
    second = buffering_job("buffer-resumed", 3, second_sink, restore=str(savepoint), savepoint_dir=str(final))
    second.execute(
        on_epoch=lambda p: (
            second.stop_with_savepoint() if p.position == {"last_file": "005.parquet"} else None
        )
    )
    (last,) = final.iterdir()
    emitted = [(r["a"], r["b"]) for r in first_sink.rows + second_sink.rows]
    still_buffered = _buffered_elements(spark, str(last), tmp_path / "flush")
    assert Counter(emitted + still_buffered) == Counter((i, 2 * i) for i in range(6000))


def _buffered_elements(spark: SparkSession, savepoint: str, tmp: Path) -> list[tuple[int, int]]:
    """The buffers a savepoint holds: restored at parallelism 1, flushed by one input row."""
    flushed = sinks.collect()

    class Flush(BufferingSink):
        def process_element(self, value: Any, ctx: Any) -> Any:
            out, self.buffered = self.buffered, []
            yield from out

    job = StreamJob(spark, name="flush", checkpoint_dir=str(tmp), restore=savepoint, progress=False)
    job.from_source(sources.generator(1, keys=1, rows_per_epoch=1), uid="one-row").process(
        Flush(threshold=1), "a long, b long", uid="buffer", parallelism=1
    ).sink_to(flushed, uid="out")
    job.execute()
    return [(r["a"], r["b"]) for r in flushed.rows]
