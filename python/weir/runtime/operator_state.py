"""Operator (non-keyed) state of a subtask: kept in memory, written to the session on snapshot and close."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from weir.exceptions import StateError
from weir.state import BroadcastState, ListState, ListStateDescriptor, MapStateDescriptor, OperatorStateStore

if TYPE_CHECKING:
    from weir.runtime.runner import OperatorRunner

__all__ = ["OperatorBroadcastState", "OperatorListState", "SubtaskOperatorStateStore"]


class OperatorListState(ListState[Any]):
    """An operator list state: kept in memory, written to the session on snapshot and close."""

    def __init__(self, name: str, items: list[Any]) -> None:
        self.name = name
        self._items = items

    def get(self) -> list[Any]:
        return list(self._items)

    def add(self, value: Any) -> None:
        if value is None:
            raise StateError(f"cannot add None to operator list state {self.name!r}")
        self._items.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        for value in values:
            self.add(value)

    def update(self, values: Iterable[Any]) -> None:
        items = list(values)
        if any(item is None for item in items):
            raise StateError(f"cannot store None in operator list state {self.name!r}")
        self._items = items

    def clear(self) -> None:
        self._items = []

    def snapshot_items(self) -> list[Any]:
        return list(self._items)


class OperatorBroadcastState(BroadcastState[Any, Any]):
    """Broadcast state: a dict stored as (key, value) items."""

    def __init__(self, name: str, entries: dict[Any, Any]) -> None:
        self.name = name
        self._entries = entries

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def put(self, key: Any, value: Any) -> None:
        if value is None:
            raise StateError(f"cannot put None into broadcast state {self.name!r}: use remove({key!r})")
        self._entries[key] = value

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        for key, value in dict_value.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        self._entries.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._entries

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._entries.items())

    def keys(self) -> list[Any]:
        return list(self._entries)

    def values(self) -> list[Any]:
        return list(self._entries.values())

    def is_empty(self) -> bool:
        return not self._entries

    def clear(self) -> None:
        self._entries = {}

    def snapshot_items(self) -> list[Any]:
        return list(self._entries.items())


class SubtaskOperatorStateStore(OperatorStateStore):
    def __init__(self, runner: OperatorRunner) -> None:
        self._runner = runner

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._runner.operator_list(state_descriptor, "split")

    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._runner.operator_list(state_descriptor, "union")

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState[Any, Any]:
        return self._runner.broadcast(state_descriptor)
