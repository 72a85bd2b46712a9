"""Measurement records and the peak-memory sampler shared by every variant."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first), or
    ``None`` once the process is gone. The command name (field 2) may contain spaces; the
    fields after the last ')' are fixed."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def _children_by_parent() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(entry)) is not None:
            tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def _descendants(root: int) -> list[int]:
    tree = _children_by_parent()
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(tree.get(pid, ()))
    return found


def cpu_ticks(pid: int | str) -> int | None:
    """User plus system clock ticks ``pid`` (or a thread, ``"<pid>/task/<tid>"``) has used
    so far; ``None`` once it is gone."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])


def _role(pid: int, root: int) -> str:
    """Which part of a run a process is: the driver's Python, the JVM (Spark's driver and
    executors), Spark's Python workers, Weir's state hosts, or other."""
    if pid == root:
        return "driver"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    if os.path.basename(command[0]) == b"java":
        return "jvm"
    if any(part.endswith(b"weir-host") for part in command[:2]):
        return "state host"
    if b"pyspark.daemon" in command or b"pyspark.worker" in command:
        return "python workers"
    return "other"


class CpuUse:
    """Core-seconds of CPU each role of this process tree used (see :func:`cpu_use`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


@contextmanager
def cpu_use(interval_s: float = 0.1) -> Iterator[CpuUse]:
    """CPU used by this process and its descendants during the ``with`` block, by role.

    A sampler thread notes each process's clock ticks every ``interval_s``, so a process
    that ends inside the block (a state host stopped with its job) counts up to its last
    sample; processes present at the start count from there, later ones from zero.
    """
    root = os.getpid()
    start = {pid: ticks for pid in _descendants(root) if (ticks := cpu_ticks(pid)) is not None}
    last: dict[int, int] = dict(start)
    roles = {pid: _role(pid, root) for pid in start}
    done = threading.Event()

    def sample() -> None:
        for pid in _descendants(root):
            ticks = cpu_ticks(pid)
            if ticks is not None:
                last[pid] = ticks
                if pid not in roles:
                    roles[pid] = _role(pid, root)

    def loop() -> None:
        while not done.wait(interval_s):
            sample()

    use = CpuUse()
    thread = threading.Thread(target=loop, name="cpu-use", daemon=True)
    thread.start()
    try:
        yield use
    finally:
        done.set()
        thread.join()
        sample()
        for pid, ticks in last.items():
            used = (ticks - start.get(pid, 0)) / _CLOCK_TICKS
            if used > 0:
                use.seconds[roles[pid]] = use.seconds.get(roles[pid], 0.0) + used


def tree_rss_kib(root: int) -> int:
    """Resident memory (KiB) of ``root`` and all its descendants: the driver, its JVM and the
    Python workers Spark forks."""
    total = 0
    for pid in _descendants(root):
        try:
            resident_pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            resident_pages = 0
        total += resident_pages * _PAGE_KIB
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
