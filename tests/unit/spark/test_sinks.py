"""The Parquet and collecting sinks' transactions, on real directories (no Spark job needed:
staged epochs are made by hand the way ``write_epoch`` lays them out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from weir.exceptions import StateError
from weir.spark.sinks import CollectSink, ParquetFilesSink


def _stage(sink: ParquetFilesSink, epoch: int, content: str = "rows") -> None:
    staged = Path(sink.path, "_staging", f"epoch={epoch}")
    staged.mkdir(parents=True)
    (staged / "part-0.parquet").write_text(content)


def test_a_start_without_a_restore_aborts_every_staged_epoch(tmp_path: Path) -> None:
    sink = ParquetFilesSink(str(tmp_path))
    for epoch in (3, 4, 5):
        _stage(sink, epoch)
    sink.recover(None)
    assert sink.handle() == {"staged": []}
    assert not any(tmp_path.glob("epoch=*")), "nothing of the failed run is published"


def test_a_restore_publishes_what_its_handle_names_and_aborts_the_rest(tmp_path: Path) -> None:
    sink = ParquetFilesSink(str(tmp_path))
    for epoch in (3, 4, 5):
        _stage(sink, epoch)
    sink.recover({"staged": [3, 4]})
    assert sorted(p.name for p in tmp_path.glob("epoch=*")) == ["epoch=3", "epoch=4"]
    assert sink.handle() == {"staged": []}


def test_the_high_water_mark_counts_staged_and_published_epochs(tmp_path: Path) -> None:
    sink = ParquetFilesSink(str(tmp_path))
    assert sink.high_water() == 0
    _stage(sink, 7)
    sink.publish_up_to(7)
    _stage(sink, 9)
    assert sink.high_water() == 9


def test_output_of_another_timeline_is_never_deleted_for_a_new_epoch(tmp_path: Path) -> None:
    # An older savepoint restored into the same path: its epochs were published
    # already. New epochs are numbered after the high water mark, and a staged
    # epoch meeting a published one of the same number is an error, not a
    # silent deletion of the new output.
    sink = ParquetFilesSink(str(tmp_path))
    _stage(sink, 11, "old timeline")
    sink.publish_up_to(11)
    _stage(sink, 11, "new timeline")
    with pytest.raises(StateError, match="another job writes"):
        sink.publish_up_to(11)
    assert (tmp_path / "_staging" / "epoch=11" / "part-0.parquet").read_text() == "new timeline"


def test_stray_entries_in_the_staging_directory_are_left_alone(tmp_path: Path) -> None:
    sink = ParquetFilesSink(str(tmp_path))
    (tmp_path / "_staging" / "notes.txt").write_text("mine")
    (tmp_path / "_staging" / "epoch=abc").mkdir()
    _stage(sink, 2)
    assert sink.handle() == {"staged": [2]}
    sink.recover(None)
    assert (tmp_path / "_staging" / "notes.txt").exists()
    assert (tmp_path / "_staging" / "epoch=abc").exists()


def test_the_collect_sink_keeps_the_same_transactions() -> None:
    sink = CollectSink()
    sink._staged = {1: ["a"], 2: ["b"], 3: ["c"]}  # what write_epoch collects
    sink.publish_up_to(1)
    sink.recover({"staged": [2]})
    assert sink.rows == ["a", "b"]
    assert sink.high_water() == 2
