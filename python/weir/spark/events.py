"""What the checkpoint coordinator tells the driver: one class per effect.

The classes are native (``weir._internal``), frozen and comparable, so the
pure driver (:mod:`weir.spark.driver`) matches on them and its unit tests
build them directly.

Examples:
    >>> from weir.spark.events import CheckpointCompleted
    >>> event = CheckpointCompleted(7, "checkpoint", 12, "file:///tmp/ckpt/job/chk-7")
    >>> event.id, event.kind, event.cut
    (7, 'checkpoint', 12)
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
    JobFailed,
    LeaseLost,
)

__all__ = [
    "BarrierInjected",
    "CheckpointAborted",
    "CheckpointCompleted",
    "CheckpointSubsumed",
    "CheckpointTriggered",
    "CleanupFailed",
    "CoordinatorEvent",
    "JobFailed",
    "LeaseLost",
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
"""Any event of :meth:`weir._internal.Coordinator.poll_events`."""
