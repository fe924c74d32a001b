"""Wire encodings shared by the whole protocol: base64url, canonical JSON, bounded JSON
decoding and RFC 3339 times.

Everything here is strict about what it accepts, because it is the first thing hostile
bytes from the relay meet.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard

import pybase64

from bot.errors import PayloadError, ProtocolError

if TYPE_CHECKING:
    import msgspec

JSON: TypeAlias = Any
"""A decoded JSON value (the same alias as :data:`bot.protocol.payloads.JSON`)."""

_B64U_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_UNUSED_BITS = {1: 0b11, 2: 0b1111}
"""Bits of the last character that carry no data, by the padding it lacks."""

_JSON_NESTING_TOKEN = re.compile(
    r'[^"\[\]{}]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^"\[\]{}]*)*([\[\]{}"]|$)', re.DOTALL
)
"""Skips text and complete strings (in C, without a step per string) up to the next
bracket outside a string, or to a quote that opens a string never closed."""
_NESTING_STEP = {"[": 1, "{": 1, "]": -1, "}": -1, "": 0}
# A \uD800-\uDFFF escape: the only way a surrogate gets into decoded JSON text (a false
# hit, such as an escaped backslash before "ud800", only costs a scan of the values).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")
_SURROGATE = re.compile("[\ud800-\udfff]")
FAST_JSON_BYTES = 1024
"""From this size on, JSON is decoded by msgspec (a typical payload of 2.5 KiB in 4 µs
instead of 16). Smaller texts, such as a key file or a relay's frames, take the standard
library, so that a short-lived command does not import msgspec for them."""

COUNT_BRACKETS_BYTES = 16 * 1024
"""Up to this size, :func:`_too_few_brackets` may spare a decoded value its nesting walk."""

MIN_YEAR = 1970
MAX_YEAR = 9000
"""Times outside these years are treated as absent: every time we return can be shifted
by years, compared and turned into a timestamp without overflowing."""


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a JSON integer (``True``/``False`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def b64u_encode(data: bytes) -> str:
    """Encode bytes as base64url without padding."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64u_decode(text: str) -> bytes:
    """Decode base64url without padding; anything else (padding, ``+``/``/``, spaces,
    non-canonical trailing bits, a non-string) raises :class:`ProtocolError`."""
    if not isinstance(text, str):
        raise ProtocolError(f"expected a base64url string, got {type(text).__name__}")
    # The validating decoder refuses characters outside the alphabet; with "-_" as the
    # alternative characters it still takes the standard "+" and "/", refused first.
    if len(text) % 4 == 1 or not text.isascii() or "+" in text or "/" in text or "=" in text:
        raise ProtocolError("not unpadded base64url")
    padding = "=" * (-len(text) % 4)
    try:
        data = pybase64.b64decode(text + padding, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError("not unpadded base64url") from exc
    if padding and _B64U_ALPHABET.index(text[-1]) & _UNUSED_BITS[len(padding)]:
        raise ProtocolError("not canonical base64url (stray trailing bits)")
    return data


def canonical_json(value: JSON) -> bytes:
    """The canonical serialisation: keys sorted, no whitespace, non-ASCII kept, UTF-8."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def args_sha256(arguments: JSON) -> str:
    """The digest binding a decision to the arguments shown (§3.3); ``None`` is ``null``."""
    return b64u_encode(hashlib.sha256(canonical_json(arguments)).digest())


def json_type(value: JSON) -> str:
    """The JSON type of ``value``: an integer and a fraction are both a number."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array"


def loads_limited(data: bytes | str, *, max_bytes: int, max_depth: int = 64) -> JSON:
    """Decode JSON that came from outside, refusing anything a hostile peer could use.

    Raises :class:`PayloadError` for more than ``max_bytes`` of UTF-8, invalid UTF-8,
    nesting deeper than ``max_depth``, ``NaN``/``Infinity`` (also as overflowing numbers),
    a lone surrogate (``"\\ud800"`` without its pair: no UTF-8 can carry it, so the
    arguments digest, the store and Telegram could not either) and anything that is not
    JSON.
    """
    raw = _utf8(data, max_bytes)
    if len(raw) >= FAST_JSON_BYTES:
        return _loads_fast(raw, max_depth)
    return _loads_strict(raw, max_depth)


def _utf8(data: bytes | str, max_bytes: int) -> bytes:
    """``data`` as UTF-8 bytes, no more than ``max_bytes`` of them."""
    if isinstance(data, str):
        if len(data) > max_bytes:
            raise PayloadError(f"JSON larger than {max_bytes} bytes")
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise PayloadError("JSON text contains lone surrogates") from exc
    elif isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)  # no copy of bytes
    else:
        raise PayloadError(f"expected JSON bytes or text, got {type(data).__name__}")
    if len(raw) > max_bytes:
        raise PayloadError(f"JSON larger than {max_bytes} bytes ({len(raw)})")
    return raw


def _loads_fast(raw: bytes, max_depth: int) -> JSON:
    """Decode with msgspec, which refuses everything :func:`_loads_strict` refuses and
    takes what it accepts to the same values, three times as fast; what it refuses is
    decoded again by :func:`_loads_strict`, so that every refusal reads the same."""
    decode, refusal = _fast_decoder()
    try:
        value = decode(raw)
    except (refusal, RecursionError):
        return _loads_strict(raw, max_depth)
    if not _too_few_brackets(raw, max_depth) and _nested_deeper(value, max_depth):
        raise PayloadError(f"JSON nested deeper than {max_depth} levels")
    return value


@functools.cache
def _fast_decoder() -> tuple[Callable[[bytes], Any], type[Exception]]:
    """msgspec's decoder and the error it raises, loaded with the first text that needs
    them: the module costs 1.5 MiB of memory."""
    import msgspec.json

    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
    return decoder.decode, msgspec.MsgspecError


def _loads_strict(raw: bytes, max_depth: int) -> JSON:
    """Decode with the standard library, each refusal with its own message."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"JSON is not valid UTF-8 (byte {exc.start})") from exc
    _check_depth(text, max_depth)
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        # json.JSONDecodeError is a ValueError, and so is the int digit limit.
        raise PayloadError(f"invalid JSON: {exc}") from exc
    # The pattern's literal start makes its search quicker than a substring test.
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(value):
        raise PayloadError("lone surrogate in JSON string")
    return value


def _too_few_brackets(raw: bytes, max_depth: int) -> bool:
    """Whether a short text opens too few brackets to nest deeper than ``max_depth``:
    counting them is quicker than walking the value of a typical payload, but a longer
    text is walked (a count is a byte-at-a-time pass)."""
    return len(raw) <= COUNT_BRACKETS_BYTES and raw.count(b"[") + raw.count(b"{") <= max_depth


def _nested_deeper(value: JSON, max_depth: int) -> bool:
    """Whether a value msgspec decoded (plain dicts and lists) nests deeper than
    ``max_depth`` (a scalar: 0, ``[]``: 1), one level at a time: a step per value in an
    array or object, not per byte."""
    level = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        inner: list[JSON] = []
        keep = inner.append
        for container in level:
            for child in container.values() if type(container) is dict else container:
                if type(child) is dict or type(child) is list:
                    keep(child)
        level = inner
    return False


def decode_at(text: str, pos: int, *, max_depth: int) -> tuple[JSON, int]:
    """Decode the one JSON value that starts at ``text[pos]`` under the rules of
    :func:`loads_limited` (its size aside); returns the value and where it ends."""
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"invalid JSON: {exc}") from exc
    piece = text[pos:end]
    _check_depth(piece, max_depth)
    if _SURROGATE_ESCAPE.search(piece) and _has_lone_surrogate(value):
        raise PayloadError("lone surrogate in JSON string")
    return value, end


def _has_lone_surrogate(value: JSON) -> bool:
    """Whether any string (object keys included) holds a surrogate; surrogate pairs were
    already joined by the decoder, so any left is alone."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _check_depth(text: str, max_depth: int) -> None:
    if text.count("[") + text.count("{") <= max_depth:
        return  # cannot possibly nest deeper: skip the scan
    brackets = _JSON_NESTING_TOKEN.findall(text)
    if '"' in brackets:
        # An unterminated string: json.loads reports it; what comes before still counts.
        del brackets[brackets.index('"'):]
    depths = itertools.accumulate(map(_NESTING_STEP.__getitem__, brackets))
    if max(depths, default=0) > max_depth:
        raise PayloadError(f"JSON nested deeper than {max_depth} levels")


def _refuse_constant(name: str) -> float:
    raise PayloadError(f"JSON constant {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise PayloadError(f"JSON number {text[:32]} overflows")
    return value


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def format_rfc3339(dt: datetime) -> str:
    """Format an aware datetime in UTC, e.g. ``2026-11-29T10:03:12Z``.

    Sub-second precision is kept only when present (``…12.5Z``).
    """
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError("format_rfc3339 needs an aware datetime")
    utc = dt.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def parse_rfc3339(text: object) -> datetime | None:
    """Parse an RFC 3339 time with offset, as UTC; ``None`` when absent, not a string,
    unparseable, without an offset, or outside the years :data:`MIN_YEAR` to
    :data:`MAX_YEAR`."""
    if not isinstance(text, str) or not 0 < len(text) <= 64:
        return None
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None or parsed.utcoffset() is None:
            return None
        utc = parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    if not MIN_YEAR <= utc.year <= MAX_YEAR:
        return None
    return utc
