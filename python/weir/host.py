"""The state host: the ``weir-host`` process (or ``python -m weir.host``) and the driver's controls.

Spark tasks start a host on demand (the first task on an executor that needs
state) through :func:`weir._internal.connect_host`: one host per executor,
in a directory the caller gives each executor. It serves the keyed and
operator state of the subtasks it owns over a Unix socket in its directory
and, when started with ``--listen host:port``, over TCP for tasks on other
executors (the bound address is written to ``<dir>/address``). It runs
snapshot uploads in the background and lives as long as its job: it exits
when its owner process (the Spark executor) is gone, on SIGTERM or SIGINT, or
when the driver calls :func:`shutdown`, and removes its socket, address file
and working files on the way out; leaving because its owner is gone or on
shutdown, its directory too (a signal leaves the directory and its log). The
serving loop is the Rust ``weir_host::server``, run either by the package's
native ``bin/weir-host`` (what tasks start when the package has it) or by
this module's launcher, where Python only parses the command line. The job
token comes in the ``WEIR_HOST_TOKEN`` environment variable, never on the
command line (which every user can read).

The functions below are the driver's controls of a host it knows the address
of (a Unix socket path, or ``host:port``); each connects, proves the job token
and sends one request.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from weir import _internal
from weir._internal import TlsFiles

TOKEN_ENV = "WEIR_HOST_TOKEN"


NATIVE_HOST = Path(__file__).with_name("bin") / "weir-host"
"""The native ``weir-host`` binary, in the package when it was built with ``make build`` or
``make wheel``. It accepts connections about 5 ms after it starts, the Python launcher about
50 ms (an interpreter, then imports and the 70 MB extension), and the first task on each
executor waits for its host: on ``local-cluster``'s busy first epoch that task's attach took
330-420 ms with the launcher, 30-42 ms with the binary."""


def command() -> str:
    """The program that starts a state host: the package's native binary (:data:`NATIVE_HOST`)
    if it has one, else the ``weir-host`` launcher installed with the package (next to the
    interpreter, else on ``PATH``), which serves the same way from the extension."""
    if os.access(NATIVE_HOST, os.X_OK):
        return str(NATIVE_HOST)
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


def owner_address(session: _internal.Session) -> str | None:
    """Where tasks on other executors reach the state of ``session``'s subtask.

    The TCP address (``host:port``) of the host serving the session, which a
    task announces to the driver as the owner of its subtask; ``None`` if that
    host does not listen on TCP.
    """
    return _internal.host_address(session)


def shutdown(address: str, token: str, *, timeout_s: float = 60.0, tls: TlsFiles | None = None) -> bool:
    """Stops the host at ``address``; returns ``False`` if none answers there.

    The host cancels its uploads (deleting the files they wrote) before it
    answers, then drops its state, removes its files and exits. The driver
    calls this when a job closes.
    """
    return bool(_internal.shutdown_host(address, token, timeout_s=timeout_s, tls=tls))


def abort_checkpoint(
    address: str, token: str, checkpoint_id: int, *, timeout_s: float = 60.0, tls: TlsFiles | None = None
) -> int:
    """Cancels the host's uploads of an aborted checkpoint; returns once their files are deleted.

    Returns how many uploads were canceled.
    """
    return int(_internal.abort_host_checkpoint(address, token, checkpoint_id, timeout_s=timeout_s, tls=tls))


def start_generation(
    address: str, token: str, generation: int, *, timeout_s: float = 60.0, tls: TlsFiles | None = None
) -> None:
    """Makes the host serve ``generation`` of the job: it drops older generations' state.

    Tasks carry their generation too, so a host moves on by itself at the first
    task of a new generation; this frees the old state before that.
    """
    _internal.start_host_generation(address, token, generation, timeout_s=timeout_s, tls=tls)


def status(
    address: str, token: str, *, timeout_s: float = 60.0, tls: TlsFiles | None = None
) -> dict[str, Any]:
    """What the host holds and does (its pid, TCP address, generation, subtasks, uploads)."""
    result: dict[str, Any] = json.loads(
        _internal.host_status_at(address, token, timeout_s=timeout_s, tls=tls)
    )
    return result


def main(argv: list[str] | None = None) -> int:
    """Parses the host's command line and serves until the owner is gone, a signal, or shutdown."""
    parser = argparse.ArgumentParser(prog="weir-host", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", required=True, type=Path, help="the host directory (mode 0700), one per executor"
    )
    parser.add_argument("--owner-pid", type=int, default=None, help="exit when this process is gone")
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--poll-millis", type=int, default=200, help="how often to check the owner")
    parser.add_argument(
        "--listen", default=None, help="also listen on TCP at host:port (port 0: any free port)"
    )
    tls = parser.add_argument_group("TLS", "serve TCP over TLS and ack to an https:// coordinator")
    tls.add_argument("--tls-ca", type=Path, default=None, help="PEM certificates of the trusted authorities")
    tls.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate chain this host presents")
    tls.add_argument("--tls-key", type=Path, default=None, help="PEM private key of --tls-cert")
    tls.add_argument("--tls-server-name", default=None, help="the name clients expect in certificates")
    parser.add_argument(
        "--remove-empty-parent",
        action="store_true",
        help="on shutdown (the end of the job), also remove the directory's parent if it is left empty",
    )
    args = parser.parse_args(argv)
    files = (args.tls_ca, args.tls_cert, args.tls_key)
    if any(files) and not all(files):
        parser.error("--tls-ca, --tls-cert and --tls-key go together")
    token = os.environ.get(TOKEN_ENV)
    if not token:
        print(f"weir-host: set the job token in {TOKEN_ENV}", file=sys.stderr)
        return 1
    return int(
        _internal.run_host(
            args.dir,
            token,
            owner_pid=args.owner_pid,
            work_dir=args.work_dir,
            poll_ms=args.poll_millis,
            listen=args.listen,
            tls=TlsFiles(*files, server_name=args.tls_server_name) if all(files) else None,
            remove_empty_parent=args.remove_empty_parent,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
