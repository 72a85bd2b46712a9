"""Sinks that publish an epoch's output only when it is safe to.

Exactly-once (the default): an epoch's output is staged when its Spark job
runs and published when the checkpoint covering the epoch completes, so a
reader never sees output of epochs a recovery will replay. At-least-once:
output is published as soon as its epoch succeeded.

A sink's *handle* (stored in every checkpoint's ``_metadata``) lists the
staged epochs not yet published; a restore publishes exactly those (they
are covered by the restored checkpoint) and aborts every other staged
epoch, and a start without a restore aborts every staged epoch. Epoch
numbers never repeat in a sink: a new generation numbers its epochs after
the sink's :meth:`~Sink.high_water`, so output of an abandoned timeline
(say, after restoring an older savepoint into the same path) is never
mistaken for new output.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from weir.exceptions import StateError
from weir.spark.arrow_batches import arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Row

Handle = Any
"""A JSON-serializable sink handle."""


class Sink(Protocol):
    """A transactional sink (see the module docs)."""

    def write_epoch(self, frame: DataFrame, epoch: int) -> None:
        """Runs the epoch's Spark job and stages its output."""
        ...

    def publish_up_to(self, epoch: int) -> None:
        """Publishes every staged epoch ``<= epoch``; idempotent."""
        ...

    def handle(self, up_to: int | None = None) -> Handle:
        """The staged, unpublished epochs (stored with checkpoints), those ``<= up_to`` if
        given: what a checkpoint cut after epoch ``up_to`` covers."""
        ...

    def recover(self, handle: Handle) -> None:
        """At the start of a generation: publishes the epochs ``handle`` names
        (``None`` when the generation starts empty), aborts every other staged epoch."""
        ...

    def high_water(self) -> int:
        """The newest epoch staged or published here (0 if none); a new generation
        numbers its epochs after it, once :meth:`recover` aborted what it had to."""
        ...


PartitionWriter = Callable[[int, Iterator["pa.RecordBatch"]], None]
"""Writes one task's output batches of one epoch, ``writer(epoch, batches)`` (a picklable
callable)."""


@runtime_checkable
class TaskWrittenSink(Sink, Protocol):
    """A sink whose output the epoch's tasks write themselves: the driver hands the last
    stateful step a writer, and the epoch's Spark job has no output of its own."""

    def task_writer(self, epochs: Sequence[int], schema: pa.Schema) -> PartitionWriter:
        """Prepares the staging of ``epochs`` (one Spark job's), whose rows have ``schema`` (the
        Arrow schema of the tasks' batches); returns what each of their tasks calls with an epoch
        and its output batches of that epoch."""
        ...


_log = logging.getLogger("weir.spark")

_EPOCH_DIR = re.compile(r"^epoch=(\d+)$")


def _epochs_of(handle: Handle) -> list[int]:
    return [int(e) for e in (handle or {}).get("staged", [])]


@dataclass
class ParquetFilesSink:
    """Parquet files under a local directory, one subdirectory per epoch.

    Epoch ``e`` is written to ``<path>/_staging/epoch=<e>`` (Spark readers skip
    directories starting with ``_``) and published by renaming it to
    ``<path>/epoch=<e>``, an atomic step, so ``spark.read.parquet(path)`` sees
    whole epochs or nothing.

    Each task of the epoch's Spark job writes its partition as one file,
    ``part-<partition>.parquet``, with pyarrow (see :func:`_write_partition`):
    the last stateful step's tasks write their output as they make it
    (:meth:`task_writer`), or, where transforms follow that step, tasks added
    for the write (:meth:`write_epoch`). The job's own output is Spark's
    ``noop``: the epoch's staging directory and its publication already make
    the epoch's output atomic, so Spark's file commit protocol (a job and task
    commit with their renames, about 120 ms a job on a local disk whatever the
    rows) would only repeat it.
    """

    path: str

    def __post_init__(self) -> None:
        self.path = self.path.removeprefix("file://")
        os.makedirs(self._staging_root(), exist_ok=True)

    def _staging_root(self) -> str:
        return os.path.join(self.path, "_staging")

    def _staged(self, epoch: int) -> str:
        return os.path.join(self._staging_root(), f"epoch={epoch}")

    def _published(self, epoch: int) -> str:
        return os.path.join(self.path, f"epoch={epoch}")

    def _staged_epochs(self) -> list[int]:
        return _epoch_dirs(self._staging_root())

    def task_writer(self, epochs: Sequence[int], schema: pa.Schema) -> PartitionWriter:
        """Empties the epochs' staging directories (a run of them that failed part-way may
        have left files); returns the writer of a task's file in an epoch's directory."""
        for epoch in epochs:
            staged = self._staged(epoch)
            shutil.rmtree(staged, ignore_errors=True)
            os.makedirs(staged)
        return partial(_write_partition, self._staging_root(), schema)

    def write_epoch(self, frame: DataFrame, epoch: int) -> None:
        """Writes the epoch's output to its staging directory, a file per partition."""
        write = self.task_writer([epoch], arrow_schema(frame.schema, frame.sparkSession))

        def written(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            write(epoch, batches)
            return iter(())

        frame.mapInArrow(written, frame.schema).write.format("noop").mode("overwrite").save()

    def publish_up_to(self, epoch: int) -> None:
        """Renames every staged epoch ``<= epoch`` into place."""
        for staged in self._staged_epochs():
            if staged <= epoch:
                self._publish(staged)

    def _publish(self, epoch: int) -> None:
        if os.path.exists(self._published(epoch)):
            # Epoch numbers never repeat in a sink, so this is another writer's output.
            raise StateError(
                f"{self._published(epoch)} already exists while epoch {epoch} is staged again: another "
                f"job writes to {self.path}; give every job its own output path"
            )
        os.rename(self._staged(epoch), self._published(epoch))

    def handle(self, up_to: int | None = None) -> Handle:
        """The staged epochs (those ``<= up_to`` if given)."""
        return {"staged": _up_to(self._staged_epochs(), up_to)}

    def recover(self, handle: Handle) -> None:
        """Publishes the epochs of ``handle``, deletes every other staged epoch."""
        keep = set(_epochs_of(handle))
        for staged in self._staged_epochs():
            if staged in keep:
                self._publish(staged)
            else:
                shutil.rmtree(self._staged(staged))

    def high_water(self) -> int:
        """The newest epoch staged or published under :attr:`path`."""
        return max([0, *self._staged_epochs(), *_epoch_dirs(self.path)])


@dataclass
class CollectSink:
    """Collects published rows in the driver's memory; for tests and examples.

    Staged rows live in the driver too, so they do not survive the driver.
    """

    rows: list[Row] = field(default_factory=list)
    _staged: dict[int, list[Row]] = field(default_factory=dict)
    _published: set[int] = field(default_factory=set)

    def write_epoch(self, frame: DataFrame, epoch: int) -> None:
        """Collects the epoch's output into the driver."""
        self._staged[epoch] = frame.collect()

    def publish_up_to(self, epoch: int) -> None:
        """Moves every staged epoch ``<= epoch`` into :attr:`rows`, in epoch order."""
        for staged in sorted(e for e in self._staged if e <= epoch):
            self.rows.extend(self._staged.pop(staged))
            self._published.add(staged)

    def handle(self, up_to: int | None = None) -> Handle:
        """The staged epochs (those ``<= up_to`` if given)."""
        return {"staged": _up_to(sorted(self._staged), up_to)}

    def recover(self, handle: Handle) -> None:
        """Publishes the epochs of ``handle`` still staged here, drops the rest."""
        keep = set(_epochs_of(handle))
        for staged in sorted(self._staged):
            if staged in keep:
                self.rows.extend(self._staged.pop(staged))
                self._published.add(staged)
            else:
                del self._staged[staged]

    def high_water(self) -> int:
        """The newest epoch staged or published by this sink."""
        return max([0, *self._staged, *self._published])


def _up_to(epochs: list[int], up_to: int | None) -> list[int]:
    return epochs if up_to is None else [epoch for epoch in epochs if epoch <= up_to]


def _write_partition(staging: str, schema: pa.Schema, epoch: int, batches: Iterator[pa.RecordBatch]) -> None:
    """Writes a task's rows of ``epoch`` to ``part-<partition>.parquet`` in the epoch's
    directory under ``staging``, empty too (so an epoch without rows still has its schema).
    The file is written under a hidden name and renamed into place, so a retried task
    replaces it whole."""
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise StateError("the Parquet sink's files are written inside a Spark task")
    directory = os.path.join(staging, f"epoch={epoch}")
    name = f"part-{context.partitionId():05d}.parquet"
    hidden = os.path.join(directory, f".{name}.{context.taskAttemptId()}")
    writer: pq.ParquetWriter | None = None
    try:
        for batch in batches:
            if writer is None:
                # The rows' own schema: Spark made them from the frame's, field for field.
                writer = pq.ParquetWriter(hidden, batch.schema)
            writer.write_batch(batch)
        if writer is None:
            writer = pq.ParquetWriter(hidden, schema)
        writer.close()
        os.replace(hidden, os.path.join(directory, name))
    except BaseException:
        if writer is not None:
            writer.close()
        if os.path.exists(hidden):
            os.remove(hidden)
        raise


def _epoch_dirs(directory: str) -> list[int]:
    """The epochs of the ``epoch=<n>`` entries of ``directory``; other entries are
    left alone (with a warning, since Weir never writes them)."""
    epochs = []
    for name in os.listdir(directory):
        match = _EPOCH_DIR.match(name)
        if match:
            epochs.append(int(match.group(1)))
        elif directory.endswith("_staging"):
            _log.warning("ignoring %s: not a staged epoch", os.path.join(directory, name))
    return sorted(epochs)


def parquet_files(path: str) -> ParquetFilesSink:
    """A transactional Parquet sink under the local directory ``path``."""
    return ParquetFilesSink(path)


def collect() -> CollectSink:
    """A sink that collects published rows into ``sink.rows`` (tests)."""
    return CollectSink()
