"""A reference for the per-record path: Weir's per-record function with no managed state.

The Weir per-record variants run ``CountWindowAverage`` (a ``KeyedProcessFunction`` whose
``process_element`` yields, with a ``ValueState``) per record. Ceiling (b) runs the same
arithmetic inlined in one loop over a dict. This variant runs the very function Weir runs,
record by record, in the same stateless pipeline as the ceilings (scan, repartition by key,
``mapInArrow``, write), its value state a plain dict of the task: the Python calls its shape
makes (a method call and a generator per record, ``value()``/``update()``) and nothing of
Weir's. Its ratio to ceiling (b) is the most any state layer can reach with this function;
a Weir variant's ratio to it is what Weir's managed state and checkpoints cost on top.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from benchmarks.keyed_average.measure import Outcome, cpu_use
from benchmarks.keyed_average.peers.ceilings import CEILING_REPEATS
from benchmarks.keyed_average.registry import RunContext, Variant
from benchmarks.keyed_average.spark_env import PARALLELISM, read_back
from benchmarks.keyed_average.weir_variants.per_record import CountWindowAverage
from benchmarks.keyed_average.workload import EVENT_DDL, OUTPUT_DDL

if TYPE_CHECKING:
    import pyarrow as pa


class _Scope:
    """The current key, as Weir's per-record context holds it."""

    __slots__ = ("key",)

    def __init__(self) -> None:
        self.key: Any = None

    def get_current_key(self) -> Any:
        return self.key


class _DictState:
    """A value state in a plain dict, scoped to the current key."""

    __slots__ = ("cache", "scope")

    def __init__(self, scope: _Scope) -> None:
        self.scope = scope
        self.cache: dict[Any, Any] = {}

    def value(self) -> Any:
        return self.cache.get(self.scope.key)

    def update(self, value: Any) -> None:
        self.cache[self.scope.key] = value

    def clear(self) -> None:
        self.cache.pop(self.scope.key, None)


class _DictContext:
    """``get_state`` hands out dict-backed value states."""

    def __init__(self, scope: _Scope) -> None:
        self.scope = scope

    def get_state(self, descriptor: Any) -> _DictState:
        return _DictState(self.scope)


def make_function_loop(w: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The per-record function over a plain dict, as a ``mapInArrow`` function."""

    def function_loop(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        function = CountWindowAverage(w)
        scope = _Scope()
        function.open(_DictContext(scope))  # type: ignore[arg-type]
        process_element = function.process_element
        schema = pa.struct([pa.field("key", pa.int64()), pa.field("avg", pa.int64())])
        for batch in batches:
            keys = batch.column(0).to_pylist()
            elements = list(zip(keys, batch.column(1).to_pylist(), strict=True))
            out: list[Any] = []
            extend = out.extend
            for value, key in zip(elements, keys, strict=True):
                scope.key = key
                extend(process_element(value, scope))  # type: ignore[arg-type]
            if out:
                yield pa.RecordBatch.from_struct_array(pa.array(out, type=schema))

    return function_loop


def _run(ctx: RunContext) -> Outcome:
    shutil.rmtree(ctx.output_dir, ignore_errors=True)
    events = ctx.spark.read.schema(EVENT_DDL).parquet(str(ctx.events_dir)).repartition(PARALLELISM, "key")
    output = events.mapInArrow(make_function_loop(ctx.params.w), OUTPUT_DDL)
    with cpu_use() as cpu:
        start = time.perf_counter()
        output.write.mode("overwrite").parquet(str(ctx.output_dir))
        wall = time.perf_counter() - start
    count, checksum = read_back(ctx, "avg")
    return Outcome(wall_s=wall, count=count, checksum=checksum, checkpoints=0, extra={"cpu_s": cpu.seconds})


VARIANTS = [
    Variant(
        name="spark-function-floor-python-dict",
        system="spark",
        path="floor_python",
        run=_run,
        repeats=CEILING_REPEATS,
        description="stateless scan, repartition(key), mapInArrow(Weir's per-record function, "
        "its value state a plain dict)",
    ),
]
