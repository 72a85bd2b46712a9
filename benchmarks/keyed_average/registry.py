"""The variant registry: every system/path the benchmark runs, in one list.

A variant is a :class:`Variant` value in the ``VARIANTS`` list of a module named in
:data:`VARIANT_MODULES`. Adding one (for example a Weir path) is one small module plus one line
here::

    # benchmarks/keyed_average/weir_per_record.py
    VARIANTS = [Variant(name="weir-per-record-heap", system="weir", path="per_record",
                        run=run_heap)]

``run(ctx)`` executes in a fresh child process with a SparkSession already built from
``ctx``'s conf (plus whatever ``spark_conf(ctx)`` returned), does the timed work, reads the
output back from its sink and returns an :class:`~benchmarks.keyed_average.measure.Outcome`.
The harness times nothing itself except the peak memory; ``wall_s`` is the variant's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from benchmarks.keyed_average.measure import Outcome
from benchmarks.keyed_average.workload import Expectation, Params

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

System = Literal["weir", "spark"]
BenchPath = Literal["per_record", "vectorized", "peer", "ceiling_arrow", "ceiling_python", "floor_python"]

#: The ceiling each Weir path is compared with (docs/benchmarks.md, item 8); the per-record
#: function's floor (its shape alone, no managed state) is set beside ceiling (b) too.
CEILING_FOR_PATH: Mapping[str, str] = {
    "per_record": "ceiling_python",
    "vectorized": "ceiling_arrow",
    "floor_python": "ceiling_python",
}

#: Modules whose ``VARIANTS`` lists are run, in this order.
VARIANT_MODULES: tuple[str, ...] = (
    "benchmarks.keyed_average.weir_variants.per_record",
    "benchmarks.keyed_average.weir_variants.vectorized",
    "benchmarks.keyed_average.peers.apply_in_pandas",
    "benchmarks.keyed_average.peers.transform_with_state",
    "benchmarks.keyed_average.peers.jvm",
    "benchmarks.keyed_average.peers.ceilings",
    "benchmarks.keyed_average.peers.function_floor",
)


@dataclass(frozen=True)
class RunContext:
    """Everything a variant's ``run`` needs, the same for every variant of one invocation."""

    spark: SparkSession
    params: Params
    expectation: Expectation
    #: Directory of the generated event files (Parquet, event order).
    events_dir: Path
    #: Scratch directory private to this variant (checkpoints, sink output); emptied per repeat.
    work_dir: Path
    #: Cache shared by all variants of this invocation and later ones (compiled jars).
    cache_dir: Path

    @property
    def checkpoint_uri(self) -> str:
        """Local checkpoint location as a ``file://`` URI."""
        return (self.work_dir / "checkpoint").as_uri()

    @property
    def output_dir(self) -> Path:
        """Where the sink writes."""
        return self.work_dir / "out"


@dataclass(frozen=True)
class Variant:
    """One thing to measure."""

    #: Unique, stable name; used on the command line (``--only``) and in the JSON.
    name: str
    system: System
    path: BenchPath
    run: Callable[[RunContext], Outcome]
    #: Run this many times (fresh work dir each) and report the median by events/s.
    repeats: int = 1
    #: Extra SparkSession conf, computed in the child before the session starts (e.g. compile
    #: a jar and return ``{"spark.jars": ...}``). Receives the cache dir.
    spark_conf: Callable[[Path], Mapping[str, str]] = field(default=lambda _cache: {})
    #: Short human description for the table legend.
    description: str = ""
    #: A peer shown for reference only, not one Weir's Python paths compete with: Spark's JVM
    #: path (docs/benchmarks.md item 7). "Best peer" ratios use the other peers.
    reference: bool = False

    def expected(self, p: Params, e: Expectation) -> tuple[int, int]:
        """(count, checksum) a correct run of this variant produces."""
        if self.path == "ceiling_arrow":
            # The identity ceiling passes every event through: N rows, sum of the values.
            return (p.n, e.value_sum)
        return (e.count, e.checksum)


def load_variants(modules: tuple[str, ...] = VARIANT_MODULES) -> list[Variant]:
    """Import the variant modules and return their variants in order; names must be unique."""
    variants: list[Variant] = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        variants.extend(module.VARIANTS)
    names = [v.name for v in variants]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"duplicate variant names: {sorted(duplicates)}")
    return variants
