"""Which inputs have rows of a fixed width (``weir.spark.arrow_batches``): only for those does
a batch's row count bound its bytes, so the job may run without Spark's byte limit."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from weir.spark.arrow_batches import fixed_width


def struct(*types: DataType) -> StructType:
    return StructType([StructField(f"c{i}", t) for i, t in enumerate(types)])


@pytest.mark.parametrize(
    "data_type",
    [
        struct(LongType(), LongType()),
        struct(IntegerType(), DoubleType(), BooleanType(), DecimalType(10, 2)),
        struct(DateType(), TimestampType(), TimestampNTZType(), DayTimeIntervalType()),
        struct(LongType(), struct(IntegerType(), DoubleType())),
        struct(),
    ],
)
def test_rows_of_numbers_and_times_have_a_fixed_width(data_type: DataType) -> None:
    assert fixed_width(data_type)


@pytest.mark.parametrize(
    "data_type",
    [
        struct(LongType(), StringType()),
        struct(BinaryType()),
        struct(ArrayType(LongType())),
        struct(MapType(LongType(), LongType())),
        struct(LongType(), struct(IntegerType(), StringType())),
    ],
)
def test_rows_with_strings_bytes_or_collections_do_not(data_type: DataType) -> None:
    assert not fixed_width(data_type)
