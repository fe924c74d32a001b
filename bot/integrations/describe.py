"""A coding agent's tool call described for a person: a one-line summary and seed blocks.

Pure: the current content of a file a call writes or edits comes from the ``read``
function the caller passes (the hook reads the disk, tests pass a dictionary), or for a
filesystem MCP server's call from :attr:`ToolCall.server_file`. A shell
command shows as ``command`` with its stated description and working directory; a write
or an edit as the path and the unified diff it makes; a fetch as its ``url``; a search as
its pattern and path; an MCP tool as server, tool and arguments (a filesystem server's
write or edit as the diff it makes, by that server's rules); anything else as its
arguments. Credentials become ``secret`` blocks, so the card masks them wherever they
appear.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bot.agenthost.describe import describe_arguments
from bot.hidden import one_line
from bot.integrations.fsrules import EDIT_TOOL, ServerFile, apply_edits, edits_of
from bot.render.credentials import (
    credentials_in,
    is_credential_key,
    mask_credentials,
    scheme_token,
)

Block = dict[str, Any]
FileReader = Callable[[str], "str | None"]
"""Returns a file's current text, or ``None`` when there is no such file."""

SUMMARY_CHARS: Final = 200
"""A summary is one short line: the card's title and a notification's text."""

_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", re.MULTILINE)
_SHELL = frozenset({"bash", "shell", "run_shell_command", "exec_command", "local_shell"})
_WRITE = frozenset({"write", "write_file", "create_file"})
_EDIT = frozenset({"edit", "multiedit", "replace", "strreplace", "str_replace", "edit_file"})
_FETCH = frozenset({"webfetch", "web_fetch", "fetch"})
_SEARCH = frozenset({"grep", "glob", "search_file_content", "grep_search", "glob_search",
                     "codebase_search", "file_search"})


@dataclass(frozen=True)
class ToolCall:
    """One tool call as an agent's hook reports it."""

    agent: str
    """The agent's display name: ``Claude Code``, ``Codex``, ``Gemini CLI``, ``Cursor``."""
    tool: str
    arguments: Mapping[str, Any]
    cwd: str | None = None
    mcp_server: str | None = None
    """Set for an MCP tool, with :attr:`mcp_tool` its name on that server."""
    mcp_tool: str | None = None
    tool_description: str | None = None
    real_path: str | None = None
    """Where the file a write or an edit names resolves on this machine (symlinks followed,
    ``..`` taken after them, as the kernel does), found by the hook; None when it was not
    resolved (then the call offers no grant)."""
    server_file: ServerFile | None = None
    """Set for ``write_file`` and ``edit_file`` of a filesystem MCP server on this machine
    (the gateway's ``--filesystem``): the file as that server sees it. The card then shows
    the change the server makes, by its rules."""


@dataclass(frozen=True)
class Description:
    summary: str
    blocks: list[Block] = field(default_factory=list)


def describe(call: ToolCall, read: FileReader) -> Description:
    """The summary and blocks a card shows for ``call``."""
    kind = call.tool.lower()
    if call.mcp_server is not None:
        file = call.server_file
        description = _mcp(call) if file is None else _server_change(call, file)
    elif kind in _SHELL and isinstance(call.arguments.get("command"), str | list):
        description = _shell(call)
    elif kind in _WRITE and _path(call) is not None:
        description = _write(call, read)
    elif kind in _EDIT and _path(call) is not None:
        description = _edit(call, read)
    elif kind == "apply_patch" and _patch_text(call.arguments) is not None:
        description = _patch(call)
    elif kind in _FETCH and isinstance(call.arguments.get("url"), str):
        url = call.arguments["url"]
        description = Description(
            _summary(call, f"fetch {url}"),
            [_kv("URL", url, "url"), *_optional_text(call.arguments, "prompt", "Prompt")],
        )
    elif kind in _SEARCH and isinstance(call.arguments.get("pattern"), str):
        description = _search(call)
    else:
        description = Description(
            _summary(call, f"use {call.tool}"), describe_arguments(call.arguments)
        )
    shown = {b["value"] for b in description.blocks if b.get("value_type") == "secret"}
    return Description(description.summary, [*description.blocks, *_secret_blocks(call, shown)])


def mcp_name(tool: str) -> tuple[str, str] | None:
    """Split an MCP tool name as Claude Code and Codex spell it (``mcp__server__tool``)."""
    if tool.startswith("mcp__"):
        server, sep, name = tool[len("mcp__"):].partition("__")
        if sep and server and name:
            return server, name
    return None


def secrets_in(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every credential in ``arguments``: values under secret-looking keys (at any depth)
    and credentials written into command lines (``Authorization:`` headers and the like)."""
    found: list[tuple[str, str]] = []
    for key, value in _walk(arguments):
        leaf = key.rsplit(".", 1)[-1].split("[", 1)[0]
        if isinstance(value, str | int) and not isinstance(value, bool) and is_credential_key(
            leaf
        ):
            if str(value):
                found.append((key, str(value)))
        elif isinstance(value, str):
            found.extend(_secrets_in_text(value))
    return found


def _secrets_in_text(text: str) -> Iterator[tuple[str, str]]:
    for credential in credentials_in(text):
        yield credential.name, credential.value


def _secret_blocks(call: ToolCall, seen: set[str]) -> Iterator[Block]:
    """A ``secret`` block for each credential no block shows as one yet; a header's
    ``Bearer <token>`` gives one block, its token's (masking the token masks the header,
    and the token alone wherever the command repeats it)."""
    found = secrets_in(call.arguments)
    values = {value for _, value in found}
    for key, value in found:
        if scheme_token(value) in values:
            continue
        if value not in seen:
            seen.add(value)
            yield _kv(key, value, "secret")


def _shell(call: ToolCall) -> Description:
    raw = call.arguments["command"]
    command = raw if isinstance(raw, str) else " ".join(str(part) for part in raw)
    blocks = [{"type": "block", "label": "Command", "value": command, "value_type": "command"}]
    blocks.extend(_optional_text(call.arguments, "description", "Description", "field"))
    cwd = command_dir(call)
    if cwd:
        blocks.append(_kv("Directory", cwd, "path"))
    # The first line alone would read as the whole command: say how many lines follow.
    return Description(_summary(call, f"run: {one_line(command, SUMMARY_CHARS // 2)}"), blocks)


def _write(call: ToolCall, read: FileReader) -> Description:
    path = _resolved(call)
    content = call.arguments.get("content", call.arguments.get("contents", ""))
    new = content if isinstance(content, str) else json.dumps(content, indent=2)
    old = read(path)
    blocks = [_kv("File", path, "path"), *_symlink_rows(path, call.real_path)]
    if old is None:
        blocks.append(_kv("Status", "new file", "string"))
    blocks.append(_diff_block(path, old, new))
    return Description(_summary(call, f"write {_shown_path(path, call.real_path)}"), blocks)


def _edit(call: ToolCall, read: FileReader) -> Description:
    path = _resolved(call)
    old = read(path)
    edits = _edits(call.arguments)
    blocks = [_kv("File", path, "path"), *_symlink_rows(path, call.real_path)]
    new, missing = _apply(old or "", edits)
    if old is None:
        blocks.append(_kv("Status", "the file does not exist yet", "string"))
    if missing:
        blocks.append(_kv("Status", f"{missing} of {len(edits)} edits do not match the "
                          "file on disk; the diff shows the edits alone", "string"))
        for before, after, _ in edits:
            blocks.append(_diff_block(path, before, after))
    else:
        blocks.append(_diff_block(path, old, new))
    return Description(_summary(call, f"edit {_shown_path(path, call.real_path)}"), blocks)


def _server_change(call: ToolCall, file: ServerFile) -> Description:
    """A write or edit of a filesystem MCP server: the change it makes to the file it
    resolves the path to, or why there is none to show."""
    server, tool = call.mcp_server or "", call.mcp_tool or call.tool
    blocks = [_kv("Server", server, "string"), _kv("Tool", tool, "string"),
              _kv("File", file.path, "path"), *_symlink_rows(file.path, file.target)]
    if file.target is None:
        blocks.append(_kv("Status", f"the file could not be read: {file.problem}", "string"))
    elif tool == EDIT_TOOL:
        blocks.extend(_server_edit(call.arguments, file))
    else:
        blocks.extend(_server_write(call.arguments, file))
    verb = "edit" if tool == EDIT_TOOL else "write"
    shown = _shown_path(file.path, file.target)
    return Description(_summary(call, f"{verb} {shown} on {server}"), blocks)


def _server_write(arguments: Mapping[str, Any], file: ServerFile) -> list[Block]:
    content = arguments.get("content")
    if not isinstance(content, str):
        return [_kv("Status", "content is not text: the server refuses the call", "string")]
    if file.problem is not None:  # as a hook's card: the diff says what stands there
        return [_diff_block(file.path, f"({file.problem})\n", content)]
    if file.text is None:
        return [_kv("Status", "new file", "string"), _diff_block(file.path, None, content)]
    return [_diff_block(file.path, file.text, content)]


def _server_edit(arguments: Mapping[str, Any], file: ServerFile) -> list[Block]:
    edits, dry_run = edits_of(arguments), arguments.get("dryRun", False)
    if edits is None or not isinstance(dry_run, bool):
        return [_kv("Status", "the arguments do not have edit_file's shape: the server "
                    "refuses the call", "string")]
    blocks = [_kv("Status", "dry run: the server shows this diff and changes nothing",
                  "string")] if dry_run else []
    if file.problem is not None:
        return [*blocks, _kv("Status", f"the file cannot be shown: {file.problem}; what the "
                             "edits make of it is not shown", "string")]
    if file.text is None:
        return [*blocks, _kv("Status", "there is no such file: the server refuses the edit",
                             "string")]
    edited = apply_edits(file.text, edits)
    if edited.unmatched is not None:
        return [*blocks, _kv("Status", f"edit {edited.unmatched + 1} of {len(edits)} matches "
                             "nothing in the file: the server refuses the call and changes "
                             "nothing", "string"),
                {"type": "block", "label": "Not found", "value": edits[edited.unmatched][0],
                 "value_type": "text"}]
    if "\r\n" in file.text:
        blocks.append(_kv("Status", "the server writes the whole file with \\n line endings",
                          "string"))
    return [*blocks, _diff_block(file.path, file.text, edited.text)]


def _through_symlink(path: str, real: str | None) -> bool:
    """Whether ``path`` is, or passes through, a symlink (it resolves elsewhere than it
    reads once ``.`` and ``..`` are taken out as text)."""
    return real is not None and real != posixpath.normpath(path)


def _symlink_rows(path: str, real: str | None) -> list[Block]:
    if not _through_symlink(path, real):
        return []
    return [_kv("Symlink", f"{path} → {real}", "string")]


def _shown_path(path: str, real: str | None) -> str:
    return f"{path} → {real}" if _through_symlink(path, real) else path


def _patch(call: ToolCall) -> Description:
    patch = _patch_text(call.arguments) or ""
    files = _PATCH_FILE.findall(patch)
    blocks = [_kv("File", path, "path") for path in files]
    blocks.append({"type": "block", "label": "Patch", "value": patch, "value_type": "diff"})
    if call.cwd:
        blocks.append(_kv("Directory", call.cwd, "path"))
    target = ", ".join(files) if files else "files"
    return Description(_summary(call, f"patch {target}"), blocks)


def _patch_text(arguments: Mapping[str, Any]) -> str | None:
    for key in ("patch", "input", "command"):
        value = arguments.get(key)
        if isinstance(value, str) and "*** Begin Patch" in value:
            return value
    return None


def _search(call: ToolCall) -> Description:
    pattern = call.arguments["pattern"]
    path = _string(call.arguments, "path") or _string(call.arguments, "dir_path") or call.cwd
    blocks = [_kv("Pattern", pattern, "string")]
    if path:
        blocks.append(_kv("Path", path, "path"))
    for key in ("glob", "include", "type"):
        blocks.extend(_optional_text(call.arguments, key, key.capitalize(), "key_value"))
    where = f" in {path}" if path else ""
    return Description(_summary(call, f"search for {pattern}{where}"), blocks)


def _mcp(call: ToolCall) -> Description:
    server, tool = call.mcp_server or "", call.mcp_tool or call.tool
    blocks = [_kv("Server", server, "string"), _kv("Tool", tool, "string")]
    if call.tool_description:
        blocks.append({"type": "block", "label": "Tool description",
                       "value": call.tool_description, "value_type": "text"})
    blocks.extend(describe_arguments(call.arguments))
    return Description(_summary(call, f"call {tool} on {server}"), blocks)


def _edits(arguments: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """(old, new, replace_all) for Edit, MultiEdit and their cousins."""
    raw = arguments.get("edits")
    items = raw if isinstance(raw, list) else [arguments]
    edits = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        old = item.get("old_string", item.get("old_str", ""))
        new = item.get("new_string", item.get("new_str", ""))
        every = bool(item.get("replace_all")) or (item.get("expected_replacements") or 1) > 1
        edits.append((str(old), str(new), every))
    return edits


def _apply(text: str, edits: list[tuple[str, str, bool]]) -> tuple[str, int]:
    """The text after the edits, in order, and how many of them did not match."""
    missing = 0
    for old, new, every in edits:
        if old == "" and text == "":
            text = new
        elif old and old in text:
            text = text.replace(old, new) if every else text.replace(old, new, 1)
        else:
            missing += 1
    return text, missing


def _diff_block(path: str, old: str | None, new: str) -> Block:
    before = [] if old is None else old.splitlines(keepends=True)
    after = new.splitlines(keepends=True)
    lines = difflib.unified_diff(
        before, after, fromfile="/dev/null" if old is None else path, tofile=path
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return {"type": "block", "label": "Diff", "value": text.rstrip("\n") or "(no change)",
            "value_type": "diff"}


def _summary(call: ToolCall, what: str) -> str:
    line = " ".join(mask_credentials(f"{call.agent} wants to {what}").split())
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"


def _path(call: ToolCall) -> str | None:
    for key in ("file_path", "path", "target_file", "absolute_path"):
        value = call.arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _resolved(call: ToolCall) -> str:
    path = _path(call) or ""
    if call.cwd and not path.startswith("/"):
        return call.cwd.rstrip("/") + "/" + path
    return path


def _string(arguments: Mapping[str, Any], key: str) -> str | None:
    value = arguments.get(key)
    return value if isinstance(value, str) and value else None


def _optional_text(
    arguments: Mapping[str, Any], key: str, label: str, layout: str = "block"
) -> list[Block]:
    value = _string(arguments, key)
    if value is None:
        return []
    if layout == "key_value":
        return [_kv(label, value, "string")]
    return [{"type": layout, "label": label, "value": value,
             "value_type": "text" if layout == "block" else "string"}]


def _kv(key: str, value: str, value_type: str) -> Block:
    return {"type": "key_value", "key": key, "value": value, "value_type": value_type}


def _walk(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(item, Mapping | list):
                yield from _walk(item, path)
            else:
                yield path, item
    elif isinstance(value, list):
        for index, item in enumerate(value):
            path = f"{prefix}[{index}]"
            if isinstance(item, Mapping | list):
                yield from _walk(item, path)
            else:
                yield path, item


def command_dir(call: ToolCall) -> str | None:
    """The directory a shell command runs in: the one its arguments name (``dir_path``,
    ``workdir``; relative to the call's ``cwd``), else the call's ``cwd``."""
    given = _string(call.arguments, "dir_path") or _string(call.arguments, "workdir")
    if given is None:
        return call.cwd
    if given.startswith("/"):
        return given
    return posixpath.normpath(posixpath.join(call.cwd, given)) if call.cwd else given


def call_target(call: ToolCall) -> tuple[str, str] | None:
    """What a call acts on, for the grants it may be covered by: ``("shell", command)``
    for a shell command, ``("edit", path)`` for a write or edit of one file (the path made
    absolute with the call's ``cwd``); None for anything else."""
    kind = call.tool.lower()
    if call.mcp_server is None and kind in _SHELL:
        raw = call.arguments.get("command")
        if isinstance(raw, str):
            return "shell", raw
        if isinstance(raw, list):
            return "shell", " ".join(str(part) for part in raw)
    if call.mcp_server is None and kind in _WRITE | _EDIT and _path(call) is not None:
        return "edit", _resolved(call)
    return None
