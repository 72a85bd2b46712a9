"""What one epoch's tasks are told: the operator, the epoch, and any barrier.

An :class:`EpochTask` travels to the Python workers inside the ``mapInArrow``
closure of the epoch's Spark job, so every task of subtask ``s`` in epoch
``e`` learns, in-band and before its first record, which epochs are final,
whether a barrier precedes its records, and which checkpoint (if any) its
state must be restored from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from weir.checkpoint import RestoreTicket
    from weir.types import ValueType

KEY_GROUP = "__weir_key_group"
"""Internal column: the key group of the row's key, computed in the JVM."""
ROUTE = "__weir_route"
"""Internal column: the routing value of the row's subtask."""
MARKER = "__weir_marker"
"""Internal column: true on the one marker row each subtask gets per epoch."""
INTERNAL_COLUMNS = (KEY_GROUP, ROUTE, MARKER)


@dataclass(frozen=True)
class HostAddress:
    """How tasks reach (and if needed start) the executor's state host."""

    directory: str
    """The host's private (0700) directory holding its socket and lock."""
    token: str
    """The job token the host checks in the handshake."""
    idle_timeout_s: float
    """The host exits after this long without connections."""


@dataclass(frozen=True)
class Barrier:
    """Checkpoint ``checkpoint_id`` cuts after epoch ``cut``: snapshot before any record."""

    checkpoint_id: int
    cut: int
    storage: str
    """The job's checkpoint directory (URL) the snapshot is uploaded under."""
    storage_options: dict[str, str]
    """Options of that storage (S3 settings; ``put_delay_ms`` for a slow local store)."""
    ack_url: str
    """The coordinator's base URL; the host acks there with the job token."""


@dataclass(frozen=True)
class OperatorSpec:
    """The stateful operator, the same for every epoch of a run."""

    uid: str
    function: Any
    key_columns: tuple[str, ...]
    key_types: tuple[ValueType, ...] | None
    """The key columns' state types; ``None`` before the first data epoch."""
    value_columns: tuple[str, ...]
    output_schema: pa.Schema
    parallelism: int
    max_parallelism: int
    backend: str
    host: HostAddress
    restore: tuple[RestoreTicket, ...] | None
    """Each subtask's restore of the checkpoint or savepoint this generation's state starts from."""
    restored_checkpoint: int | None
    """Its checkpoint id: every task of the generation expects state that came from it."""
    restore_cut: int | None
    """Its cut epoch: only tasks that start right at it may (re)load it from storage,
    which retention may delete once newer checkpoints complete."""


@dataclass(frozen=True)
class EpochTask:
    """Everything a task of one epoch needs besides its rows."""

    operator: OperatorSpec
    epoch: int
    final_epoch: int | None
    """Every epoch up to this one succeeded: fold it into the base first."""
    barrier: Barrier | None
    notify_complete: int | None
    """The newest completed checkpoint the function has not yet been told of."""
    pending_checkpoint: int | None
    """A triggered checkpoint still waiting for its cut (this epoch may become it)."""
