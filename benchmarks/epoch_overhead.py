"""Probe: what one epoch costs beyond its records, on Spark.

A Spark job runs one epoch of a Weir job, or several in a row where their
input waits (``StreamJob(epochs_per_job=...)``): planned by the driver,
scheduled, two stages (scan and shuffle write, then the stateful step), tasks
that attach to their state, run each epoch and commit it. This probe runs the
keyed-average job (the native vectorized function by default, ``--function
per-record`` for the per-record heap one) over the same events in one
``local[2]`` session, in turns: in many small epochs (``--small`` files each)
and in few large ones (``--large`` files each), checkpointing every second,
once with each ``--epochs-per-job`` setting (1: a Spark job per epoch, and the
default of ``StreamJob``). The difference divided by the difference in epochs
is what an epoch costs whatever its size: wall time, CPU by role (driver,
JVM, Python workers, state host) and, inside the JVM, by thread group (the
JIT compilers, the task threads, the gateway threads that build each job's
query for the Python driver, the scheduler and listeners, the garbage
collector).

The session runs ``--warm`` untimed rounds first; each later round gives one
estimate, and the median is reported (the JVM's compilers keep working for
hundreds of epochs, so later rounds cost less: the rounds are printed too).
Not a test: numbers are printed, never asserted; the JSON goes to
``benchmarks/results/epoch-overhead-<function>.json``. Usage::

    .venv/bin/python benchmarks/epoch_overhead.py [--function native|per-record]
        [--n 2000000] [--files 20] [--small 1] [--large 10] [--warm 2] [--rounds 3]
        [--epochs-per-job 1,4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.keyed_average.measure import cpu_ticks, cpu_use  # noqa: E402
from benchmarks.keyed_average.spark_env import PARALLELISM, build_session  # noqa: E402
from benchmarks.keyed_average.weir_variants.common import typical_epoch  # noqa: E402
from benchmarks.keyed_average.weir_variants.per_record import CountWindowAverage  # noqa: E402
from benchmarks.keyed_average.weir_variants.vectorized import KeyedAverageNative  # noqa: E402
from benchmarks.keyed_average.workload import (  # noqa: E402
    EVENT_DDL,
    OUTPUT_DDL,
    Expectation,
    Params,
    expected_output,
    generate,
)
from weir.spark.api import DEFAULT_EPOCHS_PER_JOB  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: JVM thread names (``/proc/<pid>/task/<tid>/comm``, 15 characters) by group.
THREAD_GROUPS: tuple[tuple[str, str], ...] = (
    (r"^C[12] CompilerThre", "jit compilers"),
    (r"^Executor task", "task threads"),
    (r"^Thread-\d+$", "gateway (query building)"),
    (
        r"^(dag-scheduler|dispatcher|task-result|spark-listener|element-track|Spark Context)",
        "scheduler, listeners",
    ),
    (r"^(GC Thread|G1 |VM Thread|Sweeper|Service Thread)", "gc, vm"),
)


def thread_group(name: str) -> str:
    """The group of a JVM thread, ``other`` when none matches."""
    return next((group for pattern, group in THREAD_GROUPS if re.match(pattern, name)), "other")


def jvm_threads_cpu(pid: int) -> dict[str, float]:
    """Core-seconds each thread group of JVM ``pid`` used so far (threads alive now)."""
    used: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        thread = f"{pid}/task/{tid}"
        try:
            name = Path(f"/proc/{thread}/comm").read_text().rstrip("\n")
        except OSError:
            continue  # the thread ended
        if (ticks := cpu_ticks(thread)) is not None:
            group = thread_group(name)
            used[group] = used.get(group, 0.0) + ticks / CLOCK_TICKS
    return used


@dataclass
class Run:
    """One job over all the events."""

    files_per_epoch: int
    epochs_per_job: int
    epochs: int
    wall_s: float
    cpu_s: dict[str, float]
    jvm_threads_s: dict[str, float]
    correct: bool
    waterfall: str = ""


def per_epoch(small: Run, large: Run) -> dict[str, Any]:
    """What each epoch beyond the large runs' count cost: the difference over the epochs."""
    extra = small.epochs - large.epochs

    def each(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {k: (a.get(k, 0.0) - b.get(k, 0.0)) / extra for k in sorted(set(a) | set(b))}

    return {
        "wall_s": (small.wall_s - large.wall_s) / extra,
        "cpu_s": each(small.cpu_s, large.cpu_s),
        "jvm_threads_s": each(small.jvm_threads_s, large.jvm_threads_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--function", choices=["native", "per-record"], default="native")
    parser.add_argument("--n", type=int, default=2_000_000, help="events")
    parser.add_argument("--files", type=int, default=20, help="Parquet files the events are split into")
    parser.add_argument("--small", type=int, default=1, help="files per epoch of the many-epochs runs")
    parser.add_argument("--large", type=int, default=10, help="files per epoch of the few-epochs runs")
    parser.add_argument("--warm", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median reported)")
    parser.add_argument(
        "--epochs-per-job",
        default=f"1,{DEFAULT_EPOCHS_PER_JOB}",
        help="the StreamJob setting of each series, comma-separated (default: 1 and StreamJob's default)",
    )
    args = parser.parse_args()
    settings = [int(v) for v in args.epochs_per_job.split(",")]
    if not settings or min(settings) < 1:
        parser.error("give settings of at least 1 in --epochs-per-job")
    if not 1 <= args.small < args.large <= args.files:
        parser.error("give 1 <= --small < --large <= --files")
    if args.rounds < 1:
        parser.error("give at least one timed round")
    if -(-args.files // args.small) == -(-args.files // args.large):
        parser.error("--small and --large give as many epochs: make --small smaller")

    # Spark's Python workers run this interpreter and find the benchmark's functions.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    params = Params(n=args.n, files=args.files)
    expected = expected_output(params)
    with tempfile.TemporaryDirectory(prefix="weir-epoch-overhead-") as scratch:
        work = Path(scratch)
        events = generate(params, work / "data")
        spark = build_session("epoch-overhead", {}, work)
        try:
            jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]

            def job(files: int, per_job: int, tag: str) -> Run:
                return _run_job(
                    spark, jvm, work, events, (files, per_job), tag, args.function, params.w, expected
                )

            for r in range(args.warm):
                for per_job in settings:
                    job(args.small, per_job, f"warm-small-{per_job}-{r}")
                    job(args.large, per_job, f"warm-large-{per_job}-{r}")
            rounds: dict[int, list[dict[str, Any]]] = {per_job: [] for per_job in settings}
            for r in range(args.rounds):
                # Settings take turns within a round: the JVM's warm-up falls on each alike.
                for per_job in settings:
                    small = job(args.small, per_job, f"small-{per_job}-{r}")
                    large = job(args.large, per_job, f"large-{per_job}-{r}")
                    cost = per_epoch(small, large)
                    rounds[per_job].append(
                        {"small": asdict(small), "large": asdict(large), "per_epoch": cost}
                    )
                    _print_round(r, small, large, cost)
        finally:
            spark.stop()
    series = {}
    for per_job, timed in rounds.items():
        summary = _median(timed)
        _print_summary(summary, args, per_job)
        series[str(per_job)] = {"rounds": timed, "per_epoch_median": summary}
    if not all(r[size]["correct"] for timed in rounds.values() for r in timed for size in ("small", "large")):
        print("some runs' output was wrong (count or checksum): see the rounds above")
    path = RESULTS / f"epoch-overhead-{args.function}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"args": vars(args), "epochs_per_job": series}, indent=2) + "\n")
    print(f"wrote {path.relative_to(REPO)}")


def _run_job(
    spark: Any,
    jvm: int,
    work: Path,
    events: Path,
    shape: tuple[int, int],
    tag: str,
    function: str,
    window: int,
    expected: Expectation,
) -> Run:
    import pyarrow.parquet as pq

    from weir.spark import StreamJob, sinks, sources

    files, per_job = shape
    output = work / f"out-{tag}"
    job = StreamJob(
        spark,
        name=f"epoch-overhead-{tag}",
        checkpoint_dir=(work / f"checkpoint-{tag}").as_uri(),
        state_backend="heap",
        parallelism=PARALLELISM,
        max_parallelism=128,
        progress=False,
        epochs_per_job=per_job,
    )
    job.enable_checkpointing(1000)
    make: Callable[[int], Any] = KeyedAverageNative if function == "native" else CountWindowAverage
    source = sources.parquet_files(str(events), schema=EVENT_DDL, max_files_per_epoch=files)
    keyed = job.from_source(source, uid="events").key_by("key")
    keyed.process(make(window), output_schema=OUTPUT_DDL, uid="avg").sink_to(
        sinks.parquet_files(str(output)), uid="out"
    )
    threads_before = jvm_threads_cpu(jvm)
    with cpu_use() as cpu:
        start = time.perf_counter()
        result = job.execute()
        wall = time.perf_counter() - start
    threads = {group: s - threads_before.get(group, 0.0) for group, s in jvm_threads_cpu(jvm).items()}
    averages = pq.read_table(output).column("avg").to_pylist()
    shutil.rmtree(output, ignore_errors=True)
    return Run(
        files_per_epoch=files,
        epochs_per_job=per_job,
        epochs=result.epochs,
        wall_s=wall,
        cpu_s=dict(cpu.seconds),
        jvm_threads_s=threads,
        correct=(len(averages), sum(averages)) == (expected.count, expected.checksum),
        waterfall=typical_epoch(result).get("waterfall_text", ""),
    )


def _median(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    estimates = [r["per_epoch"] for r in rounds]

    def middle(key: str) -> dict[str, float]:
        names = sorted({name for e in estimates for name in e[key]})
        return {name: statistics.median(e[key].get(name, 0.0) for e in estimates) for name in names}

    return {
        "wall_s": statistics.median(e["wall_s"] for e in estimates),
        "cpu_s": middle("cpu_s"),
        "jvm_threads_s": middle("jvm_threads_s"),
    }


def _fmt(costs: dict[str, float]) -> str:
    return ", ".join(
        f"{name} {seconds * 1000:.0f}" for name, seconds in sorted(costs.items(), key=lambda kv: -kv[1])
    )


def _print_round(r: int, small: Run, large: Run, cost: dict[str, Any]) -> None:
    for run in (small, large):
        print(
            f"round {r}: {run.files_per_epoch} file(s) per epoch, up to {run.epochs_per_job} per Spark "
            f"job: {run.epochs} epochs in {run.wall_s:.2f} s, "
            f"cpu {sum(run.cpu_s.values()):.2f} core-s, correct={run.correct}"
        )
    print(f"  per extra epoch: wall {cost['wall_s'] * 1000:.0f} ms; cpu ms: {_fmt(cost['cpu_s'])}")
    print(f"  jvm threads ms: {_fmt(cost['jvm_threads_s'])}")
    print(f"  median small epoch: {small.waterfall}")


def _print_summary(summary: dict[str, Any], args: argparse.Namespace, per_job: int) -> None:
    print(
        f"\nWhat an epoch costs whatever its size ({args.function}, up to {per_job} epochs per Spark "
        f"job, {args.n:,} events in {args.files} files, {args.small} vs {args.large} files per epoch; "
        f"median of {args.rounds} rounds after {args.warm} untimed):"
    )
    print(f"  wall {summary['wall_s'] * 1000:.0f} ms")
    print(f"  cpu ms by role: {_fmt(summary['cpu_s'])}")
    print(f"  jvm cpu ms by thread group: {_fmt(summary['jvm_threads_s'])}")


if __name__ == "__main__":
    main()
