"""Keyed state of a runner, and list and map state: fetched per key on first use in a batch.

Every keyed state has the same batch hooks (:class:`KeyedState`): a runner
hands it each batch (or, with deferred writes, its task's keys) and takes it
back at the end, when it writes what changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from weir._internal import KeyBatch, Session
from weir.exceptions import StateError
from weir.runtime.keys import NO_KEY, Batch, KeyedContext, outside_keyed_context
from weir.state import ListState, MapState, StateDescriptor

__all__ = ["KeyedListState", "KeyedMapState", "KeyedState"]


class KeyedState:
    """What every keyed state of a runner has: its id, name and batch hooks."""

    __slots__ = ("_batch", "_id", "_scope", "_session", "descriptor", "name")

    def __init__(self, session: Session, state_id: int, descriptor: StateDescriptor, scope: KeyedContext):
        self._session = session
        self._id = state_id
        self._scope = scope
        self._batch: Batch | None = None
        self.descriptor = descriptor
        self.name = descriptor.name

    def _key(self) -> Any:
        key = self._scope.key
        if key is NO_KEY:
            raise outside_keyed_context(self.name)
        return key

    def _one(self, key: Any) -> KeyBatch:
        batch = self._batch
        if batch is None:
            raise outside_keyed_context(self.name)
        return batch.rows((key,))

    def begin_batch(self, batch: Batch) -> None:
        self._batch = batch

    def end_batch(self, write: bool = True) -> None:
        """Leave the batch; write back its changes unless the batch failed (``write=False``)."""
        self._batch = None

    def read(self, keys: KeyBatch) -> Any:
        """The state of a one-row key batch, as the function would see it."""
        raise NotImplementedError


class KeyedListState(KeyedState, ListState[Any]):
    """Lists are fetched per key on first read; appends to unread lists never fetch."""

    __slots__ = ("_appends", "_lists", "_replaced")

    def __init__(self, session: Session, state_id: int, descriptor: StateDescriptor, scope: KeyedContext):
        super().__init__(session, state_id, descriptor, scope)
        self._lists: dict[Any, list[Any]] = {}
        self._appends: dict[Any, list[Any]] = {}
        self._replaced: set[Any] = set()

    def _full(self, key: Any) -> list[Any]:
        items = self._lists.get(key)
        if items is None:
            items = self._session.get_lists(self._id, self._one(key))[0]
            items.extend(self._appends.get(key, ()))
            self._lists[key] = items
        return items

    def get(self) -> list[Any]:
        """The current key's items (a copy; empty if none)."""
        return list(self._full(self._key()))

    def add(self, value: Any) -> None:
        """Append ``value`` to the current key's list."""
        if value is None:
            raise StateError(f"cannot add None to list state {self.name!r}: list items may not be None")
        key = self._key()
        items = self._lists.get(key)
        if items is not None:
            items.append(value)
        if key not in self._replaced:
            self._appends.setdefault(key, []).append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        """Append every value."""
        for value in values:
            self.add(value)

    def update(self, values: Iterable[Any]) -> None:
        """Replace the current key's list."""
        items = list(values)
        if any(item is None for item in items):
            raise StateError(f"cannot store None in list state {self.name!r}: list items may not be None")
        key = self._key()
        self._lists[key] = items
        self._replaced.add(key)
        self._appends.pop(key, None)

    def clear(self) -> None:
        """Empty the current key's list."""
        self.update(())

    def end_batch(self, write: bool = True) -> None:
        batch = self._batch
        lists, appends, replaced = self._lists, self._appends, self._replaced
        self._lists, self._appends, self._replaced = {}, {}, set()
        super().end_batch()
        if not write or batch is None:
            return
        if replaced:
            keys = list(replaced)
            self._session.replace_lists(self._id, batch.rows(keys), [lists[key] for key in keys])
        if appends:
            keys = list(appends)
            self._session.append_lists(self._id, batch.rows(keys), [appends[key] for key in keys])

    def read(self, keys: KeyBatch) -> Any:
        return self._session.get_lists(self._id, keys)[0]


_REMOVED: Final = object()


class KeyedMapState(KeyedState, MapState[Any, Any]):
    """Maps are fetched whole per key on first use in a batch; changed entries are written back."""

    __slots__ = ("_changes", "_cleared", "_maps")

    def __init__(self, session: Session, state_id: int, descriptor: StateDescriptor, scope: KeyedContext):
        super().__init__(session, state_id, descriptor, scope)
        self._maps: dict[Any, dict[Any, Any]] = {}
        self._changes: dict[Any, dict[Any, Any]] = {}
        self._cleared: set[Any] = set()

    def _map(self) -> tuple[Any, dict[Any, Any]]:
        key = self._key()
        entries = self._maps.get(key)
        if entries is None:
            entries = self._session.map_entries(self._id, self._one(key))[0]
            self._maps[key] = entries
        return key, entries

    def get(self, key: Any) -> Any:
        """The value of user key ``key``, or ``None``."""
        return self._map()[1].get(key)

    def put(self, key: Any, value: Any) -> None:
        """Set the value of user key ``key``."""
        if value is None:
            raise StateError(f"cannot put None into map state {self.name!r}: use remove({key!r}) instead")
        current, entries = self._map()
        entries[key] = value
        self._changes.setdefault(current, {})[key] = value

    def put_all(self, dict_value: Mapping[Any, Any]) -> None:
        """Set every entry of ``dict_value``."""
        for key, value in dict_value.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        """Remove user key ``key`` (no error if absent)."""
        current, entries = self._map()
        if entries.pop(key, _REMOVED) is not _REMOVED or current not in self._cleared:
            self._changes.setdefault(current, {})[key] = _REMOVED

    def contains(self, key: Any) -> bool:
        """Whether user key ``key`` has a value."""
        return key in self._map()[1]

    def items(self) -> list[tuple[Any, Any]]:
        """The entries (a copy)."""
        return list(self._map()[1].items())

    def keys(self) -> list[Any]:
        """The user keys (a copy)."""
        return list(self._map()[1])

    def values(self) -> list[Any]:
        """The values (a copy)."""
        return list(self._map()[1].values())

    def is_empty(self) -> bool:
        """Whether the current key's map has no entries."""
        return not self._map()[1]

    def clear(self) -> None:
        """Remove every entry of the current key."""
        current = self._key()
        self._maps[current] = {}
        self._cleared.add(current)
        self._changes.pop(current, None)

    def end_batch(self, write: bool = True) -> None:
        batch = self._batch
        changes, cleared = self._changes, self._cleared
        self._maps, self._changes, self._cleared = {}, {}, set()
        super().end_batch()
        if not write or batch is None:
            return
        if cleared:
            self._session.clear(self._id, batch.rows(cleared))
        if changes:
            owners: list[Any] = []
            user_keys: list[Any] = []
            values: list[Any] = []
            for owner, entries in changes.items():
                for user_key, value in entries.items():
                    owners.append(owner)
                    user_keys.append(user_key)
                    values.append(None if value is _REMOVED else value)
            self._session.map_put(self._id, batch.rows(owners), user_keys, values)

    def read(self, keys: KeyBatch) -> Any:
        return self._session.map_entries(self._id, keys)[0]
