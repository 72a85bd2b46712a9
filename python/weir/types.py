"""State types: Arrow types, PyFlink-style ``Types``, and ``pickle`` for opaque Python objects.

Every state descriptor names the type of its values. Weir stores state in a
typed binary encoding and records the type in snapshots, so the ``weir`` tool
can decode state and a restore can check it. A state type is one of:

* a ``pyarrow.DataType``: ``bool``, ``int32``, ``int64``, ``float32``,
  ``float64``, ``string``, ``binary``, ``list<...>`` or ``struct<...>`` of those;
* a ``pyarrow.Field`` of such a type (its ``nullable`` flag matters inside structs);
* :data:`PICKLE` for any picklable Python object, stored as pickled bytes.

:class:`Types` offers PyFlink's names for the same types.

Python values map to the types as follows: ``int`` for the integer types,
``float`` (or ``int``) for the float types, ``str``, ``bytes``, ``bool``, a
``list`` (or tuple) for lists, and a ``tuple`` (or list, or a dict by field
name) for structs. Struct values read back as tuples, lists as lists.

The engine maps each type once, in Rust, reading pyarrow types through the
Arrow PyCapsule interface (``__arrow_c_schema__``); :func:`value_type` gives
the engine's type.

Examples:
    >>> import pyarrow as pa
    >>> from weir.types import Types, value_type
    >>> Types.TUPLE([Types.LONG(), Types.STRING()])
    StructType(struct<f0: int64, f1: string>)
    >>> value_type(Types.LIST(Types.INT()))
    ValueType(list<int32>)
    >>> value_type(Types.PICKLED_BYTE_ARRAY())
    ValueType(pickle)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeAlias

import pyarrow as pa

from weir._internal import ValueType
from weir.exceptions import InvalidArgumentError

__all__ = ["PICKLE", "PickleType", "StateType", "Types", "ValueType", "to_arrow_field", "value_type"]

PICKLE_METADATA_KEY: Final = b"weir.encoding"
PICKLE_METADATA_VALUE: Final = b"pickle"


class PickleType:
    """The type of opaque Python objects, stored with :mod:`pickle`.

    Use the singleton :data:`PICKLE` (or ``Types.PICKLED_BYTE_ARRAY()``). In Arrow
    it is ``binary`` with field metadata ``weir.encoding = pickle``.
    """

    _instance: PickleType | None = None

    def __new__(cls) -> PickleType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "weir.types.PICKLE"

    def field(self, name: str, nullable: bool = True) -> pa.Field:
        """The Arrow field of a pickled value named ``name``, for use inside structs."""
        return pa.field(name, pa.binary(), nullable, {PICKLE_METADATA_KEY: PICKLE_METADATA_VALUE})


PICKLE: Final = PickleType()
"""Opaque Python objects, serialized with :mod:`pickle`."""

StateType: TypeAlias = "pa.DataType | pa.Field | PickleType"
"""What a state descriptor accepts as the type of its values."""


class Types:
    """PyFlink's type names, mapped onto the Arrow types Weir stores.

    ``Types.LONG()`` is ``pa.int64()``, ``Types.ROW([...])`` and ``Types.TUPLE([...])``
    are structs with fields ``f0, f1, ...``, ``Types.PRIMITIVE_ARRAY(Types.BYTE())``
    is ``binary`` and ``Types.PICKLED_BYTE_ARRAY()`` is :data:`PICKLE`.

    Examples:
        >>> Types.ROW_NAMED(["count", "sum"], [Types.LONG(), Types.DOUBLE()])
        StructType(struct<count: int64, sum: double>)
        >>> Types.PRIMITIVE_ARRAY(Types.BYTE())
        DataType(binary)
    """

    @staticmethod
    def BOOLEAN() -> pa.DataType:  # noqa: N802 - PyFlink's name
        """``bool``."""
        return pa.bool_()

    @staticmethod
    def BYTE() -> pa.DataType:  # noqa: N802
        """A byte: only valid as ``PRIMITIVE_ARRAY(BYTE())`` (bytes); Weir has no 8-bit state type."""
        return pa.int8()

    @staticmethod
    def INT() -> pa.DataType:  # noqa: N802
        """``int32``."""
        return pa.int32()

    @staticmethod
    def LONG() -> pa.DataType:  # noqa: N802
        """``int64``."""
        return pa.int64()

    @staticmethod
    def FLOAT() -> pa.DataType:  # noqa: N802
        """``float32``."""
        return pa.float32()

    @staticmethod
    def DOUBLE() -> pa.DataType:  # noqa: N802
        """``float64``."""
        return pa.float64()

    @staticmethod
    def STRING() -> pa.DataType:  # noqa: N802
        """``string`` (UTF-8)."""
        return pa.string()

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: pa.DataType) -> pa.DataType:  # noqa: N802
        """An array of primitives: ``BYTE()`` gives ``binary``, others a ``list``."""
        if element_type == pa.int8():
            return pa.binary()
        return pa.list_(element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: pa.DataType) -> pa.DataType:  # noqa: N802
        """``list<element_type>``."""
        return pa.list_(element_type)

    @staticmethod
    def LIST(element_type: StateType) -> pa.DataType:  # noqa: N802
        """``list<element_type>``; items may be ``None``."""
        if isinstance(element_type, PickleType):
            return pa.list_(PICKLE.field("item"))
        return pa.list_(element_type)

    @staticmethod
    def ROW(field_types: Sequence[StateType]) -> pa.DataType:  # noqa: N802
        """A struct with fields ``f0, f1, ...``; values are tuples."""
        return Types.ROW_NAMED([f"f{i}" for i in range(len(field_types))], field_types)

    @staticmethod
    def ROW_NAMED(field_names: Sequence[str], field_types: Sequence[StateType]) -> pa.DataType:  # noqa: N802
        """A struct with the given field names; values are tuples (or dicts when written)."""
        if len(field_names) != len(field_types):
            raise InvalidArgumentError(
                f"ROW_NAMED got {len(field_names)} names but {len(field_types)} types: pass one type per name"
            )
        return pa.struct([_field(name, t) for name, t in zip(field_names, field_types, strict=True)])

    @staticmethod
    def TUPLE(field_types: Sequence[StateType]) -> pa.DataType:  # noqa: N802
        """A struct with fields ``f0, f1, ...``, like :meth:`ROW`."""
        return Types.ROW(field_types)

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> PickleType:  # noqa: N802
        """Any picklable Python object (:data:`PICKLE`)."""
        return PICKLE


def _field(name: str, t: StateType) -> pa.Field:
    if isinstance(t, PickleType):
        return t.field(name)
    if isinstance(t, pa.Field):
        return t.with_name(name)
    return pa.field(name, t)


def value_type(t: StateType) -> ValueType:
    """The engine's type of a state type: what snapshots record and values are encoded as.

    Raises:
        InvalidArgumentError: If ``t`` is not a type Weir can store.

    Examples:
        >>> value_type(pa.struct([("count", pa.int64()), ("names", pa.list_(pa.string()))]))
        ValueType(struct<count: int64, names: list<string>>)
        >>> value_type(pa.float16())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        weir.exceptions.InvalidArgumentError: arrow type Float16 cannot be a state type: use bool, ...
    """
    if isinstance(t, PickleType):
        return ValueType.pickle()
    if not hasattr(t, "__arrow_c_schema__"):
        raise InvalidArgumentError(
            f"{t!r} is not a state type: pass a pyarrow type (e.g. weir.Types.LONG() or pa.int64()) "
            "or weir.types.PICKLE (Types.PICKLED_BYTE_ARRAY()) for any Python object"
        )
    return ValueType.from_arrow(t)


def to_arrow_field(t: StateType, name: str = "value") -> pa.Field:
    """The Arrow field of a state type (pickle becomes tagged ``binary``).

    Examples:
        >>> to_arrow_field(PICKLE).metadata
        {b'weir.encoding': b'pickle'}
    """
    return _field(name, t)
