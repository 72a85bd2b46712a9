"""The ``weir`` namespace: every public name resolves, and importing it stays light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import weir


def test_every_public_name_resolves_to_the_object_of_its_module() -> None:
    assert set(weir.__all__) == {"__version__", *weir._EXPORTS}
    for name, module in weir._EXPORTS.items():
        assert getattr(weir, name) is getattr(importlib.import_module(module), name)
        assert name in dir(weir)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        weir.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as err:
        assert "NoSuchThing" in str(err)
    else:
        raise AssertionError("weir.NoSuchThing resolved")


def test_the_state_host_command_does_not_import_arrow() -> None:
    # The host is started by the first task on each executor: what its
    # command imports delays that task.
    probe = "import sys, weir.host; print(sorted({'pyarrow', 'numpy', 'pandas'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
