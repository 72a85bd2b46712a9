"""What one Spark job's tasks are told: the operator, the epochs, and any barrier.

An :class:`OperatorTask` travels to the Python workers inside the
``mapInArrow`` closure of its stateful step, so every task of subtask ``s``
of an operator learns, in-band and before its first record, which epochs it
runs (one, or several in a row), which epochs are final, whether a barrier
precedes its records, and which checkpoint (if any) its state must be
restored from. With several epochs, the task also learns at each epoch
boundary from the coordinator which barriers to take there
(:class:`InJobBarriers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from weir.checkpoint import RestoreTicket
    from weir.config import SnapshotCompression, TlsFiles
    from weir.types import ValueType

EPOCH = "__weir_epoch"
"""Internal column: the place of each row's epoch among the epochs of its Spark job (0 for the
first), when the job runs several."""

KEY_GROUP = "__weir_key_group"
"""Internal column: the key group of the row's key, computed in the JVM; only for key
types whose hash the task cannot reproduce (see :func:`weir.spark.routing.hashed_in_task`)."""


@dataclass(frozen=True)
class HostAccess:
    """How tasks reach (and if needed start) the state hosts of this run."""

    directory: str
    """The run's private (0700) host directory; each executor's host lives in its own subdirectory."""
    token: str
    """The job token every host and the coordinator check before anything else."""
    generation: int
    """The job's generation (a restore starts a new one); hosts drop older generations' state."""
    registry_url: str
    """The coordinator's base URL, where a task claims its subtask for its executor's host."""
    tcp: bool
    """Whether hosts also listen on TCP at their executor's address (any master but ``local``)."""
    tls: TlsFiles | None = None
    """The job's TLS files: hosts serve TCP over TLS, the coordinator HTTPS."""

    def __repr__(self) -> str:
        # The token is a secret: never in logs, tracebacks or Spark's UI.
        return (
            f"HostAccess(directory={self.directory!r}, token=<hidden>, generation={self.generation}, "
            f"registry_url={self.registry_url!r}, tcp={self.tcp}, tls={self.tls!r})"
        )


@dataclass(frozen=True)
class Barrier:
    """Checkpoint ``checkpoint_id`` cuts after epoch ``cut``: snapshot before any record."""

    checkpoint_id: int
    cut: int
    storage: str
    """Where subtasks upload the snapshot (the job directory, or a fresh savepoint directory)."""
    storage_options: dict[str, str]
    """Options of that storage (S3 settings; ``put_delay_ms`` for a slow local store)."""
    ack_url: str
    """The coordinator's base URL; the host acks there with the job token."""
    incremental: bool = False
    """Store RocksDB's own files, uploading only those ``base`` did not store (never for savepoints)."""
    base: int | None = None
    """The newest checkpoint of the run, whose stored files an incremental checkpoint references."""
    compression: SnapshotCompression = "zstd"
    """How a canonical keyed file compresses its blocks (the job's ``snapshot_compression``)."""


@dataclass(frozen=True)
class InJobBarriers:
    """How tasks take the barriers the coordinator grants at epoch boundaries inside their
    Spark job: they report each boundary (``registry_url``) and take what they are given,
    with these settings (the job's, as :class:`Barrier` has them)."""

    storage_options: dict[str, str]
    incremental: bool
    """RocksDB checkpoints store RocksDB's own files (never savepoints)."""
    compression: SnapshotCompression

    def barrier(self, granted: tuple[int, str, int, str, int | None], ack_url: str) -> Barrier:
        """The barrier of a grant ``(checkpoint id, kind, cut, storage, incremental base)``."""
        checkpoint_id, kind, cut, storage, base = granted
        return Barrier(
            checkpoint_id,
            cut,
            storage,
            self.storage_options,
            ack_url,
            incremental=self.incremental and kind == "checkpoint",
            base=base,
            compression=self.compression,
        )


@dataclass(frozen=True)
class OperatorSpec:
    """A stateful operator, the same for every epoch of a run."""

    uid: str
    function: Any
    key_columns: tuple[str, ...] | None
    """``None`` for a non-keyed operator."""
    key_types: tuple[ValueType, ...] | None
    """The key columns' state types; ``None`` before the first data epoch (or non-keyed)."""
    value_columns: tuple[str, ...]
    """The input columns handed to the function, in order."""
    key_groups_shipped: bool
    """Whether the rows carry their key groups in :data:`KEY_GROUP` (else the task's state
    session computes them from the keys, with Spark's hash)."""
    output_schema: pa.Schema
    parallelism: int
    max_parallelism: int
    backend: str


@dataclass(frozen=True)
class OperatorTask:
    """Everything a task of one operator in one Spark job needs besides its rows."""

    operator: OperatorSpec
    epochs: tuple[int, ...]
    """The epochs the task runs, in order: consecutive numbers, one or more."""
    generation: int
    final_epoch: int | None
    """Every epoch up to this one succeeded: fold it into the base first."""
    barrier: Barrier | None
    notify_complete: int | None
    """The newest completed checkpoint the function has not yet been told of."""
    pending_checkpoint: int | None
    """A triggered checkpoint still waiting for its cut (this epoch may become it)."""
    restored_checkpoint: int | None
    """The checkpoint this generation's state of the operator came from (``None``: empty)."""
    restore_tickets: tuple[RestoreTicket, ...] | None
    """Per subtask, what to load from storage; only for tasks starting at the restored cut."""
    hosts: HostAccess
    owners: dict[int, str]
    """The address of each subtask's owning host known so far in this generation."""
    in_job_barriers: InJobBarriers | None = None
    """Set when the task reports its epoch boundaries to the coordinator and takes the barriers
    granted there; otherwise barriers reach it only from the driver, between Spark jobs."""
