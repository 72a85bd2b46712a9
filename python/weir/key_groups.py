"""Key groups: the unit in which Weir partitions, snapshots and redistributes keyed state.

A key's key group is ``pmod(hash(key columns), max_parallelism)``, where ``hash``
is Spark's own SQL ``hash`` function, so a key lands in the same key group
whether Spark, the local test harness or the ``weir`` tool computes it.
``max_parallelism`` (default 128) is fixed for the life of the state. Subtask
``i`` of ``parallelism`` owns one contiguous range of key groups, exactly as in
Flink, so restoring at another parallelism reads whole key groups.

Examples:
    >>> from weir.key_groups import key_group_of, key_group_range, subtask_of
    >>> kg = key_group_of("user-17", types="string")
    >>> owner = subtask_of(kg, max_parallelism=128, parallelism=4)
    >>> kg in key_group_range(128, 4, owner)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from weir import _internal
from weir.exceptions import InvalidArgumentError

__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "ColumnType",
    "KeyGroupRange",
    "key_group_of",
    "key_group_range",
    "subtask_of",
]

ColumnType: TypeAlias = Literal["int", "long", "string", "binary", "double", "boolean"]
"""Spark SQL type of a key column; it decides how Spark hashes the value."""

DEFAULT_MAX_PARALLELISM = 128
"""The number of key groups when a job does not choose one (Flink's default for small jobs)."""


@dataclass(frozen=True)
class KeyGroupRange:
    """The contiguous key groups ``start <= key_group < end`` that one subtask owns.

    Attributes:
        start: First key group of the range.
        end: One past the last key group; equal to ``start`` for an empty range.

    Raises:
        InvalidArgumentError: If ``start`` is negative or lies after ``end``.

    Examples:
        >>> r = KeyGroupRange(43, 86)
        >>> len(r), 43 in r, 86 in r
        (43, True, False)
        >>> list(range(r.start, r.end))[:3]
        [43, 44, 45]
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise InvalidArgumentError(
                f"key-group range start {self.start} must lie in 0..=end {self.end}: "
                "build ranges with key_group_range()"
            )

    def __contains__(self, key_group: object) -> bool:
        """Whether ``key_group`` lies in the range.

        Examples:
            >>> 0 in KeyGroupRange(0, 43), 43 in KeyGroupRange(0, 43), "0" in KeyGroupRange(0, 43)
            (True, False, False)
        """
        return isinstance(key_group, int) and self.start <= key_group < self.end

    def __len__(self) -> int:
        """The number of key groups in the range.

        Examples:
            >>> len(KeyGroupRange(86, 128)), len(KeyGroupRange(5, 5))
            (42, 0)
        """
        return self.end - self.start


def key_group_range(max_parallelism: int, parallelism: int, subtask: int) -> KeyGroupRange:
    """The key groups that ``subtask`` owns when an operator runs at ``parallelism``.

    The ranges of subtasks ``0 .. parallelism - 1`` are contiguous, in order and
    together cover ``0 .. max_parallelism - 1`` (Flink's assignment).

    Args:
        max_parallelism: Number of key groups, 1 to 32768.
        parallelism: Number of subtasks, 1 to ``max_parallelism``.
        subtask: Index of the subtask, 0 to ``parallelism - 1``.

    Returns:
        The subtask's range.

    Raises:
        InvalidArgumentError: If an argument is out of range (also a ``ValueError``).

    Examples:
        >>> [key_group_range(128, 3, i) for i in range(3)]  # doctest: +NORMALIZE_WHITESPACE
        [KeyGroupRange(start=0, end=43), KeyGroupRange(start=43, end=86),
         KeyGroupRange(start=86, end=128)]
    """
    start, end = _internal.key_group_range(max_parallelism, parallelism, subtask)
    return KeyGroupRange(start, end)


def key_group_of(
    *columns: object,
    types: ColumnType | Sequence[ColumnType],
    max_parallelism: int = DEFAULT_MAX_PARALLELISM,
) -> int:
    """The key group of a key made of one or more column values.

    Equal to Spark SQL's ``pmod(hash(col1, col2, ...), max_parallelism)`` over
    columns of the given Spark types. The type matters: ``hash(1)`` over an
    ``int`` column differs from ``hash(1L)`` over a ``long`` column.

    Args:
        *columns: The key's column values in key order: ``int`` for int and long,
            ``str`` for string, ``bytes`` or ``bytearray`` for binary, ``float``
            for double, ``bool`` for boolean; ``None`` is SQL null.
        types: The Spark type of each column, one per value; a single type name
            is accepted for a one-column key.
        max_parallelism: Number of key groups of the state, 1 to 32768.

    Returns:
        The key group, ``0 <= key_group < max_parallelism``.

    Raises:
        InvalidArgumentError: If the values do not match ``types``, a type name is
            unknown, no column is given or ``max_parallelism`` is out of range.

    Examples:
        >>> key_group_of(1, types="int")  # Spark: pmod(hash(1), 128)
        99
        >>> key_group_of(1, types="long")  # Spark: pmod(hash(1L), 128)
        29
        >>> key_group_of(7, "eu", types=["long", "string"], max_parallelism=4096) < 4096
        True
    """
    type_names = [types] if isinstance(types, str) else list(types)
    spark_hash = _internal.spark_hash(list(columns), type_names)
    return _internal.key_group_for_hash(spark_hash, max_parallelism)


def subtask_of(key_group: int, *, max_parallelism: int, parallelism: int) -> int:
    """The subtask that owns ``key_group`` when an operator runs at ``parallelism``.

    Args:
        key_group: A key group, 0 to ``max_parallelism - 1``.
        max_parallelism: Number of key groups, 1 to 32768.
        parallelism: Number of subtasks, 1 to ``max_parallelism``.

    Returns:
        The subtask index, ``key_group * parallelism // max_parallelism``.

    Raises:
        InvalidArgumentError: If an argument is out of range (also a ``ValueError``).

    Examples:
        >>> [subtask_of(kg, max_parallelism=128, parallelism=3) for kg in (0, 42, 43, 127)]
        [0, 0, 1, 2]
    """
    return _internal.subtask_for_key_group(max_parallelism, parallelism, key_group)
