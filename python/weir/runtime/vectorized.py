"""State of vectorized functions: whole Arrow batches of keys at once."""

from __future__ import annotations

import io
from typing import Any, Final

import pyarrow as pa

from weir._internal import Session
from weir.exceptions import InvalidArgumentError
from weir.functions import BatchContext, BatchState
from weir.state import StateDescriptor
from weir.types import to_arrow_field

__all__ = ["NATIVE_AGGREGATES", "BatchKeys", "VectorizedContext", "VectorizedState"]

NATIVE_AGGREGATES: Final = ("count", "sum", "min", "max", "mean")


def _ipc_bytes(array: pa.Array | pa.ChunkedArray, field: pa.Field) -> bytes:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    batch = pa.RecordBatch.from_arrays([array], schema=pa.schema([field.with_type(array.type)]))
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _ipc_array(data: bytes) -> pa.Array:
    reader = pa.ipc.open_stream(data)
    table = reader.read_all()
    return table.column(0).combine_chunks()


class BatchKeys:
    """``ctx.keys`` of a vectorized batch: the encoded keys and their values."""

    __slots__ = ("key_batch", "values")

    def __init__(self, key_batch: Any, values: list[Any]) -> None:
        self.key_batch = key_batch
        self.values = values

    def __len__(self) -> int:
        return len(self.values)


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

    __slots__ = ("_field", "_id", "_session", "name")

    def __init__(self, session: Session, state_id: int, descriptor: StateDescriptor) -> None:
        self._session = session
        self._id = state_id
        self._field = to_arrow_field(descriptor.type_info)
        self.name = descriptor.name

    def _keys(self, keys: Any) -> Any:
        if isinstance(keys, BatchKeys):
            return keys.key_batch
        if isinstance(keys, pa.Array | pa.ChunkedArray):
            keys = keys.to_pylist()
        return self._session.keys(list(keys), None)

    def get_batch(self, keys: Any) -> pa.Array:
        return _ipc_array(self._session.get_batch(self._id, self._keys(keys)))

    def put_batch(self, keys: Any, values: pa.Array) -> None:
        key_batch = self._keys(keys)
        if len(values) != len(key_batch):
            raise InvalidArgumentError(
                f"put_batch on state {self.name!r} got {len(values)} values for {len(key_batch)} keys: "
                "pass one value per key"
            )
        self._session.put_batch(self._id, key_batch, _ipc_bytes(values, self._field))

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
        data = _ipc_bytes(inputs, pa.field("value", inputs.type))
        return _ipc_array(self._session.aggregate(self._id, key_batch, data, function, window))

    def clear_batch(self, keys: Any) -> None:
        self._session.clear(self._id, self._keys(keys))
