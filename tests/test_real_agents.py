"""The real coding agents end to end: Claude Code, Gemini CLI and Codex as installed from npm
(``.ci/run`` puts them in ``.ci/npm``; ``SKALD_TEST_NPM`` names another folder), run
headless against a scripted model on 127.0.0.1, with ``skald-telegram hook install`` in a
throwaway HOME, the agent host as a process, the relay and the real bot. A person's tap
decides whether the tool the model asked for runs, and a deny's reason reaches the model.

Nothing may leave the machine: the model is local, the API key is fake, and telemetry,
update checks and error reports are switched off."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from agenthost_world import CLI, HostWorld, finished, host_world, run_cli
from fake_model import FINAL_TEXT, FakeModel, ToolCall, fake_model
from tapping import SLOW_MACHINE_SECONDS, approve, deny_with_reason, titled
from world import ADA

UPSTREAM = Path(__file__).parent / "mcp_upstream.py"
NPM = Path(os.environ.get("SKALD_TEST_NPM") or Path(__file__).parent.parent / ".ci" / "npm")
AGENT_SECONDS = 3 * SLOW_MACHINE_SECONDS
"""How long one headless run of an agent may take, cards and taps included."""

QUIET = {
    "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "GEMINI_TELEMETRY_ENABLED": "false", "GEMINI_CLI_DISABLE_AUTO_UPDATE": "true",
    "NO_BROWSER": "1", "CI": "1",
}


def agent_program(name: str) -> str:
    program = NPM / "node_modules" / ".bin" / name
    assert program.exists(), (
        f"{program} is missing: install the agents with `npm install --prefix .ci/npm "
        "@anthropic-ai/claude-code@2.1.332 @google/gemini-cli@0.61.0 @openai/codex@0.171.0` "
        "(.ci/run does) or set "
        "SKALD_TEST_NPM to the folder they are installed in")
    return str(program)


def agent_env(hw: HostWorld, home: Path, model: FakeModel) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "LANG", "TZ")}
    return {**keep, **QUIET, "HOME": str(home), "SKALD_AGENT_STATE": str(hw.host.state),
            "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-fake-key",
            "GOOGLE_GEMINI_BASE_URL": model.url, "GEMINI_API_KEY": "fake-gemini-key",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            # MCP tools offered to the model as they are, not behind Claude Code's tool search.
            "ENABLE_TOOL_SEARCH": "false"}


async def install_hook(hw: HostWorld, agent: str, home: Path) -> None:
    home.mkdir(exist_ok=True)
    result = await run_cli("hook", "install", agent, "--state", str(hw.host.state),
                           env={**hw.host.env, "HOME": str(home)})
    assert result.code == 0, result.err


async def start_agent(program: str, args: list[str], env: Mapping[str, str],
                      cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        program, *args, env=dict(env), cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


def said_to_model(model: FakeModel) -> str:
    """Everything the agent sent in its last request."""
    return json.dumps(model.requests[-1][1])


async def approve_then_deny(hw: HostWorld, home: Path, project: Path, agent: str,
                            shell: tuple[str, str], program: str,
                            arguments: Callable[[FakeModel, str], list[str]],
                            env: Mapping[str, str] = MappingProxyType({})) -> None:
    """The model asks to run ``touch approved.txt``: approved, it runs. Then
    ``rm approved.txt``: denied with a reason, the file stays and the model is told why.
    ``shell`` is the agent's shell tool and the name of its command argument;
    ``arguments`` gives the agent's command-line arguments for a model and a prompt."""
    tool, argument = shell
    touch = ToolCall(tool, {argument: "touch approved.txt"})
    async with fake_model(touch) as model:
        run = await start_agent(program, arguments(model, "make the file"),
                                {**agent_env(hw, home, model), **env}, project)
        await approve(hw, f"{agent} wants to run: touch approved.txt")
        result = await finished(run, timeout=AGENT_SECONDS)
        assert (result.code, result.out.strip()) == (0, FINAL_TEXT), result.err
        assert (project / "approved.txt").exists()

    remove = ToolCall(tool, {argument: "rm approved.txt"})
    async with fake_model(remove) as model:
        run = await start_agent(program, arguments(model, "clean up"),
                                {**agent_env(hw, home, model), **env}, project)
        await deny_with_reason(hw, f"{agent} wants to run: rm approved.txt", "keep the file")
        result = await finished(run, timeout=AGENT_SECONDS)
        assert result.code == 0, result.err
        assert (project / "approved.txt").exists()
        assert "keep the file" in said_to_model(model)


async def test_claude_code_runs_what_a_person_approves_and_shows_an_edit_as_its_diff(
        tmp_path: Path) -> None:
    claude = agent_program("claude")
    project = tmp_path / "project"
    project.mkdir()
    (project / "config.py").write_text("HOST = 'localhost'\nDEBUG = True\n")
    home = tmp_path / "home"
    async with host_world(tmp_path) as hw:
        await hw.pair()
        await install_hook(hw, "claude-code", home)
        await approve_then_deny(hw, home, project, "Claude Code", ("Bash", "command"), claude,
                                lambda model, prompt: ["-p", prompt])

        read = ToolCall("Read", {"file_path": str(project / "config.py")})
        edit = ToolCall("Edit", {"file_path": str(project / "config.py"),
                                 "old_string": "DEBUG = True", "new_string": "DEBUG = False"})
        async with fake_model(read, edit) as model:
            run = await start_agent(claude, ["-p", "turn debugging off"],
                                    agent_env(hw, home, model), project)
            card = await approve(hw, titled(f"Claude Code wants to edit {project}/config.py"))
            assert "-DEBUG = True" in card.text and "+DEBUG = False" in card.text
            assert " HOST = 'localhost'" in card.text
            result = await finished(run, timeout=AGENT_SECONDS)
            assert result.code == 0, result.err
            assert (project / "config.py").read_text() == "HOST = 'localhost'\nDEBUG = False\n"


async def test_headless_gemini_in_yolo_mode_asks_the_hook_for_each_tool(tmp_path: Path) -> None:
    gemini = agent_program("gemini")
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        '{"security": {"auth": {"selectedType": "gemini-api-key"}},'
        ' "privacy": {"usageStatisticsEnabled": false}}\n')
    # A model named on the command line: no routing requests to a classifier model.
    headless = ["--approval-mode", "yolo", "--model", "gemini-2.5-flash", "-p"]
    async with host_world(tmp_path) as hw:
        await hw.pair()
        await install_hook(hw, "gemini", home)
        await approve_then_deny(hw, home, project, "Gemini CLI", ("run_shell_command", "command"),
                                gemini, lambda model, prompt: [*headless, prompt])


async def test_claude_code_with_the_gateway_asks_once_per_mcp_call(tmp_path: Path) -> None:
    claude = agent_program("claude")
    project = tmp_path / "project"
    project.mkdir()
    record = tmp_path / "calls.jsonl"
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    # The gateway guards this server: Claude Code's own permission (and so the hook) is
    # not asked as well.
    (home / ".claude" / "settings.json").write_text(
        '{"permissions": {"allow": ["mcp__notes__*"]}}\n')
    async with host_world(tmp_path) as hw:
        await hw.pair()
        await install_hook(hw, "claude-code", home)
        servers = {"mcpServers": {"notes": {
            "command": CLI[0],
            "args": [*CLI[1:], "mcp", "gateway", "--name", "notes", "--",
                     sys.executable, str(UPSTREAM)],
            "env": {"UPSTREAM_RECORD": str(record), "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                    "SKALD_AGENT_STATE": str(hw.host.state)}}}}
        delete = ToolCall("mcp__notes__delete_note", {"name": "groceries"})
        async with fake_model(delete) as model:
            run = await start_agent(
                claude, ["--mcp-config", json.dumps(servers), "-p", "delete the note"],
                agent_env(hw, home, model), project)
            card = await approve(hw, "claude-code wants to call delete_note on notes")
            assert "groceries" in card.text
            result = await finished(run, timeout=AGENT_SECONDS)
            assert (result.code, result.out.strip()) == (0, FINAL_TEXT), result.err
            assert "deleted groceries" in said_to_model(model)
        assert json.loads(record.read_text()) == {"tool": "delete_note",
                                                  "arguments": {"name": "groceries"}}
        cards = [m for m in hw.tg.bot_messages(ADA) if "wants to" in m.text]
        assert len(cards) == 1, [m.text for m in cards]


def also_before_each_tool(hooks_file: Path) -> None:
    """Headless ``codex exec`` never asks for approval, so no ``PermissionRequest`` fires:
    the hook ``hook install codex`` put there is added for ``PreToolUse`` too."""
    settings = json.loads(hooks_file.read_text())
    settings["hooks"]["PreToolUse"] = settings["hooks"]["PermissionRequest"]
    hooks_file.write_text(json.dumps(settings))


async def test_headless_codex_asks_the_hook_before_each_tool(tmp_path: Path) -> None:
    codex = agent_program("codex")
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "home"
    async with host_world(tmp_path) as hw:
        await hw.pair()
        await install_hook(hw, "codex", home)
        also_before_each_tool(home / ".codex" / "hooks.json")

        def headless(model: FakeModel, prompt: str) -> list[str]:
            provider = (f'{{name="stand-in", base_url="{model.url}/v1", '
                        'wire_api="responses", env_key="OPENAI_API_KEY"}')
            return ["exec", "--skip-git-repo-check", "--model", "gpt-5-codex",
                    "-c", f"model_providers.standin={provider}", "-c", 'model_provider="standin"',
                    "-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false",
                    "--disable", "plugins", "--disable", "in_app_updates",
                    "--dangerously-bypass-approvals-and-sandbox",
                    "--dangerously-bypass-hook-trust", prompt]

        env = {"OPENAI_API_KEY": "sk-fake-key", "CODEX_HOME": str(home / ".codex")}
        await approve_then_deny(hw, home, project, "Codex", ("exec_command", "cmd"), codex,
                                headless, env)
