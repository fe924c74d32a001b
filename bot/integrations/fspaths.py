"""Where the reference filesystem MCP server reads and writes the file a call names, and
what that file holds now: the server's own path checks done again on the same disk (it
runs here, as the gateway's child, with the gateway's home and working directory)."""

from __future__ import annotations

import os
import posixpath
import re
import unicodedata
from collections.abc import Sequence

from bot.integrations.fsrules import JS_SPACE, ServerFile
from bot.integrations.hook import file_text

_QUOTE_AT_AN_END = re.compile(r"^[\"']|[\"']\Z")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:(?:[\\/]|\Z)")


def locate(requested: str, roots: Sequence[str]) -> ServerFile:
    """The file ``requested`` names, as the server with allowed directories ``roots`` sees
    it: a path outside them (itself, or where its symlinks lead) is one it refuses."""
    if requested == "~" or requested.startswith("~/"):
        requested = os.path.expanduser("~") + "/" + requested[1:]
    if _WINDOWS_DRIVE.match(requested):
        return ServerFile(requested, problem=f"{requested} is a Windows path: the server "
                                             "refuses it")
    path = (_resolve(os.getcwd(), requested) if requested.startswith("/")
            else _against_roots(requested, roots))
    if not _within(path, roots):
        return ServerFile(path, problem=f"{path} is outside the server's allowed directories"
                                        f" ({_listed(roots)}): the server refuses it")
    try:
        target = os.path.realpath(path, strict=True)
    except FileNotFoundError:
        return _new_file(path, roots)
    except OSError as exc:
        return ServerFile(path, problem=f"{path} cannot be resolved: {exc.strerror}")
    if not _within(target, roots):
        return ServerFile(path, problem=f"{path} leads to {target}, outside the server's "
                                        f"allowed directories ({_listed(roots)}): the server "
                                        "refuses it")
    return _read(path, target)


def _new_file(path: str, roots: Sequence[str]) -> ServerFile:
    """A path that does not resolve: the server walks down from the longest allowed
    directory holding it, entry by entry (an entry equal once NFC-normalised counts, and
    symlinks are followed), and puts what is missing under the last one that exists."""
    holders = sorted((root for root in roots if _within(path, [root])), key=len, reverse=True)
    if not holders:
        return ServerFile(path, target=path)
    parts = [part for part in posixpath.relpath(path, holders[0]).split("/") if part]
    try:
        current = os.path.realpath(holders[0], strict=True)
        for index, part in enumerate(parts):
            entries = os.listdir(current)
            same = [part] if part in entries else [
                entry for entry in entries if _nfc(entry) == _nfc(part)]
            if len(same) > 1:
                return ServerFile(path, problem=f"{part!r} matches several entries of "
                                                f"{current}: the server refuses it")
            if not same:
                return _missing(path, current, parts[index:])
            current = os.path.realpath(current + "/" + same[0], strict=True)
            if not _within(current, roots):
                return ServerFile(path, problem=f"{path} leads to {current}, outside the "
                                                f"server's allowed directories "
                                                f"({_listed(roots)}): the server refuses it")
    except FileNotFoundError:
        return ServerFile(path, problem=f"{path} does not resolve (a folder is missing or a "
                                        "symlink leads nowhere): the server refuses it")
    except OSError as exc:
        return ServerFile(path, problem=f"{path} cannot be resolved: {exc.strerror}")
    return _read(path, current)


def _missing(path: str, folder: str, rest: list[str]) -> ServerFile:
    target = _resolve(folder, "/".join(rest))
    if len(rest) > 1:
        return ServerFile(path, problem=f"its folder {posixpath.dirname(target)} does not "
                                        "exist: the server cannot write it")
    return ServerFile(path, target=target)


def _read(path: str, target: str) -> ServerFile:
    text, problem = file_text(target)
    return ServerFile(path, target, text, None if problem is None else f"{target} {problem}")


def _nfc(name: str) -> str:
    return unicodedata.normalize("NFC", name)


def _against_roots(relative: str, roots: Sequence[str]) -> str:
    """A relative path as the server takes it: in the first allowed directory it stays
    inside once joined, else in the first one (in the working directory without any)."""
    if not roots:
        return _resolve(os.getcwd(), relative)
    for root in roots:
        candidate = _resolve(root, relative)
        if _within(candidate, roots):
            return candidate
    return _resolve(roots[0], relative)


def _within(path: str, roots: Sequence[str]) -> bool:
    """The server's containment check, on the path in the form it checks (trimmed, a quote
    at either end taken off, normalised)."""
    if "\0" in path:
        return False
    checked = _resolve(os.getcwd(), _QUOTE_AT_AN_END.sub("", path.strip(JS_SPACE)))
    for root in roots:
        if not root or "\0" in root:
            continue
        folder = _resolve(os.getcwd(), root)
        if checked == folder or folder == "/" or checked.startswith(folder + "/"):
            return True
    return False


def _resolve(base: str, path: str) -> str:
    """``path`` made absolute against ``base`` and normalised as text, as Node's
    ``path.resolve`` does (``..`` taken before symlinks are looked at)."""
    joined = path if path.startswith("/") else base + "/" + path
    return "/" + posixpath.normpath(joined).lstrip("/")


def _listed(roots: Sequence[str]) -> str:
    return ", ".join(roots) if roots else "none"
