"""Micro-benchmark: per-record ValueState access from Python, against a plain dict.

Each record does one ``value()`` and one ``update()`` of a ``ValueState[int]``
(a per-key counter). Measured, in one run, on the same records and keys:

* ``dict function``: the same ``process_element`` shape with the state in a
  Python dict, driven by the same loop: the baseline the target refers to
  (Weir >= 60% of it);
* ``dict loop``: a bare ``d[k] = d.get(k, 0) + 1`` loop, the floor of Python;
* ``runner``: ``weir.runtime.OperatorRunner.process`` on a session of
  the in-process engine (what a Spark worker does per batch; one epoch);
* ``harness``: ``KeyedOperatorHarness.process_elements`` (adds the key
  selector, key groups and routing over subtasks);
* ``host runner``: the runner on a session of a real state host process
  (``weir-host``; skipped when the binary is not built): one socket round
  trip per state and batch for the prefetch and one for the write-back.

Not a test: timing is printed, never asserted. Usage::

    python benchmarks/micro_state_access.py [--records N] [--keys K] [--batch B] [--backend heap|rocksdb]
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from weir import KeyedProcessFunction, RuntimeContext, Types, ValueStateDescriptor, _internal
from weir.runtime import OperatorRunner
from weir.testing import KeyedOperatorHarness
from weir.types import value_type


class WeirCounter(KeyedProcessFunction):
    """Counts records per key in a ValueState."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
        current = self.count.value()
        self.count.update(1 if current is None else current + 1)


class DictCounter:
    """The same function with its state in a dict (what Weir is compared with)."""

    def __init__(self) -> None:
        self.counts: dict[Any, int] = {}
        self.key: Any = None

    def process_element(self, value: Any, ctx: Any) -> None:
        counts = self.counts
        current = counts.get(self.key)
        counts[self.key] = 1 if current is None else current + 1


def best_of_interleaved(repeats: int, variants: dict[str, Callable[[], None]]) -> dict[str, float]:
    """The fastest of `repeats` runs of each variant, in seconds; variants take turns,
    so load from other processes on the machine hits them alike."""
    best = dict.fromkeys(variants, float("inf"))
    for _ in range(repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50_000, help="records per process() call")
    parser.add_argument("--backend", choices=["heap", "rocksdb"], default="heap")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    keys = [i % args.keys for i in range(args.records)]
    records = [(k, 1) for k in keys]
    batches = [
        (records[i : i + args.batch], keys[i : i + args.batch]) for i in range(0, args.records, args.batch)
    ]

    def dict_function() -> None:
        function = DictCounter()
        process_element = function.process_element
        for batch_records, batch_keys in batches:
            out: list[Any] = []
            for value, key in zip(batch_records, batch_keys, strict=True):
                function.key = key
                result = process_element(value, function)
                if result is not None:
                    out.extend(result)

    def dict_loop() -> None:
        counts: dict[int, int] = {}
        for key in keys:
            counts[key] = counts.get(key, 0) + 1

    with tempfile.TemporaryDirectory(prefix="weir-bench-") as work_dir:
        epoch = 0

        def runner() -> None:
            nonlocal epoch
            operator = _internal.LocalOperator("bench", 1, 128, args.backend, work_dir)
            session = operator.session(0)
            run = OperatorRunner(WeirCounter(), session)
            epoch += 1
            session.begin(epoch, 0, None)
            run.open()
            for batch_records, batch_keys in batches:
                run.process(batch_records, batch_keys)
            session.commit(epoch, 0)
            operator.close()

        host_binary = Path(sys.executable).with_name("weir-host")
        host_dir = tempfile.mkdtemp(prefix="wb-")  # short: Unix socket paths are limited
        token = secrets.token_hex(16)
        host_epoch = 0

        def host_runner() -> None:
            nonlocal host_epoch
            session = _internal.connect_host(
                host_dir,
                token,
                uid=f"bench-{host_epoch}",
                subtask=0,
                parallelism=1,
                max_parallelism=128,
                backend=args.backend,
                key_types=[value_type(pa.int64())],
                generation=0,
                expect_restored_from=None,
                expect_final_epoch=None,
                restore=None,
                host_command=str(host_binary),
                owner_pid=os.getpid(),
            )
            host_epoch += 1
            run = OperatorRunner(WeirCounter(), session)
            session.begin(1, 0, None)
            run.open()
            for batch_records, batch_keys in batches:
                run.process(batch_records, batch_keys)
            session.commit(1, 0)

        def harness() -> None:
            with KeyedOperatorHarness(WeirCounter(), key_selector=lambda v: v[0], backend=args.backend) as h:
                for batch_records, _ in batches:
                    h.process_elements(batch_records)

        variants = {
            "dict loop": dict_loop,
            "dict function": dict_function,
            "runner": runner,
            "harness": harness,
        }
        if host_binary.exists():
            variants["host runner"] = host_runner
        else:
            print(f"(no weir-host command at {host_binary}: install the weir package, make build)")
        timings = best_of_interleaved(args.repeats, variants)

    print(
        f"{args.records} records, {args.keys} keys, {args.batch} records per batch, "
        f"backend {args.backend}, best of {args.repeats}"
    )
    baseline = args.records / timings["dict function"]
    for name, seconds in timings.items():
        rate = args.records / seconds
        print(f"  {name:14} {rate / 1e6:6.2f} M records/s   {rate / baseline:6.1%} of the dict function")
    runner_rate = args.records / timings["runner"]
    print(f"ratio runner / dict function: {runner_rate / baseline:.2f}")
    if "host runner" in timings:
        print(f"ratio host runner / dict function: {args.records / timings['host runner'] / baseline:.2f}")
    print(f"ratio runner / dict loop:     {runner_rate / (args.records / timings['dict loop']):.2f}")


if __name__ == "__main__":
    main()
