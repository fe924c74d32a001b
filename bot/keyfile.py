"""The device's key file: private keys as JSON, readable by its owner only (mode 0600).

Writes are atomic (a temporary file created 0600, then renamed), so the keys are never
readable by anyone else, and a crash never leaves half a key file.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import tempfile
from pathlib import Path

from bot.errors import IdentityError, PayloadError
from bot.protocol.encoding import loads_limited
from bot.protocol.identity import Identity

log = logging.getLogger(__name__)

MAX_KEY_FILE_BYTES = 64 * 1024


def save_identity(path: Path, identity: Identity) -> None:
    """Write ``identity`` to ``path`` atomically with mode 0600 from the first byte."""
    data = json.dumps(identity.to_private_json(), indent=2).encode("utf-8") + b"\n"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # mkstemp creates the file with O_EXCL and mode 0600.
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise IdentityError(f"cannot create key file {path}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), 0o600)
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
        _fsync_directory(path.parent)
    except OSError as exc:
        Path(tmp_name).unlink(missing_ok=True)
        raise IdentityError(f"cannot write key file {path}: {exc.strerror}") from exc
    log.info("saved identity %s to %s", identity.id, path)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_identity(path: Path) -> Identity:
    """Read the key file; refuse it when it is missing, malformed or not private."""
    try:
        with path.open("rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise IdentityError(f"key file {path} is not a regular file")
            if mode & 0o077:
                raise IdentityError(
                    f"key file {path} is accessible by group or others "
                    f"(mode {stat.S_IMODE(mode):04o}); fix it with: chmod 600 {path}"
                )
            data = file.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError as exc:
        raise IdentityError(f"no key file at {path}") from exc
    except OSError as exc:
        raise IdentityError(f"cannot read key file {path}: {exc.strerror}") from exc
    try:
        obj = loads_limited(data, max_bytes=MAX_KEY_FILE_BYTES)
        return Identity.from_private_json(obj)
    except (PayloadError, IdentityError) as exc:
        raise IdentityError(f"key file {path} is malformed: {exc}") from exc


def load_or_create_identity(path: Path, name: str) -> Identity:
    """Load the identity at ``path``, or create and save a new one named ``name``.

    When the stored name differs from ``name`` (the configuration changed), the file is
    rewritten with the new name; the keys stay the same.
    """
    if not path.exists():
        identity = Identity.generate(name)
        save_identity(path, identity)
        log.info("created a new identity %s", identity.id)
        return identity
    identity = load_identity(path)
    if identity.name != name:
        identity = identity.with_name(name)
        save_identity(path, identity)
    return identity
