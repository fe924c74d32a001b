"""``hook install`` and ``hook uninstall`` on real settings files, through the real
command line: what is there stays, the original is backed up, the hook's timeout outlasts
the approval's, and what changed is printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def cli(*args: str, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "bot", *args], env=env, cwd=cwd or home,
                          capture_output=True, text=True, timeout=60)


def read(path: Path) -> Any:
    return json.loads(path.read_text())


def test_claude_code_install_keeps_what_is_there_and_uninstall_restores_it(
    tmp_path: Path,
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = {
        "model": "opus",
        "permissions": {"allow": ["Bash(ls:*)"]},
        "hooks": {"PermissionRequest": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}]},
    }
    settings.write_text(json.dumps(original, indent=4))
    done = cli("hook", "install", "claude-code", "--timeout", "120", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(settings) in done.stdout and "+ PermissionRequest (matcher *)" in done.stdout
    assert "hook timeout 150 s" in done.stdout
    backup = settings.with_name("settings.json.skald-telegram.bak")
    assert f"backup of the original: {backup}" in done.stdout
    assert read(backup) == original

    installed = read(settings)
    assert installed["model"] == "opus" and installed["permissions"] == original["permissions"]
    assert installed["hooks"]["Stop"] == original["hooks"]["Stop"]
    groups = installed["hooks"]["PermissionRequest"]
    assert groups[0] == original["hooks"]["PermissionRequest"][0]
    ours = groups[1]
    assert ours["matcher"] == "*"
    handler = ours["hooks"][0]
    assert handler["type"] == "command" and handler["timeout"] == 150
    assert "hook claude-code --timeout 120" in handler["command"]

    again = cli("hook", "install", "claude-code", "--timeout", "120", home=tmp_path)
    assert "already installed" in again.stdout
    assert read(settings) == installed

    changed = cli("hook", "install", "claude-code", "--timeout", "60", home=tmp_path)
    assert "- PermissionRequest" in changed.stdout and "hook timeout 90 s" in changed.stdout
    assert "backup" not in changed.stdout and read(backup) == original

    removed = cli("hook", "uninstall", "claude-code", home=tmp_path)
    assert removed.returncode == 0 and "- PermissionRequest" in removed.stdout
    assert read(settings) == original
    assert "nothing changed" in cli("hook", "uninstall", "claude-code", home=tmp_path).stdout


@pytest.mark.parametrize(("agent", "file", "events", "timeout"), [
    ("codex", ".codex/hooks.json", ["PermissionRequest"], 330),
    ("gemini", ".gemini/settings.json", ["BeforeTool"], 330_000),
    ("cursor", ".cursor/hooks.json",
     ["beforeShellExecution", "beforeMCPExecution", "preToolUse"], 330),
])
def test_project_scope_for_each_agent(
    tmp_path: Path, agent: str, file: str, events: list[str], timeout: int
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    done = cli("hook", "install", agent, "--scope", "project", "--state", "st",
               home=tmp_path, cwd=project)
    assert done.returncode == 0, done.stderr
    settings = read(project / file)
    assert not (tmp_path / file).exists()
    assert sorted(settings["hooks"]) == sorted(events)
    for event in events:
        [entry] = settings["hooks"][event]
        handler = entry if agent == "cursor" else entry["hooks"][0]
        assert handler["timeout"] == timeout
        assert f"hook {agent} --timeout 300 --state {project / 'st'}" in handler["command"]
    if agent == "cursor":
        assert settings["version"] == 1
        assert settings["hooks"]["beforeShellExecution"][0]["failClosed"] is True
    assert "backup" not in done.stdout  # there was no original to keep
    cli("hook", "uninstall", agent, "--scope", "project", home=tmp_path, cwd=project)
    assert read(project / file) == ({"version": 1} if agent == "cursor" else {})


def test_a_broken_settings_file_is_left_alone(tmp_path: Path) -> None:
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{ not json")
    done = cli("hook", "install", "gemini", home=tmp_path)
    assert done.returncode == 1
    assert "not valid JSON" in done.stderr and "nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr
    assert settings.read_text() == "{ not json"


def test_install_needs_an_agent(tmp_path: Path) -> None:
    done = cli("hook", "install", home=tmp_path)
    assert done.returncode == 2 and "needs an AGENT" in done.stderr
