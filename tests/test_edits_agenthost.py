"""Edits before approving, on the agent side: the agent host serves its local API on its
socket in this process, a paired test device seals edited decisions to it (the bot offers
no edit yet), and the real hook, ``ask`` and gateway processes get the edited call back.
Forged edits are refused and leave the approval open."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp import ClientSession, StdioServerParameters, stdio_client
from test_grants_agenthost import KEY, OFFER, Clock, Phone, paired_host

from bot.agenthost.api import create_app
from bot.agenthost.items import Ended, Item, State, inbox_body
from bot.agenthost.serve import _Server, _unix_socket
from bot.agenthost.service import AgentHost
from bot.integrations.policy import parse_policy
from bot.protocol.encoding import args_sha256
from bot.protocol.envelope import seal
from bot.protocol.payloads import InboxUpdate, raw_payload
from skald_telegram.client import SOCKET_NAME

CLI = [sys.executable, "-m", "bot"]
FIXTURES = Path(__file__).parent / "fixtures" / "hooks"
UPSTREAM = Path(__file__).parent / "mcp_upstream.py"
ADA = {"name": "Ada Lovelace", "telegram_user_id": 4242, "username": "ada"}
WAIT_S = 30.0


@asynccontextmanager
async def served(folder: Path) -> AsyncIterator[tuple[AgentHost, Phone, Path]]:
    """A host with one paired device, its API on the socket of its state folder."""
    clock = Clock()
    with paired_host(folder, clock, on_relay=lambda: True) as (host, phone):
        state = folder / "agent"
        server = _Server(uvicorn.Config(
            create_app(host), lifespan="off", log_level="warning", log_config=None))
        serving = asyncio.create_task(server.serve(sockets=[_unix_socket(state / SOCKET_NAME)]))
        try:
            yield host, phone, state
        finally:
            server.should_exit = True
            host.release_waiters()
            await serving


async def open_approval(host: AgentHost) -> Item:
    """The approval a process submitted, once it is there."""
    for _ in range(int(WAIT_S / 0.05)):
        items = host.store.open_items()
        if items:
            return items[0]
        await asyncio.sleep(0.05)
    raise AssertionError("no approval arrived")


async def send_edit(phone: Phone, item: Item, arguments: Any, *, digest: str | None = None,
                    grant: dict[str, Any] | None = None) -> None:
    """An approve with edited ``arguments``, sealed as the device would (``digest``
    replaces ``edited_sha256``: a forged one)."""
    body: dict[str, Any] = {
        "decision_id": str(uuid.uuid4()), "approval_id": item.item_id, "decision": "approve",
        "reason": None, "decided_by": ADA, "decided_at": "2027-01-15T08:00:00Z",
        "args_sha256": item.args_sha256, "arguments": arguments,
        "edited_sha256": digest or args_sha256(arguments),
    }
    if grant is not None:
        body["grant"] = grant
    envelope = seal(raw_payload("approval_decision", body), sender=phone.identity,
                    recipient=phone.host.identity.card, ts_ms=phone.clock())
    await phone.host.inbound.on_envelope(envelope.to_json())
    await asyncio.sleep(0)  # the host queues the devices' update on its next turn


async def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ})
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), WAIT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def hook(agent: str, event: str, state: Path) -> Any:
    return asyncio.ensure_future(run(*CLI, "hook", agent, "--state", str(state),
                                     stdin=(FIXTURES / agent / f"{event}.json").read_text()))


async def test_claude_code_runs_the_edited_command_and_is_told_what_changed(
        tmp_path: Path) -> None:
    async with served(tmp_path) as (host, phone, state):
        answer = hook("claude-code", "PreToolUse-Bash", state)
        item = await open_approval(host)
        assert item.wire["editable"] == ["command"]
        assert phone.last_update().approvals[0].editable == ("command",)
        edited = {**item.wire["arguments"], "command": "rm -rf build/cache"}
        await send_edit(phone, item, edited)
        code, out, _ = await answer
        assert code == 0 and json.loads(out) == {"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason":
                "approved with an edit by Ada Lovelace (@ada): command is now "
                "`rm -rf build/cache`",
            "updatedInput": {"command": "rm -rf build/cache",
                             "description": "Remove the build folder", "timeout": 120000}}}
        kept = host.get(item.item_id)
        assert kept.wire["arguments"]["command"] == "rm -rf build"
        assert kept.edited == edited and kept.state is State.APPROVED
        resolved = phone.last_update().resolved
        assert [(r.id, r.outcome) for r in resolved] == [(item.item_id, "approved")]
        assert inbox_body(1, "laptop", [], [Ended.of(kept)])["resolved"][0]["edited"] is True
        assert host.store.received(item.item_id) == [("decision", "accepted")]


async def test_claude_code_writes_the_edited_content(tmp_path: Path) -> None:
    async with served(tmp_path) as (host, phone, state):
        answer = hook("claude-code", "PreToolUse-Write", state)
        item = await open_approval(host)
        assert item.wire["editable"] == ["content"]
        await send_edit(phone, item, {**item.wire["arguments"], "content": "print('hi')\n"})
        code, out, _ = await answer
        output = json.loads(out)["hookSpecificOutput"]
        assert code == 0 and output["permissionDecision"] == "allow"
        assert output["updatedInput"] == {"file_path": "/work/project/app.py",
                                          "content": "print('hi')\n"}
        assert output["permissionDecisionReason"].startswith(
            "approved with an edit by Ada Lovelace (@ada): content is now")


async def test_permission_request_and_gemini_get_the_edited_input_their_way(
        tmp_path: Path) -> None:
    async with served(tmp_path) as (host, phone, state):
        answer = hook("claude-code", "PermissionRequest-Bash", state)
        item = await open_approval(host)
        assert "editable" not in item.wire  # its command holds a credential
        await phone.decide(item.item_id, grant=None)
        assert json.loads((await answer)[1])["hookSpecificOutput"]["decision"] == {
            "behavior": "allow"}

        answer = hook("gemini", "BeforeTool-run_shell_command", state)
        item = await open_approval(host)
        assert item.wire["editable"] == ["command"]
        await send_edit(phone, item, {**item.wire["arguments"], "command": "docker image prune"})
        code, out, _ = await answer
        assert code == 0 and json.loads(out)["hookSpecificOutput"] == {"tool_input": {
            "command": "docker image prune", "description": "Free disk space"}}

        answer = hook("codex", "PermissionRequest-Bash", state)
        item = await open_approval(host)
        assert "editable" not in item.wire  # Codex cannot run an edited call
        await send_edit(phone, item, {**item.wire["arguments"], "command": "git push"})
        assert host.get(item.item_id).pending
        await phone.decide(item.item_id, grant=None, decision="deny")
        assert (await answer)[0] == 0


def script(host: AgentHost) -> Item:
    arguments = {"command": "git status -s", "timeout": 30, "description": "status"}
    return host.submit_approval(tool="Bash", summary="run: git status -s", arguments=arguments,
                                blocks=None, timeout_s=600, grant=OFFER,
                                editable=("command", "timeout"))


@pytest.mark.parametrize(("change", "why"), [
    ({"description": "other"}, "'description' is not editable"),
    ({"command": 5}, "'command' changed its type from string to number"),
    ({"timeout": "30"}, "'timeout' changed its type from number to string"),
    ({"timeout": True}, "'timeout' changed its type from number to boolean"),
    ({"command": "git status\u202e -s"}, "the edited 'command' holds an invisible"),
    ({"extra": "x"}, "an edit may not add or remove a key"),
])
async def test_a_forged_edit_is_refused_and_the_approval_stays_open(
        tmp_path: Path, change: dict[str, Any], why: str) -> None:
    clock = Clock()
    with paired_host(tmp_path, clock, on_relay=lambda: True) as (host, phone):
        item = script(host)
        await send_edit(phone, item, {**item.wire["arguments"], **change})
        assert host.get(item.item_id).pending
        [(kind, verdict)] = host.store.received(item.item_id)
        assert kind == "decision" and verdict.startswith(f"refused: a bad edit: {why}")
        await send_edit(phone, item, {**item.wire["arguments"], "command": "git status"})
        assert host.get(item.item_id).edited == {**item.wire["arguments"],
                                                 "command": "git status"}


async def test_a_bad_digest_or_an_edit_with_a_grant_is_never_taken(tmp_path: Path) -> None:
    clock = Clock()
    with paired_host(tmp_path, clock, on_relay=lambda: True) as (host, phone):
        item = script(host)
        edited = {**item.wire["arguments"], "command": "git log"}
        await send_edit(phone, item, edited, digest=args_sha256(item.wire["arguments"]))
        await send_edit(phone, item, edited, grant={"key": KEY, "minutes": 30})
        assert host.get(item.item_id).pending and host.grants() == []
        await send_edit(phone, item, {**edited, "timeout": 60})
        done = host.get(item.item_id)
        assert done.state is State.APPROVED and done.edited == {**edited, "timeout": 60}
        update = phone.last_update()
        assert isinstance(update, InboxUpdate) and update.approvals == ()


async def test_a_secret_is_never_editable(tmp_path: Path) -> None:
    clock = Clock()
    with paired_host(tmp_path, clock, on_relay=lambda: True) as (host, _):
        item = host.submit_approval(
            tool="deploy", summary=None, blocks=None, timeout_s=600,
            arguments={"api_token": "t0k3n", "target": "curl -u ada:hunter22 x", "note": "n"},
            editable=("api_token", "target", "note"))
        assert item.wire["editable"] == ["note"]


async def test_ask_editable_returns_the_edited_arguments(tmp_path: Path) -> None:
    async with served(tmp_path) as (host, phone, state):
        asked = asyncio.ensure_future(run(
            *CLI, "ask", "--state", str(state), "--tool", "deploy", "--arg", "target=staging",
            "--arg", "tag=v1", "--editable", "target", "--json"))
        item = await open_approval(host)
        assert item.wire["editable"] == ["target"]
        await send_edit(phone, item, {"target": "canary", "tag": "v1"})
        code, out, _ = await asked
        report = json.loads(out)
        assert code == 0 and report["decision"] == "approved" and report["edited"] is True
        assert report["arguments"] == {"target": "canary", "tag": "v1"}

        code, _, err = await run(*CLI, "ask", "--state", str(state), "--tool", "deploy",
                                 "--arg", "tag=v1", "--editable", "target")
        assert code == 3 and "--editable target names no argument of the call" in err


@asynccontextmanager
async def mcp_session(state: Path, *args: str, record: Path) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "bot", "mcp", *args],
        env={**os.environ, "SKALD_AGENT_STATE": str(state), "UPSTREAM_RECORD": str(record)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def test_the_gateway_forwards_the_edited_arguments_upstream(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[tools]\n"*" = "ask"\n\n[editable]\n"write_note" = ["text"]\n')
    record = tmp_path / "calls.jsonl"
    async with served(tmp_path) as (host, phone, state), mcp_session(
            state, "gateway", "--state", str(state), "--policy", str(policy), "--",
            sys.executable, str(UPSTREAM), record=record) as session:
        calling = asyncio.ensure_future(
            session.call_tool("write_note", {"name": "todo", "text": "buy milk"}))
        item = await open_approval(host)
        assert item.wire["editable"] == ["text"]
        await send_edit(phone, item, {"name": "todo", "text": "buy oat milk"})
        result = await asyncio.wait_for(calling, WAIT_S)
        assert not result.is_error
        assert result.content[0].text == ("approved with an edit by Ada Lovelace (@ada): "
                                          "text is now `buy oat milk`")
        assert [json.loads(line) for line in record.read_text().splitlines()] == [
            {"tool": "write_note", "arguments": {"name": "todo", "text": "buy oat milk"}}]


async def test_request_approval_returns_the_edited_arguments(tmp_path: Path) -> None:
    async with served(tmp_path) as (host, phone, state), mcp_session(
            state, "--state", str(state), record=tmp_path / "unused") as session:
        calling = asyncio.ensure_future(session.call_tool("request_approval", {
            "summary": "Send the report", "tool": "send", "editable": ["to"],
            "arguments": {"to": "team@example.com", "body": "Q3"}}))
        item = await open_approval(host)
        await send_edit(phone, item, {"to": "ada@example.com", "body": "Q3"})
        result = await asyncio.wait_for(calling, WAIT_S)
        assert not result.is_error
        assert result.structured_content == {
            "edited": True, "arguments": {"to": "ada@example.com", "body": "Q3"}}


def test_a_policy_marks_arguments_editable_by_glob() -> None:
    policy = parse_policy('[editable]\n"write_*" = ["text", "text"]\n"*" = ["name"]\n')
    assert policy.editable_for("write_note") == ("text",)
    assert policy.editable_for("read_note") == ("name",)
    assert policy.editable_for("wri\u200bte_note") == ()
