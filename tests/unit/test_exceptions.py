"""weir.exceptions: one hierarchy rooted at WeirError, defined by the native module."""

from __future__ import annotations

import pickle

import pytest

import weir
from weir import _internal, exceptions
from weir.exceptions import (
    CheckpointError,
    InvalidArgumentError,
    SavepointFormatError,
    StateBackendError,
    StateError,
    StateLostError,
    WeirError,
)


def test_every_exported_exception_is_a_weir_error_in_weir_exceptions() -> None:
    for name in exceptions.__all__:
        cls = getattr(exceptions, name)
        assert issubclass(cls, WeirError), name
        assert cls.__module__ == "weir.exceptions", name
        assert cls.__name__ == name
        assert cls.__doc__, name
        assert cls is getattr(_internal, name)


@pytest.mark.parametrize(
    ("cls", "parents"),
    [
        (WeirError, (Exception,)),
        (StateError, (WeirError,)),
        (StateBackendError, (WeirError,)),
        (StateLostError, (StateBackendError,)),
        (CheckpointError, (WeirError,)),
        (SavepointFormatError, (CheckpointError,)),
        (InvalidArgumentError, (WeirError, ValueError)),
    ],
)
def test_hierarchy(cls: type[Exception], parents: tuple[type[Exception], ...]) -> None:
    assert cls.__bases__ == parents


def test_invalid_argument_error_is_caught_as_value_error_and_weir_error() -> None:
    with pytest.raises(ValueError):
        weir.key_group_range(128, 0, 0)
    with pytest.raises(WeirError):
        weir.key_group_range(128, 0, 0)


def test_exceptions_can_be_raised_from_python_with_a_message() -> None:
    with pytest.raises(StateLostError, match="host gone") as caught:
        raise StateLostError("host gone")
    assert isinstance(caught.value, StateBackendError)


def test_weir_error_is_exported_at_top_level() -> None:
    assert weir.WeirError is WeirError


@pytest.mark.parametrize("name", exceptions.__all__)
def test_exceptions_survive_pickling(name: str) -> None:
    # Errors raised in Spark's Python workers cross process boundaries pickled.
    cls = getattr(exceptions, name)
    restored = pickle.loads(pickle.dumps(cls("subtask 3 lost its state")))
    assert type(restored) is cls
    assert restored.args == ("subtask 3 lost its state",)


def test_raised_invalid_argument_error_survives_pickling() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        weir.key_group_range(1, 2, 0)
    restored = pickle.loads(pickle.dumps(caught.value))
    assert type(restored) is InvalidArgumentError
    assert str(restored) == str(caught.value)
