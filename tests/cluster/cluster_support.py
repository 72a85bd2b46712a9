"""What the local-cluster tests share: the paths they import from, an
S3-compatible server (the ``moto`` fixture) and the ``weir`` CLI.

The tests run on Spark's ``local-cluster`` master: several executor JVMs on
this machine, each with its own state host, as separate machines would have.
Each test runs its job's driver as a subprocess (``cluster_job.py``), so this
directory never starts a Spark session of its own and may run beside the
local-mode tests (``make test-cluster`` runs only these).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# The example functions and the Spark tests' keyed-average expectation.
for entry in (HERE.parents[1] / "examples", HERE.parent / "spark"):
    if str(entry) not in sys.path:
        sys.path.append(str(entry))


@dataclass(frozen=True)
class Moto:
    """An S3-compatible server (moto) on loopback, with one bucket ``weir``."""

    endpoint: str

    def storage_options(self) -> dict[str, str]:
        return {
            "endpoint": self.endpoint,
            "region": "us-east-1",
            "access_key_id": "test",
            "secret_access_key": "test",
            "allow_http": "true",
        }

    def environment(self) -> dict[str, str]:
        """The same settings as the ``AWS_*`` variables the ``weir`` CLI reads."""
        return {
            "AWS_ENDPOINT": self.endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_ALLOW_HTTP": "true",
        }


def weir_cli() -> Path:
    """The ``weir`` command the package installed next to this interpreter."""
    return Path(sys.executable).with_name("weir")


@pytest.fixture(name="moto")
def moto_server() -> Iterator[Moto]:
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
