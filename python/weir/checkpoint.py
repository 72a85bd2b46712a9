"""Completed checkpoints and savepoints as a driver reads them, and the restore of each subtask.

:func:`read_checkpoint` gives what a checkpoint's (or savepoint's) ``_metadata``
says: its id, kind, cut epoch, the sources' positions and sinks' handles
(whatever those plugins stored), and the operators with state.
:func:`restore_tickets` plans, once and on the driver, what each subtask of an
operator restores; a task hands its subtask's ticket to the state host, which
restores the state only if it does not hold it already. Tickets pickle, so
they travel inside the tasks Spark ships.

Examples:
    >>> from weir import KeyedProcessFunction, Types, ValueStateDescriptor
    >>> from weir.testing import KeyedOperatorHarness
    >>> class Count(KeyedProcessFunction):
    ...     def open(self, runtime_context):
    ...         self.n = runtime_context.get_state(ValueStateDescriptor("n", Types.LONG()))
    ...     def process_element(self, value, ctx):
    ...         self.n.update((self.n.value() or 0) + 1)
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, KeyedOperatorHarness(
    ...     Count(), key_selector=lambda v: v, uid="count", parallelism=2
    ... ) as h:
    ...     _ = h.process_elements(["a", "b"])
    ...     savepoint = h.snapshot(tmp)
    ...     checkpoint = read_checkpoint(savepoint)
    ...     tickets = restore_tickets(savepoint, "count", parallelism=3, max_parallelism=128)
    ...     (checkpoint.kind, checkpoint.checkpoint_id, checkpoint.operators, len(tickets or ()))
    ('savepoint', 1, [('count', 2, 128)], 3)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from weir import _internal
from weir._internal import RestoreTicket

__all__ = ["Checkpoint", "RestoreTicket", "check_restore", "read_checkpoint", "restore_tickets"]


class Checkpoint:
    """What a completed checkpoint or savepoint holds (read-only)."""

    __slots__ = ("_inner",)

    def __init__(self, inner: _internal.Checkpoint) -> None:
        self._inner = inner

    @property
    def checkpoint_id(self) -> int:
        """The checkpoint's id; a job restored from it goes on with the next ids."""
        return self._inner.checkpoint_id

    @property
    def kind(self) -> str:
        """``"checkpoint"`` or ``"savepoint"``."""
        return self._inner.kind

    @property
    def job_id(self) -> str:
        """The job whose state it is."""
        return self._inner.job_id

    @property
    def cut_epoch(self) -> int:
        """The last epoch whose effects the state includes."""
        return self._inner.cut_epoch

    @property
    def timestamp_millis(self) -> int:
        """When it was triggered, in Unix milliseconds."""
        return self._inner.timestamp_millis

    @property
    def sources(self) -> dict[str, Any]:
        """Each source's position after the cut, by source uid, as the source stored it."""
        return {uid: json.loads(text) for uid, text in self._inner.sources.items()}

    @property
    def sinks(self) -> dict[str, Any]:
        """Each sink's handle to its unpublished output, by sink uid, as the sink stored it."""
        return {uid: json.loads(text) for uid, text in self._inner.sinks.items()}

    @property
    def operators(self) -> list[tuple[str, int, int]]:
        """``(uid, parallelism, max_parallelism)`` of each operator with state."""
        return self._inner.operators

    def __repr__(self) -> str:
        return repr(self._inner)


def read_checkpoint(path: str, *, storage_options: Mapping[str, str] | None = None) -> Checkpoint:
    """The ``_metadata`` of the checkpoint or savepoint at ``path`` (a directory, or its ``_metadata``).

    ``storage_options`` configure remote storage (S3 endpoint, region,
    credentials); without them the usual ``AWS_*`` variables apply.

    Raises:
        CheckpointError: If nothing is stored there.
        SavepointFormatError: If the metadata is corrupt or of a newer format.
    """
    return Checkpoint(_internal.read_checkpoint(path, storage_options))


def check_restore(
    path: str,
    operators: Sequence[tuple[str, int, int]],
    *,
    allow_non_restored_state: bool,
    storage_options: Mapping[str, str] | None = None,
) -> list[str]:
    """Checks that a job of ``operators`` (``(uid, parallelism, max_parallelism)``) can restore ``path``.

    Returns:
        The uids of stored operators the job drops (only with ``allow_non_restored_state``).

    Raises:
        InvalidArgumentError: If the checkpoint holds state of an operator the job
            lacks (without ``allow_non_restored_state``) or max parallelism changed.
    """
    return _internal.check_restore(path, operators, allow_non_restored_state, storage_options)


def restore_tickets(
    path: str,
    uid: str,
    *,
    parallelism: int,
    max_parallelism: int,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[RestoreTicket, ...] | None:
    """What each subtask of operator ``uid`` at ``parallelism`` restores from ``path``, in subtask order.

    ``None`` when the checkpoint or savepoint holds no state of ``uid`` (the
    operator starts empty). Whether the job may restore ``path`` at all is
    checked separately, before any task starts.

    Raises:
        InvalidArgumentError: If ``max_parallelism`` differs from the stored one.
    """
    tickets = _internal.restore_tickets(path, uid, parallelism, max_parallelism, storage_options)
    return None if tickets is None else tuple(tickets)
