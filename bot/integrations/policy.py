"""The gateway's policy: for each tool name, ``allow``, ``ask`` or ``deny``.

A TOML file with one table, ``[tools]``, mapping tool-name globs to a rule; the first
entry in file order whose glob matches wins, and a tool no entry matches is asked about::

    [tools]
    "read_*" = "allow"
    "write_*" = "deny"
    "*" = "ask"
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, cast

from bot.errors import SkaldError

Rule = Literal["allow", "ask", "deny"]
RULES: Final = ("allow", "ask", "deny")
DEFAULT_RULE: Final[Rule] = "ask"


class PolicyError(SkaldError):
    """A policy file cannot be read or says something we do not understand."""


@dataclass(frozen=True)
class Policy:
    entries: tuple[tuple[str, Rule], ...] = ()

    def rule_for(self, tool: str) -> Rule:
        for glob, rule in self.entries:
            if fnmatch.fnmatchcase(tool, glob):
                return rule
        return DEFAULT_RULE

    def source_for(self, tool: str) -> str:
        """Which entry decided ``tool``, for messages."""
        for glob, _ in self.entries:
            if fnmatch.fnmatchcase(tool, glob):
                return f'"{glob}"'
        return "the default"


def parse_policy(text: str, where: str = "policy") -> Policy:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{where}: not valid TOML ({exc})") from exc
    unknown = sorted(set(data) - {"tools"})
    if unknown:
        raise PolicyError(f"{where}: unknown key {unknown[0]!r}; only a [tools] table is read")
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
    return Policy(tuple(entries))


def load_policy(path: str | None) -> Policy:
    """The policy in ``path``, or the default (ask about everything) without one."""
    if path is None:
        return Policy()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot be read ({exc})") from exc
    return parse_policy(text, path)
