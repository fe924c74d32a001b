"""Edits made in Telegram end to end: the agent host as a process, the built-in relay,
the real bot against the Telegram stand-in; a person edits a value on the card and
approves the edited call, and ``ask`` or the Claude Code hook gets the edited call."""

from __future__ import annotations

import json
from pathlib import Path

from agenthost_world import finished, host_world, start_cli
from tapping import edit_and_approve
from test_hook_e2e import answer_of, start_hook


async def test_ask_editable_returns_the_arguments_edited_in_telegram(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        asked = await start_cli("ask", "--tool", "deploy", "--arg", "target=staging",
                                "--arg", "tag=v1", "--editable", "target", "--json",
                                env=hw.host.env)
        card = await edit_and_approve(hw, "deploy(", "canary")
        result = await finished(asked)
        assert result.code == 0, result.err
        report = json.loads(result.out)
        assert report["decision"] == "approved" and report["edited"] is True
        assert report["arguments"] == {"target": "canary", "tag": "v1"}
        assert report["decided_by"]["name"] == "Ada Lovelace"
        await hw.tg.wait_for(lambda tg: "Approved by Ada" in card.text and not card.buttons())
        assert "- staging\n+ canary" in card.text


async def test_claude_code_gets_the_command_edited_in_telegram(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        hook = await start_hook(hw, "claude-code", "PreToolUse-Bash")
        await edit_and_approve(hw, "Claude Code wants to run: rm -rf build", "rm -rf build/cache")
        assert await answer_of(hook) == (0, {"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason":
                "approved with an edit by Ada Lovelace (@ada): command is now "
                "`rm -rf build/cache`",
            "updatedInput": {"command": "rm -rf build/cache",
                             "description": "Remove the build folder", "timeout": 120000}}})
