"""Every way a hook can fail answers deny in the agent's own terms (or the agent's "ask"
with ``--on-error ask``), never an allow and never a traceback: the real command, fed the
documented inputs, with no agent host running, or stopped by a signal while it waits."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agenthost_world import finished, host_world
from tapping import SLOW_MACHINE_SECONDS, card_showing
from test_hook_e2e import start_hook

FIXTURES = Path(__file__).parent / "fixtures" / "hooks"


def hook(agent: str, stdin: str, *args: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", "hook", agent, "--state", str(state), "--timeout", "5",
         *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )


def fixture(agent: str, name: str) -> str:
    return (FIXTURES / agent / f"{name}.json").read_text()


def decision(agent: str, out: str) -> tuple[str, str]:
    """(decision, reason) from an answer on stdout."""
    answer: dict[str, Any] = json.loads(out)
    if agent == "gemini":
        return answer["decision"], answer["reason"]
    if agent == "cursor":
        assert answer["userMessage"] == answer["agentMessage"]
        return answer["permission"], answer["userMessage"]
    specific = answer["hookSpecificOutput"]
    if "decision" in specific:
        return specific["decision"]["behavior"], specific["decision"].get("message", "")
    return specific["permissionDecision"], specific["permissionDecisionReason"]


@pytest.mark.parametrize(("agent", "name"), [
    ("claude-code", "PreToolUse-Bash"),
    ("claude-code", "PermissionRequest-Bash"),
    ("codex", "PermissionRequest-Bash"),
    ("codex", "PreToolUse-Bash"),
    ("gemini", "BeforeTool-run_shell_command"),
    ("cursor", "beforeShellExecution"),
])
def test_no_agent_host_is_a_deny(tmp_path: Path, agent: str, name: str) -> None:
    done = hook(agent, fixture(agent, name), state=tmp_path / "no-host")
    assert done.returncode == 0, done.stderr
    verdict, reason = decision(agent, done.stdout)
    assert verdict == "deny"
    assert reason.startswith("denied by skald-telegram: ")
    assert "\n" not in reason and "Traceback" not in done.stderr


@pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]", '{"hook_event_name": "Stop"}'])
def test_unreadable_input_blocks_claude_code_with_exit_code_2(tmp_path: Path, stdin: str) -> None:
    done = hook("claude-code", stdin, state=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert "unreadable hook input" in done.stderr and "Traceback" not in done.stderr


def test_a_known_event_with_broken_fields_is_that_event_s_deny(tmp_path: Path) -> None:
    done = hook("claude-code", '{"hook_event_name": "PreToolUse", "tool_name": "Bash"}',
                state=tmp_path)
    assert done.returncode == 0
    verdict, reason = decision("claude-code", done.stdout)
    assert verdict == "deny"
    assert reason == ("denied by skald-telegram: unreadable hook input: "
                      "tool_input is missing or not an object")


@pytest.mark.parametrize("agent", ["gemini", "cursor"])
def test_unreadable_input_is_a_deny_for_gemini_and_cursor(tmp_path: Path, agent: str) -> None:
    done = hook(agent, "{oops", state=tmp_path)
    assert done.returncode == 0
    verdict, reason = decision(agent, done.stdout)
    assert verdict == "deny" and "unreadable hook input" in reason


def test_on_error_ask_hands_the_call_back_to_each_agent(tmp_path: Path) -> None:
    claude = hook("claude-code", fixture("claude-code", "PreToolUse-Bash"), "--on-error", "ask",
                  state=tmp_path)
    assert decision("claude-code", claude.stdout)[0] == "ask"
    for agent, name in (("claude-code", "PermissionRequest-Bash"),
                        ("codex", "PermissionRequest-Bash")):
        done = hook(agent, fixture(agent, name), "--on-error", "ask", state=tmp_path)
        assert (done.returncode, done.stdout) == (0, "")
    gemini = hook("gemini", fixture("gemini", "BeforeTool-write_file"), "--on-error", "ask",
                  state=tmp_path)
    assert json.loads(gemini.stdout) == {}
    cursor = hook("cursor", fixture("cursor", "beforeMCPExecution"), "--on-error", "ask",
                  state=tmp_path)
    assert decision("cursor", cursor.stdout)[0] == "ask"


STOPPED = "denied by skald-telegram: stopped before a decision"
WAITING = [
    ("claude-code", "PreToolUse-Bash", "Claude Code wants to run: rm -rf build"),
    ("claude-code", "PermissionRequest-Bash", "Claude Code wants to run: curl"),
    ("codex", "PermissionRequest-Bash", "Codex wants to run: git push --force origin main"),
    ("codex", "PreToolUse-Bash", "Codex wants to run: npm publish"),
    ("gemini", "BeforeTool-run_shell_command", "Gemini CLI wants to run: docker system prune"),
    ("cursor", "beforeShellExecution", "Cursor wants to run: terraform apply"),
]
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
async def test_a_hook_stopped_while_waiting_denies_and_takes_its_card_back(
        tmp_path: Path, signum: signal.Signals) -> None:
    """An agent that gives up on its hook (its own timeout, Ctrl-C, a closed terminal) must
    not read the silence as "no objection": every agent's hook answers its deny, and the
    card in Telegram closes."""
    async with host_world(tmp_path) as hw:
        await hw.pair()
        hooks = [await start_hook(hw, agent, name) for agent, name, _ in WAITING]
        for _, _, needle in WAITING:
            await card_showing(hw, needle)
        async with hw.host.client() as client:
            assert len(await client.items()) == len(WAITING)
        for process in hooks:
            process.send_signal(signum)
        for (agent, _, needle), process in zip(WAITING, hooks, strict=True):
            result = await finished(process, timeout=SLOW_MACHINE_SECONDS)
            assert result.code == 0, (agent, result.err)
            assert decision(agent, result.out) == ("deny", STOPPED), agent
            assert "Traceback" not in result.err
            await card_showing(hw, needle, lambda m: m.buttons() == [])
        async with hw.host.client() as client:
            assert await client.items() == []


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini", "cursor"])
async def test_a_hook_stopped_before_its_input_ends_denies(tmp_path: Path, agent: str,
                                                          signum: signal.Signals) -> None:
    """Stopped while the agent is still writing the event: the deny that fits an event not
    read (Claude Code and Codex: exit code 2 with the reason on stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "hook", agent, "--state", str(tmp_path / "no-host"),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None
    process.stdin.write(b'{"hook_event_name": ')
    await process.stdin.drain()
    await _until_reading(process.pid)
    process.send_signal(signum)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    if agent in ("claude-code", "codex"):
        assert (process.returncode, out, err.decode().strip()) == (2, b"", STOPPED)
    else:
        assert process.returncode == 0
        assert decision(agent, out.decode()) == ("deny", STOPPED)


async def _until_reading(pid: int) -> None:
    """Until the process catches every stop signal (it reads its stdin from then on)."""
    wanted = sum(1 << (signum - 1) for signum in SIGNALS)
    async with asyncio.timeout(60):
        while True:
            status = Path(f"/proc/{pid}/status").read_text()
            caught = int(status.split("SigCgt:")[1].split()[0], 16)
            if caught & wanted == wanted:
                return
            await asyncio.sleep(0.02)
