"""User functions: PyFlink's ``KeyedProcessFunction``, ``CheckpointedFunction`` and friends.

A keyed function runs once per record with the record's key as the *current
key*; every keyed state it reads or writes is that key's::

    class CountWindowAverage(KeyedProcessFunction):
        def open(self, runtime_context):
            self.sum = runtime_context.get_state(
                ValueStateDescriptor("average", Types.TUPLE([Types.LONG(), Types.LONG()])))

        def process_element(self, value, ctx):
            count, total = self.sum.value() or (0, 0)
            ...
            yield ctx.get_current_key(), total // count

A :class:`VectorizedKeyedFunction` gets whole Arrow batches instead and reads
and writes the state of all their keys at once (``get_batch``/``put_batch``,
and built-in aggregates that run in Rust).

Lifecycle of one subtask: ``initialize_state`` (for a :class:`CheckpointedFunction`),
then ``open``, then the records, then ``close``. ``snapshot_state`` runs when a
checkpoint or savepoint is taken, ``notify_checkpoint_complete`` once it completed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

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

__all__ = [
    "BatchContext",
    "BatchState",
    "CheckpointListener",
    "CheckpointedFunction",
    "Function",
    "FunctionInitializationContext",
    "FunctionSnapshotContext",
    "KeyedProcessFunction",
    "KeyedStateStore",
    "ProcessFunction",
    "RawKeyedStateOutput",
    "RawOperatorStateOutput",
    "RuntimeContext",
    "VectorizedKeyedFunction",
]


class KeyedStateStore(ABC):
    """Where keyed state comes from: ``get_state(descriptor)`` and friends."""

    @abstractmethod
    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState[Any]:
        """The value state ``state_descriptor`` names (registered on first use)."""

    @abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState[Any]:
        """The list state ``state_descriptor`` names."""

    @abstractmethod
    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState[Any, Any]:
        """The map state ``state_descriptor`` names."""

    @abstractmethod
    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState[Any]:
        """The reducing state ``state_descriptor`` names."""

    @abstractmethod
    def get_aggregating_state(
        self, state_descriptor: AggregatingStateDescriptor
    ) -> AggregatingState[Any, Any]:
        """The aggregating state ``state_descriptor`` names."""


class RuntimeContext(KeyedStateStore):
    """What ``open`` gets: keyed state and the subtask's place in the operator."""

    @abstractmethod
    def get_index_of_this_subtask(self) -> int:
        """This subtask's index, ``0 .. parallelism - 1``."""

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int:
        """The operator's parallelism."""

    @abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int:
        """The max parallelism (number of key groups)."""


class Function(ABC):  # noqa: B024 - every method has a default; subclasses pick what they need
    """Base of user functions: ``open`` before the first record, ``close`` after the last."""

    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027 - optional hook
        """Set up: get state handles here (keyed state itself is only readable per record)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class KeyedProcessFunction(Function):
    """Processes each record of a keyed stream with the record's key as current key."""

    class Context(ABC):
        """Per-record context."""

        @abstractmethod
        def get_current_key(self) -> Any:
            """The key of the record being processed."""

    @abstractmethod
    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any] | None:
        """Process one record; yield (or return an iterable of) output records.

        Returning is faster: a function that yields makes CPython build a generator for
        every record, emitting or not. Returning a tuple of records, or ``None`` when there
        are none, saves it: in ``benchmarks/`` the keyed average ran 17-21% more events
        per second returning than yielding.
        """


class ProcessFunction(Function):
    """Processes each record of a stream that is not keyed (``stream.process(...)``
    without ``key_by``).

    Such a function has no keyed state; it keeps operator state, as a
    :class:`CheckpointedFunction`, which is redistributed as its kind says
    when the operator's parallelism changes.
    """

    class Context(ABC):
        """Per-record context."""

        @abstractmethod
        def get_index_of_this_subtask(self) -> int:
            """The index of the subtask processing the record."""

    @abstractmethod
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None:
        """Process one record; yield (or return an iterable of) output records."""


class BatchState(ABC):
    """A keyed state of a :class:`VectorizedKeyedFunction`: whole batches of keys at once.

    ``keys`` is the batch's ``ctx.keys`` (or a sequence/Arrow array of keys).
    Values are Arrow arrays of the state's type; a null value clears.
    """

    @abstractmethod
    def get_batch(self, keys: Any) -> pa.Array:
        """The values of ``keys`` (null where absent)."""

    @abstractmethod
    def put_batch(self, keys: Any, values: pa.Array) -> None:
        """Set the values of ``keys`` (null clears); later rows win."""

    @abstractmethod
    def aggregate(self, keys: Any, inputs: pa.Array, function: str, *, window: int | None = None) -> pa.Array:
        """Fold ``inputs`` into the state with a built-in aggregate run in Rust.

        ``function`` is ``"count"``, ``"sum"``, ``"min"``, ``"max"`` or ``"mean"``;
        returns the aggregate after each row.

        With ``window=n`` each key's inputs fall into tumbling count windows of
        ``n`` rows (Flink's ``countWindow(n)``): a row's result is its window's
        aggregate if the row fills the window, else null, and a filled window
        clears the key's state. The state then holds the open window:
        ``struct<filled: int64, acc: A>``, ``A`` being the accumulator type of
        ``function`` without a window.
        """

    @abstractmethod
    def clear_batch(self, keys: Any) -> None:
        """Clear the state of ``keys``."""


class BatchContext(ABC):
    """Per-batch context of a :class:`VectorizedKeyedFunction`."""

    @property
    @abstractmethod
    def keys(self) -> Any:
        """The batch's keys, one per row, to pass to :class:`BatchState` methods."""

    @abstractmethod
    def key_values(self) -> list[Any]:
        """The batch's keys as Python values, one per row."""


class VectorizedKeyedFunction(Function):
    """Processes a whole Arrow batch of a keyed stream at once (no per-record Python).

    In ``open``, ``runtime_context.get_state(...)`` returns a :class:`BatchState`.
    """

    @abstractmethod
    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch | None:
        """Process one batch; return the output batch or ``None``."""


class FunctionSnapshotContext(ABC):
    """What ``snapshot_state`` gets."""

    @abstractmethod
    def get_checkpoint_id(self) -> int:
        """The id of the checkpoint or savepoint being taken."""

    @abstractmethod
    def get_checkpoint_timestamp(self) -> int:
        """When it was triggered, in milliseconds since the epoch."""

    @abstractmethod
    def get_raw_keyed_state_output(self) -> RawKeyedStateOutput:
        """Where a keyed function writes its own bytes per key group (raw keyed state).

        What is written replaces the subtask's raw keyed state; it is redistributed
        by key group on rescaling, like managed keyed state.
        """

    @abstractmethod
    def get_raw_operator_state_output(self) -> RawOperatorStateOutput:
        """Where a function writes its own bytes for this subtask (raw operator state).

        What is written replaces the subtask's raw operator state; on rescaling the
        written parts are split evenly over the new subtasks, like list state.
        """


class FunctionInitializationContext(ABC):
    """What ``initialize_state`` gets."""

    @abstractmethod
    def is_restored(self) -> bool:
        """Whether the state was restored from a checkpoint or savepoint."""

    @abstractmethod
    def get_operator_state_store(self) -> OperatorStateStore:
        """The subtask's operator (non-keyed) state."""

    @abstractmethod
    def get_keyed_state_store(self) -> KeyedStateStore:
        """The keyed state (usable per record only)."""

    @abstractmethod
    def get_raw_keyed_state_inputs(self) -> dict[int, bytes]:
        """The raw keyed state of this subtask's key groups, by key group."""

    @abstractmethod
    def get_raw_operator_state_inputs(self) -> list[bytes]:
        """The parts of raw operator state this subtask got, in order."""


class RawKeyedStateOutput(ABC):
    """Raw keyed state being written in ``snapshot_state``."""

    @abstractmethod
    def write(self, key_group: int, data: bytes) -> None:
        """Stores ``data`` for ``key_group``, which must belong to this subtask."""


class RawOperatorStateOutput(ABC):
    """Raw operator state being written in ``snapshot_state``."""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Adds one part; each part goes whole to one subtask on rescaling."""


class CheckpointedFunction(ABC):
    """A function with operator state it snapshots and restores itself (Flink's interface)."""

    @abstractmethod
    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        """Copy in-memory data into operator state; called when a checkpoint is taken."""

    @abstractmethod
    def initialize_state(self, context: FunctionInitializationContext) -> None:
        """Get operator state handles and read restored data; called before ``open``."""


class CheckpointListener(ABC):
    """Told when checkpoints complete (notifications may be subsumed, as in Flink)."""

    @abstractmethod
    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` (and every earlier one) is complete."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:  # noqa: B027 - optional hook
        """Checkpoint ``checkpoint_id`` was aborted."""
