"""The per-subtask operator driver shared by ``weir.testing`` and the Spark worker.

One :class:`KeyedOperatorRunner` runs one user function for one operator
subtask against one state *session* (``weir._internal.Session``: the batched
state access of that subtask, in this process or in a state host). It knows
nothing about Spark, epochs or where the session's state lives.

API (the caller owns epochs: ``session.begin(epoch, attempt, final_epoch)``
before and ``session.commit(epoch, attempt)`` after the calls of one epoch)::

    runner = KeyedOperatorRunner(function, session, restored=False)
    runner.open()                      # initialize_state (CheckpointedFunction), then open()
    out = runner.process(elements, keys, key_groups)   # one batch, KeyedProcessFunction
    out = runner.process_arrow(batch, keys, key_groups) # one batch, VectorizedKeyedFunction
    runner.snapshot_state(checkpoint_id, timestamp_ms)  # before the session's sync snapshot
    runner.notify_checkpoint_complete(checkpoint_id)    # CheckpointListener
    runner.close()                     # close(), then writes operator state to the session

* ``process(elements, keys, key_groups=None) -> list``: ``keys[i]`` is the key
  of ``elements[i]`` (what the key selector returned: int, str, bytes, bool,
  float or a tuple of those); ``key_groups[i]`` its key group (``None``: Weir
  computes Spark's ``pmod(hash(key), max_parallelism)``). Per batch, the
  value-like states (value, reducing, aggregating) of all distinct keys are
  fetched in one session call per state; each record runs against a plain
  dict cache with its key as the current key; dirty entries are written back
  in one call per state at the end of the batch. List and map states are
  fetched per key, lazily, on first use in the batch, and written back at the
  end. Returns the function's outputs in record order.
* ``process_arrow(batch, keys, key_groups=None) -> RecordBatch | None``: the
  vectorized path; the function reads and writes state with
  ``get_batch``/``put_batch``/``aggregate`` on Arrow arrays.
* ``snapshot_state`` calls the function's ``snapshot_state`` (a
  :class:`~weir.functions.CheckpointedFunction`) and writes its operator state
  into the session; call it inside an open epoch, before the snapshot is taken.
* ``close`` also writes operator state, so a runner created for the next task
  of the same subtask (on any worker) starts from it: a Spark worker creates a
  runner per task (``open`` ... ``close``) with ``restored=True`` whenever the
  subtask has state from a checkpoint or an earlier task.
* ``close`` and ``snapshot_state`` write to the session: call them inside the
  open epoch, before ``session.commit``. On Spark a function instance lives
  for one task, so a :class:`~weir.functions.CheckpointedFunction` that keeps
  data in memory and copies it into operator state in ``snapshot_state`` (as
  Flink's ``BufferingSink`` does) needs ``snapshot_state`` at the end of every
  task that may end at a checkpoint cut, before ``close``.
* A ``process``/``process_arrow`` call that raises writes nothing of its batch;
  the caller fails the task, and the retry's ``begin`` with a new attempt drops
  whatever earlier batches of the failed attempt wrote.
* Keys: an in-process session takes the key column types from the first key
  (int -> int64 as Spark's LongType, str, bytes, bool, float -> float64, tuple
  -> one column per element); a host session is attached with the key column
  types and converts keys to them (a Python int fits an int32 column). Keys
  of other types raise :class:`~weir.exceptions.StateError`.
* ``read_keyed_state(name, key, key_group)`` reads one key's state for tests.

State is only readable while a record is processed: outside (``open``,
``initialize_state``, ``snapshot_state``) a keyed state raises
:class:`~weir.exceptions.StateError`.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

import pyarrow as pa

from weir.exceptions import InvalidArgumentError, StateError
from weir.functions import (
    BatchContext,
    BatchState,
    CheckpointedFunction,
    CheckpointListener,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    KeyedStateStore,
    RuntimeContext,
    VectorizedKeyedFunction,
)
from weir.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    OperatorStateStore,
    ReducingState,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from weir.types import Types, to_arrow_field, value_type_json

__all__ = ["KeyBatchLike", "KeyedOperatorRunner", "SessionLike"]

NATIVE_AGGREGATES: Final = ("count", "sum", "min", "max", "mean")


class KeyBatchLike(Protocol):
    """The encoded keys of one batch (``weir._internal.KeyBatch``)."""

    def __len__(self) -> int: ...
    def select(self, rows: Sequence[int]) -> KeyBatchLike: ...


class SessionLike(Protocol):
    """One subtask's batched state access (``weir._internal.Session``)."""

    @property
    def subtask(self) -> int: ...
    @property
    def parallelism(self) -> int: ...
    @property
    def max_parallelism(self) -> int: ...
    def register_state(self, descriptor_json: str) -> int: ...
    def register_operator_state(self, name: str, mode: str, item_type_json: str) -> int: ...
    def keys(self, keys: Sequence[Any], key_groups: Sequence[int] | None = None) -> Any: ...
    def get_values(self, state: int, keys: Any) -> list[Any]: ...
    def put_values(self, state: int, keys: Any, values: Sequence[Any]) -> None: ...
    def get_lists(self, state: int, keys: Any) -> list[list[Any]]: ...
    def append_lists(self, state: int, keys: Any, lists: Sequence[Sequence[Any]]) -> None: ...
    def replace_lists(self, state: int, keys: Any, lists: Sequence[Sequence[Any]]) -> None: ...
    def map_entries(self, state: int, keys: Any) -> list[dict[Any, Any]]: ...
    def map_put(self, state: int, keys: Any, user_keys: Sequence[Any], values: Sequence[Any]) -> None: ...
    def clear(self, state: int, keys: Any) -> None: ...
    def get_batch(self, state: int, keys: Any) -> bytes: ...
    def put_batch(self, state: int, keys: Any, values: bytes) -> None: ...
    def aggregate(self, state: int, keys: Any, inputs: bytes, function: str) -> bytes: ...
    def operator_state(self, state: int) -> list[Any]: ...
    def set_operator_state(self, state: int, items: Sequence[Any]) -> None: ...


class _NoKey:
    """The current key outside record processing: unhashable, so a cache lookup fails at no cost."""

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<no current key>"


_NO_KEY: Final = _NoKey()


def _outside_keyed_context(name: str) -> StateError:
    return StateError(
        f"keyed state {name!r} was used outside a keyed context: keyed state belongs to the current key "
        "and can only be read or written while a record is processed (in process_element). "
        "Get the state handle in open() and use it per record; for state that belongs to no key "
        "use operator state (implement weir.CheckpointedFunction)."
    )


class _KeyedContext(KeyedProcessFunction.Context):
    """The per-record context; its ``key`` is the current key every keyed state reads."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: Any = _NO_KEY

    def get_current_key(self) -> Any:
        if self.key is _NO_KEY:
            raise StateError("there is no current key outside process_element")
        return self.key


class _Batch:
    """The distinct keys of one batch and their encoded form."""

    __slots__ = ("_index_of", "distinct", "key_batch", "key_groups", "session")

    def __init__(self, session: SessionLike, distinct: list[Any], key_groups: list[int] | None) -> None:
        self.session = session
        self.distinct = distinct
        self.key_groups = key_groups
        self.key_batch = session.keys(distinct, key_groups)
        self._index_of: dict[Any, int] | None = None

    def rows(self, keys: Iterable[Any]) -> KeyBatchLike:
        """The encoded keys of a subset of the distinct keys."""
        if self._index_of is None:
            self._index_of = {key: i for i, key in enumerate(self.distinct)}
        index_of = self._index_of
        return self.key_batch.select([index_of[key] for key in keys])  # type: ignore[no-any-return]


class _TaskKeys(_Batch):
    """Deferred writes: every key the runner has seen since its last flush, with its key
    group (``None``: Weir computes it); encodes any of them on demand."""

    __slots__ = ("group_of",)

    def __init__(self, session: SessionLike) -> None:
        self.session = session
        self.distinct = []
        self.key_groups = None
        self.group_of: dict[Any, int | None] = {}
        self._index_of = None

    def add(self, keys: Sequence[Any], key_groups: Sequence[int] | None) -> _Batch | None:
        """Record the keys of a batch; returns the keys not seen before, encoded (``None``: none)."""
        known = self.group_of
        # Set arithmetic runs in C; the order of the new keys does not matter.
        fresh = set(keys).difference(known)
        if not fresh:
            return None
        if key_groups is None:
            new, groups = list(fresh), None
            known.update(dict.fromkeys(new))
        else:
            group_of = {key: group for key, group in zip(keys, key_groups, strict=True) if key in fresh}
            new, groups = list(group_of), list(group_of.values())
            known.update(group_of)
        return _Batch(self.session, new, groups)

    def rows(self, keys: Iterable[Any]) -> KeyBatchLike:
        keys = list(keys)
        group_of = self.group_of
        groups = [group for key in keys if (group := group_of[key]) is not None]
        # A key whose group was not given has it computed; then Weir computes every group.
        return self.session.keys(keys, groups if len(groups) == len(keys) else None)  # type: ignore[no-any-return]


class _KeyedState:
    """What every keyed state of a runner has: its id, name and batch hooks."""

    __slots__ = ("_batch", "_id", "_scope", "_session", "descriptor", "name")

    def __init__(
        self, session: SessionLike, state_id: int, descriptor: StateDescriptor, scope: _KeyedContext
    ):
        self._session = session
        self._id = state_id
        self._scope = scope
        self._batch: _Batch | None = None
        self.descriptor = descriptor
        self.name = descriptor.name

    def _key(self) -> Any:
        key = self._scope.key
        if key is _NO_KEY:
            raise _outside_keyed_context(self.name)
        return key

    def _one(self, key: Any) -> KeyBatchLike:
        batch = self._batch
        if batch is None:
            raise _outside_keyed_context(self.name)
        return batch.rows((key,))

    def begin_batch(self, batch: _Batch) -> None:
        self._batch = batch

    def end_batch(self, write: bool = True) -> None:
        """Leave the batch; write back its changes unless the batch failed (``write=False``)."""
        self._batch = None

    def read(self, keys: KeyBatchLike) -> Any:
        """The state of a one-row key batch, as the function would see it."""
        raise NotImplementedError


class _ValueLikeState(_KeyedState):
    """Value, reducing and aggregating state: prefetched per batch, dict cache, batched write-back."""

    __slots__ = ("_cache", "_dirty")

    def __init__(
        self, session: SessionLike, state_id: int, descriptor: StateDescriptor, scope: _KeyedContext
    ):
        super().__init__(session, state_id, descriptor, scope)
        self._cache: dict[Any, Any] = {}
        # A dict, not a set: `d[k] = None` is one bytecode, `s.add(k)` a method call.
        self._dirty: dict[Any, None] = {}

    def begin_batch(self, batch: _Batch) -> None:
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

    def fetch(self, task: _TaskKeys, new: _Batch | None) -> None:
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
            raise _outside_keyed_context(self.name) from None

    def _set(self, value: Any) -> None:
        key = self._scope.key
        try:
            self._cache[key] = value
        except TypeError:
            raise _outside_keyed_context(self.name) from None
        self._dirty[key] = None

    def clear(self) -> None:
        """Remove the current key's value."""
        self._set(None)

    def read(self, keys: KeyBatchLike) -> Any:
        return self._session.get_values(self._id, keys)[0]


class _ValueState(_ValueLikeState, ValueState[Any]):
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
            raise _outside_keyed_context(self.name) from None

    def update(self, value: Any) -> None:
        """Set the current key's value; ``None`` clears it."""
        key = self._scope.key
        try:
            self._cache[key] = value
        except TypeError:
            raise _outside_keyed_context(self.name) from None
        self._dirty[key] = None


class _ImmutableValueState(_ValueState):
    """A value state whose values are immutable in Python (numbers, str, bytes, bool and
    tuples of those): ``update`` is one dict store, and the write-back finds changed keys
    by identity against the values fetched for the batch, which is exact for such values.
    """

    __slots__ = ("_fetched", "_stored_values")

    def __init__(
        self, session: SessionLike, state_id: int, descriptor: StateDescriptor, scope: _KeyedContext
    ):
        super().__init__(session, state_id, descriptor, scope)
        self._fetched: list[Any] = []
        # Deferred writes: the stored value of every cached key (what the cache is compared with).
        self._stored_values: dict[Any, Any] = {}

    def _load(self) -> Any:
        value = super()._load()
        self._stored_values[self._scope.key] = value
        return value

    def fetch(self, task: _TaskKeys, new: _Batch | None) -> None:
        self._batch = task
        if new is not None:
            values = self._session.get_values(self._id, new.key_batch)
            self._cache.update(zip(new.distinct, values, strict=True))
            self._stored_values.update(zip(new.distinct, values, strict=True))

    def flush(self, evict: bool) -> None:
        task, cache, stored = self._batch, self._cache, self._stored_values
        self._dirty = {}
        keys = [key for key, value in cache.items() if value is not stored[key]]
        if evict:
            self._cache, self._stored_values, self._batch = {}, {}, None
        else:
            self._stored_values = cache.copy()
        if keys and task is not None:
            self._session.put_values(self._id, task.rows(keys), [cache[key] for key in keys])

    def begin_batch(self, batch: _Batch) -> None:
        _KeyedState.begin_batch(self, batch)
        self._fetched = self._session.get_values(self._id, batch.key_batch)
        self._cache = dict(zip(batch.distinct, self._fetched, strict=True))

    def update(self, value: Any) -> None:
        """Set the current key's value; ``None`` clears it."""
        try:
            self._cache[self._scope.key] = value
        except TypeError:
            raise _outside_keyed_context(self.name) from None

    def end_batch(self, write: bool = True) -> None:
        batch, cache, fetched = self._batch, self._cache, self._fetched
        self._cache, self._dirty, self._fetched, self._stored_values = {}, {}, [], {}
        _KeyedState.end_batch(self)
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


def _immutable(value_type: dict[str, Any]) -> bool:
    """Whether Python values of an engine type are immutable (no lists, no pickled objects)."""
    kind = value_type["type"]
    if kind in ("list", "pickle"):
        return False
    if kind == "struct":
        return all(_immutable(field["data_type"]) for field in value_type["fields"])
    return True


class _ValueStateWithDefault(_ValueState):
    __slots__ = ("_default",)

    def __init__(
        self, session: SessionLike, state_id: int, descriptor: ValueStateDescriptor, scope: _KeyedContext
    ):
        super().__init__(session, state_id, descriptor, scope)
        self._default = descriptor.default_value

    def value(self) -> Any:
        """The current key's value, or the descriptor's default."""
        value = super().value()
        return self._default if value is None else value

    def read(self, keys: KeyBatchLike) -> Any:
        value = super().read(keys)
        return self._default if value is None else value


class _ReducingState(_ValueLikeState, ReducingState[Any]):
    __slots__ = ("_reduce",)

    def __init__(
        self, session: SessionLike, state_id: int, descriptor: ReducingStateDescriptor, scope: _KeyedContext
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


class _AggregatingState(_ValueLikeState, AggregatingState[Any, Any]):
    __slots__ = ("_function",)

    def __init__(
        self,
        session: SessionLike,
        state_id: int,
        descriptor: AggregatingStateDescriptor,
        scope: _KeyedContext,
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

    def read(self, keys: KeyBatchLike) -> Any:
        accumulator = super().read(keys)
        return None if accumulator is None else self._function.get_result(accumulator)


class _ListState(_KeyedState, ListState[Any]):
    """Lists are fetched per key on first read; appends to unread lists never fetch."""

    __slots__ = ("_appends", "_lists", "_replaced")

    def __init__(
        self, session: SessionLike, state_id: int, descriptor: StateDescriptor, scope: _KeyedContext
    ):
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

    def read(self, keys: KeyBatchLike) -> Any:
        return self._session.get_lists(self._id, keys)[0]


_REMOVED: Final = object()


class _MapState(_KeyedState, MapState[Any, Any]):
    """Maps are fetched whole per key on first use in a batch; changed entries are written back."""

    __slots__ = ("_changes", "_cleared", "_maps")

    def __init__(
        self, session: SessionLike, state_id: int, descriptor: StateDescriptor, scope: _KeyedContext
    ):
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

    def read(self, keys: KeyBatchLike) -> Any:
        return self._session.map_entries(self._id, keys)[0]


def _ipc_bytes(array: pa.Array | pa.ChunkedArray, field: pa.Field) -> bytes:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    batch = pa.RecordBatch.from_arrays([array], schema=pa.schema([field.with_type(array.type)]))
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _ipc_array(data: bytes) -> pa.Array:
    reader = pa.ipc.open_stream(data)
    table = reader.read_all()
    return table.column(0).combine_chunks()


class _BatchKeys:
    """``ctx.keys`` of a vectorized batch: the encoded keys and their values."""

    __slots__ = ("key_batch", "values")

    def __init__(self, key_batch: Any, values: list[Any]) -> None:
        self.key_batch = key_batch
        self.values = values

    def __len__(self) -> int:
        return len(self.values)


class _BatchContext(BatchContext):
    __slots__ = ("_keys",)

    def __init__(self, keys: _BatchKeys) -> None:
        self._keys = keys

    @property
    def keys(self) -> _BatchKeys:
        return self._keys

    def key_values(self) -> list[Any]:
        return list(self._keys.values)


class _BatchState(BatchState):
    """A value-like keyed state of a vectorized function."""

    __slots__ = ("_field", "_id", "_session", "name")

    def __init__(self, session: SessionLike, state_id: int, descriptor: StateDescriptor) -> None:
        self._session = session
        self._id = state_id
        self._field = to_arrow_field(descriptor.type_info)
        self.name = descriptor.name

    def _keys(self, keys: Any) -> Any:
        if isinstance(keys, _BatchKeys):
            return keys.key_batch
        if isinstance(keys, pa.Array | pa.ChunkedArray):
            keys = keys.to_pylist()
        return self._session.keys(list(keys), None)

    def get_batch(self, keys: Any) -> pa.Array:
        return _ipc_array(self._session.get_batch(self._id, self._keys(keys)))

    def put_batch(self, keys: Any, values: pa.Array) -> None:
        key_batch = self._keys(keys)
        if len(values) != len(key_batch):
            raise InvalidArgumentError(
                f"put_batch on state {self.name!r} got {len(values)} values for {len(key_batch)} keys: "
                "pass one value per key"
            )
        self._session.put_batch(self._id, key_batch, _ipc_bytes(values, self._field))

    def aggregate(self, keys: Any, inputs: pa.Array, function: str) -> pa.Array:
        if function not in NATIVE_AGGREGATES:
            raise InvalidArgumentError(
                f"aggregate function {function!r} is unknown: use one of {', '.join(NATIVE_AGGREGATES)}"
            )
        key_batch = self._keys(keys)
        if len(inputs) != len(key_batch):
            raise InvalidArgumentError(
                f"aggregate on state {self.name!r} got {len(inputs)} inputs for {len(key_batch)} keys: "
                "pass one input per key"
            )
        data = _ipc_bytes(inputs, pa.field("input", inputs.type))
        return _ipc_array(self._session.aggregate(self._id, key_batch, data, function))

    def clear_batch(self, keys: Any) -> None:
        self._session.clear(self._id, self._keys(keys))


class _OperatorListState(ListState[Any]):
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


class _BroadcastState(BroadcastState[Any, Any]):
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


class _OperatorStateStore(OperatorStateStore):
    def __init__(self, runner: KeyedOperatorRunner) -> None:
        self._runner = runner

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._runner._operator_list(state_descriptor, "split")

    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._runner._operator_list(state_descriptor, "union")

    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState[Any, Any]:
        return self._runner._broadcast(state_descriptor)


class _InitializationContext(FunctionInitializationContext):
    def __init__(self, runner: KeyedOperatorRunner, restored: bool) -> None:
        self._runner = runner
        self._restored = restored

    def is_restored(self) -> bool:
        return self._restored

    def get_operator_state_store(self) -> OperatorStateStore:
        return _OperatorStateStore(self._runner)

    def get_keyed_state_store(self) -> KeyedStateStore:
        return self._runner.runtime_context


class _SnapshotContext(FunctionSnapshotContext):
    def __init__(self, checkpoint_id: int, timestamp_ms: int) -> None:
        self._checkpoint_id = checkpoint_id
        self._timestamp_ms = timestamp_ms

    def get_checkpoint_id(self) -> int:
        return self._checkpoint_id

    def get_checkpoint_timestamp(self) -> int:
        return self._timestamp_ms


class _RuntimeContext(RuntimeContext):
    def __init__(self, runner: KeyedOperatorRunner) -> None:
        self._runner = runner

    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState[Any]:
        return self._runner._keyed_state(state_descriptor, ValueStateDescriptor)  # type: ignore[no-any-return]

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        return self._runner._keyed_state(state_descriptor, ListStateDescriptor)  # type: ignore[no-any-return]

    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState[Any, Any]:
        return self._runner._keyed_state(state_descriptor, MapStateDescriptor)  # type: ignore[no-any-return]

    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState[Any]:
        return self._runner._keyed_state(state_descriptor, ReducingStateDescriptor)  # type: ignore[no-any-return]

    def get_aggregating_state(
        self, state_descriptor: AggregatingStateDescriptor
    ) -> AggregatingState[Any, Any]:
        return self._runner._keyed_state(state_descriptor, AggregatingStateDescriptor)  # type: ignore[no-any-return]

    def get_index_of_this_subtask(self) -> int:
        return self._runner.session.subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self._runner.session.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self._runner.session.max_parallelism


_KEYED_STATE_CLASSES: Final[dict[type[StateDescriptor], Callable[..., _KeyedState]]] = {
    ValueStateDescriptor: _ValueState,
    ListStateDescriptor: _ListState,
    MapStateDescriptor: _MapState,
    ReducingStateDescriptor: _ReducingState,
    AggregatingStateDescriptor: _AggregatingState,
}


class KeyedOperatorRunner:
    """Runs one user function for one operator subtask against a state session.

    Args:
        function: A :class:`~weir.functions.KeyedProcessFunction` or a
            :class:`~weir.functions.VectorizedKeyedFunction`; it may also be a
            :class:`~weir.functions.CheckpointedFunction` and a
            :class:`~weir.functions.CheckpointListener`.
        session: The subtask's state session (``weir._internal.Session``).
        restored: Whether the session holds state from a checkpoint, savepoint
            or an earlier task (``is_restored()`` in ``initialize_state``).
        defer_writes: Keep the values of value, reducing and aggregating state
            cached across ``process`` calls and write back what changed only in
            ``snapshot_state``, ``close`` and :meth:`flush` (or once the cache
            holds ``DEFERRED_KEYS`` keys): a key's state is fetched once per
            task, not once per batch. Only for a caller that fails the whole
            task (so the session drops its writes) when a ``process`` call
            raises, as a Spark task does; a runner whose ``process`` raised
            writes nothing more.

    See the module docstring for the protocol.
    """

    def __init__(
        self,
        function: KeyedProcessFunction | VectorizedKeyedFunction,
        session: SessionLike,
        *,
        restored: bool = False,
        defer_writes: bool = False,
    ) -> None:
        if not isinstance(function, KeyedProcessFunction | VectorizedKeyedFunction):
            raise InvalidArgumentError(
                f"{type(function).__name__} is not a keyed function: subclass weir.KeyedProcessFunction "
                "(per record) or weir.VectorizedKeyedFunction (per Arrow batch)"
            )
        self.function = function
        self.session = session
        self.restored = restored
        self.vectorized = isinstance(function, VectorizedKeyedFunction)
        self.runtime_context: _RuntimeContext = _RuntimeContext(self)
        self._scope = _KeyedContext()
        self._keyed: dict[str, tuple[str, _KeyedState | _BatchState]] = {}
        self._value_like: list[_ValueLikeState] = []
        self._other_keyed: list[_KeyedState] = []
        self._operator: dict[str, tuple[str, str, int, _OperatorListState | _BroadcastState]] = {}
        self._opened = False
        self._closed = False
        self._task_keys: _TaskKeys | None = _TaskKeys(session) if defer_writes else None
        self._failed = False

    # -- state registration -------------------------------------------------------------------

    def _keyed_state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        if not isinstance(descriptor, expected):
            raise InvalidArgumentError(
                f"expected a {expected.__name__}, got {type(descriptor).__name__} {descriptor.name!r}: "
                "use the get_..._state method matching the descriptor"
            )
        descriptor_json = descriptor.descriptor_json()
        existing = self._keyed.get(descriptor.name)
        if existing is not None:
            if existing[0] != descriptor_json:
                raise StateError(
                    f"state {descriptor.name!r} is already registered with another descriptor "
                    f"(registered: {existing[0]}; now: {descriptor_json}): a state name may be used for "
                    "one state only; give the new state its own name"
                )
            return existing[1]
        if self.vectorized:
            if not isinstance(descriptor, ValueStateDescriptor):
                raise StateError(
                    f"state {descriptor.name!r}: a VectorizedKeyedFunction reads and writes whole batches "
                    "of value state; use runtime_context.get_state(ValueStateDescriptor(...))"
                )
            state_id = self.session.register_state(descriptor_json)
            batch_state = _BatchState(self.session, state_id, descriptor)
            self._keyed[descriptor.name] = (descriptor_json, batch_state)
            return batch_state
        state_id = self.session.register_state(descriptor_json)
        cls: Callable[..., _KeyedState] = _KEYED_STATE_CLASSES[type(descriptor)]
        if isinstance(descriptor, ValueStateDescriptor):
            if descriptor.default_value is not None:
                cls = _ValueStateWithDefault
            elif _immutable(json.loads(descriptor_json)["value_type"]):
                cls = _ImmutableValueState
        state = cls(self.session, state_id, descriptor, self._scope)
        self._keyed[descriptor.name] = (descriptor_json, state)
        if isinstance(state, _ValueLikeState):
            self._value_like.append(state)
        else:
            self._other_keyed.append(state)
        batch = self._current_batch
        if batch is not None:
            # Registered while a batch runs: join it; the state loads keys on demand.
            state._batch = batch
        return state

    def _operator_registration(
        self, descriptor: StateDescriptor, mode: str, item_type: str
    ) -> tuple[int, bool]:
        """The state id, and whether the state was registered before (then the same object is returned)."""
        existing = self._operator.get(descriptor.name)
        if existing is not None:
            if existing[:2] != (mode, item_type):
                raise StateError(
                    f"operator state {descriptor.name!r} is already registered as {existing[0]} state of "
                    f"{existing[1]}; now asked for as {mode} state of {item_type}: give each operator state "
                    "its own name"
                )
            return existing[2], True
        return self.session.register_operator_state(descriptor.name, mode, item_type), False

    def _operator_list(self, descriptor: ListStateDescriptor, mode: str) -> ListState[Any]:
        if not isinstance(descriptor, ListStateDescriptor):
            raise InvalidArgumentError(f"operator list state needs a ListStateDescriptor, got {descriptor!r}")
        item_type = value_type_json(descriptor.type_info)
        state_id, known = self._operator_registration(descriptor, mode, item_type)
        if known:
            return self._operator[descriptor.name][3]  # type: ignore[return-value]
        state = _OperatorListState(descriptor.name, self.session.operator_state(state_id))
        self._operator[descriptor.name] = (mode, item_type, state_id, state)
        return state

    def _broadcast(self, descriptor: MapStateDescriptor) -> BroadcastState[Any, Any]:
        if not isinstance(descriptor, MapStateDescriptor):
            raise InvalidArgumentError(f"broadcast state needs a MapStateDescriptor, got {descriptor!r}")
        entry_type = Types.ROW_NAMED(["key", "value"], [descriptor.key_type_info, descriptor.value_type_info])
        item_type = value_type_json(entry_type)
        state_id, known = self._operator_registration(descriptor, "broadcast", item_type)
        if known:
            return self._operator[descriptor.name][3]  # type: ignore[return-value]
        entries = dict(self.session.operator_state(state_id))
        state = _BroadcastState(descriptor.name, entries)
        self._operator[descriptor.name] = ("broadcast", item_type, state_id, state)
        return state

    def _flush_operator_state(self) -> None:
        for _mode, _item_type, state_id, state in self._operator.values():
            self.session.set_operator_state(state_id, state.snapshot_items())

    # -- lifecycle ---------------------------------------------------------------------------

    _current_batch: _Batch | None = None

    def open(self) -> None:
        """``initialize_state`` (for a CheckpointedFunction), then the function's ``open``."""
        if self._opened:
            raise StateError("this runner is already open; create one runner per task")
        self._opened = True
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(_InitializationContext(self, self.restored))
        self.function.open(self.runtime_context)

    def process(
        self, elements: Sequence[Any], keys: Sequence[Any], key_groups: Sequence[int] | None = None
    ) -> list[Any]:
        """Run ``process_element`` for each element; see the module docstring."""
        function = self.function
        if not isinstance(function, KeyedProcessFunction):
            raise InvalidArgumentError(
                f"{type(function).__name__} is a VectorizedKeyedFunction: call process_arrow with a batch"
            )
        if not self._opened or self._closed:
            raise StateError("call open() before process() and do not use a runner after close()")
        if len(elements) != len(keys) or (key_groups is not None and len(key_groups) != len(keys)):
            raise InvalidArgumentError(
                f"process got {len(elements)} elements, {len(keys)} keys and "
                f"{'no' if key_groups is None else len(key_groups)} key groups: pass one key "
                "(and key group) per element"
            )
        if not elements:
            return []
        if self._failed:
            raise StateError("a process() call of this runner failed: fail the task and retry it")
        task_keys = self._task_keys
        scope_: _BatchScope | _DeferredScope
        if task_keys is not None:
            scope_ = _DeferredScope(self, task_keys, task_keys.add(keys, key_groups))
        elif key_groups is None:
            distinct = list(dict.fromkeys(keys))
            scope_ = self._batch(_Batch(self.session, distinct, None))
        else:
            group_of = dict(zip(keys, key_groups, strict=True))
            scope_ = self._batch(_Batch(self.session, list(group_of), list(group_of.values())))
        with scope_:
            out: list[Any] = []
            extend = out.extend
            scope = self._scope
            process_element = function.process_element
            # Lengths were checked above; strict zip would only cost time here.
            for value, key in zip(elements, keys, strict=False):
                scope.key = key
                result = process_element(value, scope)
                if result is not None:
                    extend(result)
            scope.key = _NO_KEY
        return out

    def process_arrow(
        self,
        batch: pa.RecordBatch,
        keys: Sequence[Any] | pa.Array | pa.ChunkedArray,
        key_groups: Sequence[int] | None = None,
    ) -> pa.RecordBatch | None:
        """Run ``process_batch`` of a vectorized function on one batch; ``keys`` has one key per row."""
        function = self.function
        if not isinstance(function, VectorizedKeyedFunction):
            raise InvalidArgumentError(
                f"{type(function).__name__} is a KeyedProcessFunction: call process with the records"
            )
        if not self._opened or self._closed:
            raise StateError("call open() before process_arrow() and do not use a runner after close()")
        key_values = keys.to_pylist() if isinstance(keys, pa.Array | pa.ChunkedArray) else list(keys)
        if len(key_values) != batch.num_rows:
            raise InvalidArgumentError(
                f"process_arrow got {len(key_values)} keys for {batch.num_rows} rows: pass one key per row"
            )
        key_batch = self.session.keys(key_values, None if key_groups is None else list(key_groups))
        return function.process_batch(batch, _BatchContext(_BatchKeys(key_batch, key_values)))

    def _batch(self, batch: _Batch) -> _BatchScope:
        return _BatchScope(self, batch)

    DEFERRED_KEYS: Final = 1_000_000
    """With deferred writes: flush and empty the caches once they hold this many keys."""

    def flush(self, evict: bool = False) -> None:
        """With deferred writes: write back the changes of value, reducing and aggregating
        state (``evict``: and empty the caches); nothing otherwise."""
        task_keys = self._task_keys
        if task_keys is None or self._failed:
            return
        for state in self._value_like:
            state.flush(evict)
        if evict:
            task_keys.group_of = {}

    def snapshot_state(self, checkpoint_id: int, timestamp_ms: int | None = None) -> None:
        """The function's ``snapshot_state``, then its operator state into the session."""
        if isinstance(self.function, CheckpointedFunction):
            stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
            self.function.snapshot_state(_SnapshotContext(checkpoint_id, stamp))
        self.flush()
        self._flush_operator_state()

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Tell a :class:`~weir.functions.CheckpointListener` that a checkpoint completed."""
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Tell a :class:`~weir.functions.CheckpointListener` that a checkpoint was aborted."""
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_aborted(checkpoint_id)

    def close(self) -> None:
        """The function's ``close``, then its operator state into the session (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._opened:
                self.function.close()
        finally:
            self.flush(evict=True)
            self._flush_operator_state()

    # -- inspection --------------------------------------------------------------------------

    def state_names(self) -> list[str]:
        """The names of the keyed states the function registered."""
        return list(self._keyed)

    def keyed_descriptor_json(self, name: str) -> str | None:
        """The descriptor JSON keyed state ``name`` was registered with, if any."""
        entry = self._keyed.get(name)
        return None if entry is None else entry[0]

    def read_keyed_state(self, name: str, key: Any, key_group: int | None = None) -> Any:
        """One key's state as the function sees it: value, list, dict, reduced or aggregate result.

        Raises:
            StateError: If the function registered no keyed state ``name``.
        """
        entry = self._keyed.get(name)
        if entry is None:
            known = ", ".join(repr(n) for n in self._keyed) or "none"
            raise StateError(f"the function has no keyed state {name!r} (registered: {known})")
        state = entry[1]
        self.flush()
        key_batch = self.session.keys([key], None if key_group is None else [key_group])
        if isinstance(state, _BatchState):
            return state.get_batch(_BatchKeys(key_batch, [key]))[0].as_py()
        return state.read(key_batch)


class _BatchScope:
    """Prefetches on enter; writes back on a clean exit."""

    def __init__(self, runner: KeyedOperatorRunner, batch: _Batch) -> None:
        self._runner = runner
        self._batch = batch

    def __enter__(self) -> None:
        runner = self._runner
        runner._current_batch = self._batch
        for state in runner._value_like:
            state.begin_batch(self._batch)
        for other in runner._other_keyed:
            other.begin_batch(self._batch)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        runner = self._runner
        runner._current_batch = None
        runner._scope.key = _NO_KEY
        # A failed batch writes nothing: the caller fails the task and the epoch is retried.
        write = exc_type is None
        for state in [*runner._value_like, *runner._other_keyed]:
            state.end_batch(write)


class _DeferredScope:
    """A ``process`` call with deferred writes: fetches the batch's new keys into the caches;
    list and map state work per batch as without; a failure marks the runner failed."""

    def __init__(self, runner: KeyedOperatorRunner, task_keys: _TaskKeys, new: _Batch | None) -> None:
        self._runner = runner
        self._task_keys = task_keys
        self._new = new

    def __enter__(self) -> None:
        runner, task_keys = self._runner, self._task_keys
        runner._current_batch = task_keys
        for state in runner._value_like:
            state.fetch(task_keys, self._new)
        for other in runner._other_keyed:
            other.begin_batch(task_keys)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        runner = self._runner
        runner._current_batch = None
        runner._scope.key = _NO_KEY
        write = exc_type is None
        if not write:
            runner._failed = True
        for other in runner._other_keyed:
            other.end_batch(write)
        if write and len(self._task_keys.group_of) >= runner.DEFERRED_KEYS:
            runner.flush(evict=True)
