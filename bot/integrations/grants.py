"""What a grant may cover for a coding agent's tool call (pure).

The scope is always narrow: one tool of one MCP server (of the gateway: one tool of the
upstream started with one command line), edits in one directory (the directory the file
resolves to on this machine, symlinks followed), and for a shell command what
``command_table.toml`` allows (see :mod:`bot.integrations.commands`), in one agent session
and the directory the command runs in. An operation that only reads (``git status -s``
offers "`git status` in this session") covers later calls of it that keep to its read-only
options and arguments; a program that runs other code by design (``pytest``, ``make``,
``npm test``) is granted only as the exact command approved. The program must be a bare
name, and a grant covers it only while the name resolves to the same file. A command that
holds a credential, or anything the table does not list, gets no grant at all; neither does
a call without a session. The host refuses
a grant for arguments that hold a secret, and neither offers one for a call holding an
invisible or direction-changing character.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from bot.hidden import holds_hidden
from bot.integrations.commands import CommandTable, Locate, shell_words
from bot.integrations.describe import ToolCall, call_target, command_dir
from bot.render.credentials import credentials_in

MAX_KEY_CHARS: Final = 200
MAX_LABEL_CHARS: Final = 200


@dataclass(frozen=True)
class Scope:
    """The grant key a call falls under, and what a person is shown it covers."""

    key: str
    label: str


@dataclass(frozen=True)
class Programs:
    """What a shell command's grant is judged by: the command table, and where a bare
    program name resolves for the call (the hook looks on the agent's ``PATH``)."""

    table: CommandTable
    locate: Locate


def hook_scope(call: ToolCall, session: str | None, programs: Programs | None = None) \
        -> Scope | None:
    """The grant a coding agent's call may offer or be covered by, or None (always for a
    shell command without ``programs``)."""
    if not session or holds_hidden((call.tool, call.mcp_server, call.mcp_tool, call.cwd,
                                    call.arguments)):
        return None
    where = f"{call.agent}|{session}"
    if call.mcp_server is not None and call.mcp_tool is not None:
        return _scope(f"{where}|mcp|{call.mcp_server}|{call.mcp_tool}",
                      f"`{call.mcp_tool}` of {call.mcp_server} in this session")
    target = call_target(call)
    if target is None:
        return None
    kind, value = target
    if kind == "edit":
        # The folder the file really is in: a symlink anywhere on the way (or swapped in
        # after a grant) leads elsewhere, and so under another key.
        if call.real_path is None or not posixpath.isabs(call.real_path):
            return None
        folder = posixpath.dirname(call.real_path)
        return _scope(f"{where}|edit|{folder}", f"edits in {folder} in this session")
    raw = call.arguments.get("command")
    if isinstance(raw, list) and shell_words(value) != [str(word) for word in raw]:
        return None  # run as these words, not as the shell would split them
    shell = command_scope(value, command_dir(call), programs) if programs else None
    if shell is None:
        return None
    return _scope(f"{where}|{shell.key}", shell.label)


def gateway_scope(upstream: Sequence[str], tool: str) -> Scope:
    """The grant a call through the MCP gateway may offer: that tool of the upstream
    started with the command line ``upstream`` (never the name the upstream gives itself,
    which it may choose to match another server's)."""
    command = shlex.join(upstream)
    return _scope(f"gateway|{command}|{tool}", f"`{tool}` of {command}")


def command_scope(command: str, cwd: str | None, programs: Programs) -> Scope | None:
    """The grant for a shell command run in ``cwd``: the read-only operation it is (key
    ``shell|["read", cwd, path, "git status"]``) or, for a program that runs other code,
    the exact command (``shell|["exact", cwd, path, command]``); None for anything else
    (see the module's docstring)."""
    if not cwd or not posixpath.isabs(cwd) or credentials_in(command):
        return None
    words = shell_words(command)
    covered = programs.table.judge(words) if words else None
    if covered is None:
        return None
    path = programs.locate(covered.program)
    if path is None or not posixpath.isabs(path):
        return None
    where = posixpath.normpath(cwd)
    if covered.exact:
        key = json.dumps(["exact", where, path, command])
        return Scope(f"shell|{key}", f"this exact command in this session: `{command}`")
    key = json.dumps(["read", where, path, covered.name])
    return Scope(f"shell|{key}", f"`{covered.name}` in this session")


def _scope(key: str, label: str) -> Scope:
    if len(key) > MAX_KEY_CHARS:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    if len(label) > MAX_LABEL_CHARS:
        label = label[: MAX_LABEL_CHARS - 1] + "…"
    return Scope(key, label)
