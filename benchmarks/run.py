"""Run the keyed-average benchmark (docs/benchmarks.md): every registered variant, Weir and
Spark, on the same generated data in one invocation; print a table with ratios, write
``benchmarks/results/<timestamp>.json`` and ``latest.json``, and draw
``benchmarks/results/keyed_average.png``.

    .venv/bin/python benchmarks/run.py            # N = 2,000,000 (the documented size)
    .venv/bin/python benchmarks/run.py --quick    # N = 100,000, K = 5,000: a few minutes
    .venv/bin/python benchmarks/run.py --only ceiling --n 20000000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(REPO))

from benchmarks.keyed_average import report  # noqa: E402
from benchmarks.keyed_average.registry import VARIANT_MODULES, Variant, load_variants  # noqa: E402
from benchmarks.keyed_average.workload import Params, expected_output, generate  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "weir" / "bench"
QUICK = Params(n=100_000, k=5_000, w=10, files=10, files_per_trigger=5)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help=f"small size: N={QUICK.n:,}, K={QUICK.k:,}")
    parser.add_argument("--n", type=int, help="number of events (default 2,000,000)")
    parser.add_argument("--k", type=int, help="number of keys (default 100,000)")
    parser.add_argument("--w", type=int, help="events per emitted average (default 10)")
    parser.add_argument("--files", type=int, help="Parquet files the events are split into (default 20)")
    parser.add_argument(
        "--files-per-trigger", type=int, help="files per Spark micro-batch or Weir epoch (default 10)"
    )
    parser.add_argument("--only", action="append", default=[], help="run variants whose name contains this")
    parser.add_argument("--skip", action="append", default=[], help="skip variants whose name contains this")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per variant (default 3600)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    parser.add_argument(
        "--module",
        action="append",
        default=[],
        help="also run the variants of this module (e.g. benchmarks.keyed_average.weir_variants.per_record)",
    )
    parser.add_argument("--list", action="store_true", help="list the registered variants and exit")
    return parser.parse_args(argv)


def params_from(args: argparse.Namespace) -> Params:
    base = QUICK if args.quick else Params()
    overrides = {
        name: getattr(args, name)
        for name in ("n", "k", "w", "files", "files_per_trigger")
        if getattr(args, name) is not None
    }
    return replace(base, **overrides)


def selected(variants: list[Variant], only: list[str], skip: list[str]) -> list[Variant]:
    return [
        v
        for v in variants
        if (not only or any(o in v.name for o in only)) and not any(s in v.name for s in skip)
    ]


def run_one(
    variant: Variant,
    module: str,
    params: Params,
    expectation_json: str,
    events: Path,
    scratch: Path,
    timeout: float,
) -> dict[str, Any]:
    """Run one variant in a child process; a crash or timeout becomes an error record."""
    work = scratch / variant.name
    work.mkdir(parents=True)
    result = work / "result.json"
    log = scratch / f"{variant.name}.log"
    env = {
        **os.environ,
        # Spark's Python workers must use this interpreter and import `benchmarks.` by reference.
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [
        sys.executable,
        "-m",
        "benchmarks.keyed_average.worker",
        "--module",
        module,
        "--variant",
        variant.name,
        "--params",
        json.dumps(asdict(params)),
        "--expectation",
        expectation_json,
        "--events",
        str(events),
        "--work",
        str(work),
        "--cache",
        str(CACHE),
        "--result",
        str(result),
    ]
    failure: str | None = None
    with log.open("w") as out:
        try:
            proc = subprocess.run(
                command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
            if proc.returncode != 0:
                failure = f"worker exited with status {proc.returncode}"
        except subprocess.TimeoutExpired:
            failure = f"timed out after {timeout:.0f} s"
    record: dict[str, Any] = json.loads(result.read_text()) if result.exists() else {"error": failure}
    if record.get("error"):
        tail = log.read_text(errors="replace").splitlines()[-25:]
        print(
            f"  {variant.name} FAILED: {record['error'][:500]}\n    log tail:\n      "
            + "\n      ".join(tail),
            flush=True,
        )
        record.update(
            system=variant.system,
            variant=variant.name,
            path=variant.path,
            n=params.n,
            events_per_s=None,
            correct=False,
        )
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    modules = (*VARIANT_MODULES, *(m for m in args.module if m not in VARIANT_MODULES))
    module_of = {v.name: m for m in modules for v in load_variants((m,))}
    variants = selected(load_variants(modules), args.only, args.skip)
    if args.list:
        for v in variants:
            print(f"{v.name:<45} {v.system:<6} {v.path:<15} {v.description}")
        return 0
    params = params_from(args)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    print(
        f"keyed-average: N={params.n:,} K={params.k:,} W={params.w} in {params.files} files, "
        f"{params.files_per_trigger} per micro-batch; {len(variants)} variants",
        flush=True,
    )
    if not params.order_independent():
        print(
            "  note: K is not a multiple of 1000, so the checksum depends on the order of a key's "
            "events; a variant that reorders them within a batch can be marked incorrect",
            flush=True,
        )
    expectation = expected_output(params)
    print(f"  expected: {expectation.count:,} outputs, checksum {expectation.checksum:,}", flush=True)
    with tempfile.TemporaryDirectory(prefix="weir-bench-") as tmp:
        scratch = Path(tmp)
        events = generate(params, scratch / "data")
        records = []
        for variant in variants:
            print(f"- {variant.name} ...", flush=True)
            record = run_one(
                variant,
                module_of[variant.name],
                params,
                json.dumps(asdict(expectation)),
                events,
                scratch,
                args.timeout,
            )
            record["timestamp"] = stamp
            records.append(record)
            if not record.get("error"):
                print(
                    f"  {record['events_per_s']:,.0f} events/s, {record['wall_s']:.2f} s, "
                    f"correct={record['correct']}, peak {record['peak_mem_mb']:.0f} MB",
                    flush=True,
                )
                extra = record.get("extra") or {}
                if "waterfall_text" in extra:
                    print(f"  median {extra['waterfall_text']}", flush=True)
                if extra.get("cpu_s"):
                    roles = ", ".join(f"{role} {s:.2f}" for role, s in sorted(extra["cpu_s"].items()))
                    print(f"  cpu core-s of the median run: {roles}", flush=True)
                remote = extra.get("remote_state_bytes_per_epoch")
                if remote is not None and "local-cluster" in variant.name:
                    print(f"  {remote:,.0f} bytes of state per epoch sent across executors", flush=True)
    report.add_ratios(records)
    print()
    print(report.table(records))
    json_path = report.write_json(records, args.results_dir, stamp)
    png = report.chart(
        records,
        args.results_dir / "keyed_average.png",
        f"keyed-average, N={params.n:,}, K={params.k:,}, W={params.w}, local[2] ({stamp})",
    )
    print(f"\nwrote {json_path}, {args.results_dir / 'latest.json'} and {png}")
    failed = [r["variant"] for r in records if r.get("error") or not r.get("correct")]
    if failed:
        print(f"failed or incorrect: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
