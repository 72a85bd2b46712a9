"""Item 8: Spark's own stateless pipeline over the same data (scan, repartition by key,
``mapInArrow``, write), (a) with an identity Arrow function, the ceiling for the vectorized
path, and (b) with a Python loop over every record doing the workload's arithmetic in a plain
dict, the ceiling for the per-record path. No state store, no checkpoints: the gap between a
Weir variant and its ceiling is the whole cost of managed state and checkpoints.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from benchmarks.keyed_average.measure import Outcome, cpu_use
from benchmarks.keyed_average.registry import RunContext, Variant
from benchmarks.keyed_average.spark_env import PARALLELISM, read_back
from benchmarks.keyed_average.workload import EVENT_DDL, OUTPUT_DDL

if TYPE_CHECKING:
    import pyarrow as pa

#: docs/benchmarks.md: run each ceiling at least 5 times and use the median.
CEILING_REPEATS = 5


def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Ceiling (a): pass every Arrow batch through unchanged."""
    yield from batches


def make_dict_loop(w: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Ceiling (b): the workload per record, state in a plain dict local to the partition."""

    def dict_loop(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        state: dict[int, tuple[int, int]] = {}
        for batch in batches:
            out_keys: list[int] = []
            out_avgs: list[int] = []
            for key, value in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
                count, total = state.get(key, (0, 0))
                count += 1
                total += value
                if count == w:
                    out_keys.append(key)
                    out_avgs.append(total // count)
                    del state[key]
                else:
                    state[key] = (count, total)
            if out_keys:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(out_keys, pa.int64()), pa.array(out_avgs, pa.int64())], names=["key", "avg"]
                )

    return dict_loop


def _run(arrow_identity: bool) -> Callable[[RunContext], Outcome]:
    def run(ctx: RunContext) -> Outcome:
        shutil.rmtree(ctx.output_dir, ignore_errors=True)
        events = ctx.spark.read.schema(EVENT_DDL).parquet(str(ctx.events_dir)).repartition(PARALLELISM, "key")
        if arrow_identity:
            output = events.mapInArrow(identity, EVENT_DDL)
        else:
            output = events.mapInArrow(make_dict_loop(ctx.params.w), OUTPUT_DDL)
        with cpu_use() as cpu:
            start = time.perf_counter()
            output.write.mode("overwrite").parquet(str(ctx.output_dir))
            wall = time.perf_counter() - start
        count, checksum = read_back(ctx, "value" if arrow_identity else "avg")
        return Outcome(
            wall_s=wall, count=count, checksum=checksum, checkpoints=0, extra={"cpu_s": cpu.seconds}
        )

    return run


VARIANTS = [
    Variant(
        name="spark-ceiling-arrow-identity",
        system="spark",
        path="ceiling_arrow",
        run=_run(arrow_identity=True),
        repeats=CEILING_REPEATS,
        description="stateless scan, repartition(key), mapInArrow(identity), write",
    ),
    Variant(
        name="spark-ceiling-python-dict",
        system="spark",
        path="ceiling_python",
        run=_run(arrow_identity=False),
        repeats=CEILING_REPEATS,
        description="stateless scan, repartition(key), mapInArrow(per-record loop, plain dict), write",
    ),
]
