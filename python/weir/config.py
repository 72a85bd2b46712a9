"""Checkpointing and state backend configuration (Flink's ``CheckpointConfig`` and backends).

Examples:
    >>> from weir.config import CheckpointConfig, StateBackend
    >>> config = CheckpointConfig(interval_ms=5_000, min_pause_ms=1_000)
    >>> config.mode, config.timeout_ms, config.max_concurrent, config.tolerable_failures
    ('exactly_once', 600000, 1, 0)
    >>> StateBackend.of("rocksdb")
    StateBackend(name='rocksdb')
    >>> StateBackend.of({"name": "heap"}).name
    'heap'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from weir.exceptions import InvalidArgumentError

__all__ = [
    "MINIMAL_CHECKPOINT_TIME_MS",
    "BackendName",
    "CheckpointConfig",
    "CheckpointingMode",
    "ExternalizedRetention",
    "StateBackend",
]

CheckpointingMode: TypeAlias = Literal["exactly_once", "at_least_once"]
"""Exactly-once publishes sink output when a checkpoint completes; at-least-once at each epoch end."""

ExternalizedRetention: TypeAlias = Literal["delete_on_cancellation", "retain_on_cancellation"]
"""What happens to retained checkpoints when the job is cancelled (they always survive failures)."""

BackendName: TypeAlias = Literal["heap", "rocksdb"]
"""The keyed state backends."""

MINIMAL_CHECKPOINT_TIME_MS: Final = 10
"""The shortest checkpoint interval and timeout (Flink's ``MINIMAL_CHECKPOINT_TIME``)."""

_MODES: Final = ("exactly_once", "at_least_once")
_RETENTIONS: Final = ("delete_on_cancellation", "retain_on_cancellation")
_BACKENDS: Final = ("heap", "rocksdb")


@dataclass(frozen=True)
class CheckpointConfig:
    """Flink's checkpoint options, with Flink's defaults and validation.

    Attributes:
        interval_ms: Time between the starts of two periodic checkpoints (>= 10 ms).
        mode: ``"exactly_once"`` (default) or ``"at_least_once"``.
        timeout_ms: A checkpoint still running this long after its trigger is
            aborted (>= 10 ms; default 10 minutes).
        min_pause_ms: Least time between the end of one checkpoint and the start
            of the next (default 0); only with ``max_concurrent == 1``.
        max_concurrent: Checkpoints in flight at once (default 1).
        tolerable_failures: Consecutive failed checkpoints tolerated before the
            job fails (default 0, as in Flink).
        retained: Completed checkpoints kept; older ones are subsumed (default 1).
        externalized_retention: Whether retained checkpoints survive cancelling
            the job (default ``"delete_on_cancellation"``).

    Raises:
        InvalidArgumentError: If an option is out of range; the message says the fix.

    Examples:
        >>> CheckpointConfig(interval_ms=5)
        Traceback (most recent call last):
        ...
        weir.exceptions.InvalidArgumentError: checkpoint interval must be at least 10 ms, got 5 ms
    """

    interval_ms: int
    mode: CheckpointingMode = "exactly_once"
    timeout_ms: int = 600_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    retained: int = 1
    externalized_retention: ExternalizedRetention = "delete_on_cancellation"

    def __post_init__(self) -> None:
        for name in (
            "interval_ms",
            "timeout_ms",
            "min_pause_ms",
            "max_concurrent",
            "tolerable_failures",
            "retained",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgumentError(f"{name} must be an int, got {value!r}")
        if self.interval_ms < MINIMAL_CHECKPOINT_TIME_MS:
            raise InvalidArgumentError(
                f"checkpoint interval must be at least {MINIMAL_CHECKPOINT_TIME_MS} ms, "
                f"got {self.interval_ms} ms"
            )
        if self.timeout_ms < MINIMAL_CHECKPOINT_TIME_MS:
            raise InvalidArgumentError(
                f"checkpoint timeout must be at least {MINIMAL_CHECKPOINT_TIME_MS} ms, "
                f"got {self.timeout_ms} ms"
            )
        if self.mode not in _MODES:
            raise InvalidArgumentError(f"checkpointing mode {self.mode!r} is unknown: use one of {_MODES}")
        if self.min_pause_ms < 0:
            raise InvalidArgumentError(f"min pause must be zero or positive, got {self.min_pause_ms} ms")
        if self.max_concurrent < 1:
            raise InvalidArgumentError(
                f"max concurrent checkpoints must be at least 1, got {self.max_concurrent}"
            )
        if self.min_pause_ms > 0 and self.max_concurrent > 1:
            raise InvalidArgumentError(
                f"a min pause ({self.min_pause_ms} ms) needs max_concurrent == 1, got {self.max_concurrent}: "
                "set one of them back to its default"
            )
        if self.tolerable_failures < 0:
            raise InvalidArgumentError(
                f"tolerable checkpoint failures must be zero or positive, got {self.tolerable_failures}"
            )
        if self.retained < 1:
            raise InvalidArgumentError(
                f"at least one completed checkpoint must be retained, got {self.retained}"
            )
        if self.externalized_retention not in _RETENTIONS:
            raise InvalidArgumentError(
                f"externalized retention {self.externalized_retention!r} is unknown: use one of {_RETENTIONS}"
            )

    def coordinator_options(self) -> dict[str, Any]:
        """The keyword arguments of the native checkpoint coordinator."""
        return {
            "interval_ms": self.interval_ms,
            "mode": self.mode,
            "timeout_ms": self.timeout_ms,
            "min_pause_ms": self.min_pause_ms,
            "max_concurrent": self.max_concurrent,
            "tolerable_failures": self.tolerable_failures,
            "retained": self.retained,
        }


@dataclass(frozen=True)
class StateBackend:
    """Which keyed state backend holds the state: ``"heap"`` (memory) or ``"rocksdb"`` (disk).

    Accepted wherever a backend is configured as the object, its name, or a
    dict ``{"name": ...}``; see :meth:`of`.

    Raises:
        InvalidArgumentError: For an unknown backend name.
    """

    name: BackendName = "heap"

    def __post_init__(self) -> None:
        if self.name not in _BACKENDS:
            raise InvalidArgumentError(
                f'state backend {self.name!r} is unknown: use "heap" (state in memory) '
                f'or "rocksdb" (state on local disk)'
            )

    @staticmethod
    def of(backend: StateBackend | str | Mapping[str, Any]) -> StateBackend:
        """A backend from its object, name or ``{"name": ...}`` dict.

        Examples:
            >>> StateBackend.of("memory")
            Traceback (most recent call last):
            ...
            weir.exceptions.InvalidArgumentError: state backend 'memory' is unknown: \
use "heap" (state in memory) or "rocksdb" (state on local disk)
        """
        if isinstance(backend, StateBackend):
            return backend
        if isinstance(backend, str):
            return StateBackend(backend)  # type: ignore[arg-type]
        if isinstance(backend, Mapping):
            unknown = set(backend) - {"name"}
            if unknown:
                raise InvalidArgumentError(
                    f"state backend options {sorted(unknown)} are unknown: only 'name' is accepted"
                )
            return StateBackend(backend.get("name", "heap"))
        raise InvalidArgumentError(
            f"a state backend is a name ('heap' or 'rocksdb'), a dict or a StateBackend, got {backend!r}"
        )
