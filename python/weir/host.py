"""The executor-local state host process: ``weir-host`` (or ``python -m weir.host``).

Spark tasks start it on demand (the first task of an executor that needs
state) through :func:`weir._internal.connect_host`; it serves the keyed and
operator state of every subtask on the executor over a Unix socket in its
directory, runs snapshot uploads in the background, and exits when idle or
when its owner process (the Spark executor) is gone. The serving loop is the
Rust ``weir_host::server``; Python only parses the command line. The job
token comes in the ``WEIR_HOST_TOKEN`` environment variable, never on the
command line (which every user can read).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from weir import _internal

TOKEN_ENV = "WEIR_HOST_TOKEN"


def command() -> str:
    """The ``weir-host`` launcher installed with this package (next to the interpreter)."""
    beside = Path(sys.executable).with_name("weir-host")
    if beside.exists():
        return str(beside)
    found = shutil.which("weir-host")
    if found is None:
        raise FileNotFoundError(
            "the weir-host command is not installed: reinstall the weir package "
            "(pip install weir / maturin develop) so its console script is created"
        )
    return found


def main(argv: list[str] | None = None) -> int:
    """Parses the host's command line and serves until idle or orphaned."""
    parser = argparse.ArgumentParser(prog="weir-host", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, type=Path, help="the host directory (mode 0700)")
    parser.add_argument("--idle-timeout-millis", type=int, default=600_000)
    parser.add_argument("--owner-pid", type=int, default=None)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--poll-millis", type=int, default=200)
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV)
    if not token:
        print(f"weir-host: set the job token in {TOKEN_ENV}", file=sys.stderr)
        return 1
    return int(
        _internal.run_host(
            args.dir,
            token,
            args.idle_timeout_millis,
            args.owner_pid,
            args.work_dir,
            args.poll_millis,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
