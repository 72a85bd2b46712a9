"""Misuse gets a typed error whose message says what went wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from weir import (
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    RuntimeContext,
    StateBackend,
    Types,
    ValueStateDescriptor,
)
from weir.exceptions import InvalidArgumentError, StateError
from weir.testing import KeyedOperatorHarness


class Writes(KeyedProcessFunction):
    """Writes whatever the record carries into a state of the given type."""

    def __init__(self, state_type: Any) -> None:
        self.state_type = state_type

    def open(self, runtime_context: RuntimeContext) -> None:
        self.state = runtime_context.get_state(ValueStateDescriptor("slot", self.state_type))

    def process_element(self, value: tuple[int, Any], ctx: KeyedProcessFunction.Context) -> None:
        self.state.update(value[1])


@pytest.mark.parametrize(
    ("state_type", "value", "expected"),
    [
        (Types.LONG(), "seven", "state 'slot' holds int64 values, but the value written is 'seven' (str)"),
        (Types.LONG(), 2**70, "pass an int in the signed 64-bit range"),
        (Types.INT(), True, "True (bool)"),
        (Types.STRING(), b"raw", "pass a str"),
        (Types.TUPLE([Types.LONG(), Types.LONG()]), (1, 2, 3), "struct<f0: int64, f1: int64>"),
        (Types.TUPLE([Types.LONG(), Types.STRING()]), (1, 2), "field 'f1' of the value written is 2 (int)"),
        (Types.LIST(Types.DOUBLE()), [1.0, "x"], "item 1 of the value written is 'x' (str)"),
        (Types.PICKLED_BYTE_ARRAY(), lambda: None, "pickle failed"),
    ],
)
def test_a_value_that_does_not_fit_the_type_is_a_state_error(
    state_type: Any, value: Any, expected: str, backend: str
) -> None:
    with KeyedOperatorHarness(Writes(state_type), key_selector=lambda v: v[0], backend=backend) as h:
        with pytest.raises(StateError, match="state 'slot'") as err:
            h.process_elements([(1, value)])
        assert expected in str(err.value)
        assert "pass " in str(err.value)
        # The failed epoch wrote nothing; the harness keeps working.
        assert h.state(1, "slot") is None


class ReadsInOpen(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.count.value()

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
        return None


class WritesInClose(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.items = runtime_context.get_list_state(ListStateDescriptor("items", Types.LONG()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
        self.items.add(1)

    def close(self) -> None:
        self.items.add(2)


def test_keyed_state_outside_a_keyed_context_is_a_state_error() -> None:
    with pytest.raises(
        StateError, match=r"keyed state 'count' was used outside a keyed context.*process_element"
    ):
        KeyedOperatorHarness(ReadsInOpen(), key_selector=lambda v: v)
    h = KeyedOperatorHarness(WritesInClose(), key_selector=lambda v: v)
    h.process_elements([1])
    with pytest.raises(StateError, match="outside a keyed context.*CheckpointedFunction"):
        h.close()


class Duplicate(KeyedProcessFunction):
    def __init__(self, second: Any) -> None:
        self.second = second

    def open(self, runtime_context: RuntimeContext) -> None:
        self.a = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))
        self.b = self.second(runtime_context)

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
        return None


def test_duplicate_state_names_with_different_descriptors_are_refused() -> None:
    with pytest.raises(StateError, match="state 'total' is already registered with another descriptor"):
        KeyedOperatorHarness(
            Duplicate(lambda rc: rc.get_state(ValueStateDescriptor("total", Types.DOUBLE()))),
            key_selector=lambda v: v,
        )
    with pytest.raises(StateError, match="give the new state its own name"):
        KeyedOperatorHarness(
            Duplicate(lambda rc: rc.get_list_state(ListStateDescriptor("total", Types.LONG()))),
            key_selector=lambda v: v,
        )


def test_the_same_descriptor_twice_gives_the_same_state() -> None:
    function = Duplicate(lambda rc: rc.get_state(ValueStateDescriptor("total", Types.LONG())))
    with KeyedOperatorHarness(function, key_selector=lambda v: v) as h:
        h.process_elements([1])


def test_unknown_backend_names_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="state backend 'memory' is unknown: use \"heap\""):
        KeyedOperatorHarness(Writes(Types.LONG()), key_selector=lambda v: v[0], backend="memory")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="only 'name' and 'incremental' are accepted"):
        StateBackend.of({"name": "rocksdb", "block_cache": 1})
    with pytest.raises(InvalidArgumentError, match="incremental checkpoints need the rocksdb backend"):
        StateBackend.of({"name": "heap", "incremental": True})
    with pytest.raises(InvalidArgumentError, match="incremental must be True or False"):
        StateBackend("rocksdb", incremental="yes")  # type: ignore[arg-type]


def test_unsupported_state_types_are_refused_with_the_supported_ones() -> None:
    with pytest.raises(InvalidArgumentError, match=r"Int8 cannot be a state type.*binary \(also for bytes\)"):
        ValueStateDescriptor("b", Types.BYTE())
    with pytest.raises(InvalidArgumentError, match="is not a state type"):
        MapStateDescriptor("m", int, Types.LONG())  # type: ignore[arg-type]


class Echo(KeyedProcessFunction):
    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        yield value


def test_keys_of_another_type_or_none_are_refused() -> None:
    with KeyedOperatorHarness(Echo(), key_selector=lambda v: v[0], parallelism=2) as h:
        h.process_elements([(1, "a")])
        with pytest.raises(StateError, match=r"key 'x' \(str\).*keys are int64.*keys of one type"):
            h.process_elements([("x", "b")])
        with pytest.raises(InvalidArgumentError, match="may not be None"):
            h.process_elements([(None, "c")])
        with pytest.raises(InvalidArgumentError, match="a key is an int, str, bytes"):
            h.process_elements([([1], "d")])


def test_list_and_map_state_refuse_none() -> None:
    class AddsNone(KeyedProcessFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.items = runtime_context.get_list_state(ListStateDescriptor("items", Types.LONG()))
            self.index = runtime_context.get_map_state(
                MapStateDescriptor("index", Types.LONG(), Types.LONG())
            )

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
            if value == 1:
                self.items.add(None)
            else:
                self.index.put(1, None)

    with KeyedOperatorHarness(AddsNone(), key_selector=lambda v: v) as h:
        with pytest.raises(StateError, match="cannot add None to list state 'items'"):
            h.process_elements([1])
        with pytest.raises(StateError, match=r"cannot put None into map state 'index': use remove\(1\)"):
            h.process_elements([2])


def test_a_function_that_is_not_keyed_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="subclass weir.KeyedProcessFunction"):
        KeyedOperatorHarness(object(), key_selector=lambda v: v)  # type: ignore[arg-type]


def test_a_snapshot_before_any_key_says_to_process_a_record(tmp_path: Any) -> None:
    with KeyedOperatorHarness(Writes(Types.LONG()), key_selector=lambda v: v[0]) as h:
        with pytest.raises(StateError, match=r"process at least one record before snapshot\(\)"):
            h.snapshot(tmp_path)
        h.process_elements([(1, 5)])
        assert h.snapshot(tmp_path)
