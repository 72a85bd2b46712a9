"""Where an epoch's time goes: the driver's steps and each task's phases.

The driver times its own steps (planning the input, building the Spark plan,
the Spark job, telling the coordinator, publishing); every task times its
phases (waiting for input rows, which is the scan and shuffle upstream of
it; attaching to its state; the barriers' synchronous parts; beginning the
epochs; the function with its state accesses; converting output; reporting
epoch boundaries to the coordinator; writing state back; committing) and
sends them to the driver in an accumulator. The job's progress output prints
one line per Spark job at debug level; benchmarks print it for a whole run.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.accumulators import AccumulatorParam

__all__ = ["DRIVER_STEPS", "TASK_PHASES", "EpochWaterfall", "PhaseTimes", "TaskClock"]

TASK_PHASES = (
    "input",
    "attach",
    "barrier",
    "begin",
    "function",
    "output",
    "boundary",
    "write_back",
    "commit",
)
"""A task's phases, in order."""
DRIVER_STEPS = ("plan", "build", "spark_job", "record", "barrier", "publish")
"""The driver's steps around an epoch, in order."""

Totals = dict[str, list[float]]
"""Per phase: ``[seconds summed over tasks, longest task's seconds, tasks]``."""


class PhaseTimes(AccumulatorParam[Totals]):
    """Adds the tasks' phase times up: sums, maxima and counts per phase."""

    def zero(self, value: Totals) -> Totals:
        return {}

    def addInPlace(self, value1: Totals, value2: Totals) -> Totals:  # noqa: N802 - PySpark's name
        for phase, (seconds, longest, tasks) in value2.items():
            mine = value1.setdefault(phase, [0.0, 0.0, 0])
            mine[0] += seconds
            mine[1] = max(mine[1], longest)
            mine[2] += tasks
        return value1


class TaskClock:
    """Times one task's phases; :meth:`totals` is what it adds to the accumulator."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Adds the time spent in the ``with`` block to phase ``name``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def timed(self, name: str, items: Iterator[Any]) -> Iterator[Any]:
        """``items``, with the time spent waiting for each added to phase ``name``."""
        while True:
            with self.phase(name):
                item = next(items, _END)
            if item is _END:
                return
            yield item

    def totals(self) -> Totals:
        return {phase: [seconds, seconds, 1] for phase, seconds in self.seconds.items()}


_END = object()


@dataclass
class EpochWaterfall:
    """One Spark job's timings: the driver's steps and the tasks' phases, summed over the
    epochs the job ran (one, or up to ``StreamJob(epochs_per_job=...)``)."""

    epoch: int
    """The job's last epoch."""
    driver: dict[str, float] = field(default_factory=dict)
    """Seconds per driver step."""
    tasks: Totals = field(default_factory=dict)
    """Per task phase: seconds summed over tasks, the longest task's, and tasks."""

    def render(self) -> str:
        """One line: the driver's steps with the tasks' phases inside the Spark job."""
        steps = []
        for step in DRIVER_STEPS:
            seconds = self.driver.get(step)
            if seconds is None:
                continue
            text = f"{step.replace('_', ' ')} {seconds * 1000:.0f} ms"
            if step == "spark_job" and self.tasks:
                phases = ", ".join(
                    f"{phase.replace('_', ' ')} {self.tasks[phase][0] * 1000:.0f}"
                    for phase in TASK_PHASES
                    if phase in self.tasks
                )
                count = max(int(v[2]) for v in self.tasks.values())
                text += f" [task ms summed over {count} tasks: {phases}]"
            steps.append(text)
        return f"epoch {self.epoch} waterfall: " + " | ".join(steps)

    def to_dict(self) -> dict[str, Any]:
        """For benchmark results (JSON)."""
        return {
            "epoch": self.epoch,
            "driver": dict(self.driver),
            "tasks": {k: list(v) for k, v in self.tasks.items()},
        }
