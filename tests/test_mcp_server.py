"""``skald-telegram mcp``, driven by the MCP SDK's own client over stdio: its two tools,
and how they fail closed when no agent host runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from bot import __version__


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


async def test_the_tools_and_their_answers_without_a_host(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "--state", str(tmp_path / "no-host")],
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        started = await session.initialize()
        assert started.server_info.version == __version__
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert sorted(tools) == ["ask_human", "request_approval"]
        for tool in tools.values():
            assert tool.description and not any(
                line.startswith(" ") for line in tool.description.splitlines())
        schema = tools["request_approval"].input_schema
        assert sorted(schema["required"]) == ["summary", "tool"]
        assert {"arguments", "blocks", "timeout"} <= set(schema["properties"])
        assert tools["ask_human"].input_schema["required"] == ["question"]

        refused = await session.call_tool("request_approval", {
            "summary": "Drop the staging database", "tool": "drop_database",
            "arguments": {"name": "staging"}})
        assert refused.is_error and text(refused).startswith("denied by skald-telegram: ")

        unanswered = await session.call_tool("ask_human", {"question": "Which region?"})
        assert unanswered.is_error and text(unanswered).startswith("no answer")

        bad = await session.call_tool("request_approval", {
            "summary": "x", "tool": "y", "timeout": 0})
        assert bad.is_error and "timeout must be between 1" in text(bad)
