"""The approval gateway, driven by the MCP SDK's own client over stdio, in front of a real
upstream MCP server that records its calls."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from bot.integrations.gateway import shown_client_name
from bot.integrations.policy import PolicyError, parse_policy

UPSTREAM = Path(__file__).parent / "mcp_upstream.py"
DISGUISES = ("ｗｒｉｔｅ_note", "WRITE_NOTE", "wri\u200bte_note")
POLICY = """
[tools]
"read_*" = "allow"
"write_*" = "deny"
"*" = "ask"
"""


def calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


@asynccontextmanager
async def gateway(tmp_path: Path, *extra: str, policy: str | None = POLICY,
                  upstream_env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    args = ["-m", "bot", "mcp", "gateway", "--state", str(tmp_path / "no-host")]
    if policy is not None:
        (tmp_path / "policy.toml").write_text(policy)
        args += ["--policy", str(tmp_path / "policy.toml")]
    args += [*extra, "--", sys.executable, str(UPSTREAM)]
    env = {**os.environ, "UPSTREAM_RECORD": str(tmp_path / "calls.jsonl"), **(upstream_env or {})}
    params = StdioServerParameters(command=sys.executable, args=args, env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


async def test_the_gateway_offers_exactly_the_upstream_tools(tmp_path: Path) -> None:
    upstream_params = StdioServerParameters(
        command=sys.executable, args=[str(UPSTREAM)],
        env={**os.environ, "UPSTREAM_RECORD": str(tmp_path / "direct.jsonl")})
    async with stdio_client(upstream_params) as (r, w), ClientSession(r, w) as direct:
        await direct.initialize()
        expected = (await direct.list_tools()).tools
    async with gateway(tmp_path) as session:
        offered = (await session.list_tools()).tools
    assert [t.model_dump() for t in offered] == [t.model_dump() for t in expected]
    assert [t.name for t in offered] == ["read_note", "write_note", "delete_note", "crash"]


async def test_allow_forwards_deny_refuses_and_ask_fails_closed_without_a_host(
    tmp_path: Path,
) -> None:
    record = tmp_path / "calls.jsonl"
    async with gateway(tmp_path, "--timeout", "5") as session:
        allowed = await session.call_tool("read_note", {"name": "groceries"})
        assert not allowed.is_error and text(allowed) == "note groceries: buy milk"
        assert calls(record) == [{"tool": "read_note", "arguments": {"name": "groceries"}}]

        denied = await session.call_tool("write_note", {"name": "a", "text": "b"})
        assert denied.is_error
        assert text(denied) == ('denied by the gateway policy ("write_*" = "deny"): '
                                "write_note was not called")

        asked = await session.call_tool("delete_note", {"name": "a"})
        assert asked.is_error
        assert text(asked).startswith("denied by skald-telegram: ")
        assert text(asked).endswith("; delete_note was not called")
    assert [call["tool"] for call in calls(record)] == ["read_note"]


async def test_a_tool_the_upstream_does_not_have_is_refused_at_once(tmp_path: Path) -> None:
    """Asked for by the policy, but unknown upstream: an MCP error naming it, before any
    card is asked for (there is no host here: asking would fail differently)."""
    async with gateway(tmp_path, "--timeout", "5") as session:
        with pytest.raises(MCPError) as refused:
            await session.call_tool("drop_everything", {"all": True})
        assert str(refused.value) == ("unknown tool 'drop_everything': the upstream MCP "
                                      "server 'notes' has no such tool; it was not called")
        assert not (await session.call_tool("read_note", {"name": "a"})).is_error
    assert calls(tmp_path / "calls.jsonl") == [{"tool": "read_note", "arguments": {"name": "a"}}]


async def test_a_deny_catches_disguised_names_wherever_it_stands(tmp_path: Path) -> None:
    """The upstream offers ``write_note`` also as fullwidth, upper-case and zero-width
    spellings; the deny comes after an allow-all in the file and is itself spelled in
    fullwidth upper case. Nothing that writes is called."""
    policy = '[tools]\n"*" = "allow"\n"ＷＲＩＴＥ_*" = "deny"\n'
    async with gateway(tmp_path, policy=policy,
                       upstream_env={"UPSTREAM_DISGUISED": "1"}) as session:
        names = [t.name for t in (await session.list_tools()).tools]
        assert set(DISGUISES) <= set(names)
        for name in ("write_note", *DISGUISES):
            result = await session.call_tool(name, {"name": "a", "text": "b"})
            assert result.is_error, name
            assert text(result) == (f'denied by the gateway policy ("ＷＲＩＴＥ_*" = '
                                    f'"deny"): {name} was not called')
        assert not (await session.call_tool("read_note", {"name": "a"})).is_error
    assert calls(tmp_path / "calls.jsonl") == [{"tool": "read_note", "arguments": {"name": "a"}}]


async def test_an_upstream_crash_is_a_clear_error_result(tmp_path: Path) -> None:
    async with gateway(tmp_path, policy='[tools]\n"*" = "allow"\n') as session:
        crashed = await session.call_tool("crash", {})
        after = await session.call_tool("read_note", {"name": "a"})
    for result in (crashed, after):
        assert result.is_error
        assert "the upstream MCP server 'notes' is not running any more" in text(result)
    assert calls(tmp_path / "calls.jsonl") == [{"tool": "crash", "arguments": {}}]


async def test_an_upstream_that_does_not_start_is_one_clear_line(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "bot", "mcp", "gateway", "--", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert "the upstream MCP server" in done.stderr and "did not start" in done.stderr
    assert "Traceback" not in done.stderr


def test_policy_first_match_in_file_order_wins_and_defaults_to_ask() -> None:
    policy = parse_policy('[tools]\n"write_*" = "deny"\n"write_draft" = "allow"\n'
                          '"read_*" = "allow"\n')
    assert policy.rule_for("write_draft") == "deny"
    assert policy.rule_for("read_x") == "allow"
    assert policy.rule_for("delete") == "ask"
    assert parse_policy("").rule_for("anything") == "ask"


@pytest.mark.parametrize(("text", "message"), [
    ('[tools]\n"x" = "maybe"\n', 'tools."x" must be "allow", "ask" or "deny"'),
    ('[rules]\n"x" = "allow"\n', "unknown key 'rules'"),
    ("[tools\n", "not valid TOML"),
    ('tools = "allow"\n', "tools must be a table"),
])
def test_a_bad_policy_is_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match="^policy: .*" + message.replace("(", r"\(")
                       .replace(")", r"\)").replace(".", r"\.").replace("*", r"\*")):
        parse_policy(text)


def test_a_card_names_the_client_as_it_calls_itself_on_one_short_line() -> None:
    assert shown_client_name("claude-code") == "claude-code"
    assert shown_client_name("  Visual\nStudio   Code ") == "Visual Studio Code"
    assert shown_client_name(None) == shown_client_name("") == "An MCP client"
    assert shown_client_name("notes\u202eppa") == "An MCP client"
    assert shown_client_name("x" * 100) == "x" * 39 + "…"
