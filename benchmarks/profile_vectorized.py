"""Profile harness: the vectorized path of a Spark epoch task, without Spark.

Runs the worker's per-batch loop (``weir.spark.worker.process_batches``) over
subtask 0's share of one warm keyed-average epoch, in the batches
``profile_per_record.py`` builds (``mapInArrow``'s 10,000-row batches of the
step's columns), with the two vectorized functions of the
benchmark: ``batches`` (NumPy fold between ``get_batch`` and ``put_batch``) and
``native`` (the native sum in count windows). State lives in a state host
process (``--session host``, as on Spark) or in this process (``local``).
Each run is a fresh operator: an untimed epoch over the preceding events, then
the timed one. Not a test: numbers are printed, never asserted. Usage::

    python benchmarks/profile_vectorized.py [--function native|batches] [--session host|local]
        [--events 500000] [--keys 100000] [--repeats 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from profile_per_record import Subtask0, arrow_batches, subtask_rows  # noqa: E402

from benchmarks.keyed_average.weir_variants.vectorized import (  # noqa: E402
    KeyedAverageBatches,
    KeyedAverageNative,
)
from weir.spark.tasks import OperatorSpec  # noqa: E402

PARALLELISM, MAX_PARALLELISM, WINDOW = 2, 128, 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--function", choices=["native", "batches"], default="native")
    parser.add_argument("--session", choices=["host", "local"], default="host")
    parser.add_argument("--events", type=int, default=500_000, help="events of the epoch (all subtasks)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one more run")
    args = parser.parse_args()

    rows = subtask_rows(args.events, args.events, args.keys, 0, PARALLELISM, MAX_PARALLELISM)
    batches = arrow_batches(rows, 10_000)
    warm = arrow_batches(subtask_rows(0, args.events, args.keys, 0, PARALLELISM, MAX_PARALLELISM), 10_000)
    subtask = Subtask0(PARALLELISM, MAX_PARALLELISM, "heap")
    session = subtask.host_session if args.session == "host" else subtask.local_session
    make = KeyedAverageNative if args.function == "native" else KeyedAverageBatches

    def spec(uid: str) -> OperatorSpec:
        return subtask.spec(uid, make(WINDOW))

    def task(s: Any, op: OperatorSpec, epoch: int, epoch_batches: list[pa.RecordBatch]) -> int:
        return sum(batch.num_rows for batch in subtask.task(s, op, epoch, epoch_batches))

    for i in range(args.repeats):
        uid = f"avg-{i}"
        s, op = session(uid), spec(uid)
        task(s, op, 1, warm)
        started = time.perf_counter()
        emitted = task(s, op, 2, batches)
        seconds = time.perf_counter() - started
        print(
            f"{args.function} {args.session}: {len(rows):,} rows in {seconds * 1000:.0f} ms = "
            f"{seconds / len(rows) * 1e9:.0f} ns/row, {emitted:,} averages"
        )
    if args.profile:
        s, op = session("profiled"), spec("profiled")
        task(s, op, 1, warm)
        profiler = cProfile.Profile()
        profiler.runcall(task, s, op, 2, batches)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
