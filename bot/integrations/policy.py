"""The gateway's policy: for each tool name, ``allow``, ``ask`` or ``deny``.

A TOML file with one table, ``[tools]``, mapping tool-name globs to a rule::

    [tools]
    "read_*" = "allow"
    "write_*" = "deny"
    "*" = "ask"

How a tool name is matched, so that an upstream cannot slip a tool past a rule by how it
spells its name:

- A glob and a tool name are compared in one form: NFKC-normalised (``ｗｒｉｔｅ`` is
  ``write``), case-folded (``WRITE_FILE`` is ``write_file``), with format characters such
  as zero-width spaces (Unicode category Cf) taken out.
- A ``deny`` whose glob matches wins over every other entry, wherever it stands in the
  file. Otherwise the first matching entry in file order decides, and a tool no entry
  matches is asked about.
- A name that held format or control characters is never allowed without asking: an
  ``allow`` for it becomes ``ask``.

An optional ``[editable]`` table names, for tool-name globs matched the same way (the
first matching entry in file order), the top-level arguments a person may change before
approving a call the gateway asks about; the gateway then calls the tool with the edited
arguments::

    [editable]
    "write_note" = ["content"]

A name that held format or control characters has no editable arguments.
"""

from __future__ import annotations

import fnmatch
import tomllib
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, cast

from bot.errors import SkaldError
from bot.protocol.payloads import MAX_EDITABLE_KEYS

Rule = Literal["allow", "ask", "deny"]
RULES: Final = ("allow", "ask", "deny")
DEFAULT_RULE: Final[Rule] = "ask"


class PolicyError(SkaldError):
    """A policy file cannot be read or says something we do not understand."""


@dataclass(frozen=True)
class Policy:
    entries: tuple[tuple[str, Rule], ...] = ()
    editable: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(glob, argument names) from the ``[editable]`` table, in file order."""

    def editable_for(self, tool: str) -> tuple[str, ...]:
        """The arguments of ``tool`` a person may edit before approving."""
        name = canonical_name(tool)
        if name != _folded(tool):
            return ()
        for glob, keys in self.editable:
            if fnmatch.fnmatchcase(name, canonical_name(glob)):
                return keys
        return ()

    def rule_for(self, tool: str) -> Rule:
        entry = self._deciding(tool)
        rule = DEFAULT_RULE if entry is None else entry[1]
        if rule == "allow" and canonical_name(tool) != _folded(tool):
            return "ask"  # it hid characters: a person sees it first
        return rule

    def source_for(self, tool: str) -> str:
        """Which entry decided ``tool``, for messages."""
        entry = self._deciding(tool)
        return "the default" if entry is None else f'"{entry[0]}"'

    def _deciding(self, tool: str) -> tuple[str, Rule] | None:
        name = canonical_name(tool)
        matching = [(glob, rule) for glob, rule in self.entries
                    if fnmatch.fnmatchcase(name, canonical_name(glob))]
        denying = [entry for entry in matching if entry[1] == "deny"]
        found = denying or matching
        return found[0] if found else None


def canonical_name(name: str) -> str:
    """The form globs and tool names are compared in: NFKC, case-folded, without format or
    control characters."""
    return "".join(char for char in _folded(name)
                   if unicodedata.category(char) not in ("Cf", "Cc"))


def _folded(name: str) -> str:
    # NFKC again after folding: folding may leave a form that normalises further.
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def parse_policy(text: str, where: str = "policy") -> Policy:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{where}: not valid TOML ({exc})") from exc
    unknown = sorted(set(data) - {"tools", "editable"})
    if unknown:
        raise PolicyError(f"{where}: unknown key {unknown[0]!r}; only the [tools] and "
                          "[editable] tables are read")
    tools = data.get("tools", {})
    if not isinstance(tools, dict):
        raise PolicyError(f"{where}: tools must be a table of glob = rule")
    entries = []
    for glob, rule in tools.items():
        if rule not in RULES:
            raise PolicyError(
                f'{where}: tools."{glob}" must be "allow", "ask" or "deny", got {rule!r}'
            )
        entries.append((glob, cast(Rule, rule)))
    return Policy(tuple(entries), _editable(data.get("editable", {}), where))


def _editable(table: object, where: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(table, dict):
        raise PolicyError(f"{where}: editable must be a table of glob = [argument names]")
    entries = []
    for glob, keys in table.items():
        if (not isinstance(keys, list) or not keys or len(keys) > MAX_EDITABLE_KEYS
                or not all(isinstance(key, str) and key for key in keys)):
            raise PolicyError(f'{where}: editable."{glob}" must be a list of 1 to '
                              f"{MAX_EDITABLE_KEYS} argument names")
        entries.append((glob, tuple(dict.fromkeys(keys))))
    return tuple(entries)


def load_policy(path: str | None) -> Policy:
    """The policy in ``path``, or the default (ask about everything) without one."""
    if path is None:
        return Policy()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot be read ({exc})") from exc
    return parse_policy(text, path)
