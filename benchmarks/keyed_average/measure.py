"""Measurement records and the peak-memory sampler shared by every variant."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass
class Outcome:
    """What a variant's ``run`` returns: one timed execution, output read back from its sink."""

    wall_s: float
    count: int
    checksum: int
    #: Checkpoints (Spark: committed micro-batches) taken during the timed part, if known.
    checkpoints: int | None = None
    #: Per-checkpoint synchronous durations (ms) where the system exposes them.
    checkpoint_sync_ms: list[float] = field(default_factory=list)
    #: Per-checkpoint asynchronous durations (ms) where the system exposes them.
    checkpoint_async_ms: list[float] = field(default_factory=list)
    #: Anything else worth keeping in the JSON (free-form, JSON-serializable).
    extra: dict[str, Any] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100, linear interpolation), or None when there are no values."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def _children_by_parent() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may contain spaces; fields after the last ')' are fixed.
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def tree_rss_kib(root: int) -> int:
    """Resident memory (KiB) of ``root`` and all its descendants: the driver, its JVM and the
    Python workers Spark forks."""
    tree = _children_by_parent()
    total = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            resident_pages = 0
        total += resident_pages * _PAGE_KIB
        stack.extend(tree.get(pid, ()))
    return total


class PeakMemory:
    """Samples the resident memory of this process tree in a background thread; ``peak_mb``
    is the largest sum seen (all processes at the same instant, not each one's own peak)."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self._interval = interval_s
        self._stop = threading.Event()
        self._peak_kib = 0
        self._thread = threading.Thread(target=self._loop, name="peak-memory", daemon=True)

    def _loop(self) -> None:
        me = os.getpid()
        while True:
            self._peak_kib = max(self._peak_kib, tree_rss_kib(me))
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_mb(self) -> float:
        """Peak resident memory in MiB."""
        return self._peak_kib / 1024.0
