"""The running bot's heartbeat: a small status file that container health checks read."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

from bot.storefaults import clock_time

HEARTBEAT_S = 30.0
STALE_AFTER_S = 120.0
RELAY_GRACE_S = 300.0
"""How long the bot may be without any relay session before it counts as unhealthy."""


def write_status(path: Path, status: dict[str, object]) -> None:
    """Atomically replace the status file with ``status`` plus the current time; on a full
    disk, overwrite the file in place instead, so that it can still say the store fails."""
    temporary = path.with_suffix(".tmp")
    data = json.dumps({**status, "updated_at": time.time()}).encode("utf-8")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not path.exists():
            raise
        _overwrite(path, data)
        return
    os.replace(temporary, path)


def _overwrite(path: Path, data: bytes) -> None:
    """Write ``data`` over the start of the file ``path``, padded with spaces to its length
    (JSON allows them): the blocks it has are reused, none is asked of a full disk."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.pwrite(fd, data.ljust(os.fstat(fd).st_size), 0)
    finally:
        os.close(fd)


def remove_status(path: Path) -> None:
    """The bot stopped cleanly: nobody should take it for running."""
    path.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (in this pid namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except (OverflowError, ValueError):
        return False
    return True


def check_status(path: Path, *, now: float | None = None) -> tuple[bool, str]:
    """Whether the bot wrote its status recently, and a one-line explanation."""
    try:
        status = json.loads(path.read_text(encoding="utf-8"))
        age = (time.time() if now is None else now) - float(status["updated_at"])
        pid = status["pid"]
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"no readable status file at {path}: is the bot running?"
    if not isinstance(pid, int) or isinstance(pid, bool) or not process_alive(pid):
        return False, f"the bot (process {pid}) that wrote {path} is not running any more"
    if age > STALE_AFTER_S:
        return False, f"the bot's status is {age:.0f} s old: it seems stuck or stopped"
    store = status.get("store") or {}
    if isinstance(store, dict) and isinstance(store.get("failing_since"), int | float):
        return False, (f"store: failing since {clock_time(store['failing_since'])} "
                       f"({store.get('cause')})")
    tasks = status.get("tasks", {})
    dead = sorted(name for name, task in tasks.items() if not task.get("alive", False))
    if dead:
        return False, f"the bot's {', '.join(dead)} stopped working: it must be restarted"
    relays = status.get("relays", [])
    dead = [r["url"] for r in relays if r.get("alive") is False]
    if dead:
        return False, f"the session task for relay(s) {', '.join(dead)} ended"
    down = [r["url"] for r in relays if not r.get("connected")]
    if relays and len(down) == len(relays):
        shortest = min(_down_for(r, now) for r in relays)
        if shortest > RELAY_GRACE_S:
            return False, (f"no relay connected for {shortest:.0f} s: {', '.join(down)} "
                           "(is the relay running and reachable?)")
    database = _database(store) + _leader(status.get("replica"))
    if down:
        return True, f"running; relay(s) not connected: {', '.join(down)}{database}"
    return True, f"running; {len(relays)} relay session(s) up{database}"


def _database(store: object) -> str:
    """``; state database postgresql://bot:•••@db/bot (schema 4)``, or ``""`` from a bot
    that did not say."""
    if not isinstance(store, dict) or not isinstance(store.get("database"), str):
        return ""
    return f"; state database {store['database']} (schema {store.get('schema')})"


def _leader(replica: object) -> str:
    """``; replica a leads (this one)``, or ``""`` from a bot that did not say."""
    if not isinstance(replica, dict) or not isinstance(replica.get("name"), str):
        return ""
    leader, name = replica.get("leader"), replica["name"]
    if not isinstance(leader, str):
        return f"; replica {name}, no leader yet"
    return f"; replica {leader} leads" + (" (this one)" if leader == name else
                                           f", this is {name}")


def _down_for(relay: dict[str, object], now: float | None) -> float:
    """How long a relay session has been down, from its ``since`` (0 when unknown)."""
    since = relay.get("since")
    if relay.get("connected") or not isinstance(since, int | float):
        return 0.0
    return (time.time() if now is None else now) - since
