"""Epochs sized by time: how much input the next epoch admits.

Every epoch costs a fixed amount beyond its records (the Spark job's
scheduling, its stages' tails, barriers, planning: about 90 ms on two
cores), so small epochs waste throughput; and a checkpoint's barrier waits
for the running epoch to end, so long epochs delay checkpoints. A job whose
source sizes its epochs by time (a file source without
``max_files_per_epoch``) aims each epoch at the job's epoch target, by
default the checkpoint interval up to one second: the budget of the next
epoch is what the latest epoch ran per second of its wall time, times the
target. The fixed cost makes a small epoch's rate look low, so sizes grow
towards the target over a few epochs and settle where an epoch takes about
the target; a slower function or a busier cluster shrinks them again.

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
    """The budget of the next epoch from the size and wall time of the latest one."""

    __slots__ = ("_rate", "target_s")

    def __init__(self, target_s: float) -> None:
        self.target_s = target_s
        self._rate: float | None = None

    def observe(self, size: int, seconds: float) -> None:
        """An epoch with ``size`` input (in the source's unit) ran in ``seconds``."""
        if size > 0 and seconds > 0:
            self._rate = size / seconds

    def budget(self) -> int | None:
        """How much input the next epoch should admit; ``None`` before any epoch ran."""
        if self._rate is None:
            return None
        return max(1, int(self._rate * self.target_s))


def budget_drifted(planned_with: int | None, budget: int | None) -> bool:
    """Whether input planned with budget ``planned_with`` is too far from ``budget`` to run:
    planned before anything was measured, or more than twice or under half the size now due."""
    if budget is None:
        return False
    if planned_with is None:
        return True
    return budget > 2 * planned_with or 2 * budget < planned_with
