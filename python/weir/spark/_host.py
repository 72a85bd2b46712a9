"""How a task reaches its subtask's state on the executor's state host."""

from __future__ import annotations

import os
from pathlib import Path

from weir import _internal
from weir.host import command
from weir.key_groups import key_group_range as _key_group_range
from weir.spark.tasks import OperatorTask

HOST_IDLE_TIMEOUT_S = 120.0


def _owner_pid() -> int:
    """The Spark executor (JVM) process: the host must not outlive it.

    Python workers are forked by PySpark's daemon, itself a child of the
    executor; a worker without a daemon is the executor's child directly.
    """
    parent = os.getppid()
    try:
        stat = Path(f"/proc/{parent}/stat").read_text()
        command_line = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return parent
    if b"pyspark.daemon" in command_line:
        return int(stat.rsplit(")", 1)[1].split()[1])
    return parent


def open_session(task: OperatorTask, partition: int) -> _internal.Session:
    """Attaches to subtask ``partition``'s state, restoring it first if this
    generation starts from a checkpoint and the host does not hold it yet."""
    op = task.operator
    # Only a task starting right at the restored cut gets a ticket to load the
    # state from storage; later tasks expect the host to hold it (else StateLostError).
    restore = task.restore_tickets[partition] if task.restore_tickets is not None else None
    return _internal.connect_host(
        os.path.join(task.hosts.directory, f"gen-{task.generation}"),
        task.hosts.token,
        uid=op.uid,
        subtask=partition,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        backend=op.backend,
        key_types=op.key_types,
        expect_restored_from=task.restored_checkpoint,
        expect_final_epoch=task.final_epoch,
        restore=restore,
        host_command=command(),
        idle_timeout_s=HOST_IDLE_TIMEOUT_S,
        owner_pid=_owner_pid(),
    )


def take_barrier(session: _internal.Session, task: OperatorTask) -> int:
    """The barrier's synchronous part; returns its duration in microseconds."""
    barrier = task.barrier
    assert barrier is not None
    return int(
        _internal.take_barrier(
            session,
            barrier.checkpoint_id,
            barrier.cut,
            barrier.storage,
            barrier.storage_options,
            barrier.ack_url,
            task.hosts.token,
        )
    )


def key_group_range(max_parallelism: int, parallelism: int, subtask: int) -> tuple[int, int]:
    """The key groups ``[start, end)`` of a subtask."""
    r = _key_group_range(max_parallelism, parallelism, subtask)
    return r.start, r.end
