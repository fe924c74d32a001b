"""The coding agents whose approval hooks ``skald-telegram hook AGENT`` answers, in one
registry: the name on the command line, the name cards and summaries give the agent,
where and in what layout its settings take the hook, and the module holding its hook
contract (imported only when a hook runs, so that the command line starts quickly).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from bot.integrations.contract import HookContract


@dataclass(frozen=True)
class HookSite:
    """Where and how one agent wants its hooks."""

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


@dataclass(frozen=True)
class HookAgent:
    """One agent whose hook we answer."""

    name: str
    """On the command line: ``skald-telegram hook NAME``."""
    display_name: str
    """As summaries and cards name the agent."""
    site: HookSite
    contract_module: str
    """The module whose ``CONTRACT`` reads this agent's events and writes its answers."""

    def contract(self) -> HookContract:
        contract: HookContract = importlib.import_module(self.contract_module).CONTRACT
        return contract


AGENTS: Final[Mapping[str, HookAgent]] = {agent.name: agent for agent in (
    HookAgent(
        "claude-code", "Claude Code",
        HookSite(".claude/settings.json", ".claude/settings.json", (("PermissionRequest", "*"),)),
        "bot.integrations.claude_code",
    ),
    HookAgent(
        "codex", "Codex",
        HookSite(".codex/hooks.json", ".codex/hooks.json", (("PermissionRequest", None),)),
        "bot.integrations.codex",
    ),
    HookAgent(
        "gemini", "Gemini CLI",
        HookSite(".gemini/settings.json", ".gemini/settings.json",
                 (("BeforeTool", "run_shell_command|write_file|replace|web_fetch|mcp_.*"),),
                 milliseconds=True),
        "bot.integrations.gemini",
    ),
    HookAgent(
        "cursor", "Cursor",
        HookSite(".cursor/hooks.json", ".cursor/hooks.json",
                 (("beforeShellExecution", None), ("beforeMCPExecution", None),
                  ("preToolUse", "Write|StrReplace|Edit|Delete")),
                 flat=True),
        "bot.integrations.cursor",
    ),
)}
"""Every agent, by the name on the command line."""
