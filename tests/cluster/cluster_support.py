"""What the local-cluster tests share: an S3-compatible server and the ``weir`` CLI."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest


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
    """The ``weir`` binary ``make build`` leaves in the shared cargo target directory."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "weir" / "target"))
    binary = target / "release" / "weir"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: `make build` builds it")
    return binary
