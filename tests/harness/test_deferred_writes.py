"""The runner with deferred writes (what a Spark task uses): value-like state stays
cached across ``process`` calls and is written back at ``snapshot_state``/``close``.

Every state kind gives the same outputs as with per-batch writes, the next task
(a new runner on the same subtask) sees everything the first one wrote, a failed
``process`` writes nothing, and the cache is flushed when it grows too large.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from keyed_average import KeyedAverage, expected
from test_state_types import RECORDS, EveryState, check_outputs

from weir import KeyedProcessFunction, RuntimeContext, Types, ValueStateDescriptor, _internal
from weir.exceptions import StateError
from weir.runtime import OperatorRunner


def local_session(tmp_path: Path, backend: str) -> Any:
    operator = _internal.LocalOperator("deferred", 1, 128, backend, str(tmp_path))
    return operator, operator.session(0)


def stored(session: Any, function: KeyedProcessFunction, name: str, key: Any) -> Any:
    """What the session holds for ``key`` in state ``name``, read by a fresh runner."""
    reader = OperatorRunner(function, session, restored=True)
    reader.open()
    return reader.read_keyed_state(name, key)


def test_every_state_kind_across_batches_and_tasks(backend: str, tmp_path: Path) -> None:
    _operator, session = local_session(tmp_path, backend)
    session.begin(1, 0, None)
    runner = OperatorRunner(EveryState(), session, defer_writes=True)
    runner.open()
    # Several records per key per batch, and keys in several batches.
    first, second = RECORDS[:5], RECORDS[5:]
    check_outputs(runner.process(first, [k for k, _ in first]), first, {})
    # Nothing of value-like state is written yet: another runner reads the session.
    assert stored(session, EveryState(), "total", "a") is None
    assert stored(session, EveryState(), "history", "a") == [1, 3, 5]  # list state: per batch
    check_outputs(
        runner.process(second, [k for k, _ in second]), second, {"a": [1, 3, 5], "b": [2], "c": [4]}
    )
    runner.snapshot_state(1)
    runner.close()
    session.commit(1, 0)

    session.begin(2, 0, 1)
    task2 = OperatorRunner(EveryState(), session, restored=True, defer_writes=True)
    task2.open()
    more = [("a", 9), ("b", 10)]
    check_outputs(task2.process(more, ["a", "b"]), more, {"a": [1, 3, 5, 8], "b": [2, 6], "c": [4, 7]})
    assert task2.read_keyed_state("history", "a") == [1, 3, 5, 8, 9]
    assert task2.read_keyed_state("mean", "b") == 6.0
    task2.close()
    session.commit(2, 0)


def test_keyed_average_matches_its_expectation_with_a_tiny_cache(tmp_path: Path, monkeypatch: Any) -> None:
    """Flushing (and emptying) the cache mid-task loses nothing."""
    monkeypatch.setattr(OperatorRunner, "DEFERRED_KEYS", 7)
    n, keys = 2000, 50
    events = [((i * 2654435761) % keys, i % 1000) for i in range(n)]
    _operator, session = local_session(tmp_path, "heap")
    session.begin(1, 0, None)
    runner = OperatorRunner(KeyedAverage(), session, defer_writes=True)
    runner.open()
    outputs = []
    for start in range(0, n, 64):
        chunk = events[start : start + 64]
        outputs += runner.process(chunk, [k for k, _ in chunk])
    runner.close()
    session.commit(1, 0)
    assert (len(outputs), sum(avg for _, avg in outputs)) == expected(n, keys)


class FailsOn(KeyedProcessFunction):
    """Counts per key; raises on the value ``bad``."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: tuple[str, int], ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        self.count.update((self.count.value() or 0) + 1)
        if value[1] == self.bad:
            raise RuntimeError("boom")
        yield value


def test_a_failed_process_writes_nothing_more(tmp_path: Path) -> None:
    _operator, session = local_session(tmp_path, "heap")
    session.begin(1, 0, None)
    runner = OperatorRunner(FailsOn(bad=3), session, defer_writes=True)
    runner.open()
    runner.process([("a", 1), ("a", 2)], ["a", "a"])
    with pytest.raises(RuntimeError, match="boom"):
        runner.process([("a", 3)], ["a"])
    with pytest.raises(StateError, match="failed"):
        runner.process([("a", 4)], ["a"])
    runner.snapshot_state(1)
    runner.close()
    assert stored(session, FailsOn(bad=0), "count", "a") is None


class LastSeen(KeyedProcessFunction):
    """Gets its value state lazily, at the record ``register_at``; from then on writes each
    key's latest value without reading it first (odd values) or adds to it (even ones)."""

    def __init__(self, register_at: int) -> None:
        self.register_at = register_at
        self.last: Any = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self.context = runtime_context
        if self.register_at < 0:
            self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.LONG()))

    def process_element(self, value: int, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        if self.last is None and value == self.register_at:
            self.last = self.context.get_state(ValueStateDescriptor("last", Types.LONG()))
        if self.last is not None:
            self.last.update(value if value % 2 else (self.last.value() or 0) + value)
        yield value


def test_a_value_state_got_mid_task_keeps_writes_to_keys_met_before(backend: str, tmp_path: Path) -> None:
    """A function may get its state lazily in process_element; keys the task met before (in
    this batch and earlier ones) are then written back like any other, read or not."""
    _operator, session = local_session(tmp_path, backend)
    session.begin(1, 0, None)
    runner = OperatorRunner(LastSeen(register_at=3), session, defer_writes=True)
    runner.open()
    runner.process([1, 2], ["a", "b"])
    runner.process([3, 4, 5], ["a", "b", "c"])  # registered at "a"'s 3; "a" and "b" met before
    runner.process([6, 7], ["a", "d"])
    runner.snapshot_state(1)
    runner.close()
    session.commit(1, 0)
    reader = LastSeen(register_at=-1)
    assert {key: stored(session, reader, "last", key) for key in "abcde"} == {
        "a": 9,
        "b": 4,
        "c": 5,
        "d": 7,
        "e": None,
    }


def test_check_keys_sees_each_new_key_once_and_a_refusal_fails_the_runner(
    backend: str, tmp_path: Path
) -> None:
    _operator, session = local_session(tmp_path, backend)
    session.begin(1, 0, None)
    seen: list[int] = []

    def check(keys: _internal.KeyBatch) -> None:
        seen.append(len(keys))
        bounds = keys.key_group_bounds()
        assert bounds is not None and 0 <= bounds[0] <= bounds[1] < 128
        if len(seen) == 3:
            raise StateError("these rows belong to another subtask")

    runner = OperatorRunner(KeyedAverage(), session, defer_writes=True, check_keys=check)
    runner.open()
    runner.process([(1, 10), (2, 20), (1, 30)], [1, 2, 1])
    runner.process([(2, 40), (3, 50)], [2, 3])  # only key 3 is new
    runner.process([(1, 60)], [1])  # nothing new: not checked
    assert seen == [2, 1]
    assert session.keys([], None).key_group_bounds() is None
    with pytest.raises(StateError, match="another subtask"):
        runner.process([(4, 70)], [4])
    with pytest.raises(StateError, match="failed"):
        runner.process([(1, 80)], [1])
