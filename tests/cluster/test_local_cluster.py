"""The keyed average (N = 200,000) on ``local-cluster[2,1,1024]``: two executor
JVMs with a state host each, tasks landing on either executor. Every run
publishes exactly the expected averages, once each, whatever fails.

The driver runs as a subprocess (``cluster_job.py``); the tests kill
executors, hosts and the driver from here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from cluster_support import Moto, moto_server, weir_cli  # noqa: F401 - moto_server is the fixture `moto`
from keyed_jobs import EXPECTED, KEYS, N, descendants, processes

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

JOB = Path(__file__).resolve().parent / "cluster_job.py"
RUN_LIMIT_S = 600
OUTLASTS_ITS_FIRST_CHECKPOINT = {"epochs_per_job": 1}
"""``start`` options for a run killed once a checkpoint completed: each of its ten epochs
its own Spark job, so epochs are left to run when the test, polling from outside, sees
the checkpoint (with jobs of four epochs a fast machine can finish the run first)."""


def start(tmp: Path, name: str, **config: object) -> subprocess.Popen[str]:
    """Starts the driver of job ``name`` (see ``cluster_job.main``) in its own process group."""
    settings = {
        "name": name,
        "checkpoint_dir": str(tmp / "ckpt"),
        "out": str(tmp / "out"),
        "trace": str(tmp / "trace"),
        "n": N,
        "keys": KEYS,
        "rows_per_epoch": 20_000,
        "parallelism": 4,
    }
    settings.update(config)
    run = f"{name}-{time.monotonic_ns()}"
    path = tmp / f"{run}.json"
    path.write_text(json.dumps(settings))
    # Files, not pipes: Spark's logs would fill a pipe nobody reads while the job runs.
    with (tmp / f"{run}.out").open("w") as out, (tmp / f"{run}.err").open("w") as err:
        return subprocess.Popen(
            [sys.executable, str(JOB), str(path)],
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )


def finish(driver: subprocess.Popen[str], during: Callable[[], None] | None = None) -> dict[str, int]:
    """Waits for the driver (calling ``during`` until it ends); its result."""
    deadline = time.monotonic() + RUN_LIMIT_S
    while driver.poll() is None and time.monotonic() < deadline:
        if during is not None:
            during()
        time.sleep(0.1)
    if driver.poll() is None:
        os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    config = Path(driver.args[-1])
    out, err = (config.with_suffix(suffix).read_text() for suffix in (".out", ".err"))
    assert driver.returncode == 0, err[-4000:]
    (line,) = [line for line in out.splitlines() if line.startswith("RESULT ")]
    result: dict[str, int] = json.loads(line.removeprefix("RESULT "))
    return result


def assert_exactly_once(out: Path) -> None:
    table = ds.dataset(str(out), format="parquet").to_table(columns=["key", "avg"])
    got = Counter(zip(table.column("key").to_pylist(), table.column("avg").to_pylist(), strict=True))
    assert sum(got.values()) == sum(EXPECTED.values()), "missing or duplicated averages"
    assert got == EXPECTED


def executors_by_subtask(trace: Path) -> dict[int, set[int]]:
    """Which executors (PySpark daemon pids) ran tasks of each subtask."""
    seen: dict[int, set[int]] = {}
    for line in trace.read_text().splitlines():
        subtask, executor = map(int, line.split())
        seen.setdefault(subtask, set()).add(executor)
    return seen


def checkpoint_completed(tmp: Path, name: str) -> bool:
    return any((p / "_metadata").exists() for p in (tmp / "ckpt" / name).glob("chk-*"))


def kill_once(
    condition: Callable[[], bool], targets: Callable[[], list[int]], killed: list[int]
) -> Callable[[], None]:
    """A ``during`` hook: once ``condition`` holds, SIGKILLs the first of ``targets``."""

    def step() -> None:
        if killed or not condition():
            return
        pids = targets()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    return step


def test_tasks_of_one_subtask_run_on_both_executors_over_tls(tmp_path: Path) -> None:
    certificates = Path(__file__).resolve().parents[1] / "tls"
    tls = {
        "ca": str(certificates / "ca.pem"),
        "cert": str(certificates / "server.pem"),
        "key": str(certificates / "server-key.pem"),
    }
    result = finish(start(tmp_path, "cluster-tls", tls=tls))
    assert result["restarts"] == 0
    assert_exactly_once(tmp_path / "out")
    seen = executors_by_subtask(tmp_path / "trace")
    assert len(set().union(*seen.values())) == 2, "both executors ran tasks"
    assert any(len(executors) == 2 for executors in seen.values()), (
        f"some subtask ran on both executors across epochs: {seen}"
    )
    # Tasks away from their subtask's owner read and wrote its state over TCP,
    # which a host with TLS serves over TLS only; acks reached the HTTPS coordinator.
    assert result["remote_state_bytes"] > 0
    assert any((tmp_path / "ckpt" / "cluster-tls").glob("chk-*/_metadata"))
    # Tasks took the barriers the HTTPS coordinator granted them between the epochs of their
    # Spark jobs, and the driver handed them to the owners' hosts over TLS after each job.
    assert result["task_barriers"] > 0
    assert result["driver_barriers"] > 0


def test_an_executor_killed_mid_run(tmp_path: Path) -> None:
    name = "cluster-executor-killed"
    driver = start(tmp_path, name, **OUTLASTS_ITS_FIRST_CHECKPOINT)
    killed: list[int] = []

    def executors() -> list[int]:
        return sorted(set(processes("CoarseGrainedExecutorBackend")) & descendants(driver.pid))

    result = finish(driver, kill_once(lambda: checkpoint_completed(tmp_path, name), executors, killed))
    assert killed, "an executor JVM was killed mid-run"
    assert result["restarts"] >= 1
    assert_exactly_once(tmp_path / "out")


def test_a_state_host_killed_mid_run(tmp_path: Path) -> None:
    name = "cluster-host-killed"
    driver = start(tmp_path, name, **OUTLASTS_ITS_FIRST_CHECKPOINT)
    killed: list[int] = []
    hosts = lambda: processes("weir-host", f"weir-{name}-")  # noqa: E731
    result = finish(driver, kill_once(lambda: checkpoint_completed(tmp_path, name), hosts, killed))
    assert killed, "a state host was killed mid-run"
    assert result["restarts"] >= 1
    assert_exactly_once(tmp_path / "out")


def test_s3_checkpoints_survive_a_killed_driver(tmp_path: Path, moto: Moto) -> None:
    name = "cluster-s3"
    settings = {
        "checkpoint_dir": "s3://weir/checkpoints",
        "storage_options": moto.storage_options(),
        "restore": "latest",
    }
    cli = [str(weir_cli()), "checkpoint", "list", f"s3://weir/checkpoints/{name}"]
    env = {**os.environ, **moto.environment()}

    def listed() -> str:
        run = subprocess.run(cli, capture_output=True, text=True, env=env, check=False)
        return run.stdout if run.returncode == 0 else ""

    first = start(tmp_path, name, **settings, **OUTLASTS_ITS_FIRST_CHECKPOINT)
    deadline = time.monotonic() + RUN_LIMIT_S
    while first.poll() is None and time.monotonic() < deadline and "completed" not in listed():
        time.sleep(0.5)
    assert first.poll() is None, "the first driver must still run when it is killed"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    finish(start(tmp_path, name, **settings))
    # Exact output proves the restore: a second run from scratch would publish
    # the first run's averages again.
    assert_exactly_once(tmp_path / "out")
    listing = listed()
    assert "completed (latest)" in listing, listing
