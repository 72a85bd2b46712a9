"""The task side of a Spark job: runs in Spark's Python workers inside ``mapInArrow``.

A task for subtask ``s`` (= its Spark partition) of one stateful operator
attaches to the subtask's state host, takes the barrier's snapshot if one
precedes its records, and runs the epochs of its job in order. For each it
begins attempt ``a`` (which folds the final epochs into the base and
discards an earlier attempt's writes, so retries are harmless), runs the
user's function over the epoch's Arrow batches with batched state access,
and commits. Every subtask runs a task in every Spark job, even without
rows, so barriers and notifications reach all of them.

When the job runs several epochs, its rows carry their epoch (:data:`EPOCH`):
the first epoch's rows go through the function as they arrive, and the later
epochs' rows wait in memory until the input is complete (Spark delivers a
partition's shuffle blocks in no set order). The task reports every epoch
boundary to the coordinator, which may answer with a checkpoint's barrier: the task then
writes the state the function changed back before it commits that epoch,
and takes the barrier before it begins the next one (see
:class:`~weir.spark.tasks.InJobBarriers`). Otherwise the state goes back once,
at the end of the task.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark import Accumulator, TaskContext

from weir.exceptions import StateError
from weir.functions import VectorizedKeyedFunction
from weir.runtime import OperatorRunner
from weir.spark import _host
from weir.spark.tasks import EPOCH, KEY_GROUP, OperatorSpec, OperatorTask
from weir.spark.waterfall import TaskClock, Totals

if TYPE_CHECKING:
    from weir._internal import KeyBatch, Session
    from weir.spark.sinks import PartitionWriter
    from weir.spark.tasks import Barrier

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
    """The ``mapInArrow`` function of one operator in one Spark job (see the module
    docs); counts the records it processed into ``records`` if given, and its
    phases' times into ``phases``. With ``write`` (the sink's, for the last
    step), each epoch's output goes to it instead of back to Spark."""
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
            _host.take_barrier(session, task.barrier, task.hosts.token)
    with clock.phase("begin"):
        key_range = _host.key_group_range(op.max_parallelism, op.parallelism, partition)
        # The task fails as a whole on any error (its writes are dropped on retry), so the
        # runner may keep state cached across batches and epochs and write it back only
        # where a barrier or the task's end needs it.
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
    boundaries = _Boundaries(task, partition, session, clock)
    boundaries.take(boundaries.report(task.final_epoch, task.epochs[0]))
    count = records.add if records is not None else _ignore
    epochs = task.epochs
    inputs = clock.timed("input", batches)
    for index, (epoch, rows) in enumerate(epoch_slices(epochs, inputs)):
        last = index == len(epochs) - 1
        with clock.phase("begin"):
            session.begin(epoch, attempt, task.final_epoch)
        outputs = process_batches(runner, op, rows, count, clock)
        if write is not None:
            write(epoch, outputs)
        elif len(epochs) == 1:
            yield from outputs
        else:
            for out in outputs:
                yield _with_epoch(out, index)
        barriers = boundaries.report(epoch, None if last else epochs[index + 1])
        if barriers or last:
            with clock.phase("write_back"):
                # State goes back to the host at each barrier and at the end of the task,
                # which may be a cut too; a CheckpointedFunction hands its in-memory data to
                # operator state there, with the checkpoint it goes into (0: none known yet).
                runner.snapshot_state(barriers[0].checkpoint_id if barriers else task.pending_checkpoint or 0)
                if last:
                    runner.close()
        with clock.phase("commit"):
            session.commit(epoch, attempt)
        boundaries.take(barriers)
    phases.add(clock.totals())


class _Boundaries:
    """A task's epoch boundaries: what it reports there, and the barriers it takes."""

    def __init__(self, task: OperatorTask, partition: int, session: Session, clock: TaskClock) -> None:
        self.task, self.partition, self.session, self.clock = task, partition, session, clock

    def report(self, done: int | None, next_epoch: int | None) -> list[Barrier]:
        """The barriers that follow epoch ``done`` for this subtask (none when the task takes
        barriers from the driver only)."""
        if self.task.in_job_barriers is None:
            return []
        with self.clock.phase("boundary"):
            return _host.report_progress(self.task, self.partition, done, next_epoch)

    def take(self, barriers: list[Barrier]) -> None:
        """Takes each barrier's synchronous part; the epoch it cuts is committed."""
        for barrier in barriers:
            with self.clock.phase("barrier"):
                _host.take_barrier(self.session, barrier, self.task.hosts.token)


def epoch_slices(
    epochs: tuple[int, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[tuple[int, Iterator[pa.RecordBatch]]]:
    """Each epoch of ``epochs`` in order with its rows; every epoch comes, with or without
    rows. One epoch gets every batch as it is. Several get rows tagged with :data:`EPOCH`
    (the epoch's place in ``epochs``), in any order: the first epoch's rows go on as they
    arrive, those of later epochs wait in memory until the input ends (a row of the first
    epoch may still come until then); each epoch's batches come without the tag. An epoch's
    batches must be consumed before the next epoch is asked for."""
    if len(epochs) == 1:
        yield epochs[0], batches
        return
    later: list[list[pa.RecordBatch]] = [[] for _ in epochs[1:]]
    yield epochs[0], _first_epoch_rows(batches, later)
    for index, epoch in enumerate(epochs[1:]):
        held, later[index] = later[index], []
        yield epoch, iter(held)


def _first_epoch_rows(
    batches: Iterator[pa.RecordBatch], later: list[list[pa.RecordBatch]]
) -> Iterator[pa.RecordBatch]:
    """The rows of the job's first epoch, as they arrive; rows of each later epoch go to its
    list in ``later``."""
    for batch in batches:
        if not batch.num_rows:
            continue
        for index, rows in _by_epoch(batch, len(later) + 1):
            if index == 0:
                yield rows
            else:
                later[index - 1].append(rows)


def _by_epoch(batch: pa.RecordBatch, epochs: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows of ``batch`` by their epoch's place, without the tag. A batch usually holds
    one epoch (a shuffle block comes from one map task, which reads one epoch's input)."""
    tags = batch.column(EPOCH).to_numpy()
    low, high = int(tags.min()), int(tags.max())
    if low < 0 or high >= epochs:
        raise StateError(
            f"a row tagged with epoch #{high if high >= epochs else low} reached a task of a job "
            f"of {epochs} epochs: the epoch tags were lost or changed on the way"
        )
    rows = batch.drop_columns([EPOCH])
    if low == high:
        yield low, rows
        return
    for index in np.unique(tags):
        yield int(index), rows.filter(pa.array(tags == index))


def _with_epoch(batch: pa.RecordBatch, index: int) -> pa.RecordBatch:
    """An output batch tagged with its epoch's place in the job, for the next step."""
    return batch.append_column(EPOCH, pa.repeat(pa.scalar(index, pa.int64()), batch.num_rows))


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
