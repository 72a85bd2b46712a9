"""The checkpoint coordinator of a job run, its typed events, and the calls around it.

The Spark driver runs one :class:`Coordinator` per job run. It owns the job's
checkpoint directory while it runs (a second run on the same directory fails
fast with :class:`~weir.exceptions.CheckpointError`), triggers checkpoints,
takes the state hosts' acks and owner claims over HTTP (job token first), and
reports everything the driver must act on as one frozen event class per
effect, returned by :meth:`Coordinator.poll_events`:

- :class:`CheckpointTriggered`: a checkpoint or savepoint needs a cut; run a
  barrier-only epoch if no data epoch follows.
- :class:`BarrierInjected`: send the barrier with the next task of every
  stateful subtask; they upload under ``storage``.
- :class:`CheckpointCompleted`: complete at ``path``; on a checkpoint, sinks
  publish output up to ``cut``.
- :class:`CheckpointSubsumed`: these checkpoints are deleted; never restore
  from them.
- :class:`CheckpointAborted`: will never complete; cancel its uploads.
- :class:`JobFailed`: too many checkpoint failures; restart the job.
- :class:`CleanupFailed`: old files stay until the next run; report it.
- :class:`LeaseLost`: another run took the directory over; fail the job.

A run follows one lineage: failover (:meth:`Coordinator.restart`) and
:func:`latest_checkpoint` resume from the newest checkpoint of the lineage the
run restored from, never from checkpoints of an abandoned timeline (those are
deleted once the lineage completes a checkpoint of its own), and retention
never deletes what a run restores from. Checkpoint ids never repeat in a job
directory. Statistics stay JSON (:meth:`Coordinator.stats`): the document the
HTTP endpoint serves, an export like Flink's checkpoint statistics.

Events compare by value and can be built by hand, so a driver can be tested
without a coordinator:

Examples:
    >>> from weir.coordinator import CheckpointCompleted, CheckpointTriggered
    >>> event = CheckpointCompleted(7, "checkpoint", 41, "/ckpt/orders/chk-7")
    >>> event == CheckpointCompleted(id=7, kind="checkpoint", cut=41, path="/ckpt/orders/chk-7")
    True
    >>> event
    CheckpointCompleted(id=7, kind='checkpoint', cut=41, path='/ckpt/orders/chk-7')
    >>> match CheckpointTriggered(8, "savepoint"):
    ...     case CheckpointTriggered(id, "savepoint"):
    ...         print(f"savepoint {id} wants a cut")
    savepoint 8 wants a cut
"""

from __future__ import annotations

from typing import TypeAlias

from weir._internal import (
    BarrierInjected,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointSubsumed,
    CheckpointTriggered,
    CleanupFailed,
    Coordinator,
    JobFailed,
    LeaseLost,
    claim_owner,
    latest_checkpoint,
)

__all__ = [
    "BarrierInjected",
    "CheckpointAborted",
    "CheckpointCompleted",
    "CheckpointSubsumed",
    "CheckpointTriggered",
    "CleanupFailed",
    "Coordinator",
    "CoordinatorEvent",
    "JobFailed",
    "LeaseLost",
    "claim_owner",
    "latest_checkpoint",
]

CoordinatorEvent: TypeAlias = (
    CheckpointTriggered
    | BarrierInjected
    | CheckpointCompleted
    | CheckpointSubsumed
    | CheckpointAborted
    | JobFailed
    | CleanupFailed
    | LeaseLost
)
"""Every event :meth:`Coordinator.poll_events` returns."""
