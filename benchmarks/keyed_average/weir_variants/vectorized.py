"""Weir variant 3: the vectorized path, twice. A ``VectorizedKeyedFunction`` gets whole Arrow
batches and either

* reads the (count, sum) state of all their keys in one ``get_batch``, folds the batch in with
  NumPy in event order, and writes every key's new state back in one ``put_batch`` (a null
  clears); or
* hands the batch's values to the native sum in count windows of W rows
  (``aggregate(..., "sum", window=W)``, folded in Rust where the state lives) and divides the
  sums of the windows the batch filled by W in Arrow.

No per-record Python in either."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.keyed_average.measure import Outcome
from benchmarks.keyed_average.registry import RunContext, Variant
from benchmarks.keyed_average.weir_variants.common import WEIR_REPEATS, run_weir_job
from benchmarks.keyed_average.workload import OUTPUT_DDL
from weir import BatchContext, RuntimeContext, Types, ValueStateDescriptor, VectorizedKeyedFunction

Ints = npt.NDArray[np.int64]


def fold_batch(
    inverse: Ints, values: Ints, counts: Ints, sums: Ints, w: int
) -> tuple[Ints, Ints, Ints, Ints]:
    """Fold one batch into per-key state, in event order, with NumPy only.

    ``inverse[i]`` is the index of event i's key among the batch's distinct keys;
    ``counts``/``sums`` hold each distinct key's stored state (0 when absent). Returns
    (index of the key of each emitted average, the averages, new counts, new sums); a new
    count of 0 means the key's last window closed and its state is cleared.
    """
    order = np.argsort(inverse, kind="stable")  # group by key, keep event order inside a key
    k_sorted = inverse[order]
    v_sorted = values[order]
    starts = np.flatnonzero(np.r_[True, k_sorted[1:] != k_sorted[:-1]])
    within = np.arange(len(k_sorted)) - np.repeat(starts, np.diff(np.r_[starts, len(k_sorted)]))
    position = counts[k_sorted] + within + 1  # the key's count after this event
    window = (position - 1) // w  # window 0 continues the stored partial window
    # One segment per (key, window); its sum includes the stored partial sum for window 0.
    segment_id = k_sorted * (int(window.max(initial=0)) + 1) + window
    boundary = np.r_[True, segment_id[1:] != segment_id[:-1]]
    segment = np.cumsum(boundary) - 1
    first = np.flatnonzero(boundary)
    seg_key = k_sorted[first]
    seg_sum = np.bincount(segment, weights=v_sorted).astype(np.int64)
    seg_sum += np.where(window[first] == 0, sums[seg_key], 0)
    seg_last_position = position[np.r_[first[1:] - 1, len(position) - 1]]
    closed = seg_last_position % w == 0
    new_counts = np.zeros_like(counts)
    new_sums = np.zeros_like(sums)
    open_tail = np.r_[seg_key[1:] != seg_key[:-1], True] & ~closed
    new_counts[seg_key[open_tail]] = seg_last_position[open_tail] % w
    new_sums[seg_key[open_tail]] = seg_sum[open_tail]
    return seg_key[closed], seg_sum[closed] // w, new_counts, new_sums


class KeyedAverageBatches(VectorizedKeyedFunction):
    """The workload over whole batches: one ``get_batch`` and one ``put_batch`` per batch."""

    def __init__(self, window: int) -> None:
        self.window = window

    def open(self, runtime_context: RuntimeContext) -> None:
        self.acc: Any = runtime_context.get_state(
            ValueStateDescriptor("acc", Types.ROW_NAMED(["count", "sum"], [Types.LONG(), Types.LONG()]))
        )

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch | None:
        keys = batch.column("key").to_numpy()
        values = batch.column("value").to_numpy()
        distinct, first_row, inverse = np.unique(keys, return_index=True, return_inverse=True)
        stored = self.acc.get_batch(ctx.keys)  # one value per row, null where absent
        counts = stored.field("count").fill_null(0).to_numpy(zero_copy_only=False)[first_row]
        sums = stored.field("sum").fill_null(0).to_numpy(zero_copy_only=False)[first_row]
        emitted, averages, new_counts, new_sums = fold_batch(inverse, values, counts, sums, self.window)
        # One value per row, every row of a key carrying the key's final state (later rows win).
        row_counts, row_sums = new_counts[inverse], new_sums[inverse]
        state = pa.StructArray.from_arrays(
            [pa.array(row_counts), pa.array(row_sums)], names=["count", "sum"], mask=pa.array(row_counts == 0)
        )
        self.acc.put_batch(ctx.keys, state)
        if not len(emitted):
            return None
        return pa.record_batch([pa.array(distinct[emitted]), pa.array(averages)], names=["key", "avg"])


class KeyedAverageNative(VectorizedKeyedFunction):
    """The workload as Flink's ``countWindow(W)`` with a native sum: one ``aggregate`` per batch."""

    def __init__(self, window: int) -> None:
        self.window = window

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sums: Any = runtime_context.get_state(
            ValueStateDescriptor(
                "window",
                pa.struct([pa.field("filled", pa.int64(), False), pa.field("acc", pa.int64(), False)]),
            )
        )

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch | None:
        sums = self.sums.aggregate(ctx.keys, batch.column("value"), "sum", window=self.window)
        filled = sums.is_valid()
        if not pc.any(filled).as_py():
            return None
        # Integer division; the workload's values are non-negative, so it floors like `//`.
        averages = pc.divide(sums.filter(filled), self.window)
        return pa.record_batch([batch.column("key").filter(filled), averages], names=["key", "avg"])


def _run(ctx: RunContext) -> Outcome:
    fn = KeyedAverageBatches(ctx.params.w)
    return run_weir_job(
        ctx, "avg-vectorized", "heap", lambda keyed: keyed.process(fn, output_schema=OUTPUT_DDL, uid="avg")
    )


def _run_native(ctx: RunContext) -> Outcome:
    fn = KeyedAverageNative(ctx.params.w)
    return run_weir_job(
        ctx, "avg-native", "heap", lambda keyed: keyed.process(fn, output_schema=OUTPUT_DDL, uid="avg")
    )


_RUN: Callable[[RunContext], Outcome] = _run
_RUN_NATIVE: Callable[[RunContext], Outcome] = _run_native

VARIANTS = [
    Variant(
        name="weir-vectorized",
        system="weir",
        repeats=WEIR_REPEATS,
        path="vectorized",
        run=_RUN,
        description="VectorizedKeyedFunction: Arrow batches, get_batch/put_batch, NumPy fold",
    ),
    Variant(
        name="weir-vectorized-native",
        system="weir",
        repeats=WEIR_REPEATS,
        path="vectorized",
        run=_RUN_NATIVE,
        description="VectorizedKeyedFunction: native sum in count windows (Rust), Arrow division",
    ),
]
