"""weir.key_group_of agrees with Spark SQL's ``pmod(hash(cols), max_parallelism)`` on every row."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

import weir
from weir.key_groups import ColumnType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

ROWS = 3000
MAX_PARALLELISMS = (1, 7, 128, 32768)


def random_long(rng: random.Random) -> int | None:
    return rng.choice(
        [None, 0, -1, 2**63 - 1, -(2**63), rng.randint(-1000, 1000), rng.getrandbits(64) - 2**63]
    )


def random_string(rng: random.Random) -> str | None:
    if rng.random() < 0.02:
        return None
    # Mostly multi-byte characters and every length mod 4, for hashUnsafeBytes' tail bytes.
    alphabet = ["a", "Z", "é", "ß", "日", "本", "€", "\U0001f600", " "]
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 13)))


def random_binary(rng: random.Random) -> bytes | None:
    if rng.random() < 0.02:
        return None
    return rng.randbytes(rng.randint(0, 19))


SPARK_DDL = {"long": "BIGINT", "string": "STRING", "binary": "BINARY"}


def compare(spark: SparkSession, rows: list[tuple[object, ...]], types: list[ColumnType]) -> None:
    """Checks every row's key group against Spark's for each max parallelism."""
    columns = [f"k{i}" for i in range(len(types))]
    schema = "id INT, " + ", ".join(f"{c} {SPARK_DDL[t]}" for c, t in zip(columns, types, strict=True))
    frame = spark.createDataFrame([(i, *row) for i, row in enumerate(rows)], schema)
    hashed = ", ".join(columns)
    result = frame.selectExpr(
        "id", *(f"pmod(hash({hashed}), {m}) AS kg{m}" for m in MAX_PARALLELISMS)
    ).collect()
    assert len(result) == len(rows)
    # Guards against a degenerate comparison (e.g. every key null).
    assert len({r["kg128"] for r in result}) > 100
    mismatches = []
    for spark_row in result:
        key = rows[spark_row["id"]]
        for m in MAX_PARALLELISMS:
            ours = weir.key_group_of(*key, types=types, max_parallelism=m)
            if ours != spark_row[f"kg{m}"]:
                mismatches.append((key, m, spark_row[f"kg{m}"], ours))
    assert not mismatches, f"{len(mismatches)} rows differ from Spark, first: {mismatches[:3]}"


def test_long_keys(spark: SparkSession) -> None:
    rng = random.Random(1)
    compare(spark, [(random_long(rng),) for _ in range(ROWS)], ["long"])


def test_string_keys(spark: SparkSession) -> None:
    rng = random.Random(2)
    compare(spark, [(random_string(rng),) for _ in range(ROWS)], ["string"])


def test_binary_keys(spark: SparkSession) -> None:
    rng = random.Random(3)
    compare(spark, [(random_binary(rng),) for _ in range(ROWS)], ["binary"])


def test_long_and_string_composite_keys(spark: SparkSession) -> None:
    rng = random.Random(4)
    rows = [(random_long(rng), random_string(rng)) for _ in range(ROWS)]
    compare(spark, rows, ["long", "string"])
