"""Epochs sized by time, without Spark: budgets from measured epochs, the job's target."""

from __future__ import annotations

import pytest

from weir.exceptions import InvalidArgumentError
from weir.spark.epoch_sizing import DEFAULT_EPOCH_TARGET_MS, EpochSizer, budget_drifted, epoch_target_ms

FIXED_COST_S = 0.09
"""What an epoch costs beyond its records (two cores, local mode)."""


def run_epochs(sizer: EpochSizer, first: int, bytes_per_s: float, epochs: int) -> list[float]:
    """Epochs whose wall time is a fixed cost plus their bytes at ``bytes_per_s``; each after
    the first admits the budget. Returns each epoch's wall time."""
    walls: list[float] = []
    size = first
    for _ in range(epochs):
        wall = FIXED_COST_S + size / bytes_per_s
        walls.append(wall)
        sizer.observe(size, wall)
        budget = sizer.budget()
        assert budget is not None
        size = budget
    return walls


def test_epochs_grow_from_one_file_until_they_take_about_the_target() -> None:
    sizer = EpochSizer(target_s=1.0)
    assert sizer.budget() is None
    walls = run_epochs(sizer, first=1_000_000, bytes_per_s=20_000_000, epochs=6)
    assert walls[0] < 0.2
    assert walls == sorted(walls), "each epoch larger than the one before"
    # The first two epochs give the fixed cost: the third fills the target.
    assert walls[2:] == pytest.approx([1.0] * 4, rel=0.01)


def test_the_rate_alone_grows_epochs_more_slowly() -> None:
    sizer = EpochSizer(target_s=1.0)
    sizer.observe(1_000_000, FIXED_COST_S + 1_000_000 / 20_000_000)
    # One epoch: its rate times the target, fixed cost included.
    assert sizer.budget() == int(1_000_000 / (FIXED_COST_S + 0.05))


def test_a_noisy_pair_of_epochs_grows_the_budget_at_most_by_half_again() -> None:
    sizer = EpochSizer(target_s=1.0)
    sizer.observe(1_000_000, 0.5)
    sizer.observe(2_000_000, 0.55)  # a line through both: 20M/s after a 0.45 s fixed cost
    simple = 2_000_000 / 0.55
    assert sizer.budget() == int(1.5 * simple)


def test_a_slower_function_shrinks_the_epochs_back_to_the_target() -> None:
    sizer = EpochSizer(target_s=1.0)
    run_epochs(sizer, first=1_000_000, bytes_per_s=20_000_000, epochs=6)
    # The same budget now takes four times as long: the next epochs shrink.
    walls = run_epochs(sizer, first=sizer.budget() or 0, bytes_per_s=5_000_000, epochs=4)
    assert walls[0] > 3.0
    assert walls[-1] == pytest.approx(1.0, rel=0.02)


def test_an_epoch_without_input_or_time_changes_nothing() -> None:
    sizer = EpochSizer(target_s=0.5)
    sizer.observe(0, 0.3)
    sizer.observe(1_000, 0.0)
    assert sizer.budget() is None
    sizer.observe(1_000, 0.25)
    assert sizer.budget() == 2_000


def test_the_budget_is_at_least_one_unit() -> None:
    sizer = EpochSizer(target_s=0.001)
    sizer.observe(1, 10.0)
    assert sizer.budget() == 1


def test_a_prefetched_input_is_planned_again_only_when_the_budget_moved_far() -> None:
    assert not budget_drifted(None, None)
    assert budget_drifted(None, 100), "planned before anything was measured"
    assert not budget_drifted(100, 200)
    assert not budget_drifted(100, 50)
    assert budget_drifted(100, 201)
    assert budget_drifted(100, 49)
    assert not budget_drifted(100, None)


def test_the_epoch_target_defaults_to_the_checkpoint_interval_up_to_a_second() -> None:
    assert epoch_target_ms(None, None) == DEFAULT_EPOCH_TARGET_MS == 1_000
    assert epoch_target_ms(None, 300) == 300
    assert epoch_target_ms(None, 60_000) == 1_000
    assert epoch_target_ms(5_000, 60_000) == 5_000
    with pytest.raises(InvalidArgumentError, match="epoch_target_ms is 0"):
        epoch_target_ms(0, None)
