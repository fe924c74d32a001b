"""Each agent's hook contract: its documented inputs parse, and every verdict becomes the
exact answer (stdout JSON and exit code) that agent's documentation asks for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.integrations.agents import AGENTS
from bot.integrations.approval import OnError, Verdict, verdict_of
from bot.integrations.contract import HookContract, HookInputError
from bot.integrations.describe import describe
from skald_telegram import Outcome

FIXTURES = Path(__file__).parent / "fixtures" / "hooks"
ALLOW = Verdict("allow", "approved by Ada in Telegram")
DENY = Verdict("deny", "denied by Ada in Telegram: not on a Friday")
CONTRACTS = {name: agent.contract() for name, agent in AGENTS.items()}
ASK = Verdict("ask", "skald-telegram could not get a decision; asking here instead")


def fixture(agent: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / agent / f"{name}.json").read_text())
    return data


def every_fixture() -> list[tuple[str, str]]:
    return sorted((p.parent.name, p.stem) for p in FIXTURES.glob("*/*.json"))


@pytest.mark.parametrize(("agent", "name"), every_fixture())
def test_every_documented_input_parses(agent: str, name: str) -> None:
    event = CONTRACTS[agent].parse(fixture(agent, name))
    assert event.name == name.split("-")[0]
    assert event.call.agent == CONTRACTS[agent].agent
    assert event.call.tool


def answer(contract: HookContract, event: str | None, verdict: Verdict) -> tuple[Any, int]:
    out = contract.answer(event, verdict)
    return (json.loads(out.stdout) if out.stdout else None), out.exit_code


def test_claude_code_pre_tool_use() -> None:
    claude = CONTRACTS["claude-code"]
    for verdict in (ALLOW, DENY, ASK):
        assert answer(claude, "PreToolUse", verdict) == ({"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": verdict.decision,
            "permissionDecisionReason": verdict.reason}}, 0)


def test_claude_code_permission_request() -> None:
    claude = CONTRACTS["claude-code"]
    assert answer(claude, "PermissionRequest", ALLOW) == ({"hookSpecificOutput": {
        "hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}, 0)
    assert answer(claude, "PermissionRequest", DENY) == ({"hookSpecificOutput": {
        "hookEventName": "PermissionRequest",
        "decision": {"behavior": "deny", "message": DENY.reason}}}, 0)
    # No "ask" in PermissionRequest: no output lets Claude Code show its own dialog.
    assert answer(claude, "PermissionRequest", ASK) == (None, 0)


def test_codex_permission_request_and_deny_only_pre_tool_use() -> None:
    codex = CONTRACTS["codex"]
    assert answer(codex, "PermissionRequest", ALLOW)[0]["hookSpecificOutput"]["decision"] == {
        "behavior": "allow"}
    assert answer(codex, "PermissionRequest", DENY)[0]["hookSpecificOutput"]["decision"] == {
        "behavior": "deny", "message": DENY.reason}
    assert answer(codex, "PermissionRequest", ASK) == (None, 0)
    assert answer(codex, "PreToolUse", DENY) == ({"hookSpecificOutput": {
        "hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": DENY.reason}}, 0)
    assert answer(codex, "PreToolUse", ALLOW) == (None, 0)
    assert answer(codex, "PreToolUse", ASK) == (None, 0)


def test_gemini_before_tool() -> None:
    gemini = CONTRACTS["gemini"]
    assert answer(gemini, "BeforeTool", ALLOW) == ({"decision": "allow",
                                                    "reason": ALLOW.reason}, 0)
    assert answer(gemini, "BeforeTool", DENY) == ({"decision": "deny", "reason": DENY.reason}, 0)
    assert answer(gemini, "BeforeTool", ASK) == ({}, 0)
    assert answer(gemini, None, DENY) == ({"decision": "deny", "reason": DENY.reason}, 0)


def test_cursor_permissions() -> None:
    cursor = CONTRACTS["cursor"]
    for event in ("beforeShellExecution", "beforeMCPExecution", "preToolUse", None):
        for verdict in (ALLOW, DENY, ASK):
            assert answer(cursor, event, verdict) == ({
                "permission": verdict.decision, "userMessage": verdict.reason,
                "agentMessage": verdict.reason, "user_message": verdict.reason,
                "agent_message": verdict.reason}, 0)


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_an_unknown_event_blocks_with_exit_code_2(agent: str) -> None:
    out = CONTRACTS[agent].answer(None, DENY)
    assert (out.stdout, out.exit_code, out.stderr) == ("", 2, DENY.reason)


def test_what_each_agent_sends_becomes_the_call() -> None:
    bash = CONTRACTS["claude-code"].parse(fixture("claude-code", "PreToolUse-Bash")).call
    assert (bash.tool, bash.arguments["command"], bash.cwd) == ("Bash", "rm -rf build",
                                                                "/work/project")
    mcp = CONTRACTS["claude-code"].parse(fixture("claude-code", "PreToolUse-mcp")).call
    assert (mcp.mcp_server, mcp.mcp_tool) == ("github", "create_issue")
    gemini = CONTRACTS["gemini"].parse(fixture("gemini", "BeforeTool-mcp")).call
    assert (gemini.mcp_server, gemini.mcp_tool) == ("postgres", "query")
    shell = CONTRACTS["cursor"].parse(fixture("cursor", "beforeShellExecution")).call
    assert (shell.tool, shell.arguments, shell.cwd) == (
        "Shell", {"command": "terraform apply -auto-approve"}, "/work/project/infra")
    tool = CONTRACTS["cursor"].parse(fixture("cursor", "beforeMCPExecution")).call
    assert tool.arguments == {"channel": "#ops", "text": "Deploying now"}
    assert (tool.mcp_server, tool.mcp_tool) == ("npx -y slack-mcp", "send_message")


def test_a_codex_patch_sent_as_a_plain_string_is_described_as_the_patch() -> None:
    data = fixture("codex", "PermissionRequest-apply_patch")
    call = CONTRACTS["codex"].parse(data).call
    assert (call.tool, call.arguments) == ("apply_patch", {"input": data["tool_input"]})
    shown = describe(call, lambda path: None)
    assert shown.summary == "Codex wants to patch src/app.py"
    patch = next(block for block in shown.blocks if block.get("label") == "Patch")
    assert patch["value"] == data["tool_input"]


@pytest.mark.parametrize("data", [
    {},
    {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {}},
    {"hook_event_name": "PreToolUse", "tool_input": {}},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": "[1"},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": [1]},
])
def test_input_that_breaks_the_contract_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises(HookInputError):
        CONTRACTS["claude-code"].parse(data)


def test_what_each_outcome_means_for_the_agent() -> None:
    ada = {"name": "Ada Lovelace", "username": "ada", "telegram_user_id": 4242}
    cases: list[tuple[Outcome, OnError, Verdict]] = [
        (Outcome("a", "approved", decided_by=ada), "deny",
         Verdict("allow", "approved by Ada Lovelace (@ada) in Telegram")),
        (Outcome("a", "denied", "not now", {"username": "bob"}), "ask",
         Verdict("deny", "denied by @bob in Telegram: not now")),
        (Outcome("a", "denied"), "deny", Verdict("deny", "denied in Telegram")),
        (Outcome("a", "expired"), "deny",
         Verdict("deny", "denied by skald-telegram: no decision in Telegram within 30 s")),
        (Outcome("a", "pending"), "ask", Verdict(
            "ask", "skald-telegram could not get a decision (no decision in Telegram within "
            "30 s); asking here instead")),
        (Outcome("a", "withdrawn"), "deny", Verdict(
            "deny", "denied by skald-telegram: the request was withdrawn before anyone decided")),
        (Outcome("a", "answered", answer="yes"), "deny", Verdict(
            "deny", "denied by skald-telegram: the request ended without a decision (answered)")),
    ]
    for outcome, on_error, verdict in cases:
        assert verdict_of(outcome, 30, on_error) == verdict


def test_one_registry_names_every_agent_for_the_hook_its_settings_and_its_cards() -> None:
    """The command line, the settings installer and the contracts all read the registry:
    each agent there has its contract (under the registry's display name), a settings
    site, and documented fixtures here."""
    assert set(AGENTS) == {path.name for path in FIXTURES.iterdir() if path.is_dir()}
    for name, agent in AGENTS.items():
        assert agent.name == name
        assert agent.contract().agent == agent.display_name
        assert agent.site.events and agent.site.user_file and agent.site.project_file
