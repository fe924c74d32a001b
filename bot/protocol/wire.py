"""How a payload class declares its wire form, and the parsing and encoding derived from it.

A payload is a frozen dataclass. Each field's annotation says its JSON type (``str``,
``int``, ``datetime | None``, another declared class, a tuple of them, or any JSON value)
and ``Annotated`` markers add what the protocol asks of it: a length limit
(:class:`MaxChars`), a range (:class:`Range`), a fixed set of values (:class:`OneOf`), a
place on the wire other than its name (:class:`At`), what an absent value reads as
(:class:`IfAbsent`), a bound on a list and what must be distinct in it (:class:`Items`),
how ``None`` and an empty list are written (:data:`NULL`, :data:`OMIT_EMPTY`), a field read
before the others (:data:`FIRST`), one not on the wire (:data:`LOCAL`), one that reads a
wrong type as ``None`` (:data:`LENIENT`), or one read and written by hand
(:class:`Custom`). :func:`declared` names the class (a payload kind or an item) and adds
the checks that span fields.

From this, :func:`read` parses a decoded JSON object and :func:`write` encodes one; the
steps for each class are worked out once, on first use, into straight-line code. Unknown
fields are ignored; a field absent or null takes the dataclass default, or is refused when
there is none. Every refusal is a :class:`bot.errors.PayloadError` naming the field and
where it is, never its value: values are decrypted plaintext and end up in logs.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeAlias, TypeVar

from bot.errors import PayloadError
from bot.protocol.encoding import format_rfc3339, is_int, parse_rfc3339

JSON: TypeAlias = Any
"""A decoded JSON value: None, bool, int, float, str, list or dict."""

MAX_INT: Final = 2**63 - 1
"""The largest integer a payload may carry: every one of them may reach SQLite, whose
integers are signed 64-bit."""


@dataclass(frozen=True)
class MaxChars:
    """A string of at most ``limit`` characters; a longer one is refused."""

    limit: int


@dataclass(frozen=True)
class Range:
    """An integer from ``low`` to ``high``."""

    low: int
    high: int


@dataclass(frozen=True)
class OneOf:
    """A string that is one of ``values``. Read before the other fields: they may depend
    on it."""

    values: tuple[str, ...]


@dataclass(frozen=True)
class At:
    """The field's place on the wire: a name, or a path into nested objects."""

    path: tuple[str, ...]


@dataclass(frozen=True)
class IfAbsent:
    """What an absent or null value reads as, for a field the dataclass gives no default."""

    value: Any


@dataclass(frozen=True)
class Items:
    """A list of at most ``limit`` entries; with ``unique``, no two entries share it (an
    attribute of the entries, or the entries themselves when ``unique`` is ``"."``)."""

    limit: int
    unique: str | None = None


@dataclass(frozen=True)
class Custom:
    """A field read from its wire value (``read(value, where)``) and written from the
    whole object (``write(obj)``, :data:`ABSENT` to leave it out), by hand."""

    read: Callable[[JSON, str], Any]
    write: Callable[[Any], JSON]


class _Flag:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NULL: Final = _Flag("NULL")
"""Write ``null`` for ``None`` (without it, a ``None`` field is left out)."""
OMIT_EMPTY: Final = _Flag("OMIT_EMPTY")
"""Leave an empty list out (without it, an empty list is written)."""
FIRST: Final = _Flag("FIRST")
"""Read before the other fields (as a :class:`OneOf` is): a refusal names it first."""
LOCAL: Final = _Flag("LOCAL")
"""Not on the wire: neither read nor written."""
LENIENT: Final = _Flag("LENIENT")
"""A value of the wrong type reads as ``None`` instead of being refused."""
ABSENT: Final = _Flag("ABSENT")
"""What a :class:`Custom` writer returns to leave its field out."""

_Read: TypeAlias = Callable[[JSON, str], Any]
"""Reads one field's wire value (``None`` when absent); the second argument names the
object it is in, for messages."""
_Write: TypeAlias = Callable[[Any], JSON]
_REQUIRED: Final = _Flag("REQUIRED")
_INLINE: dict[Callable[..., Any], str] = {}
"""Steps whose usual case :func:`_generated` writes out in place of a call."""
_Step: TypeAlias = tuple[str, str | tuple[str, ...], _Read | None, Any]
"""(attribute, wire name or path, step or ``None`` to keep the value as received, what an
absent or null value reads as or :data:`_REQUIRED`)."""
_T = TypeVar("_T")
_MISSING: Final = dataclasses.MISSING


@dataclass(frozen=True)
class _Class:
    """A declared class: its name in messages, its cross-field check, and, once worked
    out, the steps that read and write it."""

    noun: str
    check: Callable[[Any, str], None] | None
    reads: list[_Step] = dataclasses.field(default_factory=list)
    """How each field is read, choices first."""
    writes: list[tuple[str, tuple[str, ...], _Write, bool, bool]] = dataclasses.field(
        default_factory=list)
    """(attribute, wire path, step, write None as null, step takes the whole object)."""
    generated: list[Callable[[dict[str, JSON], str], Any]] = dataclasses.field(
        default_factory=list)
    """Once worked out: the function that reads the fields in that order (see
    :func:`_generated`)."""


_DECLARED: dict[type, _Class] = {}
KINDS: dict[str, type] = {}
"""Every payload kind by its wire name."""


def declared(noun: str, *, kind: bool = False,
             check: Callable[[Any, str], None] | None = None) -> Callable[[type[_T]], type[_T]]:
    """Declare a payload class: ``noun`` names it in messages (and on the wire, for a
    ``kind``); ``check(obj, where)`` refuses what no single field shows."""
    def declare(cls: type[_T]) -> type[_T]:
        _DECLARED[cls] = _Class(noun, check)
        if kind:
            KINDS[noun] = cls
        return cls
    return declare


def noun(cls: type) -> str:
    """The name a declared class has in messages (a kind's wire name)."""
    return _DECLARED[cls].noun


def read(cls: type[_T], value: JSON, where: str | None = None, **given: Any) -> _T:
    """Parse the JSON object ``value`` as ``cls``; ``given`` fields are not read but taken
    as they are."""
    declaration = _DECLARED[cls]
    if not declaration.generated:
        _compile(cls, declaration)
    where = where or declaration.noun
    obj = _object(value, where)
    if not given:
        made: _T = declaration.generated[0](obj, where)
    else:
        made = cls(**_fields(declaration, obj, where, given))
    if declaration.check is not None:
        declaration.check(made, where)
    return made


def _fields(declaration: _Class, obj: dict[str, JSON], where: str,
            fields: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``obj`` not in ``fields`` already, read step by step."""
    for attribute, key, step, default in declaration.reads:
        if attribute in fields:
            continue
        raw = obj.get(key) if type(key) is str else _lookup(obj, key, where)
        if raw is None and default is not _REQUIRED:
            fields[attribute] = default
        else:
            fields[attribute] = raw if step is None else step(raw, where)
    return fields


def write(obj: object) -> dict[str, JSON]:
    """The wire object of a declared ``obj``."""
    declaration = _DECLARED[type(obj)]
    if not declaration.generated:
        _compile(type(obj), declaration)
    out: dict[str, JSON] = {}
    for attribute, path, step, keep_none, whole in declaration.writes:
        value = obj if whole else getattr(obj, attribute)
        if value is None:
            if not keep_none:
                continue
            encoded = None
        else:
            encoded = step(value)
            if encoded is ABSENT:
                continue
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = encoded
    return out


def _lookup(obj: Mapping[str, JSON], path: str | tuple[str, ...], where: str) -> JSON:
    """The value at ``path``: ``None`` when absent on the way; a step that is neither an
    object nor absent is refused."""
    for depth, part in enumerate(path[:-1]):
        step = obj.get(part)
        if step is None:
            return None
        obj = _object(step, f"{where} {'.'.join(path[:depth + 1])}")
    return obj.get(path[-1])


# -- working out the steps once ----------------------------------------------------------


def _compile(cls: type, declaration: _Class) -> None:
    hints = typing.get_type_hints(cls, include_extras=True)
    choices: list[_Step] = []
    others: list[_Step] = []
    for field in dataclasses.fields(cls):
        base, markers = _split(hints[field.name])
        if LOCAL in markers:
            continue
        path = next((m.path for m in markers if isinstance(m, At)), (field.name,))
        key: str | tuple[str, ...] = path[0] if len(path) == 1 else path
        dotted = ".".join(path)
        custom = next((m for m in markers if isinstance(m, Custom)), None)
        if custom is not None:
            others.append((field.name, key, custom.read, _REQUIRED))
            declaration.writes.append((field.name, path, custom.write, False, True))
            continue
        default = next((m.value for m in markers if isinstance(m, IfAbsent)), field.default)
        if field.default_factory is not _MISSING:
            default = field.default_factory()
        step = (field.name, key, *_reader(base, markers, default, dotted))
        first = FIRST in markers or any(isinstance(m, OneOf) for m in markers)
        (choices if first else others).append(step)
        declaration.writes.append(
            (field.name, path, _writer(base, markers), NULL in markers, False))
    declaration.reads.extend(choices + others)
    declaration.generated.append(_generated(cls, declaration.reads))


def _generated(cls: type, steps: list[_Step]) -> Callable[[dict[str, JSON], str], Any]:
    """A function that reads ``cls`` by ``steps`` in straight-line code, as if written by
    hand (a loop over the steps costs a third more on the hot path of every update)."""
    names: dict[str, Any] = {"cls": cls, "_lookup": _lookup, "REQUIRED": _REQUIRED}
    lines = ["def read(obj, where):"]
    for number, (_, key, step, default) in enumerate(steps):
        names[f"key{number}"], names[f"step{number}"] = key, step
        names[f"default{number}"] = default
        get = f"obj.get(key{number})" if type(key) is str else f"_lookup(obj, key{number}, where)"
        lines.append(f"    raw = {get}")
        value = "raw" if step is None else f"step{number}(raw, where)"
        if step in _INLINE:
            value = _INLINE[step].format(step=f"step{number}")
        if default is not _REQUIRED:
            value = f"default{number} if raw is None else {value}"
        lines.append(f"    field{number} = {value}")
    arguments = ", ".join(f"{attribute}=field{number}"
                          for number, (attribute, *_) in enumerate(steps))
    lines.append(f"    return cls({arguments})")
    names["parse_rfc3339"] = parse_rfc3339
    exec("\n".join(lines), names)  # text made only from the declaration, never from input
    made: Callable[[dict[str, JSON], str], Any] = names["read"]
    return made


def _split(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    if typing.get_origin(hint) is typing.Annotated:
        base, *markers = typing.get_args(hint)
        return base, tuple(markers)
    return hint, ()


def _optional(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)


def _inner(hint: Any) -> Any:
    """``X`` of ``X | None``."""
    if _optional(hint):
        return next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


def _reader(hint: Any, markers: tuple[Any, ...], default: Any,
            name: str) -> tuple[_Read | None, Any]:
    """The step for a present value, and what an absent one reads as."""
    inner = _inner(hint)
    if typing.get_origin(inner) is tuple:
        return _list_reader(typing.get_args(inner)[0], markers, name), ()
    if default is _MISSING:
        # Required: an absent value is refused as the wrong type.
        default = None if _optional(hint) else _REQUIRED
    return _value_reader(inner, markers, name), default


def _value_reader(hint: Any, markers: tuple[Any, ...], name: str) -> _Read | None:
    if hint is str:
        return _text_reader(markers, name)
    if hint is int:
        bounds = next((m for m in markers if isinstance(m, Range)), Range(0, MAX_INT))
        return _integer_reader(bounds, name)
    if hint is datetime:
        return _time
    if hint in _DECLARED:
        return lambda value, where: read(hint, value, f"{where} {name}")
    return None  # any JSON value, kept as received


def _time(value: JSON, where: str) -> datetime | None:
    return parse_rfc3339(value)


def _text_reader(markers: tuple[Any, ...], name: str) -> _Read:
    limit = next((m.limit for m in markers if isinstance(m, MaxChars)), None)
    choice = next((m.values for m in markers if isinstance(m, OneOf)), None)
    lenient = LENIENT in markers
    plain = limit is None and choice is None and not lenient

    def text(value: JSON, where: str) -> str | None:
        if type(value) is not str:
            if lenient:
                return None
            raise PayloadError(f"{where}: {name} must be a string")
        if limit is not None and len(value) > limit:
            raise PayloadError(f"{where}: {name} is longer than {limit} characters")
        if choice is not None and value not in choice:
            raise PayloadError(f"{where}: {name} must be {_choices(choice)}")
        return value
    if plain:  # the usual case, checked without a call
        _INLINE[text] = "raw if type(raw) is str else {step}(raw, where)"
    return text


def _choices(values: tuple[str, ...]) -> str:
    if len(values) == 2:
        return f"{values[0]} or {values[1]}"
    return f"one of {', '.join(values)}"


def _integer_reader(bounds: Range, name: str) -> _Read:
    high = "2^63-1" if bounds.high == MAX_INT else str(bounds.high)

    def integer(value: JSON, where: str) -> int:
        if not is_int(value) or not bounds.low <= value <= bounds.high:
            raise PayloadError(f"{where}: {name} must be an integer from {bounds.low} to {high}")
        return value
    return integer


def _list_reader(entry: Any, markers: tuple[Any, ...], name: str) -> _Read:
    items = next((m for m in markers if isinstance(m, Items)), None)
    nested = entry in _DECLARED

    def entries(value: JSON, where: str) -> tuple[Any, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise PayloadError(f"{where}: {name} must be a list")
        if items is not None and len(value) > items.limit:
            raise PayloadError(
                f"{where} has {len(value)} {name}; at most {items.limit} allowed")
        if nested:
            parsed = _entries(entry, value, f"{where} {name}")
        elif all(isinstance(one, str) for one in value):
            parsed = tuple(value)
        else:
            raise PayloadError(f"{where}: {name} must be strings")
        if items is not None and items.unique is not None:
            unique = items.unique
            keys = [one if unique == "." else getattr(one, unique) for one in parsed]
            if len(set(keys)) != len(keys):
                raise PayloadError(f"{where} {name}: duplicate "
                                   f"{'entry' if unique == '.' else unique}")
        return parsed
    return entries


def _entries(cls: type, values: list[JSON], where: str) -> tuple[Any, ...]:
    parsed: list[Any] = []
    index = 0
    try:
        for index, value in enumerate(values):  # noqa: B007  # the index names a refusal
            parsed.append(read(cls, value))
    except PayloadError as exc:
        raise PayloadError(f"{where}[{index}]: {exc}") from exc
    return tuple(parsed)


def _writer(hint: Any, markers: tuple[Any, ...]) -> _Write:
    inner = _inner(hint)
    if typing.get_origin(inner) is tuple:
        entry = typing.get_args(inner)[0]
        one: _Write = write if entry in _DECLARED else (lambda value: value)
        if OMIT_EMPTY in markers:
            return lambda values: [one(v) for v in values] if values else ABSENT
        return lambda values: [one(v) for v in values]
    if inner is datetime:
        return format_rfc3339
    if inner in _DECLARED:
        return write
    return lambda value: value


def _object(value: object, where: str) -> dict[str, JSON]:
    if not isinstance(value, dict):
        raise PayloadError(f"{where} must be a JSON object")
    return value


_INLINE[_time] = "parse_rfc3339(raw)"
