"""Route every row of subtask ``s`` into Spark partition ``s``.

The shuffle in front of a stateful step is ``DataFrame.repartitionById``: the
partitioning expression is the row's subtask itself, so Spark puts the row
into that partition without hashing it again. The exchange evaluates the
expression per row without storing it: rows cross the shuffle and reach Python
with the step's own columns only, each extra column costing the JVM about a
tenth of an epoch. Every task still checks that its rows belong to its
partition.
"""

from __future__ import annotations

import re

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from weir.exceptions import InvalidArgumentError

OLDEST_PYSPARK = (4, 1)
"""The first PySpark with ``DataFrame.repartitionById``."""


def check_pyspark(version: str) -> None:
    """Refuses a PySpark older than :data:`OLDEST_PYSPARK`.

    Examples:
        >>> check_pyspark("4.3.0")
        >>> check_pyspark("4.0.1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        weir.exceptions.InvalidArgumentError: Weir's jobs need PySpark 4.1 or later ..., this is 4.0.1: ...
    """
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if release < OLDEST_PYSPARK:
        raise InvalidArgumentError(
            f"Weir's jobs need PySpark 4.1 or later (DataFrame.repartitionById routes rows to their "
            f"subtasks), this is {version}: install pyspark>=4.1, matching the cluster's Spark"
        )


def key_group_column(key_columns: list[str], max_parallelism: int) -> Column:
    """``pmod(hash(keys...), max_parallelism)``, computed in the JVM (an int column)."""
    return F.pmod(F.hash(*[F.col(c) for c in key_columns]), F.lit(max_parallelism))


def subtask_column(key_group: Column, parallelism: int, max_parallelism: int) -> Column:
    """Flink's contiguous assignment: ``key_group * parallelism div max_parallelism``
    (``key_group`` an int column: the product stays below 2^31 for at most 32,768 key
    groups)."""
    product = key_group * F.lit(parallelism)
    return F.call_function("div", product, F.lit(max_parallelism)).cast("int")


def spread_column(columns: list[str], parallelism: int) -> Column:
    """The subtask of a row of a stream without keys: the same row always gets the same one."""
    return F.pmod(F.hash(*[F.col(c) for c in columns]), F.lit(parallelism))


_TASK_HASHED_TYPES = (
    pa.types.is_boolean,
    pa.types.is_int32,
    pa.types.is_int64,
    pa.types.is_float64,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
)


def hashed_in_task(key_schema: pa.Schema) -> bool:
    """Whether a task computes its rows' key groups itself: Weir's hash matches Spark's
    (checked against Spark) for boolean, int, long, double, string and binary columns.
    For other key types the JVM's key groups travel with the rows.

    Examples:
        >>> hashed_in_task(pa.schema([("user", pa.string()), ("day", pa.int32())]))
        True
        >>> hashed_in_task(pa.schema([("at", pa.timestamp("us"))]))
        False
    """
    return all(any(check(field.type) for check in _TASK_HASHED_TYPES) for field in key_schema)
