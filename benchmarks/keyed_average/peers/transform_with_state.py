"""Peer 6: ``transformWithStateInPandas`` and the row-based ``transformWithState`` (RocksDB).

Both are Spark's "arbitrary state API v2"; they require the RocksDB state store provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from benchmarks.keyed_average.measure import Outcome
from benchmarks.keyed_average.registry import RunContext, Variant
from benchmarks.keyed_average.spark_env import ROCKSDB_PROVIDER, read_events_stream, run_streaming
from benchmarks.keyed_average.workload import OUTPUT_DDL

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

STATE_DDL = "count long, sum long"


def _processors(w: int) -> tuple[type[StatefulProcessor], type[StatefulProcessor]]:
    """The pandas and the row-based processor, defined lazily so importing this module does not
    import PySpark's streaming machinery in the parent process."""
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

    class PandasAverage(StatefulProcessor):
        """Per key: a value state (count, sum); emit sum // count every W events."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.acc = handle.getValueState("acc", STATE_DDL)

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[Any]:
            import pandas as pd

            current = self.acc.get() if self.acc.exists() else None
            count, total = (current[0], current[1]) if current is not None else (0, 0)
            averages: list[int] = []
            for batch in rows:
                for value in batch["value"].tolist():
                    count += 1
                    total += value
                    if count == w:
                        averages.append(total // count)
                        count, total = 0, 0
            if count == 0:
                self.acc.clear()
            else:
                self.acc.update((count, total))
            if averages:
                yield pd.DataFrame({"key": [key[0]] * len(averages), "avg": averages})

        def close(self) -> None:
            pass

    class RowAverage(StatefulProcessor):
        """The same logic over ``Row`` iterators (the row-based API)."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.acc = handle.getValueState("acc", STATE_DDL)

        def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
            current = self.acc.get() if self.acc.exists() else None
            count, total = (current[0], current[1]) if current is not None else (0, 0)
            for row in rows:
                count += 1
                total += row["value"]
                if count == w:
                    yield Row(key=key[0], avg=total // count)
                    count, total = 0, 0
            if count == 0:
                self.acc.clear()
            else:
                self.acc.update((count, total))

        def close(self) -> None:
            pass

    return PandasAverage, RowAverage


def _run(row_based: bool) -> Callable[[RunContext], Outcome]:
    def run(ctx: RunContext) -> Outcome:
        pandas_processor, row_processor = _processors(ctx.params.w)
        grouped = read_events_stream(ctx).groupBy("key")
        transform = grouped.transformWithState if row_based else grouped.transformWithStateInPandas
        processor = row_processor if row_based else pandas_processor
        output = transform(
            statefulProcessor=processor(),
            outputStructType=OUTPUT_DDL,
            outputMode="Append",
            timeMode="None",
        )
        return run_streaming(ctx, output, ROCKSDB_PROVIDER)

    return run


VARIANTS = [
    Variant(
        name="spark-transformWithStateInPandas-rocksdb",
        system="spark",
        path="peer",
        run=_run(row_based=False),
        description="transformWithStateInPandas, RocksDB state store",
    ),
    Variant(
        name="spark-transformWithState-rows-rocksdb",
        system="spark",
        path="peer",
        run=_run(row_based=True),
        description="row-based transformWithState (Python), RocksDB state store",
    ),
]
