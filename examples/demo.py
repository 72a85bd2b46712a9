"""The main job: Flink's CountWindowAverage as a stateful PySpark job on Weir.

On Spark's embedded ``local[2]`` mode with local checkpoint storage:

1. runs CountWindowAverage over 200,000 generated events (7,919 keys) at
   parallelism 2 with the RocksDB backend, checkpointing every second;
2. after the first checkpoint, one task fails part-way through its input
   (an injected failure), and the job recovers from that checkpoint;
3. after a few epochs it stops with a savepoint;
4. ``weir savepoint info`` shows the savepoint;
5. the job resumes from the savepoint at parallelism 3 and finishes;
6. the published output is checked against a plain Python computation:
   every average exactly once.

Run: ``make demo`` (or ``.venv/bin/python examples/demo.py [WORK_DIR]``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parent))

from count_window_average import CountWindowAverage  # noqa: E402
from keyed_average import FailingOnce  # noqa: E402

from weir.spark import EpochProgress, StreamJob, sinks, sources  # noqa: E402

EVENTS = 200_000
KEYS = 7_919
ROWS_PER_EPOCH = 25_000


def expected_averages() -> Counter[tuple[int, int]]:
    """CountWindowAverage (windows of two) over the generated events, in plain Python."""
    pending: dict[int, int] = {}
    out: Counter[tuple[int, int]] = Counter()
    for i in range(EVENTS):
        key, value = (i * 2654435761) % KEYS, i % 1000
        if key in pending:
            out[(key, (pending.pop(key) + value) // 2)] += 1
        else:
            pending[key] = value
    return out


def build(
    spark: SparkSession, work: Path, function: object, parallelism: int, **options: object
) -> StreamJob:
    """The demo pipeline: generated events -> key_by -> CountWindowAverage -> Parquet."""
    job = StreamJob(
        spark,
        name="count-window-average",
        checkpoint_dir=str(work / "checkpoints"),
        state_backend="rocksdb",
        parallelism=parallelism,
        max_parallelism=128,
        savepoint_dir=str(work / "savepoints"),
        **options,  # type: ignore[arg-type]
    )
    job.enable_checkpointing(1000)
    events = job.from_source(
        sources.generator(EVENTS, keys=KEYS, rows_per_epoch=ROWS_PER_EPOCH), uid="events"
    )
    events.key_by("key").process(function, output_schema="key long, avg long", uid="average").sink_to(
        sinks.parquet_files(str(work / "out")), uid="out"
    )
    return job


def weir_cli() -> list[str]:
    """The ``weir`` command the package installed next to this interpreter."""
    return [str(Path(sys.executable).with_name("weir"))]


@contextmanager
def without_worker_disconnect_tracebacks() -> Iterator[None]:
    """Drops the ``BrokenPipeError`` tracebacks PySpark's worker daemon prints
    when Spark cancels the sibling of the task that failed on purpose (the
    daemon still writes to the canceled task's closed socket); everything else
    written to stderr, by this process, the JVM or the workers, passes through."""
    restore, terminal = os.dup(2), os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def forward() -> None:
        with os.fdopen(read_end, errors="replace") as lines, os.fdopen(terminal, "w") as out:
            held: list[str] = []
            for line in lines:
                if held or line.startswith("Traceback (most recent call last):"):
                    held.append(line)
                    if line[:1].isspace() or line.startswith("Traceback"):
                        continue
                    if not line.startswith("BrokenPipeError"):
                        out.writelines(held)
                    held = []
                else:
                    out.write(line)
                out.flush()
            out.writelines(held)

    # A daemon thread: the JVM keeps its copy of the pipe open until this process exits.
    threading.Thread(target=forward, name="stderr-filter", daemon=True).start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(restore, 2)
        os.close(restore)


def main() -> None:
    started = time.monotonic()
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="weir-demo-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    # Python workers must run this interpreter, which has weir installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Everything on loopback (Spark warns when the host name resolves to it).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("weir-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    # The injected failure would otherwise print Spark's task-failure tracebacks.
    spark.sparkContext.setLogLevel("OFF")

    print("== run 1: parallelism 2, one injected task failure, stop with a savepoint", flush=True)
    armed = work / "fail-armed"
    failing = FailingOnce(CountWindowAverage(), str(work / "failed-once"), after=3_000, armed_by=str(armed))
    job = build(spark, work, failing, parallelism=2)

    def after_epoch(progress: EpochProgress) -> None:
        if progress.checkpoints:
            armed.touch()
        if progress.epochs == 5:
            job.stop_with_savepoint()

    first = job.execute(on_epoch=after_epoch)
    assert first.restarts == 1, "the injected failure restarted the job once"
    assert first.savepoint is not None
    print(f"stopped with savepoint {first.savepoint}", flush=True)

    print("== weir savepoint info", flush=True)
    subprocess.run([*weir_cli(), "savepoint", "info", first.savepoint], check=True)

    print("== run 2: resume from the savepoint at parallelism 3", flush=True)
    resumed = build(spark, work, CountWindowAverage(), parallelism=3, restore=first.savepoint)
    resumed.execute()

    rows = spark.read.parquet(str(work / "out")).select("key", "avg").collect()
    published = Counter((int(r["key"]), int(r["avg"])) for r in rows)
    want = expected_averages()
    assert published == want, "published averages differ from the plain Python computation"
    print(
        f"ok: {sum(published.values())} averages published exactly once "
        f"(checksum {sum(k[1] * n for k, n in published.items())}) in {time.monotonic() - started:.0f}s"
    )
    spark.stop()


if __name__ == "__main__":
    with without_worker_disconnect_tracebacks():
        main()
