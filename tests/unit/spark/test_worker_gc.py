"""The cycle collector's threshold during tasks (``weir.spark.worker``): raised while any
task runs in the process, and the worker's own setting back once the last one ends."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from weir.spark import worker


@pytest.fixture
def own_threshold() -> Iterator[tuple[int, ...]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*saved)


def _task() -> Iterator[tuple[int, ...]]:
    """A task's generator, as Spark drives it: the threshold it runs with, per batch."""
    with worker._rare_gc_passes():
        yield gc.get_threshold()
        yield gc.get_threshold()


def test_tasks_whose_generators_interleave_leave_the_workers_threshold(
    own_threshold: tuple[int, ...],
) -> None:
    first, second = _task(), _task()
    raised = (worker.TASK_GC_THRESHOLD, *own_threshold[1:])
    assert next(first) == raised
    assert next(second) == raised
    # The first task ends while the second still runs: the second keeps the raised threshold.
    assert list(first) == [raised]
    assert gc.get_threshold() == raised
    assert list(second) == [raised]
    assert gc.get_threshold() == own_threshold


def test_a_failing_task_gives_the_threshold_back(own_threshold: tuple[int, ...]) -> None:
    task = _task()
    next(task)
    with pytest.raises(RuntimeError):
        task.throw(RuntimeError("the function failed"))
    assert gc.get_threshold() == own_threshold


FREEZE_ONCE = """
import gc, weakref
from weir.spark import worker

worker._freeze_long_lived_objects()
frozen = gc.get_freeze_count()
assert frozen > 0, frozen
later = [[] for _ in range(1000)]
worker._freeze_long_lived_objects()
assert gc.get_freeze_count() == frozen, (gc.get_freeze_count(), frozen)

class Node:
    pass

node = Node()
node.self = node
ref = weakref.ref(node)
del node
gc.collect()
assert ref() is None, "a cycle made after the freeze is still collected"
"""


def test_a_worker_freezes_what_its_first_task_found_once() -> None:
    # In a process of its own: freezing pytest's objects would outlive the test.
    subprocess.run([sys.executable, "-c", FREEZE_ONCE], check=True)
