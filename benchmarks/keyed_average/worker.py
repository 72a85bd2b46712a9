"""Child-process entry: run one variant in its own SparkSession and write its result record.

Invoked by ``benchmarks/run.py`` as ``python -m benchmarks.keyed_average.worker ARGS``; not
meant to be run by hand (the parent generates the data and computes the expectation once).
"""

from __future__ import annotations

import argparse
import json
import shutil
import traceback
from pathlib import Path
from typing import Any

from benchmarks.keyed_average.measure import Outcome, PeakMemory, percentile
from benchmarks.keyed_average.registry import RunContext, Variant, load_variants
from benchmarks.keyed_average.spark_env import build_session
from benchmarks.keyed_average.workload import Expectation, Params


def median_outcome(outcomes: list[Outcome]) -> Outcome:
    """The run with the median wall time (the lower middle one for an even count)."""
    ordered = sorted(outcomes, key=lambda o: o.wall_s)
    return ordered[(len(ordered) - 1) // 2]


def _every_run(outcomes: list[Outcome], key: str) -> dict[str, list[Any]]:
    """``key`` of the outcomes' extras joined over every run: a tail percentile
    (a checkpoint's end to end time) comes from all checkpoints, not the median run's."""
    if not any(key in o.extra for o in outcomes):
        return {}
    return {key: [x for o in outcomes for x in o.extra.get(key, [])]}


def result_record(
    variant: Variant, params: Params, expectation: Expectation, outcomes: list[Outcome], peak_mb: float
) -> dict[str, Any]:
    """The JSON record of one variant (the format of ``benchmarks/results/*.json``)."""
    chosen = median_outcome(outcomes)
    want_count, want_checksum = variant.expected(params, expectation)
    correct = all(o.count == want_count and o.checksum == want_checksum for o in outcomes)
    return {
        "system": variant.system,
        "variant": variant.name,
        "path": variant.path,
        "description": variant.description,
        "reference": variant.reference,
        "n": params.n,
        "k": params.k,
        "w": params.w,
        "events_per_s": params.n / chosen.wall_s if chosen.wall_s > 0 else None,
        "wall_s": chosen.wall_s,
        "count": chosen.count,
        "checksum": chosen.checksum,
        "expected_count": want_count,
        "expected_checksum": want_checksum,
        "correct": correct,
        "checkpoints": chosen.checkpoints,
        "checkpoint_sync_ms_p50": percentile(chosen.checkpoint_sync_ms, 50),
        "checkpoint_sync_ms_p99": percentile(chosen.checkpoint_sync_ms, 99),
        "checkpoint_async_ms_p50": percentile(chosen.checkpoint_async_ms, 50),
        "checkpoint_async_ms_p99": percentile(chosen.checkpoint_async_ms, 99),
        "peak_mem_mb": round(peak_mb, 1),
        "repeats": len(outcomes),
        "runs_wall_s": [o.wall_s for o in outcomes],
        "extra": {
            **chosen.extra,
            **_every_run(outcomes, "checkpoint_e2e_ms"),
            **_every_run(outcomes, "checkpoint_slowest"),
            **_every_run(outcomes, "checkpoint_cost_pairs"),
        },
        "error": None,
    }


def run_variant(
    variant: Variant,
    params: Params,
    expectation: Expectation,
    events_dir: Path,
    work_dir: Path,
    cache_dir: Path,
) -> dict[str, Any]:
    """Build the session, run the variant ``repeats`` times, and return its record."""
    spark = build_session(variant.name, variant.spark_conf(cache_dir), work_dir)
    try:
        outcomes: list[Outcome] = []
        with PeakMemory() as memory:
            for attempt in range(variant.repeats):
                run_dir = work_dir / f"run-{attempt}"
                ctx = RunContext(spark, params, expectation, events_dir, run_dir, cache_dir)
                outcomes.append(variant.run(ctx))
                shutil.rmtree(run_dir, ignore_errors=True)
        return result_record(variant, params, expectation, outcomes, memory.peak_mb)
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--module", required=True, help="the module whose VARIANTS holds the variant")
    parser.add_argument("--variant", required=True)
    parser.add_argument("--params", required=True, help="Params as JSON")
    parser.add_argument("--expectation", required=True, help="Expectation as JSON")
    parser.add_argument("--events", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--cache", required=True, type=Path)
    parser.add_argument("--result", required=True, type=Path)
    args = parser.parse_args()
    params = Params(**json.loads(args.params))
    expectation = Expectation(**json.loads(args.expectation))
    variant = next(v for v in load_variants((args.module,)) if v.name == args.variant)
    try:
        record = run_variant(variant, params, expectation, args.events, args.work, args.cache)
    except Exception as exc:  # the parent records the failure and goes on with other variants
        traceback.print_exc()
        record = {"variant": variant.name, "error": f"{type(exc).__name__}: {exc}"[:4000]}
    args.result.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
