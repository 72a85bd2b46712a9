"""Profile harness: the per-record path of a Spark epoch task, without Spark.

Runs the worker's per-batch loop (``weir.spark.worker.process_batches``:
Arrow -> Python rows, ``OperatorRunner.process`` with the key-group check of
new keys, output batch) over one subtask's share of an epoch of the
keyed-average workload (docs/benchmarks.md), in Arrow batches shaped as
``mapInArrow`` delivers them (``spark.sql.execution.arrow.maxRecordsPerBatch``
= 10,000 rows of the step's columns ``key`` and ``value``), with the
``KeyedAverage`` function of ``examples/keyed_average.py``. Variants, timed in
the same run on the same batches, taking turns (best of ``--repeats``):

* ``dict ceiling``: ceiling (b)'s ``mapInArrow`` function
  (``benchmarks.keyed_average.peers.ceilings.make_dict_loop``): a per-record
  Python loop over a plain dict, the reference of the 60% target;
* ``dict function``: ``KeyedAverage.process_element`` itself per record, its
  value state a plain dict: the same Python calls as Weir's loop without
  managed state, the floor of this function's shape;
* ``worker host``: the worker loop on a session of a real state host process
  (``weir-host``, started on demand as a Spark task does; one socket round
  trip per state per batch for the prefetch and one for the write-back);
* ``worker local``: the same loop on an in-process ``LocalOperator`` session.

Each Weir run is one task of a fresh operator: ``begin`` the epoch, the
batches, ``snapshot_state``/``close``, ``commit`` (attaching to the host is
not timed). With ``--warm`` the timed epoch follows an untimed one over the
preceding events, so state holds every key of the subtask, as in a long job.

Not a test: numbers are printed, never asserted. ``--profile cprofile`` (or
``pyinstrument`` when installed) profiles one run of ``--variant``;
``--breakdown`` times the session calls of one run (the Rust side and the
socket) against the rest. Usage::

    python benchmarks/profile_per_record.py [--events 500000] [--keys 100000] [--repeats 5]
        [--backend heap|rocksdb] [--warm] [--profile cprofile|pyinstrument] [--variant host|local]
        [--breakdown]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import itertools
import os
import pstats
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from keyed_average import KEY_MULTIPLIER, KeyedAverage  # noqa: E402

from benchmarks.keyed_average.peers.ceilings import make_dict_loop  # noqa: E402
from weir import _internal  # noqa: E402
from weir.host import command  # noqa: E402
from weir.key_groups import key_group_of, key_group_range, subtask_of  # noqa: E402
from weir.runtime import OperatorRunner  # noqa: E402
from weir.spark import worker  # noqa: E402
from weir.spark.tasks import OperatorSpec  # noqa: E402
from weir.spark.waterfall import TaskClock  # noqa: E402
from weir.types import value_type  # noqa: E402

OUTPUT_SCHEMA = pa.schema([pa.field("key", pa.int64()), pa.field("avg", pa.int64())])
INPUT_SCHEMA = pa.schema([pa.field("key", pa.int64()), pa.field("value", pa.int64())])


def subtask_rows(
    first: int, events: int, keys: int, subtask: int, parallelism: int, max_p: int
) -> list[tuple[int, int]]:
    """``(key, value)`` of the events ``first .. first+events-1`` routed to ``subtask``."""
    groups = [key_group_of(k, types="long", max_parallelism=max_p) for k in range(keys)]
    mine = [subtask_of(g, max_parallelism=max_p, parallelism=parallelism) == subtask for g in groups]
    rows = []
    for i in range(first, first + events):
        key = (i * KEY_MULTIPLIER) % keys
        if mine[key]:
            rows.append((key, i % 1000))
    return rows


def arrow_batches(rows: list[tuple[int, int]], batch_rows: int) -> list[pa.RecordBatch]:
    """``mapInArrow`` batches of ``rows``, as a Weir epoch task and the ceiling's stateless
    pipeline both get them."""
    batches = []
    for start in range(0, len(rows), batch_rows):
        columns = list(zip(*rows[start : start + batch_rows], strict=True))
        arrays = [pa.array(col, type=f.type) for col, f in zip(columns, INPUT_SCHEMA, strict=True)]
        batches.append(pa.RecordBatch.from_arrays(arrays, schema=INPUT_SCHEMA))
    return batches


def checksum(outputs: Iterator[pa.RecordBatch]) -> tuple[int, int]:
    """``(rows, sum of avg)`` of output batches."""
    rows = total = 0
    for batch in outputs:
        rows += batch.num_rows
        total += sum(batch.column(1).to_pylist())
    return rows, total


class DictScope:
    """The current key (the ``ctx`` of ``process_element``)."""

    __slots__ = ("key",)

    def get_current_key(self) -> Any:
        return self.key


class DictValueState:
    """A value state in a plain dict, for the ``dict function`` variant."""

    __slots__ = ("cache", "scope")

    def __init__(self, scope: DictScope) -> None:
        self.scope = scope
        self.cache: dict[Any, Any] = {}

    def value(self) -> Any:
        return self.cache.get(self.scope.key)

    def update(self, value: Any) -> None:
        self.cache[self.scope.key] = value

    def clear(self) -> None:
        self.cache.pop(self.scope.key, None)


class DictContext:
    """``get_state`` hands out dict-backed value states."""

    def __init__(self, scope: DictScope) -> None:
        self.scope = scope

    def get_state(self, descriptor: Any) -> DictValueState:
        return DictValueState(self.scope)


def dict_function(window: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``KeyedAverage.process_element`` per record against dict-backed state: the same Python
    function and calls as Weir's loop, no managed state (the floor of this function's shape)."""
    function = KeyedAverage(window)
    scope = DictScope()
    function.open(DictContext(scope))  # type: ignore[arg-type]
    process_element = function.process_element
    for batch in batches:
        keys = batch.column(0).to_pylist()
        elements = list(zip(keys, batch.column(1).to_pylist(), strict=True))
        out: list[Any] = []
        extend = out.extend
        for value, key in zip(elements, keys, strict=True):
            scope.key = key
            result = process_element(value, scope)  # type: ignore[arg-type]
            if result is not None:
                extend(result)
        if out:
            yield pa.RecordBatch.from_struct_array(pa.array(out, type=pa.struct(OUTPUT_SCHEMA)))


class Timed:
    """A session proxy that adds up the wall time of each session method."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._session, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
                self.calls[name] = self.calls.get(name, 0) + 1

        return timed


@dataclasses.dataclass(frozen=True)
class Subtask0:
    """Subtask 0 of ``parallelism``: its operator specs, its sessions (on a state host
    started on demand, as a Spark task has, or in this process) and its epoch tasks."""

    parallelism: int
    max_parallelism: int
    backend: str
    #: The state host's directory (a short name: Unix socket paths are limited). A host
    #: removes it once this process is gone; without one, the profile's exit does.
    host_dir: tempfile.TemporaryDirectory[str] = dataclasses.field(
        default_factory=lambda: tempfile.TemporaryDirectory(prefix="wpr-", ignore_cleanup_errors=True)
    )
    token: str = dataclasses.field(default_factory=lambda: secrets.token_hex(16))
    #: The in-process sessions' working files, removed when the profile exits.
    work_dir: tempfile.TemporaryDirectory[str] = dataclasses.field(
        default_factory=lambda: tempfile.TemporaryDirectory(prefix="weir-profile-")
    )

    def spec(self, uid: str, function: Any) -> OperatorSpec:
        fields: dict[str, Any] = {
            "uid": uid,
            "function": function,
            "key_columns": ("key",),
            "key_types": (value_type(pa.int64()),),
            "value_columns": ("key", "value"),
            "key_groups_shipped": False,
            "output_schema": OUTPUT_SCHEMA,
            "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism,
            "backend": self.backend,
        }
        # Every other field says where restored state comes from: nowhere.
        for field in dataclasses.fields(OperatorSpec):
            fields.setdefault(field.name, None)
        return OperatorSpec(**fields)

    def host_session(self, uid: str) -> Any:
        return _internal.connect_host(
            self.host_dir.name,
            self.token,
            uid=uid,
            subtask=0,
            parallelism=self.parallelism,
            max_parallelism=self.max_parallelism,
            backend=self.backend,
            key_types=[value_type(pa.int64())],
            generation=0,
            expect_restored_from=None,
            expect_final_epoch=None,
            restore=None,
            host_command=command(),
            owner_pid=os.getpid(),
        )

    def local_session(self, uid: str) -> Any:
        operator = _internal.LocalOperator(
            uid, self.parallelism, self.max_parallelism, self.backend, self.work_dir.name
        )
        return operator.session(0)

    def task(
        self, session: Any, op: OperatorSpec, epoch: int, batches: list[pa.RecordBatch]
    ) -> list[pa.RecordBatch]:
        """One epoch task of ``op`` as a Spark worker runs it; returns its output batches."""
        owned = key_group_range(self.max_parallelism, self.parallelism, 0)
        session.begin(epoch, 0, None)
        check = partial(worker.check_partition, key_range=(owned.start, owned.end), partition=0)
        runner = OperatorRunner(op.function, session, restored=True, defer_writes=True, check_keys=check)
        runner.open()
        out = list(worker.process_batches(runner, op, batches, lambda n: None, TaskClock()))
        runner.snapshot_state(0)
        runner.close()
        session.commit(epoch, 0)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000, help="events of the epoch (all subtasks)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--batch", type=int, default=10_000, help="rows per Arrow batch (Spark: 10000)")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--max-parallelism", type=int, default=128)
    parser.add_argument("--backend", choices=["heap", "rocksdb"], default="heap")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warm", action="store_true", help="time an epoch whose keys all have state")
    parser.add_argument("--profile", choices=["cprofile", "pyinstrument"], default=None)
    parser.add_argument("--variant", choices=["host", "local"], default="host")
    parser.add_argument("--breakdown", action="store_true", help="time the session calls of one run")
    args = parser.parse_args()

    p, max_p = args.parallelism, args.max_parallelism
    rows = subtask_rows(args.events if args.warm else 0, args.events, args.keys, 0, p, max_p)
    batches = arrow_batches(rows, args.batch)
    warm_rows = subtask_rows(0, args.events, args.keys, 0, p, max_p) if args.warm else []
    warm_batches = arrow_batches(warm_rows, args.batch) if warm_rows else []
    uids = itertools.count()

    subtask = Subtask0(p, max_p, args.backend)
    host_session, local_session = subtask.host_session, subtask.local_session

    def spec(uid: str) -> OperatorSpec:
        return subtask.spec(uid, KeyedAverage(args.window))

    def task(
        session: Any, op: OperatorSpec, epoch: int, epoch_batches: list[pa.RecordBatch]
    ) -> tuple[int, int]:
        return checksum(iter(subtask.task(session, op, epoch, epoch_batches)))

    def weir_variant(make_session: Callable[[str], Any]) -> Callable[[], tuple[float, tuple[int, int]]]:
        def run() -> tuple[float, tuple[int, int]]:
            uid = f"avg-{next(uids)}"
            session = make_session(uid)
            op = spec(uid)
            epoch = 1
            if warm_batches:
                task(session, op, epoch, warm_batches)
                epoch += 1
            if isinstance(session, Timed):
                session.seconds.clear()
                session.calls.clear()
            start = time.perf_counter()
            result = task(session, op, epoch, batches)
            return time.perf_counter() - start, result

        return run

    def dict_variant(
        function: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    ) -> Callable[[], tuple[float, tuple[int, int]]]:
        def run() -> tuple[float, tuple[int, int]]:
            # One call over the warm and the timed batches, so the dict holds the same state
            # as Weir's; the clock starts when the function asks for the first timed batch.
            start = [0.0]

            def inputs() -> Iterator[pa.RecordBatch]:
                yield from warm_batches
                start[0] = time.perf_counter()
                yield from batches

            result = checksum(out for out in function(inputs()) if start[0])
            return time.perf_counter() - start[0], result

        return run

    variants: dict[str, Callable[[], tuple[float, tuple[int, int]]]] = {
        "dict ceiling": dict_variant(make_dict_loop(args.window)),
        "dict function": dict_variant(lambda batches: dict_function(args.window, batches)),
        "worker host": weir_variant(host_session),
        "worker local": weir_variant(local_session),
    }
    records = len(rows)
    print(
        f"{records} records of subtask 0/{p} ({args.events} events, {args.keys} keys, window "
        f"{args.window}), {len(batches)} batches of <= {args.batch} rows, backend {args.backend}"
        f"{', warm state' if args.warm else ''}"
    )

    if args.profile or args.breakdown:
        name = f"worker {args.variant}"
        run = variants[name]
        if args.breakdown:
            make = host_session if args.variant == "host" else local_session
            timed: list[Timed] = []

            def make_timed(uid: str) -> Any:
                timed.append(Timed(make(uid)))
                return timed[-1]

            seconds, _ = weir_variant(make_timed)()
            print(f"{name}: {seconds:.3f} s, {records / seconds / 1e6:.3f} M records/s")
            calls = timed[-1]
            in_session = 0.0
            for method, spent in sorted(calls.seconds.items(), key=lambda kv: -kv[1]):
                if method in ("begin", "commit", "register_state"):
                    continue
                in_session += spent
                print(f"  session.{method:12} {spent:7.3f} s in {calls.calls[method]:4} calls")
            print(f"  the rest (Python)     {seconds - in_session:7.3f} s")
            return
        if args.profile == "pyinstrument":
            from pyinstrument import Profiler  # type: ignore[import-not-found]

            profiler = Profiler(interval=0.0005)
            profiler.start()
            run()
            profiler.stop()
            print(profiler.output_text(unicode=False, color=False, show_all=False))
        else:
            profile = cProfile.Profile()
            profile.enable()
            run()
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return

    best = dict.fromkeys(variants, float("inf"))
    results: dict[str, tuple[int, int]] = {}
    for _ in range(args.repeats):
        for name, run in variants.items():
            seconds, result = run()
            best[name] = min(best[name], seconds)
            results[name] = result
    reference = results["dict ceiling"]
    baseline = records / best["dict ceiling"]
    print(f"best of {args.repeats}, variants taking turns:")
    for name, seconds in best.items():
        rate = records / seconds
        ok = "ok" if results[name] == reference else f"WRONG {results[name]} != {reference}"
        print(
            f"  {name:13} {seconds:7.3f} s {rate / 1e6:7.3f} M records/s  "
            f"{rate / baseline:6.1%} of the dict ceiling  (outputs, checksum) {results[name]} {ok}"
        )


if __name__ == "__main__":
    main()
