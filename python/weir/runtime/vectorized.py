"""State of vectorized functions: whole Arrow batches of keys at once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

import pyarrow as pa

from weir._internal import Session
from weir.exceptions import InvalidArgumentError
from weir.functions import BatchContext, BatchState
from weir.state import StateDescriptor

__all__ = ["NATIVE_AGGREGATES", "BatchKeys", "VectorizedContext", "VectorizedState", "arrow_batch_keys"]

NATIVE_AGGREGATES: Final = ("count", "sum", "min", "max", "mean")


_KEY_GROUP_COLUMN: Final = "__weir_key_group"


def arrow_batch_keys(
    session: Session,
    keys: pa.Array | pa.ChunkedArray | pa.RecordBatch,
    key_groups: Sequence[int] | pa.Array | pa.ChunkedArray | None,
) -> BatchKeys:
    """The keys of a batch given as Arrow: one key column, or a batch of key columns (a
    composite key). Rust encodes them straight from the columns, with no Python object per
    row; ``key_groups`` (integers, one per row) if given."""
    if isinstance(keys, pa.RecordBatch):
        columns = keys
        values: Callable[[], list[Any]] = (
            keys.column(0).to_pylist if keys.num_columns == 1 else partial(_rows_of, keys)
        )
    else:
        array = _whole(keys)
        columns = pa.record_batch([array], names=["key"])
        values = array.to_pylist
    if key_groups is not None:
        arrow_groups = isinstance(key_groups, pa.Array | pa.ChunkedArray)
        groups = _whole(key_groups) if arrow_groups else pa.array(key_groups, pa.int64())
        columns = columns.append_column(_KEY_GROUP_COLUMN, groups)
    group_column = None if key_groups is None else _KEY_GROUP_COLUMN
    return BatchKeys(session.arrow_keys(columns, group_column), values)


def _whole(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _rows_of(columns: pa.RecordBatch) -> list[tuple[Any, ...]]:
    """The rows of key ``columns`` as tuples: composite keys as Python objects."""
    return list(zip(*(column.to_pylist() for column in columns.columns), strict=True))


class BatchKeys:
    """``ctx.keys`` of a vectorized batch: the encoded keys, and their values as Python
    objects (``values``: a list, or a callable that makes it when first asked)."""

    __slots__ = ("_values", "key_batch")

    def __init__(self, key_batch: Any, values: list[Any] | Callable[[], list[Any]]) -> None:
        self.key_batch = key_batch
        self._values = values

    @property
    def values(self) -> list[Any]:
        if callable(self._values):
            self._values = self._values()
        return self._values

    def __len__(self) -> int:
        return len(self.key_batch)


class VectorizedContext(BatchContext):
    __slots__ = ("_keys",)

    def __init__(self, keys: BatchKeys) -> None:
        self._keys = keys

    @property
    def keys(self) -> BatchKeys:
        return self._keys

    def key_values(self) -> list[Any]:
        return list(self._keys.values)


class VectorizedState(BatchState):
    """A value-like keyed state of a vectorized function."""

    __slots__ = ("_id", "_session", "name")

    def __init__(self, session: Session, state_id: int, descriptor: StateDescriptor) -> None:
        self._session = session
        self._id = state_id
        self.name = descriptor.name

    def _keys(self, keys: Any) -> Any:
        if isinstance(keys, BatchKeys):
            return keys.key_batch
        if isinstance(keys, pa.Array | pa.ChunkedArray | pa.RecordBatch):
            return arrow_batch_keys(self._session, keys, None).key_batch
        return self._session.keys(list(keys), None)

    def get_batch(self, keys: Any) -> pa.Array:
        return pa.array(self._session.get_batch(self._id, self._keys(keys)))

    def put_batch(self, keys: Any, values: pa.Array) -> None:
        key_batch = self._keys(keys)
        if len(values) != len(key_batch):
            raise InvalidArgumentError(
                f"put_batch on state {self.name!r} got {len(values)} values for {len(key_batch)} keys: "
                "pass one value per key"
            )
        self._session.put_batch(self._id, key_batch, _whole(values))

    def aggregate(self, keys: Any, inputs: pa.Array, function: str, *, window: int | None = None) -> pa.Array:
        if function not in NATIVE_AGGREGATES:
            raise InvalidArgumentError(
                f"aggregate function {function!r} is unknown: use one of {', '.join(NATIVE_AGGREGATES)}"
            )
        key_batch = self._keys(keys)
        if len(inputs) != len(key_batch):
            raise InvalidArgumentError(
                f"aggregate on state {self.name!r} got {len(inputs)} inputs for {len(key_batch)} keys: "
                "pass one input per key"
            )
        exported = self._session.aggregate(self._id, key_batch, _whole(inputs), function, window)
        return pa.array(exported)

    def clear_batch(self, keys: Any) -> None:
        self._session.clear(self._id, self._keys(keys))
