"""The rules of the reference filesystem MCP server (``@modelcontextprotocol/server-filesystem``)
that a card needs to show what its writing tools will do: which tools write (known by name
and input schema), where it looks for its allowed directories, and what ``edit_file``'s
edits make of a file, applied as that server applies them.

Pure: the gateway reads the disk and the server's answers, and passes them in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

WRITE_TOOL: Final = "write_file"
EDIT_TOOL: Final = "edit_file"
ROOTS_TOOL: Final = "list_allowed_directories"
ROOTS_HEADING: Final = "Allowed directories:"
"""The first line of the roots tool's answer; one directory a line follows."""

JS_SPACE: Final = ("\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                   "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")
"""What the server's JavaScript counts as white space when it trims a line (``trim``,
``\\s``): not quite Python's ``str.isspace``."""

FileTool = Literal["write", "edit"]
Edit = tuple[str, str]
"""(oldText, newText) of one edit."""


@dataclass(frozen=True)
class ServerFile:
    """The file a ``write_file`` or ``edit_file`` call names, as the server sees it."""

    path: str
    """The call's path made absolute as the server does it (``~`` expanded, a relative
    path taken against its allowed directories), or as given when that cannot be told."""
    target: str | None = None
    """The file the server reads and writes: :attr:`path` with its symlinks followed (a
    new file's own path); None when the server will refuse the path or it is not known."""
    text: str | None = None
    """The target's current text; None when there is no such file or it cannot be shown."""
    problem: str | None = None
    """Why :attr:`target` is None, or why its text cannot be shown."""


@dataclass(frozen=True)
class Edited:
    """What ``edit_file`` makes of a file's text."""

    text: str
    """The text the server writes; meaningful only when :attr:`unmatched` is None."""
    unmatched: int | None = None
    """The index of the first edit that matches nothing: the server then writes nothing."""


def file_tool(name: str, schema: Mapping[str, Any] | None) -> FileTool | None:
    """Whether tool ``name`` with input ``schema`` is the server's ``write_file`` or
    ``edit_file``: the name alone is not enough, its arguments must have their shape."""
    properties = _properties(schema)
    if properties is None or _type(properties.get("path")) != "string":
        return None
    if name == WRITE_TOOL and set(properties) == {"path", "content"}:
        return "write" if _type(properties["content"]) == "string" else None
    if name == EDIT_TOOL and {"path", "edits"} <= set(properties) <= {"path", "edits", "dryRun"}:
        edits = properties["edits"]
        item = edits.get("items") if isinstance(edits, Mapping) else None
        fields = _properties(item if isinstance(item, Mapping) else None)
        if (_type(edits) == "array" and fields is not None
                and set(fields) == {"oldText", "newText"}
                and all(_type(field) == "string" for field in fields.values())
                and _type(properties.get("dryRun", {"type": "boolean"})) == "boolean"):
            return "edit"
    return None


def edits_of(arguments: Mapping[str, Any]) -> list[Edit] | None:
    """The edits of an ``edit_file`` call, or None when they do not have the shape the
    server accepts (it then refuses the call)."""
    raw = arguments.get("edits")
    if not isinstance(raw, list):
        return None
    edits = []
    for item in raw:
        if not isinstance(item, Mapping):
            return None
        old, new = item.get("oldText"), item.get("newText")
        if not isinstance(old, str) or not isinstance(new, str):
            return None
        edits.append((old, new))
    return edits


def allowed_directories(answer: str) -> list[str] | None:
    """The directories in the roots tool's answer; None when it is not such an answer."""
    heading, _, rest = answer.partition("\n")
    if heading.strip() != ROOTS_HEADING:
        return None
    return [line for line in rest.split("\n") if line]


def apply_edits(text: str, edits: Sequence[Edit]) -> Edited:
    """``text`` after ``edits``, in order, as the server applies them: line endings made
    ``\\n`` throughout; each edit replaces the first exact occurrence of its old text, or
    else the first run of lines equal to its lines once each is trimmed, keeping that run's
    indentation."""
    content = _lf(text)
    for index, (old, new) in enumerate(edits):
        old, new = _lf(old), _lf(new)
        if old in content:
            content = content.replace(old, new, 1)
            continue
        replaced = _replace_lines(content, old.split("\n"), new.split("\n"))
        if replaced is None:
            return Edited(content, unmatched=index)
        content = replaced
    return Edited(content)


def _replace_lines(content: str, old: list[str], new: list[str]) -> str | None:
    lines = content.split("\n")
    for start in range(len(lines) - len(old) + 1):
        window = lines[start:start + len(old)]
        if all(a.strip(JS_SPACE) == b.strip(JS_SPACE) for a, b in zip(old, window,
                                                                        strict=True)):
            lines[start:start + len(old)] = _reindented(_indent(lines[start]), old, new)
            return "\n".join(lines)
    return None


def _reindented(indent: str, old: list[str], new: list[str]) -> list[str]:
    """The new lines placed at the indentation of the lines they replace: the first at it,
    each later one as far in from it as it is from its old counterpart (when both are
    indented at all)."""
    placed = []
    for index, line in enumerate(new):
        if index == 0:
            placed.append(indent + line.lstrip(JS_SPACE))
            continue
        old_indent = _indent(old[index]) if index < len(old) else ""
        new_indent = _indent(line)
        if old_indent and new_indent:
            deeper = max(0, len(new_indent) - len(old_indent))
            placed.append(indent + " " * deeper + line.lstrip(JS_SPACE))
        else:
            placed.append(line)
    return placed


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(JS_SPACE))]


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")


def _properties(schema: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        return None
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or not all(
            isinstance(value, Mapping) for value in properties.values()):
        return None
    return properties


def _type(schema: object) -> object:
    return schema.get("type") if isinstance(schema, Mapping) else None
