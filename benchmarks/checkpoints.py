"""Checkpoint benchmarks (docs/benchmarks.md, "Checkpoint benchmarks" and "Targets").

Builds and runs ``crates/weir-host/examples/checkpoint_bench`` (the in-process engine: heap and
RocksDB; sync pause, async upload, incremental RocksDB checkpoints, restore, rescale 2 -> 3) in a
temporary directory, measures that directory's disk with :mod:`benchmarks.diskbw` in the same
run (before and after), compares every number with its target, prints a table and writes
``benchmarks/results/checkpoints[-quick].json`` (a list of records) and
``checkpoints[-quick]-run.json`` (disk, notes, arguments). Timings are never pass/fail tests.

    .venv/bin/python benchmarks/checkpoints.py            # 10^4 .. 10^7 keys per subtask
    .venv/bin/python benchmarks/checkpoints.py --quick    # 10^4, 10^5: well under 2 minutes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `benchmarks.` importable
    sys.path.insert(0, str(REPO))

from benchmarks.diskbw import MIB, DiskBandwidth, measure_disk_bandwidth  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
FULL_SIZES = [10_000, 100_000, 1_000_000, 10_000_000]
QUICK_SIZES = [10_000, 100_000]
#: Rates below this many keys are latency, not bandwidth: snapshots of 10^4 keys are ~150 KB.
RATE_MIN_KEYS = 100_000
#: The sync-pause target is stated at this size.
PAUSE_KEYS = 1_000_000


@dataclass
class Record:
    """One number of the results file."""

    benchmark: str
    backend: str
    keys: int
    metric: str
    value: float
    unit: str
    target: str | None = None
    met: bool | None = None


@dataclass(frozen=True)
class Target:
    """A target from docs/benchmarks.md for one (benchmark, metric), from some size on."""

    benchmark: str
    metric: str
    text: str
    check: Callable[[float], bool]
    applies: Callable[[int], bool]


#: Full uploads with zstd (the default ``snapshot_compression``), ``"lz4"`` and ``"none"``.
UPLOADS = ("async_upload", "async_upload_lz4", "async_upload_none")
#: The restores of each compression's last upload, in the same order.
RESTORES = ("restore", "restore_lz4", "restore_none")

TARGETS = [
    Target("sync_pause", "pause_p99", "< 5 ms", lambda v: v < 5.0, lambda k: k == PAUSE_KEYS),
    *(
        Target(upload, "upload_vs_disk_write", ">= 0.70", lambda v: v >= 0.70, lambda k: k >= RATE_MIN_KEYS)
        for upload in UPLOADS
    ),
    Target(
        "incremental",
        "first_upload_vs_disk_write",
        ">= 0.70",
        lambda v: v >= 0.70,
        lambda k: k >= RATE_MIN_KEYS,
    ),
    Target("incremental", "ratio_1pct_p50", "<= 0.03", lambda v: v <= 0.03, lambda k: k >= RATE_MIN_KEYS),
    Target(
        "incremental", "restore_vs_disk_read", ">= 0.50", lambda v: v >= 0.50, lambda k: k >= RATE_MIN_KEYS
    ),
    *(
        Target(restore, "restore_vs_disk_read", ">= 0.50", lambda v: v >= 0.50, lambda k: k >= RATE_MIN_KEYS)
        for restore in RESTORES
    ),
]

#: Raw metrics worth a row in the printed table (all records go to the JSON file).
SHOWN = {
    "memory": ["rss_loaded", "rss_peak", "peak_bytes_per_key"],
    "sync_pause": ["pause_p50", "pause_p99", "finalize_p99", "snapshot_sync_p99"],
    **{
        upload: ["duration_p50", "duration_max", "uploaded_bytes", "upload_rate", "upload_vs_disk_write"]
        for upload in UPLOADS
    },
    "incremental": [
        "load_epochs",
        "first_sync",
        "first_bytes",
        "first_duration",
        "first_transfer",
        "first_upload_rate",
        "first_upload_vs_disk_write",
        "ratio_1pct_p50",
        "ratio_1pct_max",
        "sync_1pct_p50",
        "ratio_10pct_p50",
        "restore_ms",
        "restore_rate",
        "restore_vs_disk_read",
    ],
    **{
        restore: ["restore_p50", "snapshot_bytes", "restore_rate", "restore_vs_disk_read"]
        for restore in RESTORES
    },
    "rescale": ["restore_2_to_2_ms", "restore_2_to_3_ms", "rescale_vs_plain"],
    "disk": ["write_bw", "read_bw"],
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="sizes 10^4 and 10^5 only")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], help="keys per subtask")
    parser.add_argument(
        "--rocksdb-max-keys", type=int, help="skip RocksDB above this size (it says so in the output)"
    )
    parser.add_argument("--dir", type=Path, default=None, help="parent of the work dir (default: temp dir)")
    parser.add_argument("--disk-mib", type=int, help="size of the disk bandwidth file (full 1024, quick 256)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def build() -> Path:
    """Builds the example in release mode (the shared target dir, as the Makefile sets it)."""
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "weir" / "target"))
    subprocess.run(
        ["cargo", "build", "--release", "--quiet", "-p", "weir-host", "--example", "checkpoint_bench"],
        cwd=REPO,
        env=env,
        check=True,
    )
    return Path(env["CARGO_TARGET_DIR"]) / "release" / "examples" / "checkpoint_bench"


#: Each runs in a process of its own, so resident memory is measured from a clean baseline
#: (a process that freed one backend's state keeps much of it mapped).
BACKENDS = ("heap", "rocksdb")


def run_bench(binary: Path, work: Path, sizes: list[int], rocksdb_max_keys: int | None) -> dict[str, Any]:
    """Runs the Rust benchmark, one process per backend; their progress goes to our stderr,
    their raw results come back merged."""
    merged: dict[str, Any] = {"records": [], "notes": [], "args": [], "wall_s": 0.0}
    for backend in BACKENDS:
        out = work / f"raw-{backend}.json"
        command = [str(binary), "--dir", str(work / f"state-{backend}"), "--out", str(out)]
        command += ["--sizes", ",".join(map(str, sizes)), "--backends", backend]
        if rocksdb_max_keys is not None:
            command += ["--rocksdb-max-keys", str(rocksdb_max_keys)]
        subprocess.run(command, check=True)
        result = json.loads(out.read_text())
        for key in ("records", "notes"):
            merged[key] += result[key]
        merged["args"].append(result["args"])
        merged["wall_s"] += result["wall_s"]
    return merged


def by_key(records: list[Record]) -> dict[tuple[str, str, int, str], Record]:
    """Records indexed by (benchmark, backend, keys, metric)."""
    return {(r.benchmark, r.backend, r.keys, r.metric): r for r in records}


def derive(records: list[Record], disk: DiskBandwidth) -> list[Record]:
    """The ratios the targets are about: rates against the disk, rescale against plain restore."""
    index = by_key(records)
    derived = [
        Record("disk", "", 0, "write_bw", disk.write_mb_s, "MiB/s"),
        Record("disk", "", 0, "read_bw", disk.read_mb_s, "MiB/s"),
    ]
    pairs = [
        *((upload, "upload_rate", "upload_vs_disk_write", disk.write_mb_s) for upload in UPLOADS),
        ("incremental", "first_upload_rate", "first_upload_vs_disk_write", disk.write_mb_s),
        *((restore, "restore_rate", "restore_vs_disk_read", disk.read_mb_s) for restore in RESTORES),
        ("incremental", "restore_rate", "restore_vs_disk_read", disk.read_mb_s),
    ]
    for r in records:
        for benchmark, metric, name, bandwidth in pairs:
            if (r.benchmark, r.metric) == (benchmark, metric):
                derived.append(Record(benchmark, r.backend, r.keys, name, r.value / bandwidth, "ratio"))
        if (r.benchmark, r.metric) == ("rescale", "restore_2_to_3_ms"):
            plain = index.get(("rescale", r.backend, r.keys, "restore_2_to_2_ms"))
            if plain is not None and plain.value > 0:
                derived.append(
                    Record("rescale", r.backend, r.keys, "rescale_vs_plain", r.value / plain.value, "ratio")
                )
    return derived


def judge(records: list[Record]) -> None:
    """Fills ``target`` and ``met`` where docs/benchmarks.md states a target for that size."""
    for r in records:
        for t in TARGETS:
            if (r.benchmark, r.metric) == (t.benchmark, t.metric) and t.applies(r.keys):
                r.target, r.met = t.text, t.check(r.value)


def render(r: Record) -> str:
    """Value with a readable unit."""
    if r.unit == "bytes":
        return f"{r.value / MIB:,.2f} MiB"
    if r.unit == "ratio":
        return f"{r.value:.3f}"
    return f"{r.value:,.2f} {r.unit}"


def print_table(records: list[Record]) -> None:
    """The headline numbers, each next to its target."""
    order = list(SHOWN)
    rows = [r for r in records if r.metric in SHOWN.get(r.benchmark, [])]
    rows.sort(key=lambda r: (order.index(r.benchmark), r.backend, r.keys, SHOWN[r.benchmark].index(r.metric)))
    header = f"{'benchmark':<13} {'backend':<8} {'keys':>10}  {'metric':<28} {'value':>16}  {'target':<9} met"
    print(header)
    print("-" * len(header))
    for r in rows:
        met = "" if r.met is None else ("met" if r.met else "MISSED")
        print(
            f"{r.benchmark:<13} {r.backend:<8} {r.keys:>10,}  {r.metric:<28} {render(r):>16}  "
            f"{r.target or '':<9} {met}"
        )


def main(argv: list[str] | None = None) -> int:
    """Runs everything; returns 0 even when targets are missed (they are reported, not tests)."""
    args = parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    disk_bytes = (args.disk_mib or (256 if args.quick else 1024)) * MIB
    started = time.perf_counter()
    binary = build()
    with tempfile.TemporaryDirectory(prefix="weir-checkpoints-", dir=args.dir) as tmp:
        work = Path(tmp)
        # Before and after the benchmark: the better of the two is what the disk can do, which
        # makes the comparison the strictest the run allows.
        before = measure_disk_bandwidth(work, disk_bytes)
        raw = run_bench(binary, work, sizes, args.rocksdb_max_keys)
        after = measure_disk_bandwidth(work, disk_bytes)
    disk = max(before, after, key=lambda d: d.write_mb_s)
    read = max(before, after, key=lambda d: d.read_mb_s)
    disk = DiskBandwidth(disk.directory, disk.size_bytes, disk.write_s, read.read_s, read.read_uncached)
    records = [
        Record(**{k: r[k] for k in ("benchmark", "backend", "keys", "metric", "value", "unit")})
        for r in raw["records"]
    ]
    records += derive(records, disk)
    judge(records)
    notes: list[str] = list(raw["notes"])
    if not disk.read_uncached:
        notes.append("the disk read measurement may have hit the page cache (fadvise did not drop it)")
    print()
    print_table(records)
    for note in notes:
        print(f"note: {note}")
    missed = [r for r in records if r.met is False]
    print(
        f"{len(missed)} of {sum(r.met is not None for r in records)} targets missed; "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    suffix = "-quick" if args.quick else ""
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / f"checkpoints{suffix}.json").write_text(
        json.dumps([asdict(r) for r in records], indent=1) + "\n"
    )
    run_info = {
        "sizes": sizes,
        "disk_before": before.as_dict(),
        "disk_after": after.as_dict(),
        "notes": notes,
        "bench_args": raw["args"],
        "bench_wall_s": raw["wall_s"],
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (args.results_dir / f"checkpoints{suffix}-run.json").write_text(json.dumps(run_info, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
