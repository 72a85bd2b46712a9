"""The local SparkSession every variant runs in, and helpers shared by the Spark peers."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.keyed_average.measure import Outcome, cpu_use

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    from benchmarks.keyed_average.registry import RunContext

#: Parallelism 2 on this 2-core machine (docs/benchmarks.md).
PARALLELISM = 2
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

BASE_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": str(PARALLELISM),
    "spark.default.parallelism": str(PARALLELISM),
    "spark.driver.memory": "2g",
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # What a Weir job with fixed-width rows sets for itself (docs/deploy.md): without it
    # Spark 4 measures every Arrow batch after each row. Set for every variant, so the
    # peers and ceilings run as well tuned.
    "spark.sql.execution.arrow.maxBytesPerBatch": "2147483647",
    # Keep every micro-batch's progress so checkpoints and commit times can be counted.
    "spark.sql.streaming.numRecentProgressUpdates": "10000",
    "spark.sql.streaming.stateStore.providerClass": HDFS_PROVIDER,
}


LOCAL_CLUSTER_CONF: Mapping[str, str] = {
    # Two executor JVMs of one core each: the same parallelism as local[2], but every
    # executor has its own state host and a task may land away from its state.
    "spark.master": f"local-cluster[{PARALLELISM},1,1024]",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
}
"""Extra conf of the ``local-cluster`` variants (``spark.master`` overrides ``local[2]``)."""


def build_session(name: str, extra_conf: Mapping[str, str], scratch: Path) -> SparkSession:
    """A ``local[2]`` SparkSession with the benchmark's conf plus ``extra_conf``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(f"local[{PARALLELISM}]").appName(f"weir-bench-{name}")
    conf = {**BASE_CONF, "spark.local.dir": str(scratch / "spark-local"), **extra_conf}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def read_events_stream(ctx: RunContext) -> DataFrame:
    """The generated files as a streaming DataFrame, ``files_per_trigger`` files per micro-batch."""
    from benchmarks.keyed_average.workload import EVENT_DDL

    return (
        ctx.spark.readStream.schema(EVENT_DDL)
        .option("maxFilesPerTrigger", ctx.params.files_per_trigger)
        .parquet(str(ctx.events_dir))
    )


def read_back(ctx: RunContext, column: str) -> tuple[int, int]:
    """(row count, sum of ``column``) of what the sink wrote, read back with a batch query."""
    from pyspark.sql import functions as F

    row = ctx.spark.read.parquet(str(ctx.output_dir)).agg(F.count("*"), F.sum(column)).first()
    assert row is not None
    return int(row[0]), int(row[1] or 0)


def _state_commit_ms(progress: StreamingQueryProgress) -> float:
    """Time a micro-batch spent committing state (synchronous in Spark: inside the tasks)."""
    return float(sum(op.commitTimeMs for op in progress.stateOperators))


def run_streaming(ctx: RunContext, output: DataFrame, state_provider: str) -> Outcome:
    """Run ``output`` to a Parquet sink with checkpointing until the input is consumed
    (``availableNow``), then read the output back.

    Every Spark micro-batch commits its offsets and state: one checkpoint per batch.
    """
    for stale in (ctx.output_dir, ctx.work_dir / "checkpoint"):
        shutil.rmtree(stale, ignore_errors=True)
    ctx.spark.conf.set("spark.sql.streaming.stateStore.providerClass", state_provider)
    writer = (
        output.writeStream.format("parquet")
        .option("path", str(ctx.output_dir))
        .option("checkpointLocation", ctx.checkpoint_uri)
        .outputMode("append")
        .trigger(availableNow=True)
    )
    with cpu_use() as cpu:
        start = time.perf_counter()
        query = writer.start()
        query.awaitTermination()
        wall = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    count, checksum = read_back(ctx, "avg")
    commits = ctx.work_dir / "checkpoint" / "commits"
    checkpoints = sum(1 for f in commits.iterdir() if f.name.isdigit()) if commits.exists() else None
    return Outcome(
        wall_s=wall,
        count=count,
        checksum=checksum,
        checkpoints=checkpoints,
        checkpoint_sync_ms=[_state_commit_ms(p) for p in progress],
        extra={
            "micro_batches": len(progress),
            "state_provider": state_provider.rsplit(".", 1)[-1],
            "batch_duration_ms": [p.batchDuration for p in progress],
            "cpu_s": cpu.seconds,
        },
    )
