"""Peers 4 and 5: ``applyInPandasWithState`` with the HDFS-backed and the RocksDB state store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from benchmarks.keyed_average.measure import Outcome
from benchmarks.keyed_average.registry import RunContext, Variant
from benchmarks.keyed_average.spark_env import (
    HDFS_PROVIDER,
    ROCKSDB_PROVIDER,
    read_events_stream,
    run_streaming,
)
from benchmarks.keyed_average.workload import OUTPUT_DDL

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupState


def make_update(w: int) -> Callable[[tuple[int], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]]:
    """The per-group function: walk the key's new events in order, emit an average every W."""

    def update(key: tuple[int], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        import pandas as pd

        count, total = state.get if state.exists else (0, 0)
        averages: list[int] = []
        for batch in batches:
            for value in batch["value"].tolist():
                count += 1
                total += value
                if count == w:
                    averages.append(total // count)
                    count, total = 0, 0
        if count == 0:
            state.remove()
        else:
            state.update((count, total))
        if averages:
            yield pd.DataFrame({"key": [key[0]] * len(averages), "avg": averages})

    return update


def _run(provider: str) -> Callable[[RunContext], Outcome]:
    def run(ctx: RunContext) -> Outcome:
        stream = read_events_stream(ctx)
        output = stream.groupBy("key").applyInPandasWithState(
            make_update(ctx.params.w),
            outputStructType=OUTPUT_DDL,
            stateStructType="count long, sum long",
            outputMode="append",
            timeoutConf="NoTimeout",
        )
        return run_streaming(ctx, output, provider)

    return run


VARIANTS = [
    Variant(
        name="spark-applyInPandasWithState-hdfs",
        system="spark",
        path="peer",
        run=_run(HDFS_PROVIDER),
        description="applyInPandasWithState, default HDFS-backed state store",
    ),
    Variant(
        name="spark-applyInPandasWithState-rocksdb",
        system="spark",
        path="peer",
        run=_run(ROCKSDB_PROVIDER),
        description="applyInPandasWithState, RocksDB state store",
    ),
]
