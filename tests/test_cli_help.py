"""The command line's help, through the real command: each command says what it takes and
what each option does, and nothing that does not apply."""

from __future__ import annotations

import subprocess
import sys


def help_of(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "bot", *args, "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())  # argparse wraps to the terminal's width


def test_each_hook_agent_has_its_own_help_without_install_options() -> None:
    answering = help_of("hook", "claude-code")
    assert "Claude Code hook event" in answering
    assert "--timeout" in answering and "--on-error" in answering
    assert "--scope" not in answering
    assert "--scope" in help_of("hook", "install") and "--scope" in help_of("hook", "uninstall")
    assert "--timeout" not in help_of("hook", "uninstall")


def test_mcp_help_shows_gateway_as_optional() -> None:
    text = help_of("mcp")
    assert "usage: skald-telegram mcp [-h] [--state DIR] [gateway " in text
    assert "omit it for the request_approval / ask_human server" in text


def test_render_chat_type_and_audit_format_are_explained() -> None:
    assert "as a private chat (default) or a group sees it" in help_of("render")
    assert "one JSON object a line (default) or CSV" in help_of("audit")
