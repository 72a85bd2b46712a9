"""Exactly-once across a job's timelines: failures before the first checkpoint, failures
right after a savepoint, restoring older checkpoints, and output of abandoned timelines."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from keyed_average import FailingOnce, KeyedAverage  # noqa: I001 - keyed_jobs puts examples/ on the path
from keyed_jobs import assert_exactly_once, expected_pairs, keyed_average_job, published

from weir.checkpoint import read_checkpoint
from weir.config import CheckpointConfig
from weir.spark import EpochProgress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def test_a_failure_before_the_first_checkpoint_publishes_nothing_twice(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Staged epochs of the failed attempt must be aborted when the job starts
    # over empty; before, the first checkpoint published them beside the replay.
    marker, arm = tmp_path / "failed", tmp_path / "armed"
    job, out = keyed_average_job(
        spark,
        tmp_path,
        FailingOnce(KeyedAverage(), str(marker), after=2_000, armed_by=str(arm)),
        interval_ms=8_000,
        rows_per_epoch=20_000,
    )
    armed_at: list[int] = []

    def arm_before_any_checkpoint(progress: EpochProgress) -> None:
        # After the first Spark job (of one epoch or several), before any checkpoint.
        if not progress.checkpoints and not armed_at:
            arm.touch()
            armed_at.append(progress.epoch)

    result = job.execute(on_epoch=arm_before_any_checkpoint)
    assert marker.exists() and armed_at, "the failure was injected"
    assert result.restarts == 1
    assert all(newest > armed_at[0] for _, _, newest in result.completions), (
        "no checkpoint completed before the failure",
        result.completions,
    )
    assert_exactly_once(spark, out)


def test_a_savepoint_publishes_nothing_that_a_failover_replays(spark: SparkSession, tmp_path: Path) -> None:
    # Failover restores the latest checkpoint, never the savepoint after it; a
    # savepoint that published its epochs had them published again by the replay.
    marker, arm = tmp_path / "failed", tmp_path / "armed"
    job, out = keyed_average_job(
        spark,
        tmp_path,
        FailingOnce(KeyedAverage(), str(marker), after=2_000, armed_by=str(arm)),
        savepoint_dir=str(tmp_path / "savepoints"),
        # Small epochs, each its own Spark job, and a first checkpoint early: the
        # job must still be running when the savepoint completes and arms the failure.
        interval_ms=1_000,
        rows_per_epoch=5_000,
        epochs_per_job=1,
    )
    savepoints: list[str] = []

    def savepoint_then_fail(progress: EpochProgress) -> None:
        if progress.checkpoints and not savepoints:
            savepoints.append("requested")
            future = job.trigger_savepoint()
            future.add_done_callback(lambda f: (savepoints.append(f.result()), arm.touch()))

    result = job.execute(on_epoch=savepoint_then_fail)
    assert len(savepoints) == 2, "the savepoint completed"
    assert marker.exists(), "a task failed right after the savepoint"
    assert result.restarts == 1
    assert read_checkpoint(savepoints[1]).kind == "savepoint"
    assert_exactly_once(spark, out)


def test_restoring_an_older_retained_checkpoint_keeps_it_and_stays_on_its_timeline(
    spark: SparkSession, tmp_path: Path
) -> None:
    # A first run leaves three retained checkpoints. A second run restores the
    # oldest: it must still find it (retention used to run first and delete it),
    # and a failure in that run must stay on the rollback's timeline (not go to
    # the first run's newest checkpoint, which skips events).
    n = 40_000
    # A Spark job per epoch: the first run's eight short epochs then span three checkpoints.
    first, _ = keyed_average_job(
        spark, tmp_path, KeyedAverage(), name="rollback", n=n, rows_per_epoch=5_000, epochs_per_job=1
    )
    first.set_checkpoint_config(CheckpointConfig(interval_ms=200, retained=3))
    done = first.execute()
    assert len(done.checkpoints) >= 3
    restore = f"{tmp_path / 'ckpt' / 'rollback'}/chk-{done.checkpoints[-3]}"
    position = read_checkpoint(restore).sources["events"]["next"]
    marker = tmp_path / "failed"
    second, out = keyed_average_job(
        spark,
        tmp_path,
        FailingOnce(KeyedAverage(), str(marker), after=500),
        name="rollback",
        n=n,
        rows_per_epoch=5_000,
        restore=restore,
        out=tmp_path / "rolled-back",
    )
    second.set_checkpoint_config(CheckpointConfig(interval_ms=300, retained=3))
    result = second.execute()
    assert marker.exists() and result.restarts == 1
    assert published(spark, out) == expected_pairs(n, start=position)
