"""weir.key_groups: Flink's key-group ranges and Spark's hash, through the native module."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import weir
from weir import _internal
from weir.exceptions import InvalidArgumentError, WeirError
from weir.key_groups import KeyGroupRange, key_group_of, key_group_range, subtask_of

SPARK_VECTORS = Path(__file__).parents[2] / "crates/weir-types/tests/data/spark_hash_vectors.json"


def vector_value(column: dict[str, object]) -> object:
    """A value of ci/gen_spark_hash_vectors.py's JSON as the Python object Spark was given."""
    value = column["value"]
    if value is None:
        return None
    if column["type"] == "binary":
        assert isinstance(value, str)
        return bytes.fromhex(value)
    if column["type"] == "double":
        assert isinstance(value, (str, float, int))
        return float(value)
    return value


def test_ranges_of_128_over_3_subtasks_match_flink() -> None:
    ranges = [key_group_range(128, 3, i) for i in range(3)]
    assert ranges == [KeyGroupRange(0, 43), KeyGroupRange(43, 86), KeyGroupRange(86, 128)]
    assert [len(r) for r in ranges] == [43, 43, 42]


@pytest.mark.parametrize(
    ("max_parallelism", "parallelism"), [(1, 1), (128, 1), (128, 7), (128, 128), (4096, 100)]
)
def test_ranges_cover_key_groups_in_order_and_agree_with_subtask_of(
    max_parallelism: int, parallelism: int
) -> None:
    next_start = 0
    for subtask in range(parallelism):
        r = key_group_range(max_parallelism, parallelism, subtask)
        assert r.start == next_start
        assert len(r) > 0
        for kg in range(r.start, r.end):
            assert subtask_of(kg, max_parallelism=max_parallelism, parallelism=parallelism) == subtask
        next_start = r.end
    assert next_start == max_parallelism


def test_key_group_range_is_a_frozen_container() -> None:
    r = KeyGroupRange(43, 86)
    assert 43 in r and 85 in r
    assert 42 not in r and 86 not in r and "43" not in r
    assert len(KeyGroupRange(7, 7)) == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.start = 0  # type: ignore[misc]
    assert hash(r) == hash(KeyGroupRange(43, 86))


@pytest.mark.parametrize(("start", "end"), [(5, 4), (-1, 3)])
def test_key_group_range_rejects_reversed_or_negative_bounds(start: int, end: int) -> None:
    with pytest.raises(InvalidArgumentError, match="key_group_range"):
        KeyGroupRange(start, end)


def test_native_hash_matches_every_pyspark_vector() -> None:
    vectors = json.loads(SPARK_VECTORS.read_text(encoding="utf-8"))
    assert len(vectors) > 200
    for vector in vectors:
        values = [vector_value(c) for c in vector["columns"]]
        types = [c["type"] for c in vector["columns"]]
        assert _internal.spark_hash(values, types) == vector["hash"], vector
        assert key_group_of(*values, types=types) == vector["hash"] % 128, vector


def test_known_spark_hashes_pick_known_key_groups() -> None:
    # Spark: hash(1) = -559580957, hash(1L) = -1712319331.
    assert key_group_of(1, types="int") == -559580957 % 128 == 99
    assert key_group_of(1, types="long") == -1712319331 % 128 == 29
    assert key_group_of(1, types="long", max_parallelism=1) == 0
    assert key_group_of(1, types="long", max_parallelism=32768) == -1712319331 % 32768


def test_key_group_for_hash_is_pmod() -> None:
    assert _internal.key_group_for_hash(-1, 128) == 127
    assert _internal.key_group_for_hash(-(2**31), 128) == 0
    assert _internal.key_group_for_hash(2**31 - 1, 1000) == (2**31 - 1) % 1000


def test_null_columns_leave_the_hash_unchanged() -> None:
    assert key_group_of(None, 5, types=["string", "int"]) == key_group_of(5, types=["int"])
    assert _internal.spark_hash([None], ["long"]) == 42


def test_binary_accepts_bytes_and_bytearray_alike() -> None:
    assert key_group_of(bytearray(b"\x80key"), types="binary") == key_group_of(b"\x80key", types="binary")


def test_double_normalizes_zero_and_nan_like_spark() -> None:
    assert key_group_of(-0.0, types="double") == key_group_of(0.0, types="double")
    assert key_group_of(math.nan, types="double") == key_group_of(float("nan"), types="double")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: key_group_range(0, 1, 0), "max parallelism must be between 1 and 32768, got 0"),
        (lambda: key_group_range(32769, 1, 0), "max parallelism must be between 1 and 32768"),
        (lambda: key_group_range(-1, 1, 0), "max_parallelism must be an integer in 0..=4294967295, got -1"),
        (
            lambda: key_group_range(128, 0, 0),
            "parallelism must be between 1 and the max parallelism 128, got 0",
        ),
        (lambda: key_group_range(4, 5, 0), "parallelism must be between 1 and the max parallelism 4, got 5"),
        (lambda: key_group_range(128, 3, 3), "subtask index 3 is out of range for parallelism 3"),
        (lambda: key_group_range(128, 3, -1), "subtask must be an integer in 0..=4294967295, got -1"),
        (lambda: subtask_of(128, max_parallelism=128, parallelism=2), "key group 128 is out of range"),
        (lambda: subtask_of(70000, max_parallelism=128, parallelism=2), "key group 70000 is out of range"),
        (lambda: subtask_of(-3, max_parallelism=128, parallelism=2), "key_group must be an integer in 0"),
        (lambda: key_group_of(types=[]), "a key needs at least one column: pass one or more key values"),
        (
            lambda: key_group_of(1, 2, types="long"),
            "got 2 key values but 1 column types: pass exactly one type",
        ),
        (
            lambda: key_group_of(1, types="bigint"),
            'key column type "bigint" is unknown: use int, long,',
        ),
        (lambda: key_group_of("7", types="long"), "key column 0 is declared long but holds '7': pass an int"),
        (lambda: key_group_of(True, types="int"), "key column 0 is declared int but holds True: pass an int"),
        (lambda: key_group_of(2**31, types="int"), "pass an int in the signed 32-bit range"),
        (lambda: key_group_of(2**63, types="long"), "pass an int in the signed 64-bit range"),
        (
            lambda: key_group_of(1, "x", types=["long", "binary"]),
            "key column 1 is declared binary but holds 'x'",
        ),
        (
            lambda: key_group_of(1, types="boolean"),
            "key column 0 is declared boolean but holds 1: pass a bool",
        ),
        (lambda: key_group_of(b"k", types="string"), "declared string but holds b'k': pass a str"),
        (
            lambda: key_group_of(1, types="long", max_parallelism=0),
            "max parallelism must be between 1 and 32768",
        ),
        (
            lambda: _internal.key_group_for_hash(2**31, 128),
            "hash must be an integer in -2147483648..=2147483647",
        ),
    ],
)
def test_invalid_arguments_raise_a_weir_value_error_that_says_the_fix(
    call: Callable[[], object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as caught:
        call()
    assert isinstance(caught.value, WeirError)
    assert isinstance(caught.value, ValueError)


def test_long_reprs_are_cut_in_error_messages() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        key_group_of("x" * 1000, types="long")
    assert len(str(caught.value)) < 200


def test_package_exports_the_key_group_api() -> None:
    assert weir.key_group_of is key_group_of
    assert weir.key_group_range is key_group_range
    assert weir.subtask_of is subtask_of
    assert weir.KeyGroupRange is KeyGroupRange
