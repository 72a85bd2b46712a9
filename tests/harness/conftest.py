"""Fixtures of the harness tests: both keyed state backends, and the example functions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    # The examples are scripts, not a package: tests import them by module name.
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture(params=["heap", "rocksdb"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each test runs on the heap and on the RocksDB backend."""
    return str(request.param)
