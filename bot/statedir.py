"""The state folder: created private (0700), and every way it can be unusable said in one
line that names the folder, the user the process runs as, and the command that fixes it.

A root-owned Docker bind mount, a folder made by hand with the default umask, or
``state.dir`` pointing at a file are the usual causes.
"""

from __future__ import annotations

import getpass
import os
import stat
from pathlib import Path

from bot.errors import StateDirError

PRIVATE_UMASK = 0o077
"""Every file and folder the bot creates is its owner's alone (database, WAL, status)."""


def process_user() -> str:
    """The name (or id) of the user this process runs as."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.geteuid())


def ensure_state_dir(path: Path, *, create: bool = True) -> None:
    """Create ``path`` (mode 0700) if needed and check this process can use it; with
    ``create=False`` a missing folder is left missing."""
    user = process_user()
    try:
        exists = path.exists()
    except OSError as exc:  # a parent we may not search
        raise StateDirError(unusable_message(_existing_ancestor(path) or path, user)) from exc
    if not exists and not create:
        return
    if exists and not path.is_dir():
        raise StateDirError(f"the state folder {path} is a file, not a folder: point state.dir "
                            "(or $SKALD_TELEGRAM_STATE_DIR) at a folder")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise StateDirError(f"cannot create the state folder {path}: a part of that path is a "
                            "file; point state.dir at a folder") from exc
    except OSError as exc:
        parent = _existing_ancestor(path)
        raise StateDirError(
            f"cannot create the state folder {path} as user {user}: {exc.strerror}; fix: "
            f"sudo mkdir -p {path} && sudo chown {user} {path} && chmod 700 {path}"
            + (f" (or make {parent} writable by {user})" if parent else "")
        ) from exc
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise StateDirError(unusable_message(path, user))


def unusable_message(path: Path, user: str | None = None) -> str:
    """One line for a state folder this process may not read or write."""
    user = user or process_user()
    return (f"the state folder {path} is not readable and writable by user {user}; fix: "
            f"sudo chown -R {user} {path} && chmod 700 {path}")


def creatable(path: Path) -> bool:
    """Whether this process could create ``path`` (its nearest existing ancestor is a
    folder it may write in)."""
    parent = _existing_ancestor(path)
    return parent is not None and parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)


def readable_by_others(path: Path) -> int | None:
    """The mode of ``path`` when group or others have any access to it, else ``None``."""
    mode = stat.S_IMODE(path.stat().st_mode)
    return mode if mode & 0o077 else None


def _existing_ancestor(path: Path) -> Path | None:
    for candidate in path.absolute().parents:
        if candidate.exists():
            return candidate
    return None
