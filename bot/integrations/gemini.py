"""Gemini CLI's hook contract (google-gemini/gemini-cli, docs/hooks/reference.md):
``BeforeTool``.

The answer is ``{"decision": "allow"|"deny", "reason": …}`` with exit code 0; an empty
object leaves the call to Gemini CLI's own confirmation. MCP tools carry ``mcp_context``
with the server's name and the tool's own name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.integrations.agents import AGENTS
from bot.integrations.contract import (
    HookAnswer,
    HookEvent,
    Verdict,
    as_json,
    event_name,
    optional_text,
    tool_event,
)


class Gemini:
    agent: str = AGENTS["gemini"].display_name
    events: tuple[str, ...] = ("BeforeTool",)

    def parse(self, data: Mapping[str, Any]) -> HookEvent:
        context = data.get("mcp_context")

        def mcp(tool: str) -> tuple[str, str] | None:
            if not isinstance(context, Mapping):
                return None
            server = optional_text(context, "server_name") or "MCP"
            return server, optional_text(context, "tool_name") or tool

        return tool_event(self.agent, event_name(data, self.events), data, mcp)

    def answer(self, event: str | None, verdict: Verdict) -> HookAnswer:
        if verdict.decision == "ask":
            return HookAnswer("{}")
        return HookAnswer(as_json({"decision": verdict.decision, "reason": verdict.reason}))


CONTRACT = Gemini()
