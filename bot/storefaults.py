"""When stored state cannot be used: one line naming the cause and a fix that fits it, and
the record of a store whose writes are failing while the process runs.

Shared by the bot, the agent host and the relay. A folder is tried by writing in it
(:func:`folder_problem`), so the errno says why it is unusable: a read-only mount, a
foreign owner and a full disk each get their own advice (:func:`describe_folder`). A
database that SQLite cannot use gets the same treatment from its error code
(:func:`describe_database`).
"""

from __future__ import annotations

import errno
import getpass
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from bot.clock import SYSTEM_CLOCK, Clock

LOG_EVERY_S: Final = 60.0
"""A store that keeps failing is logged as ERROR at most this often."""
DATA_ERRORS: Final = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError,
                      sqlite3.ProgrammingError)
"""What SQLite raises for the data or the statement, not for the store failing."""
QUIET_S: Final = 30.0
"""A failing store is back once a write succeeds and none has failed for this long."""
PROBE_BYTES: Final = 4096
"""What the write check writes: one page, so that a full disk says so at start."""


@dataclass(frozen=True)
class Unusable:
    """Why stored state cannot be used, and what fixes it."""

    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.problem}; fix: {self.fix}"


def process_user() -> str:
    """The name (or id) of the user this process runs as."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.geteuid())


def folder_problem(path: Path) -> OSError | None:
    """Try to write a page in the folder ``path`` (and remove it): the error that stopped
    it, or ``None`` when the folder can be read and written."""
    probe = path / f".write-check-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, bytes(PROBE_BYTES))
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
        os.listdir(path)
    except OSError as exc:
        return exc
    return None


def describe_folder(what: str, path: Path, error: OSError, *, setting: str,
                    user: str | None = None) -> Unusable:
    """Why the folder ``what`` at ``path`` is unusable, from the errno of ``error``;
    ``setting`` names what points at it (``state.dir``, ``--data``)."""
    user = user or process_user()
    code = error.errno
    if code in (errno.EACCES, errno.EPERM):
        return Unusable(f"{what} {path} is not readable and writable by user {user}",
                        f"sudo chown -R {user} {path} && chmod 700 {path}")
    if code == errno.EROFS:
        return Unusable(f"cannot write in {what} {path}: read-only file system (the file "
                        "system is mounted read-only)",
                        "mount it read-write (a Docker volume or bind mount without :ro), or "
                        f"point {setting} at a writable folder")
    if code == errno.ENOSPC:
        return Unusable(f"cannot write in {what} {path}: no space left on device",
                        f"free some space on its disk (df -h {path})")
    if code == errno.EDQUOT:
        return Unusable(f"cannot write in {what} {path}: disk quota exceeded",
                        f"free some of user {user}'s files or raise the quota")
    if code == errno.EIO:
        return Unusable(f"cannot write in {what} {path}: input/output error",
                        "the disk or its file system is failing: check the system log "
                        f"(dmesg) and move {what} to a sound disk")
    if code == errno.ENOTDIR:
        return Unusable(f"{what} {path}: a part of that path is a file, not a folder",
                        f"point {setting} at a folder")
    cause = error.strerror.lower() if error.strerror else str(error)
    return Unusable(f"cannot write in {what} {path}: {cause}",
                    f"make {path} a folder that user {user} can write in, or point "
                    f"{setting} elsewhere")


def describe_database(what: str, path: Path, error: sqlite3.Error, *,
                      user: str | None = None) -> Unusable:
    """Why SQLite cannot use the database ``what`` at ``path``, from its error code."""
    user = user or process_user()
    code = getattr(error, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    cause = str(error)
    if primary == sqlite3.SQLITE_NOTADB:
        return Unusable(f"{what} {path} is not a SQLite database ({cause})",
                        "restore it from a backup, or move it away to start afresh")
    if primary == sqlite3.SQLITE_CORRUPT:
        return damaged(what, path, cause)
    if primary == sqlite3.SQLITE_FULL:
        return Unusable(f"cannot write {what} {path}: {cause}",
                        f"free some space on its disk (df -h {path.parent})")
    if primary == sqlite3.SQLITE_IOERR:
        return Unusable(f"cannot read or write {what} {path}: {cause}",
                        "the disk or its file system may be failing: check the system log "
                        "(dmesg)")
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return Unusable(f"{what} {path} is held by another process ({cause})",
                        "stop the other process that uses it")
    if primary == sqlite3.SQLITE_READONLY:
        return Unusable(f"{what} {path} cannot be written by user {user} ({cause})",
                        f"sudo chown -R {user} {path.parent} && chmod 600 {path}")
    return Unusable(f"cannot open {what} {path}: {cause}",
                    f"check that user {user} can read and write {path.parent}")


def describe_store(what: str, path: Path, error: sqlite3.Error | OSError, *, folder: str,
                   setting: str) -> Unusable:
    """Why the database ``what`` at ``path`` cannot be opened: its folder's own problem
    when it has one (read-only, full, foreign owner), else what SQLite said of the file."""
    if isinstance(error, OSError):
        return describe_folder(folder, path.parent, error, setting=setting)
    folder_error = folder_problem(path.parent)
    if folder_error is not None:
        return describe_folder(folder, path.parent, folder_error, setting=setting)
    return describe_database(what, path, error)


def damaged(what: str, path: Path, detail: str) -> Unusable:
    """The database ``what`` at ``path`` has damaged pages (``detail``: SQLite's words)."""
    return Unusable(f"{what} {path} is damaged ({detail})",
                    "restore it from a backup, or move it away to start afresh")


def failure_cause(error: BaseException) -> str:
    """The words of the library error behind ``error`` (``database or disk is full``)."""
    cause = error.__cause__ if error.__cause__ is not None else error
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return one_line(str(cause))


def one_line(text: str) -> str:
    """The first line of a library's message (PostgreSQL's run to several)."""
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else text


class StoreHealth:
    """Whether a store's writes succeed.

    Failures are logged as ERROR with their cause at most once every :data:`LOG_EVERY_S`.
    A full disk fails some writes and not others, so the store counts as back only when a
    write succeeds and none has failed for :data:`QUIET_S`; then, if a failure of that
    spell was logged, a line says so. Safe to call from any thread; ``on_change`` (the
    store starts failing, or is back) runs in the caller's.
    """

    def __init__(self, what: str, logger: logging.Logger, *, clock: Clock = SYSTEM_CLOCK,
                 on_change: Callable[[], None] | None = None) -> None:
        self.what = what
        self.clock = clock
        self.on_change = on_change or (lambda: None)
        self._log = logger
        self.failing_since: float | None = None
        """When the current spell of failures began; ``None`` while the store is fine."""
        self.cause: str | None = None
        self._failed_at = 0.0
        self._wrote_at: float | None = None
        """The last write that succeeded during the spell."""
        self._logged_at: float | None = None
        self._unlogged = 0
        """Failures since the last one logged."""
        self._announced = False
        """Whether a failure of the current spell was logged."""
        self._lock = threading.Lock()

    def failed(self, error: BaseException) -> None:
        """A read or write failed: counted when the store itself failed (full, locked,
        I/O), not when SQLite refused the data or the statement (a constraint)."""
        cause = error.__cause__ if error.__cause__ is not None else error
        if isinstance(cause, DATA_ERRORS):
            return
        with self._lock:
            started = self._failed(error)
        if started:
            self.on_change()

    def _failed(self, error: BaseException) -> bool:
        now = self._failed_at = self.clock.time()
        self.cause = failure_cause(error)
        started = self.failing_since is None
        if started:
            self.failing_since = now
            self._announced = False
        if self._logged_at is not None and now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            return started
        if self._unlogged:
            self._log.error("%s is failing: %s (%d failures in the last %.0f s)", self.what,
                            self.cause, self._unlogged + 1, now - (self._logged_at or now))
        else:
            self._log.error("%s is failing: %s", self.what, self.cause)
        self._logged_at = now
        self._unlogged = 0
        self._announced = True
        return started

    def wrote(self) -> None:
        """A write was committed."""
        if self.failing_since is None:  # the usual case, without taking the lock
            return
        with self._lock:
            self._wrote_at = self.clock.time()
        self._end_spell()

    def _end_spell(self) -> None:
        """Say the store is back if a write succeeded after the last failure, and no write
        has failed for :data:`QUIET_S`."""
        with self._lock:
            now = self.clock.time()
            if (self.failing_since is None or self._wrote_at is None
                    or self._wrote_at < self._failed_at or now - self._failed_at < QUIET_S):
                return
            failed_for = self._failed_at - self.failing_since
            self.failing_since = self.cause = self._wrote_at = None
            announced = self._announced
        if announced:
            self._log.warning("%s writes again (it failed for %.0f s)", self.what, failed_for)
        self.on_change()

    def summary(self) -> str:
        """``ok``, or ``failing since 12:01 UTC (database or disk is full)``."""
        self._end_spell()
        since, cause = self.failing_since, self.cause
        if since is None:
            return "ok"
        return f"failing since {clock_time(since)} ({cause})"

    def status(self) -> dict[str, object]:
        """For a status file: ``failing_since`` (seconds) and ``cause``, both null if ok."""
        self._end_spell()
        with self._lock:
            return {"failing_since": self.failing_since, "cause": self.cause}


def clock_time(moment: float) -> str:
    """``12:01 UTC``: when something started, as a person reads it in a status line."""
    return datetime.fromtimestamp(moment, UTC).strftime("%H:%M UTC")
