"""State types: Arrow types, PyFlink's Types and pickle map onto the engine's value types."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pyarrow as pa
import pytest

from weir import PICKLE, StateTtlConfig, Types
from weir.exceptions import InvalidArgumentError
from weir.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from weir.types import value_type


@pytest.mark.parametrize(
    ("state_type", "expected"),
    [
        (Types.BOOLEAN(), "bool"),
        (Types.INT(), "int32"),
        (Types.LONG(), "int64"),
        (Types.FLOAT(), "float32"),
        (Types.DOUBLE(), "float64"),
        (Types.STRING(), "string"),
        (pa.large_string(), "string"),
        (Types.PRIMITIVE_ARRAY(Types.BYTE()), "binary"),
        (Types.PRIMITIVE_ARRAY(Types.INT()), "list<int32>"),
        (Types.BASIC_ARRAY(Types.STRING()), "list<string>"),
        (Types.LIST(Types.PICKLED_BYTE_ARRAY()), "list<pickle>"),
        (Types.PICKLED_BYTE_ARRAY(), "pickle"),
        (PICKLE, "pickle"),
        (PICKLE.field("blob"), "pickle"),
        (Types.ROW([Types.LONG(), PICKLE]), "struct<f0: int64, f1: pickle>"),
        (pa.struct([pa.field("n", pa.int64(), nullable=False)]), "struct<n: int64>"),
    ],
)
def test_state_types_map_to_engine_types(state_type: Any, expected: str) -> None:
    assert str(value_type(state_type)) == expected


def test_struct_fields_keep_their_nullability() -> None:
    nullable = value_type(pa.struct([pa.field("n", pa.int64())]))
    required = value_type(pa.struct([pa.field("n", pa.int64(), nullable=False)]))
    assert nullable != required
    assert nullable == value_type(pa.struct([pa.field("n", pa.int64())]))


@pytest.mark.parametrize("state_type", [pa.int8(), pa.uint64(), pa.timestamp("ms"), pa.float16(), "int", int])
def test_unsupported_types_are_refused(state_type: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="state type"):
        value_type(state_type)


def test_int8_points_to_binary_for_bytes() -> None:
    with pytest.raises(InvalidArgumentError, match=r"Int8 cannot be a state type.*binary \(also for bytes\)"):
        value_type(pa.int8())


def test_types_and_descriptors_pickle_and_copy() -> None:
    # Functions holding descriptors travel to Spark workers pickled.
    descriptor = MapStateDescriptor("m", Types.STRING(), Types.ROW([Types.LONG(), PICKLE]))
    for native in (descriptor.native, descriptor.native.value_type):
        assert pickle.loads(pickle.dumps(native)) == native
        assert copy.deepcopy(native) == native
    restored = pickle.loads(pickle.dumps(descriptor))
    assert restored.native == descriptor.native


def test_descriptors_record_kind_types_and_ttl() -> None:
    descriptor = MapStateDescriptor("m", Types.STRING(), Types.LIST(Types.LONG()))
    descriptor.enable_time_to_live(
        StateTtlConfig.new_builder(5_000).update_ttl_on_read_and_write().never_return_expired().build()
    )
    native = descriptor.native
    assert (native.name, native.kind, native.ttl_millis) == ("m", "map", 5000)
    assert str(native.value_type) == "list<int64>"
    assert native.user_key_type is not None and str(native.user_key_type) == "string"
    assert ListStateDescriptor("l", Types.INT()).native.kind == "list"
    assert ListStateDescriptor("l", Types.INT()).native.user_key_type is None


def test_invalid_descriptor_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match='state name "" is invalid'):
        ValueStateDescriptor("", Types.LONG())
    with pytest.raises(InvalidArgumentError, match="time-to-live must be positive"):
        ValueStateDescriptor("v", Types.LONG()).enable_time_to_live(StateTtlConfig.new_builder(0).build())
    with pytest.raises(InvalidArgumentError, match="ROW_NAMED got 1 names but 2 types"):
        Types.ROW_NAMED(["a"], [Types.LONG(), Types.LONG()])
