"""Route every row of subtask ``s`` into Spark partition ``s``.

``DataFrame.repartition(P, expr)`` puts a row into partition
``pmod(hash(expr), P)``, hashing the expression's value with Spark's Murmur3.
So the expression is a routing value ``r_s`` chosen so that
``pmod(hash(r_s), P) == s`` (the smallest non-negative such long, found with
Weir's implementation of Spark's ``hash``, which is tested against Spark
itself). The exchange evaluates it per row without storing it: rows cross the
shuffle and reach Python with the step's own columns only, each extra column
costing the JVM about a tenth of an epoch. Every task still checks that its
rows belong to its partition.
"""

from __future__ import annotations

from functools import cache

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from weir import _internal


@cache
def routing_values(parallelism: int) -> tuple[int, ...]:
    """The smallest long ``r_s`` with ``pmod(hash(r_s), parallelism) == s``, per subtask ``s``.

    Examples:
        >>> len(routing_values(3))
        3
    """
    if parallelism < 1:
        raise ValueError(f"parallelism must be at least 1, got {parallelism}")
    found: dict[int, int] = {}
    candidate = 0
    while len(found) < parallelism:
        partition = _internal.spark_hash([candidate], ["long"]) % parallelism
        found.setdefault(partition, candidate)
        candidate += 1
    return tuple(found[s] for s in range(parallelism))


def key_group_column(key_columns: list[str], max_parallelism: int) -> Column:
    """``pmod(hash(keys...), max_parallelism)``, computed in the JVM."""
    return F.pmod(F.hash(*[F.col(c) for c in key_columns]), F.lit(max_parallelism))


def subtask_column(key_group: Column, parallelism: int, max_parallelism: int) -> Column:
    """Flink's contiguous assignment: ``key_group * parallelism // max_parallelism``."""
    return F.floor(key_group * F.lit(parallelism) / F.lit(max_parallelism)).cast("int")


def routing_column(subtask: Column, parallelism: int) -> Column:
    """The routing value of each row's subtask (see the module docs)."""
    values = F.array(*[F.lit(v).cast("long") for v in routing_values(parallelism)])
    return F.element_at(values, subtask + F.lit(1))


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
