"""Values and keys take a direct path between Python objects and their encoding for
the common shapes (exact ints, floats, str, bytes, tuples, lists) and the general
path otherwise (a dict for a struct, int subclasses, bytearray, a list for a
struct): both must store the same bytes, and read back the same objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from weir import Types, ValueStateDescriptor, _internal
from weir.exceptions import StateError
from weir.key_groups import key_group_of


class Count(int):
    """An int subclass: takes the general path."""


ROW = Types.ROW_NAMED(["count", "sum"], [Types.LONG(), Types.LONG()])
NESTED = pa.struct(
    [
        pa.field("flag", pa.bool_(), nullable=False),
        ("ratio", pa.float32()),
        ("names", pa.list_(pa.string())),
    ]
)

CASES: list[tuple[pa.DataType, Any, Any, Any]] = [
    # (type, direct form, general form, what reading either gives)
    (Types.LONG(), 7, Count(7), 7),
    (Types.INT(), -3, Count(-3), -3),
    (Types.DOUBLE(), 2.5, 2.5, 2.5),
    (Types.DOUBLE(), 7, Count(7), 7.0),
    (Types.STRING(), "héllo", "héllo", "héllo"),
    (Types.PRIMITIVE_ARRAY(Types.BYTE()), b"\x00\xff", bytearray(b"\x00\xff"), b"\x00\xff"),
    (Types.BOOLEAN(), True, True, True),
    (ROW, (3, 40), {"count": 3, "sum": 40}, (3, 40)),
    (ROW, (3, 40), [3, 40], (3, 40)),
    (Types.TUPLE([Types.LONG(), Types.STRING()]), (1, None), [1, None], (1, None)),
    (Types.LIST(Types.STRING()), ["a", None, "b"], ("a", None, "b"), ["a", None, "b"]),
    (
        NESTED,
        (True, 0.5, ["x", None]),
        {"flag": True, "ratio": 0.5, "names": ("x", None)},
        (True, 0.5, ["x", None]),
    ),
    (NESTED, (False, None, None), {"flag": False, "ratio": None, "names": None}, (False, None, None)),
]


def session(tmp_path: Path) -> Any:
    operator = _internal.LocalOperator("codec", 1, 128, "heap", str(tmp_path))
    s = operator.session(0)
    s.begin(1, 0, None)
    return operator, s


@pytest.mark.parametrize(("state_type", "direct", "general", "read"), CASES)
def test_both_paths_store_the_same(
    tmp_path: Path, state_type: Any, direct: Any, general: Any, read: Any
) -> None:
    _operator, s = session(tmp_path)
    state = s.register_state(ValueStateDescriptor("v", state_type).native)
    keys = s.keys([1, 2])
    s.put_values(state, keys, [direct, general])
    # The decoder takes exactly the bytes of one value, so equal values mean equal bytes.
    assert s.get_values(state, keys) == [read, read]


@pytest.mark.parametrize(
    ("state_type", "bad"),
    [
        (Types.LONG(), True),
        (Types.LONG(), 2**70),
        (Types.INT(), 2**40),
        (ROW, (1,)),
        (ROW, (1, "x")),
        (NESTED, (None, 0.5, [])),
        (Types.LIST(Types.LONG()), [1, "2"]),
    ],
)
def test_values_that_do_not_fit_are_explained(tmp_path: Path, state_type: Any, bad: Any) -> None:
    _operator, s = session(tmp_path)
    state = s.register_state(ValueStateDescriptor("v", state_type).native)
    with pytest.raises(StateError, match="'v'"):
        s.put_values(state, s.keys([1]), [bad])


@pytest.mark.parametrize(
    ("keys", "types"),
    [([10**12, -1, 0], ["long"]), (["eu", "us"], ["string"]), ([(1, "eu"), (2, "us")], ["long", "string"])],
)
def test_keys_with_given_groups_are_the_keys_without(
    tmp_path: Path, keys: list[Any], types: list[str]
) -> None:
    _operator, s = session(tmp_path)
    state = s.register_state(ValueStateDescriptor("v", Types.LONG()).native)
    computed = s.keys(keys)  # the first keys decide the key types, on the general path
    groups = [key_group_of(*(k if isinstance(k, tuple) else (k,)), types=types) for k in keys]
    given = s.keys(keys, groups)  # the direct path
    assert given.key_groups == computed.key_groups == groups
    s.put_values(state, given, list(range(len(keys))))
    assert s.get_values(state, computed) == list(range(len(keys)))


def test_a_mismatch_names_the_part_from_the_inside_out(tmp_path: Path) -> None:
    _operator, s = session(tmp_path)
    state = s.register_state(ValueStateDescriptor("v", NESTED).native)
    with pytest.raises(StateError) as caught:
        s.put_values(state, s.keys([1]), [(True, 0.5, ["x", 7])])
    assert str(caught.value) == (
        "state 'v' holds struct<flag: bool, ratio: float32, names: list<string>> values, but item 1 of "
        "field 'names' of the value written is 7 (int): pass a str"
    )
    with pytest.raises(StateError, match="non-nullable field 'flag' of the value written is None"):
        s.put_values(state, s.keys([1]), [(None, 0.5, [])])
