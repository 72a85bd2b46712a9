"""weir.CheckpointConfig: Flink's defaults, validated once in Rust; backends are chosen by name."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from weir import CheckpointConfig, StateBackend
from weir.exceptions import InvalidArgumentError


def test_defaults_are_flinks_and_nothing_is_deleted_on_cancel_unless_asked() -> None:
    config = CheckpointConfig(interval_ms=60_000)
    assert (
        config.interval_ms,
        config.mode,
        config.timeout_ms,
        config.min_pause_ms,
        config.max_concurrent,
        config.tolerable_failures,
        config.retained,
        config.externalized_cleanup,
        config.snapshot_compression,
    ) == (60_000, "exactly_once", 600_000, 0, 1, 0, 1, "retain_on_cancellation", "zstd")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"interval_ms": 9}, "checkpoint interval 9ms is below the minimum of 10ms; set a longer interval"),
        ({"timeout_ms": 5}, "checkpoint timeout 5ms is below the minimum of 10ms"),
        ({"mode": "exactly-once"}, 'checkpointing mode "exactly-once" is unknown'),
        ({"min_pause_ms": -1}, "min_pause_ms must be an integer in 0..="),
        ({"max_concurrent": 0}, "max concurrent checkpoints is 0; set it to at least 1"),
        ({"min_pause_ms": 100, "max_concurrent": 2}, "set max concurrent to 1 or the minimum pause to 0"),
        ({"tolerable_failures": -1}, "tolerable_failures must be an integer in 0..="),
        ({"retained": 0}, "retained checkpoints is 0; retain at least 1"),
        ({"externalized_cleanup": "keep"}, 'externalized checkpoint cleanup "keep" is unknown'),
        (
            {"snapshot_compression": "gzip"},
            'snapshot compression "gzip" is unknown: use "zstd", "lz4" or "none"',
        ),
    ],
)
def test_invalid_options_say_what_to_fix(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        CheckpointConfig(**{"interval_ms": 1_000, **options})
    assert message in str(err.value)


def test_options_of_the_wrong_type_are_type_errors() -> None:
    with pytest.raises(TypeError):
        CheckpointConfig(interval_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CheckpointConfig(1_000, "at_least_once")  # type: ignore[misc]


def test_a_config_is_a_frozen_value_that_pickles() -> None:
    config = CheckpointConfig(
        5_000,
        mode="at_least_once",
        min_pause_ms=100,
        retained=3,
        externalized_cleanup="delete_on_cancellation",
        snapshot_compression="lz4",
    )
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config
    assert hash(copy) == hash(config)
    assert copy != CheckpointConfig(5_000)
    assert repr(copy) == (
        "CheckpointConfig(interval_ms=5000, mode='at_least_once', timeout_ms=600000, "
        "min_pause_ms=100, max_concurrent=1, tolerable_failures=0, retained=3, "
        "externalized_cleanup='delete_on_cancellation', snapshot_compression='lz4')"
    )
    with pytest.raises(AttributeError):
        config.retained = 5  # type: ignore[misc]


def test_backends_by_name_dict_or_object() -> None:
    assert StateBackend.of("heap") == StateBackend("heap") == StateBackend.of({"name": "heap"})
    assert StateBackend.of(StateBackend("rocksdb")).name == "rocksdb"
    with pytest.raises(InvalidArgumentError, match="'hashmap' is unknown"):
        StateBackend.of("hashmap")
    with pytest.raises(InvalidArgumentError, match="a state backend is a name"):
        StateBackend.of(3)  # type: ignore[arg-type]
