"""The Parquet sink's files as its tasks write them: one file per partition of the epoch's
job, read back by Spark as the epoch's rows, an empty epoch included."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from weir.spark.sinks import ParquetFilesSink


def test_each_task_writes_its_partition_and_an_epoch_is_published_whole(
    spark: SparkSession, tmp_path: Path
) -> None:
    sink = ParquetFilesSink(str(tmp_path))
    rows = spark.range(0, 1000, numPartitions=3).selectExpr("id as key", "cast(id % 7 as double) as avg")
    sink.write_epoch(rows, 1)
    staged = tmp_path / "_staging" / "epoch=1"
    assert sorted(p.name for p in staged.iterdir()) == [f"part-{i:05d}.parquet" for i in range(3)]
    # Written again (a run of the epoch that failed part-way): replaced, not added to.
    sink.write_epoch(rows.repartition(2), 1)
    assert sorted(p.name for p in staged.iterdir()) == [f"part-{i:05d}.parquet" for i in range(2)]
    assert not list(tmp_path.glob("epoch=*")), "staged output is not published"
    sink.write_epoch(rows.where("key < 0"), 2)
    sink.publish_up_to(2)

    published = spark.read.parquet(str(tmp_path))
    assert published.schema.simpleString() == "struct<key:bigint,avg:double,epoch:int>"
    assert published.where("epoch = 1").count() == 1000
    assert published.selectExpr("sum(key)").first()[0] == sum(range(1000))
    assert spark.read.parquet(str(tmp_path / "epoch=2")).count() == 0
