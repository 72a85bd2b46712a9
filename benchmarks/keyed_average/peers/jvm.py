"""Peer 7: the same logic as a Java ``flatMapGroupsWithState`` (Spark's JVM path), with both
state stores. The Java source is compiled with ``javac`` against PySpark's own jars and loaded
into the local session through ``spark.jars``."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pyspark

from benchmarks.keyed_average.measure import Outcome
from benchmarks.keyed_average.registry import RunContext, Variant
from benchmarks.keyed_average.spark_env import (
    HDFS_PROVIDER,
    ROCKSDB_PROVIDER,
    read_events_stream,
    run_streaming,
)

JAVA_ROOT = Path(__file__).resolve().parent.parent / "java"
MAIN_CLASS = "weir.bench.KeyedAverage"


def _sources() -> list[Path]:
    return sorted(JAVA_ROOT.rglob("*.java"))


def build_jar(cache_dir: Path) -> Path:
    """Compile the Java sources into a jar under ``cache_dir`` (reused while the sources and
    the PySpark version are unchanged) and return its path."""
    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in _sources():
        digest.update(source.read_bytes())
    jar = cache_dir / f"weir-bench-{digest.hexdigest()[:16]}.jar"
    if jar.exists():
        return jar
    jars = Path(pyspark.__file__).parent / "jars"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        classes = Path(tmp) / "classes"
        subprocess.run(
            ["javac", "--release", "17", "-cp", str(jars / "*"), "-d", str(classes), *map(str, _sources())],
            check=True,
        )
        staged = Path(tmp) / jar.name
        subprocess.run(["jar", "--create", "--file", str(staged), "-C", str(classes), "."], check=True)
        shutil.move(staged, jar)
    return jar


def _spark_conf(cache_dir: Path) -> Mapping[str, str]:
    return {"spark.jars": str(build_jar(cache_dir))}


def _run(provider: str) -> Callable[[RunContext], Outcome]:
    def run(ctx: RunContext) -> Outcome:
        from pyspark.sql import DataFrame

        events = read_events_stream(ctx)
        jvm = ctx.spark._jvm
        assert jvm is not None
        jdf = getattr(jvm, MAIN_CLASS).apply(events._jdf, ctx.params.w)
        return run_streaming(ctx, DataFrame(jdf, ctx.spark), provider)

    return run


VARIANTS = [
    Variant(
        name="spark-jvm-flatMapGroupsWithState-hdfs",
        system="spark",
        path="peer",
        run=_run(HDFS_PROVIDER),
        spark_conf=_spark_conf,
        reference=True,
        description="Java flatMapGroupsWithState, HDFS-backed state store",
    ),
    Variant(
        name="spark-jvm-flatMapGroupsWithState-rocksdb",
        system="spark",
        path="peer",
        run=_run(ROCKSDB_PROVIDER),
        spark_conf=_spark_conf,
        reference=True,
        description="Java flatMapGroupsWithState, RocksDB state store",
    ),
]
