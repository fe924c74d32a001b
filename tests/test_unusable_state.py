"""Stored state that cannot be used (a read-only mount, a full disk, a foreign owner, a file
that is not a database) is one line on stderr naming the cause, with advice that fits the
cause, from every command that opens state: the bot, the agent host and the relay, each
as a real process.

A read-only mount and a full disk are made for the command's process alone: it runs in a
mount namespace of its own (``unshare``), where its state folder is bound read-only or
covered by a small filled tmpfs.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_state_folder import cli, foreign_folder, write_config

from bot.agenthost.store import DB_NAME as AGENT_DB
from bot.relay.queue import DB_NAME as QUEUE_DB
from bot.storefaults import describe_database, describe_folder, folder_problem

ROOT = Path(__file__).resolve().parent.parent

READ_ONLY = 'mount --bind -o ro "$0" "$0" && exec "$@"'
"""The folder ``$0`` bound read-only over itself, then the command."""
FULL = ('mount -t tmpfs -o size=256k,mode=0700 tmpfs "$0"'
        ' && (head -c 1048576 /dev/zero > "$0/filler"; true) 2> /dev/null && exec "$@"')
"""A 256 KiB tmpfs over the folder ``$0``, filled, then the command."""


@functools.cache
def namespaces() -> list[str]:
    """``unshare`` options for a mount namespace this process may mount in: its own as
    root, else in a user namespace of its own where it is root (as in a container without
    the right to mount)."""
    unshare = shutil.which("unshare")
    assert unshare, "unshare (util-linux) is needed to mount a folder for one process"
    for options in (["--mount"], ["--mount", "--map-root-user"]):
        tried = subprocess.run([unshare, *options, "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
                               capture_output=True, timeout=30)
        if tried.returncode == 0:
            return [unshare, *options]
    raise AssertionError("no mount namespace may be made here: neither root's right to "
                         "mount nor user namespaces")


def unshare_command(script: str, folder: Path, command: list[str]) -> list[str]:
    """``command`` in a mount namespace of its own where ``script`` first mounts something
    on ``folder``."""
    return [*namespaces(), "sh", "-c", script, str(folder), *command]


def confined(args: list[str], tmp: Path, folder: Path,
             script: str) -> subprocess.CompletedProcess[str]:
    """Run ``skald-telegram ARGS`` where ``script`` has made ``folder`` unusable."""
    command = unshare_command(script, folder, [sys.executable, "-m", "bot", *args])
    return subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line a failed command printed on stderr."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def bot_state(tmp: Path) -> tuple[Path, list[str]]:
    """A bot's state folder with its identity and database, and its config option."""
    state = tmp / "state"
    config = write_config(tmp, state)
    assert cli(["identity", "--config", str(config)], tmp).returncode == 0
    from bot.store import Store
    Store.open(state / "skald-telegram.sqlite3").close()
    return state, ["--config", str(config)]


def agent_state(tmp: Path) -> Path:
    from bot.agenthost.store import AgentStore
    state = tmp / "agent"
    AgentStore(state).close()
    return state


def relay_data(tmp: Path) -> Path:
    from bot.relay.queue import RelayQueue
    data = tmp / "relay"
    RelayQueue.open(data).close()
    return data


COMMANDS = ["run", "audit", "identity", "pair", "agent serve", "agent serve (first start)",
            "relay", "relay (first start)"]


def command_for(name: str, tmp: Path) -> tuple[list[str], Path]:
    """The command line ``name`` and the folder it keeps its state in, made ready."""
    if name in ("run", "audit", "identity"):
        state, config = bot_state(tmp)
        return [name, *config], state
    if name == "pair":  # a valid link, so that pair reaches the state folder
        from bot.protocol.identity import Identity
        from bot.protocol.pairing import format_pairing_uri
        state, config = bot_state(tmp)
        link = format_pairing_uri("ws://127.0.0.1:9/v1/connect", Identity.generate("a").card,
                                  bytes(16))
        return ["pair", *config, "--chat", "1", link], state
    if name == "agent serve":
        return ["agent", "serve", "--state", str(agent_state(tmp))], tmp / "agent"
    if name == "agent serve (first start)":
        folder = tmp / "agent"
        folder.mkdir(mode=0o700)
        return ["agent", "serve", "--state", str(folder), "--relay",
                "ws://127.0.0.1:9/v1/connect"], folder
    if name == "relay":
        return ["relay", "--port", "0", "--data", str(relay_data(tmp))], tmp / "relay"
    folder = tmp / "relay"
    folder.mkdir()
    return ["relay", "--port", "0", "--data", str(folder)], folder


@pytest.mark.parametrize("name", COMMANDS)
def test_a_read_only_state_folder_says_read_only_and_not_chown(
    tmp_path: Path, name: str
) -> None:
    args, folder = command_for(name, tmp_path)
    line = one_line(confined(args, tmp_path, folder, READ_ONLY))
    assert str(folder) in line and "read-only file system" in line, line
    assert "mounted read-only" in line and "mount it read-write" in line
    assert "chown" not in line and "chmod" not in line


def test_doctor_says_read_only_with_the_fix_that_fits(tmp_path: Path) -> None:
    state, config = bot_state(tmp_path)
    result = confined(["doctor", *config], tmp_path, state, READ_ONLY)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    checks = result.stdout.split("\n✗ ")
    folder = next(c for c in checks if c.startswith("state folder:"))
    assert "read-only file system" in folder and "mount it read-write" in folder
    assert "chown" not in result.stdout


@pytest.mark.parametrize("name", ["run", "agent serve (first start)", "relay (first start)"])
def test_a_full_disk_at_start_says_so_and_how_to_free_space(tmp_path: Path, name: str) -> None:
    args, folder = command_for(name, tmp_path)
    line = one_line(confined(args, tmp_path, folder, FULL))
    assert "no space left on device" in line and "free some space" in line, line
    assert "chown" not in line


@pytest.mark.parametrize("name", ["agent serve", "relay"])
def test_a_foreign_state_folder_gets_the_ownership_fix(tmp_path: Path, name: str) -> None:
    args, folder = command_for(name, tmp_path)
    shutil.rmtree(folder)
    foreign_folder(folder)
    line = one_line(cli(args, tmp_path, unprivileged=True))
    assert "not readable and writable by user" in line and "chown -R" in line, line


@pytest.mark.parametrize("name", ["audit", "agent serve", "relay"])
def test_a_file_that_is_not_a_database_says_so(tmp_path: Path, name: str) -> None:
    args, folder = command_for(name, tmp_path)
    database = {"agent serve": AGENT_DB, "relay": QUEUE_DB}.get(name, "skald-telegram.sqlite3")
    for leftover in folder.glob(f"{database}-*"):
        leftover.unlink()
    (folder / database).write_bytes(b"this is not a database\n" * 400)
    line = one_line(cli(args, tmp_path))
    assert "is not a SQLite database (file is not a database)" in line, line
    assert "restore it from a backup" in line


def test_a_writable_folder_has_no_problem(tmp_path: Path) -> None:
    assert folder_problem(tmp_path) is None
    assert list(tmp_path.iterdir()) == []  # the write check leaves nothing behind


@pytest.mark.parametrize(("code", "cause", "fix"), [
    (errno.EROFS, "read-only file system (the file system is mounted read-only)",
     "mount it read-write"),
    (errno.EACCES, "is not readable and writable by user ada", "sudo chown -R ada /s"),
    (errno.EPERM, "is not readable and writable by user ada", "chmod 700 /s"),
    (errno.ENOSPC, "no space left on device", "free some space on its disk (df -h /s)"),
    (errno.EDQUOT, "disk quota exceeded", "raise the quota"),
    (errno.EIO, "input/output error", "check the system log"),
    (errno.ENOTDIR, "a part of that path is a file", "point state.dir at a folder"),
    (errno.ELOOP, "too many levels of symbolic links", "point state.dir elsewhere"),
])
def test_each_errno_gets_its_cause_and_its_own_advice(code: int, cause: str, fix: str) -> None:
    unusable = describe_folder("the state folder", Path("/s"), OSError(code, os.strerror(code)),
                               setting="state.dir", user="ada")
    assert cause in unusable.problem and fix in unusable.fix
    assert ("chown" in unusable.fix) == (code in (errno.EACCES, errno.EPERM))
    assert str(unusable) == f"{unusable.problem}; fix: {unusable.fix}"


def sqlite_error(tmp: Path, make: str) -> sqlite3.Error:
    """A real error from SQLite of the kind ``make`` names."""
    path = tmp / "db.sqlite3"
    db = sqlite3.connect(path, isolation_level=None, timeout=0)
    db.execute("CREATE TABLE t (x)")
    try:
        if make == "full":
            db.execute("PRAGMA max_page_count=2")
            db.execute("INSERT INTO t VALUES (zeroblob(100000))")
        elif make == "busy":
            other = sqlite3.connect(path, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            db.execute("BEGIN IMMEDIATE")
        elif make == "readonly":
            sqlite3.connect(f"file:{path}?mode=ro", uri=True).execute("INSERT INTO t VALUES (1)")
        elif make == "notadb":
            (tmp / "junk").write_bytes(b"junk" * 1000)
            sqlite3.connect(tmp / "junk").execute("SELECT * FROM sqlite_master")
    except sqlite3.Error as exc:
        return exc
    raise AssertionError(f"no {make} error")


@pytest.mark.parametrize(("make", "cause", "fix"), [
    ("full", "cannot write the queue /q/db: database or disk is full", "free some space"),
    ("busy", "is held by another process (database is locked)", "stop the other process"),
    ("readonly", "cannot be written by user ada (attempt to write a readonly database)",
     "sudo chown -R ada /q"),
    ("notadb", "is not a SQLite database (file is not a database)", "restore it from a backup"),
])
def test_each_sqlite_error_gets_its_cause_and_its_own_advice(
    tmp_path: Path, make: str, cause: str, fix: str
) -> None:
    error = sqlite_error(tmp_path, make)
    unusable = describe_database("the queue", Path("/q/db"), error, user="ada")
    assert cause in unusable.problem and fix in unusable.fix, unusable
