"""Describing a tool call's arguments as seed blocks (pure: no I/O).

Short strings become ``key_value`` rows, multi-line text a ``block``, objects and lists a
``json`` block; a string that reads as a URL, an e-mail address, a path, a number, a
boolean or a date and time gets that ``value_type``. A key that names a credential
(``password``, ``token``, ``api_key``, ``authorization``, …) becomes a ``secret`` wherever
it sits, also inside an object: the client then masks its value everywhere it appears.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Final

from bot.render.credentials import credentials_in, is_credential_key, strings_in
from bot.render.masking import MASK as MASKED

LONG_LINE_CHARS: Final = 120
"""A one-line string longer than this gets a ``field`` of its own instead of a row."""
SUMMARY_VALUE_CHARS: Final = 60
MASK: Final = "•••"

_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[a-zA-Z]{2,}")
_PATH = re.compile(r"(~|\.{1,2})?/[^\s]*|[A-Za-z]:\\[^\s]*")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?")


def string_value_type(text: str) -> str:
    """The ``value_type`` a one-line string reads as (``string`` when nothing fits)."""
    if _URL.fullmatch(text):
        return "url"
    if _EMAIL.fullmatch(text):
        return "email"
    if _DATE.fullmatch(text) and _parses_as_datetime(text):
        return "datetime"
    if _NUMBER.fullmatch(text):
        return "number"
    if text.lower() in ("true", "false"):
        return "boolean"
    if _PATH.fullmatch(text):
        return "path"
    return "string"


def _parses_as_datetime(text: str) -> bool:
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def describe_arguments(arguments: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Seed blocks for ``arguments``, in their order; credential values as ``secret``."""
    blocks: list[dict[str, Any]] = []
    for key, value in arguments.items():
        blocks.append(_describe(str(key), value))
        if isinstance(value, dict | list) and not is_credential_key(str(key)):
            blocks.extend(_nested_secrets(str(key), value))
    return blocks


def _describe(key: str, value: Any) -> dict[str, Any]:
    if is_credential_key(key):
        return _row(key, _as_text(value), "secret")
    if isinstance(value, bool):
        return _row(key, "true" if value else "false", "boolean")
    if isinstance(value, int | float):
        return _row(key, json.dumps(value), "number")
    if value is None:
        return _row(key, "null", "string")
    if isinstance(value, dict | list):
        return {"type": "block", "label": key, "value": _as_text(value), "value_type": "json"}
    text = str(value)
    if "\n" in text:
        return {"type": "block", "label": key, "value": text, "value_type": "text"}
    if len(text) > LONG_LINE_CHARS:
        return {"type": "field", "label": key, "value": text, "value_type": "string"}
    return _row(key, text, string_value_type(text))


def _row(key: str, value: str, value_type: str) -> dict[str, Any]:
    return {"type": "key_value", "key": key, "value": value, "value_type": value_type}


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def _nested_secrets(path: str, value: Any) -> Iterator[dict[str, Any]]:
    """``secret`` rows for credentials inside objects (and lists of them), so that a
    client masks them in the ``json`` block too."""
    if isinstance(value, dict):
        for key, inner in value.items():
            name = f"{path}.{key}"
            if is_credential_key(str(key)) and not isinstance(inner, dict | list):
                if inner not in (None, ""):
                    yield _row(name, _as_text(inner), "secret")
            else:
                yield from _nested_secrets(name, inner)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _nested_secrets(f"{path}[{index}]", inner)


def default_summary(tool: str, arguments: Mapping[str, Any]) -> str:
    """``<tool>(<first argument>)``, the value cut short and a credential masked."""
    if not arguments:
        return f"{tool}()"
    key, value = next(iter(arguments.items()))
    if is_credential_key(str(key)):
        shown = MASK
    else:
        shown = " ".join(_as_text(value).split())
        if len(shown) > SUMMARY_VALUE_CHARS:
            shown = shown[: SUMMARY_VALUE_CHARS - 1] + "…"
    return f"{tool}({shown})"


def credential_blocks(
    summary: str, blocks: Iterable[Mapping[str, Any]], arguments: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """A ``secret`` row for each credential written into the summary, a block or the
    arguments (``Authorization: …``, ``https://user:password@…``, ``-u user:password``) that
    no ``secret`` block holds yet (nor one already masked): the card then masks it
    everywhere, and no grant is offered for the call."""
    shown = [dict(block) for block in blocks]
    seen = {str(block.get("value")) for block in shown if block.get("value_type") == "secret"}
    rows = []
    for text in strings_in([summary, shown, dict(arguments)]):
        for credential in credentials_in(text):
            if credential.value not in seen and MASKED not in credential.value:
                seen.add(credential.value)
                rows.append(_row(credential.name, credential.value, "secret"))
    return rows
