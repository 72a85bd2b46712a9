"""Checkpointing and state backend configuration (Flink's ``CheckpointConfig`` and backends).

:class:`CheckpointConfig` is the native configuration of the Rust
coordinator: frozen, picklable, and validated once, in Rust, when it is
made (an invalid option raises :class:`~weir.exceptions.InvalidArgumentError`
saying how to fix it).

Examples:
    >>> from weir.config import CheckpointConfig, StateBackend
    >>> config = CheckpointConfig(interval_ms=5_000, min_pause_ms=1_000)
    >>> config.mode, config.timeout_ms, config.max_concurrent, config.tolerable_failures
    ('exactly_once', 600000, 1, 0)
    >>> config.externalized_cleanup, config.snapshot_compression
    ('retain_on_cancellation', 'zstd')
    >>> CheckpointConfig(interval_ms=5)
    Traceback (most recent call last):
    ...
    weir.exceptions.InvalidArgumentError: checkpoint interval 5ms is below the minimum of 10ms; \
set a longer interval
    >>> StateBackend.of("rocksdb")
    StateBackend(name='rocksdb', incremental=False)
    >>> StateBackend.of({"name": "heap"}).name
    'heap'
    >>> StateBackend.of({"name": "rocksdb", "incremental": True})
    StateBackend(name='rocksdb', incremental=True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from weir._internal import CheckpointConfig, TlsFiles
from weir.exceptions import InvalidArgumentError

__all__ = [
    "BackendName",
    "CheckpointConfig",
    "CheckpointingMode",
    "ExternalizedCleanup",
    "SnapshotCompression",
    "StateBackend",
    "TlsFiles",
]

CheckpointingMode: TypeAlias = Literal["exactly_once", "at_least_once"]
"""Exactly-once publishes sink output when a checkpoint completes; at-least-once at each epoch end."""

ExternalizedCleanup: TypeAlias = Literal["retain_on_cancellation", "delete_on_cancellation"]
"""What a cancelled job does with its checkpoints (they always survive failures and normal ends)."""

SnapshotCompression: TypeAlias = Literal["zstd", "lz4", "none"]
"""How canonical snapshot files (heap checkpoints, savepoints) compress their blocks."""

BackendName: TypeAlias = Literal["heap", "rocksdb"]
"""The keyed state backends."""

_BACKENDS: Final = ("heap", "rocksdb")


@dataclass(frozen=True)
class StateBackend:
    """Which keyed state backend holds the state: ``"heap"`` (memory) or ``"rocksdb"`` (disk).

    Accepted wherever a backend is configured as the object, its name, or a
    dict ``{"name": ..., "incremental": ...}``; see :meth:`of`.

    With ``incremental=True`` (RocksDB only, like Flink's
    ``execution.checkpointing.incremental``) a checkpoint stores RocksDB's own
    SST files and uploads only those the job's previous checkpoint did not
    already store, so its size follows the change, not the state. Its
    synchronous part only queues RocksDB's checkpoint. Savepoints are always
    written in the canonical format, which any backend restores; an
    incremental checkpoint restores into either backend too, at any
    parallelism.

    Raises:
        InvalidArgumentError: For an unknown backend name, or incremental
            checkpoints on the heap backend.
    """

    name: BackendName = "heap"
    incremental: bool = False

    def __post_init__(self) -> None:
        if self.name not in _BACKENDS:
            raise InvalidArgumentError(
                f'state backend {self.name!r} is unknown: use "heap" (state in memory) '
                f'or "rocksdb" (state on local disk)'
            )
        if not isinstance(self.incremental, bool):
            raise InvalidArgumentError(f"incremental must be True or False, got {self.incremental!r}")
        if self.incremental and self.name != "rocksdb":
            raise InvalidArgumentError(
                f"incremental checkpoints need the rocksdb backend, not {self.name!r}: "
                f'use StateBackend("rocksdb", incremental=True), or incremental=False'
            )

    @staticmethod
    def of(backend: StateBackend | str | Mapping[str, Any]) -> StateBackend:
        """A backend from its object, name or ``{"name": ..., "incremental": ...}`` dict.

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
            unknown = set(backend) - {"name", "incremental"}
            if unknown:
                raise InvalidArgumentError(
                    f"state backend options {sorted(unknown)} are unknown: "
                    "only 'name' and 'incremental' are accepted"
                )
            return StateBackend(backend.get("name", "heap"), backend.get("incremental", False))
        raise InvalidArgumentError(
            f"a state backend is a name ('heap' or 'rocksdb'), a dict or a StateBackend, got {backend!r}"
        )
