"""Route every row of subtask ``s`` into Spark partition ``s``.

``DataFrame.repartition(P, col)`` puts a row into partition
``pmod(hash(col), P)``, hashing the column again with Spark's Murmur3. So each
row carries a routing value ``r_s`` chosen so that ``pmod(hash(r_s), P) == s``
(the smallest non-negative such long, found with Weir's implementation of
Spark's ``hash``, which is tested against Spark itself). Every task still
checks that its rows belong to its partition.
"""

from __future__ import annotations

from functools import cache

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
