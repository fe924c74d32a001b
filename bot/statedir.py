"""The state folder: created private (0700), and every way it can be unusable said in one
line that names the folder, the cause, and the fix that fits the cause.

A root-owned Docker bind mount, a volume mounted read-only, a full disk, a folder made by
hand with the default umask, or ``state.dir`` pointing at a file are the usual causes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from bot.errors import StateDirError
from bot.storefaults import describe_folder, folder_problem, process_user

__all__ = ["PRIVATE_UMASK", "creatable", "ensure_state_dir", "process_user",
           "readable_by_others", "state_dir_problem"]

PRIVATE_UMASK = 0o077
"""Every file and folder the bot creates is its owner's alone (database, WAL, status)."""

WHAT = "the state folder"
SETTING = "state.dir (or $SKALD_TELEGRAM_STATE_DIR)"


def ensure_state_dir(path: Path, *, create: bool = True) -> None:
    """Create ``path`` (mode 0700) if needed and check this process can write in it; with
    ``create=False`` a missing folder is left missing."""
    user = process_user()
    try:
        exists = path.exists()
    except OSError as exc:  # a parent we may not search
        where = _existing_ancestor(path) or path
        raise StateDirError(str(describe_folder(WHAT, where, exc, setting=SETTING))) from exc
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
        if exc.errno not in (errno.EACCES, errno.EPERM):
            where = _existing_ancestor(path) or path
            raise StateDirError(str(describe_folder(WHAT, where, exc, setting=SETTING))) \
                from exc
        parent = _existing_ancestor(path)
        raise StateDirError(
            f"cannot create the state folder {path} as user {user}: {exc.strerror}; fix: "
            f"sudo mkdir -p {path} && sudo chown {user} {path} && chmod 700 {path}"
            + (f" (or make {parent} writable by {user})" if parent else "")
        ) from exc
    problem = state_dir_problem(path)
    if problem is not None:
        raise StateDirError(problem)


def state_dir_problem(path: Path) -> str | None:
    """One line saying why this process cannot write in the existing folder ``path``."""
    error = folder_problem(path)
    if error is None:
        return None
    return str(describe_folder(WHAT, path, error, setting=SETTING))


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
