"""Relay session frames (protocol §4), sans-I/O: parsing incoming frames and building
outgoing ones as JSON text.

Both ends use this module: the server and the client only move the text over a socket.
Envelopes inside frames are kept as plain dicts; checking them is the caller's job
(:func:`bot.protocol.envelope.parse_envelope` on the relay, the full §2 rules on the
recipient).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, TypeAlias

from bot.errors import PayloadError, ProtocolError
from bot.protocol.encoding import b64u_decode, b64u_encode, loads_limited
from bot.protocol.envelope import (
    MAX_ENVELOPE_BYTES,
    MAX_PUSH_CHARS,
    MAX_TS,
    MIN_CT_BYTES,
    VERSION,
    DecodedEnvelope,
)
from bot.protocol.identity import SIGNATURE_BYTES, is_id

MAX_FRAME_BYTES: Final = 2 * MAX_ENVELOPE_BYTES
"""Frames up to this size are read and answered (an oversized envelope gets ``too_large``);
larger WebSocket messages are refused by the transport itself (``CloseCode.MESSAGE_TOO_BIG``)."""

NONCE_BYTES: Final = 32

DELIVER_WINDOW: Final = 256
"""The relay sends at most this many ``deliver`` frames ahead of the client's acks, so a
client can read all of them (and keep answering pings) while its handler works through
them."""


class RelayCloseCode(IntEnum):
    """The relay's own close codes (protocol §4), beside the standard ones of
    :class:`websockets.frames.CloseCode`."""

    AUTH_FAILED = 4401
    AUTH_TIMEOUT = 4408
    REPLACED = 4409
    """A newer session of the same id took over."""


class ErrorCode:
    """The ``code`` of an ``error`` frame."""

    AUTH_FAILED: Final = "auth_failed"
    NOT_AUTHENTICATED: Final = "not_authenticated"
    BAD_ENVELOPE: Final = "bad_envelope"
    TOO_LARGE: Final = "too_large"
    QUEUE_FULL: Final = "queue_full"
    BAD_FRAME: Final = "bad_frame"


PERMANENT_SEND_ERRORS: Final = frozenset({ErrorCode.BAD_ENVELOPE, ErrorCode.TOO_LARGE})
"""Errors after which resending the same envelope can never succeed."""


class FrameError(ProtocolError):
    """A frame that cannot be used; ``code`` is what to answer, ``envelope_id`` the id of
    the envelope concerned when one could be read."""

    def __init__(self, code: str, detail: str, envelope_id: str | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.envelope_id = envelope_id


class UnknownFrameType(FrameError):
    """A frame of a type this version does not know: the relay refuses it, a client
    ignores it (protocol §4), so that either side can add frame types."""


@dataclass(frozen=True)
class Challenge:
    nonce: bytes


@dataclass(frozen=True)
class Auth:
    frame: dict[str, object]
    """The whole frame, as :func:`bot.protocol.relayauth.verify_auth_frame` checks it."""


@dataclass(frozen=True)
class Ready:
    id: str


@dataclass(frozen=True)
class Deliver:
    envelope: dict[str, object]
    envelope_id: str


@dataclass(frozen=True)
class Ack:
    id: str


@dataclass(frozen=True)
class Send:
    envelope: dict[str, object]
    envelope_id: str
    text: str | None = field(default=None, compare=False)
    """The envelope's JSON text as the frame holds it, when it can be cut out exactly
    (:func:`envelope_text`): the relay stores it without encoding the envelope again."""


@dataclass(frozen=True)
class Sent:
    id: str


@dataclass(frozen=True)
class Delivered:
    """The relay's courtesy to a sender: its recipient acknowledged envelope ``id``."""

    id: str


@dataclass(frozen=True)
class Error:
    code: str
    id: str | None = None
    message: str | None = None


Frame: TypeAlias = Challenge | Auth | Ready | Deliver | Ack | Send | Sent | Delivered | Error


def parse_frame(data: str | bytes) -> Frame:
    """Decode one frame; anything unusable raises :class:`FrameError`."""
    if isinstance(data, bytes):
        raise FrameError(ErrorCode.BAD_FRAME, "binary frames are not used")
    if ack := _COMPACT_ACK.fullmatch(data):  # the most frequent frame, as both ends write it
        return Ack(ack.group(1))
    if data.startswith('{"type":"deliver",') and (deliver := _read_deliver(data)):
        return deliver
    try:
        obj = loads_limited(data, max_bytes=MAX_FRAME_BYTES)
    except PayloadError as exc:
        raise FrameError(ErrorCode.BAD_FRAME, f"not a JSON frame ({exc})") from exc
    if not isinstance(obj, dict):
        raise FrameError(ErrorCode.BAD_FRAME, "a frame must be a JSON object")
    kind = obj.get("type")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise UnknownFrameType(ErrorCode.BAD_FRAME, f"unknown frame type {_shown(kind)}")
    frame = parser(obj)
    if isinstance(frame, Send):
        return Send(frame.envelope, frame.envelope_id, _cut_envelope(data, obj))
    return frame


_SEND_PREFIX: Final = '{"type":"send","envelope":'


def _cut_envelope(text: str, obj: dict[str, object]) -> str | None:
    """The envelope's own text in a ``send`` frame written as :func:`send_frame` writes
    it, or ``None``. With exactly two keys, the prefix, one ``"envelope":`` key (an
    unescaped quote cannot occur inside a string) and a final ``}}``, nothing but the
    envelope object can lie between the prefix and the last brace: a repeated ``type``
    key would end the frame with a string."""
    if (
        len(obj) == 2
        and text.startswith(_SEND_PREFIX)
        and text.endswith("}}")
        and text.count('"envelope":') == 1
    ):
        return text[len(_SEND_PREFIX) : -1]
    return None


@dataclass(frozen=True, slots=True)
class SendHeaders:
    """What the relay needs of a ``send`` frame read by :func:`read_send`."""

    envelope_id: str
    sender: str
    recipient: str
    text: str
    """The envelope's JSON text, exactly as the frame holds it."""


_ENVELOPE_HEAD: Final = (
    r'\{"v":' + str(VERSION) + r',"id":"([0-9a-f]{32})","from":"([0-9a-f]{32})",'
    r'"to":"([0-9a-f]{32})","ts":(0|[1-9][0-9]{0,18}),"ct":"'
)
"""An envelope as clients write it (``Envelope.to_json``, compact), up to its ``ct``."""
_SEND_HEAD: Final = re.compile(r'\{"type":"send","envelope":' + _ENVELOPE_HEAD)
_DELIVER_HEAD: Final = re.compile(r'\{"type":"deliver","envelope":' + _ENVELOPE_HEAD)
_SEND_TAIL: Final = re.compile(r'","sig":"([A-Za-z0-9_-]*)"(?:,"push":"([A-Za-z0-9_-]*)")?\}\}')
"""The rest of a frame after its envelope's ``ct``."""


def read_send(text: str) -> SendHeaders | None:
    """Read a ``send`` frame written exactly as :func:`send_frame` writes an envelope
    (keys in :meth:`bot.protocol.envelope.Envelope.to_json`'s order, no spaces, no
    escapes), without decoding it as JSON: ``None`` for anything else, which
    :func:`parse_frame` and :func:`bot.protocol.envelope.parse_envelope` then decide.

    Every check of those two applies: what this accepts, they accept with the same
    headers (so refusals keep their reasons), because in this form the frame is JSON of
    that shape and its fields are checked the same way (``ts`` in range, ``ct`` and
    ``sig`` and ``push`` canonical base64url of the right lengths, the size)."""
    head = _SEND_HEAD.match(text)
    if head is None:
        return None
    ct_start = head.end()
    ct_end = text.find('"', ct_start)
    tail = _SEND_TAIL.fullmatch(text, ct_end) if ct_end > 0 else None
    if tail is None or len(text) - len(_SEND_PREFIX) - 1 > MAX_ENVELOPE_BYTES:
        return None
    envelope_id, sender, recipient, ts = head.groups()
    sig, push = tail.groups()
    try:
        if (
            int(ts) > MAX_TS
            or len(b64u_decode(text[ct_start:ct_end])) < MIN_CT_BYTES
            or len(b64u_decode(sig)) != SIGNATURE_BYTES
        ):
            return None
        if push is not None and (len(push) > MAX_PUSH_CHARS or b64u_decode(push) is None):
            return None
    except ProtocolError:
        return None
    return SendHeaders(envelope_id, sender, recipient, text[len(_SEND_PREFIX) : -1])


def _read_deliver(text: str) -> Deliver | None:
    """A ``deliver`` frame around an envelope in the form :func:`read_send` reads, read
    without decoding it as JSON (a megabyte of it costs the event loop far less): the
    frame :func:`parse_frame` would make of it, or ``None`` for any other form. In that
    form every string is plain: hex, digits, and base64url once ``ct`` decodes as such."""
    head = _DELIVER_HEAD.match(text)
    if head is None or len(text) > MAX_FRAME_BYTES:
        return None
    ct_start = head.end()
    ct_end = text.find('"', ct_start)
    tail = _SEND_TAIL.fullmatch(text, ct_end) if ct_end > 0 else None
    if tail is None:
        return None
    ct = text[ct_start:ct_end]
    try:
        ct_bytes = b64u_decode(ct)
    except ProtocolError:
        return None  # left to the full parse (JSON reads a backslash otherwise)
    envelope_id, sender, recipient, ts = head.groups()
    sig, push = tail.groups()
    fields: dict[str, object] = {
        "v": VERSION, "id": envelope_id, "from": sender, "to": recipient, "ts": int(ts),
        "ct": ct, "sig": sig,
    }
    if push is not None:
        fields["push"] = push
    return Deliver(DecodedEnvelope(fields, ct, ct_bytes), envelope_id)


_COMPACT_ACK: Final = re.compile(r'\{"type":"ack","id":"([0-9a-f]{32})"\}')


def _shown(value: object) -> str:
    return repr(value)[:40]


def _id(obj: dict[str, object], name: str, code: str = ErrorCode.BAD_FRAME) -> str:
    value = obj.get(name)
    if not is_id(value):
        raise FrameError(code, f"{name} must be 32 lowercase hex characters")
    return str(value)


def _envelope(obj: dict[str, object]) -> tuple[dict[str, object], str]:
    envelope = obj.get("envelope")
    if not isinstance(envelope, dict):
        raise FrameError(ErrorCode.BAD_ENVELOPE, "envelope must be a JSON object")
    envelope_id = envelope.get("id")
    if not is_id(envelope_id):
        raise FrameError(ErrorCode.BAD_ENVELOPE, "envelope id must be 32 lowercase hex characters")
    return envelope, str(envelope_id)


def _parse_challenge(obj: dict[str, object]) -> Challenge:
    nonce = obj.get("nonce")
    try:
        raw = b64u_decode(nonce)  # type: ignore[arg-type]  # non-strings are refused inside
    except ProtocolError as exc:
        raise FrameError(ErrorCode.BAD_FRAME, "challenge nonce is not base64url") from exc
    if len(raw) != NONCE_BYTES:
        raise FrameError(ErrorCode.BAD_FRAME, f"challenge nonce must be {NONCE_BYTES} bytes")
    return Challenge(raw)


def _parse_auth(obj: dict[str, object]) -> Auth:
    return Auth(obj)


def _parse_ready(obj: dict[str, object]) -> Ready:
    return Ready(_id(obj, "id"))


def _parse_deliver(obj: dict[str, object]) -> Deliver:
    envelope, envelope_id = _envelope(obj)
    return Deliver(envelope, envelope_id)


def _parse_ack(obj: dict[str, object]) -> Ack:
    return Ack(_id(obj, "id"))


def _parse_send(obj: dict[str, object]) -> Send:
    envelope, envelope_id = _envelope(obj)
    return Send(envelope, envelope_id)


def _parse_sent(obj: dict[str, object]) -> Sent:
    return Sent(_id(obj, "id"))


def _parse_delivered(obj: dict[str, object]) -> Delivered:
    return Delivered(_id(obj, "id"))


def _parse_error(obj: dict[str, object]) -> Error:
    code = obj.get("code")
    envelope_id = obj.get("id")
    message = obj.get("message")
    return Error(
        code=code if isinstance(code, str) else "unknown",
        id=str(envelope_id) if is_id(envelope_id) else None,
        message=message[:200] if isinstance(message, str) else None,
    )


_PARSERS: dict[str, Callable[[dict[str, object]], Frame]] = {
    "challenge": _parse_challenge,
    "auth": _parse_auth,
    "ready": _parse_ready,
    "deliver": _parse_deliver,
    "ack": _parse_ack,
    "send": _parse_send,
    "sent": _parse_sent,
    "delivered": _parse_delivered,
    "error": _parse_error,
}


def _dump(obj: Mapping[str, object]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def encode_envelope(envelope: dict[str, object]) -> str:
    """An envelope as compact JSON text, the form the relay stores and forwards."""
    return _dump(envelope)


def challenge_frame(nonce: bytes) -> str:
    return _dump({"type": "challenge", "nonce": b64u_encode(nonce)})


def auth_frame_text(frame: Mapping[str, object]) -> str:
    """The ``auth`` frame built by :func:`bot.protocol.relayauth.auth_frame`, as text."""
    return _dump(frame)


def ready_frame(session_id: str) -> str:
    return _dump({"type": "ready", "id": session_id})


def deliver_frame(envelope_json: str) -> str:
    """A ``deliver`` frame around an envelope already encoded by :func:`encode_envelope`."""
    return '{"type":"deliver","envelope":' + envelope_json + "}"


def ack_frame(envelope_id: str) -> str:
    return _dump({"type": "ack", "id": envelope_id})


def send_frame(envelope_json: str) -> str:
    """A ``send`` frame around an envelope already encoded by :func:`encode_envelope`."""
    return '{"type":"send","envelope":' + envelope_json + "}"


def sent_frame(envelope_id: str) -> str:
    """A ``sent`` frame for an id already checked (:func:`bot.protocol.identity.is_id`):
    hex needs no escaping, so the frame is written directly."""
    return '{"type":"sent","id":"' + envelope_id + '"}'


def delivered_frame(envelope_id: str) -> str:
    """A ``delivered`` frame for an id already checked (written directly, as
    :func:`sent_frame`)."""
    return '{"type":"delivered","id":"' + envelope_id + '"}'


def error_frame(code: str, envelope_id: str | None = None, message: str | None = None) -> str:
    obj: dict[str, object] = {"type": "error", "code": code}
    if envelope_id is not None:
        obj["id"] = envelope_id
    if message is not None:
        obj["message"] = message
    return _dump(obj)
