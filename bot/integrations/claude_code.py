"""Claude Code's hook contract (code.claude.com/docs/en/hooks): ``PreToolUse`` and
``PermissionRequest``.

Both answer with exit code 0 and JSON on stdout. ``PermissionRequest`` has no "ask": to
hand a call back to Claude Code's own dialog the hook prints nothing. An allow with an
edit hands Claude Code the edited input (``updatedInput``); under ``PreToolUse`` the
reason tells the model what changed, as it would otherwise see its own call with the
result of the edited one. Input that cannot be read gets exit code 2, which blocks the
call (any other non-zero code would let it run).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from bot.integrations.agents import AGENTS
from bot.integrations.contract import (
    HookAnswer,
    HookEvent,
    Verdict,
    as_json,
    blocked,
    event_name,
    tool_event,
)
from bot.integrations.describe import mcp_name


class ClaudeCode:
    agent: str = AGENTS["claude-code"].display_name
    events: tuple[str, ...] = ("PreToolUse", "PermissionRequest")
    editable: Mapping[str, tuple[str, ...]] = MappingProxyType({
        "Bash": ("command",), "Edit": ("new_string",), "Write": ("content",)})

    def parse(self, data: Mapping[str, Any]) -> HookEvent:
        return parse_tool_event(self.agent, self.events, data)

    def answer(self, event: str | None, verdict: Verdict) -> HookAnswer:
        if event == "PreToolUse":
            return pre_tool_use(verdict)
        if event == "PermissionRequest":
            return permission_request(verdict)
        return blocked(verdict.reason)


def parse_tool_event(agent: str, events: tuple[str, ...], data: Mapping[str, Any]) -> HookEvent:
    """The input both Claude Code and Codex send: ``hook_event_name``, ``tool_name``,
    ``tool_input``, ``cwd``; MCP tools are named ``mcp__<server>__<tool>``."""
    return tool_event(agent, event_name(data, events), data, mcp_name)


def pre_tool_use(verdict: Verdict) -> HookAnswer:
    output: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": verdict.decision,
        "permissionDecisionReason": verdict.reason,
    }
    if verdict.edited is not None:
        output["updatedInput"] = dict(verdict.edited)
    return HookAnswer(as_json({"hookSpecificOutput": output}))


def permission_request(verdict: Verdict) -> HookAnswer:
    if verdict.decision == "ask":
        return HookAnswer("")
    decision: dict[str, Any] = {"behavior": verdict.decision}
    if verdict.decision == "deny":
        decision["message"] = verdict.reason
    elif verdict.edited is not None:
        decision["updatedInput"] = dict(verdict.edited)
    return HookAnswer(as_json({"hookSpecificOutput": {
        "hookEventName": "PermissionRequest", "decision": decision,
    }}))


CONTRACT = ClaudeCode()
