"""Keys from key selectors get Spark's key groups: Python ints hash as Spark's LongType."""

from __future__ import annotations

from typing import Any

import pytest

from weir import _internal, key_group_of


@pytest.mark.parametrize(
    ("key", "columns", "types"),
    [
        (1, (1,), ["long"]),
        (-(2**63), (-(2**63),), ["long"]),
        ("user-17", ("user-17",), ["string"]),
        (b"\x00\xff", (b"\x00\xff",), ["binary"]),
        (True, (True,), ["boolean"]),
        (2.5, (2.5,), ["double"]),
        ((7, "eu"), (7, "eu"), ["long", "string"]),
    ],
)
def test_inferred_key_groups_equal_spark_hash_of_the_typed_columns(
    key: Any, columns: tuple[Any, ...], types: list[str]
) -> None:
    for max_parallelism in (1, 128, 4096):
        expected = key_group_of(*columns, types=types, max_parallelism=max_parallelism)  # type: ignore[arg-type]
        assert _internal.key_groups_of([key], max_parallelism) == [expected]


def test_keys_that_cannot_be_keys_are_refused() -> None:
    from weir.exceptions import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="may not be None"):
        _internal.key_groups_of([None], 128)
    with pytest.raises(InvalidArgumentError, match="an empty tuple has no key columns"):
        _internal.key_groups_of([()], 128)
    with pytest.raises(InvalidArgumentError, match="must fit in 64 bits"):
        _internal.key_groups_of([2**64], 128)
