"""Gemini CLI's hook contract (google-gemini/gemini-cli, docs/hooks/reference.md):
``BeforeTool``.

The answer is ``{"decision": "allow"|"deny", "reason": …}`` with exit code 0; an empty
object leaves the call to Gemini CLI's own confirmation. MCP tools carry ``mcp_context``
with the server's name and the tool's own name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


class Gemini:
    agent: str = "Gemini CLI"
    events: tuple[str, ...] = ("BeforeTool",)

    def parse(self, data: Mapping[str, Any]) -> HookEvent:
        name = event_name(data, self.events)
        tool = text_field(data, "tool_name")
        server = mcp_tool = None
        context = data.get("mcp_context")
        if isinstance(context, Mapping):
            server = optional_text(context, "server_name") or "MCP"
            mcp_tool = optional_text(context, "tool_name") or tool
        call = ToolCall(
            agent=self.agent,
            tool=tool,
            arguments=object_field(data, "tool_input"),
            cwd=optional_text(data, "cwd"),
            mcp_server=server,
            mcp_tool=mcp_tool,
        )
        return HookEvent(name, call, optional_text(data, "session_id"))

    def answer(self, event: str | None, verdict: Verdict) -> HookAnswer:
        if verdict.decision == "ask":
            return HookAnswer("{}")
        return HookAnswer(as_json({"decision": verdict.decision, "reason": verdict.reason}))


CONTRACT = Gemini()
