"""Cursor's hook contract (cursor.com/docs/agent/hooks, ``.cursor/hooks.json`` version 1):
``beforeShellExecution``, ``beforeMCPExecution`` and ``preToolUse``.

Every answer is ``{"permission": "allow"|"deny"|"ask", "userMessage": …, "agentMessage":
…}`` with exit code 0; the messages go out under both spellings Cursor has documented
(``userMessage``, and ``user_message`` in current builds). Shell events carry ``command``
and ``cwd``; MCP events ``tool_name`` and ``tool_input`` (an object, or a JSON string in
some versions) and the server's ``url`` or ``command``.
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
    event_name,
    object_field,
    optional_text,
    text_field,
)
from bot.integrations.describe import ToolCall


class Cursor:
    agent: str = AGENTS["cursor"].display_name
    events: tuple[str, ...] = ("beforeShellExecution", "beforeMCPExecution", "preToolUse")
    editable: Mapping[str, tuple[str, ...]] = MappingProxyType({})
    """None: Cursor's hooks cannot rewrite a call's input."""

    def parse(self, data: Mapping[str, Any]) -> HookEvent:
        name = event_name(data, self.events)
        cwd = optional_text(data, "cwd") or _first_root(data)
        if name == "beforeShellExecution":
            command = text_field(data, "command")
            call = ToolCall(self.agent, "Shell", {"command": command}, cwd)
        else:
            tool = text_field(data, "tool_name")
            arguments = object_field(data, "tool_input")
            server, mcp_tool = _mcp_names(tool, data, name == "beforeMCPExecution")
            call = ToolCall(self.agent, tool, arguments, cwd, server, mcp_tool)
        return HookEvent(name, call, optional_text(data, "conversation_id"))

    def answer(self, event: str | None, verdict: Verdict) -> HookAnswer:
        return HookAnswer(as_json({
            "permission": verdict.decision,
            "userMessage": verdict.reason,
            "agentMessage": verdict.reason,
            "user_message": verdict.reason,
            "agent_message": verdict.reason,
        }))


def _mcp_names(tool: str, data: Mapping[str, Any], is_mcp: bool) -> tuple[str | None, str | None]:
    """Cursor names MCP tools ``MCP:<server>:<tool>`` in some events and bare in others."""
    if tool.startswith("MCP:") and tool.count(":") >= 2:
        _, server, name = tool.split(":", 2)
        return server, name
    if is_mcp:
        server = (optional_text(data, "server") or optional_text(data, "url")
                  or optional_text(data, "command") or "MCP")
        return server, tool
    return None, None


def _first_root(data: Mapping[str, Any]) -> str | None:
    roots = data.get("workspace_roots")
    if isinstance(roots, list) and roots and isinstance(roots[0], str):
        return roots[0]
    return None


CONTRACT = Cursor()
