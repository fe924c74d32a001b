"""The MCP SDK is the optional extra ``skald-telegram[mcp]``: the image and the test
environment install it, and without it ``skald-telegram mcp`` says in one line how to
add it (exit code 1, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HINT = ("skald-telegram: the mcp command needs the MCP extra: "
        "pip install 'skald-telegram[mcp]'")


@pytest.mark.parametrize("args", [["mcp"], ["mcp", "gateway", "--", "true"]],
                         ids=["server", "gateway"])
def test_without_the_extra_the_mcp_command_says_how_to_install_it(
        tmp_path: Path, args: list[str]) -> None:
    shadow = tmp_path / "shadow" / "mcp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'mcp\'", name="mcp")\n')
    path = os.pathsep.join([str(shadow.parent), str(ROOT), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "bot", *args],
        env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr == HINT + "\n"
    assert result.stdout == ""


def test_the_image_and_the_tests_install_the_extra_and_a_plain_install_does_not() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("mcp")]
    assert [d for d in project["optional-dependencies"]["mcp"] if d.startswith("mcp")]
    assert "skald-telegram[mcp,postgresql]" in project["optional-dependencies"]["test"]
    assert "pip install --no-cache-dir '.[mcp,postgresql]'" in (ROOT / "Dockerfile").read_text()
