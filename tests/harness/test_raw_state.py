"""Raw keyed and operator state in-process: written at a snapshot, read back on restore,
rescaled by key group (keyed) and split evenly (operator), across backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from weir import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    RuntimeContext,
)
from weir.exceptions import InvalidArgumentError
from weir.key_groups import key_group_of, key_group_range
from weir.testing import KeyedOperatorHarness

MAX_PARALLELISM = 16


class Echo(KeyedProcessFunction, CheckpointedFunction):
    """Raw keyed state: the key's bytes per key group; raw operator state: one part per subtask."""

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.keyed = context.get_raw_keyed_state_inputs()
        self.parts = context.get_raw_operator_state_inputs()

    def open(self, runtime_context: RuntimeContext) -> None:
        self.subtask = runtime_context.get_index_of_this_subtask()

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
        kg = key_group_of(value, types="string", max_parallelism=MAX_PARALLELISM)
        self.keyed[kg] = self.keyed.get(kg, b"") + value.encode()

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        out = context.get_raw_keyed_state_output()
        for kg, data in self.keyed.items():
            out.write(kg, data)
        operator = context.get_raw_operator_state_output()
        for part in [*self.parts, f"subtask-{self.subtask}".encode()]:
            operator.write(part)


@pytest.mark.parametrize(("backend", "restored_backend"), [("heap", "rocksdb"), ("rocksdb", "heap")])
def test_raw_state_round_trips_through_a_savepoint_rescaled(
    tmp_path: Path, backend: str, restored_backend: str
) -> None:
    keys = [f"k{i}" for i in range(40)]
    with KeyedOperatorHarness(
        Echo(), key_selector=lambda v: v, parallelism=2, max_parallelism=MAX_PARALLELISM, backend=backend
    ) as h:
        h.process_elements(keys)
        savepoint = h.snapshot(tmp_path)
    with KeyedOperatorHarness(
        Echo(),
        key_selector=lambda v: v,
        parallelism=3,
        max_parallelism=MAX_PARALLELISM,
        backend=restored_backend,
        restore_from=savepoint,
    ) as h3:
        keyed: dict[int, bytes] = {}
        parts: list[bytes] = []
        for subtask, function in enumerate(h3.functions):
            owned = key_group_range(MAX_PARALLELISM, 3, subtask)
            assert all(owned.start <= kg < owned.end for kg in function.keyed), "a subtask got another's"
            keyed.update(function.keyed)
            parts.extend(function.parts)
    want: dict[int, bytes] = {}
    for key in keys:
        kg = key_group_of(key, types="string", max_parallelism=MAX_PARALLELISM)
        want[kg] = want.get(kg, b"") + key.encode()
    assert keyed == want
    assert sorted(parts) == [b"subtask-0", b"subtask-1"]


def test_raw_keyed_state_of_another_subtasks_key_group_is_refused(tmp_path: Path) -> None:
    class Wrong(Echo):
        def snapshot_state(self, context: FunctionSnapshotContext) -> None:
            context.get_raw_keyed_state_output().write(MAX_PARALLELISM - 1 if self.subtask == 0 else 0, b"x")

    with KeyedOperatorHarness(
        Wrong(), key_selector=lambda v: v, parallelism=2, max_parallelism=MAX_PARALLELISM
    ) as h:
        h.process_elements(["a"])
        with pytest.raises(InvalidArgumentError, match="not this subtask's"):
            h.snapshot(tmp_path)
