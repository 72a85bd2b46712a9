"""A job refuses a PySpark without ``DataFrame.repartitionById`` before it touches the session."""

from __future__ import annotations

from typing import Any

import pyspark
import pytest

from weir.exceptions import InvalidArgumentError
from weir.spark import StreamJob
from weir.spark.routing import check_pyspark


@pytest.mark.parametrize("version", ["4.0.1", "3.5.3", "4.0.0.dev1"])
def test_pyspark_before_4_1_is_refused(version: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"PySpark 4\.1 or later .*this is {version}"):
        check_pyspark(version)


@pytest.mark.parametrize("version", ["4.1.0", "4.3.0", "4.10.0.dev0", "5.0.0"])
def test_pyspark_4_1_and_later_is_accepted(version: str) -> None:
    check_pyspark(version)


def test_a_job_checks_the_installed_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pyspark, "__version__", "4.0.1")
    session: Any = None  # never reached: the check comes first
    with pytest.raises(InvalidArgumentError, match="this is 4.0.1"):
        StreamJob(session, name="old", checkpoint_dir="/nonexistent")
