"""Value, reducing and aggregating state: caches in front of the session.

Per batch the values of all the batch's keys are fetched in one call and
kept in a dict; records read and write the dict; what changed is written
back in one call at the end of the batch (or, with deferred writes, of the
task).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from weir._internal import KeyBatch, Session
from weir.exceptions import StateError
from weir.runtime.keyed_state import KeyedState
from weir.runtime.keys import Batch, KeyedContext, TaskKeys, outside_keyed_context
from weir.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from weir.types import PICKLE_METADATA_KEY, PICKLE_METADATA_VALUE, PickleType, StateType

__all__ = [
    "CachedAggregatingState",
    "CachedReducingState",
    "CachedValueState",
    "DefaultingValueState",
    "ImmutableValueState",
    "ValueLikeState",
    "immutable",
]


class ValueLikeState(KeyedState):
    """Value, reducing and aggregating state: prefetched per batch, dict cache, batched write-back."""

    __slots__ = ("_cache", "_dirty")

    def __init__(self, session: Session, state_id: int, descriptor: StateDescriptor, scope: KeyedContext):
        super().__init__(session, state_id, descriptor, scope)
        self._cache: dict[Any, Any] = {}
        # A dict, not a set: `d[k] = None` is one bytecode, `s.add(k)` a method call.
        self._dirty: dict[Any, None] = {}

    def begin_batch(self, batch: Batch) -> None:
        super().begin_batch(batch)
        values = self._session.get_values(self._id, batch.key_batch)
        self._cache = dict(zip(batch.distinct, values, strict=True))

    def end_batch(self, write: bool = True) -> None:
        batch, dirty, cache = self._batch, self._dirty, self._cache
        self._cache = {}
        self._dirty = {}
        super().end_batch()
        if not write or not dirty or batch is None:
            return
        if len(dirty) == len(batch.distinct):
            # Every key is dirty, so the cache holds exactly the batch's keys in batch order.
            self._session.put_values(self._id, batch.key_batch, list(cache.values()))
        else:
            keys = list(dirty)
            self._session.put_values(self._id, batch.rows(keys), [cache[key] for key in keys])

    def fetch(self, task: TaskKeys, new: Batch | None) -> None:
        """Deferred writes: add the stored values of keys seen for the first time to the cache,
        which lives until :meth:`flush`."""
        self._batch = task
        if new is not None:
            values = self._session.get_values(self._id, new.key_batch)
            self._cache.update(zip(new.distinct, values, strict=True))

    def flush(self, evict: bool) -> None:
        """Deferred writes: write back what changed since the last flush (``evict``: and forget
        the cached values)."""
        task, dirty, cache = self._batch, self._dirty, self._cache
        self._dirty = {}
        if evict:
            self._cache = {}
            self._batch = None
        if dirty and task is not None:
            keys = list(dirty)
            self._session.put_values(self._id, task.rows(keys), [cache[key] for key in keys])

    def _load(self) -> Any:
        """The stored value of the current key when it is not cached (state got mid-batch)."""
        key = self._key()
        value = self._session.get_values(self._id, self._one(key))[0]
        self._cache[key] = value
        return value

    def _stored(self) -> Any:
        try:
            return self._cache[self._scope.key]
        except KeyError:
            return self._load()
        except TypeError:
            raise outside_keyed_context(self.name) from None

    def _set(self, value: Any) -> None:
        key = self._scope.key
        try:
            self._cache[key] = value
        except TypeError:
            raise outside_keyed_context(self.name) from None
        self._dirty[key] = None

    def clear(self) -> None:
        """Remove the current key's value."""
        self._set(None)

    def read(self, keys: KeyBatch) -> Any:
        return self._session.get_values(self._id, keys)[0]


class CachedValueState(ValueLikeState, ValueState[Any]):
    """``value``/``update`` repeat ``_stored``/``_set`` inline: they run once per record,
    and a Python call is the largest cost there."""

    __slots__ = ()

    def value(self) -> Any:
        """The current key's value, or ``None``."""
        try:
            return self._cache[self._scope.key]
        except KeyError:
            return self._load()
        except TypeError:
            raise outside_keyed_context(self.name) from None

    def update(self, value: Any) -> None:
        """Set the current key's value; ``None`` clears it."""
        key = self._scope.key
        try:
            self._cache[key] = value
        except TypeError:
            raise outside_keyed_context(self.name) from None
        self._dirty[key] = None


class ImmutableValueState(CachedValueState):
    """A value state whose values are immutable in Python (numbers, str, bytes, bool and
    tuples of those): ``update`` is one dict store, and the write-back finds changed keys
    by identity against the values fetched for the batch, which is exact for such values.
    """

    __slots__ = ("_fetched", "_stored_values")

    def __init__(self, session: Session, state_id: int, descriptor: StateDescriptor, scope: KeyedContext):
        super().__init__(session, state_id, descriptor, scope)
        self._fetched: list[Any] = []
        # Deferred writes: the stored value of every cached key, in the cache's order (keys
        # only ever join the cache at its end, here and in `_load`, so the two stay aligned):
        # a list to extend costs a fraction of a second dict as large as the cache.
        self._stored_values: list[Any] = []

    def _load(self) -> Any:
        value = super()._load()
        self._stored_values.append(value)
        return value

    def fetch(self, task: TaskKeys, new: Batch | None) -> None:
        self._batch = task
        if new is not None:
            values = self._session.get_values(self._id, new.key_batch)
            self._cache.update(zip(new.distinct, values, strict=True))
            self._stored_values.extend(values)

    def flush(self, evict: bool) -> None:
        task, cache, stored = self._batch, self._cache, self._stored_values
        self._dirty = {}
        keys = [key for (key, value), old in zip(cache.items(), stored, strict=True) if value is not old]
        if evict:
            self._cache, self._stored_values, self._batch = {}, [], None
        else:
            self._stored_values = list(cache.values())
        if keys and task is not None:
            self._session.put_values(self._id, task.rows(keys), [cache[key] for key in keys])

    def begin_batch(self, batch: Batch) -> None:
        KeyedState.begin_batch(self, batch)
        self._fetched = self._session.get_values(self._id, batch.key_batch)
        self._cache = dict(zip(batch.distinct, self._fetched, strict=True))

    def update(self, value: Any) -> None:
        """Set the current key's value; ``None`` clears it."""
        try:
            self._cache[self._scope.key] = value
        except TypeError:
            raise outside_keyed_context(self.name) from None

    def end_batch(self, write: bool = True) -> None:
        batch, cache, fetched = self._batch, self._cache, self._fetched
        self._cache, self._dirty, self._fetched, self._stored_values = {}, {}, [], []
        KeyedState.end_batch(self)
        if not write or batch is None or not cache:
            return
        if len(cache) != len(fetched):
            # Registered mid-batch: only the keys it loaded are cached; write them all.
            keys = list(cache)
            self._session.put_values(self._id, batch.rows(keys), [cache[key] for key in keys])
            return
        values = list(cache.values())  # in batch order, like `fetched`
        rows = [i for i, (new, old) in enumerate(zip(values, fetched, strict=True)) if new is not old]
        if len(rows) == len(values):
            self._session.put_values(self._id, batch.key_batch, values)
        elif rows:
            self._session.put_values(self._id, batch.key_batch.select(rows), [values[i] for i in rows])


def immutable(state_type: StateType) -> bool:
    """Whether Python values of a state type are immutable (no lists, no pickled objects)."""
    if isinstance(state_type, PickleType):
        return False
    if isinstance(state_type, pa.Field):
        metadata = state_type.metadata or {}
        if metadata.get(PICKLE_METADATA_KEY) == PICKLE_METADATA_VALUE:
            return False
        return immutable(state_type.type)
    if pa.types.is_list(state_type) or pa.types.is_large_list(state_type):
        return False
    if pa.types.is_struct(state_type):
        return all(immutable(state_type.field(i)) for i in range(state_type.num_fields))
    return True


class DefaultingValueState(CachedValueState):
    __slots__ = ("_default",)

    def __init__(
        self, session: Session, state_id: int, descriptor: ValueStateDescriptor, scope: KeyedContext
    ):
        super().__init__(session, state_id, descriptor, scope)
        self._default = descriptor.default_value

    def value(self) -> Any:
        """The current key's value, or the descriptor's default."""
        value = super().value()
        return self._default if value is None else value

    def read(self, keys: KeyBatch) -> Any:
        value = super().read(keys)
        return self._default if value is None else value


class CachedReducingState(ValueLikeState, ReducingState[Any]):
    __slots__ = ("_reduce",)

    def __init__(
        self, session: Session, state_id: int, descriptor: ReducingStateDescriptor, scope: KeyedContext
    ):
        super().__init__(session, state_id, descriptor, scope)
        self._reduce = descriptor.reduce_function

    def get(self) -> Any:
        """The reduced value of the current key, or ``None``."""
        return self._stored()

    def add(self, value: Any) -> None:
        """Fold ``value`` into the current key's value."""
        if value is None:
            raise StateError(f"cannot add None to reducing state {self.name!r}: add a value, or clear()")
        current = self._stored()
        self._set(value if current is None else self._reduce(current, value))


class CachedAggregatingState(ValueLikeState, AggregatingState[Any, Any]):
    __slots__ = ("_function",)

    def __init__(
        self,
        session: Session,
        state_id: int,
        descriptor: AggregatingStateDescriptor,
        scope: KeyedContext,
    ):
        super().__init__(session, state_id, descriptor, scope)
        self._function = descriptor.agg_function

    def get(self) -> Any:
        """The aggregate of the current key, or ``None`` if nothing was added."""
        accumulator = self._stored()
        return None if accumulator is None else self._function.get_result(accumulator)

    def add(self, value: Any) -> None:
        """Fold ``value`` into the current key's accumulator."""
        accumulator = self._stored()
        if accumulator is None:
            accumulator = self._function.create_accumulator()
        self._set(self._function.add(value, accumulator))

    def read(self, keys: KeyBatch) -> Any:
        accumulator = super().read(keys)
        return None if accumulator is None else self._function.get_result(accumulator)
