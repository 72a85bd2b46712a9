"""The shape of a stream job: a source, steps, a sink.

A job is a chain. Stateless steps are DataFrame transformations; each
stateful step (:class:`StatefulStep`) runs a user function per subtask with
its own uid, parallelism and max parallelism, keyed (after ``key_by``) or
not. Every epoch runs the whole chain as one Spark job, with one shuffle in
front of each stateful step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from weir.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from weir.spark.sinks import Sink
    from weir.spark.sources import Source

Transform = Callable[["DataFrame"], "DataFrame"]
"""A stateless step: any DataFrame transformation."""


@dataclass(frozen=True)
class StatefulStep:
    """A step whose function keeps Weir state."""

    uid: str
    """The operator's stable id: its state is found by it in checkpoints and savepoints."""
    function: Any
    output_schema: StructType
    key_columns: tuple[str, ...] | None
    """The key columns of a keyed step; ``None`` for a step with operator state only."""
    parallelism: int
    max_parallelism: int
    transforms_before: tuple[Transform, ...] = ()
    """Stateless steps between the previous stateful step (or the source) and this one."""

    @property
    def keyed(self) -> bool:
        """Whether the step runs after ``key_by``."""
        return self.key_columns is not None

    def shape(self) -> tuple[str, int, int]:
        """``(uid, parallelism, max_parallelism)``, as checkpoints describe an operator."""
        return self.uid, self.parallelism, self.max_parallelism


@dataclass(frozen=True)
class JobGraph:
    """A validated job: source, stateful steps in order, trailing transforms, sink."""

    source: Source
    source_uid: str
    steps: tuple[StatefulStep, ...]
    transforms_after: tuple[Transform, ...]
    sink: Sink
    sink_uid: str

    def step(self, uid: str) -> StatefulStep:
        """The stateful step ``uid``."""
        for step in self.steps:
            if step.uid == uid:
                return step
        raise KeyError(uid)

    def shapes(self) -> list[tuple[str, int, int]]:
        """Every stateful operator as ``(uid, parallelism, max_parallelism)``."""
        return [step.shape() for step in self.steps]


def check_parallelism(uid: str, parallelism: int, max_parallelism: int) -> None:
    """A step's parallelism must fit its key groups."""
    if not 1 <= max_parallelism <= 32768:
        raise InvalidArgumentError(
            f"operator {uid!r}: max_parallelism must be between 1 and 32768, got {max_parallelism}"
        )
    if not 1 <= parallelism <= max_parallelism:
        raise InvalidArgumentError(
            f"operator {uid!r}: parallelism {parallelism} must be between 1 and its "
            f"max_parallelism {max_parallelism}"
        )


def check_uids(uids: list[str]) -> None:
    """Uids name state in checkpoints, so each appears once in a job."""
    seen: set[str] = set()
    for uid in uids:
        if not uid:
            raise InvalidArgumentError("a uid may not be empty")
        if uid in seen:
            raise InvalidArgumentError(
                f"uid {uid!r} is used twice in this job: every source, stateful step and sink "
                "needs its own uid (state is found by uid in checkpoints and savepoints)"
            )
        seen.add(uid)
