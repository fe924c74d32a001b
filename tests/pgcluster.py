"""A throwaway PostgreSQL cluster for the tests and the benchmarks: ``initdb`` in a
temporary folder, the server on a free loopback port, stopped and removed afterwards.

PostgreSQL refuses to run as root: as root, the cluster belongs to the ``postgres`` user
that Debian's package creates. ``.ci/run`` starts one for the whole run
(``python3 tests/pgcluster.py start DIR`` prints its URL, ``stop DIR`` ends it) and passes
its URL in ``SKALD_TEST_POSTGRES_URL``; without that variable the tests start their own.
Standard library only, so that ``.ci/run`` can call it before any virtual environment.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
from pathlib import Path

URL_VARIABLE = "SKALD_TEST_POSTGRES_URL"
SUPERUSER = "skald"
INSTALL_HINT = ("PostgreSQL's server programs are needed (initdb, pg_ctl): on Debian or "
                "Ubuntu, apt-get install postgresql")
# Speed over durability: a test cluster lives for one run, and what the tests check is
# the store's meaning, not PostgreSQL's own crash safety.
SERVER_OPTIONS = ("-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                  "-c max_connections=300 -c listen_addresses=127.0.0.1")


class ClusterError(Exception):
    """The cluster could not be started or stopped; the message says why in one line."""


def server_program(name: str) -> Path:
    """``initdb`` or ``pg_ctl``: from ``$PG_BIN``, the newest of Debian's
    ``/usr/lib/postgresql/*/bin``, else ``PATH``."""
    candidates = []
    if os.environ.get("PG_BIN"):
        candidates.append(Path(os.environ["PG_BIN"]) / name)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    candidates += [folder / name for folder in reversed(versions)]
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise ClusterError(INSTALL_HINT)


def _as_owner(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ClusterError("running as root needs the 'postgres' user to own the cluster; "
                           + INSTALL_HINT) from None
    return ["runuser", "-u", "postgres", "--", *argv]


def _run(argv: list[str]) -> None:
    done = subprocess.run(_as_owner(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["?"]
        raise ClusterError(f"{Path(argv[0]).name} failed: {last[0]}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


DURABLE_OPTIONS = "-c max_connections=300 -c listen_addresses=127.0.0.1"
"""A server that waits for its disk as a production one does (for measurements)."""


def start(folder: Path, options: str = SERVER_OPTIONS) -> str:
    """Start a cluster in ``folder`` (made if missing) with the server ``options``; its
    URL."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data, port = folder / "data", _free_port()
    _run([str(server_program("initdb")), "-D", str(data), "-U", SUPERUSER, "-A", "trust",
          "--no-sync", "-E", "UTF8", "--locale=C"])
    _run([str(server_program("pg_ctl")), "-D", str(data), "-l", str(folder / "server.log"),
          "-w", "-t", "60", "-o", f"-p {port} -k {folder} {options}", "start"])
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"


def halt(folder: Path) -> None:
    """Stop the cluster in ``folder`` as an operator does (its sessions cut off, what
they committed kept), keeping its data."""
    _run([str(server_program("pg_ctl")), "-D", str(folder / "data"), "-m", "fast",
          "-w", "stop"])


def resume(folder: Path, url: str) -> None:
    """Start again the cluster :func:`halt` stopped, on the port of its ``url``."""
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    _run([str(server_program("pg_ctl")), "-D", str(folder / "data"), "-l",
          str(folder / "server.log"), "-w", "-t", "60", "-o",
          f"-p {port} -k {folder} {SERVER_OPTIONS}", "start"])


def stop(folder: Path) -> None:
    """Stop the cluster in ``folder`` and remove it."""
    data = folder / "data"
    if (data / "postmaster.pid").exists():
        _run([str(server_program("pg_ctl")), "-D", str(data), "-m", "immediate", "-w",
              "stop"])
    shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in {"start", "stop"}:
        print("usage: pgcluster.py start|stop DIR", file=sys.stderr)
        return 2
    try:
        if argv[0] == "start":
            print(start(Path(argv[1])))
        else:
            stop(Path(argv[1]))
    except ClusterError as exc:
        print(f"pgcluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
