"""Every public symbol of the native module is wrapped by the Python package or listed as private.

A native function or class that nothing in ``python/weir`` uses is either dead
or reachable only through the private ``weir._internal``; both are bugs.
"""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import weir
from weir import _internal

PACKAGE_DIR = Path(weir.__file__).parent

# Native names that are deliberately not part of any wrapper, with the reason.
PRIVATE: dict[str, str] = {
    "Session": "returned by LocalOperator.session() (and the state host client); weir.runtime drives it",
    "KeyBatch": "returned by Session.keys(); only passed back into Session methods",
    "ExportedArray": "returned by Session.get_batch() and aggregate(); weir.runtime imports it",
    "host_status": "diagnostics of a state host session (what it holds and does), for people and tests",
    "host_exit_already_running": "the exit code contract of the weir-host process, for its launchers",
}


def native_names_used_by_wrappers() -> set[str]:
    """Names taken from ``weir._internal`` by ``from weir._internal import ...`` or ``_internal.<name>``."""
    used: set[str] = set()
    for path in PACKAGE_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "weir._internal":
                used.update(alias.name for alias in node.names)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "_internal"
            ):
                used.add(node.attr)
    return used


def test_every_native_symbol_is_wrapped_or_private() -> None:
    native = {name for name in dir(_internal) if not name.startswith("_")}
    unwrapped = native - native_names_used_by_wrappers() - PRIVATE.keys()
    assert not unwrapped, (
        f"wrap these in python/weir or list them in PRIVATE with a reason: {sorted(unwrapped)}"
    )


def test_wrappers_only_use_names_the_native_module_has() -> None:
    missing = native_names_used_by_wrappers() - set(dir(_internal))
    assert not missing, f"python/weir uses names weir._internal lacks: {sorted(missing)}"


def test_version_is_the_installed_distribution_version() -> None:
    assert weir.__version__ == _internal.__version__ == importlib.metadata.version("weir")
