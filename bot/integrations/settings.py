"""``hook install`` and ``hook uninstall``: our hook merged into an agent's settings file.

Everything else in the file stays as it was; the first change keeps a copy of the original
beside it (``<file>.skald-telegram.bak``); the new file replaces the old one atomically.
The hook is given a timeout longer than the approval's, so that the agent never gives up
on it first (a hook that times out lets the call through in some agents).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from bot.errors import SkaldError

Scope = Literal["user", "project"]

HOOK_GRACE_SECONDS: Final = 30
"""How much longer than the approval the agent waits for the hook."""

BACKUP_SUFFIX: Final = ".skald-telegram.bak"


class SettingsError(SkaldError):
    """An agent's settings file cannot be read or written; nothing was changed."""


@dataclass(frozen=True)
class HookSite:
    """Where and how one agent wants its hooks."""

    agent: str
    user_file: str
    """Relative to the home folder."""
    project_file: str
    """Relative to the project (the current folder)."""
    events: tuple[tuple[str, str | None], ...]
    """(event, matcher) for each hook installed."""
    milliseconds: bool = False
    """The agent reads ``timeout`` in milliseconds rather than seconds."""
    flat: bool = False
    """Cursor's layout: ``{"version": 1, "hooks": {event: [{"command": …}]}}``."""


SITES: Final = {
    "claude-code": HookSite(
        "claude-code", ".claude/settings.json", ".claude/settings.json",
        (("PermissionRequest", "*"),),
    ),
    "codex": HookSite(
        "codex", ".codex/hooks.json", ".codex/hooks.json", (("PermissionRequest", None),),
    ),
    "gemini": HookSite(
        "gemini", ".gemini/settings.json", ".gemini/settings.json",
        (("BeforeTool", "run_shell_command|write_file|replace|web_fetch|mcp_.*"),),
        milliseconds=True,
    ),
    "cursor": HookSite(
        "cursor", ".cursor/hooks.json", ".cursor/hooks.json",
        (("beforeShellExecution", None), ("beforeMCPExecution", None),
         ("preToolUse", "Write|StrReplace|Edit|Delete")),
        flat=True,
    ),
}


def settings_path(site: HookSite, scope: Scope, home: Path, project: Path) -> Path:
    return home / site.user_file if scope == "user" else project / site.project_file


def hook_command(program: list[str], agent: str, timeout: float, extra: list[str]) -> str:
    """The shell command an agent runs: ``<program> hook AGENT --timeout N …``."""
    return shlex.join([*program, "hook", agent, "--timeout", f"{timeout:g}", *extra])


def install(site: HookSite, path: Path, command: str, timeout: float) -> list[str]:
    """Merge the hook into ``path``; returns the lines saying what changed."""
    original, settings = _load(path)
    updated = _without_ours(settings, site)
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
    if updated == settings and _ours(settings, site):
        return [f"{path}: already installed, nothing changed"]
    removed = _describe_ours(settings, site, "-")
    return _save(path, original if not removed else None, updated, [*removed, *changes])


def uninstall(site: HookSite, path: Path) -> list[str]:
    """Take our hook out of ``path``; returns the lines saying what changed."""
    _, settings = _load(path)
    removed = _describe_ours(settings, site, "-")
    if not removed:
        return [f"{path}: no skald-telegram hook for {site.agent}, nothing changed"]
    return _save(path, None, _without_ours(settings, site, prune=True), removed)


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


def _ours(settings: dict[str, Any], site: HookSite) -> list[tuple[str, str]]:
    """(event, command) of every hook of ours in ``settings``."""
    found = []
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return []
    for event, entries in hooks.items():
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            handlers = [entry] if site.flat else entry.get("hooks", [])
            for handler in handlers if isinstance(handlers, list) else []:
                if isinstance(handler, dict) and _is_ours(handler.get("command"), site.agent):
                    found.append((event, handler["command"]))
    return found


def _describe_ours(settings: dict[str, Any], site: HookSite, sign: str) -> list[str]:
    return [f"  {sign} {event}: {command}" for event, command in _ours(settings, site)]


def _without_ours(
    settings: dict[str, Any], site: HookSite, prune: bool = False
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
            if site.flat:
                if not (isinstance(entry, dict) and _is_ours(entry.get("command"), site.agent)):
                    kept.append(entry)
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("hooks"), list):
                kept.append(entry)
                continue
            handlers = [h for h in entry["hooks"]
                        if not (isinstance(h, dict) and _is_ours(h.get("command"), site.agent))]
            if handlers or len(handlers) == len(entry["hooks"]):
                kept.append({**entry, "hooks": handlers})
        hooks[event] = kept
        if prune and not kept and entries:
            del hooks[event]
    if prune and not hooks and settings.get("hooks"):
        del updated["hooks"]
    return updated


def _load(path: Path) -> tuple[str | None, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot be read ({exc}); nothing was changed") from exc
    if not text.strip():
        return text, {}
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise SettingsError(
            f"{path}: not valid JSON ({exc}); fix or move it, nothing was changed"
        ) from exc
    if not isinstance(settings, dict):
        raise SettingsError(f"{path}: not a JSON object; nothing was changed")
    return text, settings


def _save(path: Path, original: str | None, settings: dict[str, Any], changes: list[str]
          ) -> list[str]:
    """Write ``settings``; ``original``, the file as its owner left it (without our hook),
    is kept beside it unless a copy is there already."""
    lines = [f"{path}:", *changes]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if original is not None:
            backup = path.with_name(path.name + BACKUP_SUFFIX)
            if not backup.exists():
                backup.write_text(original, encoding="utf-8")
                os.chmod(backup, path.stat().st_mode & 0o777)
                lines.append(f"  backup of the original: {backup}")
        _replace(path, json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise SettingsError(f"{path}: cannot be written ({exc})") from exc
    return lines


def _replace(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, temporary = tempfile.mkstemp(prefix=path.name, dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
