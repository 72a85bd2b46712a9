"""A job with three stateful steps, each keyed differently, and a buffering sink.

Events ``(event_id, user, region, amount)`` arrive with about 5% duplicates
(the same event twice). The job

1. drops duplicates by ``event_id`` (:class:`Dedup`, value state per event id),
2. keeps a running count and total per ``user`` (:class:`PerUser`, value state),
3. keeps the top users of each ``region`` by total (:class:`RegionTopN`, map
   state of user -> total, and the current top list), emitting
   ``(region, seq, top)`` for every update, where ``seq`` numbers the
   region's updates.

Every user's events carry the same amount, so running totals do not depend
on the order events of one epoch reach a subtask, and the published output
can be checked exactly: each region's ``seq`` runs 1..n once each, and its
last ``top`` is the final ranking (see :func:`expected`).

:class:`BufferingSink` is the buffering sink of Flink's "Working with State"
page, translated: a non-keyed function that buffers elements in operator
list state and hands them on in groups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from weir import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ProcessFunction,
    RuntimeContext,
    Types,
    ValueStateDescriptor,
)

USERS = 5_000
REGIONS = 7
TOP = 3
EVENT_SCHEMA = "event_id long, user long, region long, amount long"
USER_SCHEMA = "user long, region long, count long, total long"
TOP_SCHEMA = "region long, seq long, top string"


def event(i: int) -> tuple[int, int, int, int]:
    """Row ``i`` of the input: every 20th row repeats the previous event."""
    event_id = i - 1 if i % 20 == 19 else i
    user = (event_id * 2654435761) % USERS
    return event_id, user, user % REGIONS, user % 97 + 1


def expected(n: int) -> tuple[dict[int, int], dict[int, str]]:
    """Per region: how many updates step 3 emits, and its final top list."""
    seen: set[int] = set()
    counts: Counter[int] = Counter()
    for i in range(n):
        event_id, user, _, _ = event(i)
        if event_id not in seen:
            seen.add(event_id)
            counts[user] += 1
    updates: Counter[int] = Counter()
    totals: dict[int, dict[int, int]] = {}
    for user, count in counts.items():
        region, amount = user % REGIONS, user % 97 + 1
        updates[region] += count
        totals.setdefault(region, {})[user] = count * amount
    tops = {region: _render(_top(users.items())) for region, users in totals.items()}
    return dict(updates), tops


def _top(entries: Any) -> list[tuple[int, int]]:
    """The ``TOP`` highest ``(user, total)`` pairs, ties broken by user id."""
    return sorted(entries, key=lambda e: (-e[1], e[0]))[:TOP]


def _render(top: list[tuple[int, int]]) -> str:
    return ",".join(f"{user}:{total}" for user, total in top)


class Dedup(KeyedProcessFunction):
    """Passes each event id's first event on (keyed by ``event_id``)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.BOOLEAN()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        if not self.seen.value():
            self.seen.update(True)
            yield value


class PerUser(KeyedProcessFunction):
    """Running count and total per user (keyed by ``user``)."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.acc = runtime_context.get_state(
            ValueStateDescriptor("acc", Types.TUPLE([Types.LONG(), Types.LONG()]))
        )

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        _, user, region, amount = value
        count, total = self.acc.value() or (0, 0)
        count, total = count + 1, total + amount
        self.acc.update((count, total))
        yield user, region, count, total


class RegionTopN(KeyedProcessFunction):
    """The top users of a region by total (keyed by ``region``), with map state."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.totals = runtime_context.get_map_state(MapStateDescriptor("totals", Types.LONG(), Types.LONG()))
        self.top = runtime_context.get_state(
            ValueStateDescriptor("top", Types.LIST(Types.TUPLE([Types.LONG(), Types.LONG()])))
        )
        self.seq = runtime_context.get_state(ValueStateDescriptor("seq", Types.LONG(), default_value=0))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        user, region, _, total = value
        # Totals only grow, so the new top is among the old top and this user.
        self.totals.put(user, max(total, self.totals.get(user) or 0))
        candidates = {u: t for u, t in self.top.value() or []}
        candidates[user] = self.totals.get(user)
        top = _top(candidates.items())
        self.top.update(top)
        seq = self.seq.value() + 1
        self.seq.update(seq)
        yield region, seq, _render(top)


class BufferingSink(ProcessFunction, CheckpointedFunction):
    """Buffers elements and hands them on ``threshold`` at a time.

    The buffer is operator list state: ``snapshot_state`` copies it in,
    ``initialize_state`` reads it back (split evenly over the subtasks when
    the parallelism changes), so no buffered element is lost or repeated.
    """

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.buffered: list[Any] = []

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.checkpointed = context.get_operator_state_store().get_list_state(
            ListStateDescriptor("buffered-elements", Types.TUPLE([Types.LONG(), Types.LONG()]))
        )
        self.buffered = list(self.checkpointed.get()) if context.is_restored() else []

    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterator[Any]:
        self.buffered.append(tuple(value))
        if len(self.buffered) >= self.threshold:
            out, self.buffered = self.buffered, []
            yield from out

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.checkpointed.update(self.buffered)
