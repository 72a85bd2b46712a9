"""One epoch as one Spark job: the chain of steps over the epoch's rows.

In front of every stateful step, rows are routed so that Spark partition
``s`` holds exactly subtask ``s`` of that step (by key group for a keyed
step, by a hash of the row for a non-keyed one). Every subtask runs a task in
every epoch, so barriers and notifications reach all of them: Spark runs a
``mapInArrow`` function for every partition of the shuffle, empty ones
included (the driver checks each epoch that it did).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import functions as F

from weir.exceptions import InvalidArgumentError
from weir.spark.arrow_batches import arrow_schema, fixed_width
from weir.spark.routing import hashed_in_task, key_group_column, spread_column, subtask_column
from weir.spark.tasks import KEY_GROUP, OperatorTask
from weir.spark.waterfall import Totals
from weir.spark.worker import run_epoch_task
from weir.types import ValueType, value_type

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import Column, DataFrame, SparkSession

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
    if step.key_columns is None:
        return StepInput(tuple(frame.columns), None, fixed_width=width)
    missing = [c for c in step.key_columns if c not in frame.columns]
    if missing:
        raise InvalidArgumentError(
            f"operator {step.uid!r}: key_by names columns {missing} its input does not have; "
            f"it has {frame.columns}"
        )
    keys = arrow_schema(frame.select(*step.key_columns).schema, frame.sparkSession)
    key_types = tuple(_key_type(step, field) for field in keys)
    return StepInput(tuple(frame.columns), key_types, not hashed_in_task(keys), fixed_width=width)


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
    """Builds each epoch's DataFrame for one run of a job graph.

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

    def routed(self, frame: DataFrame) -> DataFrame | None:
        """The first stateful step's input for an epoch's source records, routed to its
        subtasks (``None`` without steps). Spark analyzes the plan here, some 25 ms of driver
        round trips an epoch, so the driver builds it while the previous epoch's job runs."""
        if not self.graph.steps:
            return None
        return self._routed(self.graph.steps[0], frame)

    def frame(
        self,
        frame: DataFrame | None,
        task_of: Callable[[StatefulStep], OperatorTask],
        routed: DataFrame | None = None,
        write: PartitionWriter | None = None,
    ) -> DataFrame | None:
        """The epoch's output rows (``None`` when there is neither input nor a stateful step).

        ``frame`` is the source's input for the epoch, ``None`` for an epoch without input;
        ``routed`` is :meth:`routed` of it, where that was built already. With ``write``, the
        last step's tasks hand their output to it and the frame has no rows.
        """
        steps = self.graph.steps
        for index, step in enumerate(steps):
            first, last = index == 0, index == len(steps) - 1
            rows = routed if first and routed is not None else self._routed(step, frame)
            task = task_of(step)
            counter = self.records if first else None
            run = partial(
                run_epoch_task, task, records=counter, phases=self.phases, write=write if last else None
            )
            frame = rows.mapInArrow(run, step.output_schema)
        if frame is not None:
            for transform in self.graph.transforms_after:
                frame = transform(frame)
        return frame

    def _routed(self, step: StatefulStep, frame: DataFrame | None) -> DataFrame:
        """``frame`` (``None``: no rows) through the step's transforms, routed to its subtasks;
        what the driver learns of the step's input is known once this returns."""
        learned = None
        if frame is not None:
            for transform in step.transforms_before:
                frame = transform(frame)
            learned = self.learned(step, frame)
        return self._route(step).rows(frame, learned)

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

    def rows(self, frame: DataFrame | None, learned: StepInput | None) -> DataFrame:
        """``frame``'s rows (none for ``None``), routed; with their key groups in
        :data:`KEY_GROUP` where the task cannot compute them."""
        if frame is None:
            return self.nothing
        parallelism = self.step.parallelism
        route = self.route
        if route is None:
            # Spread by the whole row: the same rows reach the same subtask on a retry.
            route = spread_column(frame.columns, parallelism)
        elif learned is not None and learned.key_groups_shipped:
            assert self.key_group is not None
            frame = frame.withColumn(KEY_GROUP, self.key_group)
            route = self.route_by_column
        # The route is the shuffle's partition id, not a column: the rows
        # cross the shuffle and reach Python with the step's columns only.
        return frame.repartitionById(parallelism, route)
