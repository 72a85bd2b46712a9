"""Raw state: bytes a function writes itself, per key group or per subtask.

Weir keeps raw state in two reserved operator states of the subtask, so it
travels in checkpoints and savepoints like operator state: raw keyed state
as ``(key group, bytes)`` items in union redistribution (on restore each
subtask keeps the key groups it owns, so it rescales by key group like
managed keyed state), raw operator state as byte items split evenly over
the new subtasks. As in Flink, what a snapshot writes replaces what was
there; a function that reads raw state but writes none at the next
snapshot keeps it as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from weir.exceptions import InvalidArgumentError, StateError
from weir.functions import RawKeyedStateOutput, RawOperatorStateOutput
from weir.types import Types, value_type

if TYPE_CHECKING:
    from weir._internal import Session

__all__ = ["RAW_KEYED_STATE", "RAW_OPERATOR_STATE", "RawState"]

RAW_KEYED_STATE: Final = "__weir_raw_keyed"
"""The operator state holding a subtask's raw keyed state."""
RAW_OPERATOR_STATE: Final = "__weir_raw_operator"
"""The operator state holding a subtask's raw operator state."""

_KEYED_ITEM = value_type(
    Types.ROW_NAMED(["key_group", "data"], [Types.INT(), Types.PRIMITIVE_ARRAY(Types.BYTE())])
)
_OPERATOR_ITEM = value_type(Types.PRIMITIVE_ARRAY(Types.BYTE()))


class _KeyedOutput(RawKeyedStateOutput):
    def __init__(self, key_groups: tuple[int, int]) -> None:
        self._range = key_groups
        self.parts: dict[int, bytes] = {}

    def write(self, key_group: int, data: bytes) -> None:
        start, end = self._range
        if not start <= key_group < end:
            raise InvalidArgumentError(
                f"key group {key_group} is not this subtask's (it owns {start}..{end - 1}): write raw "
                "keyed state only for key groups of the keys this subtask processes"
            )
        if not isinstance(data, bytes | bytearray):
            raise InvalidArgumentError(f"raw state is bytes, got {type(data).__name__}")
        self.parts[key_group] = bytes(data)


class _OperatorOutput(RawOperatorStateOutput):
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not isinstance(data, bytes | bytearray):
            raise InvalidArgumentError(f"raw state is bytes, got {type(data).__name__}")
        self.parts.append(bytes(data))


class RawState:
    """A subtask's raw state, registered with the session on first use."""

    def __init__(self, session: Session, *, keyed: bool) -> None:
        self._session = session
        self._is_keyed = keyed
        self._keyed_id: int | None = None
        self._operator_id: int | None = None
        self._keyed_in: dict[int, bytes] | None = None
        self._operator_in: list[bytes] | None = None
        self._keyed_out: _KeyedOutput | None = None
        self._operator_out: _OperatorOutput | None = None

    def _key_groups(self) -> tuple[int, int]:
        start, end = self._session.key_group_range()
        return start, end

    def _keyed(self) -> int:
        if self._keyed_id is None:
            self._keyed_id = self._session.register_operator_state(RAW_KEYED_STATE, "union", _KEYED_ITEM)
        return self._keyed_id

    def _operator(self) -> int:
        if self._operator_id is None:
            self._operator_id = self._session.register_operator_state(
                RAW_OPERATOR_STATE, "split", _OPERATOR_ITEM
            )
        return self._operator_id

    def _check_keyed(self) -> None:
        if not self._is_keyed:
            raise StateError(
                "raw keyed state needs a keyed stream: key_by(...) before process(...), or use raw "
                "operator state"
            )

    def keyed_inputs(self) -> dict[int, bytes]:
        """This subtask's key groups' raw keyed state."""
        self._check_keyed()
        if self._keyed_in is None:
            start, end = self._key_groups()
            items: list[Any] = self._session.operator_state(self._keyed())
            self._keyed_in = {int(kg): bytes(data) for kg, data in items if start <= kg < end}
        return dict(self._keyed_in)

    def operator_inputs(self) -> list[bytes]:
        """The raw operator state parts this subtask got."""
        if self._operator_in is None:
            self._operator_in = [bytes(part) for part in self._session.operator_state(self._operator())]
        return list(self._operator_in)

    def keyed_output(self) -> RawKeyedStateOutput:
        """A fresh output for this snapshot's raw keyed state."""
        self._check_keyed()
        self._keyed()
        self._keyed_out = _KeyedOutput(self._key_groups())
        return self._keyed_out

    def operator_output(self) -> RawOperatorStateOutput:
        """A fresh output for this snapshot's raw operator state."""
        self._operator()
        self._operator_out = _OperatorOutput()
        return self._operator_out

    def write(self) -> None:
        """Stores what this snapshot wrote (or, if nothing, what the subtask holds:
        after a rescale only its own key groups stay). What is stored becomes what
        later writes keep, until a snapshot writes again."""
        if self._keyed_id is not None:
            parts = self._keyed_out.parts if self._keyed_out is not None else self.keyed_inputs()
            self._session.set_operator_state(self._keyed_id, sorted(parts.items()))
            self._keyed_in = dict(parts)
        if self._operator_id is not None:
            blobs = self._operator_out.parts if self._operator_out is not None else self.operator_inputs()
            self._session.set_operator_state(self._operator_id, blobs)
            self._operator_in = list(blobs)
        self._keyed_out = self._operator_out = None
