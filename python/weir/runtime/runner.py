"""The per-subtask operator driver: :class:`OperatorRunner` (see :mod:`weir.runtime`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import pyarrow as pa

from weir._internal import KeyBatch, Session, ValueType
from weir._internal import StateDescriptor as NativeDescriptor
from weir.exceptions import InvalidArgumentError, StateError
from weir.functions import (
    CheckpointedFunction,
    CheckpointListener,
    KeyedProcessFunction,
    ProcessFunction,
    VectorizedKeyedFunction,
)
from weir.runtime.contexts import InitializationContext, SnapshotContext, SubtaskRuntimeContext
from weir.runtime.keyed_state import KeyedListState, KeyedMapState, KeyedState
from weir.runtime.keys import NO_KEY, Batch, KeyedContext, TaskKeys
from weir.runtime.operator_state import OperatorBroadcastState, OperatorListState
from weir.runtime.raw_state import RawState
from weir.runtime.value_state import (
    CachedAggregatingState,
    CachedReducingState,
    CachedValueState,
    DefaultingValueState,
    ImmutableValueState,
    ValueLikeState,
    immutable,
)
from weir.runtime.vectorized import BatchKeys, VectorizedContext, VectorizedState, arrow_batch_keys
from weir.state import (
    AggregatingStateDescriptor,
    BroadcastState,
    ListState,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from weir.types import Types, value_type

__all__ = ["OperatorRunner"]


_KEYED_STATE_CLASSES: Final[dict[type[StateDescriptor], Callable[..., KeyedState]]] = {
    ValueStateDescriptor: CachedValueState,
    ListStateDescriptor: KeyedListState,
    MapStateDescriptor: KeyedMapState,
    ReducingStateDescriptor: CachedReducingState,
    AggregatingStateDescriptor: CachedAggregatingState,
}


class OperatorRunner:
    """Runs one user function for one operator subtask against a state session.

    Args:
        function: A :class:`~weir.functions.KeyedProcessFunction`, a
            :class:`~weir.functions.VectorizedKeyedFunction` or (not keyed) a
            :class:`~weir.functions.ProcessFunction`; it may also be a
            :class:`~weir.functions.CheckpointedFunction` and a
            :class:`~weir.functions.CheckpointListener`.
        session: The subtask's state session (``weir._internal.Session``).
        restored: Whether the session holds state from a checkpoint, savepoint
            or an earlier task (``is_restored()`` in ``initialize_state``).
        defer_writes: Keep the values of value, reducing and aggregating state
            cached across ``process`` calls and write back what changed only in
            ``snapshot_state``, ``close`` and :meth:`flush` (or once the cache
            holds ``DEFERRED_KEYS`` keys): a key's state is fetched once per
            task, not once per batch (a state first got in ``process_element``
            fetches the keys met before at once). Only for a caller that fails the whole
            task (so the session drops its writes) when a ``process`` call
            raises, as a Spark task does; a runner whose ``process`` raised
            writes nothing more.
        check_keys: Called with the keys of each batch as the runner encodes
            them (with deferred writes, only keys the task has not seen
            before), before any state is read; it raises to refuse them. A
            Spark task checks there that its rows belong to its subtask.

    See the module docstring for the protocol.
    """

    def __init__(
        self,
        function: KeyedProcessFunction | VectorizedKeyedFunction | ProcessFunction,
        session: Session,
        *,
        restored: bool = False,
        defer_writes: bool = False,
        check_keys: Callable[[KeyBatch], object] | None = None,
    ) -> None:
        if not isinstance(function, KeyedProcessFunction | VectorizedKeyedFunction | ProcessFunction):
            raise InvalidArgumentError(
                f"{type(function).__name__} is not a Weir function: subclass weir.KeyedProcessFunction "
                "(per record) or weir.VectorizedKeyedFunction (per Arrow batch) after key_by, or "
                "weir.ProcessFunction on a stream that is not keyed"
            )
        self.function = function
        self.session = session
        self.restored = restored
        self.keyed = not isinstance(function, ProcessFunction)
        self.vectorized = isinstance(function, VectorizedKeyedFunction)
        self.raw = RawState(session, keyed=self.keyed)
        self.runtime_context: SubtaskRuntimeContext = SubtaskRuntimeContext(self)
        self._scope = KeyedContext()
        self._keyed: dict[str, tuple[NativeDescriptor, KeyedState | VectorizedState]] = {}
        self._value_like: list[ValueLikeState] = []
        self._other_keyed: list[KeyedState] = []
        self._operator: dict[str, tuple[str, ValueType, int, OperatorListState | OperatorBroadcastState]] = {}
        self._opened = False
        self._closed = False
        self._task_keys: TaskKeys | None = TaskKeys(session) if defer_writes else None
        self._check_keys = check_keys
        self._failed = False

    # -- state registration -------------------------------------------------------------------

    def keyed_state(self, descriptor: StateDescriptor, expected: type[StateDescriptor]) -> Any:
        if not isinstance(descriptor, expected):
            raise InvalidArgumentError(
                f"expected a {expected.__name__}, got {type(descriptor).__name__} {descriptor.name!r}: "
                "use the get_..._state method matching the descriptor"
            )
        if not self.keyed:
            raise StateError(
                f"state {descriptor.name!r}: a ProcessFunction runs on a stream that is not keyed, so it "
                "has no keyed state; key_by(...) before process(...), or keep operator state "
                "(CheckpointedFunction)"
            )
        native = descriptor.native
        existing = self._keyed.get(descriptor.name)
        if existing is not None:
            if existing[0] != native:
                raise StateError(
                    f"state {descriptor.name!r} is already registered with another descriptor "
                    f"(registered: {existing[0]!r}; now: {native!r}): a state name may be used for "
                    "one state only; give the new state its own name"
                )
            return existing[1]
        if self.vectorized:
            if not isinstance(descriptor, ValueStateDescriptor):
                raise StateError(
                    f"state {descriptor.name!r}: a VectorizedKeyedFunction reads and writes whole batches "
                    "of value state; use runtime_context.get_state(ValueStateDescriptor(...))"
                )
            state_id = self.session.register_state(native)
            batch_state = VectorizedState(self.session, state_id, descriptor)
            self._keyed[descriptor.name] = (native, batch_state)
            return batch_state
        state_id = self.session.register_state(native)
        cls: Callable[..., KeyedState] = _KEYED_STATE_CLASSES[type(descriptor)]
        if isinstance(descriptor, ValueStateDescriptor):
            if descriptor.default_value is not None:
                cls = DefaultingValueState
            elif immutable(descriptor.type_info):
                cls = ImmutableValueState
        state = cls(self.session, state_id, descriptor, self._scope)
        self._keyed[descriptor.name] = (native, state)
        task_keys = self._task_keys
        if isinstance(state, ValueLikeState):
            self._value_like.append(state)
            if task_keys is not None and task_keys.group_of:
                # Deferred writes cache every key the task met, and the cache is what the
                # write-back compares with: a state registered after some keys (lazily, in
                # process_element) fetches them now, as one registered in open() did.
                state.fetch(task_keys, task_keys.known())
                return state
        else:
            self._other_keyed.append(state)
        batch = self._current_batch
        if batch is not None:
            # Registered while a batch runs: join it; the state loads keys on demand.
            state._batch = batch
        return state

    def _operator_registration(
        self, descriptor: StateDescriptor, mode: str, item_type: ValueType
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

    def operator_list(self, descriptor: ListStateDescriptor, mode: str) -> ListState[Any]:
        if not isinstance(descriptor, ListStateDescriptor):
            raise InvalidArgumentError(f"operator list state needs a ListStateDescriptor, got {descriptor!r}")
        item_type = value_type(descriptor.type_info)
        state_id, known = self._operator_registration(descriptor, mode, item_type)
        if known:
            return self._operator[descriptor.name][3]  # type: ignore[return-value]
        state = OperatorListState(descriptor.name, self.session.operator_state(state_id))
        self._operator[descriptor.name] = (mode, item_type, state_id, state)
        return state

    def broadcast(self, descriptor: MapStateDescriptor) -> BroadcastState[Any, Any]:
        if not isinstance(descriptor, MapStateDescriptor):
            raise InvalidArgumentError(f"broadcast state needs a MapStateDescriptor, got {descriptor!r}")
        entry_type = Types.ROW_NAMED(["key", "value"], [descriptor.key_type_info, descriptor.value_type_info])
        item_type = value_type(entry_type)
        state_id, known = self._operator_registration(descriptor, "broadcast", item_type)
        if known:
            return self._operator[descriptor.name][3]  # type: ignore[return-value]
        entries = dict(self.session.operator_state(state_id))
        state = OperatorBroadcastState(descriptor.name, entries)
        self._operator[descriptor.name] = ("broadcast", item_type, state_id, state)
        return state

    def _flush_operator_state(self) -> None:
        for _mode, _item_type, state_id, state in self._operator.values():
            self.session.set_operator_state(state_id, state.snapshot_items())
        self.raw.write()

    # -- lifecycle ---------------------------------------------------------------------------

    _current_batch: Batch | None = None

    def open(self) -> None:
        """``initialize_state`` (for a CheckpointedFunction), then the function's ``open``."""
        if self._opened:
            raise StateError("this runner is already open; create one runner per task")
        self._opened = True
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(InitializationContext(self, self.restored))
        self.function.open(self.runtime_context)

    def process(
        self, elements: Sequence[Any], keys: Sequence[Any] = (), key_groups: Sequence[int] | None = None
    ) -> list[Any]:
        """Run ``process_element`` for each element; see the module docstring."""
        function = self.function
        if isinstance(function, ProcessFunction):
            return self._process_unkeyed(function, elements)
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
            new = task_keys.add(keys, key_groups)
            if new is not None:
                self._checked(new.key_batch)
            scope_ = _DeferredScope(self, task_keys, new)
        else:
            if key_groups is None:
                batch = Batch(self.session, list(dict.fromkeys(keys)), None)
            else:
                group_of = dict(zip(keys, key_groups, strict=True))
                batch = Batch(self.session, list(group_of), list(group_of.values()))
            self._checked(batch.key_batch)
            scope_ = self._batch(batch)
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
            scope.key = NO_KEY
        return out

    def _process_unkeyed(self, function: ProcessFunction, elements: Sequence[Any]) -> list[Any]:
        if not self._opened or self._closed:
            raise StateError("call open() before process() and do not use a runner after close()")
        out: list[Any] = []
        context = _SubtaskContext(self.session.subtask)
        process_element = function.process_element
        for value in elements:
            result = process_element(value, context)
            if result is not None:
                out.extend(result)
        return out

    def process_arrow(
        self,
        batch: pa.RecordBatch,
        keys: Sequence[Any] | pa.Array | pa.ChunkedArray | pa.RecordBatch,
        key_groups: Sequence[int] | pa.Array | None = None,
    ) -> pa.RecordBatch | None:
        """Run ``process_batch`` of a vectorized function on one batch; ``keys`` has one key per
        row: Python keys, an Arrow array of them, or a batch of key columns (a composite key)."""
        function = self.function
        if not isinstance(function, VectorizedKeyedFunction):
            raise InvalidArgumentError(
                f"{type(function).__name__} is a KeyedProcessFunction: call process with the records"
            )
        if not self._opened or self._closed:
            raise StateError("call open() before process_arrow() and do not use a runner after close()")
        if isinstance(keys, pa.Array | pa.ChunkedArray | pa.RecordBatch):
            batch_keys = arrow_batch_keys(self.session, keys, key_groups)
        else:
            key_values = list(keys)
            if isinstance(key_groups, pa.Array | pa.ChunkedArray):
                key_groups = key_groups.to_pylist()
            key_batch = self.session.keys(key_values, None if key_groups is None else list(key_groups))
            batch_keys = BatchKeys(key_batch, key_values)
        if len(batch_keys) != batch.num_rows:
            raise InvalidArgumentError(
                f"process_arrow got {len(batch_keys)} keys for {batch.num_rows} rows: pass one key per row"
            )
        self._checked(batch_keys.key_batch)
        return function.process_batch(batch, VectorizedContext(batch_keys))

    def _checked(self, keys: KeyBatch) -> None:
        if self._check_keys is None:
            return
        try:
            self._check_keys(keys)
        except BaseException:
            # The keys are already among the task's known keys: nothing more may be written.
            self._failed = True
            raise

    def _batch(self, batch: Batch) -> _BatchScope:
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
            self.function.snapshot_state(SnapshotContext(self, checkpoint_id, stamp))
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

    def keyed_descriptor(self, name: str) -> NativeDescriptor | None:
        """The descriptor keyed state ``name`` was registered with, if any."""
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
        if isinstance(state, VectorizedState):
            return state.get_batch(BatchKeys(key_batch, [key]))[0].as_py()
        return state.read(key_batch)


class _SubtaskContext(ProcessFunction.Context):
    def __init__(self, subtask: int) -> None:
        self._subtask = subtask

    def get_index_of_this_subtask(self) -> int:
        return self._subtask


class _BatchScope:
    """Prefetches on enter; writes back on a clean exit."""

    def __init__(self, runner: OperatorRunner, batch: Batch) -> None:
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
        runner._scope.key = NO_KEY
        # A failed batch writes nothing: the caller fails the task and the epoch is retried.
        write = exc_type is None
        for state in [*runner._value_like, *runner._other_keyed]:
            state.end_batch(write)


class _DeferredScope:
    """A ``process`` call with deferred writes: fetches the batch's new keys into the caches;
    list and map state work per batch as without; a failure marks the runner failed."""

    def __init__(self, runner: OperatorRunner, task_keys: TaskKeys, new: Batch | None) -> None:
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
        runner._scope.key = NO_KEY
        write = exc_type is None
        if not write:
            runner._failed = True
        for other in runner._other_keyed:
            other.end_batch(write)
        if write and len(self._task_keys.group_of) >= runner.DEFERRED_KEYS:
            runner.flush(evict=True)
