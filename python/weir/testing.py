"""Test a keyed function in-process: the real state engine, no Spark and no state host.

:class:`KeyedOperatorHarness` is Weir's counterpart of Flink's keyed operator
test harnesses. It runs every subtask of one operator in this process with
the same engine, backends, snapshots and restore code a job uses. A snapshot
it takes is a real savepoint: the ``weir`` tool reads it, and a harness (or a
job) restores from it at any parallelism::

    from weir.testing import KeyedOperatorHarness

    with KeyedOperatorHarness(CountWindowAverage(), key_selector=lambda v: v[0],
                              parallelism=2, backend="heap") as h:
        h.process_elements([(1, 3), (1, 5), (1, 7), (1, 4)])
        assert h.outputs() == [(1, 4), (1, 5)]
        savepoint = h.snapshot(tmp_path)

    with KeyedOperatorHarness(CountWindowAverage(), key_selector=lambda v: v[0],
                              parallelism=3, backend="rocksdb",
                              restore_from=savepoint) as h3:
        ...

A runnable example (a per-key running count)::

    >>> from weir import KeyedProcessFunction, Types, ValueStateDescriptor
    >>> class Count(KeyedProcessFunction):
    ...     def open(self, runtime_context):
    ...         self.n = runtime_context.get_state(ValueStateDescriptor("n", Types.LONG(), default_value=0))
    ...     def process_element(self, value, ctx):
    ...         self.n.update(self.n.value() + 1)
    ...         yield ctx.get_current_key(), self.n.value()
    >>> with KeyedOperatorHarness(Count(), key_selector=lambda v: v, parallelism=2, backend="rocksdb") as h:
    ...     h.process_elements(["a", "b", "a"])
    ...     h.state("a", "n")
    [('a', 1), ('b', 1), ('a', 2)]
    2

Each subtask gets its own deep copy of ``function`` (as a job ships one copy
to each subtask). Each ``process_elements`` call is one epoch; records run in
input order, each on the subtask owning its key's key group, so outputs come
in input order.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import pyarrow as pa

from weir import _internal
from weir.config import BackendName, StateBackend
from weir.exceptions import InvalidArgumentError, StateError
from weir.functions import KeyedProcessFunction, VectorizedKeyedFunction
from weir.key_groups import DEFAULT_MAX_PARALLELISM
from weir.runtime import OperatorRunner
from weir.state import StateDescriptor

__all__ = ["KeyedOperatorHarness"]

KeySelector = Callable[[Any], Any] | str | Sequence[str]
"""A function of a record, or for vectorized functions the key column name(s)."""


class KeyedOperatorHarness:
    """All subtasks of one keyed operator, in this process, on the real state engine.

    Args:
        function: A :class:`~weir.KeyedProcessFunction` or
            :class:`~weir.VectorizedKeyedFunction` (optionally also a
            :class:`~weir.CheckpointedFunction` / :class:`~weir.CheckpointListener`).
        key_selector: The record's key (int, str, bytes, bool, float or a tuple
            of those); for a vectorized function the key column name(s) or a
            function of the batch returning the key array.
        parallelism: Number of subtasks.
        max_parallelism: Number of key groups; fixed for the life of the state.
        backend: ``"heap"``, ``"rocksdb"``, a :class:`~weir.StateBackend` or ``{"name": ...}``.
        restore_from: A savepoint or checkpoint directory to restore from (any parallelism).
        uid: The operator's uid: the key of its state in savepoints.
        allow_non_restored_state: Restore even if the savepoint has state of other operators.
        work_dir: Where RocksDB keeps its files (default: a temporary directory).

    Raises:
        InvalidArgumentError: For an unknown backend or out-of-range parallelism.
        CheckpointError: If ``restore_from`` cannot be restored.
    """

    def __init__(
        self,
        function: KeyedProcessFunction | VectorizedKeyedFunction,
        key_selector: KeySelector,
        *,
        parallelism: int = 1,
        max_parallelism: int = DEFAULT_MAX_PARALLELISM,
        backend: StateBackend | BackendName | dict[str, Any] = "heap",
        restore_from: str | Path | None = None,
        uid: str = "harness-operator",
        allow_non_restored_state: bool = False,
        work_dir: str | Path | None = None,
    ) -> None:
        if not isinstance(function, KeyedProcessFunction | VectorizedKeyedFunction):
            raise InvalidArgumentError(
                f"{type(function).__name__} is not a keyed function: subclass weir.KeyedProcessFunction "
                "(per record) or weir.VectorizedKeyedFunction (per Arrow batch)"
            )
        self.backend = StateBackend.of(backend)
        self.key_selector = key_selector
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._operator: _internal.LocalOperator | None = None
        self._epoch = 0
        self._checkpoint_id = 0
        self._outputs: list[Any] = []
        self._closed = False
        # Whether a key reached the engine (a restored operator knows its key types).
        self._keyed_input = restore_from is not None
        try:
            if work_dir is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="weir-harness-")
                work_dir = self._tmp.name
            if restore_from is None:
                self._operator = _internal.LocalOperator(
                    uid, parallelism, max_parallelism, self.backend.name, str(work_dir)
                )
            else:
                self._operator = _internal.LocalOperator.restore(
                    str(restore_from),
                    uid,
                    parallelism,
                    max_parallelism,
                    self.backend.name,
                    str(work_dir),
                    allow_non_restored_state,
                )
            self._sessions = [self._operator.session(i) for i in range(parallelism)]
            self._epoch = self._operator.last_final_epoch() or 0
            self._runners = [
                OperatorRunner(copy.deepcopy(function), session, restored=restore_from is not None)
                for session in self._sessions
            ]
            with self._epoch_scope():
                for runner in self._runners:
                    runner.open()
        except BaseException:
            self._release()
            raise

    # -- epochs ------------------------------------------------------------------------------

    def _epoch_scope(self) -> _EpochScope:
        if self._closed:
            raise StateError("this harness is closed; create a new one")
        self._epoch += 1
        return _EpochScope(self._sessions, self._epoch)

    # -- input -------------------------------------------------------------------------------

    def _subtasks(self, keys: Sequence[Any]) -> tuple[list[int], list[int]]:
        key_groups = _internal.key_groups_of(list(keys), self.max_parallelism)
        self._keyed_input = self._keyed_input or bool(key_groups)
        subtasks = _internal.subtasks_for_key_groups(self.max_parallelism, self.parallelism, key_groups)
        return key_groups, subtasks

    def process_elements(self, elements: Iterable[Any]) -> list[Any]:
        """Process records in order, in one epoch; returns this call's outputs (also kept in outputs()).

        Raises:
            InvalidArgumentError: If the function is vectorized (use :meth:`process_batch`)
                or the key selector is not a function.
        """
        selector = self.key_selector
        if not callable(selector):
            raise InvalidArgumentError(
                "process_elements needs key_selector to be a function of a record; "
                "column names are for vectorized functions (process_batch)"
            )
        records = list(elements)
        keys = [selector(record) for record in records]
        key_groups, subtasks = self._subtasks(keys)
        out: list[Any] = []
        with self._epoch_scope():
            if self.parallelism == 1:
                out.extend(self._runners[0].process(records, keys, key_groups))
                records = []
            start = 0
            # Consecutive records of one subtask form one batch: batching, and outputs in input order.
            for end in range(1, len(records) + 1):
                if end == len(records) or subtasks[end] != subtasks[start]:
                    out.extend(
                        self._runners[subtasks[start]].process(
                            records[start:end], keys[start:end], key_groups[start:end]
                        )
                    )
                    start = end
        self._outputs.extend(out)
        return out

    def process_element(self, element: Any) -> list[Any]:
        """Process one record (one epoch); returns its outputs."""
        return self.process_elements([element])

    def process_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """Process one Arrow batch with a vectorized function, split by subtask; returns the outputs."""
        selector = self.key_selector
        if callable(selector):
            key_array = selector(batch)
            keys = (
                key_array.to_pylist()
                if isinstance(key_array, pa.Array | pa.ChunkedArray)
                else list(key_array)
            )
        elif isinstance(selector, str):
            keys = batch.column(selector).to_pylist()
        else:
            columns = [batch.column(name).to_pylist() for name in selector]
            keys = list(zip(*columns, strict=True))
        key_groups, subtasks = self._subtasks(keys)
        out: list[pa.RecordBatch] = []
        with self._epoch_scope():
            for subtask, runner in enumerate(self._runners):
                rows = [i for i, s in enumerate(subtasks) if s == subtask]
                if not rows:
                    continue
                part = batch.take(pa.array(rows, pa.int64()))
                result = runner.process_arrow(part, [keys[i] for i in rows], [key_groups[i] for i in rows])
                if result is not None:
                    out.append(result)
        self._outputs.extend(out)
        return out

    # -- output and state --------------------------------------------------------------------

    @property
    def functions(self) -> list[KeyedProcessFunction | VectorizedKeyedFunction]:
        """Each subtask's copy of the function, by subtask index (to inspect in tests)."""
        # The harness only takes keyed functions, so its runners hold nothing else.
        return [cast("KeyedProcessFunction | VectorizedKeyedFunction", r.function) for r in self._runners]

    def outputs(self) -> list[Any]:
        """Every output so far, in order."""
        return list(self._outputs)

    def clear_outputs(self) -> None:
        """Forget the outputs so far."""
        self._outputs.clear()

    def _runner_of(self, key: Any) -> tuple[OperatorRunner, int]:
        key_groups, subtasks = self._subtasks([key])
        return self._runners[subtasks[0]], key_groups[0]

    def state(self, key: Any, name: str) -> Any:
        """The state ``name`` of ``key`` as the function sees it: a value, list, dict or aggregate result."""
        runner, key_group = self._runner_of(key)
        return runner.read_keyed_state(name, key, key_group)

    def get_state(self, key: Any, descriptor: StateDescriptor) -> Any:
        """Like :meth:`state`, checking the function registered ``descriptor`` under its name."""
        runner, key_group = self._runner_of(key)
        registered = runner.keyed_descriptor(descriptor.name)
        if registered is not None and registered != descriptor.native:
            raise StateError(
                f"state {descriptor.name!r} is registered with another descriptor: {registered!r}"
            )
        return runner.read_keyed_state(descriptor.name, key, key_group)

    # -- checkpoints -------------------------------------------------------------------------

    def snapshot(self, checkpoint_dir: str | Path, checkpoint_id: int | None = None) -> str:
        """Take a savepoint under ``checkpoint_dir``; returns its directory (``weir savepoint info`` reads).

        Calls each subtask's ``snapshot_state`` first (for a CheckpointedFunction).
        """
        if not self._keyed_input and any(runner.state_names() for runner in self._runners):
            raise StateError(
                "the harness has not seen a key yet, so it cannot record the key type in a savepoint: "
                "process at least one record before snapshot()"
            )
        self._checkpoint_id = self._checkpoint_id + 1 if checkpoint_id is None else checkpoint_id
        with self._epoch_scope():
            for runner in self._runners:
                runner.snapshot_state(self._checkpoint_id)
        assert self._operator is not None  # set in __init__; closed harnesses fail in _epoch_scope
        path: str = self._operator.snapshot(str(checkpoint_dir))
        return path

    @property
    def last_checkpoint_id(self) -> int:
        """The id of the last snapshot taken (0 before the first)."""
        return self._checkpoint_id

    def notify_checkpoint_complete(self, checkpoint_id: int | None = None) -> None:
        """Tell every subtask's CheckpointListener that a checkpoint (default: the last) completed."""
        checkpoint = self._checkpoint_id if checkpoint_id is None else checkpoint_id
        for runner in self._runners:
            runner.notify_checkpoint_complete(checkpoint)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the function on every subtask and release the state (idempotent)."""
        if self._closed:
            return
        try:
            with self._epoch_scope():
                for runner in self._runners:
                    runner.close()
        finally:
            self._release()

    def _release(self) -> None:
        self._closed = True
        if self._operator is not None:
            self._operator.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> KeyedOperatorHarness:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _EpochScope:
    """Begins one epoch on every subtask and commits it (the next epoch makes it final)."""

    def __init__(self, sessions: Sequence[Any], epoch: int) -> None:
        self._sessions = sessions
        self._epoch = epoch

    def _previous(self) -> int | None:
        return self._epoch - 1 if self._epoch > 1 else None

    def __enter__(self) -> None:
        for session in self._sessions:
            session.begin(self._epoch, 0, self._previous())

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            for session in self._sessions:
                session.commit(self._epoch, 0)
            return
        # As Spark retries a failed task: a new attempt drops the failed one's writes.
        # It commits empty, so a failed call leaves the state as it was before it.
        for session in self._sessions:
            session.begin(self._epoch, 1, self._previous())
            session.commit(self._epoch, 1)
