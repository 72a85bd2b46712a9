"""Tests on Spark's ``local-cluster`` master: several executor JVMs on this
machine, each with its own state host, as separate machines would have.

Each test runs its job's driver as a subprocess (``cluster_job.py``), so this
directory never starts a Spark session of its own and may run beside the
local-mode tests. ``make test-cluster`` runs them; ``make test`` includes them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for entry in (HERE, HERE.parents[1] / "examples", HERE.parent / "spark"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from cluster_support import Moto  # noqa: E402


@pytest.fixture
def moto() -> Iterator[Moto]:
    binary = Path(sys.executable).with_name("moto_server")
    if not binary.exists():
        pytest.fail(f"{binary} is missing: `make venv` installs moto[server]")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/weir", method="PUT")) as reply:
            assert reply.status == 200
        yield Moto(endpoint)
    finally:
        server.terminate()
        server.wait()
