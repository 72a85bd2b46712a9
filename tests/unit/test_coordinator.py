"""weir.coordinator: one run per job directory, typed events from trigger to completion, owner claims."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from weir import CheckpointConfig, TlsFiles
from weir.coordinator import (
    BarrierInjected,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointSubsumed,
    CheckpointTriggered,
    CleanupFailed,
    Coordinator,
    CoordinatorEvent,
    JobFailed,
    LeaseLost,
    claim_owner,
    latest_checkpoint,
)
from weir.exceptions import CheckpointError, InvalidArgumentError

TOKEN = "unit-test-token"
OPERATORS = [("avg", 2, 128)]
E = TypeVar("E")


def start(checkpoints: Path, **options: object) -> Coordinator:
    return Coordinator(
        str(checkpoints),
        "orders",
        TOKEN,
        OPERATORS,
        CheckpointConfig(interval_ms=20),
        **options,  # type: ignore[arg-type]
    )


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    with start(tmp_path / "ckpt", savepoint_dir=str(tmp_path / "sp")) as running:
        yield running


def next_event(coordinator: Coordinator, kind: type[E], accept: Callable[[E], bool] = lambda _: True) -> E:
    """The next event of class ``kind`` that ``accept`` takes; others are skipped."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for event in coordinator.poll_events(0.2):
            assert not isinstance(event, CleanupFailed), event
            if isinstance(event, kind) and accept(event):
                return event
    raise AssertionError(f"no {kind.__name__} arrived")


def ack_everything(coordinator: Coordinator, checkpoint_id: int) -> None:
    """Acks every subtask of ``checkpoint_id`` the way a state host does, with nothing stored."""
    for subtask in range(2):
        body = {
            "checkpoint_id": checkpoint_id,
            "uid": "avg",
            "subtask": subtask,
            "keyed": None,
            "operator_state": None,
            "metrics": {"sync_millis": 0, "async_millis": 0, "state_size_bytes": 0, "persisted_bytes": 0},
        }
        request = urllib.request.Request(
            f"{coordinator.address}/ack",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.load(response) == {"outcome": "accepted"}


def test_a_checkpoint_runs_from_trigger_to_completion_as_typed_events(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    coordinator.epoch_final(3, json.dumps({"src": {"offset": 300}}), "{}")  # the job runs: checkpoints start
    triggered = next_event(coordinator, CheckpointTriggered)
    assert triggered.kind == "checkpoint"
    coordinator.epoch_final(4, json.dumps({"src": {"offset": 400}}), "{}")
    barrier = next_event(coordinator, BarrierInjected, lambda e: e.id == triggered.id)
    assert (barrier.cut, barrier.storage) == (4, str(tmp_path / "ckpt" / "orders"))
    ack_everything(coordinator, triggered.id)
    done = next_event(coordinator, CheckpointCompleted)
    path = f"{tmp_path}/ckpt/orders/chk-{triggered.id}"
    assert done == CheckpointCompleted(triggered.id, "checkpoint", 4, path)
    assert coordinator.latest_completed() == triggered.id
    assert latest_checkpoint(str(tmp_path / "ckpt"), "orders") == done.path
    assert json.loads(coordinator.stats())["counts"]["completed"] == 1


def test_a_second_run_on_the_job_directory_fails_fast(tmp_path: Path) -> None:
    first = start(tmp_path)
    with pytest.raises(CheckpointError, match=r"is in use by run .* stop that run"):
        start(tmp_path)
    first.shutdown()
    first.shutdown()  # idempotent
    with pytest.raises(CheckpointError, match="shut down"):
        first.epoch_final(1, "{}", "{}")
    with start(tmp_path) as second:
        assert second.generation == 1


def test_a_savepoint_goes_into_a_fresh_directory_and_completes_there(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    savepoint = coordinator.trigger_savepoint()
    coordinator.epoch_final(1, "{}", "{}")
    coordinator.epoch_final(2, "{}", "{}")
    barrier = next_event(coordinator, BarrierInjected, lambda e: e.id == savepoint)
    assert barrier.kind == "savepoint"
    assert Path(barrier.storage).parent == tmp_path / "sp"
    assert Path(barrier.storage).name.startswith(f"savepoint-orders-{savepoint}-")
    ack_everything(coordinator, savepoint)
    done = next_event(coordinator, CheckpointCompleted, lambda e: e.id == savepoint)
    assert (done.kind, done.path) == ("savepoint", barrier.storage)
    assert (Path(done.path) / "_metadata").is_file()


def test_owner_claims_settle_on_the_first_host_until_a_restart(coordinator: Coordinator) -> None:
    url = coordinator.address
    assert claim_owner(url, TOKEN, 1, "avg", 0, "10.0.0.1:7000") == "10.0.0.1:7000"
    assert claim_owner(url, TOKEN, 1, "avg", 0, "10.0.0.2:7000") == "10.0.0.1:7000"
    assert coordinator.owners() == {("avg", 0): "10.0.0.1:7000"}
    with pytest.raises(CheckpointError, match="401"):
        claim_owner(url, "wrong-token", 1, "avg", 1, "10.0.0.2:7000")
    assert coordinator.restart(None) == coordinator.generation == 2
    assert coordinator.owners() == {}
    with pytest.raises(CheckpointError, match="generation 2"):
        claim_owner(url, TOKEN, 1, "avg", 0, "10.0.0.1:7000")


def test_the_server_binds_where_asked_and_advertises_a_reachable_address(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="advertise"):
        start(tmp_path / "a", bind="0.0.0.0")
    with start(tmp_path / "b", bind="0.0.0.0", advertise="127.0.0.1") as running:
        assert running.address.startswith("http://127.0.0.1:")
        # The advertised address reaches the server.
        assert claim_owner(running.address, TOKEN, 1, "avg", 1, "h:1") == "h:1"
    with start(tmp_path / "c") as running, pytest.raises(InvalidArgumentError, match="timeout_s"):
        running.poll_events(-1.0)


def test_with_tls_the_coordinator_serves_https_to_clients_that_trust_it(tmp_path: Path) -> None:
    certificates = Path(__file__).resolve().parents[1] / "tls"
    tls = TlsFiles(certificates / "ca.pem", certificates / "server.pem", certificates / "server-key.pem")
    with start(tmp_path, tls=tls) as running:
        assert running.address.startswith("https://127.0.0.1:")
        assert claim_owner(running.address, TOKEN, 1, "avg", 1, "h:1", tls=tls) == "h:1"
        with pytest.raises(CheckpointError, match="TLS files"):
            claim_owner(running.address, TOKEN, 1, "avg", 1, "h:2")
        plain = running.address.replace("https://", "http://", 1)
        with pytest.raises(CheckpointError, match="cannot reach"):
            claim_owner(plain, TOKEN, 1, "avg", 1, "h:2")
        assert running.owners() == {("avg", 1): "h:1"}
    with pytest.raises(InvalidArgumentError, match="CA certificates"):
        start(tmp_path / "b", tls=TlsFiles(tmp_path / "missing.pem", tls.cert, tls.key))


def test_events_are_values_a_driver_can_build_and_match() -> None:
    events: list[CoordinatorEvent] = [
        CheckpointTriggered(1, "checkpoint"),
        BarrierInjected(1, "checkpoint", 3, "/ckpt/orders"),
        CheckpointCompleted(1, "checkpoint", 3, "/ckpt/orders/chk-1"),
        CheckpointSubsumed([1, 2]),
        CheckpointAborted(2, "savepoint", "the job restarted"),
        JobFailed("not complete within the checkpoint timeout", 1, None),
        CleanupFailed("disk full"),
        LeaseLost("run b took it over"),
    ]
    assert events[3] == CheckpointSubsumed(ids=[1, 2]) != CheckpointSubsumed([1])
    assert repr(events[5]) == (
        "JobFailed(reason='not complete within the checkpoint timeout', "
        "consecutive_failures=1, latest_completed=None)"
    )
    match events[4]:
        case CheckpointAborted(id, kind, reason):
            assert (id, kind, reason) == (2, "savepoint", "the job restarted")
        case _:
            raise AssertionError("positional patterns match")
    with pytest.raises(AttributeError):
        events[0].id = 5  # type: ignore[misc]
