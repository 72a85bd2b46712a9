"""Spark 4's byte limit on the Arrow batches ``mapInArrow`` gets, lifted where row counts
already bound them.

Below its largest value, ``spark.sql.execution.arrow.maxBytesPerBatch`` makes Spark measure
the batch it builds after every row, walking all its column vectors: 16% of the JVM's samples
in an epoch task (JFR, the benchmark at N = 20M). The limit keeps batches of large rows (long
strings, big lists) from exhausting memory. When every column of every ``mapInArrow`` input
of a job has a fixed width, ``maxRecordsPerBatch`` bounds a batch's bytes as well, and the
job runs without the byte limit, unless the session sets one or lifts the row limit.

The schema of those batches is :func:`arrow_schema`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    AnsiIntervalType,
    BooleanType,
    DataType,
    DateType,
    NullType,
    NumericType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.conf import RuntimeConfig

BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch"
RECORDS_PER_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
NO_BYTE_LIMIT = str(2**31 - 1)
"""The value Spark reads as no byte limit (Java's ``Integer.MAX_VALUE``)."""

_FIXED_WIDTH = (
    NumericType,
    BooleanType,
    DateType,
    TimestampType,
    TimestampNTZType,
    AnsiIntervalType,
    NullType,
)


def arrow_schema(schema: StructType, spark: SparkSession) -> pa.Schema:
    """The Arrow schema of ``mapInArrow`` batches of rows of ``schema``: Spark hands
    timestamps to Python, and reads them back, in the session's time zone."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone=spark.conf.get("spark.sql.session.timeZone"))


def fixed_width(data_type: DataType) -> bool:
    """Whether every value of ``data_type`` takes the same number of bytes in Arrow."""
    if isinstance(data_type, StructType):
        return all(fixed_width(field.dataType) for field in data_type.fields)
    return isinstance(data_type, _FIXED_WIDTH)


class ByteLimit:
    """Lifts the session's byte limit while a job's Spark jobs have fixed-width inputs only,
    and puts it back (unset) when they do not or the job ends."""

    def __init__(self, conf: RuntimeConfig) -> None:
        self.conf = conf
        records = int(conf.get(RECORDS_PER_BATCH) or 0)
        self.allowed = conf.get(BYTES_PER_BATCH, None) is None and records > 0
        """Whether the session leaves the byte limit to Weir: it sets none of its own and
        bounds batches by rows."""
        self.lifted = False

    def apply(self, inputs_fixed_width: bool) -> None:
        """Lifts the limit for Spark jobs whose ``mapInArrow`` inputs are all fixed-width, or
        puts it back."""
        if inputs_fixed_width and self.allowed and not self.lifted:
            self.conf.set(BYTES_PER_BATCH, NO_BYTE_LIMIT)
            self.lifted = True
        elif not inputs_fixed_width:
            self.restore()

    def restore(self) -> None:
        """Unsets the limit if this job lifted it: the session's default applies again."""
        if self.lifted:
            self.conf.unset(BYTES_PER_BATCH)
            self.lifted = False
