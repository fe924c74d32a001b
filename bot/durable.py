"""Opening a SQLite file the same way everywhere: the bot's state, the relay's queue and
the agent host's state.

:func:`open_sqlite` creates the folder (0700) and the file (0600) before SQLite touches
them, so nothing is ever readable by others (SQLite gives ``-wal`` and ``-shm`` the file's
mode); sets the pragmas every store wants (WAL, commits that wait for the disk, undo pages
in memory); checks the pages when asked (:func:`check_integrity`); and brings the schema
to its version with :func:`migrate`. The version lives in ``PRAGMA user_version``; a
migration step is a list of statements (or a function), and the steps a file needs run
in one transaction.

Failures are classified once: :func:`bot.errors.store_error` tells "try again later"
(:class:`~bot.errors.StoreUnavailable`) from "broken" (:class:`~bot.errors.StoreError`),
and :mod:`bot.storefaults` says why in one line with its fix.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bot.errors import StoreError, store_error
from bot.storefaults import damaged, describe_folder, describe_store, folder_problem

log = logging.getLogger(__name__)

Step = Sequence[str] | Callable[[sqlite3.Connection], None]
"""One migration step: statements run in order, or a function given the connection."""

CHECK_STEPS: Final = 10_000
"""SQLite steps between two looks at the clock during the integrity check."""
BUSY_TIMEOUT_S: Final = 5.0
"""How long a statement waits for another connection's write lock before it fails."""


@dataclass(frozen=True)
class Place:
    """How a store's failures name it: the database (``the relay queue``), its folder
    (``the relay's data folder``) and the setting that points at that folder (``--data``)."""

    what: str
    folder: str
    setting: str

    def unusable(self, path: Path, error: sqlite3.Error | OSError) -> str:
        """One line saying why the database at ``path`` cannot be opened, with the fix."""
        return str(describe_store(self.what, path, error, folder=self.folder,
                                  setting=self.setting))


def open_sqlite(path: Path, place: Place, steps: Sequence[Step], *,
                pragmas: Sequence[str] = (), check_s: float | None = None) -> sqlite3.Connection:
    """Open (creating if needed) the database at ``path``: private files, WAL, commits
    that wait for the disk, ``pragmas`` on top, the pages checked for up to ``check_s``
    (when given), and the schema brought to ``len(steps)``. Raises
    :class:`~bot.errors.StoreError` (or :class:`~bot.errors.StoreUnavailable`) saying why
    in one line."""
    private_folder(path.parent, place)
    try:
        create_private(path)
    except OSError as exc:
        raise StoreError(place.unusable(path, exc)) from exc
    try:
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                     check_same_thread=False)
    except sqlite3.Error as exc:
        raise store_error(place.unusable(path, exc), exc) from exc
    try:
        for pragma in ("journal_mode=WAL", "synchronous=FULL",
                       "temp_store=MEMORY", *pragmas):  # undo pages in memory, not a file
            connection.execute(f"PRAGMA {pragma}")
        if check_s is not None:
            check_integrity(connection, path, place.what, check_s)
        migrate(connection, path, steps)
    except sqlite3.Error as exc:
        connection.close()
        raise store_error(place.unusable(path, exc), exc) from exc
    except StoreError:
        connection.close()
        raise
    return connection


def private_folder(folder: Path, place: Place) -> None:
    """Create ``folder`` (0700) if needed and check this process can write in it."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(str(describe_folder(place.folder, folder, exc,
                                             setting=place.setting))) from exc
    if (error := folder_problem(folder)) is not None:
        raise StoreError(str(describe_folder(place.folder, folder, error,
                                             setting=place.setting))) from error


def create_private(path: Path) -> None:
    """Create the file 0600 if it is missing; take group and others' access away from one
    that has it (written by an older version, or copied in by hand)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, mode & 0o700)


def migrate(connection: sqlite3.Connection, path: Path, steps: Sequence[Step]) -> None:
    """Bring the schema from its ``PRAGMA user_version`` to ``len(steps)`` (step ``n``
    takes a file at version ``n`` to ``n + 1``), all the steps it needs in one transaction
    so that a failure or a kill leaves the file as it was; refuse a file from a newer
    version."""
    version = int(connection.execute("PRAGMA user_version").fetchone()[0])
    if version > len(steps):
        raise StoreError(f"{path} was written by a newer skald-telegram (schema version "
                         f"{version}; this one knows {len(steps)} at most)")
    if version == len(steps):
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        for step in steps[version:]:
            if callable(step):
                step(connection)
            else:
                for statement in step:
                    connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {len(steps)}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            with suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
        raise
    if version:
        log.info("%s upgraded from schema %d to %d", path, version, len(steps))


def check_integrity(connection: sqlite3.Connection, path: Path, what: str,
                    seconds: float) -> None:
    """Refuse a database whose pages are damaged (``PRAGMA quick_check``), giving the
    check ``seconds`` at most: on a file too large to read in that time, what was not
    checked is not, and a damaged page is found when it is read."""
    deadline = time.monotonic() + seconds
    connection.set_progress_handler(lambda: time.monotonic() > deadline, CHECK_STEPS)
    try:
        rows = connection.execute("PRAGMA quick_check(3)").fetchall()
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode != sqlite3.SQLITE_INTERRUPT:
            raise
        log.warning("the integrity check of %s stopped after %.0f s, unfinished: the "
                    "file is too large to check in full at start", path, seconds)
        return
    finally:
        connection.set_progress_handler(None, 0)
    # SQLite's report spreads over lines and starts with a header ("*** in database …").
    problems = [line for (text,) in rows if text != "ok" for line in str(text).splitlines()
                if line.strip() and not line.startswith("***")]
    if problems:
        raise StoreError(str(damaged(what, path, "; ".join(problems[:3]))))
