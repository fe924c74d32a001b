"""``hook install`` and ``hook uninstall``: our hook merged into an agent's settings file.

Everything else in the file stays as it was, numbers byte for byte (:mod:`settings_json`);
a file that cannot be rewritten without loss is refused untouched. Every version a change
replaces is kept beside the file (``<file>.bak-20261203T121500Z``, never overwritten); the
new version replaces the old one atomically, in place of a symlink's target (the link
stays) and with the old one's mode. The hook is given a timeout longer than the approval's,
so that the agent never gives up on it first (a hook that times out lets the call through
in some agents).
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from bot.errors import SkaldError
from bot.integrations.agents import HookAgent, HookSite
from bot.integrations.settings_json import LossyJson, dumps, loads

Scope = Literal["user", "project"]

HOOK_GRACE_SECONDS: Final = 30
"""How much longer than the approval the agent waits for the hook."""

BACKUP_INFIX: Final = ".bak-"
"""``settings.json.bak-20261203T121500Z``: the version a change replaced, and when."""
NEW_FILE_MODE: Final = 0o644


class SettingsError(SkaldError):
    """An agent's settings file cannot be read or written; nothing was changed."""


def settings_path(agent: HookAgent, scope: Scope, home: Path, project: Path) -> Path:
    site = agent.site
    return home / site.user_file if scope == "user" else project / site.project_file


def hook_command(program: list[str], agent: str, timeout: float, extra: list[str]) -> str:
    """The shell command an agent runs: ``<program> hook AGENT --timeout N …``."""
    return shlex.join([*program, "hook", agent, "--timeout", f"{timeout:g}", *extra])


def install(agent: HookAgent, path: Path, command: str, timeout: float) -> list[str]:
    """Merge the hook into ``path``; returns the lines saying what changed."""
    site = agent.site
    original, settings = _load(path)
    updated = _without_ours(settings, agent)
    hooks = updated.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError(f"{path}: \"hooks\" is not an object; nothing was changed")
    if site.flat:
        updated.setdefault("version", 1)
    limit = int(timeout) + HOOK_GRACE_SECONDS
    changes = []
    for event, matcher in site.events:
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise SettingsError(f"{path}: hooks.{event} is not a list; nothing was changed")
        entries.append(_entry(site, command, matcher, limit))
        where = f" (matcher {matcher})" if matcher else ""
        changes.append(f"  + {event}{where}: {command} (hook timeout {limit} s)")
    if dumps(updated) == dumps(settings) and _ours(settings, agent):
        return [f"{path}: already installed, nothing changed"]
    removed = _describe_ours(settings, agent, "-")
    return _save(path, original, updated, [*removed, *changes])


def uninstall(agent: HookAgent, path: Path) -> list[str]:
    """Take our hook out of ``path``; returns the lines saying what changed."""
    original, settings = _load(path)
    removed = _describe_ours(settings, agent, "-")
    if not removed:
        return [f"{path}: no skald-telegram hook for {agent.name}, nothing changed"]
    return _save(path, original, _without_ours(settings, agent, prune=True), removed)


def _entry(site: HookSite, command: str, matcher: str | None, limit: int) -> dict[str, Any]:
    timeout = limit * 1000 if site.milliseconds else limit
    if site.flat:
        entry: dict[str, Any] = {"command": command, "timeout": timeout, "failClosed": True}
        if matcher:
            entry["matcher"] = matcher
        return entry
    handler: dict[str, Any] = {"type": "command", "command": command, "timeout": timeout}
    if site.milliseconds:
        handler["name"] = "skald-telegram"
    group: dict[str, Any] = {"hooks": [handler]}
    if matcher:
        group = {"matcher": matcher, **group}
    return group


def _is_ours(command: object, agent: str) -> bool:
    if not isinstance(command, str):
        return False
    pattern = rf"(skald-telegram['\"]?|-m bot) hook {re.escape(agent)}(\s|$)"
    return re.search(pattern, command) is not None


def _ours(settings: dict[str, Any], agent: HookAgent) -> list[tuple[str, str]]:
    """(event, command) of every hook of ours in ``settings``."""
    found = []
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return []
    for event, entries in hooks.items():
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            handlers = [entry] if agent.site.flat else entry.get("hooks", [])
            for handler in handlers if isinstance(handlers, list) else []:
                if isinstance(handler, dict) and _is_ours(handler.get("command"), agent.name):
                    found.append((event, handler["command"]))
    return found


def _describe_ours(settings: dict[str, Any], agent: HookAgent, sign: str) -> list[str]:
    return [f"  {sign} {event}: {command}" for event, command in _ours(settings, agent)]


def _without_ours(
    settings: dict[str, Any], agent: HookAgent, prune: bool = False
) -> dict[str, Any]:
    """A copy of ``settings`` without our hooks; with ``prune``, also without the groups,
    event lists and ``hooks`` table that only held ours."""
    updated = copy.deepcopy(settings)
    hooks = updated.get("hooks")
    if not isinstance(hooks, dict):
        return updated
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept = []
        for entry in entries:
            if agent.site.flat:
                if not (isinstance(entry, dict) and _is_ours(entry.get("command"), agent.name)):
                    kept.append(entry)
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
                kept.append(entry)
                continue
            handlers = [h for h in entry["hooks"]
                        if not (isinstance(h, dict) and _is_ours(h.get("command"), agent.name))]
            if handlers or len(handlers) == len(entry["hooks"]):
                kept.append({**entry, "hooks": handlers})
        hooks[event] = kept
        if prune and not kept and entries:
            del hooks[event]
    if prune and not hooks and settings.get("hooks"):
        del updated["hooks"]
    return updated


def _load(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    """The file's bytes as they are (``None`` if there is no file) and its settings."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        return None, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot be read ({exc}); nothing was changed") from exc
    if not text.strip():
        return raw, {}
    try:
        settings = loads(text)
    except LossyJson as exc:
        raise SettingsError(f"{path}: {exc}; fix it or add the hook by hand, nothing was "
                            "changed") from exc
    if not isinstance(settings, dict):
        raise SettingsError(f"{path}: not a JSON object; nothing was changed")
    return raw, settings


def _save(path: Path, original: bytes | None, settings: dict[str, Any], changes: list[str]
          ) -> list[str]:
    """Write ``settings`` in place of ``original`` (the file's bytes as read), which is
    kept beside ``path`` first."""
    lines = [f"{path}:", *changes]
    target = Path(os.path.realpath(path))  # a symlink stays a symlink: its target changes
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if original is not None else NEW_FILE_MODE
        if original is not None:
            backup = _backup(path, original, mode)
            lines.append(f"  backup of the replaced version: {backup}")
        _replace(target, (dumps(settings) + "\n").encode("utf-8"), mode)
    except OSError as exc:
        raise SettingsError(f"{path}: cannot be written ({exc})") from exc
    return lines


def _backup(path: Path, content: bytes, mode: int) -> Path:
    """``content`` in a new file beside ``path``, named for now; an earlier backup is never
    overwritten (a second one in the same second gets ``-2``, …)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}")
    for attempt in range(1, 1000):
        backup = base if attempt == 1 else base.with_name(f"{base.name}-{attempt}")
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o777)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as file:
            file.write(content)
            file.flush()
            os.fchmod(file.fileno(), mode & 0o777)  # whatever the umask
            os.fsync(file.fileno())
        return backup
    raise OSError(f"too many backups named {base.name}")


def _replace(target: Path, content: bytes, mode: int) -> None:
    """``content`` in place of ``target``, atomically: a temporary file in the same folder,
    synced, then renamed over it."""
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(content)
            file.flush()
            os.fchmod(file.fileno(), mode)
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
