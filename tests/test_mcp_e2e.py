"""The MCP server and the gateway end to end: the SDK's own client over stdio, the agent
host as a process, the built-in relay, the real bot against the Telegram stand-in, and a
person tapping the cards."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agenthost_world import CLI, HostWorld, host_world
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import Implementation
from tapping import approve, card_showing, deny_with_reason, titled
from world import ADA

UPSTREAM = Path(__file__).parent / "mcp_upstream.py"
FILESYSTEM = Path(__file__).parent / "fixtures" / "mcp_filesystem.py"


@asynccontextmanager
async def mcp_client(hw: HostWorld, *args: str, env: dict[str, str] | None = None,
                     name: str = "mcp") -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], *args],
                                   env={**hw.host.env, **(env or {})})
    info = Implementation(name=name, version="1.0")
    async with (stdio_client(params) as (read, write),
                ClientSession(read, write, client_info=info) as session):
        await session.initialize()
        yield session


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


def calls(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


async def test_request_approval_and_ask_human(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        async with mcp_client(hw, "mcp") as session:
            call = asyncio.create_task(session.call_tool("request_approval", {
                "summary": "Rotate the staging database password", "tool": "rotate_password",
                "arguments": {"database": "staging", "new_password": "s3cret-value-42"}}))
            card = await card_showing(hw, "Rotate the staging database password")
            assert "database: staging" in card.text
            assert "<tg-spoiler>s3cret-value-42</tg-spoiler>" in (card.html or "")
            hw.world.tap(ADA, card, ADA, "Approve")
            result = await call
            assert not result.is_error
            assert text(result) == "approved by Ada Lovelace (@ada) in Telegram"

            call = asyncio.create_task(session.call_tool("request_approval", {
                "summary": "Delete the audit log", "tool": "delete_log"}))
            await deny_with_reason(hw, "Delete the audit log", "we keep it for a year")
            result = await call
            assert result.is_error
            assert text(result) == (
                "denied by Ada Lovelace (@ada) in Telegram: we keep it for a year")

            call = asyncio.create_task(session.call_tool("ask_human", {
                "question": "Which region should I deploy to?",
                "options": ["eu-west-1", "us-east-1"]}))
            card = await card_showing(hw, "Which region should I deploy to?")
            hw.world.tap(ADA, card, ADA, "eu-west-1")
            result = await call
            assert (result.is_error, text(result)) == (False, "eu-west-1")


async def test_the_gateway_forwards_only_what_a_person_approves(tmp_path: Path) -> None:
    record = tmp_path / "calls.jsonl"
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\n"read_*" = "allow"\n"write_*" = "deny"\n"*" = "ask"\n')
    async with host_world(tmp_path) as hw:
        await hw.pair()
        async with mcp_client(hw, "mcp", "gateway", "--policy", str(policy), "--name",
                              "my-notes", "--", sys.executable, str(UPSTREAM),
                              env={"UPSTREAM_RECORD": str(record)},
                              name="notes-app") as session:
            call = asyncio.create_task(session.call_tool("delete_note", {"name": "groceries"}))
            card = await card_showing(hw, "name: groceries")
            assert "notes-app wants to call delete_note on my-notes" in card.text
            assert "Delete the note called name." in card.text and "groceries" in card.text
            assert calls(record) == []
            hw.world.tap(ADA, card, ADA, "Approve")
            result = await call
            assert (result.is_error, text(result)) == (False, "deleted groceries")
            assert calls(record) == [{"tool": "delete_note", "arguments": {"name": "groceries"}}]

            call = asyncio.create_task(session.call_tool("delete_note", {"name": "taxes"}))
            await deny_with_reason(hw, "name: taxes", "keep the taxes")
            result = await call
            assert result.is_error
            assert text(result) == ("denied by Ada Lovelace (@ada) in Telegram: keep the taxes; "
                                    "delete_note was not called")

            cards = len(hw.world.cards(ADA))
            allowed = await session.call_tool("read_note", {"name": "a"})
            denied = await session.call_tool("write_note", {"name": "a", "text": "b"})
            assert not allowed.is_error and denied.is_error
            assert len(hw.world.cards(ADA)) == cards  # allow and deny never ask

            # The client goes away while a card waits: the card is taken back.
            call = asyncio.create_task(session.call_tool("delete_note", {"name": "old"}))
            await card_showing(hw, "name: old")
            call.cancel()
        await card_showing(hw, "name: old", lambda m: m.buttons() == [])
        assert [c["arguments"]["name"] for c in calls(record)] == ["groceries", "a"]


async def test_a_filesystem_servers_writes_show_the_diff_they_make_on_disk(
    tmp_path: Path,
) -> None:
    """``--filesystem``: the cards of write_file and edit_file show the change against the
    file on disk, where the server puts it (a relative path in its allowed directory,
    symlinks followed and shown), and approved, the server writes exactly that."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    config = project / "config.py"
    config.write_text("HOST = 'localhost'\nDEBUG = True\nPORT = 8000\n")
    (project / "link.py").symlink_to(config)
    (outside / "secret.txt").write_text("the launch codes\n")
    (project / "leak.txt").symlink_to(outside / "secret.txt")
    async with host_world(tmp_path) as hw:
        await hw.pair()
        async with mcp_client(hw, "mcp", "gateway", "--name", "files", "--filesystem", "--",
                              sys.executable, str(FILESYSTEM), str(project),
                              name="claude-code") as session:
            call = asyncio.create_task(session.call_tool(
                "write_file", {"path": "notes.md", "content": "hello\nworld\n"}))
            card = await approve(hw, titled(f"claude-code wants to write {project}/notes.md "
                                            "on files"))
            assert "--- /dev/null" in card.text and "+hello" in card.text
            assert not (await call).is_error
            assert (project / "notes.md").read_text() == "hello\nworld\n"

            # In order: the second edit matches only what the first one wrote.
            call = asyncio.create_task(session.call_tool("edit_file", {"path": "link.py", "edits": [
                {"oldText": "DEBUG = True", "newText": "DEBUG = False"},
                {"oldText": "DEBUG = False\nPORT = 8000", "newText": "DEBUG = False\nPORT = 9000"},
            ]}))
            card = await approve(hw, titled(f"claude-code wants to edit {project}/link.py → "
                                            f"{config} on files"))
            assert f"{project}/link.py → {config}" in card.text
            for line in ("-DEBUG = True", "+DEBUG = False", "-PORT = 8000", "+PORT = 9000",
                         " HOST = 'localhost'"):
                assert line in card.text, line
            assert not (await call).is_error
            assert config.read_text() == "HOST = 'localhost'\nDEBUG = False\nPORT = 9000\n"

            call = asyncio.create_task(session.call_tool("edit_file", {
                "path": "config.py", "edits": [{"oldText": "PORT = 9000", "newText": "PORT = 80"},
                                               {"oldText": "DEBUG = True", "newText": "DEBUG = 1"}],
            }))
            card = await approve(hw, titled(f"claude-code wants to edit {config} on files"))
            assert ("edit 2 of 2 matches nothing in the file: the server refuses the call and "
                    "changes nothing") in card.text
            assert "+PORT = 80" not in card.text and "-PORT" not in card.text
            assert (await call).is_error
            assert config.read_text() == "HOST = 'localhost'\nDEBUG = False\nPORT = 9000\n"

            call = asyncio.create_task(session.call_tool(
                "write_file", {"path": "leak.txt", "content": "overwritten"}))
            needle = f"leads to {outside}/secret.txt, outside the server's allowed directories"
            await deny_with_reason(hw, needle, "not that one")
            card = await card_showing(hw, needle)
            assert "the file could not be read" in card.text
            assert "launch codes" not in card.text and "Diff" not in card.text
            assert (await call).is_error
        assert (outside / "secret.txt").read_text() == "the launch codes\n"

        # Without --filesystem the gateway reads no file: the card shows the arguments.
        async with mcp_client(hw, "mcp", "gateway", "--name", "files", "--",
                              sys.executable, str(FILESYSTEM), str(project),
                              name="claude-code") as session:
            call = asyncio.create_task(session.call_tool(
                "write_file", {"path": "config.py", "content": "PORT = 1\n"}))
            card = await card_showing(hw, "claude-code wants to call write_file on files")
            assert "\ncontent\nPORT = 1" in card.text and "Diff" not in card.text
            assert "DEBUG" not in card.text
            hw.world.tap(ADA, card, ADA, "Deny")
            assert (await call).is_error
        assert config.read_text() == "HOST = 'localhost'\nDEBUG = False\nPORT = 9000\n"

        # A server that does not say where it may write: nothing to resolve the path against.
        async with mcp_client(hw, "mcp", "gateway", "--name", "files", "--filesystem", "--",
                              sys.executable, str(FILESYSTEM), str(project),
                              env={"FILESYSTEM_NO_ROOTS": "1"}, name="claude-code") as session:
            call = asyncio.create_task(session.call_tool(
                "write_file", {"path": "config.py", "content": "PORT = 2\n"}))
            needle = ("the file could not be read: the server's allowed directories could not "
                      "be read (list_allowed_directories)")
            card = await card_showing(hw, needle)
            assert "Diff" not in card.text
            hw.world.tap(ADA, card, ADA, "Deny")
            assert (await call).is_error
