"""CheckpointedFunction operator state (list, union, broadcast) across restores and rescaling;
CheckpointListener notifications."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from weir import (
    CheckpointedFunction,
    CheckpointListener,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    RuntimeContext,
    Types,
)
from weir.exceptions import StateError
from weir.testing import KeyedOperatorHarness


class BufferingFunction(KeyedProcessFunction, CheckpointedFunction, CheckpointListener):
    """Flink's BufferingSink shape: buffers records in memory, checkpoints the buffer."""

    def __init__(self) -> None:
        self.buffer: list[tuple[int, str]] = []
        self.completed: list[int] = []
        self.snapshots: list[int] = []

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        store = context.get_operator_state_store()
        self.buffered = store.get_list_state(
            ListStateDescriptor("buffered", Types.TUPLE([Types.LONG(), Types.STRING()]))
        )
        self.writers = store.get_union_list_state(ListStateDescriptor("writers", Types.INT()))
        self.config = store.get_broadcast_state(
            MapStateDescriptor("config", Types.STRING(), Types.PICKLED_BYTE_ARRAY())
        )
        self.restored = context.is_restored()
        self.restored_writers = sorted(self.writers.get())
        self.restored_config = dict(self.config.items())
        self.buffer = list(self.buffered.get())

    def open(self, runtime_context: RuntimeContext) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value: tuple[int, str], ctx: KeyedProcessFunction.Context) -> None:
        self.buffer.append(value)

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.snapshots.append(context.get_checkpoint_id())
        assert context.get_checkpoint_timestamp() > 0
        self.buffered.update(self.buffer)
        self.writers.update([self.subtask])
        self.config.put("thresholds", {"low": 1, "high": (9, "x")})
        self.config.put("owner", "ops")

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.completed.append(checkpoint_id)


def test_operator_state_is_redistributed_on_rescale(backend: str, tmp_path: Path) -> None:
    records = [(k, f"r{k}") for k in range(10)]
    with KeyedOperatorHarness(
        BufferingFunction(), key_selector=lambda v: v[0], parallelism=2, backend=backend
    ) as h:
        h.process_elements(records)
        savepoint = h.snapshot(tmp_path)
        functions: list[Any] = h.functions
        assert [f.snapshots for f in functions] == [[1], [1]]
        assert not any(f.restored for f in functions)
    with KeyedOperatorHarness(
        BufferingFunction(),
        key_selector=lambda v: v[0],
        parallelism=3,
        backend=backend,
        restore_from=savepoint,
    ) as h3:
        restored: list[Any] = h3.functions
        assert all(f.restored for f in restored)
        # List state: every item exactly once, split evenly in subtask order.
        buffers = [f.buffer for f in restored]
        assert sorted(item for buffer in buffers for item in buffer) == records
        assert sorted(len(b) for b in buffers) == [3, 3, 4]
        # Union state: every new subtask gets every old subtask's items.
        assert [f.restored_writers for f in restored] == [[0, 1]] * 3
        # Broadcast state: every new subtask gets one copy.
        expected = {"thresholds": {"low": 1, "high": (9, "x")}, "owner": "ops"}
        assert [f.restored_config for f in restored] == [expected] * 3


def test_operator_state_survives_a_second_generation(tmp_path: Path) -> None:
    with KeyedOperatorHarness(BufferingFunction(), key_selector=lambda v: v[0], parallelism=3) as h:
        h.process_elements([(k, "a") for k in range(6)])
        first = h.snapshot(tmp_path / "one")
    with KeyedOperatorHarness(BufferingFunction(), key_selector=lambda v: v[0], restore_from=first) as h1:
        h1.process_elements([(99, "b")])
        second = h1.snapshot(tmp_path / "two")
    with KeyedOperatorHarness(
        BufferingFunction(), key_selector=lambda v: v[0], parallelism=2, restore_from=second
    ) as h2:
        buffers = [f.buffer for f in h2.functions]  # type: ignore[attr-defined]
        assert sorted(item for b in buffers for item in b) == [(k, "a") for k in range(6)] + [(99, "b")]
        assert [f.restored_writers for f in h2.functions] == [[0]] * 2  # type: ignore[attr-defined]


def test_checkpoint_listeners_hear_completed_checkpoints(tmp_path: Path) -> None:
    with KeyedOperatorHarness(BufferingFunction(), key_selector=lambda v: v[0], parallelism=2) as h:
        h.process_elements([(1, "a")])
        h.snapshot(tmp_path)
        h.notify_checkpoint_complete()
        h.snapshot(tmp_path)
        h.snapshot(tmp_path)
        h.notify_checkpoint_complete()  # 2 was subsumed, as Flink allows
        assert h.last_checkpoint_id == 3
        assert [f.completed for f in h.functions] == [[1, 3], [1, 3]]  # type: ignore[attr-defined]


def test_operator_state_names_are_unique_per_mode() -> None:
    class Clash(KeyedProcessFunction, CheckpointedFunction):
        def initialize_state(self, context: FunctionInitializationContext) -> None:
            store = context.get_operator_state_store()
            store.get_list_state(ListStateDescriptor("s", Types.LONG()))
            store.get_union_list_state(ListStateDescriptor("s", Types.LONG()))

        def snapshot_state(self, context: FunctionSnapshotContext) -> None:
            return None

        def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
            return None

    with pytest.raises(
        StateError, match="operator state 's' is already registered as split state.*its own name"
    ):
        KeyedOperatorHarness(Clash(), key_selector=lambda v: v)
