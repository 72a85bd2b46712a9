"""weir.CheckpointConfig follows Flink's defaults and validation; backends are chosen by name."""

from __future__ import annotations

from typing import Any

import pytest

from weir import CheckpointConfig, StateBackend
from weir.exceptions import InvalidArgumentError


def test_defaults_are_flinks() -> None:
    config = CheckpointConfig(interval_ms=60_000)
    assert config.coordinator_options() == {
        "interval_ms": 60_000,
        "mode": "exactly_once",
        "timeout_ms": 600_000,
        "min_pause_ms": 0,
        "max_concurrent": 1,
        "tolerable_failures": 0,
        "retained": 1,
    }
    assert config.externalized_retention == "delete_on_cancellation"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"interval_ms": 9}, "checkpoint interval must be at least 10 ms, got 9 ms"),
        ({"timeout_ms": 5}, "checkpoint timeout must be at least 10 ms"),
        ({"mode": "exactly-once"}, "checkpointing mode 'exactly-once' is unknown"),
        ({"min_pause_ms": -1}, "min pause must be zero or positive"),
        ({"max_concurrent": 0}, "max concurrent checkpoints must be at least 1"),
        ({"min_pause_ms": 100, "max_concurrent": 2}, "a min pause (100 ms) needs max_concurrent == 1"),
        ({"tolerable_failures": -1}, "tolerable checkpoint failures must be zero or positive"),
        ({"retained": 0}, "at least one completed checkpoint must be retained"),
        ({"externalized_retention": "keep"}, "externalized retention 'keep' is unknown"),
        ({"interval_ms": 1.5}, "interval_ms must be an int"),
    ],
)
def test_invalid_options_say_what_to_fix(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        CheckpointConfig(**{"interval_ms": 1_000, **options})
    assert message in str(err.value)


def test_backends_by_name_dict_or_object() -> None:
    assert StateBackend.of("heap") == StateBackend("heap") == StateBackend.of({"name": "heap"})
    assert StateBackend.of(StateBackend("rocksdb")).name == "rocksdb"
    with pytest.raises(InvalidArgumentError, match="'hashmap' is unknown"):
        StateBackend.of("hashmap")
    with pytest.raises(InvalidArgumentError, match="a state backend is a name"):
        StateBackend.of(3)  # type: ignore[arg-type]
