"""An agent's settings file as JSON that a rewrite cannot change: every number keeps the
text it was written with (``1.0``, ``1e3``, ``12345678901234567890``), and what a rewrite
would lose or the agent would read differently is refused instead (duplicate keys, numbers
beyond a double, ``NaN``, comments and anything else that is not plain JSON)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.errors import SkaldError


class LossyJson(SkaldError):
    """The text cannot be read and written back without changing what it means."""


@dataclass(frozen=True)
class Number:
    """A JSON number as written in the file."""

    text: str


def loads(text: str) -> Any:
    """The JSON value of ``text``, numbers as :class:`Number`."""
    try:
        return json.loads(text, parse_int=_number, parse_float=_number,
                          parse_constant=_constant, object_pairs_hook=_object)
    except ValueError as exc:
        raise LossyJson(f"not valid JSON ({exc}; comments and trailing commas cannot be "
                        "kept by a rewrite)") from exc


def dumps(value: Any, indent: str = "") -> str:
    """``value`` as JSON indented by two spaces, each :class:`Number` as it was written."""
    inner = indent + "  "
    if isinstance(value, Number):
        return value.text
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, bool | int):
        return json.dumps(value)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        members = [f"{inner}{_string(str(k))}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(members) + f"\n{indent}}}"
    if isinstance(value, Sequence):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(f"{inner}{dumps(v, inner)}" for v in value) + f"\n{indent}]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _number(text: str) -> Number:
    if math.isinf(float(text)):
        raise LossyJson(f"the number {text[:40]} is beyond what the agent can read (a double)")
    return Number(text)


def _constant(text: str) -> Any:
    raise LossyJson(f"{text} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        twice = next(key for key in keys if keys.count(key) > 1)
        raise LossyJson(f"the key {json.dumps(twice)[:80]} appears twice in one object "
                        "(a rewrite would keep only one)")
    return dict(pairs)


def _string(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (\ud800) stays escaped
        return json.dumps(text)
    return json.dumps(text, ensure_ascii=False)
