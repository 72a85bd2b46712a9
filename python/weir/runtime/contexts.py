"""What a function's lifecycle methods get: the runtime, initialization and snapshot contexts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from weir.functions import (
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedStateStore,
    RawKeyedStateOutput,
    RawOperatorStateOutput,
    RuntimeContext,
)
from weir.runtime.operator_state import SubtaskOperatorStateStore
from weir.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    OperatorStateStore,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)

if TYPE_CHECKING:
    from weir.runtime.runner import OperatorRunner

__all__ = ["InitializationContext", "SnapshotContext", "SubtaskRuntimeContext"]


class InitializationContext(FunctionInitializationContext):
    def __init__(self, runner: OperatorRunner, restored: bool) -> None:
        self._runner = runner
        self._restored = restored

    def is_restored(self) -> bool:
        return self._restored

    def get_operator_state_store(self) -> OperatorStateStore:
        return SubtaskOperatorStateStore(self._runner)

    def get_keyed_state_store(self) -> KeyedStateStore:
        return self._runner.runtime_context

    def get_raw_keyed_state_inputs(self) -> dict[int, bytes]:
        return self._runner.raw.keyed_inputs()

    def get_raw_operator_state_inputs(self) -> list[bytes]:
        return self._runner.raw.operator_inputs()


class SnapshotContext(FunctionSnapshotContext):
    def __init__(self, runner: OperatorRunner, checkpoint_id: int, timestamp_ms: int) -> None:
        self._runner = runner
        self._checkpoint_id = checkpoint_id
        self._timestamp_ms = timestamp_ms

    def get_raw_keyed_state_output(self) -> RawKeyedStateOutput:
        return self._runner.raw.keyed_output()

    def get_raw_operator_state_output(self) -> RawOperatorStateOutput:
        return self._runner.raw.operator_output()

    def get_checkpoint_id(self) -> int:
        return self._checkpoint_id

    def get_checkpoint_timestamp(self) -> int:
        return self._timestamp_ms


class SubtaskRuntimeContext(RuntimeContext):
    def __init__(self, runner: OperatorRunner) -> None:
        self._runner = runner

    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState[Any]:
        return self._runner.keyed_state(state_descriptor, ValueStateDescriptor)  # type: ignore[no-any-return]

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._runner.keyed_state(state_descriptor, ListStateDescriptor)  # type: ignore[no-any-return]

    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState[Any, Any]:
        return self._runner.keyed_state(state_descriptor, MapStateDescriptor)  # type: ignore[no-any-return]

    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState[Any]:
        return self._runner.keyed_state(state_descriptor, ReducingStateDescriptor)  # type: ignore[no-any-return]

    def get_aggregating_state(
        self, state_descriptor: AggregatingStateDescriptor
    ) -> AggregatingState[Any, Any]:
        return self._runner.keyed_state(state_descriptor, AggregatingStateDescriptor)  # type: ignore[no-any-return]

    def get_index_of_this_subtask(self) -> int:
        return self._runner.session.subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self._runner.session.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._runner.session.max_parallelism
