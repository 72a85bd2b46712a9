"""The vectorized path: whole Arrow batches, get_batch/put_batch and native aggregates run in Rust."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from weir import BatchContext, RuntimeContext, ValueStateDescriptor, VectorizedKeyedFunction
from weir.exceptions import InvalidArgumentError, StateError
from weir.testing import KeyedOperatorHarness

MEAN_STATE = pa.struct([pa.field("sum", pa.float64(), False), pa.field("count", pa.int64(), False)])


class RunningStats(VectorizedKeyedFunction):
    """Per user: running sum, count, min, max and mean of amounts, and the previous note."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total", pa.int64()))
        self.count = runtime_context.get_state(ValueStateDescriptor("count", pa.int64()))
        self.low = runtime_context.get_state(ValueStateDescriptor("low", pa.int64()))
        self.high = runtime_context.get_state(ValueStateDescriptor("high", pa.int64()))
        self.mean = runtime_context.get_state(ValueStateDescriptor("mean", MEAN_STATE))
        self.note = runtime_context.get_state(ValueStateDescriptor("note", pa.string()))

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch:
        amount = batch.column("amount")
        keys = ctx.keys
        previous = self.note.get_batch(keys)
        self.note.put_batch(keys, batch.column("note"))
        return pa.RecordBatch.from_arrays(
            [
                batch.column("seq"),
                batch.column("user"),
                self.total.aggregate(keys, amount, "sum"),
                self.count.aggregate(keys, amount, "count"),
                self.low.aggregate(keys, amount, "min"),
                self.high.aggregate(keys, amount, "max"),
                self.mean.aggregate(keys, amount, "mean"),
                previous,
            ],
            names=["seq", "user", "sum", "count", "min", "max", "mean", "previous_note"],
        )


def batch(rows: list[tuple[int, str, int | None, str]]) -> pa.RecordBatch:
    seq, user, amount, note = zip(*rows, strict=True)
    return pa.RecordBatch.from_arrays(
        [pa.array(seq, pa.int64()), pa.array(user), pa.array(amount, pa.int64()), pa.array(note)],
        names=["seq", "user", "amount", "note"],
    )


def expected(batches: list[list[tuple[int, str, int | None, str]]]) -> list[dict[str, object]]:
    """What RunningStats outputs: aggregates row by row; notes as they were before each batch."""
    seen: dict[str, list[int]] = {}
    notes: dict[str, str] = {}
    out = []
    for rows in batches:
        before = dict(notes)
        for seq, user, amount, note in rows:
            values = seen.setdefault(user, [])
            if amount is not None:
                values.append(amount)
            out.append(
                {
                    "seq": seq,
                    "user": user,
                    "sum": sum(values) if values else None,
                    "count": len(values) if values else None,
                    "min": min(values) if values else None,
                    "max": max(values) if values else None,
                    "mean": sum(values) / len(values) if values else None,
                    "previous_note": before.get(user),
                }
            )
            notes[user] = note
    return out


ROWS = [
    (0, "ann", 5, "a0"),
    (1, "bob", 7, "b0"),
    (2, "ann", None, "a1"),
    (3, "cid", -2, "c0"),
    (4, "ann", 9, "a2"),
    (5, "bob", 1, "b1"),
]
MORE = [(6, "bob", 4, "b2"), (7, "dan", 3, "d0"), (8, "ann", 1, "a3")]


def outputs(results: list[pa.RecordBatch]) -> list[dict[str, object]]:
    rows = pa.Table.from_batches(results).to_pylist()
    return sorted(rows, key=lambda r: int(r["seq"]))  # type: ignore[call-overload]


def test_native_aggregates_and_batch_access(backend: str, tmp_path: Path) -> None:
    with KeyedOperatorHarness(RunningStats(), key_selector="user", parallelism=2, backend=backend) as h:
        assert outputs(h.process_batch(batch(ROWS))) == expected([ROWS])
        savepoint = h.snapshot(tmp_path)
        assert h.state("ann", "total") == 14
        assert h.state("ann", "mean") == {"sum": 14.0, "count": 2}
        assert h.state("ann", "note") == "a2"  # the last write of a key in a batch wins
    with KeyedOperatorHarness(
        RunningStats(), key_selector="user", parallelism=3, backend=backend, restore_from=savepoint
    ) as h3:
        assert outputs(h3.process_batch(batch(MORE))) == expected([ROWS, MORE])[len(ROWS) :]


def test_batch_state_errors() -> None:
    class Wrong(VectorizedKeyedFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.total = runtime_context.get_state(ValueStateDescriptor("total", pa.string()))

        def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> None:
            self.total.aggregate(ctx.keys, batch.column("amount"), batch.column("note")[0].as_py())

    with KeyedOperatorHarness(Wrong(), key_selector="user") as h:
        with pytest.raises(InvalidArgumentError, match="aggregate function 'median' is unknown"):
            h.process_batch(batch([(0, "ann", 1, "median")]))
        with pytest.raises(InvalidArgumentError, match="int64"):
            h.process_batch(batch([(0, "ann", 1, "sum")]))


def test_put_batch_of_values_that_are_not_arrow_says_what_to_pass() -> None:
    class Lists(VectorizedKeyedFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            self.total = runtime_context.get_state(ValueStateDescriptor("total", pa.int64()))

        def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> None:
            self.total.put_batch(ctx.keys, batch.column("amount").to_pylist())

    refused = pytest.raises(InvalidArgumentError, match="is not an Arrow array: pass a pyarrow Array")
    with KeyedOperatorHarness(Lists(), key_selector="user") as h, refused:
        h.process_batch(batch([(0, "ann", 1, "x")]))


def test_vectorized_functions_only_take_value_state() -> None:
    from weir import ListStateDescriptor, Types

    class Lists(VectorizedKeyedFunction):
        def open(self, runtime_context: RuntimeContext) -> None:
            runtime_context.get_list_state(ListStateDescriptor("l", Types.LONG()))

        def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> None:
            return None

    with pytest.raises(
        StateError, match="VectorizedKeyedFunction reads and writes whole batches of value state"
    ):
        KeyedOperatorHarness(Lists(), key_selector="user")


class CountWindowAverage(VectorizedKeyedFunction):
    """Flink's CountWindowAverage on whole batches: the native sum in count windows of 2."""

    WINDOW = pa.struct([pa.field("filled", pa.int64(), False), pa.field("acc", pa.int64(), False)])

    def open(self, runtime_context: RuntimeContext) -> None:
        self.sums = runtime_context.get_state(ValueStateDescriptor("window", self.WINDOW))

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch:
        sums = self.sums.aggregate(ctx.keys, batch.column("value"), "sum", window=2)
        filled = sums.is_valid()
        return pa.RecordBatch.from_arrays(
            [batch.column("key").filter(filled), pc.divide(sums.filter(filled), 2)], names=["key", "avg"]
        )


def key_values(rows: list[tuple[int, int]]) -> pa.RecordBatch:
    keys, values = zip(*rows, strict=True)
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.int64()), pa.array(values, pa.int64())], names=["key", "value"]
    )


def test_native_count_windows_carry_open_windows_through_a_rescaled_savepoint(
    backend: str, tmp_path: Path
) -> None:
    # Flink's example input (1,3),(1,5),(1,7),(1,4),(1,2) gives (1,4),(1,5); key 2 fills one window.
    first = [(1, 3), (2, 8), (1, 5), (1, 7)]
    rest = [(1, 4), (2, 1), (1, 2)]
    with KeyedOperatorHarness(CountWindowAverage(), key_selector="key", parallelism=2, backend=backend) as h:
        out = pa.Table.from_batches(h.process_batch(key_values(first))).to_pylist()
        assert out == [{"key": 1, "avg": 4}]
        assert h.state(1, "window") == {"filled": 1, "acc": 7}
        savepoint = h.snapshot(tmp_path)
    other = "rocksdb" if backend == "heap" else "heap"
    with KeyedOperatorHarness(
        CountWindowAverage(), key_selector="key", parallelism=3, backend=other, restore_from=savepoint
    ) as h3:
        out = pa.Table.from_batches(h3.process_batch(key_values(rest))).to_pylist()
        assert sorted(out, key=lambda r: r["key"]) == [{"key": 1, "avg": 5}, {"key": 2, "avg": 4}]
        assert h3.state(1, "window") == {"filled": 1, "acc": 2}
        assert h3.state(2, "window") is None


def test_a_count_window_needs_rows_and_its_own_state_type() -> None:
    class Running(CountWindowAverage):
        WINDOW = pa.int64()

    with (
        KeyedOperatorHarness(Running(), key_selector="key") as h,
        pytest.raises(InvalidArgumentError, match=r"struct<filled: int64, acc: int64>"),
    ):
        h.process_batch(key_values([(1, 3)]))

    class Empty(CountWindowAverage):
        def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch:
            self.sums.aggregate(ctx.keys, batch.column("value"), "sum", window=0)
            return batch

    with (
        KeyedOperatorHarness(Empty(), key_selector="key") as h,
        pytest.raises(InvalidArgumentError, match="at least 1 row"),
    ):
        h.process_batch(key_values([(1, 3)]))


class Totals(VectorizedKeyedFunction):
    """A running sum per key, and each row's key as the function sees it."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.total = runtime_context.get_state(ValueStateDescriptor("total", pa.int64()))

    def process_batch(self, batch: pa.RecordBatch, ctx: BatchContext) -> pa.RecordBatch:
        sums = self.total.aggregate(ctx.keys, batch.column("value"), "sum")
        return pa.RecordBatch.from_arrays(
            [pa.array([repr(k) for k in ctx.key_values()]), sums], names=["key", "sum"]
        )


KeysOf = Callable[[pa.RecordBatch], Any]


def tuples(data: pa.RecordBatch) -> list[tuple[str, int]]:
    return list(zip(data.column("region").to_pylist(), data.column("user").to_pylist(), strict=True))


def arrow_columns(data: pa.RecordBatch) -> pa.RecordBatch:
    return data.select(["region", "user"])


def arrow_groups(data: pa.RecordBatch) -> pa.Array:
    from weir import _internal

    return pa.array(_internal.key_groups_of(tuples(data), 128), pa.int32())


def run_batches(keys_of: list[tuple[KeysOf, KeysOf | None]]) -> tuple[list[dict[str, Any]], Any]:
    """Two batches of (region, user: int32, value) through ``Totals`` on one in-process
    subtask, batch ``i`` keyed by ``keys_of[i]`` (keys, key groups or None); returns the
    outputs and the state of key ("eu", 1) read back with a Python key."""
    from weir import _internal
    from weir.runtime import OperatorRunner

    with tempfile.TemporaryDirectory(prefix="weir-keys-") as work:
        operator = _internal.LocalOperator("totals", 1, 128, "heap", work)
        session = operator.session(0)
        session.begin(1, 0, None)
        runner = OperatorRunner(Totals(), session)
        runner.open()
        rows = []
        parts = [[("eu", 1, 5), ("us", 1, 7), ("eu", 2, 1)], [("eu", 1, 2), ("us", 2, 3)]]
        for part, (keys, groups) in zip(parts, keys_of, strict=True):
            region, user, value = zip(*part, strict=True)
            data = pa.RecordBatch.from_arrays(
                [pa.array(region), pa.array(user, pa.int32()), pa.array(value, pa.int64())],
                names=["region", "user", "value"],
            )
            out = runner.process_arrow(data, keys(data), None if groups is None else groups(data))
            rows += pa.Table.from_batches([out]).to_pylist()
        state = runner.read_keyed_state("total", ("eu", 1))
        runner.close()
        session.commit(1, 0)
        operator.close()
    return rows, state


def test_arrow_keys_encode_as_the_same_python_keys_do() -> None:
    python_rows, python_state = run_batches([(tuples, None), (tuples, None)])
    assert [r["sum"] for r in python_rows] == [5, 7, 1, 7, 3]
    assert python_rows[0]["key"] == "('eu', 1)"
    assert python_state == 7
    # The Python keys declare (utf8, int64); the Arrow batch of key columns that follows is
    # the same composite keys (its int32 column widens), with key groups as an Arrow column.
    mixed = run_batches([(tuples, None), (arrow_columns, arrow_groups)])
    assert mixed == (python_rows, python_state)
    # Key types learned from Arrow columns: (utf8, int32); the Python key reads them back.
    arrow_rows, arrow_state = run_batches([(arrow_columns, None), (arrow_columns, None)])
    assert [r["sum"] for r in arrow_rows] == [5, 7, 1, 7, 3]
    assert arrow_state == 7


def test_a_null_arrow_key_is_refused() -> None:
    def nulls(data: pa.RecordBatch) -> pa.Array:
        return pa.array([None] * data.num_rows, pa.string())

    with pytest.raises(InvalidArgumentError, match="may not be None"):
        run_batches([(nulls, None), (nulls, None)])
