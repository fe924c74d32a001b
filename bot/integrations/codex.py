"""The Codex CLI's hook contract (developers.openai.com/codex/hooks): ``PermissionRequest``
and ``PreToolUse``.

``PermissionRequest`` answers ``hookSpecificOutput.decision.behavior`` ``allow`` or
``deny`` (with ``message``); printing nothing leaves the decision to Codex's own prompt.
``PreToolUse`` can only deny: Codex rejects ``allow`` and ``ask`` there, so an approved
call gets no output and runs under Codex's usual approval policy. Input that cannot be
read gets exit code 2, which blocks the call. A freeform tool (``apply_patch``) sends
``tool_input`` as a plain string: it becomes the call's ``input`` argument, which the card
describes as a patch.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from bot.integrations.agents import AGENTS
from bot.integrations.claude_code import parse_tool_event, permission_request, pre_tool_use
from bot.integrations.contract import HookAnswer, HookEvent, Verdict, blocked


class Codex:
    agent: str = AGENTS["codex"].display_name
    events: tuple[str, ...] = ("PermissionRequest", "PreToolUse")
    editable: Mapping[str, tuple[str, ...]] = MappingProxyType({})
    """None: Codex's hooks cannot rewrite a call's input."""

    def parse(self, data: Mapping[str, Any]) -> HookEvent:
        freeform = data.get("tool_input")
        if isinstance(freeform, str):
            data = {**data, "tool_input": {"input": freeform}}
        return parse_tool_event(self.agent, self.events, data)

    def answer(self, event: str | None, verdict: Verdict) -> HookAnswer:
        if verdict.edited is not None:
            verdict = Verdict("deny", "denied by skald-telegram: Codex cannot run an edited "
                                      "call")
        if event == "PermissionRequest":
            return permission_request(verdict)
        if event == "PreToolUse":
            return pre_tool_use(verdict) if verdict.decision == "deny" else HookAnswer("")
        return blocked(verdict.reason)


CONTRACT = Codex()
