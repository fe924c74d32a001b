"""The hooks end to end: the agent host as a process, the built-in relay, the real bot
against the Telegram stand-in. Each agent's documented input goes into the real
``skald-telegram hook AGENT``, a person taps the card, and the agent gets its answer."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

from agenthost_world import CLI, HostWorld, finished, host_world
from tapping import SLOW_MACHINE_SECONDS, approve, card_showing, deny_with_reason, titled
from world import ADA

FIXTURES = Path(__file__).parent / "fixtures" / "hooks"


async def start_hook(hw: HostWorld, agent: str, event: str, *args: str,
                     project: Path | None = None) -> Any:
    text = (FIXTURES / agent / f"{event}.json").read_text()
    if project is not None:
        text = text.replace("/work/project", str(project))
    process = await asyncio.create_subprocess_exec(
        *CLI, "hook", agent, "--state", str(hw.host.state), *args, env=hw.host.env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.write(text.encode())
    await process.stdin.drain()
    process.stdin.close()
    return process


async def answer_of(process: Any) -> tuple[int, Any]:
    result = await finished(process, timeout=2 * SLOW_MACHINE_SECONDS)
    return result.code, (json.loads(result.out) if result.out.strip() else None)


async def test_each_agent_gets_its_own_answer_to_a_tap(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()

        hook = await start_hook(hw, "claude-code", "PreToolUse-Bash")
        card = await approve(hw, "Claude Code wants to run: rm -rf build")
        assert "Remove the build folder" in card.text and "/work/project" in card.text
        assert await answer_of(hook) == (0, {"hookSpecificOutput": {
            "hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason": "approved by Ada Lovelace (@ada) in Telegram"}})

        hook = await start_hook(hw, "claude-code", "PermissionRequest-Bash")
        card = await card_showing(hw, "Claude Code wants to run: curl")
        outside_spoilers = re.sub(r"<tg-spoiler>.*?</tg-spoiler>", "", card.html or "")
        assert "<tg-spoiler>" in (card.html or "")
        assert "sk-live-123456789" not in outside_spoilers
        await deny_with_reason(hw, "Claude Code wants to run: curl", "not the production key")
        assert await answer_of(hook) == (0, {"hookSpecificOutput": {
            "hookEventName": "PermissionRequest", "decision": {
                "behavior": "deny",
                "message": "denied by Ada Lovelace (@ada) in Telegram: not the production key"}}})

        hook = await start_hook(hw, "codex", "PermissionRequest-Bash")
        await approve(hw, "Codex wants to run: git push --force origin main")
        code, answer = await answer_of(hook)
        assert (code, answer["hookSpecificOutput"]["decision"]) == (0, {"behavior": "allow"})

        hook = await start_hook(hw, "codex", "PreToolUse-Bash")
        await deny_with_reason(hw, "Codex wants to run: npm publish", "wait for the release")
        code, answer = await answer_of(hook)
        assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"

        hook = await start_hook(hw, "gemini", "BeforeTool-run_shell_command")
        await approve(hw, "Gemini CLI wants to run: docker system prune -af")
        assert await answer_of(hook) == (0, {
            "decision": "allow", "reason": "approved by Ada Lovelace (@ada) in Telegram"})

        hook = await start_hook(hw, "gemini", "BeforeTool-mcp")
        card = await card_showing(hw, "Gemini CLI wants to call query on postgres")
        assert "DELETE FROM sessions" in card.text
        hw.world.tap(ADA, card, ADA, "❌ Deny")
        code, answer = await answer_of(hook)
        assert (code, answer["decision"]) == (0, "deny")

        hook = await start_hook(hw, "cursor", "beforeShellExecution")
        card = await approve(hw, "Cursor wants to run: terraform apply -auto-approve")
        assert "/work/project/infra" in card.text
        code, answer = await answer_of(hook)
        assert (code, answer["permission"]) == (0, "allow")

        hook = await start_hook(hw, "cursor", "beforeMCPExecution")
        await deny_with_reason(hw, "Cursor wants to call send_message", "no announcements")
        reason = "denied by Ada Lovelace (@ada) in Telegram: no announcements"
        assert await answer_of(hook) == (0, {
            "permission": "deny", "userMessage": reason, "agentMessage": reason,
            "user_message": reason, "agent_message": reason})


async def test_writes_and_edits_show_the_diff_against_the_file_on_disk(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "config.py").write_text("HOST = 'localhost'\nDEBUG = True\nPORT = 8000\n")
    async with host_world(tmp_path) as hw:
        await hw.pair()

        hook = await start_hook(hw, "claude-code", "PreToolUse-Write", project=project)
        card = await approve(hw, titled(f"Claude Code wants to write {project}/app.py"))
        assert "+print('hello')" in card.text and "+print('world')" in card.text
        assert "--- /dev/null" in card.text
        assert (await answer_of(hook))[0] == 0

        hook = await start_hook(hw, "claude-code", "PreToolUse-Edit", project=project)
        card = await approve(hw, titled(f"Claude Code wants to edit {project}/config.py"))
        assert "-DEBUG = True" in card.text and "+DEBUG = False" in card.text
        assert " HOST = 'localhost'" in card.text
        assert (await answer_of(hook))[0] == 0

        (project / "app.py").write_text("print('hello')\nprint('world')\n")
        hook = await start_hook(hw, "cursor", "preToolUse-Write", project=project)
        card = await approve(hw, titled(f"Cursor wants to write {project}/app.py"))
        assert "-print('world')" in card.text and "+print('cursor')" in card.text
        assert " print('hello')" in card.text
        assert (await answer_of(hook))[1]["permission"] == "allow"


async def test_no_decision_in_time_and_a_host_that_dies_are_denies(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        hook = await start_hook(hw, "claude-code", "PreToolUse-Grep", "--timeout", "1")
        await card_showing(hw, "Claude Code wants to search for TODO")
        code, answer = await answer_of(hook)
        specific = answer["hookSpecificOutput"]
        assert (code, specific["permissionDecision"]) == (0, "deny")
        assert specific["permissionDecisionReason"] == (
            "denied by skald-telegram: no decision in Telegram within 1 s")

        # The agent gives up on the hook (its own timeout): a deny, and the card is taken back.
        hook = await start_hook(hw, "cursor", "beforeShellExecution")
        await card_showing(hw, "Cursor wants to run: terraform")
        hook.send_signal(signal.SIGTERM)
        code, answer = await answer_of(hook)
        assert (code, answer["permission"]) == (0, "deny")
        await card_showing(hw, "Cursor wants to run: terraform",
                                 lambda m: m.buttons() == [])

        hook = await start_hook(hw, "gemini", "BeforeTool-write_file", "--timeout", "2")
        await card_showing(hw, titled("Gemini CLI wants to write /work/project/notes.md"))
        hw.host.kill()
        code, answer = await answer_of(hook)
        assert (code, answer["decision"]) == (0, "deny")
        assert answer["reason"].startswith("denied by skald-telegram: ")
