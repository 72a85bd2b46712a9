"""Rows reach the Spark partition of their subtask: key group by key group for a keyed step
(key groups computed in the JVM or shipped with the rows), by a hash of the row otherwise."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.sql import functions as F

from weir.key_groups import key_group_of, subtask_of
from weir.spark.epoch_plan import _StepRoute, learn_input
from weir.spark.graph import StatefulStep
from weir.spark.tasks import KEY_GROUP

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

ROWS = 2000


def step(key_columns: tuple[str, ...] | None, parallelism: int, max_parallelism: int) -> StatefulStep:
    return StatefulStep(
        uid="routed",
        function=None,
        output_schema=None,  # type: ignore[arg-type]
        key_columns=key_columns,
        parallelism=parallelism,
        max_parallelism=max_parallelism,
    )


def routed(spark: SparkSession, frame: DataFrame, routed_step: StatefulStep) -> list[Any]:
    """Every routed row with the partition it landed in (column ``partition``)."""
    rows = _StepRoute(spark, routed_step).rows(frame, learn_input(routed_step, frame))
    assert rows.rdd.getNumPartitions() == routed_step.parallelism
    return rows.withColumn("partition", F.spark_partition_id()).collect()


@pytest.mark.parametrize(("parallelism", "max_parallelism"), [(2, 128), (3, 7), (5, 32768), (7, 7)])
def test_rows_of_long_keys_reach_their_subtasks_partition(
    spark: SparkSession, parallelism: int, max_parallelism: int
) -> None:
    rng = random.Random(parallelism)
    keys = [rng.getrandbits(64) - 2**63 for _ in range(ROWS)]
    frame = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "id INT, key BIGINT")
    result = routed(spark, frame, step(("key",), parallelism, max_parallelism))
    assert sorted(r["id"] for r in result) == list(range(ROWS))
    for row in result:
        group = key_group_of(row["key"], types="long", max_parallelism=max_parallelism)
        assert row["partition"] == subtask_of(group, max_parallelism=max_parallelism, parallelism=parallelism)
    assert {r["partition"] for r in result} == set(range(parallelism))


def test_rows_of_composite_keys_reach_their_subtasks_partition(spark: SparkSession) -> None:
    rng = random.Random(11)
    rows = [
        (i, rng.choice(["eu", "us", "日本", ""]) + str(rng.randint(0, 500)), rng.randint(-9, 9))
        for i in range(ROWS)
    ]
    frame = spark.createDataFrame(rows, "id INT, region STRING, day INT")
    result = routed(spark, frame, step(("region", "day"), 4, 4096))
    for row in result:
        group = key_group_of(row["region"], row["day"], types=["string", "int"], max_parallelism=4096)
        assert row["partition"] == subtask_of(group, max_parallelism=4096, parallelism=4)


def test_rows_whose_key_groups_travel_with_them_reach_their_subtasks_partition(spark: SparkSession) -> None:
    # Float keys: Weir does not reproduce Spark's hash of a float, so the JVM's key groups
    # travel with the rows.
    rng = random.Random(5)
    frame = spark.createDataFrame([(i, rng.uniform(-1e6, 1e6)) for i in range(ROWS)], "id INT, key FLOAT")
    result = routed(spark, frame, step(("key",), 3, 128))
    expected = {
        r["id"]: r["kg"] for r in frame.select("id", F.pmod(F.hash("key"), F.lit(128)).alias("kg")).collect()
    }
    assert len(result) == ROWS
    for row in result:
        assert row[KEY_GROUP] == expected[row["id"]]
        assert row["partition"] == subtask_of(row[KEY_GROUP], max_parallelism=128, parallelism=3)


def test_rows_of_a_stream_without_keys_spread_by_their_hash(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(i, f"v{i % 13}") for i in range(ROWS)], "id INT, value STRING")
    unkeyed = step(None, 3, 3)
    first, again = routed(spark, frame, unkeyed), routed(spark, frame, unkeyed)
    expected = {
        r["id"]: r["p"]
        for r in frame.select("id", F.pmod(F.hash("id", "value"), F.lit(3)).alias("p")).collect()
    }
    assert {r["id"]: r["partition"] for r in first} == expected
    assert {r["id"]: r["partition"] for r in again} == expected
    assert set(expected.values()) == {0, 1, 2}
