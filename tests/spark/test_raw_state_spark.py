"""Raw state (bytes a function writes itself) through savepoints, rescaled 2 -> 3 -> 1."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from keyed_jobs import from_epoch, stop_with_savepoint_when

from weir import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    KeyedProcessFunction,
    RuntimeContext,
)
from weir.key_groups import key_group_of
from weir.spark import StreamJob, sinks, sources

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

N = 20_000
KEYS = 500
MAX_PARALLELISM = 32


class RawTotals(KeyedProcessFunction, CheckpointedFunction):
    """Keeps the total of values per key group only in raw keyed state, and the
    number of records each task processed only in raw operator state."""

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.totals = {
            kg: struct.unpack("<q", data)[0] for kg, data in context.get_raw_keyed_state_inputs().items()
        }
        self.parts = [struct.unpack("<q", part)[0] for part in context.get_raw_operator_state_inputs()]
        self.processed = 0

    def open(self, runtime_context: RuntimeContext) -> None:
        self.max_parallelism = runtime_context.get_max_number_of_parallel_subtasks()

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
        kg = key_group_of(ctx.get_current_key(), types="long", max_parallelism=self.max_parallelism)
        self.totals[kg] = self.totals.get(kg, 0) + value[1]
        self.processed += 1
        return None

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        keyed = context.get_raw_keyed_state_output()
        for kg, total in self.totals.items():
            keyed.write(kg, struct.pack("<q", total))
        operator = context.get_raw_operator_state_output()
        for part in [*self.parts, self.processed]:
            operator.write(struct.pack("<q", part))


class Report(RawTotals):
    """Restored at parallelism 1: emits everything the raw state holds on its first record."""

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Any:
        for kg, total in self.totals.items():
            yield "keyed", kg, total
        for part in self.parts:
            yield "operator", -1, part


def _job(
    spark: SparkSession, tmp: Path, name: str, function: Any, parallelism: int, n: int, **options: Any
) -> Any:
    sink = sinks.collect()
    job = StreamJob(
        spark,
        name=name,
        checkpoint_dir=str(tmp / "ckpt"),
        parallelism=parallelism,
        max_parallelism=MAX_PARALLELISM,
        savepoint_dir=str(tmp / f"savepoints-{name}"),
        progress=False,
        **options,
    )
    job.enable_checkpointing(300)
    job.from_source(sources.generator(n, keys=KEYS, rows_per_epoch=2_500), uid="events").key_by(
        "key"
    ).process(function, "kind string, key_group long, value long", uid="raw").sink_to(sink, uid="out")
    return job, sink


def test_raw_keyed_and_operator_state_round_trip_through_savepoints_rescaled(
    spark: SparkSession, tmp_path: Path
) -> None:
    first, _ = _job(spark, tmp_path, "raw-2", RawTotals(), 2, N)
    stopped = first.execute(on_epoch=stop_with_savepoint_when(first, from_epoch(3)))
    second, _ = _job(spark, tmp_path, "raw-3", RawTotals(), 3, N, restore=stopped.savepoint)
    # The source goes on from the savepoint; stop once the input is used up.
    finished = second.execute(
        on_epoch=lambda p: second.stop_with_savepoint() if p.position == {"next": N} else None
    )
    assert finished.savepoint is not None
    report, sink = _job(spark, tmp_path, "raw-1", Report(), 1, N + 1, restore=finished.savepoint)
    report.execute()

    want: Counter[int] = Counter()
    for i in range(N):
        key = (i * 2654435761) % KEYS
        want[key_group_of(key, types="long", max_parallelism=MAX_PARALLELISM)] += i % 1000
    keyed = {r["key_group"]: r["value"] for r in sink.rows if r["kind"] == "keyed"}
    assert keyed == dict(want), "raw keyed state lost or repeated a key group's bytes"
    # Every task's count is one part: all parts together count every record once
    # (the report's own first record came after its restore).
    assert sum(r["value"] for r in sink.rows if r["kind"] == "operator") == N
