"""What a coding agent's call may be granted (pure): narrow scopes, and none for commands
too complex, destructive or wrapped to grant."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.integrations.describe import ToolCall
from bot.integrations.grants import command_scope, gateway_scope, hook_scope


@pytest.mark.parametrize(("command", "scope"), [
    ("git status -s", "git status"),
    ("git status --porcelain", "git status"),
    ("git log --oneline", "git log"),
    ("/usr/bin/git push origin main", "git push"),
    ("ls -la", "ls"),
    ("ls src", "ls"),
    ("pytest tests/test_x.py -q", "pytest"),
    ("npm run build", "npm run"),
    ("git -C other status", None),
    ("git", None),
    ("git status && git push", None),
    ("git status | head", None),
    ("ls > out.txt", None),
    ("echo $(cat ~/.ssh/id_rsa)", None),
    ("sudo ls", None),
    ("env A=1 ls", None),
    ("A=1 ls", None),
    ("bash -lc 'git status'", None),
    ("rm -rf build", None),
    ("kill 1234", None),
    ("ls 'unclosed", None),
    ("", None),
])
def test_command_scope(command: str, scope: str | None) -> None:
    assert command_scope(command) == scope


def _call(tool: str, **arguments: object) -> ToolCall:
    return ToolCall("Claude Code", tool, arguments, cwd="/work/project")


def test_hook_scopes_are_per_session_and_narrow() -> None:
    status = hook_scope(_call("Bash", command="git status -s"), "s1")
    assert status is not None and status.label == "`git status` in this session"
    assert hook_scope(_call("Bash", command="git status --porcelain"), "s1") == status
    assert hook_scope(_call("Bash", command="git status"), "s2") != status
    assert hook_scope(_call("Bash", command="git log"), "s1") != status
    assert hook_scope(_call("Bash", command="git status"), None) is None

    edit = hook_scope(replace(_call("Edit", file_path="src/app.py", old_string="a",
                                    new_string="b"), real_path="/work/project/src/app.py"),
                      "s1")
    assert edit is not None and edit.label == "edits in /work/project/src in this session"
    assert hook_scope(replace(_call("Write", file_path="/work/project/src/new.py", content=""),
                              real_path="/work/project/src/new.py"), "s1") == edit
    assert hook_scope(replace(_call("Write", file_path="/work/project/other.py", content=""),
                              real_path="/work/project/other.py"), "s1") != edit
    assert hook_scope(_call("WebFetch", url="https://example.com"), "s1") is None

    mcp = hook_scope(ToolCall("Claude Code", "mcp__github__create_issue", {},
                              mcp_server="github", mcp_tool="create_issue"), "s1")
    assert mcp is not None and mcp.label == "`create_issue` of github in this session"
    assert gateway_scope(["npx", "github-mcp"], "create_issue").label == (
        "`create_issue` of npx github-mcp")


def test_a_long_scope_keeps_the_key_within_the_protocol_limit() -> None:
    path = "/" + "d/" * 200 + "f.py"
    scope = hook_scope(replace(_call("Write", file_path=path, content=""), real_path=path),
                       "s1")
    assert scope is not None and len(scope.key) <= 200 and len(scope.label) <= 200
