"""One Spark job over one or more epochs: the chain of steps over the epochs' rows.

In front of every stateful step, rows are routed so that Spark partition
``s`` holds exactly subtask ``s`` of that step (by key group for a keyed
step, by a hash of the row for a non-keyed one). Every subtask runs a task in
every Spark job, so barriers and notifications reach all of them: Spark runs
a ``mapInArrow`` function for every partition of the shuffle, empty ones
included (the driver checks each job that it did).

A job of several epochs tags each epoch's rows with its place in the job
(:data:`~weir.spark.tasks.EPOCH`, after the first step's transforms, which
see one epoch's rows each), so a task can run the epochs in order; steps
pass the tag on with their output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial, reduce
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from weir.exceptions import InvalidArgumentError
from weir.spark.arrow_batches import arrow_schema, fixed_width
from weir.spark.routing import hashed_in_task, key_group_column, spread_column, subtask_column
from weir.spark.tasks import EPOCH, KEY_GROUP, OperatorTask
from weir.spark.waterfall import Totals
from weir.spark.worker import run_epoch_task
from weir.types import ValueType, value_type

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import Column, SparkSession

    from weir.spark.graph import JobGraph, StatefulStep
    from weir.spark.sinks import PartitionWriter


@dataclass(frozen=True)
class StepInput:
    """What a stateful step's input looks like, learned on the driver."""

    columns: tuple[str, ...]
    key_types: tuple[ValueType, ...] | None
    """The state types of the key columns (``None`` for a non-keyed step)."""
    key_groups_shipped: bool = False
    """Whether the JVM's key groups travel with the rows (see :func:`hashed_in_task`)."""
    fixed_width: bool = False
    """Whether every column has a fixed width (see :mod:`weir.spark.arrow_batches`)."""


def learn_input(step: StatefulStep, frame: DataFrame) -> StepInput:
    """The input columns and key types of ``step`` from the DataFrame it gets."""
    width = fixed_width(frame.schema)
    columns = tuple(c for c in frame.columns if c != EPOCH)
    if step.key_columns is None:
        return StepInput(columns, None, fixed_width=width)
    missing = [c for c in step.key_columns if c not in frame.columns]
    if missing:
        raise InvalidArgumentError(
            f"operator {step.uid!r}: key_by names columns {missing} its input does not have; "
            f"it has {frame.columns}"
        )
    keys = arrow_schema(frame.select(*step.key_columns).schema, frame.sparkSession)
    key_types = tuple(_key_type(step, field) for field in keys)
    return StepInput(columns, key_types, not hashed_in_task(keys), fixed_width=width)


def _key_type(step: StatefulStep, key: pa.Field) -> ValueType:
    """The state type of a key column; a key column is a scalar state can hold."""
    if not pa.types.is_nested(key.type):
        try:
            return value_type(key.type)
        except InvalidArgumentError:
            pass
    raise InvalidArgumentError(
        f"operator {step.uid!r}: key_by column {key.name!r} is of Arrow type {key.type}, which "
        "cannot be a state key: a key column holds booleans, ints, longs, floats, doubles, strings "
        "or binaries (key_by several columns for a composite key); convert the column before "
        f"key_by, e.g. .transform(lambda df: df.withColumn({key.name!r}, F.unix_micros({key.name!r}))) "
        "for a timestamp"
    )


class EpochPlanner:
    """Builds each Spark job's DataFrame for one run of a job graph.

    Every DataFrame and column call is a round trip to the JVM, and a plan
    takes a few hundred of them; the parts that are the same in every epoch
    (the key-group and routing expressions, the empty input of an epoch
    without data) are built once per step and reused.
    """

    def __init__(
        self,
        spark: SparkSession,
        graph: JobGraph,
        records: Accumulator[int],
        phases: Accumulator[Totals],
        learned: Callable[[StatefulStep, DataFrame], StepInput],
    ) -> None:
        """``learned`` sees each stateful step's input frame before it is routed and before
        the step's task is made, and says what the driver learned of it (key types)."""
        self.spark = spark
        self.graph = graph
        self.records = records
        self.phases = phases
        self.learned = learned
        self._routes: dict[str, _StepRoute] = {}

    def routed(self, inputs: Sequence[DataFrame]) -> DataFrame | None:
        """The first stateful step's input for the source records of a job's epochs (one
        frame each, in order), routed to its subtasks (``None`` without steps). Spark analyzes
        the plan here, some 25 ms of driver round trips a job, so the driver builds it while
        the previous job runs."""
        if not self.graph.steps:
            return None
        step = self.graph.steps[0]
        frames = [self._through_transforms(step, frame) for frame in inputs]
        if len(frames) == 1:
            (frame,) = frames
        else:
            tagged = [f.withColumn(EPOCH, F.lit(i).cast("long")) for i, f in enumerate(frames)]
            frame = reduce(DataFrame.union, tagged)
        return self._route(step).rows(frame, self.learned(step, frames[0]))

    def frame(
        self,
        inputs: Sequence[DataFrame] | None,
        task_of: Callable[[StatefulStep], OperatorTask],
        routed: DataFrame | None = None,
        write: PartitionWriter | None = None,
    ) -> DataFrame | None:
        """The job's output rows (``None`` when there is neither input nor a stateful step).

        ``inputs`` are the source's input of each of the job's epochs, ``None`` for one epoch
        without input; ``routed`` is :meth:`routed` of them, where that was built already.
        With ``write``, the last step's tasks hand their output to it and the frame has no
        rows. Several epochs need steps without transforms after the first one's.
        """
        steps = self.graph.steps
        several = inputs is not None and len(inputs) > 1
        frame: DataFrame | None = None
        for index, step in enumerate(steps):
            first, last = index == 0, index == len(steps) - 1
            if first:
                if routed is None:
                    routed = self._route(step).nothing if inputs is None else self.routed(inputs)
                assert routed is not None, "a job with steps routes its input"
                rows = routed
            else:
                assert frame is not None
                rows = self._routed(step, frame)
            task = task_of(step)
            counter = self.records if first else None
            run = partial(
                run_epoch_task, task, records=counter, phases=self.phases, write=write if last else None
            )
            tagged = several and not (last and write is not None)
            frame = rows.mapInArrow(run, _with_epoch(step.output_schema) if tagged else step.output_schema)
        if frame is not None:
            for transform in self.graph.transforms_after:
                frame = transform(frame)
        return frame

    def _through_transforms(self, step: StatefulStep, frame: DataFrame) -> DataFrame:
        for transform in step.transforms_before:
            frame = transform(frame)
        return frame

    def _routed(self, step: StatefulStep, frame: DataFrame) -> DataFrame:
        """``frame`` through the step's transforms, routed to its subtasks; what the driver
        learns of the step's input is known once this returns."""
        frame = self._through_transforms(step, frame)
        return self._route(step).rows(frame, self.learned(step, frame))

    def _route(self, step: StatefulStep) -> _StepRoute:
        route = self._routes.get(step.uid)
        if route is None:
            route = self._routes[step.uid] = _StepRoute(self.spark, step)
        return route


class _StepRoute:
    """Puts a step's rows into partitions, partition ``s`` holding subtask ``s``."""

    def __init__(self, spark: SparkSession, step: StatefulStep) -> None:
        self.spark = spark
        self.step = step
        self.key_group: Column | None = None
        self.route: Column | None = None
        if step.key_columns is not None:
            self.key_group = key_group_column(list(step.key_columns), step.max_parallelism)
            self.route = self._route_of(self.key_group)

    def _route_of(self, key_group: Column) -> Column:
        return subtask_column(key_group, self.step.parallelism, self.step.max_parallelism)

    @cached_property
    def nothing(self) -> DataFrame:
        """An epoch without input still runs a task per subtask, on empty partitions."""
        return self.spark.range(0, numPartitions=1).repartition(self.step.parallelism, "id")

    @cached_property
    def route_by_column(self) -> Column:
        """The route from the rows' :data:`KEY_GROUP` column, where they carry it."""
        return self._route_of(F.col(KEY_GROUP))

    def rows(self, frame: DataFrame, learned: StepInput) -> DataFrame:
        """``frame``'s rows, routed; with their key groups in :data:`KEY_GROUP` where the task
        cannot compute them."""
        parallelism = self.step.parallelism
        route = self.route
        if route is None:
            # Spread by the whole row: the same rows reach the same subtask on a retry.
            route = spread_column(frame.columns, parallelism)
        elif learned.key_groups_shipped:
            assert self.key_group is not None
            frame = frame.withColumn(KEY_GROUP, self.key_group)
            route = self.route_by_column
        # The route is the shuffle's partition id, not a column: the rows
        # cross the shuffle and reach Python with the step's columns only.
        return frame.repartitionById(parallelism, route)


def _with_epoch(schema: StructType) -> StructType:
    """A step's output schema with the epoch tag, for the next step of a job of several epochs."""
    return StructType([*schema.fields, StructField(EPOCH, LongType(), nullable=False)])
