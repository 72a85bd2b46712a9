"""Keyed state through a real state host process: the same runner, on a host session.

Two tasks of one subtask, each its own connection (as two Spark tasks on
possibly different Python workers): the second sees the first one's state.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_state_types import RECORDS, EveryState, check_outputs
from test_vectorized import MORE, ROWS, RunningStats, batch, expected, outputs

import weir.host
from weir import KeyedProcessFunction, RuntimeContext, TlsFiles, Types, ValueStateDescriptor, _internal
from weir.exceptions import StateError, StateLostError, WeirError
from weir.runtime import OperatorRunner
from weir.types import ValueType, value_type


def host_binary() -> Path:
    """The ``weir-host`` command the package installed next to this interpreter."""
    return Path(sys.executable).with_name("weir-host")


@pytest.fixture
def host_dir() -> Iterator[str]:
    """A short directory for the host's Unix socket (socket paths are limited to ~100 bytes).

    Hosts live as long as their owner (this test process), so each test's host
    is shut down when the test ends.
    """
    with tempfile.TemporaryDirectory(prefix="wh-") as directory:
        yield directory
        for host in Host.started.pop(directory, []):
            weir.host.shutdown(str(Path(directory) / "host.sock"), host.token)


class Host:
    """Connects tasks of one operator to one state host."""

    started: dict[str, list[Host]] = {}
    """The hosts of each test directory, shut down by the ``host_dir`` fixture."""

    def __init__(
        self,
        directory: str,
        backend: str,
        key_type: pa.DataType,
        listen: str | None = None,
        tls: TlsFiles | None = None,
        binary: Path | None = None,
    ) -> None:
        self.binary = binary or host_binary()
        self.directory = directory
        self.backend = backend
        self.key_types: list[ValueType] = [value_type(key_type)]
        self.token = secrets.token_hex(16)
        self.listen = listen
        self.tls = tls
        Host.started.setdefault(directory, []).append(self)

    def session(
        self,
        final_epoch: int | None,
        subtask: int = 0,
        parallelism: int = 1,
        owner_address: str | None = None,
    ) -> Any:
        return _internal.connect_host(
            self.directory,
            self.token,
            uid="host-op",
            subtask=subtask,
            parallelism=parallelism,
            max_parallelism=128,
            backend=self.backend,
            key_types=self.key_types,
            generation=0,
            expect_restored_from=None,
            expect_final_epoch=final_epoch,
            restore=None,
            host_command=str(self.binary),
            owner_pid=os.getpid(),
            listen=self.listen,
            owner_address=owner_address,
            tls=self.tls,
        )


def run_task(session: Any, function: Any, epoch: int, work: Any) -> Any:
    """One Spark-like task: begin, open, work, close, commit."""
    runner = OperatorRunner(function, session, restored=epoch > 1)
    session.begin(epoch, 0, epoch - 1 if epoch > 1 else None)
    runner.open()
    result = work(runner)
    runner.close()
    session.commit(epoch, 0)
    return result


def test_every_state_kind_through_a_host(backend: str, host_dir: str) -> None:
    host = Host(host_dir, backend, pa.string())
    first, second = RECORDS[:5], RECORDS[5:]
    out1 = run_task(host.session(None), EveryState(), 1, lambda r: r.process(first, [k for k, _ in first]))
    check_outputs(out1, first, {})
    out2 = run_task(host.session(1), EveryState(), 2, lambda r: r.process(second, [k for k, _ in second]))
    check_outputs(out2, second, {"a": [1, 3, 5], "b": [2], "c": [4]})
    reader = host.session(2)
    state = run_task(reader, EveryState(), 3, lambda r: r.read_keyed_state("history", "a"))
    assert state == [1, 3, 5, 8]


def test_vectorized_function_through_a_host(backend: str, host_dir: str) -> None:
    host = Host(host_dir, backend, pa.string())

    def work(rows: list[Any]) -> Any:
        def run(runner: OperatorRunner) -> Any:
            data = batch(rows)
            return runner.process_arrow(data, data.column("user"))

        return run

    first = run_task(host.session(None), RunningStats(), 1, work(ROWS))
    assert outputs([first]) == expected([ROWS])
    second = run_task(host.session(1), RunningStats(), 2, work(MORE))
    assert outputs([second]) == expected([ROWS, MORE])[len(ROWS) :]
    assert isinstance(second, pa.RecordBatch)


def test_keys_must_match_the_attached_key_types(host_dir: str) -> None:
    host = Host(host_dir, "heap", pa.int32())
    session = host.session(None)

    def work(runner: OperatorRunner) -> Any:
        # Python ints fit an int32 key column; strings do not.
        assert runner.process([("a", 1)], [7]) is not None
        with pytest.raises(StateError, match="keys are int32"):
            runner.process([("a", 1)], ["seven"])

    run_task(session, EveryState(), 1, work)


def test_a_host_killed_mid_batch_raises_state_lost(host_dir: str) -> None:
    host = Host(host_dir, "heap", pa.int64())
    session = host.session(None)
    pid = json.loads(_internal.host_status(session))["pid"]
    runner = OperatorRunner(Counter(), session, restored=False)
    session.begin(1, 0, None)
    runner.open()
    keys = list(range(200_000))
    killer = threading.Timer(0.2, os.kill, (pid, signal.SIGKILL))
    killer.start()
    try:
        with pytest.raises(StateLostError):
            # Batches keep the host busy until it is killed under one of them.
            for _ in range(10_000):
                runner.process([(k, 1) for k in keys], keys)
        with pytest.raises(StateLostError):
            session.commit(1, 0)
    finally:
        killer.cancel()
    # A task that expects the state of epoch 1 cannot get it from a new host.
    with pytest.raises(StateLostError, match="holds no state"):
        host.session(1)


class Counter(KeyedProcessFunction):
    """Counts records per key."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterator[Any]:
        self.count.update((self.count.value() or 0) + value[1])
        return iter(())


def run_count(session: Any, epoch: int, records: list[tuple[int, int]]) -> None:
    run_task(session, Counter(), epoch, lambda r: r.process(records, [k for k, _ in records]))


def count_of(session: Any, epoch: int, key: int) -> Any:
    return run_task(session, Counter(), epoch, lambda r: r.read_keyed_state("count", key))


def test_a_task_on_another_executor_uses_the_owner_over_tcp(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Two executors: each has its own host directory; the host of the first owns the subtask.
    first = Host(str(tmp_path_factory.mktemp("wh")), "heap", pa.int64(), listen="127.0.0.1:0")
    owner_session = first.session(None)
    run_count(owner_session, 1, [(1, 2), (2, 3), (1, 4)])
    owner = _internal.host_address(owner_session)
    assert owner is not None and owner.startswith("127.0.0.1:")
    assert (Path(first.directory) / "address").read_text() == owner
    second_dir = str(tmp_path_factory.mktemp("wh"))
    second = Host(second_dir, "heap", pa.int64(), listen="127.0.0.1:0")
    second.token = first.token
    remote = second.session(1, owner_address=owner)
    assert _internal.host_address(remote) == owner
    assert count_of(remote, 2, 1) == 6
    # The owner was only connected to: the second executor started no host.
    assert not (Path(second_dir) / "host.sock").exists()
    # The owner's own executor reaches it over its Unix socket, even when told its TCP address.
    assert count_of(first.session(2, owner_address=owner), 3, 2) == 3
    assert weir.host.shutdown(owner, first.token)
    Host.started[first.directory].clear()


def job_tls(ca: str = "ca.pem") -> TlsFiles:
    """The repository's test certificates (``tests/tls``), trusting ``ca``."""
    certificates = Path(__file__).resolve().parents[1] / "tls"
    return TlsFiles(certificates / ca, certificates / "server.pem", certificates / "server-key.pem")


def test_with_tls_the_owner_is_reached_over_tls_only(tmp_path_factory: pytest.TempPathFactory) -> None:
    tls = job_tls()
    first = Host(str(tmp_path_factory.mktemp("wh")), "heap", pa.int64(), listen="127.0.0.1:0", tls=tls)
    run_count(first.session(None), 1, [(1, 2), (2, 3), (1, 4)])
    owner = (Path(first.directory) / "address").read_text()
    second = Host(str(tmp_path_factory.mktemp("wh")), "heap", pa.int64(), listen="127.0.0.1:0", tls=tls)
    second.token = first.token
    assert count_of(second.session(1, owner_address=owner), 2, 1) == 6
    # A client without TLS, or trusting another authority, does not get in.
    for other in (None, job_tls("other-ca.pem")):
        stranger = Host(str(tmp_path_factory.mktemp("wh")), "heap", pa.int64(), tls=other)
        stranger.token = first.token
        with pytest.raises(WeirError):
            stranger.session(2, owner_address=owner)
    with pytest.raises(WeirError):
        weir.host.status(owner, first.token)
    # The driver's control requests go over TLS too; the state is untouched.
    assert len(weir.host.status(owner, first.token, tls=tls)["subtasks"]) == 1
    assert weir.host.shutdown(owner, first.token, tls=tls)
    Host.started[first.directory].clear()


def test_an_unreachable_owner_is_state_lost(host_dir: str) -> None:
    host = Host(host_dir, "heap", pa.int64())
    with pytest.raises(StateLostError, match="unreachable"):
        host.session(1, owner_address="127.0.0.1:1")


def test_the_driver_controls_a_host_by_address(host_dir: str) -> None:
    host = Host(host_dir, "heap", pa.int64(), listen="127.0.0.1:0")
    run_count(host.session(None), 1, [(1, 1)])
    address = (Path(host_dir) / "address").read_text()
    status = weir.host.status(address, host.token)
    assert (status["tcp_address"], status["generation"], len(status["subtasks"])) == (address, 0, 1)
    assert host.token not in repr(status)
    with pytest.raises(WeirError, match="wrong job token"):
        weir.host.status(address, "not-the-token")
    assert weir.host.abort_checkpoint(address, host.token, 7) == 0
    # A new generation drops the old one's state and refuses its tasks.
    weir.host.start_generation(address, host.token, 1)
    assert weir.host.status(address, host.token)["subtasks"] == []
    with pytest.raises(StateLostError, match="generation"):
        host.session(None)
    pid = weir.host.status(address, host.token)["pid"]
    assert weir.host.shutdown(address, host.token)
    assert not weir.host.shutdown(address, host.token), "nobody answers any more"
    assert _exits(pid)
    assert not (Path(host_dir) / "host.sock").exists()
    assert not (Path(host_dir) / "address").exists()
    Host.started[host_dir].clear()


def test_tasks_start_the_packages_native_host(host_dir: str) -> None:
    # `make build` puts the native binary in the package, and tasks start it rather than the
    # launcher (which the tests above start): the same server, without an interpreter first.
    assert weir.host.command() == str(weir.host.NATIVE_HOST), "no native weir-host in the package: make build"
    host = Host(host_dir, "heap", pa.int64(), binary=weir.host.NATIVE_HOST)
    run_count(host.session(None), 1, [(1, 2), (1, 3)])
    assert count_of(host.session(1), 2, 1) == 5
    pid = weir.host.status(str(Path(host_dir) / "host.sock"), host.token)["pid"]
    assert Path(f"/proc/{pid}/exe").resolve() == weir.host.NATIVE_HOST.resolve()


def test_without_a_native_host_tasks_start_the_launcher(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A package built without `make` (pip install from source) has no native binary.
    monkeypatch.setattr(weir.host, "NATIVE_HOST", tmp_path / "bin" / "weir-host")
    assert weir.host.command() == str(host_binary())


def _exits(pid: int, limit_s: float = 30.0) -> bool:
    """Whether process ``pid`` exits (or only waits to be reaped) within ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.02)
    return False
