"""Every way a hook can fail answers deny in the agent's own terms (or the agent's "ask"
with ``--on-error ask``), never an allow and never a traceback: the real command, fed the
documented inputs, with no agent host running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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
