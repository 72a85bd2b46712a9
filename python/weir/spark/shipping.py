"""Getting user functions to the Python workers.

Jobs often define their functions in scripts or example modules that are
importable in the driver only. Weir's own modules are installed everywhere,
and installed libraries are left to import normally.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark import cloudpickle


def ship_by_value(function: Any) -> None:
    """Pickles the modules of ``function`` (and of functions it wraps) by value."""
    seen: set[int] = set()
    pending = [function]
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        module = sys.modules.get(type(obj).__module__)
        if module is None or not _is_user_module(module.__name__, getattr(module, "__file__", None)):
            continue
        if module.__name__ != "__main__":
            cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
        pending.extend(vars(obj).values() if hasattr(obj, "__dict__") else ())


def _is_user_module(name: str, path: str | None) -> bool:
    if name == "__main__":
        return True
    if name.split(".")[0] in {"weir", "builtins", "pyspark", "pyarrow"} or path is None:
        return False
    return "site-packages" not in path and not path.startswith(sys.base_prefix)
