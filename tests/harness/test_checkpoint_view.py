"""A savepoint as the driver reads it (weir.checkpoint), and the restore tickets it plans."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from weir import KeyedProcessFunction, RuntimeContext, Types, ValueStateDescriptor
from weir.checkpoint import check_restore, read_checkpoint, restore_tickets
from weir.exceptions import InvalidArgumentError
from weir.testing import KeyedOperatorHarness


class Count(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext) -> None:
        self.n = runtime_context.get_state(ValueStateDescriptor("n", Types.LONG()))

    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> None:
        self.n.update((self.n.value() or 0) + 1)


@pytest.fixture
def savepoint(tmp_path: Path) -> str:
    with KeyedOperatorHarness(Count(), key_selector=lambda v: v, uid="count", parallelism=2) as h:
        h.process_elements(range(100))
        return h.snapshot(tmp_path / "savepoints")


def test_the_view_says_what_the_metadata_holds(savepoint: str) -> None:
    checkpoint = read_checkpoint(savepoint)
    assert (checkpoint.kind, checkpoint.checkpoint_id, checkpoint.job_id) == ("savepoint", 1, "count")
    assert checkpoint.operators == [("count", 2, 128)]
    assert checkpoint.cut_epoch >= 1
    assert checkpoint.sources == {} and checkpoint.sinks == {}


def test_tickets_cover_every_new_subtask_and_pickle(savepoint: str) -> None:
    tickets = restore_tickets(savepoint, "count", parallelism=3, max_parallelism=128)
    assert tickets is not None
    assert [t.subtask for t in tickets] == [0, 1, 2]
    checkpoint = read_checkpoint(savepoint)
    for ticket in tickets:
        assert (ticket.restored_from, ticket.cut) == (1, checkpoint.cut_epoch)
        copy = pickle.loads(pickle.dumps(ticket))
        assert repr(copy) == repr(ticket)
    assert restore_tickets(savepoint, "other", parallelism=3, max_parallelism=128) is None
    with pytest.raises(InvalidArgumentError, match="max parallelism"):
        restore_tickets(savepoint, "count", parallelism=3, max_parallelism=64)


def test_a_restore_is_checked_against_the_job(savepoint: str) -> None:
    assert check_restore(savepoint, [("count", 3, 128)], allow_non_restored_state=False) == []
    with pytest.raises(InvalidArgumentError, match="count"):
        check_restore(savepoint, [("renamed", 3, 128)], allow_non_restored_state=False)
    assert check_restore(savepoint, [("renamed", 3, 128)], allow_non_restored_state=True) == ["count"]
