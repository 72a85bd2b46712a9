"""How a task reaches its subtask's state: on the state host that owns it.

Every executor runs one state host for the job, in its own directory under the
run's host directory, which the host removes when it leaves for good (the last
one shut down at the end of the job removes the run's directory). The first
task of subtask ``s`` in a generation (after a start or a restore) attaches on
its executor's host and claims ``s`` for that host at the coordinator; the
claim that arrives first wins, and the driver ships the winner's address with
every later task of ``s``. A task that lands on another executor reaches the
owner over TCP with the same batched protocol; one on the owner's executor
uses its Unix socket.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from weir import _internal
from weir.exceptions import StateLostError
from weir.host import command
from weir.key_groups import key_group_range as _key_group_range
from weir.spark.tasks import Barrier, HostAccess, OperatorTask


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


def executor_address(coordinator_url: str) -> str:
    """The address this executor is reached at: Spark's ``SPARK_LOCAL_IP`` if
    set (what Spark itself binds to), else the address of the interface that
    routes to the driver's coordinator, which other executors reach the driver
    through too. (A host name may resolve to a loopback address, as Debian's
    ``/etc/hosts`` makes it, which no other machine reaches.)"""
    configured = os.environ.get("SPARK_LOCAL_IP")
    if configured:
        return configured
    target = urlsplit(coordinator_url)
    family = socket.AF_INET6 if target.hostname and ":" in target.hostname else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        # Connecting a UDP socket sends nothing: it only picks the route.
        probe.connect((target.hostname or "127.0.0.1", target.port or 80))
        return str(probe.getsockname()[0])


REMOVE_RUN_DIRECTORY = True
"""A host shut down at the end of the job removes the run's directory of host directories if it
is then empty: on a machine without the driver nothing else would."""


def executor_directory(task: OperatorTask) -> str:
    """This executor's host directory: one per executor JVM, so that executors
    sharing a machine still get a host each."""
    return _host_directory(task.hosts, _owner_pid())


def _host_directory(hosts: HostAccess, executor_pid: int) -> str:
    return os.path.join(hosts.directory, f"{socket.gethostname()}-{executor_pid}")


def start_executor_host(hosts: HostAccess, executor_pid: int) -> str:
    """Starts the state host of the executor JVM ``executor_pid`` on this machine, if none
    serves it yet, as its first task would; returns the host's address. For Spark's local
    mode, where the driver's JVM is the executor: the first epoch's tasks then find it up."""
    return _internal.start_host(
        _host_directory(hosts, executor_pid),
        hosts.token,
        host_command=command(),
        remove_empty_parent=REMOVE_RUN_DIRECTORY,
        owner_pid=executor_pid,
        tls=hosts.tls,
    )


def open_session(task: OperatorTask, partition: int) -> _internal.Session:
    """Attaches to subtask ``partition``'s state on its owner, claiming the
    subtask for this executor's host if it has no owner yet in this generation."""
    owner = task.owners.get(partition)
    session = _connect(task, partition, owner)
    if owner is not None:
        return session
    local = _internal.host_address(session) or os.path.join(executor_directory(task), "host.sock")
    hosts = task.hosts
    winner = _internal.claim_owner(
        hosts.registry_url, hosts.token, hosts.generation, task.operator.uid, partition, local, tls=hosts.tls
    )
    if winner == local:
        return session
    # Another attempt of this subtask claimed it first (a speculative or
    # retried task elsewhere): its host holds the state. Dropping the session
    # detaches from this host, whose copy goes with the next generation.
    del session
    return _connect(task, partition, winner)


def deliver_barrier(task: OperatorTask, partition: int) -> int:
    """From the driver, between epochs: attaches to subtask ``partition`` on its owner (never
    starting a host) and takes the task's barrier there; returns the synchronous part's duration
    in microseconds. Fails with ``StateLostError`` when the subtask has no owner or the owner
    does not hold its state."""
    owner = task.owners.get(partition)
    if owner is None:
        raise StateLostError(
            f"subtask {partition} of {task.operator.uid} has no state host in generation "
            f"{task.hosts.generation} yet"
        )
    assert task.barrier is not None, "a barrier to deliver"
    return take_barrier(_connect(task, partition, owner, start_host=False), task.barrier, task.hosts.token)


def _connect(
    task: OperatorTask, partition: int, owner: str | None, *, start_host: bool = True
) -> _internal.Session:
    op = task.operator
    # Only a task starting right at the restored cut gets a ticket to load the
    # state from storage; later tasks expect the owner to hold it (else StateLostError).
    restore = task.restore_tickets[partition] if task.restore_tickets is not None else None
    return _internal.connect_host(
        executor_directory(task),
        task.hosts.token,
        uid=op.uid,
        subtask=partition,
        parallelism=op.parallelism,
        max_parallelism=op.max_parallelism,
        backend=op.backend,
        key_types=op.key_types,
        generation=task.hosts.generation,
        expect_restored_from=task.restored_checkpoint,
        expect_final_epoch=task.final_epoch,
        restore=restore,
        host_command=command(),
        owner_pid=_owner_pid(),
        listen=_listen_address(task.hosts.registry_url) if task.hosts.tcp else None,
        owner_address=owner,
        tls=task.hosts.tls,
        start_host=start_host,
        remove_empty_parent=REMOVE_RUN_DIRECTORY,
    )


def _listen_address(coordinator_url: str) -> str:
    address = executor_address(coordinator_url)
    return f"[{address}]:0" if ":" in address else f"{address}:0"


def take_barrier(session: _internal.Session, barrier: Barrier, token: str) -> int:
    """The barrier's synchronous part; returns its duration in microseconds."""
    return int(
        _internal.take_barrier(
            session,
            barrier.checkpoint_id,
            barrier.cut,
            barrier.storage,
            barrier.storage_options,
            barrier.ack_url,
            token,
            incremental=barrier.incremental,
            base=barrier.base,
            compression=barrier.compression,
        )
    )


def report_progress(
    task: OperatorTask, partition: int, done: int | None, next_epoch: int | None
) -> list[Barrier]:
    """Tells the coordinator that subtask ``partition`` processed every epoch up to ``done``
    and begins ``next_epoch`` (``None``: its task ends); returns the barriers to take first."""
    settings = task.in_job_barriers
    assert settings is not None, "only tasks that take barriers inside their job report progress"
    hosts = task.hosts
    granted = _internal.report_progress(
        hosts.registry_url,
        hosts.token,
        hosts.generation,
        task.operator.uid,
        partition,
        done,
        next_epoch,
        tls=hosts.tls,
    )
    return [settings.barrier(grant, hosts.registry_url) for grant in granted]


def key_group_range(max_parallelism: int, parallelism: int, subtask: int) -> tuple[int, int]:
    """The key groups ``[start, end)`` of a subtask."""
    r = _key_group_range(max_parallelism, parallelism, subtask)
    return r.start, r.end
