"""The gateway's cards for a filesystem MCP server's writes: its tools known by name and
schema, its edits applied as it applies them, paths resolved as it resolves them on a real
disk, and the card made of what it will do.

The expected results of edits and paths are what ``@modelcontextprotocol/server-filesystem``
2026.8.31 itself did with the same files and calls."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import pytest

from bot.integrations.describe import ToolCall, describe
from bot.integrations.fspaths import locate
from bot.integrations.fsrules import (
    Edited,
    ServerFile,
    allowed_directories,
    apply_edits,
    file_tool,
)
from bot.integrations.hook import MAX_FILE_BYTES

STRING = {"type": "string"}
WRITE_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                "properties": {"path": STRING, "content": STRING},
                "required": ["path", "content"]}
EDIT_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
    "properties": {
        "path": STRING,
        "edits": {"type": "array", "items": {
            "type": "object", "required": ["oldText", "newText"],
            "properties": {"oldText": {"type": "string", "description": "Text to search for"},
                           "newText": {"type": "string", "description": "Text to replace"}}}},
        "dryRun": {"default": False, "description": "Preview changes", "type": "boolean"}},
    "required": ["path", "edits"]}


def test_the_writing_tools_are_known_by_name_and_schema() -> None:
    assert file_tool("write_file", WRITE_SCHEMA) == "write"
    assert file_tool("edit_file", EDIT_SCHEMA) == "edit"
    assert file_tool("write_file", EDIT_SCHEMA) is None
    assert file_tool("create_file", WRITE_SCHEMA) is None
    assert file_tool("write_file", {"type": "object", "properties": {
        "path": STRING, "text": STRING}}) is None
    claude_like = {"type": "object", "properties": {"path": STRING, "edits": {
        "type": "array", "items": {"type": "object", "properties": {
            "old_string": STRING, "new_string": STRING}}}}}
    assert file_tool("edit_file", claude_like) is None
    assert file_tool("write_file", None) is None


def test_the_allowed_directories_are_read_from_the_servers_answer() -> None:
    assert allowed_directories("Allowed directories:\n/home/ada/p\n/srv/x") == [
        "/home/ada/p", "/srv/x"]
    assert allowed_directories("Allowed directories:\n") == []
    assert allowed_directories("Error: no roots") is None


@pytest.mark.parametrize(("text", "edits", "expected"), [
    # In order, each on the first occurrence only: the second sees what the first wrote.
    ("x = 1\nx = 1\n", [("x = 1", "y = 2"), ("x = 1", "z")], Edited("y = 2\nz\n")),
    # Line endings become \n throughout, the edits' own too.
    ("a\r\nb\r\nc\r\n", [("b\r\n", "X\r\n")], Edited("a\nX\nc\n")),
    # Not exact: lines equal once trimmed, the new ones at the old ones' indentation.
    ("def f():\n    if a:\n        return 1\n    return 2\n",
     [("if a:\n    return 1", "if b:\n      return 3\n  pass")],
     Edited("def f():\n    if b:\n      return 3\n  pass\n    return 2\n")),
    ("  foo\n\tbar\n", [("foo\n bar", "  one\n    two\n three")],
     Edited("  one\n     two\n three\n")),
    ("p\n  q\n    r\n", [("q\n  r", "Q\n      R\nS")], Edited("p\n  Q\n      R\nS\n")),
    # JavaScript's white space, not Python's: U+00A0 is, U+001C is not.
    ("\u00a0 k\n\u3000v\n", [("k\nv", "\u2003K\n  V")], Edited("\u00a0 K\n  V\n")),
    ("hello\x1c\nworld\n", [("hello\nworld", "x")], Edited("hello\x1c\nworld\n", 0)),
    ("\ufeffstart\n", [("start", "S")], Edited("\ufeffS\n")),
    ("abc", [("", "Z")], Edited("Zabc")),
    ("abc\n", [("abc", "abd"), ("nope", "x")], Edited("abd\n", 1)),
])
def test_edits_apply_as_the_server_applies_them(
    text: str, edits: list[tuple[str, str]], expected: Edited,
) -> None:
    result = apply_edits(text, edits)
    assert result.unmatched == expected.unmatched
    if expected.unmatched is None:
        assert result.text == expected.text


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Two allowed directories, a folder outside them, and symlinks in and out."""
    for folder in ("root/sub", "root2", "outside"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "root" / "a.txt").write_text("a\n")
    (tmp_path / "root2" / "r2.txt").write_text("r2\n")
    (tmp_path / "outside" / "o.txt").write_text("o\n")
    (tmp_path / "root" / unicodedata.normalize("NFC", "café.txt")).write_text("c\n")
    for name, target in (("link.txt", "root/a.txt"), ("out.txt", "outside/o.txt"),
                         ("outdir", "outside"), ("dangling.txt", "nowhere.txt"),
                         ("to2", "root2")):
        (tmp_path / "root" / name).symlink_to(tmp_path / target)
    return tmp_path


@pytest.mark.parametrize(("requested", "target"), [
    ("a.txt", "root/a.txt"),
    ("sub/../a.txt", "root/a.txt"),
    ("link.txt", "root/a.txt"),
    ("to2/r2.txt", "root2/r2.txt"),
    ("to2/new.txt", "root2/new.txt"),
    ("r2.txt", "root/r2.txt"),  # a relative path goes into the first allowed directory
    ("sub/new.txt", "root/sub/new.txt"),
    (unicodedata.normalize("NFD", "café.txt"), unicodedata.normalize("NFC", "root/café.txt")),
])
def test_a_path_leads_where_the_server_writes(tree: Path, requested: str, target: str) -> None:
    found = locate(requested, [str(tree / "root"), str(tree / "root2")])
    assert (found.target, found.problem) == (str(tree / target), None)


@pytest.mark.parametrize(("requested", "problem"), [
    ("../outside/o.txt", "{t}/outside/o.txt is outside the server's allowed directories"),
    ("out.txt", "{t}/root/out.txt leads to {t}/outside/o.txt, outside the server's allowed"),
    ("outdir/new.txt", "{t}/root/outdir/new.txt leads to {t}/outside, outside the server's"),
    ("dangling.txt", "{t}/root/dangling.txt does not resolve"),
    ("nodir/x.txt", "its folder {t}/root/nodir does not exist"),
    ("a.txt/x", "{t}/root/a.txt/x cannot be resolved: Not a directory"),
    ("C:/x", "C:/x is a Windows path"),
])
def test_a_path_the_server_refuses_is_said_to_be_unreadable(
    tree: Path, requested: str, problem: str,
) -> None:
    found = locate(requested, [str(tree / "root"), str(tree / "root2")])
    assert found.target is None
    assert (found.problem or "").startswith(problem.format(t=tree))


def test_a_file_that_cannot_be_shown_says_why(tmp_path: Path) -> None:
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    (tmp_path / "huge.log").write_bytes(b"x" * (MAX_FILE_BYTES + 1))
    binary = locate("image.png", [str(tmp_path)])
    huge = locate("huge.log", [str(tmp_path)])
    assert (binary.text, binary.problem) == (None, f"{tmp_path}/image.png is not UTF-8 text")
    assert (huge.text, huge.problem) == (None, f"{tmp_path}/huge.log is larger than 4 MiB")


def card(tool: str, arguments: dict[str, Any], file: ServerFile) -> tuple[str, list[str]]:
    """A card's summary and its rows and blocks, one ``label: value`` string each."""
    call = ToolCall("claude-code", tool, arguments, mcp_server="files", mcp_tool=tool,
                    server_file=file)
    found = describe(call, lambda _: pytest.fail("the card reads no file itself"))
    return found.summary, [f"{b.get('key') or b.get('label')}: {b['value']}"
                           for b in found.blocks]


def test_a_card_says_what_the_server_does_rather_than_a_diff_it_would_not_write() -> None:
    crlf = ServerFile("/p/a.txt", "/p/a.txt", "one\r\ntwo\r\n")
    summary, rows = card("edit_file", {"path": "a.txt", "dryRun": True, "edits": [
        {"oldText": "two", "newText": "three"}]}, crlf)
    assert summary == "claude-code wants to edit /p/a.txt on files"
    assert rows[:3] == ["Server: files", "Tool: edit_file", "File: /p/a.txt"]
    assert "Status: dry run: the server shows this diff and changes nothing" in rows
    assert "Status: the server writes the whole file with \\n line endings" in rows
    assert rows[-1].startswith("Diff: ") and "+three" in rows[-1] and "-two\r" in rows[-1]

    binary = ServerFile("/p/b.bin", "/p/b.bin", None, "/p/b.bin is not UTF-8 text")
    _, rows = card("edit_file", {"path": "b.bin", "edits": [
        {"oldText": "a", "newText": "b"}]}, binary)
    assert rows[3:] == ["Status: the file cannot be shown: /p/b.bin is not UTF-8 text; what "
                        "the edits make of it is not shown"]
    _, rows = card("write_file", {"path": "b.bin", "content": "text\n"}, binary)
    assert rows[3].startswith("Diff: ") and "-(/p/b.bin is not UTF-8 text)" in rows[3]

    _, rows = card("edit_file", {"path": "a.txt", "edits": [{"old": "x"}]}, crlf)
    assert rows[3:] == ["Status: the arguments do not have edit_file's shape: the server "
                        "refuses the call"]
    _, rows = card("edit_file", {"path": "n.txt", "edits": []}, ServerFile("/p/n.txt",
                                                                           "/p/n.txt"))
    assert rows[3:] == ["Status: there is no such file: the server refuses the edit"]


def test_a_symlinked_file_shows_where_it_leads() -> None:
    linked = ServerFile("/p/link.txt", "/q/real.txt", "old\n")
    summary, rows = card("write_file", {"path": "link.txt", "content": "new\n"}, linked)
    assert summary == "claude-code wants to write /p/link.txt → /q/real.txt on files"
    assert "Symlink: /p/link.txt → /q/real.txt" in rows
    assert "-old" in rows[-1] and "+new" in rows[-1]

