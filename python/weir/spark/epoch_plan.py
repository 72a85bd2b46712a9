"""One epoch as one Spark job: the chain of steps over the epoch's rows.

In front of every stateful step, rows are routed so that Spark partition
``s`` holds exactly subtask ``s`` of that step (by key group for a keyed
step, by a hash of the row for a non-keyed one), and one marker row per
subtask makes every subtask run a task in every epoch, so barriers and
notifications reach all of them even when they get no records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from weir.exceptions import InvalidArgumentError
from weir.spark.routing import key_group_column, routing_column, subtask_column
from weir.spark.tasks import KEY_GROUP, MARKER, ROUTE, OperatorTask
from weir.spark.waterfall import Totals
from weir.spark.worker import run_epoch_task
from weir.types import ValueType, value_type

if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import Column, DataFrame, SparkSession

    from weir.spark.graph import JobGraph, StatefulStep


@dataclass(frozen=True)
class StepInput:
    """What a stateful step's input looks like, learned on the driver."""

    columns: tuple[str, ...]
    key_types: tuple[ValueType, ...] | None
    """The state types of the key columns (``None`` for a non-keyed step)."""


def learn_input(step: StatefulStep, frame: DataFrame) -> StepInput:
    """The input columns and key types of ``step`` from the DataFrame it gets."""
    if step.key_columns is None:
        return StepInput(tuple(frame.columns), None)
    missing = [c for c in step.key_columns if c not in frame.columns]
    if missing:
        raise InvalidArgumentError(
            f"operator {step.uid!r}: key_by names columns {missing} its input does not have; "
            f"it has {frame.columns}"
        )
    keys = to_arrow_schema(frame.select(*step.key_columns).schema)
    return StepInput(tuple(frame.columns), tuple(value_type(f.type) for f in keys))


class EpochPlanner:
    """Builds each epoch's DataFrame for one run of a job graph.

    Every DataFrame and column call is a round trip to the JVM, and a plan
    takes a few hundred of them; the parts that are the same in every epoch
    (the marker rows, the key-group and routing columns) are built once per
    step and reused.
    """

    def __init__(
        self,
        spark: SparkSession,
        graph: JobGraph,
        records: Accumulator[int],
        phases: Accumulator[Totals],
        learned: Callable[[StatefulStep, DataFrame], None],
    ) -> None:
        """``learned`` sees each stateful step's input frame before it is routed (the driver
        learns key types from it) and before the step's task is made."""
        self.spark = spark
        self.graph = graph
        self.records = records
        self.phases = phases
        self.learned = learned
        self._routes: dict[str, _StepRoute] = {}

    def frame(
        self, frame: DataFrame | None, task_of: Callable[[StatefulStep], OperatorTask]
    ) -> DataFrame | None:
        """The epoch's output rows (``None`` when there is neither input nor a stateful step).

        ``frame`` is the source's input for the epoch, ``None`` for an epoch of markers only.
        """
        first = True
        for step in self.graph.steps:
            if frame is not None:
                for transform in step.transforms_before:
                    frame = transform(frame)
                self.learned(step, frame)
            task = task_of(step)
            routed = self._route(step).rows(frame)
            counter = self.records if first else None
            frame = routed.mapInArrow(
                partial(run_epoch_task, task, records=counter, phases=self.phases), step.output_schema
            )
            first = False
        if frame is not None:
            for transform in self.graph.transforms_after:
                frame = transform(frame)
        return frame

    def _route(self, step: StatefulStep) -> _StepRoute:
        route = self._routes.get(step.uid)
        if route is None:
            route = self._routes[step.uid] = _StepRoute(self.spark, step)
        return route


class _StepRoute:
    """Puts a step's rows plus one marker per subtask into partitions, partition ``s``
    holding subtask ``s``."""

    def __init__(self, spark: SparkSession, step: StatefulStep) -> None:
        self.step = step
        parallelism = step.parallelism
        self.markers = spark.range(parallelism, numPartitions=1).select(
            F.lit(None).cast("int").alias(KEY_GROUP),
            routing_column(F.col("id").cast("int"), parallelism).alias(ROUTE),
            F.lit(True).alias(MARKER),
        )
        self.keyed: dict[str, Column] | None = None
        """A keyed step's internal columns. The route repeats the key group's expression
        (Spark evaluates a common subexpression once): one projection, one analysis."""
        if step.key_columns is not None:
            key_group = key_group_column(list(step.key_columns), step.max_parallelism).cast("int")
            subtask = subtask_column(key_group, parallelism, step.max_parallelism)
            self.keyed = {
                KEY_GROUP: key_group,
                ROUTE: routing_column(subtask, parallelism),
                MARKER: F.lit(False),
            }

    def rows(self, frame: DataFrame | None) -> DataFrame:
        """``frame``'s rows (none for ``None``) and the markers, routed."""
        parallelism = self.step.parallelism
        if frame is None:
            rows = self.markers
        else:
            if self.keyed is not None:
                data = frame.withColumns(self.keyed)
            else:
                # Spread by the whole row: the same rows reach the same subtask on a retry.
                subtask = F.pmod(F.hash(*[F.col(c) for c in frame.columns]), F.lit(parallelism))
                data = frame.withColumns(
                    {
                        KEY_GROUP: F.lit(None).cast("int"),
                        ROUTE: routing_column(subtask, parallelism),
                        MARKER: F.lit(False),
                    }
                )
            rows = data.unionByName(self.markers, allowMissingColumns=True)
        # The route has done its work once rows are in their partitions: not
        # handing it to Python saves the JVM converting a column to Arrow.
        return rows.repartition(parallelism, F.col(ROUTE)).drop(ROUTE)
