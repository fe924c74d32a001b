"""Gemini CLI's hook contract (google-gemini/gemini-cli, docs/hooks/reference.md):
``BeforeTool``.

The answer is ``{"decision": "allow"|"deny", "reason": …}`` with exit code 0; an empty
object leaves the call to Gemini CLI's own confirmation. MCP tools carry ``mcp_context``
with the server's name and the tool's own name. An allow with an edit also gives the
edited input as ``hookSpecificOutput.tool_input``, which Gemini CLI merges over the
call's own before the tool runs (every key is given, so none of the original stays).
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
    optional_text,
    tool_event,
)


class Gemini:
    agent: str = AGENTS["gemini"].display_name
    events: tuple[str, ...] = ("BeforeTool",)
    editable: Mapping[str, tuple[str, ...]] = MappingProxyType({
        "run_shell_command": ("command",), "write_file": ("content",),
        "replace": ("new_string",)})

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
        answer: dict[str, Any] = {"decision": verdict.decision, "reason": verdict.reason}
        if verdict.edited is not None:
            answer["hookSpecificOutput"] = {"tool_input": dict(verdict.edited)}
        return HookAnswer(as_json(answer))


CONTRACT = Gemini()
