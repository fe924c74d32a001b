"""``skald-telegram mcp``: a stdio MCP server through which any MCP client asks a person.

Two tools: ``request_approval`` (returns "approved by …", or an error result "denied by …:
reason"; with ``editable`` keys, an approval with an edit returns the edited
arguments) and ``ask_human`` (returns the answer). Both go through the agent host and fail
closed: no host, no decision in time, an error on the way is an error result.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from bot import __version__
from bot.integrations.approval import Connect, ask_person, ask_question, one_line
from bot.integrations.describe import ToolCall, describe

DEFAULT_TIMEOUT = 600.0
MAX_TIMEOUT = 86400.0
_BAD_TIMEOUT = f"timeout must be between 1 and {MAX_TIMEOUT:g} seconds"
_Tool = TypeVar("_Tool", bound=Callable[..., Any])


def build_server(connect: Connect) -> MCPServer:
    server = MCPServer(
        "skald-telegram",
        version=__version__,
        instructions=(
            "Ask a person on Telegram. Call request_approval before an action that needs "
            "their consent and go ahead only if it returns 'approved'. Call ask_human when "
            "you need an answer only they can give."
        ),
    )

    def tool(function: _Tool) -> _Tool:
        """Register ``function`` as a tool described by its docstring, dedented."""
        return server.tool(description=inspect.cleandoc(function.__doc__ or ""))(function)

    @tool
    async def request_approval(
        summary: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        blocks: list[dict[str, str]] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        editable: list[str] | None = None,
    ) -> CallToolResult:
        """Ask a person on Telegram to approve an action, and wait for their decision.

        summary: one line naming the action and its target ("Delete the staging database").
        tool: the tool or action's name. arguments: its arguments (credentials are masked).
        blocks: optional card blocks ({"type", "key"|"label", "value", "value_type"});
        without them the arguments are shown. timeout: seconds to wait (default 600).
        editable: keys of arguments the person may change before approving; an approval
        with an edit returns "approved with an edit by …" and the edited arguments
        (structured: {"edited": true, "arguments": {…}}), which are then what to run.
        Returns "approved by …"; a refusal or no decision in time is an error result.
        """
        if not 1 <= timeout <= MAX_TIMEOUT:
            return _result(_BAD_TIMEOUT, error=True)
        args = arguments or {}
        keys = list(dict.fromkeys(editable or ()))
        if any(key not in args for key in keys):
            return _result("editable must name keys of arguments", error=True)
        shown = blocks or describe(ToolCall("An agent", tool, args), lambda _: None).blocks
        verdict = await ask_person(
            connect, tool=tool, summary=summary, arguments=args, blocks=shown, timeout=timeout,
            editable=keys,
        )
        if verdict.edited is not None:
            edited = dict(verdict.edited)
            text = f"{verdict.reason}\narguments: {json.dumps(edited, ensure_ascii=False)}"
            return CallToolResult(content=[TextContent(type="text", text=text)],
                                  structured_content={"edited": True, "arguments": edited})
        return _result(verdict.reason, error=verdict.decision != "allow")

    @tool
    async def ask_human(
        question: str, options: list[str] | None = None, timeout: float = DEFAULT_TIMEOUT
    ) -> CallToolResult:
        """Ask a person on Telegram a question and wait for the answer.

        options: optional answers to offer as buttons. timeout: seconds to wait (default
        600). Returns the answer; no answer in time is an error result.
        """
        if not 1 <= timeout <= MAX_TIMEOUT:
            return _result(_BAD_TIMEOUT, error=True)
        try:
            outcome = await ask_question(connect, question, options, timeout)
        except Exception as exc:  # no answer is an error result, never a crash
            return _result(f"no answer: {one_line(exc)}", error=True)
        if outcome.state != "answered" or outcome.answer is None:
            return _result(f"no answer in Telegram within {timeout:g} s ({outcome.state})",
                           error=True)
        return _result(outcome.answer)

    return server


def _result(text: str, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=error)
