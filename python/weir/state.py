"""Keyed and operator state: descriptors, time-to-live, and the state interfaces.

The names and methods follow PyFlink's ``pyflink.datastream.state``. A function
asks its runtime context for a state with a descriptor (a unique name and the
type of the values); the state it gets back is scoped to the current key::

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)

Time-to-live (:class:`StateTtlConfig`) is recorded in the descriptor and in
snapshots, but **not enforced yet**: entries do not expire.

Examples:
    >>> from weir.state import StateTtlConfig, ValueStateDescriptor
    >>> from weir.types import Types
    >>> d = ValueStateDescriptor("count", Types.LONG())
    >>> d.enable_time_to_live(StateTtlConfig.new_builder(60_000).build())
    >>> d.native
    StateDescriptor("count", value, value_type=int64, ttl_millis=60000)
"""

from __future__ import annotations

import datetime
import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Generic, TypeVar

from weir._internal import StateDescriptor as NativeDescriptor
from weir.exceptions import InvalidArgumentError
from weir.types import StateType
from weir.types import value_type as engine_type

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BroadcastState",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "OperatorStateStore",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "ValueState",
    "ValueStateDescriptor",
]

T = TypeVar("T")
IN = TypeVar("IN")
OUT = TypeVar("OUT")
ACC = TypeVar("ACC")
K = TypeVar("K")
V = TypeVar("V")


class StateTtlConfig:
    """Time-to-live of state entries, built like PyFlink's ``StateTtlConfig``.

    Weir records the TTL in the descriptor and in snapshots; expiry is **not
    enforced yet** (entries never expire), so do not rely on it to bound state.

    Examples:
        >>> import datetime
        >>> ttl = (StateTtlConfig.new_builder(datetime.timedelta(hours=1))
        ...        .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)
        ...        .build())
        >>> ttl.ttl_millis, ttl.update_type.name
        (3600000, 'OnReadAndWrite')
    """

    class UpdateType(enum.Enum):
        """What refreshes an entry's time-to-live."""

        OnCreateAndWrite = "on_create_and_write"
        OnReadAndWrite = "on_read_and_write"

    class StateVisibility(enum.Enum):
        """Whether expired entries may be returned (not recorded: nothing expires yet)."""

        NeverReturnExpired = "never_return_expired"
        ReturnExpiredIfNotCleanedUp = "return_expired_if_not_cleaned_up"

    class TtlTimeCharacteristic(enum.Enum):
        """The clock a TTL runs on; only processing time, as in Flink."""

        ProcessingTime = "processing_time"

    def __init__(self, ttl_millis: int, update_type: StateTtlConfig.UpdateType) -> None:
        # A descriptor checks the TTL when it is enabled (in the engine, as all its parts).
        self.ttl_millis = ttl_millis
        self.update_type = update_type

    @staticmethod
    def new_builder(ttl: datetime.timedelta | int) -> StateTtlConfig.Builder:
        """A builder for a TTL of ``ttl`` (a ``timedelta`` or milliseconds)."""
        return StateTtlConfig.Builder(ttl)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateTtlConfig) and (self.ttl_millis, self.update_type) == (
            other.ttl_millis,
            other.update_type,
        )

    def __hash__(self) -> int:
        return hash((self.ttl_millis, self.update_type))

    def __repr__(self) -> str:
        return f"StateTtlConfig(ttl_millis={self.ttl_millis}, update_type={self.update_type.name})"

    class Builder:
        """Builds a :class:`StateTtlConfig`."""

        def __init__(self, ttl: datetime.timedelta | int) -> None:
            if isinstance(ttl, datetime.timedelta):
                millis = int(ttl.total_seconds() * 1000)
            elif isinstance(ttl, int) and not isinstance(ttl, bool):
                millis = ttl
            else:
                raise InvalidArgumentError(
                    f"a state time-to-live must be a datetime.timedelta or milliseconds, got {ttl!r}"
                )
            self._ttl_millis = millis
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            """What refreshes the TTL (default: creation and writes)."""
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            """Refresh on creation and writes."""
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            """Refresh on reads too."""
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, visibility: StateTtlConfig.StateVisibility) -> StateTtlConfig.Builder:
            """Accepted for PyFlink compatibility; not recorded, since nothing expires yet."""
            if not isinstance(visibility, StateTtlConfig.StateVisibility):
                raise InvalidArgumentError(f"{visibility!r} is not a StateTtlConfig.StateVisibility")
            return self

        def never_return_expired(self) -> StateTtlConfig.Builder:
            """Flink's default visibility (see :meth:`set_state_visibility`)."""
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            """See :meth:`set_state_visibility`."""
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def use_processing_time(self) -> StateTtlConfig.Builder:
            """The only time characteristic, as in Flink."""
            return self

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            """Accepted for PyFlink compatibility: cleanup strategies do not apply until TTL is enforced."""
            return self

        def cleanup_incrementally(
            self, cleanup_size: int, run_cleanup_for_every_record: bool
        ) -> StateTtlConfig.Builder:
            """Accepted for PyFlink compatibility (see :meth:`cleanup_full_snapshot`)."""
            return self

        def cleanup_in_rocksdb_compact_filter(
            self, query_time_after_num_entries: int
        ) -> StateTtlConfig.Builder:
            """Accepted for PyFlink compatibility (see :meth:`cleanup_full_snapshot`)."""
            return self

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            """Accepted for PyFlink compatibility (see :meth:`cleanup_full_snapshot`)."""
            return self

        def set_ttl_time_characteristic(
            self, characteristic: StateTtlConfig.TtlTimeCharacteristic
        ) -> StateTtlConfig.Builder:
            """Only processing time exists, as in Flink."""
            return self

        def set_ttl(self, ttl: datetime.timedelta | int) -> StateTtlConfig.Builder:
            """Replace the TTL."""
            self._ttl_millis = StateTtlConfig.Builder(ttl)._ttl_millis
            return self

        def build(self) -> StateTtlConfig:
            """The config."""
            return StateTtlConfig(self._ttl_millis, self._update_type)


class StateDescriptor(ABC):
    """Names a state and the type of its values; the name is unique per function.

    Two descriptors with the same name must be equal (same kind, types and TTL);
    asking for a state twice with equal descriptors returns the same state.
    """

    kind: ClassVar[str]

    def __init__(self, name: str, value_type: StateType, user_key_type: StateType | None = None) -> None:
        self.name = name
        self.type_info = value_type
        self.ttl_config: StateTtlConfig | None = None
        self.native = NativeDescriptor(
            name,
            self.kind,
            engine_type(value_type),
            user_key_type=None if user_key_type is None else engine_type(user_key_type),
        )
        """The engine's descriptor (validated there): what the state is registered and snapshotted with."""

    def get_name(self) -> str:
        """The state's name."""
        return self.name

    def enable_time_to_live(self, ttl_config: StateTtlConfig) -> None:
        """Record a time-to-live (not enforced yet; see :class:`StateTtlConfig`)."""
        self.ttl_config = ttl_config
        native = self.native
        self.native = NativeDescriptor(
            native.name,
            native.kind,
            native.value_type,
            user_key_type=native.user_key_type,
            ttl_millis=ttl_config.ttl_millis,
            ttl_update=ttl_config.update_type.value,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.type_info!r})"


class ValueStateDescriptor(StateDescriptor):
    """A :class:`ValueState`: one value per key.

    Args:
        name: Unique name of the state within the function.
        value_type_info: The type of the value.
        default_value: What :meth:`ValueState.value` returns for a key with no value
            (``None`` unless given). Never stored.
    """

    kind = "value"

    def __init__(self, name: str, value_type_info: StateType, default_value: Any = None) -> None:
        super().__init__(name, value_type_info)
        self.default_value = default_value


class ListStateDescriptor(StateDescriptor):
    """A :class:`ListState`: an appendable list per key; ``elem_type_info`` is the item type."""

    kind = "list"

    def __init__(self, name: str, elem_type_info: StateType) -> None:
        super().__init__(name, elem_type_info)
        self.element_type_info = elem_type_info


class MapStateDescriptor(StateDescriptor):
    """A :class:`MapState`: a map from user keys to values per key."""

    kind = "map"

    def __init__(self, name: str, key_type_info: StateType, value_type_info: StateType) -> None:
        super().__init__(name, value_type_info, key_type_info)
        self.key_type_info = key_type_info
        self.value_type_info = value_type_info


class ReduceFunction(ABC, Generic[T]):
    """Combines two values into one (``ReducingState``)."""

    @abstractmethod
    def reduce(self, value1: T, value2: T) -> T:
        """The combination of ``value1`` (the state) and ``value2`` (the new value)."""


class AggregateFunction(ABC, Generic[IN, ACC, OUT]):
    """Folds values into an accumulator (``AggregatingState``), PyFlink's shape."""

    @abstractmethod
    def create_accumulator(self) -> ACC:
        """A new, empty accumulator."""

    @abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC:
        """The accumulator after adding ``value``."""

    @abstractmethod
    def get_result(self, accumulator: ACC) -> OUT:
        """The result for an accumulator."""

    def merge(self, acc_a: ACC, acc_b: ACC) -> ACC:
        """Two accumulators combined; Weir does not merge namespaces yet."""
        raise NotImplementedError("merge is only needed for merging windows, which Weir does not have")


class ReducingStateDescriptor(StateDescriptor):
    """A :class:`ReducingState`: ``add`` folds values with ``reduce_function``.

    ``reduce_function`` is a :class:`ReduceFunction` or a plain ``(a, b) -> c`` callable.
    """

    kind = "reducing"

    def __init__(
        self,
        name: str,
        reduce_function: ReduceFunction[Any] | Callable[[Any, Any], Any],
        type_info: StateType,
    ) -> None:
        super().__init__(name, type_info)
        reduce = reduce_function.reduce if isinstance(reduce_function, ReduceFunction) else reduce_function
        if not callable(reduce):
            raise InvalidArgumentError(
                f"reduce_function of state {name!r} must be a ReduceFunction or a callable, "
                f"got {reduce_function!r}"
            )
        self.reduce_function: Callable[[Any, Any], Any] = reduce


class AggregatingStateDescriptor(StateDescriptor):
    """An :class:`AggregatingState`: ``add`` folds values with ``agg_function``.

    ``state_type_info`` is the type of the accumulator (what is stored).
    """

    kind = "aggregating"

    def __init__(
        self, name: str, agg_function: AggregateFunction[Any, Any, Any], state_type_info: StateType
    ) -> None:
        super().__init__(name, state_type_info)
        if not isinstance(agg_function, AggregateFunction):
            raise InvalidArgumentError(
                f"agg_function of state {name!r} must be a weir.AggregateFunction, got {agg_function!r}"
            )
        self.agg_function = agg_function


class State(ABC):
    """A state scoped to the current key (keyed state) or to the subtask (operator state)."""

    @abstractmethod
    def clear(self) -> None:
        """Remove the value(s) of the current key."""


class ValueState(State, Generic[T]):
    """One value per key."""

    @abstractmethod
    def value(self) -> T | None:
        """The current key's value, or ``None`` (or the descriptor's default) if it has none."""

    @abstractmethod
    def update(self, value: T | None) -> None:
        """Set the current key's value; ``None`` clears it."""


class AppendingState(State, Generic[IN, OUT]):
    """A state values are added to."""

    @abstractmethod
    def get(self) -> OUT:
        """The current key's contents."""

    @abstractmethod
    def add(self, value: IN) -> None:
        """Add a value for the current key."""


class ListState(AppendingState[T, Iterable[T]]):
    """An appendable list per key; ``get`` of a key without items is empty."""

    @abstractmethod
    def update(self, values: Iterable[T]) -> None:
        """Replace the current key's list."""

    @abstractmethod
    def add_all(self, values: Iterable[T]) -> None:
        """Append every value."""

    def __iter__(self) -> Iterator[T]:
        return iter(self.get())


class ReducingState(AppendingState[T, "T | None"]):
    """A value folded with a reduce function on ``add``."""


class AggregatingState(AppendingState[IN, OUT]):
    """An accumulator folded with an aggregate function on ``add``; ``get`` is its result."""


class MapState(State, Generic[K, V]):
    """A map from user keys to values, per key."""

    @abstractmethod
    def get(self, key: K) -> V | None:
        """The value of ``key``, or ``None``."""

    @abstractmethod
    def put(self, key: K, value: V) -> None:
        """Set the value of ``key``."""

    @abstractmethod
    def put_all(self, dict_value: Mapping[K, V]) -> None:
        """Set every entry of ``dict_value``."""

    @abstractmethod
    def remove(self, key: K) -> None:
        """Remove ``key``."""

    @abstractmethod
    def contains(self, key: K) -> bool:
        """Whether ``key`` has a value."""

    @abstractmethod
    def items(self) -> Iterable[tuple[K, V]]:
        """The entries."""

    @abstractmethod
    def keys(self) -> Iterable[K]:
        """The user keys."""

    @abstractmethod
    def values(self) -> Iterable[V]:
        """The values."""

    @abstractmethod
    def is_empty(self) -> bool:
        """Whether the map has no entries."""

    def __getitem__(self, key: K) -> V:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def __delitem__(self, key: K) -> None:
        self.remove(key)

    def __contains__(self, key: object) -> bool:
        return self.contains(key)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())


class BroadcastState(MapState[K, V]):
    """Operator state: the same map on every subtask; each new subtask gets a copy on restore."""


class OperatorStateStore(ABC):
    """The operator (non-keyed) state of one subtask, from ``initialize_state``'s context."""

    @abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        """A list split evenly over the subtasks on restore (Flink's even-split redistribution)."""

    @abstractmethod
    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        """A list of which every subtask gets the union of all subtasks' items on restore."""

    @abstractmethod
    def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState[Any, Any]:
        """A map every subtask holds the same copy of."""
