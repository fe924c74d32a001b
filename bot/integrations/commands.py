"""Which shell commands a grant may cover, judged against the table in
``command_table.toml`` (pure: the caller reads the table's text).

A command is first read as the shell would read it, as far as that can be trusted: printable
ASCII only; words of bare characters, single-quoted and double-quoted pieces; nothing that
expands, substitutes, redirects, chains or globs (``$``, backquotes, ``;``, ``|``, ``&``,
``<``, ``>``, ``(``, ``)``, ``{``, ``}``, ``*``, ``?``, ``[``, ``]``, ``!``, ``#``, a
backslash outside single quotes, ``~`` or ``=`` where a shell expands them). Its words are
then matched against the table: an operation that only reads (every option and argument
within its lists), or a program whose exact command may be granted.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bot.errors import SkaldError

Locate = Callable[[str], "str | None"]
"""Where a bare program name resolves for a call (an absolute path), or None."""

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,+@%^~-")
"""Characters a word may hold outside quotes."""
_NOT_AT_START = frozenset("=~^")
"""Outside quotes, only after a letter, digit or ``_``: zsh's ``=cmd``, a tilde, history."""
_NEVER = frozenset("`")
_NOT_IN_DOUBLE_QUOTES = frozenset('$`\\!')

_PROGRAM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_LONG = re.compile(r"--[a-z0-9][a-z0-9-]*")
_SHORT = re.compile(r"-[A-Za-z0-9]")
_FIND_PRIMARY = re.compile(r"-[a-z][a-z0-9]*|[!()]")

_PATH = re.compile(r"[A-Za-z0-9_.@%+,= /*?-]+")
_REV = re.compile(r"[A-Za-z0-9_@][A-Za-z0-9_./@^~:{}+-]*")


def _regex(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda value: compiled.fullmatch(value) is not None


_SHAPES: Final[Mapping[str, Callable[[str], bool]]] = {
    "count": _regex(r"\+?[0-9]{1,9}"),
    "signed": _regex(r"[+-]?[0-9]{1,9}[bcwkMG]?"),
    "size": _regex(r"[0-9]{1,12}[A-Za-z]{0,3}"),
    "word": _regex(r"[A-Za-z0-9_][A-Za-z0-9_.,:+-]*"),
    "date": _regex(r"[A-Za-z0-9_][A-Za-z0-9_.,:+ -]*"),
    "pattern": lambda value: True,
    # git's %G… placeholders run gpg to check signatures.
    "format": lambda value: "%G" not in value,
    "path": lambda value: bool(_PATH.fullmatch(value)) and not value.startswith(("-", "/"))
    and ".." not in value.split("/"),
    # Also a path to git (outside a repository, git diff compares files): no ``..`` step.
    "rev": lambda value: bool(_REV.fullmatch(value)) and ".." not in value.split("/"),
    "sed-script": lambda value: _is_sed_script(value),
}
"""Shapes of option values and operands (docs/grants.md)."""

# A bracket expression holds no ``/``, ``[`` or ``]`` of its own, so that a sed that reads
# ``[/]`` as a bracket and one that does not end the regex at the same place.
_SED_RE = r"(?:[^/\\\[\]]|\\.|\[\^?[^/\\\[\]]+\])*"
_SED_ADDRESS = rf"(?:[0-9]+(?:~[0-9]+)?|\$|/{_SED_RE}/[IM]*)"
_SED_RANGE = rf"{_SED_ADDRESS}(?:\s*,\s*(?:{_SED_ADDRESS}|[+~][0-9]+))?"
_SED_COMMAND = (rf"(?:[pl=dDnNgGhHxPz]|[qQ][0-9]*|s/{_SED_RE}/{_SED_RE}/[gpiImM0-9]*"
                rf"|y/{_SED_RE}/{_SED_RE}/)")
_SED_SCRIPT = re.compile(
    rf"\s*(?:{_SED_RANGE}\s*)?(?:!\s*)?{_SED_COMMAND}"
    rf"(?:\s*;\s*(?:{_SED_RANGE}\s*)?(?:!\s*)?{_SED_COMMAND})*\s*;?\s*"
)
"""sed scripts that only print: no ``e``, ``w``, ``W``, ``r``, ``R`` or ``F`` command, no
``e`` or ``w`` flag of ``s``, no text commands (``a``, ``i``, ``c``) and no blocks."""


class TableError(SkaldError):
    """The command table is not what its header describes."""


@dataclass(frozen=True)
class Option:
    """What an option takes: nothing (``shape`` None), a value, or a value given only glued
    to it (``optional``)."""

    shape: str | None
    optional: bool = False
    choices: frozenset[str] | None = None

    def accepts(self, value: str) -> bool:
        if self.choices is not None:
            return value in self.choices
        return self.shape is not None and _SHAPES[self.shape](value)


@dataclass(frozen=True)
class ReadOperation:
    """One operation that only reads, and what a call of it may hold."""

    program: str
    subcommand: str | None
    options: Mapping[str, Option]
    operands: str
    after_dashdash: str
    lead: str | None = None
    lead_options: frozenset[str] = frozenset()
    numbers: bool = False
    requires: frozenset[str] = frozenset()
    options_first: bool = False
    find_style: bool = False

    @property
    def name(self) -> str:
        return f"{self.program} {self.subcommand}" if self.subcommand else self.program


@dataclass(frozen=True)
class Covered:
    """What a command is, for a grant: the operation (``git status``) or the exact command's
    program, and whether only the exact command may be granted."""

    program: str
    name: str
    exact: bool


@dataclass(frozen=True)
class CommandTable:
    reads: Mapping[tuple[str, str | None], ReadOperation]
    exact: Mapping[str, frozenset[str] | None]
    """Programs granted as exact commands, with the subcommands that may be (None: all)."""
    never: Mapping[str, str]
    """Commands no grant covers (``python``, ``uv run``), with the reason."""

    def judge(self, words: Sequence[str]) -> Covered | None:
        """What a command's words may be granted as, or None."""
        if not words or not _PROGRAM.fullmatch(words[0]):
            return None
        program, rest = words[0], list(words[1:])
        subcommand = rest[0] if rest else None
        if program in self.never or f"{program} {subcommand}" in self.never:
            return None
        operation = self.reads.get((program, subcommand)) or self.reads.get((program, None))
        if operation is not None and operation.subcommand is not None:
            rest = rest[1:]
        if operation is not None and _within(operation, rest):
            return Covered(program, operation.name, exact=False)
        if program in self.exact:
            subcommands = self.exact[program]
            if subcommands is None:
                return Covered(program, program, exact=True)
            if subcommand in subcommands:
                return Covered(program, f"{program} {subcommand}", exact=True)
        return None


def shell_words(command: str) -> list[str] | None:
    """The words the shell makes of ``command``, or None when it holds anything that a
    shell would expand, substitute, redirect, chain or glob (see the module's docstring)."""
    if not command.isascii() or not command.isprintable() or any(c in _NEVER for c in command):
        return None
    words: list[str] = []
    word: list[str] | None = None
    at = 0
    while at < len(command):
        char = command[at]
        if char == " ":
            if word is not None:
                words.append("".join(word))
            word, at = None, at + 1
            continue
        if char in "'\"":
            end = command.find(char, at + 1)
            piece = command[at + 1:end]
            if end < 0 or not _quoted_piece_is_plain(char, piece):
                return None
            word, at = (word or []) + [piece], end + 1
            continue
        if char not in _BARE or (char in _NOT_AT_START and not _follows_bare_word(command, at)):
            return None
        word, at = (word or []) + [char], at + 1
    if word is not None:
        words.append("".join(word))
    return words


def parse_table(text: str) -> CommandTable:
    """The table from its TOML text; :class:`TableError` names what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TableError(f"the command table is not valid TOML: {exc}") from exc
    reads = {}
    for entry in _list(data, "read"):
        operation = _read_operation(entry)
        key = (operation.program, operation.subcommand)
        if key in reads:
            raise TableError(f"`{operation.name}` is listed twice")
        reads[key] = operation
    exact: dict[str, frozenset[str] | None] = {}
    for entry in _list(data, "exact"):
        program = _program(entry)
        subcommands = entry.get("subcommands")
        exact[program] = None if subcommands is None else frozenset(_strings(subcommands))
    never = {command: str(entry.get("reason", ""))
             for entry in _list(data, "never") for command in _strings(entry.get("commands"))}
    table = CommandTable(reads, exact, never)
    _check_never(table)
    return table


def _within(operation: ReadOperation, args: list[str]) -> bool:
    """Whether ``args`` keep to the operation's options and argument shapes."""
    if operation.find_style:
        return _find_within(operation, args)
    if operation.options_first and args and not args[0].startswith("-"):
        return False
    seen: set[str] = set()
    operands: list[tuple[str, bool]] = []
    dashdash = False
    at = 0
    while at < len(args):
        word = args[at]
        at += 1
        if dashdash or word == "-" or not word.startswith("-"):
            operands.append((word, dashdash))
        elif word == "--":
            dashdash = True
        elif operation.numbers and word[1:].isdigit():
            continue
        else:
            taken = _option(operation, word, args[at] if at < len(args) else None, seen)
            if taken is None:
                return False
            at += taken
    if operation.requires and not operation.requires & seen:
        return False
    if operation.lead is not None and not operation.lead_options & seen:
        if not operands or not _SHAPES[operation.lead](operands[0][0]):
            return False
        operands = operands[1:]
    return all(
        _SHAPES[shape](word) if shape != "none" else False
        for word, after in operands
        for shape in [operation.after_dashdash if after else operation.operands]
    )


def _option(operation: ReadOperation, word: str, following: str | None,
            seen: set[str]) -> int | None:
    """How many words after ``word`` its option takes (0 or 1), or None when it is not
    allowed; the options named are added to ``seen``."""
    if word.startswith("--"):
        name, glued, value = word.partition("=")
        option = operation.options.get(name)
        seen.add(name)
        if option is None:
            return None
        if option.shape is None and option.choices is None:
            return 0 if not glued else None
        if glued:
            return 0 if option.accepts(value) else None
        if option.optional:
            return 0
        return 1 if _separate_value(option, following) else None
    for index in range(1, len(word)):
        name = "-" + word[index]
        option = operation.options.get(name)
        seen.add(name)
        if option is None:
            return None
        if option.shape is None and option.choices is None:
            continue
        rest = word[index + 1:]
        if rest:
            return 0 if option.accepts(rest) else None
        if option.optional:
            return 0
        return 1 if _separate_value(option, following) else None
    return 0


def _separate_value(option: Option, value: str | None) -> bool:
    """A value in a word of its own: never one starting with ``-``, which a program that
    does not take it as the value would read as an option."""
    return value is not None and not value.startswith("-") and option.accepts(value)


def _find_within(operation: ReadOperation, args: list[str]) -> bool:
    """find's starting points, then an expression of the allowed primaries (each always
    takes the next word as its argument, as find reads it)."""
    at = 0
    while at < len(args) and not args[at].startswith("-") and args[at] not in ("(", "!", ")"):
        if not _SHAPES[operation.operands](args[at]):
            return False
        at += 1
    while at < len(args):
        option = operation.options.get(args[at])
        if option is None:
            return False
        if option.shape is None and option.choices is None:
            at += 1
            continue
        if at + 1 >= len(args) or not option.accepts(args[at + 1]):
            return False
        at += 2
    return True


def _is_sed_script(script: str) -> bool:
    return bool(_SED_SCRIPT.fullmatch(script))


def _quoted_piece_is_plain(quote: str, piece: str) -> bool:
    if quote == '"':
        return not any(c in _NOT_IN_DOUBLE_QUOTES for c in piece)
    # fish reads \' and \\ inside single quotes as escapes; bash does not: refuse both.
    return "\\\\" not in piece and not piece.endswith("\\")


def _follows_bare_word(command: str, at: int) -> bool:
    """Whether the character before ``at`` is a letter, digit or ``_`` of the same word
    (``HEAD~2``, ``a=b``), where no shell expands ``~``, ``=`` or ``^``."""
    return at > 0 and (command[at - 1].isalnum() or command[at - 1] == "_")


def _read_operation(entry: Mapping[str, Any]) -> ReadOperation:
    program = _program(entry)
    subcommand = entry.get("subcommand")
    if subcommand is not None and not (isinstance(subcommand, str)
                                       and _PROGRAM.fullmatch(subcommand)):
        raise TableError(f"`{program}`: subcommand must be a word")
    where = f"{program} {subcommand}" if subcommand else program
    find_style = entry.get("style") == "find"
    raw = entry.get("options", {})
    if not isinstance(raw, Mapping):
        raise TableError(f"`{where}`: options must be a table")
    name_shape = _FIND_PRIMARY if find_style else None
    options = {}
    for name, spec in raw.items():
        if not (name_shape.fullmatch(name) if name_shape else
                _LONG.fullmatch(name) or _SHORT.fullmatch(name)):
            raise TableError(f"`{where}`: {name!r} is not an option name")
        options[name] = _option_spec(where, name, spec)
    lead = entry.get("lead")
    shapes = [entry.get("operands", "none"), entry.get("after_dashdash", "none")]
    for shape in [*shapes, *([lead] if lead is not None else [])]:
        if shape != "none" and shape not in _SHAPES:
            raise TableError(f"`{where}`: no shape {shape!r}")
    return ReadOperation(
        program=program, subcommand=subcommand, options=options,
        operands=shapes[0], after_dashdash=shapes[1], lead=lead,
        lead_options=frozenset(_strings(entry.get("lead_options", []))),
        numbers=entry.get("numbers") is True,
        requires=frozenset(_strings(entry.get("requires", []))),
        options_first=entry.get("options_first") is True, find_style=find_style,
    )


def _option_spec(where: str, name: str, spec: object) -> Option:
    if spec == "flag":
        return Option(None)
    if not isinstance(spec, str) or not spec:
        raise TableError(f"`{where}` {name}: the value's shape must be a string")
    optional = spec.endswith("?")
    shape = spec.removesuffix("?")
    if shape.startswith("{") and shape.endswith("}"):
        choices = frozenset(choice.strip() for choice in shape[1:-1].split(","))
        return Option("choice", optional, choices)
    if shape not in _SHAPES:
        raise TableError(f"`{where}` {name}: no shape {shape!r}")
    return Option(shape, optional)


def _check_never(table: CommandTable) -> None:
    """No operation or exact program may be one the table says no grant covers."""
    for command in table.never:
        program, _, subcommand = command.partition(" ")
        listed = [op.name for op in table.reads.values() if op.program == program
                  and (not subcommand or op.subcommand in (None, subcommand))]
        subcommands = table.exact.get(program, frozenset())
        if program in table.exact and (not subcommand or subcommands is None
                                       or subcommand in subcommands):
            listed.append(command)
        if listed:
            raise TableError(f"`{command}` is never granted, yet listed as `{listed[0]}`")


def _program(entry: Mapping[str, Any]) -> str:
    program = entry.get("program")
    if not isinstance(program, str) or not _PROGRAM.fullmatch(program):
        raise TableError(f"a program must be a bare name, not {program!r}")
    return program


def _list(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise TableError(f"[[{key}]] entries must be tables")
    return value


def _strings(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TableError(f"expected a list of strings, not {value!r}")
    return value
