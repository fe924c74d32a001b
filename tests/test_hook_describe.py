"""Tool calls described for a card: commands, diffs of writes and edits, fetches, searches,
MCP tools, and credentials as secrets."""

from __future__ import annotations

from pathlib import Path

from bot.integrations.describe import ToolCall, describe, secrets_in
from bot.integrations.hook import read_text_file


def blocks_by_label(blocks: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {block.get("label") or block["key"]: block for block in blocks}


def no_file(path: str) -> None:
    return None


def test_a_shell_command_shows_command_description_and_directory() -> None:
    call = ToolCall("Claude Code", "Bash",
                    {"command": "rm -rf build", "description": "Remove the build folder"},
                    cwd="/work/project")
    d = describe(call, no_file)
    assert d.summary == "Claude Code wants to run: rm -rf build"
    shown = blocks_by_label(d.blocks)
    assert shown["Command"] == {"type": "block", "label": "Command", "value": "rm -rf build",
                                "value_type": "command"}
    assert shown["Description"]["value"] == "Remove the build folder"
    assert shown["Directory"]["value"] == "/work/project"


def test_a_write_to_a_new_file_adds_every_line() -> None:
    call = ToolCall("Claude Code", "Write", {"file_path": "/p/app.py", "content": "a\nb\n"})
    d = describe(call, no_file)
    assert d.summary == "Claude Code wants to write /p/app.py"
    diff = blocks_by_label(d.blocks)["Diff"]
    assert diff["value_type"] == "diff"
    assert diff["value"].splitlines() == ["--- /dev/null", "+++ /p/app.py", "@@ -0,0 +1,2 @@",
                                          "+a", "+b"]


def test_a_write_over_a_file_diffs_against_its_content() -> None:
    call = ToolCall("Codex", "Write", {"file_path": "app.py", "content": "a\nB\n"}, cwd="/p")
    d = describe(call, {"/p/app.py": "a\nb\n"}.get)
    lines = blocks_by_label(d.blocks)["Diff"]["value"].splitlines()
    assert "-b" in lines and "+B" in lines and " a" in lines
    assert blocks_by_label(d.blocks)["File"]["value"] == "/p/app.py"


def test_an_edit_diffs_the_file_with_the_edit_applied() -> None:
    current = "x = 1\nDEBUG = True\ny = 2\n"
    call = ToolCall("Claude Code", "Edit", {"file_path": "/p/c.py", "old_string": "DEBUG = True",
                                            "new_string": "DEBUG = False"})
    lines = blocks_by_label(describe(call, {"/p/c.py": current}.get).blocks)["Diff"]["value"]
    assert "-DEBUG = True" in lines.splitlines() and "+DEBUG = False" in lines.splitlines()
    assert " x = 1" in lines.splitlines()


def test_a_multi_edit_applies_every_edit_in_order() -> None:
    current = "A = 1\nB = 2\n"
    call = ToolCall("Claude Code", "MultiEdit", {"file_path": "/p/c.py", "edits": [
        {"old_string": "A = 1", "new_string": "A = 10"},
        {"old_string": "A = 10\nB = 2", "new_string": "A = 10\nB = 20"}]})
    lines = blocks_by_label(describe(call, {"/p/c.py": current}.get).blocks)["Diff"]["value"]
    assert lines.splitlines()[-4:] == ["-A = 1", "-B = 2", "+A = 10", "+B = 20"]


def test_an_edit_that_does_not_match_says_so() -> None:
    call = ToolCall("Gemini CLI", "replace", {"file_path": "/p/c.py", "old_string": "nope",
                                              "new_string": "yes"})
    d = describe(call, {"/p/c.py": "something else\n"}.get)
    assert any("do not match" in b.get("value", "") for b in d.blocks)
    assert any(b["value_type"] == "diff" and "-nope" in b["value"] for b in d.blocks)


def test_fetch_search_and_other_tools() -> None:
    fetch = describe(ToolCall("Claude Code", "WebFetch", {"url": "https://x.example/a",
                                                          "prompt": "summarise"}), no_file)
    assert fetch.summary == "Claude Code wants to fetch https://x.example/a"
    assert blocks_by_label(fetch.blocks)["URL"]["value_type"] == "url"
    search = describe(ToolCall("Claude Code", "Grep", {"pattern": "TODO", "path": "/p/src"}),
                      no_file)
    assert search.summary == "Claude Code wants to search for TODO in /p/src"
    assert blocks_by_label(search.blocks)["Path"]["value"] == "/p/src"
    other = describe(ToolCall("Cursor", "Delete", {"path": 3, "force": True}), no_file)
    assert other.summary == "Cursor wants to use Delete"
    assert blocks_by_label(other.blocks)["force"]["value"] == "true"


def test_an_mcp_tool_shows_server_tool_and_arguments_with_secrets() -> None:
    call = ToolCall("Claude Code", "mcp__github__create_issue",
                    {"repo": "acme/api", "token": "ghp_abcdefghijklmnop",
                     "labels": ["bug"], "auth": {"password": "hunter22"}},
                    mcp_server="github", mcp_tool="create_issue")
    d = describe(call, no_file)
    assert d.summary == "Claude Code wants to call create_issue on github"
    shown = blocks_by_label(d.blocks)
    assert shown["Server"]["value"] == "github" and shown["Tool"]["value"] == "create_issue"
    assert shown["repo"]["value"] == "acme/api"
    assert shown["token"] == {"type": "key_value", "key": "token",
                              "value": "ghp_abcdefghijklmnop", "value_type": "secret"}
    assert shown["auth.password"]["value_type"] == "secret"
    assert "token" not in [b.get("label") for b in d.blocks if b["value_type"] != "secret"]


def test_credentials_in_commands_are_secrets() -> None:
    found = dict(secrets_in({"command":
        "curl -H 'Authorization: Bearer sk-live-123456789' -H \"X-Api-Key: k-999\" "
        "https://api.example.com && GITHUB_TOKEN=ghp_1 gh pr list --password=pw1"}))
    assert found["Authorization"] in ("Bearer sk-live-123456789", "sk-live-123456789")
    values = set(secrets_in({"c": "curl -H 'Authorization: Bearer sk-live-123456789' x"}))
    assert {v for _, v in values} == {"Bearer sk-live-123456789", "sk-live-123456789"}
    assert found["X-Api-Key"] == "k-999"
    assert found["GITHUB_TOKEN"] == "ghp_1"
    assert found["password"] == "pw1"
    assert secrets_in({"command": "ls -la", "path": "/tmp"}) == []


def test_a_long_summary_is_one_short_line() -> None:
    d = describe(ToolCall("Codex", "Bash", {"command": "echo " + "x" * 500 + "\nrm -rf /"}),
                 no_file)
    assert len(d.summary) <= 200 and "\n" not in d.summary


def test_a_codex_patch_shows_its_files_and_the_patch() -> None:
    patch = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-old\n+new\n*** End Patch\n"
    d = describe(ToolCall("Codex", "apply_patch", {"command": patch}), no_file)
    assert d.summary == "Codex wants to patch src/a.py"
    assert blocks_by_label(d.blocks)["Patch"]["value_type"] == "diff"


def test_a_file_that_cannot_be_diffed_says_why_instead_of_looking_new(tmp_path: Path) -> None:
    (tmp_path / "text.txt").write_text("hello\n")
    (tmp_path / "binary.bin").write_bytes(b"\xff\xfe\x00")
    assert read_text_file(str(tmp_path / "text.txt")) == "hello\n"
    assert read_text_file(str(tmp_path / "missing.txt")) is None
    assert read_text_file(str(tmp_path / "binary.bin")) == (
        f"({tmp_path}/binary.bin is not UTF-8 text)\n")
    assert read_text_file(str(tmp_path)) == f"({tmp_path} is not a regular file)\n"
    call = ToolCall("Claude Code", "Write", {"file_path": str(tmp_path / "binary.bin"),
                                             "content": "text\n"})
    diff = blocks_by_label(describe(call, read_text_file).blocks)["Diff"]["value"]
    assert "-(" in diff and "/dev/null" not in diff


def test_a_bearer_header_is_one_secret_row_and_its_repeated_token_stays_masked() -> None:
    command = ("curl -H 'Authorization: Bearer sk-live-123456789' https://api.example.com "
               "&& echo sk-live-123456789")
    d = describe(ToolCall("Claude Code", "Bash", {"command": command}), no_file)
    secrets = [b for b in d.blocks if b["value_type"] == "secret"]
    assert secrets == [{"type": "key_value", "key": "Authorization",
                        "value": "sk-live-123456789", "value_type": "secret"}]
