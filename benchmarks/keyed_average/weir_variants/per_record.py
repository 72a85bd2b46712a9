"""Weir variants 1 and 2: a per-record Python ``KeyedProcessFunction`` with a ``ValueState``
(the seeds' CountWindowAverage, W events per window), heap and RocksDB backends."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.keyed_average.measure import Outcome
from benchmarks.keyed_average.registry import RunContext, Variant
from benchmarks.keyed_average.spark_env import LOCAL_CLUSTER_CONF
from benchmarks.keyed_average.weir_variants.common import CHECKPOINT_INTERVAL_MS, WEIR_REPEATS, run_weir_job
from benchmarks.keyed_average.workload import OUTPUT_DDL
from weir import KeyedProcessFunction, RuntimeContext, StateBackend, Types, ValueStateDescriptor

NO_CHECKPOINTS = "weir-per-record-heap-no-checkpoints"
"""The heap variant with checkpointing off, each run paired with one with checkpointing on in
the same session: the throughput cost of checkpointing every second."""

COST_PAIRS = "checkpoint_cost_pairs"
"""The key of an outcome's extra holding its pair's wall times (see :func:`_paired`)."""


class CountWindowAverage(KeyedProcessFunction):
    """Per key a value state (count, sum); emit (key, sum // count) every W events and clear."""

    def __init__(self, window: int) -> None:
        self.window = window

    def open(self, runtime_context: RuntimeContext) -> None:
        self.acc = runtime_context.get_state(
            ValueStateDescriptor("acc", Types.ROW_NAMED(["count", "sum"], [Types.LONG(), Types.LONG()]))
        )

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[tuple[int, int]]:
        count, total = self.acc.value() or (0, 0)
        count += 1
        total += value[1]  # the element is the row (key, value)
        if count == self.window:
            self.acc.clear()
            yield ctx.get_current_key(), total // count
        else:
            self.acc.update((count, total))


class ReturningCountWindowAverage(CountWindowAverage):
    """The same function returning its output (a tuple of records, or ``None``) instead of
    yielding it: no generator per record. The body repeats the yielding one's, so each
    variant makes exactly the calls its shape needs."""

    def process_element(  # type: ignore[override]
        self, value: Any, ctx: KeyedProcessFunction.Context
    ) -> tuple[tuple[int, int]] | None:
        count, total = self.acc.value() or (0, 0)
        count += 1
        total += value[1]
        if count == self.window:
            self.acc.clear()
            return ((ctx.get_current_key(), total // count),)
        self.acc.update((count, total))
        return None


def _run(
    backend: str, checkpoints: bool = True, function: type[CountWindowAverage] = CountWindowAverage
) -> Callable[[RunContext], Outcome]:
    # docs/benchmarks.md: the RocksDB variant takes incremental checkpoints.
    state_backend = StateBackend(backend, incremental=backend == "rocksdb")
    returning = function is ReturningCountWindowAverage

    def run(ctx: RunContext) -> Outcome:
        fn = function(ctx.params.w)
        return run_weir_job(
            ctx,
            f"avg-per-record-{backend}"
            + ("" if checkpoints else "-no-checkpoints")
            + ("-returning" if returning else ""),
            state_backend,
            lambda keyed: keyed.process(fn, output_schema=OUTPUT_DDL, uid="avg"),
            checkpoint_interval_ms=CHECKPOINT_INTERVAL_MS if checkpoints else None,
        )

    return run


COST_PAIRS_TIMED = 8
"""Timed pairs of the no-checkpoints variant: an even count, so as many pairs run with
checkpoints first as second (the first run of a pair runs in a JVM a little less warm)."""


def _paired() -> Callable[[RunContext], Outcome]:
    """Each run without checkpoints next to one with them, in one session and in turns (the
    first run of a pair is a run less warm): the machine's drift over a variant's runs and the
    JVM's warm-up then fall on both sides alike. Comparing two variants run one after the
    other measured that drift instead (a 17% "cost" at N = 20M against about 1% in pairs).

    The first call runs one pair untimed before its timed one: the session's first runs are
    the slowest by far (2.6 s against 1.4-1.7 s for later runs at N = 2M, stop 40's probe),
    and whichever side ran first took that as a "cost" of up to 28%."""
    with_checkpoints, without = _run("heap"), _run("heap", checkpoints=False)
    turns = itertools.count()

    def pair(ctx: RunContext, turn: int) -> Outcome:
        first, second = (with_checkpoints, without) if turn % 2 == 0 else (without, with_checkpoints)
        outcomes = {first: first(ctx), second: second(ctx)}
        on, off = outcomes[with_checkpoints], outcomes[without]
        if (on.count, on.checksum) != (off.count, off.checksum):
            raise RuntimeError(
                f"the run with checkpoints wrote {on.count} rows (checksum {on.checksum}), the run "
                f"without {off.count} ({off.checksum})"
            )
        off.extra[COST_PAIRS] = [{"with_checkpoints_s": on.wall_s, "without_s": off.wall_s}]
        return off

    def run(ctx: RunContext) -> Outcome:
        turn = next(turns)
        if turn == 0:
            pair(ctx, 1)
        return pair(ctx, turn)

    return run


VARIANTS = [
    Variant(
        name="weir-per-record-heap",
        system="weir",
        repeats=WEIR_REPEATS,
        path="per_record",
        run=_run("heap"),
        description="Python KeyedProcessFunction + ValueState, heap backend",
    ),
    Variant(
        name="weir-per-record-rocksdb",
        system="weir",
        repeats=WEIR_REPEATS,
        path="per_record",
        run=_run("rocksdb"),
        description="Python KeyedProcessFunction + ValueState, RocksDB backend, incremental checkpoints",
    ),
    Variant(
        name="weir-per-record-heap-returning",
        system="weir",
        repeats=WEIR_REPEATS,
        path="per_record",
        run=_run("heap", function=ReturningCountWindowAverage),
        description="the heap variant's function returning its output instead of yielding it",
    ),
    Variant(
        name="weir-per-record-heap-local-cluster",
        system="weir",
        repeats=WEIR_REPEATS,
        path="per_record",
        run=_run("heap"),
        spark_conf=lambda _cache: LOCAL_CLUSTER_CONF,
        description="the heap variant on local-cluster[2,1,1024]: two executors, a state host each",
    ),
    Variant(
        name=NO_CHECKPOINTS,
        system="weir",
        repeats=COST_PAIRS_TIMED,
        path="per_record",
        run=_paired(),
        description="the heap variant with checkpointing off, each run paired with one with it on "
        "(after one untimed pair)",
    ),
]
