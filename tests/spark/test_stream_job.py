"""End-to-end exactly-once tests of ``weir.spark.StreamJob`` on real PySpark (local mode).

The workload is docs/benchmarks.md's keyed average at N = 200,000 events over
10,000 keys (20 events per key, 2 averages per key): every run must publish
exactly the expected averages, once each, whatever fails on the way.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from keyed_average import FailingOnce, KeyedAverage, expected  # noqa: E402
from keyed_jobs import (  # noqa: E402
    EXPECTED,
    KEYS,
    LONG_ENOUGH_FOR_A_CHECKPOINT,
    N,
    after_a_checkpoint,
    assert_exactly_once,
    assert_hosts_stopped,
    assert_nothing_left_behind,
    checkpoints_completed,
    expected_pairs,
    keyed_average_job,
    kill_state_hosts_when,
    stop_with_savepoint_when,
    write_event_files,
)
from pyspark.sql import functions as F

from weir import (
    BatchContext,
    KeyedProcessFunction,
    RuntimeContext,
    ValueStateDescriptor,
    VectorizedKeyedFunction,
)
from weir.config import CheckpointConfig, StateBackend
from weir.coordinator import Coordinator
from weir.exceptions import CheckpointError, InvalidArgumentError
from weir.spark import EpochProgress, StreamJob, sinks, sources
from weir.spark.arrow_batches import BYTES_PER_BATCH, NO_BYTE_LIMIT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark


def test_expectation_matches_benchmarks_md() -> None:
    assert expected(N, KEYS) == (20_000, sum(k[1] * v for k, v in EXPECTED.items()))


def test_exactly_once_without_failures(spark: SparkSession, tmp_path: Path) -> None:
    job, out = keyed_average_job(spark, tmp_path, KeyedAverage(), state_backend="rocksdb")
    result = job.execute()
    assert result.restarts == 0
    assert result.checkpoints, "a bounded exactly-once job ends with a checkpoint"
    assert_exactly_once(spark, out)


class VectorizedCountWindowAverage(VectorizedKeyedFunction):
    """The keyed average as Flink's countWindow(10) with the native sum, a batch at a time."""

    def open(self, runtime_context: RuntimeContext) -> None:
        window = pa.struct([pa.field("filled", pa.int64(), False), pa.field("acc", pa.int64(), False)])
        self.sums = runtime_context.get_state(ValueStateDescriptor("window", window))

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch:
        sums = self.sums.aggregate(ctx.keys, batch.column("value"), "sum", window=10)
        filled = sums.is_valid()
        averages = pc.divide(sums.filter(filled), 10)
        return pa.record_batch([batch.column("key").filter(filled), averages], names=["key", "avg"])


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_vectorized_job_with_native_count_windows_is_exactly_once(
    spark: SparkSession, tmp_path: Path, backend: str
) -> None:
    # Keys and key groups reach the state host as Arrow columns, encoded in Rust.
    job, out = keyed_average_job(spark, tmp_path, VectorizedCountWindowAverage(), state_backend=backend)
    result = job.execute()
    assert result.restarts == 0
    assert result.checkpoints
    assert_exactly_once(spark, out)


def average_into_collect(
    spark: SparkSession,
    tmp_path: Path,
    name: str,
    events: sources.Source,
    *,
    parallelism: int = 2,
    key_type: str = "long",
    transform: Callable[[DataFrame], DataFrame] | None = None,
    mode: str = "exactly_once",
    function: KeyedProcessFunction | None = None,
) -> tuple[StreamJob, sinks.CollectSink]:
    """``function`` (``KeyedAverage`` unless given) of ``events`` (after ``transform``) into a
    collect sink, checkpointing every 100 ms."""
    job = StreamJob(spark, name=name, checkpoint_dir=str(tmp_path / "ckpt"), parallelism=parallelism)
    job.enable_checkpointing(100, mode=mode)
    sink = sinks.collect()
    stream = job.from_source(events, uid="events")
    if transform is not None:
        stream = stream.transform(transform)
    stream.key_by("key").process(
        function or KeyedAverage(), output_schema=f"key {key_type}, avg long", uid="avg"
    ).sink_to(sink, uid="out")
    return job, sink


def test_subtasks_without_rows_run_a_task_every_epoch_and_take_every_checkpoint(
    spark: SparkSession, tmp_path: Path
) -> None:
    # One key: its subtask gets every row, the other two none. Spark still runs a task
    # for their empty partitions, so they commit each epoch and take each barrier.
    events = sources.generator(3_000, keys=1, rows_per_epoch=500)
    job, sink = average_into_collect(spark, tmp_path, "one-key", events, parallelism=3)
    result = job.execute()
    assert result.restarts == 0 and result.checkpoints
    assert [w.tasks["attach"][2] for w in result.waterfalls] == [3] * result.epochs
    history = [c for c in result.stats["history"] if c["status"] == "completed"]
    assert history and all(len(c["subtasks"]) == 3 for c in history)
    want = [(0, sum(i % 1000 for i in range(w, w + 10)) // 10) for w in range(0, 3_000, 10)]
    assert sorted((r["key"], r["avg"]) for r in sink.rows) == sorted(want)


def test_keys_of_a_type_weir_does_not_hash_use_the_jvms_key_groups(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Float keys: the JVM's key groups travel with the rows, and the state stores them.
    job, sink = average_into_collect(
        spark,
        tmp_path,
        "float-keys",
        sources.generator(20_000, keys=1_000, rows_per_epoch=5_000),
        key_type="float",
        transform=lambda df: df.selectExpr("CAST(key AS FLOAT) AS key", "value"),
    )
    result = job.execute()
    assert result.restarts == 0 and result.checkpoints
    want = {(float(key), avg): times for (key, avg), times in expected_pairs(20_000, 1_000).items()}
    assert Counter((r["key"], r["avg"]) for r in sink.rows) == want


@pytest.mark.parametrize(
    ("key_type", "key"),
    [("timestamp", "timestamp_seconds(key)"), ("struct<id: long>", "named_struct('id', key)")],
)
def test_a_job_keyed_by_a_column_state_cannot_key_is_refused_before_its_first_epoch(
    spark: SparkSession, tmp_path: Path, key_type: str, key: str
) -> None:
    job, sink = average_into_collect(
        spark,
        tmp_path,
        "unkeyable",
        sources.generator(2_000, keys=100, rows_per_epoch=500),
        key_type=key_type,
        transform=lambda df: df.selectExpr(f"{key} AS key", "value"),
    )
    with pytest.raises(InvalidArgumentError, match=r"operator 'avg': key_by column 'key' .*unix_micros"):
        job.execute()
    assert sink.rows == []


class StampedAverage(KeyedAverage):
    """``KeyedAverage``'s averages with a timestamp: the key as seconds since 1970."""

    def process_element(self, value: tuple[int, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        for key, avg in super().process_element(value, ctx):
            yield key, avg, dt.datetime.fromtimestamp(key, dt.UTC)


def test_a_job_writes_timestamps_in_the_sessions_time_zone(spark: SparkSession, tmp_path: Path) -> None:
    job = StreamJob(spark, name="stamped", checkpoint_dir=str(tmp_path / "ckpt"), parallelism=2)
    job.enable_checkpointing(100)
    out = tmp_path / "out"
    (
        job.from_source(sources.generator(20_000, keys=1_000, rows_per_epoch=5_000), uid="events")
        .key_by("key")
        .process(StampedAverage(), output_schema="key long, avg long, at timestamp", uid="avg")
        .sink_to(sinks.parquet_files(str(out)), uid="out")
    )
    result = job.execute()
    assert result.restarts == 0 and result.checkpoints
    # The test session's time zone is UTC: Spark shows the instants as UTC wall clock.
    rows = spark.read.parquet(str(out)).collect()
    assert Counter((r["key"], r["avg"]) for r in rows) == expected_pairs(20_000, 1_000)
    assert all(r["at"] == dt.datetime(1970, 1, 1) + dt.timedelta(seconds=r["key"]) for r in rows)


def test_exactly_once_when_a_task_fails_part_way(spark: SparkSession, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    job, out = keyed_average_job(spark, tmp_path, FailingOnce(KeyedAverage(), str(marker), after=5_000))
    result = job.execute()
    assert marker.exists(), "the injected failure happened"
    assert result.restarts == 1
    assert_exactly_once(spark, out)


def test_exactly_once_when_the_state_host_is_killed(spark: SparkSession, tmp_path: Path) -> None:
    job, out = keyed_average_job(
        spark, tmp_path, KeyedAverage(), name="avg-host-killed", **LONG_ENOUGH_FOR_A_CHECKPOINT
    )
    kill, killed = kill_state_hosts_when("avg-host-killed", after_a_checkpoint)
    result = job.execute(on_epoch=kill)
    assert killed, "the state host was killed mid-run"
    assert result.restarts >= 1
    assert_exactly_once(spark, out)
    assert_nothing_left_behind(out, tmp_path / "ckpt")
    assert_hosts_stopped("avg-host-killed")


def test_incremental_rocksdb_checkpoints_survive_a_killed_host_and_restore_rescaled(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Checkpoints store RocksDB's SST files and send only new ones; the host
    # is killed once a second (incremental) checkpoint completed, so the job
    # fails over to an incremental checkpoint and goes on taking them. A
    # second run restores the newest one at parallelism 3 (RocksDB files of
    # two subtasks merged into three). One epoch per Spark job: the kill
    # callback runs between jobs, so it sees every checkpoint as it completes
    # instead of once after a job of many epochs.
    backend = StateBackend("rocksdb", incremental=True)
    name = "avg-incremental"
    job, out = keyed_average_job(
        spark,
        tmp_path,
        KeyedAverage(),
        name=name,
        state_backend=backend,
        rows_per_epoch=10_000,
        epochs_per_job=1,
    )
    kill, killed = kill_state_hosts_when(name, checkpoints_completed(2))
    first = job.execute(max_epochs=12, on_epoch=kill)
    assert killed, "the state host was killed mid-run"
    assert first.restarts >= 1
    completed = [
        c for c in first.stats["history"] if c["kind"] == "checkpoint" and c["status"] == "completed"
    ]
    assert any(0 < c["persisted_bytes"] < c["state_size_bytes"] for c in completed), [
        (c["id"], c["persisted_bytes"], c["state_size_bytes"]) for c in completed
    ]
    assert list((tmp_path / "ckpt" / name / "shared").rglob("*.sst")), "SST files are shared"
    resumed, _ = keyed_average_job(
        spark, tmp_path, KeyedAverage(), name=name, state_backend=backend, parallelism=3, restore="latest"
    )
    resumed.execute()
    assert_exactly_once(spark, out)
    assert_hosts_stopped(name)


def test_uncompressed_heap_checkpoints_restore_into_a_run_that_compresses(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Flink's snapshot-compression option: with "none" the keyed files store
    # their key-group blocks as they are (the header, JSON, says so); the
    # next run, with the default zstd, restores from them.
    name = "avg-uncompressed"
    job, out = keyed_average_job(spark, tmp_path, KeyedAverage(), name=name)
    job.set_checkpoint_config(CheckpointConfig(interval_ms=300, snapshot_compression="none"))
    first = job.execute(max_epochs=6)
    assert first.checkpoints
    keyed = list((tmp_path / "ckpt" / name).glob("chk-*/avg/*/keyed"))
    assert len(keyed) == 2, keyed
    assert all(b'"compression":"none"' in path.read_bytes() for path in keyed)
    resumed, _ = keyed_average_job(spark, tmp_path, KeyedAverage(), name=name, restore="latest")
    resumed.execute()
    assert_exactly_once(spark, out)
    assert_hosts_stopped(name)


def test_a_second_run_on_the_job_directory_fails_fast_and_leaves_nothing_behind(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    held = CheckpointConfig(interval_ms=300)
    holder = Coordinator(str(tmp_path / "ckpt"), "avg-held", "other-run", [("avg", 2, 128)], held)
    try:
        job, out = keyed_average_job(spark, tmp_path, KeyedAverage(), name="avg-held")
        with pytest.raises(CheckpointError, match=r"is in use by run .* stop that run"):
            job.execute()
    finally:
        holder.shutdown()
    assert not list(temp.iterdir()), "the failed run left its host directory behind"
    assert_hosts_stopped("avg-held")
    assert not out.exists() or not list(out.glob("epoch=*"))


DRIVER = textwrap.dedent(
    """
    import os, sys
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, {examples!r})
    from pyspark.sql import SparkSession
    from weir.spark import EpochProgress, StreamJob, sinks, sources
    from keyed_average import KeyedAverage

    spark = (SparkSession.builder.master("local[2]").appName("weir-driver-kill")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    job = StreamJob(spark, name="avg-driver", checkpoint_dir={ckpt!r}, parallelism=2,
                    state_backend="rocksdb", restore="latest", epochs_per_job=1)
    job.enable_checkpointing(300)
    events = job.from_source(sources.generator({n}, keys={keys}, rows_per_epoch={rows}),
                             uid="events")
    (events.key_by("key").process(KeyedAverage(), output_schema="key long, avg long", uid="avg")
           .sink_to(sinks.parquet_files({out!r}), uid="out"))
    result = job.execute()
    print("RESTORED-RUN-DONE", result.epochs, flush=True)
    """
)


def _timeline_members(lineage: Path) -> list[int]:
    """The checkpoints a ``_lineage`` record names (none while it is being replaced)."""
    try:
        return list(json.loads(lineage.read_text())["members"])
    except (OSError, ValueError, KeyError):
        return []


def test_exactly_once_when_the_driver_is_killed(spark: SparkSession, tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    script = tmp_path / "driver.py"
    script.write_text(
        DRIVER.format(
            examples=str(Path(__file__).resolve().parents[2] / "examples"),
            ckpt=str(ckpt),
            out=str(out),
            n=N,
            keys=KEYS,
            rows=10_000,
        )
    )
    # Twenty epochs, each its own Spark job (``epochs_per_job=1`` in the script), so epochs
    # are left to run when this loop, polling from outside, sees the first checkpoint.
    first = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    deadline = time.monotonic() + 240
    lineage = ckpt / "avg-driver" / "_lineage"
    while time.monotonic() < deadline and first.poll() is None:
        # Killed once a checkpoint is on the run's timeline (its _metadata alone
        # is not: a crash before the timeline names it leaves nothing to restore).
        if lineage.exists() and _timeline_members(lineage):
            break
        time.sleep(0.05)
    assert first.poll() is None, "the first driver must still be running when it is killed"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    second = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=280, check=False
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "restored from" in second.stderr
    assert_exactly_once(spark, out)


def test_epochs_run_while_a_slow_upload_is_in_flight(spark: SparkSession, tmp_path: Path) -> None:
    job, out = keyed_average_job(
        spark,
        tmp_path,
        KeyedAverage(),
        name="avg-slow-store",
        checkpoint_storage_options={"put_delay_ms": "1500"},
        # Twenty epochs: with five, epochs of 0.1 s all ran before the first checkpoint's
        # upload began, leaving no later epoch to run while it was in flight.
        rows_per_epoch=N // 20,
    )
    result = job.execute()
    assert_exactly_once(spark, out)
    # Every put waits 1.5 s, so each upload outlives the epoch that carried its
    # barrier (cut + 1); a checkpoint completing after a later epoch ran shows
    # epochs went on while its upload was in flight.
    assert result.completions
    assert any(newest >= cut + 2 for _, cut, newest in result.completions), result.completions


@pytest.mark.parametrize("new_parallelism", [3, 1])
def test_stop_with_savepoint_and_resume_rescaled(
    spark: SparkSession, tmp_path: Path, new_parallelism: int
) -> None:
    savepoints = tmp_path / "savepoints"
    job, out = keyed_average_job(
        spark, tmp_path, KeyedAverage(), savepoint_dir=str(savepoints), **LONG_ENOUGH_FOR_A_CHECKPOINT
    )
    stopped = job.execute(on_epoch=stop_with_savepoint_when(job, after_a_checkpoint))
    assert stopped.savepoint is not None
    assert Path(stopped.savepoint, "_metadata").exists()
    resumed, out2 = keyed_average_job(
        spark,
        tmp_path,
        KeyedAverage(),
        parallelism=new_parallelism,
        restore=stopped.savepoint,
        name="avg-resumed",
    )
    assert out2 == out
    resumed.execute()
    assert_exactly_once(spark, out)


def test_a_savepoint_the_job_ends_before_fails_instead_of_waiting_forever(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Asked for after the last epoch of the epoch budget: the run ends before
    # the savepoint can complete, and its future says so.
    job, _ = keyed_average_job(spark, tmp_path, KeyedAverage(), savepoint_dir=str(tmp_path / "savepoints"))
    asked: list[Future[str]] = []
    result = job.execute(max_epochs=1, on_epoch=lambda _: asked.append(job.trigger_savepoint()))
    assert result.savepoint is None
    (future,) = asked
    with pytest.raises(CheckpointError, match="the job ended before the savepoint completed"):
        future.result(timeout=0)


def test_a_savepoint_with_state_of_a_removed_operator_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    savepoints = tmp_path / "savepoints"
    job, _ = keyed_average_job(
        spark, tmp_path, KeyedAverage(), savepoint_dir=str(savepoints), **LONG_ENOUGH_FOR_A_CHECKPOINT
    )
    stopped = job.execute(on_epoch=stop_with_savepoint_when(job, after_a_checkpoint))
    assert stopped.savepoint is not None

    def renamed(allow: bool) -> StreamJob:
        other = StreamJob(
            spark,
            name="other",
            checkpoint_dir=str(tmp_path / "ckpt2"),
            parallelism=2,
            restore=stopped.savepoint,
            allow_non_restored_state=allow,
            progress=False,
        )
        other.enable_checkpointing(300)
        events = other.from_source(sources.generator(1000, keys=10), uid="events")
        events.key_by("key").process(
            KeyedAverage(), output_schema="key long, avg long", uid="avg-v2"
        ).sink_to(sinks.collect(), uid="out")
        return other

    with pytest.raises(InvalidArgumentError, match="avg"):
        renamed(False).execute()
    renamed(True).execute()


def test_file_source_with_a_transform_at_least_once(spark: SparkSession, tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    n = 30_000
    for part in range(3):
        start = part * n // 3
        spark.range(start, start + n // 3).selectExpr(
            "(id * 2654435761) % 1000 AS key", "id % 1000 AS value", "id AS seq"
        ).coalesce(1).write.parquet(str(events / f"part-{part:03d}"))
        # The source reads files in name order; each part directory's Parquet file is one file.
    files = tmp_path / "files"
    files.mkdir()
    for part in range(3):
        (written,) = (events / f"part-{part:03d}").glob("*.parquet")
        written.rename(files / f"{part:03d}.parquet")
    job = StreamJob(spark, name="files", checkpoint_dir=str(tmp_path / "ckpt"), parallelism=2)
    job.enable_checkpointing(300, mode="at_least_once")
    sink = sinks.collect()
    (
        job.from_source(sources.parquet_files(str(files), max_files_per_epoch=1), uid="files")
        .transform(lambda df: df.drop("seq"))
        .key_by("key")
        .process(KeyedAverage(), output_schema="key long, avg long", uid="avg")
        .sink_to(sink, uid="out")
    )
    result = job.execute()
    assert result.epochs >= 3, "one epoch per file"
    assert Counter((r["key"], r["avg"]) for r in sink.rows) == expected_pairs(n, 1000)


def test_a_file_source_keeps_the_schema_of_its_first_files(spark: SparkSession, tmp_path: Path) -> None:
    files = tmp_path / "files"
    for name, columns in [("000", "id AS key"), ("001", "id AS key, id AS extra")]:
        spark.range(3).selectExpr(*columns.split(", ")).coalesce(1).write.parquet(str(tmp_path / name))
        (written,) = (tmp_path / name).glob("*.parquet")
        files.mkdir(exist_ok=True)
        written.rename(files / f"{name}.parquet")
    source = sources.parquet_files(str(files))
    first = source.plan(spark, None, 2)
    second = source.plan(spark, first.position, 2)
    assert first.frame is not None and second.frame is not None
    # Inferred once, as Spark's streaming file source fixes its schema at the start.
    assert second.frame.columns == first.frame.columns == ["key"]
    assert sorted(r["key"] for r in second.frame.collect()) == [0, 1, 2]
    assert second.exhausted


def test_a_parquet_source_reads_its_files_with_the_schema_it_is_given(
    spark: SparkSession, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    spark.range(3).selectExpr("id AS key", "id * 2 AS extra").coalesce(1).write.parquet(str(tmp_path / "w"))
    (written,) = (tmp_path / "w").glob("*.parquet")
    files.mkdir()
    written.rename(files / "000.parquet")
    planned = sources.parquet_files(str(files), schema="extra long").plan(spark, None, 2)
    assert planned.frame is not None
    assert planned.frame.columns == ["extra"]
    assert sorted(r["extra"] for r in planned.frame.collect()) == [0, 2, 4]


def test_an_unbounded_file_source_picks_up_files_written_while_it_runs(
    spark: SparkSession, tmp_path: Path
) -> None:
    # The next epoch's input is planned while an epoch runs; a file that appears only
    # after that (here: after epoch 1) must still be read by a later epoch.
    files = tmp_path / "files"
    files.mkdir()

    def write(name: str, key: int, first: int) -> None:
        table = pa.table({"key": [key] * 10, "value": list(range(first, first + 10))})
        pq.write_table(table, files / name)

    write("000.parquet", 1, 0)
    source = sources.parquet_files(
        str(files), schema="key long, value long", max_files_per_epoch=1, bounded=False
    )
    # At least once: each epoch's output is out when it ends, before any checkpoint covers it.
    job, sink = average_into_collect(spark, tmp_path, "unbounded", source, mode="at_least_once")

    def after(progress: EpochProgress) -> None:
        if progress.epochs == 1:
            write("001.parquet", 2, 10)

    result = job.execute(max_epochs=2, on_epoch=after)
    assert result.epochs == 2
    assert sorted((r["key"], r["avg"]) for r in sink.rows) == [(1, 4), (2, 14)]


def test_a_job_lifts_sparks_arrow_byte_limit_for_fixed_width_rows_unless_the_session_sets_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    write_event_files(files, 2, 100, keys=10)
    seen: list[str | None] = []

    def run(name: str, transform: Callable[[DataFrame], DataFrame] | None = None) -> None:
        seen.clear()
        source = sources.parquet_files(str(files), schema="key long, value long")
        job, sink = average_into_collect(spark, tmp_path / name, name, source, transform=transform)
        job.execute(on_epoch=lambda _: seen.append(spark.conf.get(BYTES_PER_BATCH, None)))
        assert Counter((r["key"], r["avg"]) for r in sink.rows) == expected_pairs(200, 10)

    run("lifted")
    assert set(seen) == {NO_BYTE_LIMIT}
    assert spark.conf.get(BYTES_PER_BATCH, None) is None, "the session's default is back"
    # A string column has no fixed width: only the byte limit bounds its batches' memory.
    run("strings", lambda frame: frame.withColumn("tag", F.lit("a string")))
    assert set(seen) == {None}
    # A limit the session sets is the user's choice: it stays, during the job and after.
    spark.conf.set(BYTES_PER_BATCH, "1000000")
    try:
        run("kept")
        assert set(seen) == {"1000000"}
        assert spark.conf.get(BYTES_PER_BATCH, None) == "1000000"
    finally:
        spark.conf.unset(BYTES_PER_BATCH)


def test_a_file_source_sizes_epochs_by_time_and_admits_files_up_to_its_budget(
    spark: SparkSession, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    write_event_files(files, 6, 100)
    size = (files / "000.parquet").stat().st_size
    source = sources.parquet_files(str(files), schema="key long, value long")
    first = source.plan(spark, None, 2)
    assert first.position == {"last_file": "000.parquet"}, "nothing measured yet: one file"
    assert (first.size, first.sized_by_budget) == (size, True)
    # Two files fit the budget; the three after them are more than half of it.
    second = source.plan(spark, first.position, 2, budget=2 * size + size // 2)
    assert second.position == {"last_file": "002.parquet"}
    assert not second.exhausted
    # Two files fit; the last one alone would be a small epoch, so it comes along.
    third = source.plan(spark, second.position, 2, budget=2 * size + size // 2)
    assert third.position == {"last_file": "005.parquet"}
    assert third.exhausted
    assert third.frame is not None and third.frame.count() == 300
    # A budget under one file still admits one.
    assert source.plan(spark, None, 2, budget=1).position == {"last_file": "000.parquet"}
    # Before any epoch ran, the initial count.
    started = sources.parquet_files(str(files), schema="key long, value long", initial_files_per_epoch=4)
    assert started.plan(spark, None, 2).position == {"last_file": "003.parquet"}
    assert started.plan(spark, None, 2, budget=size).position == {"last_file": "000.parquet"}
    # A fixed count ignores the budget.
    fixed = sources.parquet_files(str(files), schema="key long, value long", max_files_per_epoch=2)
    assert fixed.plan(spark, None, 2, budget=100 * size).position == {"last_file": "001.parquet"}
    with pytest.raises(InvalidArgumentError, match="max_files_per_epoch is 0"):
        sources.parquet_files(str(files), max_files_per_epoch=0)
    with pytest.raises(InvalidArgumentError, match="initial_files_per_epoch is 0"):
        sources.json_files(str(files), "key long", initial_files_per_epoch=0)


def test_a_job_sizes_its_epochs_by_time_and_its_output_stays_exact(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Small files run in far less than the 1 s target: the first epoch reads one file,
    # the next ones many, and exactly-once output covers every event once.
    files = tmp_path / "files"
    write_event_files(files, 40, 500)
    source = sources.parquet_files(str(files), schema="key long, value long")
    job, sink = average_into_collect(spark, tmp_path, "sized", source)
    job.epoch_target_ms = 1_000
    positions: list[str] = []
    result = job.execute(on_epoch=lambda progress: positions.append(progress.position["last_file"]))
    assert positions[0] == "000.parquet"
    assert positions[-1] == "039.parquet"
    data_epochs = sorted(set(positions))
    assert len(data_epochs) < 20, f"epochs grew past two files: {data_epochs}"
    assert Counter((r["key"], r["avg"]) for r in sink.rows) == expected_pairs(40 * 500, 1000)
    assert result.checkpoints, "checkpoints every 100 ms still complete"


def test_a_job_with_epochs_sized_by_time_recovers_exactly(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A task fails once part-way through an epoch after the first checkpoint: the job
    # restores the position stored with it and reads on in epochs of whatever size the
    # budget then allows, and every event still counts once. The first checkpoint cuts
    # at epoch 1 or 2 and the epochs grow about fivefold, so 400 files leave epochs to
    # fail in after it.
    files = tmp_path / "files"
    write_event_files(files, 400, 500)
    marker, armed = tmp_path / "failed-once", tmp_path / "armed"
    function = FailingOnce(KeyedAverage(), str(marker), after=1_000, armed_by=str(armed))
    source = sources.parquet_files(str(files), schema="key long, value long")
    job, sink = average_into_collect(spark, tmp_path, "sized-failure", source, function=function)
    job.epoch_target_ms = 1_000  # epochs grow past the task's first 1,000 records

    def arm(progress: EpochProgress) -> None:
        if progress.checkpoints:
            armed.touch()

    result = job.execute(on_epoch=arm)
    assert marker.exists(), "the injected failure happened"
    assert result.restarts == 1
    assert Counter((r["key"], r["avg"]) for r in sink.rows) == expected_pairs(400 * 500, 1000)
    # Progress counts what each epoch read, whole files: not what the failed attempt's
    # finished task had counted as well.
    err = capsys.readouterr().err
    counts = [int(n.replace(",", "")) for n in re.findall(r"epoch \d+: ([\d,]+) records", err)]
    assert len(counts) == result.epochs and all(n % 500 == 0 for n in counts), counts
    total = int(re.findall(r"finished: \d+ epochs, ([\d,]+) records", err)[0].replace(",", ""))
    assert total == sum(counts) >= 400 * 500


def test_checkpoints_aborted_by_timeout_cancel_their_uploads(spark: SparkSession, tmp_path: Path) -> None:
    # Every put waits 4 s and every checkpoint times out after 200 ms: each
    # one is aborted while its subtasks still upload. Canceled uploads write
    # nothing, so no state file ever appears, not even seconds after an abort.
    # (No checkpoint completes, so nothing is published: the job stops after
    # max_epochs with its output staged, its input not yet exhausted.)
    job, _ = keyed_average_job(
        spark,
        tmp_path,
        KeyedAverage(),
        name="avg-timeouts",
        n=600_000,
        rows_per_epoch=10_000,
        checkpoint_storage_options={"put_delay_ms": "4000"},
        state_backend="rocksdb",
    )
    job.set_checkpoint_config(CheckpointConfig(interval_ms=300, timeout_ms=200, tolerable_failures=1000))
    job_dir = tmp_path / "ckpt" / "avg-timeouts"
    started = time.monotonic()
    seen: list[list[str]] = []

    def state_files() -> list[str]:
        return sorted(
            str(p.relative_to(job_dir))
            for p in job_dir.rglob("*")
            if p.is_file() and (p.relative_to(job_dir).parts[0].startswith("chk-") or "shared" in p.parts)
        )

    def settled_files() -> list[str]:
        # The newest checkpoint may be uploading right now (its tasks take barriers inside
        # their Spark jobs, and its abort comes 200 ms after its trigger): only one is in
        # flight at a time, and every older one has been aborted.
        files = state_files()
        newest = max(
            (int(f.split("/")[0].removeprefix("chk-")) for f in files if f.startswith("chk-")), default=0
        )
        return [f for f in files if not f.startswith(f"chk-{newest}/")]

    def look(progress: EpochProgress) -> None:
        # Once the first aborted checkpoint's puts would have finished (4 s
        # after its trigger), look twice, 4.5 s apart: any upload that
        # survived its abort has landed by then.
        if len(seen) < 2 and time.monotonic() - started > 5:
            time.sleep(4.5 if seen else 0)
            seen.append(settled_files())

    result = job.execute(on_epoch=look, max_epochs=40)
    assert len(seen) == 2, "the job ran long enough to look"
    assert seen == [[], []], seen
    assert result.checkpoints == [], "every checkpoint timed out"
    assert result.stats["counts"]["failed"] >= 2, result.stats["counts"]
    assert state_files() == []


@pytest.mark.parametrize("cleanup", ["retain_on_cancellation", "delete_on_cancellation"])
def test_an_interrupted_job_is_cancelled_and_cleans_up_as_configured(
    spark: SparkSession, tmp_path: Path, cleanup: str
) -> None:
    job, _ = keyed_average_job(
        spark, tmp_path, KeyedAverage(), name="avg-cancel", **LONG_ENOUGH_FOR_A_CHECKPOINT
    )
    job.set_checkpoint_config(CheckpointConfig(interval_ms=300, externalized_cleanup=cleanup))
    job_dir = tmp_path / "ckpt" / "avg-cancel"

    def interrupt(progress: EpochProgress) -> None:
        if progress.checkpoints:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        job.execute(on_epoch=interrupt)
    kept = sorted(p.name for p in job_dir.glob("chk-*") if (p / "_metadata").exists())
    assert (kept != []) == (cleanup == "retain_on_cancellation"), kept
