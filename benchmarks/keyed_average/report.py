"""The results table with ratios, the JSON files and the PNG chart."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.keyed_average.registry import CEILING_FOR_PATH

Record = dict[str, Any]


def _eps(record: Record) -> float:
    value = record.get("events_per_s")
    return float(value) if value else 0.0


def best_peer(records: Sequence[Record], reference: bool = False) -> Record | None:
    """The fastest correct peer (ceilings excluded): among the peers Weir competes with, or
    with ``reference=True`` among the reference ones (Spark's JVM path)."""
    peers = [
        r
        for r in records
        if r.get("path") == "peer" and r.get("correct") and bool(r.get("reference")) == reference
    ]
    return max(peers, key=_eps, default=None)


def ceiling_for(record: Record, records: Sequence[Record]) -> Record | None:
    """The ceiling a Weir path is compared with (the fastest correct one of that kind)."""
    kind = CEILING_FOR_PATH.get(str(record.get("path")))
    ceilings = [r for r in records if kind is not None and r.get("path") == kind and r.get("correct")]
    return max(ceilings, key=_eps, default=None)


def add_ratios(records: list[Record]) -> None:
    """Annotate every record with ``vs_best_peer`` and, for Weir variants, ``vs_ceiling``."""
    peer = best_peer(records)
    jvm = best_peer(records, reference=True)
    for record in records:
        record["vs_best_peer"] = _eps(record) / _eps(peer) if peer and _eps(record) else None
        record["vs_best_reference"] = _eps(record) / _eps(jvm) if jvm and _eps(record) else None
        compared = record.get("system") == "weir" or record.get("path") == "floor_python"
        ceiling = ceiling_for(record, records) if compared else None
        record["vs_ceiling"] = _eps(record) / _eps(ceiling) if ceiling and _eps(record) else None
        record["ceiling_variant"] = ceiling["variant"] if ceiling else None


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(records: Sequence[Record]) -> str:
    """A plain-text table of the records, ratios included."""
    header = (
        f"{'variant':<42} {'system':<6} {'path':<14} {'events/s':>11} {'wall s':>8} {'count':>9} "
        f"{'checksum':>12} {'ok':>3} {'ckpts':>5} {'ckpt p50/p99 ms':>15} {'peak MB':>8} "
        f"{'x best peer':>11} {'x JVM ref':>9} {'x ceiling':>9}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        if r.get("error"):
            lines.append(f"{r['variant']:<42} FAILED: {str(r['error']).splitlines()[0][:150]}")
            continue
        ckpt = f"{_fmt(r['checkpoint_sync_ms_p50'], '.0f')}/{_fmt(r['checkpoint_sync_ms_p99'], '.0f')}"
        lines.append(
            f"{r['variant']:<42} {r['system']:<6} {r['path']:<14} {_fmt(r['events_per_s'], ',.0f'):>11} "
            f"{r['wall_s']:>8.2f} {r['count']:>9,} {r['checksum']:>12,} {'yes' if r['correct'] else 'NO':>3} "
            f"{_fmt(r['checkpoints'], 'd'):>5} {ckpt:>15} {r['peak_mem_mb']:>8.0f} "
            f"{_fmt(r.get('vs_best_peer'), '.2f'):>11} {_fmt(r.get('vs_best_reference'), '.2f'):>9} "
            f"{_fmt(r.get('vs_ceiling'), '.2f'):>9}"
        )
    peer, jvm = best_peer(records), best_peer(records, reference=True)
    lines.append("")
    lines.append(
        f"best peer: {peer['variant'] if peer else 'none correct'}; JVM reference: "
        f"{jvm['variant'] if jvm else 'none correct'}"
    )
    lines.extend(checkpointing_cost_lines({r["variant"]: r for r in records if r.get("correct")}))
    end_to_end = sorted(
        float(ms)
        for r in records
        if r.get("system") == "weir" and r.get("correct")
        for ms in (r.get("extra") or {}).get("checkpoint_e2e_ms") or []
    )
    if end_to_end:
        p99 = end_to_end[min(len(end_to_end) - 1, math.ceil(0.99 * len(end_to_end)) - 1)]
        lines.append(
            f"checkpoint trigger to completion, all Weir variants: p50 "
            f"{end_to_end[(len(end_to_end) - 1) // 2]:,.0f} ms, p99 {p99:,.0f} ms of "
            f"{len(end_to_end)} checkpoints (target: p99 <= 2,000 ms)"
        )
    lines.extend(floor_lines(records))
    lines.extend(cpu_lines(records))
    lines.append(
        "ckpts: Spark micro-batch commits; ckpt ms: state commit time per batch (synchronous in "
        "Spark's tasks), Weir's synchronous part per checkpoint"
    )
    return "\n".join(lines)


def checkpointing_cost_lines(by_name: dict[str, Record]) -> list[str]:
    """The throughput cost of checkpointing every second, from the no-checkpoints variant's
    runs, each paired with one with checkpoints (one session, in turns)."""
    without = by_name.get("weir-per-record-heap-no-checkpoints")
    pairs = (without.get("extra") or {}).get("checkpoint_cost_pairs") if without else None
    if not pairs:
        return []
    costs = sorted(1 - p["without_s"] / p["with_checkpoints_s"] for p in pairs)
    return [
        f"cost of checkpointing every 1 s (weir per-record heap, {len(pairs)} runs with and "
        f"without in turns): median {statistics.median(costs):.1%} of throughput "
        f"(pairs: {', '.join(f'{c:.1%}' for c in costs)}; target <= 10%)"
    ]


def floor_lines(records: Sequence[Record]) -> list[str]:
    """The per-record function's floor (its shape over a plain dict, no managed state) against
    ceiling (b), and each per-record Weir variant against the floor: what the function's calls
    cost, and what Weir adds to them."""
    floors = [r for r in records if r.get("path") == "floor_python" and r.get("correct")]
    floor = max(floors, key=_eps, default=None)
    if floor is None or not _eps(floor):
        return []
    lines = [
        f"the per-record function over a plain dict ({floor['variant']}): "
        f"{_fmt(floor.get('vs_ceiling'), '.2f')} of ceiling (b), the most any state layer reaches "
        "with this function"
    ]
    for record in records:
        if record.get("path") == "per_record" and record.get("correct") and _eps(record):
            lines.append(f"  {record['variant']}: {_eps(record) / _eps(floor):.2f} of that floor")
    return lines


def _cpu(record: Record) -> dict[str, float]:
    return dict((record.get("extra") or {}).get("cpu_s") or {})


def cpu_lines(records: Sequence[Record]) -> list[str]:
    """Per Weir variant, the CPU its median run used by role, and what it used beyond its
    ceiling: where a run's time goes on a machine whose cores are busy."""
    lines = []
    for record in records:
        ceiling = ceiling_for(record, records)
        mine, theirs = _cpu(record), _cpu(ceiling) if ceiling else {}
        if record.get("system") != "weir" or not mine or not theirs:
            continue
        roles = sorted(set(mine) | set(theirs), key=lambda role: -mine.get(role, 0.0))
        extra = ", ".join(
            f"{role} {mine.get(role, 0.0) - theirs.get(role, 0.0):+.2f}"
            for role in roles
            if abs(mine.get(role, 0.0) - theirs.get(role, 0.0)) >= 0.01
        )
        lines.append(
            f"cpu {record['variant']}: {sum(mine.values()):.2f} core-s in {record['wall_s']:.2f} s, "
            f"{sum(theirs.values()):.2f} for its ceiling; beyond it: {extra}"
        )
    return lines


def write_json(records: Sequence[Record], results_dir: Path, stamp: str) -> Path:
    """Write ``<stamp>.json`` and ``latest.json``; return the former."""
    results_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(list(records), indent=1)
    path = results_dir / f"{stamp}.json"
    path.write_text(text)
    (results_dir / "latest.json").write_text(text)
    return path


PATH_COLORS = {
    "per_record": "#1f77b4",
    "vectorized": "#2ca02c",
    "peer": "#ff7f0e",
    "ceiling_arrow": "#7f7f7f",
    "ceiling_python": "#bcbd22",
    "floor_python": "#17becf",
}


def chart(records: Sequence[Record], path: Path, title: str) -> Path:
    """A horizontal bar chart of events/s (log scale) per variant, coloured by path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    shown = [r for r in records if not r.get("error") and _eps(r) > 0]
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(shown) + 1.8))
    names = [r["variant"] + ("" if r["correct"] else "  (WRONG OUTPUT)") for r in shown]
    values = [_eps(r) for r in shown]
    ax.barh(names, values, color=[PATH_COLORS.get(r["path"], "#333333") for r in shown])
    for y, value in enumerate(values):
        ax.text(value, y, f" {value:,.0f}", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("events/s (log scale; higher is better)")
    ax.set_title(title, fontsize=10)
    used = sorted({r["path"] for r in shown}, key=list(PATH_COLORS).index)
    ax.legend(
        handles=[Patch(color=PATH_COLORS[p], label=p) for p in used],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=max(1, len(used)),
        fontsize=8,
    )
    if values:
        ax.set_xlim(min(values) / 2, max(values) * 8)
    else:
        ax.text(0.5, 0.5, "no variant finished", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
