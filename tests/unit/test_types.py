"""State types: Arrow types, PyFlink's Types and pickle map onto the engine's value types."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from weir import PICKLE, StateTtlConfig, Types
from weir.exceptions import InvalidArgumentError
from weir.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from weir.types import value_type_json


@pytest.mark.parametrize(
    ("state_type", "expected"),
    [
        (Types.BOOLEAN(), {"type": "boolean"}),
        (Types.INT(), {"type": "int32"}),
        (Types.LONG(), {"type": "int64"}),
        (Types.FLOAT(), {"type": "float32"}),
        (Types.DOUBLE(), {"type": "float64"}),
        (Types.STRING(), {"type": "utf8"}),
        (pa.large_string(), {"type": "utf8"}),
        (Types.PRIMITIVE_ARRAY(Types.BYTE()), {"type": "binary"}),
        (Types.PRIMITIVE_ARRAY(Types.INT()), {"type": "list", "item": {"type": "int32"}}),
        (Types.BASIC_ARRAY(Types.STRING()), {"type": "list", "item": {"type": "utf8"}}),
        (Types.LIST(Types.PICKLED_BYTE_ARRAY()), {"type": "list", "item": {"type": "pickle"}}),
        (Types.PICKLED_BYTE_ARRAY(), {"type": "pickle"}),
        (PICKLE, {"type": "pickle"}),
        (
            Types.ROW([Types.LONG(), PICKLE]),
            {
                "type": "struct",
                "fields": [
                    {"name": "f0", "data_type": {"type": "int64"}, "nullable": True},
                    {"name": "f1", "data_type": {"type": "pickle"}, "nullable": True},
                ],
            },
        ),
        (
            pa.struct([pa.field("n", pa.int64(), nullable=False)]),
            {"type": "struct", "fields": [{"name": "n", "data_type": {"type": "int64"}, "nullable": False}]},
        ),
    ],
)
def test_state_types_map_to_engine_types(state_type: Any, expected: dict[str, Any]) -> None:
    assert json.loads(value_type_json(state_type)) == expected


@pytest.mark.parametrize("state_type", [pa.int8(), pa.uint64(), pa.timestamp("ms"), pa.float16(), "int", int])
def test_unsupported_types_are_refused(state_type: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="state type"):
        value_type_json(state_type)


def test_descriptors_record_kind_types_and_ttl() -> None:
    descriptor = MapStateDescriptor("m", Types.STRING(), Types.LIST(Types.LONG()))
    descriptor.enable_time_to_live(
        StateTtlConfig.new_builder(5_000).update_ttl_on_read_and_write().never_return_expired().build()
    )
    assert json.loads(descriptor.descriptor_json()) == {
        "name": "m",
        "kind": "map",
        "value_type": {"type": "list", "item": {"type": "int64"}},
        "user_key_type": {"type": "utf8"},
        "ttl": {"ttl_millis": 5000, "update": "on_read_and_write"},
    }
    assert json.loads(ListStateDescriptor("l", Types.INT()).descriptor_json())["kind"] == "list"


def test_invalid_descriptor_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="state name '' is invalid"):
        ValueStateDescriptor("", Types.LONG())
    with pytest.raises(InvalidArgumentError, match="time-to-live must be positive"):
        StateTtlConfig.new_builder(0).build()
    with pytest.raises(InvalidArgumentError, match="ROW_NAMED got 1 names but 2 types"):
        Types.ROW_NAMED(["a"], [Types.LONG(), Types.LONG()])
