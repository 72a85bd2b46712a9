"""The task side of an epoch: runs in Spark's Python workers inside ``mapInArrow``.

A task of epoch ``e`` for subtask ``s`` (= its Spark partition) of one
stateful operator attaches to the subtask's state host, takes the barrier's snapshot if one precedes its
records, begins attempt ``a`` of ``e`` (which folds the final epochs into the
base and discards an earlier attempt's writes, so retries are harmless), runs
the user's function over its Arrow batches with batched state access, and
commits. Every subtask runs a task in every epoch, even without rows, so
barriers and notifications reach all of them.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark import Accumulator, TaskContext

from weir.exceptions import StateError
from weir.functions import VectorizedKeyedFunction
from weir.runtime import OperatorRunner
from weir.spark import _host
from weir.spark.tasks import KEY_GROUP, OperatorSpec, OperatorTask
from weir.spark.waterfall import TaskClock, Totals

if TYPE_CHECKING:
    from weir._internal import KeyBatch
    from weir.spark.sinks import PartitionWriter

ATTEMPT_IDS = 1 << 32
"""Attempts are Spark's task attempt ids (unique in the application) modulo this."""
TASK_GC_THRESHOLD = 100_000
"""Net allocations between two passes of Python's cycle collector during a task."""


def run_epoch_task(
    task: OperatorTask,
    batches: Iterator[pa.RecordBatch],
    *,
    records: Accumulator[int] | None,
    phases: Accumulator[Totals],
    write: PartitionWriter | None = None,
) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function of one operator in one epoch (see the module
    docs); counts the records it processed into ``records`` if given, and its
    phases' times into ``phases``. With ``write`` (the sink's, for the last
    step), the output goes to it instead of back to Spark."""
    context = TaskContext.get()
    if context is None:
        raise StateError("a Weir epoch task must run inside a Spark task")
    partition = context.partitionId()
    attempt = context.taskAttemptId() % ATTEMPT_IDS
    op = task.operator
    _freeze_long_lived_objects()
    clock = TaskClock()
    with clock.phase("attach"):
        session = _host.open_session(task, partition)
    if task.barrier is not None:
        with clock.phase("barrier"):
            _host.take_barrier(session, task)
    with clock.phase("begin"):
        session.begin(task.epoch, attempt, task.final_epoch)
        key_range = _host.key_group_range(op.max_parallelism, op.parallelism, partition)
        # The task fails as a whole on any error (its writes are dropped on retry), so the
        # runner may keep state cached across batches and write it back once, at the end.
        runner = OperatorRunner(
            op.function,
            session,
            restored=True,
            defer_writes=True,
            check_keys=partial(check_partition, key_range=key_range, partition=partition),
        )
        runner.open()
        if task.notify_complete is not None:
            runner.notify_checkpoint_complete(task.notify_complete)
    count = records.add if records is not None else _ignore
    outputs = process_batches(runner, op, clock.timed("input", batches), count, clock)
    if write is None:
        yield from outputs
    else:
        write(outputs)
    with clock.phase("write_back"):
        # Functions live for one task, and every task ends at a potential cut, so
        # a CheckpointedFunction hands its in-memory data to operator state at the
        # end of every task; the id is the checkpoint this epoch may become the
        # cut of (0 when none is pending).
        runner.snapshot_state(task.pending_checkpoint or 0)
        runner.close()
    with clock.phase("commit"):
        session.commit(task.epoch, attempt)
    phases.add(clock.totals())


def process_batches(
    runner: OperatorRunner,
    op: OperatorSpec,
    batches: Iterable[pa.RecordBatch],
    count: Callable[[int], object],
    clock: TaskClock,
) -> Iterator[pa.RecordBatch]:
    """The per-batch loop of a task: runs the function on each batch and yields its
    output batches; ``count`` gets the number of records of each batch. Separate from
    :func:`run_epoch_task` so it runs (and is profiled) without Spark."""
    with _rare_gc_passes():
        vectorized = isinstance(op.function, VectorizedKeyedFunction)
        keyed = op.key_columns is not None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            count(batch.num_rows)
            if not keyed:
                with clock.phase("function"):
                    unkeyed = [batch.column(c).to_pylist() for c in op.value_columns]
                    outputs = runner.process(list(zip(*unkeyed, strict=True)))
                if outputs:
                    with clock.phase("output"):
                        out = _to_batch(outputs, op.output_schema)
                    yield out
                continue
            # Without the JVM's key groups, the state session computes them from the keys.
            values, key_groups = batch, None
            if op.key_groups_shipped:
                values, key_groups = batch.drop_columns([KEY_GROUP]), batch.column(KEY_GROUP)
            if vectorized:
                with clock.phase("function"):
                    # Keys stay Arrow: Rust encodes them from the columns.
                    key_columns = values.select(list(op.key_columns or ()))
                    arrow_out = runner.process_arrow(values, key_columns, key_groups)
                if arrow_out is not None and arrow_out.num_rows:
                    yield arrow_out
                continue
            with clock.phase("function"):
                columns = {c: values.column(c).to_pylist() for c in op.value_columns}
                elements = list(zip(*columns.values(), strict=True))
                groups = None if key_groups is None else key_groups.to_pylist()
                outputs = runner.process(elements, _keys(values, op.key_columns, columns), groups)
            if outputs:
                with clock.phase("output"):
                    out = _to_batch(outputs, op.output_schema)
                yield out


class _RareGcPasses:
    """Python's cycle collector runs every 700 net allocations; a record loop allocates a
    few objects per record, so it runs thousands of times per task and each pass walks
    the young objects (12% of the per-record loop). During tasks the threshold is
    :data:`TASK_GC_THRESHOLD`: cycles a task makes are still collected, in passes over a
    hundred times rarer. The worker's own setting returns when the last task running
    in the process ends, whatever order several tasks' generators end in."""

    def __init__(self) -> None:
        self.tasks = 0
        self.saved: tuple[int, ...] = ()

    @contextmanager
    def during_task(self) -> Iterator[None]:
        if self.tasks == 0:
            self.saved = gc.get_threshold()
            gc.set_threshold(max(self.saved[0], TASK_GC_THRESHOLD), *self.saved[1:])
        self.tasks += 1
        try:
            yield
        finally:
            self.tasks -= 1
            if self.tasks == 0:
                gc.set_threshold(*self.saved)


_rare_gc_passes = _RareGcPasses().during_task


@cache  # once per process: later tasks' objects stay collectable
def _freeze_long_lived_objects() -> None:
    """Leave the objects alive at a worker's first Weir task out of every later pass of
    Python's cycle collector. PySpark's worker runs a full pass after each task, and a
    full pass walks every object the worker holds (its modules: some 80,000 objects), out
    of the CPU caches after a task: 20-70 ms per task, 10-15% of a task of 500,000
    records. A frozen object is still freed when its last reference goes; only a
    reference cycle among the first task's objects would stay, once per process.
    (``gc.get_freeze_count`` cannot tell whether this ran: it walks the frozen objects.)"""
    gc.freeze()


def _ignore(_: int) -> None:
    """Counts nothing (only the first operator counts the epoch's records)."""


def check_partition(keys: KeyBatch, key_range: tuple[int, int], partition: int) -> None:
    """Every row of partition ``s`` must belong to subtask ``s``: fail loudly otherwise."""
    bounds = keys.key_group_bounds()
    if bounds is None:
        return
    low, high = bounds
    start, end = key_range
    if low < start or high >= end:
        raise StateError(
            f"Spark partition {partition} got rows of key groups {low}..{high}, outside its "
            f"subtask's key groups {start}..{end - 1}: the routing of rows to partitions is "
            f"broken (is adaptive query execution coalescing the shuffle?)"
        )


def _keys(
    values: pa.RecordBatch, key_columns: tuple[str, ...] | None, converted: dict[str, list[Any]]
) -> list[Any]:
    """The key of each row; ``converted`` holds columns already converted to Python."""

    assert key_columns is not None, "only keyed operators have keys"

    def column(name: str) -> list[Any]:
        found = converted.get(name)
        return values.column(name).to_pylist() if found is None else found

    if len(key_columns) == 1:
        return column(key_columns[0])
    return list(zip(*(column(c) for c in key_columns), strict=True))


def _to_batch(outputs: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    try:
        # Rows as tuples (the usual case) convert in one pass in Arrow.
        return pa.RecordBatch.from_struct_array(pa.array(outputs, type=pa.struct(schema)))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass  # rows as lists, or rows that do not fit: the column-wise path says which
    columns = list(zip(*outputs, strict=True))
    if len(columns) != len(schema):
        raise StateError(
            f"the function yielded rows of {len(columns)} fields, but its output schema has "
            f"{len(schema)}: {schema}"
        )
    arrays = [pa.array(col, type=field.type) for col, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
