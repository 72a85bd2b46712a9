"""Replayable sources whose position is part of every checkpoint.

A source plans one epoch at a time: from a position (``None`` at the start)
it returns the DataFrame of the epoch's records and the position after them.
Positions are small JSON values stored in ``_metadata``; restoring a
checkpoint rewinds the source to the position stored with it, and planning
from the same position always yields the same records (replayable) for as
long as it admits the same amount.

A source may size its epochs by time: the job passes a budget, how much
input (in the source's own unit, bytes for files) the epochs so far ran in
the job's epoch target (:mod:`weir.spark.epoch_sizing`), and the source
admits about that much. Each checkpoint stores the position after the input
actually admitted, so a restore replays from there whatever the next
epoch's size.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.sql import functions as F

from weir.exceptions import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

Position = Any
"""A JSON-serializable source position."""


@dataclass(frozen=True)
class EpochInput:
    """What a source plans for one epoch."""

    frame: DataFrame | None
    """The epoch's records, or ``None`` when nothing new is available."""
    position: Position
    """The source position after this epoch's records."""
    exhausted: bool
    """True when a bounded source has nothing left after this epoch."""
    size: int = 0
    """How much input the epoch admitted, in the unit of the budget (bytes for files)."""
    sized_by_budget: bool = False
    """True when the budget decided how much the epoch admits (another budget, another size)."""


class Source(Protocol):
    """A replayable source (see the module docs)."""

    def plan(
        self, spark: SparkSession, position: Position, parallelism: int, budget: int | None = None
    ) -> EpochInput:
        """The records of the next epoch after ``position``; a source that sizes its epochs by
        time admits about ``budget`` (``None``: nothing measured yet), others ignore it."""
        ...


@dataclass(frozen=True)
class FileSource:
    """A directory of Parquet, CSV or JSON files, read in file-name order.

    New files are picked up in order as they appear: the position is the name
    of the last file consumed, so new files must sort after it (timestamped
    or sequence-numbered names). Files whose names start with ``_`` or ``.``
    are ignored, as Spark does. Without a ``schema``, the one Spark infers
    from the first epoch's files holds for the rest of the run, as Spark's
    streaming file source fixes its schema when a query starts (and no later
    epoch reads file footers again).

    By default epochs are sized by time: until one ran, an epoch reads
    ``initial_files_per_epoch`` files (one unless set); each later one reads
    files in name order up to the budget in bytes the job's epoch target
    allows (at least one file), and the rest of the waiting files too when
    they are under half the budget, rather than leave a small epoch behind.
    ``max_files_per_epoch`` fixes the count instead, as Spark's
    ``maxFilesPerTrigger`` does.
    """

    path: str
    format: str = "parquet"
    schema: StructType | str | None = None
    max_files_per_epoch: int | None = None
    bounded: bool = True
    """Bounded: the job ends when every file present is consumed."""
    options: dict[str, str] = field(default_factory=dict)
    initial_files_per_epoch: int = 1
    """Epochs sized by time: the files an epoch reads before any epoch's time is known."""
    _inferred: dict[str, StructType] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The schema inferred from the first files read (``"schema"``), when none is given."""

    def _local_dir(self) -> str:
        return self.path.removeprefix("file://")

    def __post_init__(self) -> None:
        if self.max_files_per_epoch is not None and self.max_files_per_epoch < 1:
            raise InvalidArgumentError(
                f"max_files_per_epoch is {self.max_files_per_epoch}: give at least 1, or None to "
                "size epochs by time"
            )
        if self.initial_files_per_epoch < 1:
            raise InvalidArgumentError(
                f"initial_files_per_epoch is {self.initial_files_per_epoch}: give at least 1"
            )

    def _pending(self, after: str | None) -> list[str]:
        names = sorted(
            name
            for name in os.listdir(self._local_dir())
            if not name.startswith(("_", ".")) and (after is None or name > after)
        )
        return names

    def _admitted(self, pending: list[str], budget: int | None) -> tuple[list[str], int]:
        """The waiting files (in name order) the epoch reads, and their bytes. Only the files
        the decision needs are looked at: a long backlog costs one more budget's worth."""
        directory = self._local_dir()
        sizes = (os.path.getsize(os.path.join(directory, name)) for name in pending)
        if self.max_files_per_epoch is not None or budget is None:
            fixed = self.max_files_per_epoch or self.initial_files_per_epoch
            return pending[:fixed], sum(itertools.islice(sizes, fixed))
        total = 0
        for count, size in enumerate(sizes):
            if count and total + size > budget:
                rest = size
                for more in sizes:
                    if rest * 2 > budget:
                        break
                    rest += more
                # The rest joins the epoch when it is under half a budget: no small epoch after.
                return (pending, total + rest) if rest * 2 <= budget else (pending[:count], total)
            total += size
        return pending, total

    def plan(
        self, spark: SparkSession, position: Position, parallelism: int, budget: int | None = None
    ) -> EpochInput:
        """Reads the next files after ``position``: ``max_files_per_epoch`` of them, or as
        many as ``budget`` bytes allow (see the class docs)."""
        last = position["last_file"] if position else None
        pending = self._pending(last)
        if not pending:
            return EpochInput(None, position, self.bounded)
        batch, size = self._admitted(pending, budget)
        reader = spark.read.format(self.format).options(**self.options)
        schema = self.schema if self.schema is not None else self._inferred.get("schema")
        if schema is not None:
            reader = reader.schema(schema)
        files = [os.path.join(self._local_dir(), name) for name in batch]
        frame = reader.load(files)
        if schema is None:
            self._inferred["schema"] = frame.schema
        exhausted = self.bounded and len(pending) == len(batch)
        return EpochInput(
            frame,
            {"last_file": batch[-1]},
            exhausted,
            size,
            sized_by_budget=self.max_files_per_epoch is None,
        )


def parquet_files(
    path: str,
    *,
    schema: StructType | str | None = None,
    max_files_per_epoch: int | None = None,
    bounded: bool = True,
    initial_files_per_epoch: int = 1,
) -> FileSource:
    """A directory of Parquet files, in epochs sized by time (starting from
    ``initial_files_per_epoch`` files) or of ``max_files_per_epoch`` files; without a
    ``schema``, the first epoch's file footers give it (see :class:`FileSource`)."""
    return FileSource(
        path, "parquet", schema, max_files_per_epoch, bounded, initial_files_per_epoch=initial_files_per_epoch
    )


def csv_files(
    path: str,
    schema: StructType | str,
    *,
    header: bool = True,
    max_files_per_epoch: int | None = None,
    bounded: bool = True,
    initial_files_per_epoch: int = 1,
) -> FileSource:
    """A directory of CSV files with a fixed schema (epochs as for :func:`parquet_files`)."""
    options = {"header": "true" if header else "false"}
    return FileSource(path, "csv", schema, max_files_per_epoch, bounded, options, initial_files_per_epoch)


def json_files(
    path: str,
    schema: StructType | str,
    *,
    max_files_per_epoch: int | None = None,
    bounded: bool = True,
    initial_files_per_epoch: int = 1,
) -> FileSource:
    """A directory of JSON-lines files with a fixed schema (epochs as for :func:`parquet_files`)."""
    return FileSource(
        path, "json", schema, max_files_per_epoch, bounded, initial_files_per_epoch=initial_files_per_epoch
    )


@dataclass(frozen=True)
class GeneratorSource:
    """The deterministic keyed-average events of docs/benchmarks.md.

    Event ``i`` (0 to ``total - 1``) has ``key = (i * 2654435761) mod keys``
    and ``value = i mod 1000``; each epoch takes the next ``rows_per_epoch``
    events. The position is the index of the next event.
    """

    total: int
    keys: int = 100_000
    rows_per_epoch: int = 500_000

    def plan(
        self, spark: SparkSession, position: Position, parallelism: int, budget: int | None = None
    ) -> EpochInput:
        """Events ``[position, position + rows_per_epoch)``, whatever the budget."""
        start = int(position["next"]) if position else 0
        if start >= self.total:
            return EpochInput(None, {"next": start}, True)
        end = min(self.total, start + self.rows_per_epoch)
        frame = spark.range(start, end, numPartitions=parallelism).select(
            ((F.col("id") * F.lit(2654435761)) % F.lit(self.keys)).alias("key"),
            (F.col("id") % F.lit(1000)).alias("value"),
        )
        return EpochInput(frame, {"next": end}, end >= self.total, end - start)


def generator(total: int, *, keys: int = 100_000, rows_per_epoch: int = 500_000) -> GeneratorSource:
    """Deterministic ``(key long, value long)`` events for tests and benchmarks."""
    if total < 0 or keys < 1 or rows_per_epoch < 1:
        raise ValueError("total must be >= 0, keys and rows_per_epoch >= 1")
    return GeneratorSource(total, keys, rows_per_epoch)
