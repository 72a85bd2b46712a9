"""The ``weir`` command (or ``python -m weir.cli``): inspect, dump, verify and dispose
checkpoints and savepoints.

``pip install weir`` puts it next to the interpreter. The command itself is the
Rust ``weir_cli`` crate inside the extension, so it is the same program as the
``weir`` binary a Cargo build makes; ``weir --help`` lists the verbs.
"""

from __future__ import annotations

import sys

from weir import _internal


def main(argv: list[str] | None = None) -> int:
    """Runs the command line ``argv`` (default: this process's) and returns its exit status."""
    return _internal.run_cli(["weir", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
