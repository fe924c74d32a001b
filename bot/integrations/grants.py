"""What a grant may cover for a coding agent's tool call (pure).

The scope is always narrow: one program and subcommand in one agent session for a shell
command (``git status -s`` offers "`git status` in this session", which then covers
``git status --porcelain`` and nothing else), one program for a plain program such as
``ls`` or ``pytest``, edits in one directory in one session, one tool of one MCP server.
A command that chains, pipes, redirects or substitutes, runs under another program
(``sudo``, ``env``, a shell), destroys (``rm``, ``dd``, ``kill``, …) or starts with a
variable assignment gets no grant at all; neither does a call without a session or one
holding an invisible or direction-changing character. The host refuses a grant for
arguments that hold a secret.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Final

from bot.integrations.describe import ToolCall, call_target
from bot.render.hidden import holds_hidden

MAX_KEY_CHARS: Final = 200
MAX_LABEL_CHARS: Final = 200

SUBCOMMAND_PROGRAMS: Final = frozenset({
    "apt", "brew", "bun", "cargo", "composer", "conda", "deno", "docker", "dotnet", "gcloud",
    "gh", "git", "go", "gradle", "helm", "hg", "kubectl", "make", "mvn", "npm", "pip",
    "pip3", "pnpm", "poetry", "podman", "rustup", "svn", "systemctl", "terraform", "uv",
    "yarn",
})
"""Programs whose second word is a subcommand: a grant covers one subcommand of them."""
WRAPPERS: Final = frozenset({
    "bash", "sh", "zsh", "fish", "dash", "sudo", "doas", "su", "env", "exec", "eval",
    "xargs", "nohup", "nice", "time", "timeout", "watch", "command", "builtin", "source", ".",
})
"""Programs that run other programs: what they would run is not narrow enough to grant."""
DESTRUCTIVE: Final = frozenset({
    "rm", "rmdir", "dd", "mkfs", "shred", "truncate", "chmod", "chown", "kill", "pkill",
    "killall", "reboot", "shutdown", "halt", "poweroff",
})
"""Programs that destroy or take away: every call of them is asked for, never granted."""
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}\n\\*?!~]")
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Scope:
    """The grant key a call falls under, and what a person is shown it covers."""

    key: str
    label: str


def hook_scope(call: ToolCall, session: str | None) -> Scope | None:
    """The grant a coding agent's call may offer or be covered by, or None."""
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
        folder = posixpath.dirname(posixpath.normpath(value)) or "."
        return _scope(f"{where}|edit|{folder}", f"edits in {folder} in this session")
    program = command_scope(value)
    if program is None:
        return None
    return _scope(f"{where}|shell|{program}", f"`{program}` in this session")


def gateway_scope(server: str, tool: str) -> Scope:
    """The grant a call through the MCP gateway may offer: that tool of that server."""
    return _scope(f"gateway|{server}|{tool}", f"`{tool}` of {server}")


def command_scope(command: str) -> str | None:
    """``git status`` for ``git status -s``, ``ls`` for ``ls -la``; None for a command
    too complex to grant (see the module's docstring)."""
    if _SHELL_SYNTAX.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or "=" in words[0]:
        return None
    program = posixpath.basename(words[0])
    if not program or program in WRAPPERS or program in DESTRUCTIVE:
        return None
    if program not in SUBCOMMAND_PROGRAMS:
        return program
    if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]):
        return f"{program} {words[1]}"
    return None


def _scope(key: str, label: str) -> Scope:
    if len(key) > MAX_KEY_CHARS:
        key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
    if len(label) > MAX_LABEL_CHARS:
        label = label[: MAX_LABEL_CHARS - 1] + "…"
    return Scope(key, label)
