"""Restart strategies: how often a failed job is restored and run again (Flink's names)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class RestartStrategy:
    """Decides, after each failure, whether the job restores and runs again.

    Use :func:`fixed_delay`, :func:`failure_rate` or :func:`no_restart`.
    """

    max_failures: int
    """Failures tolerated (within ``interval_s`` for a failure-rate strategy)."""
    delay_s: float
    """Pause before each restart."""
    interval_s: float | None = None
    """Window of a failure-rate strategy; ``None`` counts every failure ever."""
    _failures: deque[float] = field(default_factory=deque, repr=False)

    def on_failure(self, now: float) -> bool:
        """Records a failure at ``now`` (monotonic seconds); True when the job may
        restart (after :attr:`delay_s`)."""
        self._failures.append(now)
        if self.interval_s is not None:
            while self._failures and now - self._failures[0] > self.interval_s:
                self._failures.popleft()
        return len(self._failures) <= self.max_failures

    @property
    def failures(self) -> int:
        """Failures counted so far (in the window, for a failure-rate strategy)."""
        return len(self._failures)


def fixed_delay(restart_attempts: int = 3, delay_s: float = 1.0) -> RestartStrategy:
    """Restart up to ``restart_attempts`` times, ``delay_s`` apart."""
    if restart_attempts < 0 or delay_s < 0:
        raise ValueError("restart_attempts and delay_s must not be negative")
    return RestartStrategy(restart_attempts, delay_s)


def failure_rate(
    max_failures_per_interval: int, failure_rate_interval_s: float, delay_s: float = 1.0
) -> RestartStrategy:
    """Restart unless more than ``max_failures_per_interval`` failures fall in the interval."""
    if max_failures_per_interval < 0 or failure_rate_interval_s <= 0 or delay_s < 0:
        raise ValueError("failure counts and delays must not be negative, the interval positive")
    return RestartStrategy(max_failures_per_interval, delay_s, failure_rate_interval_s)


def no_restart() -> RestartStrategy:
    """Fail the job on its first failure."""
    return RestartStrategy(0, 0.0)
