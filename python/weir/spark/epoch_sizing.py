"""Epochs sized by time: how much input the next epoch admits.

Every epoch costs a fixed amount beyond its records (the Spark job's
scheduling, its stages' tails, barriers, planning: about 90 ms on two
cores), so small epochs waste throughput; and a checkpoint's barrier waits
for the running epoch to end, so long epochs delay checkpoints. A job whose
source sizes its epochs by time (a file source without
``max_files_per_epoch``) aims each epoch at the job's epoch target, by
default the checkpoint interval up to one second: the budget of the next
epoch is what the latest epoch ran per second of its wall time, times the
target. Sizes settle where an epoch takes about the target, and a slower
function or a busier cluster shrinks them again. The fixed cost makes a
small epoch's rate look low, so the first epochs (a job starts with the
source's smallest epoch) grow faster than that: see :class:`EpochSizer`.

Examples:
    >>> sizer = EpochSizer(target_s=1.0)
    >>> sizer.budget() is None  # nothing measured: the source admits its smallest epoch
    True
    >>> sizer.observe(size=1_000_000, seconds=0.25)
    >>> sizer.budget()
    4000000
    >>> budget_drifted(None, 4_000_000), budget_drifted(3_000_000, 4_000_000)
    (True, False)
"""

from __future__ import annotations

from weir.exceptions import InvalidArgumentError

__all__ = ["DEFAULT_EPOCH_TARGET_MS", "EpochSizer", "budget_drifted", "epoch_target_ms"]

DEFAULT_EPOCH_TARGET_MS = 1_000
"""The epoch target without checkpointing, and its upper bound by default."""

MIN_SPREAD = 1.5
"""Two epochs give a fixed cost and a rate when one is this many times the other's size."""

MAX_GROWTH = 1.5
"""The most a budget from two epochs exceeds the latest epoch's rate times the target."""


def epoch_target_ms(configured: int | None, checkpoint_interval_ms: int | None) -> int:
    """The epoch target a job uses: the one it configured, else its checkpoint interval up to
    :data:`DEFAULT_EPOCH_TARGET_MS` (a barrier then waits at most about one interval)."""
    if configured is not None:
        if configured < 1:
            raise InvalidArgumentError(f"epoch_target_ms is {configured}: give at least 1 ms")
        return configured
    if checkpoint_interval_ms is None:
        return DEFAULT_EPOCH_TARGET_MS
    return min(checkpoint_interval_ms, DEFAULT_EPOCH_TARGET_MS)


class EpochSizer:
    """The budget of the next epoch from the size and wall time of the latest epochs.

    The simple budget is the latest epoch's rate times the target; it settles where an
    epoch takes the target, but from a small first epoch it grows slowly, since the fixed
    cost dominates a small epoch. Two epochs of clearly different sizes give the fixed cost
    and the marginal rate (a line through both), and the budget that fills the target at
    that rate: growth takes one step instead of several, at most :data:`MAX_GROWTH` times
    the simple budget, so a noisy pair cannot make an epoch run far past the target.
    """

    __slots__ = ("_earlier", "_latest", "target_s")

    def __init__(self, target_s: float) -> None:
        self.target_s = target_s
        self._latest: tuple[int, float] | None = None
        self._earlier: tuple[int, float] | None = None
        """An epoch whose size differs from the latest's by :data:`MIN_SPREAD` or more."""

    def observe(self, size: int, seconds: float) -> None:
        """An epoch with ``size`` input (in the source's unit) ran in ``seconds``."""
        if size <= 0 or seconds <= 0:
            return
        latest = self._latest
        if latest is not None and max(size, latest[0]) >= MIN_SPREAD * min(size, latest[0]):
            self._earlier = latest
        self._latest = (size, seconds)

    def budget(self) -> int | None:
        """How much input the next epoch should admit; ``None`` before any epoch ran."""
        if self._latest is None:
            return None
        size, seconds = self._latest
        simple = size / seconds * self.target_s
        budget = simple
        if self._earlier is not None:
            earlier_size, earlier_seconds = self._earlier
            if seconds != earlier_seconds:
                rate = (size - earlier_size) / (seconds - earlier_seconds)
                if rate > 0 and 0 <= (fixed := seconds - size / rate) < self.target_s:
                    budget = min(max((self.target_s - fixed) * rate, simple), MAX_GROWTH * simple)
        return max(1, int(budget))


def budget_drifted(planned_with: int | None, budget: int | None) -> bool:
    """Whether input planned with budget ``planned_with`` is too far from ``budget`` to run:
    planned before anything was measured, or more than twice or under half the size now due."""
    if budget is None:
        return False
    if planned_with is None:
        return True
    return budget > 2 * planned_with or 2 * budget < planned_with
