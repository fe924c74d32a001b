"""What every agent's hook contract has in common: an event read from the agent's JSON, a
verdict (allow, deny, or hand back to the agent's own prompt), and the answer that verdict
becomes for that agent (stdout, stderr, exit code)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from bot.errors import SkaldError
from bot.integrations.approval import Verdict
from bot.integrations.describe import ToolCall

__all__ = ["HookAnswer", "HookContract", "HookEvent", "HookInputError", "Verdict"]


class HookInputError(SkaldError):
    """The agent's hook input is not what its contract documents."""


@dataclass(frozen=True)
class HookEvent:
    name: str
    """The agent's ``hook_event_name``."""
    call: ToolCall
    session: str | None = None
    """The agent's session id, when it sends one (grants are kept per session)."""


@dataclass(frozen=True)
class HookAnswer:
    stdout: str
    exit_code: int = 0
    stderr: str = ""


class HookContract(Protocol):
    """One agent's published hook contract."""

    agent: str
    """The agent's display name, as summaries name it."""
    events: tuple[str, ...]
    """The hook events this contract answers."""
    editable: Mapping[str, tuple[str, ...]]
    """For each tool, the keys of its input a person may edit before approving: those
    whose edited value the agent runs when the hook answers with the edited input."""

    def parse(self, data: Mapping[str, Any]) -> HookEvent: ...

    def answer(self, event: str | None, verdict: Verdict) -> HookAnswer:
        """The answer for ``verdict``; ``event`` is ``None`` when the input was unreadable."""
        ...


def tool_event(
    agent: str,
    name: str,
    data: Mapping[str, Any],
    mcp: Callable[[str], tuple[str, str] | None],
) -> HookEvent:
    """The event of an agent that sends ``tool_name``, ``tool_input`` and ``cwd``; ``mcp``
    says which server and tool an MCP call is for (or ``None``)."""
    tool = text_field(data, "tool_name")
    server, mcp_tool = mcp(tool) or (None, None)
    call = ToolCall(
        agent=agent,
        tool=tool,
        arguments=object_field(data, "tool_input"),
        cwd=optional_text(data, "cwd"),
        mcp_server=server,
        mcp_tool=mcp_tool,
    )
    return HookEvent(name, call, optional_text(data, "session_id"))


def as_json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


def blocked(reason: str) -> HookAnswer:
    """Exit code 2 with the reason on stderr: every agent here reads that as "blocked"."""
    return HookAnswer("", 2, reason)


def event_name(data: Mapping[str, Any], events: tuple[str, ...]) -> str:
    name = data.get("hook_event_name")
    if name not in events:
        expected = " or ".join(events)
        raise HookInputError(f"hook_event_name is {name!r}; this hook answers {expected}")
    return str(name)


def text_field(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise HookInputError(f"{key} is missing or not a string")
    return value


def optional_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


def object_field(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A JSON object field; some agents send it as a JSON string, which is accepted too."""
    value = data.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise HookInputError(f"{key} is not valid JSON") from exc
    if not isinstance(value, Mapping):
        raise HookInputError(f"{key} is missing or not an object")
    return value
