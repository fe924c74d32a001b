"""Grants end to end with real processes: the agent host, Claude Code's hook, ``ask`` and
``agent grants`` as subprocesses, the built-in relay, the real bot against the Telegram
stand-in. A person approves ``git status`` with a grant; later ``git status`` calls are
answered at once and shown in the chat, other commands still ask; revoking in Telegram
ends it; a restarted host keeps it."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from agenthost_world import CLI, HostWorld, finished, host_world, run_cli
from mcp import ClientSession, StdioServerParameters, stdio_client
from tapping import titled
from world import ADA

from bot.playground.stub import StoredMessage
from bot.render.credentials import mask_credentials

SESSION = "5f1c2a"


def bash_event(command: str, session: str = SESSION) -> str:
    """Claude Code's PreToolUse input for a Bash call (its documented fields)."""
    return json.dumps({
        "session_id": session, "transcript_path": f"/home/ada/.claude/{session}.jsonl",
        "cwd": "/work/project", "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": command}, "tool_use_id": "toolu_1",
    })


def write_event(path: str, cwd: Path, session: str = SESSION) -> str:
    """Claude Code's PreToolUse input for a Write call."""
    return json.dumps({
        "session_id": session, "transcript_path": f"/home/ada/.claude/{session}.jsonl",
        "cwd": str(cwd), "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Write", "tool_input": {"file_path": path, "content": "new\n"},
        "tool_use_id": "toolu_2",
    })


async def start_hook(hw: HostWorld, command: str, session: str = SESSION,
                     env: dict[str, str] | None = None, *, event: str | None = None) -> Any:
    process = await asyncio.create_subprocess_exec(
        *CLI, "hook", "claude-code", "--state", str(hw.host.state), "--timeout", "60",
        env=env or hw.host.env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    process.stdin.write((event or bash_event(command, session)).encode())
    await process.stdin.drain()
    process.stdin.close()
    return process


async def decision_of(process: Any) -> tuple[str, str]:
    result = await finished(process)
    assert result.code == 0, result.err
    output = json.loads(result.out)["hookSpecificOutput"]
    return output["permissionDecision"], output["permissionDecisionReason"]


def activity(hw: HostWorld) -> list[StoredMessage]:
    return [m for m in hw.tg.bot_messages(ADA) if m.text.startswith("Ran under")]


async def grant_git_status(hw: HostWorld) -> None:
    hook = await start_hook(hw, "git status -s")
    card = await hw.world.wait_card(ADA, "git status -s")
    assert "✅ Approve + git status in this session for 30 min" in [
        b["text"] for b in card.buttons()]
    hw.world.tap(ADA, card, ADA, "Approve +")
    assert await decision_of(hook) == ("allow", "approved by Ada Lovelace (@ada) in Telegram")


async def test_git_status_granted_covered_shown_and_revoked(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        await grant_git_status(hw)
        await hw.world.wait_card(ADA, "git status -s", lambda m: "also granted" in m.text)

        for command in ("git status --porcelain", "git status", "git status -sb"):
            decision, reason = await decision_of(await start_hook(hw, command))
            assert decision == "allow"
            assert re.fullmatch(r"approved by Ada Lovelace's grant \(`git status` in this "
                                r"session, (29|30) min left\)", reason), reason
        await hw.tg.wait_for(lambda tg: bool(activity(hw)) and "git status -sb"
                             in activity(hw)[-1].text)
        note = activity(hw)[-1]
        assert len(activity(hw)) == 1
        for command in ("git status --porcelain", "git status", "git status -sb"):
            assert f"🔁 Claude Code wants to run: {command} — under Ada Lovelace's grant" \
                in note.text

        listing = await run_cli("agent", "grants", env=hw.host.env)
        assert listing.code == 0, listing.err
        (line,) = listing.out.splitlines()
        assert re.fullmatch(r"gr_\S+  `git status` in this session  granted by Ada Lovelace  "
                            r"until \S+Z  3 use\(s\)", line), line

        for command in ("git log", "rm -rf build"):
            hook = await start_hook(hw, command)
            card = await hw.world.wait_card(ADA, f"run: {command}")
            grants = [b["text"] for b in card.buttons() if "Approve +" in b["text"]]
            assert grants == (["✅ Approve + git log in this session for 30 min"]
                              if command == "git log" else [])
            hw.world.tap(ADA, card, ADA, "❌ Deny")
            assert (await decision_of(hook))[0] == "deny"

        hw.world.tap(ADA, note, ADA, "Revoke")
        await hw.tg.wait_for(lambda tg: "revoked by Ada Lovelace" in activity(hw)[-1].text)
        assert (await run_cli("agent", "grants", env=hw.host.env)).out.strip() == \
            "no grants in force"
        hook = await start_hook(hw, "git status")
        card = await hw.world.wait_card(ADA, "run: git status\n")
        hw.world.tap(ADA, card, ADA, "✅ Approve")
        assert await decision_of(hook) == ("allow",
                                           "approved by Ada Lovelace (@ada) in Telegram")


async def test_a_grant_covers_nothing_that_could_do_more(tmp_path: Path) -> None:
    """Under a grant for `git status`: git found elsewhere on the agent's PATH, a path to a
    program, shell syntax and a credential each ask again, and the card offers no grant for
    the last three (the credential masked)."""
    elsewhere = tmp_path / "evil"
    elsewhere.mkdir()
    (elsewhere / "git").write_text("#!/bin/sh\n")
    (elsewhere / "git").chmod(0o755)
    async with host_world(tmp_path) as hw:
        await hw.pair()
        await grant_git_status(hw)
        moved = {**hw.host.env, "PATH": f"{elsewhere}:{hw.host.env.get('PATH', '')}"}
        for command, env, offered in [
            ("git status", moved, True),
            (f"{elsewhere}/git status", None, False),
            ("git status -- $(touch /tmp/p)", None, False),
            ("git status -- https://ada:hunter2@example.com", None, False),
        ]:
            hook = await start_hook(hw, command, env=env)
            card = await hw.world.wait_card(ADA, titled(f"run: {mask_credentials(command)}\n"))
            grants = [b["text"] for b in card.buttons() if "Approve +" in b["text"]]
            assert grants == (["✅ Approve + git status in this session for 30 min"]
                              if offered else []), command
            # Masked in the title and the command; shown once, behind a spoiler, in the
            # secret's own row (a private chat's setting).
            assert "ada:hunter2" not in card.text and card.text.count("hunter2") <= 1
            hw.world.tap(ADA, card, ADA, "❌ Deny")
            assert (await decision_of(hook))[0] == "deny"


async def test_another_session_is_not_covered_and_a_restart_keeps_the_grant(
        tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        await grant_git_status(hw)

        other = await start_hook(hw, "git status", session="other-session")
        card = await hw.world.wait_card(ADA, "run: git status\n")
        hw.world.tap(ADA, card, ADA, "❌ Deny")
        assert (await decision_of(other))[0] == "deny"

        await hw.host.stop()
        await hw.host.start()
        decision, reason = await decision_of(await start_hook(hw, "git status --short"))
        assert decision == "allow" and "Ada Lovelace's grant" in reason

        revoked = await run_cli("agent", "grants", "revoke", "gr_nope", env=hw.host.env)
        assert revoked.code == 1 and "no grant" in revoked.err
        grant_id = (await run_cli("agent", "grants", env=hw.host.env)).out.split()[0]
        revoked = await run_cli("agent", "grants", "revoke", grant_id, env=hw.host.env)
        assert revoked.code == 0 and grant_id in revoked.out
        await hw.tg.wait_for(lambda tg: bool(activity(hw)))
        hw.tg.send_text(ADA, ADA, "/grants")
        await hw.tg.wait_for(lambda tg: any("No grants in force here" in m.text
                                            for m in tg.bot_messages(ADA)))


async def test_an_edit_grant_stops_at_a_symlink_swapped_in_later(tmp_path: Path) -> None:
    project, outside = (tmp_path / "project").resolve(), (tmp_path / "outside").resolve()
    (project / "src").mkdir(parents=True)
    outside.mkdir()
    (project / "src" / "app.py").write_text("old\n")
    (outside / "secret.txt").write_text("keep out\n")
    async with host_world(tmp_path) as hw:
        await hw.pair()
        hook = await start_hook(hw, "", event=write_event("src/app.py", project))
        card = await hw.world.wait_card(ADA, "write")
        hw.world.tap(ADA, card, ADA, "Approve + edits in")
        assert (await decision_of(hook))[0] == "allow"

        covered = await start_hook(hw, "", event=write_event("src/../src/new.py", project))
        decision, reason = await decision_of(covered)
        assert decision == "allow" and "grant (edits in " in reason

        (project / "src" / "app.py").unlink()
        (project / "src" / "app.py").symlink_to(outside / "secret.txt")
        hook = await start_hook(hw, "", event=write_event("src/app.py", project))
        card = await hw.world.wait_card(ADA, "secret.txt")
        assert f"{project}/src/app.py → {outside}/secret.txt" in card.text
        hw.world.tap(ADA, card, ADA, "❌ Deny")
        assert (await decision_of(hook))[0] == "deny"


async def test_ask_offers_a_grant_only_with_a_key(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        plain = asyncio.create_task(run_cli("ask", "--tool", "deploy", "--arg", "env=staging",
                                            "--timeout", "60", env=hw.host.env))
        card = await hw.world.wait_card(ADA, "deploy")
        assert not any("Approve +" in b["text"] for b in card.buttons())
        hw.world.tap(ADA, card, ADA, "✅ Approve")
        assert (await plain).code == 0

        ask = ["ask", "--tool", "deploy-staging", "--arg", "env=staging", "--timeout", "60",
               "--grant-key", "deploy:staging", "--grant-label", "deploys to staging"]
        first = asyncio.create_task(run_cli(*ask, env=hw.host.env))
        card = await hw.world.wait_card(ADA, "deploy-staging")
        hw.world.tap(ADA, card, ADA, "Approve + offered by a script: key deploy:staging")
        assert (await first).code == 0
        second = await run_cli(*ask, env=hw.host.env)
        assert second.code == 0
        assert re.fullmatch(r"approved by Ada Lovelace's grant \(offered by a script: key "
                            r"`deploy:staging` — deploys to staging, (29|30) min left\)\n",
                            second.out), second.out


async def test_a_script_cannot_offer_a_grant_that_covers_a_hooks_calls(
        tmp_path: Path) -> None:
    """``ask`` names the very key and label Claude Code's hook derives for ``git status``
    in its session: the card says a script offers it, and the hook's calls still ask."""
    async with host_world(tmp_path) as hw:
        await hw.pair()
        ask = ["ask", "--tool", "Bash", "--arg", "command=git status", "--timeout", "60",
               "--grant-key", f"Claude Code|{SESSION}|shell|git status",
               "--grant-label", "`git status` in this session"]
        first = asyncio.create_task(run_cli(*ask, env=hw.host.env))
        card = await hw.world.wait_card(ADA, "Bash")
        (button,) = [b["text"] for b in card.buttons() if "Approve +" in b["text"]]
        assert button.startswith("✅ Approve + offered by a script: key Claude Code|")
        hw.world.tap(ADA, card, ADA, "Approve + offered by a script")
        assert (await first).code == 0

        hook = await start_hook(hw, "git status")
        card = await hw.world.wait_card(ADA, "wants to run: git status")
        hw.world.tap(ADA, card, ADA, "❌ Deny")
        decision, _reason = await decision_of(hook)
        assert decision == "deny"
        async with hw.host.client() as client:
            (grant,) = await client.grants()
        assert grant["uses"] == 0 and grant["key"].startswith("script:")


UPSTREAM = Path(__file__).parent / "mcp_upstream.py"


def gateway_to(hw: HostWorld, server: Path, record: Path) -> StdioServerParameters:
    """``mcp gateway`` in front of the upstream ``server`` (recording its calls)."""
    return StdioServerParameters(
        command=CLI[0], args=[*CLI[1:], "mcp", "gateway", "--", sys.executable, str(server)],
        env={**hw.host.env, "UPSTREAM_RECORD": str(record)})


async def grant_delete_note(hw: HostWorld, session: ClientSession) -> None:
    """Call ``delete_note`` for "a" and approve it with its grant."""
    await session.initialize()
    call = asyncio.create_task(session.call_tool("delete_note", {"name": "a"}))
    card = await hw.world.wait_card(ADA, "name: a")
    hw.world.tap(ADA, card, ADA, "Approve + delete_note of ")
    assert not (await call).is_error


async def test_a_gateway_grant_covers_that_tool_of_that_upstream_only(
        tmp_path: Path) -> None:
    """The grant covers that tool of the upstream started with that command line; a second
    upstream, started from another file, calls itself ``notes`` too and is still asked
    about."""
    record = tmp_path / "calls.jsonl"
    impostor = tmp_path / "impostor.py"
    impostor.write_text(UPSTREAM.read_text())
    async with host_world(tmp_path) as hw:
        await hw.pair()
        async with stdio_client(gateway_to(hw, UPSTREAM, record)) as (read, write), \
                ClientSession(read, write) as session:
            await grant_delete_note(hw, session)
            covered = await session.call_tool("delete_note", {"name": "b"})
            assert not covered.is_error
            await hw.tg.wait_for(lambda tg: any("delete_note" in m.text for m in activity(hw)))
            other = asyncio.create_task(session.call_tool("read_note", {"name": "c"}))
            card = await hw.world.wait_card(ADA, "read_note")
            hw.world.tap(ADA, card, ADA, "❌ Deny")
            assert (await other).is_error
        async with stdio_client(gateway_to(hw, impostor, record)) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            call = asyncio.create_task(session.call_tool("delete_note", {"name": "d"}))
            card = await hw.world.wait_card(ADA, "name: d")
            assert "on notes" in card.text  # the name it reports is the same
            hw.world.tap(ADA, card, ADA, "❌ Deny")
            assert (await call).is_error
        async with hw.host.client() as client:
            (grant,) = await client.grants()
        assert (grant["label"], grant["uses"]) == (
            f"`delete_note` of {sys.executable} {UPSTREAM}", 1)
    assert [c["arguments"]["name"] for c in json_lines(record)] == ["a", "b"]


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
