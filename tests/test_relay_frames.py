"""Relay frames (protocol §4): parsing what arrives, building what leaves."""

from __future__ import annotations

import binascii
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.errors import EnvelopeRefused, ProtocolError, RefusalReason
from bot.protocol.encoding import b64u_decode, b64u_encode
from bot.protocol.envelope import MAX_ENVELOPE_BYTES, parse_envelope
from bot.protocol.identity import is_id
from bot.relay.frames import (
    MAX_FRAME_BYTES,
    Ack,
    Auth,
    Challenge,
    Deliver,
    Error,
    ErrorCode,
    FrameError,
    Ready,
    Send,
    Sent,
    ack_frame,
    challenge_frame,
    deliver_frame,
    encode_envelope,
    error_frame,
    parse_frame,
    ready_frame,
    send_frame,
    sent_frame,
)

ID = "0123456789abcdef0123456789abcdef"
ENVELOPE = {"v": 1, "id": ID, "from": ID, "to": ID, "ts": 1, "ct": "AA", "sig": "AA"}


def test_built_frames_parse_back() -> None:
    nonce = bytes(range(32))
    assert parse_frame(challenge_frame(nonce)) == Challenge(nonce)
    assert parse_frame(ready_frame(ID)) == Ready(ID)
    assert parse_frame(ack_frame(ID)) == Ack(ID)
    assert parse_frame(sent_frame(ID)) == Sent(ID)
    assert parse_frame(deliver_frame(encode_envelope(ENVELOPE))) == Deliver(ENVELOPE, ID)
    assert parse_frame(send_frame(encode_envelope(ENVELOPE))) == Send(ENVELOPE, ID)
    assert parse_frame(error_frame("too_large", ID, "why")) == Error("too_large", ID, "why")
    auth: dict[str, object] = {"type": "auth", "id": ID, "sign_pub": "x", "sig": "y"}
    assert parse_frame(json.dumps(auth)) == Auth(auth)


def test_unknown_fields_are_ignored() -> None:
    assert parse_frame(json.dumps({"type": "sent", "id": ID, "extra": [1]})) == Sent(ID)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("not json", ErrorCode.BAD_FRAME),
        ("[1, 2]", ErrorCode.BAD_FRAME),
        ('{"type": "dance"}', ErrorCode.BAD_FRAME),
        ('{"type": 7}', ErrorCode.BAD_FRAME),
        ('{"no": "type"}', ErrorCode.BAD_FRAME),
        ('{"type": "ack", "id": "short"}', ErrorCode.BAD_FRAME),
        ('{"type": "send", "envelope": "text"}', ErrorCode.BAD_ENVELOPE),
        ('{"type": "send", "envelope": {"id": 5}}', ErrorCode.BAD_ENVELOPE),
        ('{"type": "challenge", "nonce": "AAAA"}', ErrorCode.BAD_FRAME),
        ('{"type": "challenge", "nonce": "!!"}', ErrorCode.BAD_FRAME),
        ("[" * 100 + "]" * 100, ErrorCode.BAD_FRAME),
    ],
)
def test_bad_frames_raise_frame_error(text: str, code: str) -> None:
    with pytest.raises(FrameError) as caught:
        parse_frame(text)
    assert caught.value.code == code
    assert isinstance(caught.value, ProtocolError)


def test_binary_and_oversized_frames_are_refused() -> None:
    with pytest.raises(FrameError):
        parse_frame(b'{"type": "ack"}')
    with pytest.raises(FrameError):
        parse_frame('{"type":"x","pad":"' + "a" * MAX_FRAME_BYTES + '"}')


def test_error_frame_tolerates_odd_fields() -> None:
    assert parse_frame('{"type": "error", "code": 5, "id": "x"}') == Error("unknown")


# The relay's hot path: what it checks on every frame must refuse exactly what it did.


def _strict_b64u(text: str) -> bytes:
    """The reference decoder: binascii's strict mode."""
    if len(text) % 4 == 1 or not text.isascii() or any(c in text for c in "+/="):
        raise ProtocolError("not unpadded base64url")
    padding = b"=" * (-len(text) % 4)
    standard = text.encode("ascii").translate(bytes.maketrans(b"-_", b"+/")) + padding
    try:
        data = binascii.a2b_base64(standard, strict_mode=True)
    except binascii.Error as exc:
        raise ProtocolError("not unpadded base64url") from exc
    return data


@given(st.text(alphabet="AQgw-_9z=+/ .\n\x00é", max_size=12))
def test_base64url_decoding_refuses_what_strict_mode_refuses(text: str) -> None:
    try:
        expected: bytes | None = _strict_b64u(text)
    except ProtocolError:
        expected = None
    try:
        got: bytes | None = b64u_decode(text)
    except ProtocolError:
        got = None
    if got is not None:
        assert got == expected
    elif expected is not None:  # refused only for stray trailing bits, as before
        assert b64u_encode(expected) != text


def test_is_id() -> None:
    assert is_id("0123456789abcdef" * 2)
    for wrong in ["0123456789ABCDEF" * 2, "0" * 31, "0" * 33, "g" * 32, "0" * 31 + "\n", 5]:
        assert not is_id(wrong)


def test_an_envelope_over_the_limit_because_of_escaped_headers_is_too_large() -> None:
    header = "\x01" * 64  # 64 characters, 384 bytes as JSON
    envelope: dict[str, object] = {"v": 1, "id": header, "from": header, "to": header, "ts": 1}
    envelope |= {"ct": "A" * (MAX_ENVELOPE_BYTES - 600), "sig": "A" * 86}
    refused = envelope_refusal(envelope)  # the headers' 1,200 bytes tip it over
    assert refused is not None and refused.reason is RefusalReason.TOO_LARGE
    envelope["ct"] = "A" * (MAX_ENVELOPE_BYTES - 2000)
    refused = envelope_refusal(envelope)
    assert refused is not None and refused.reason is RefusalReason.MALFORMED


def envelope_refusal(envelope: dict[str, object]) -> EnvelopeRefused | None:
    try:
        parse_envelope(envelope)
    except EnvelopeRefused as exc:
        return exc
    return None


def test_compact_and_spaced_acks_parse_alike() -> None:
    envelope_id = "ab" * 16
    assert parse_frame(ack_frame(envelope_id)) == Ack(envelope_id)
    assert parse_frame(json.dumps({"type": "ack", "id": envelope_id})) == Ack(envelope_id)
    with pytest.raises(FrameError):
        parse_frame(ack_frame("AB" * 16))


@pytest.mark.parametrize(
    ("frame", "cut"),
    [
        ('{"type":"send","envelope":{"id":"%s","a":1}}', True),
        ('{"type":"send","envelope":{"id":"%s","a":{"envelope":1}}}', False),
        ('{"type":"send","envelope":{"id":"%s"},"type":"send"}', False),
        ('{"type":"send","envelope":{"id":"%s"} }', False),
        ('{"type":"send","envelope":{"id":"%s","b":"x"},"envelope":{"id":"%s","b":"y"}}', False),
        ('{"type": "send", "envelope": {"id": "%s"}}', False),
        ('{"type":"send","envelope":{"id":"%s","note":"\\"envelope\\":"}}', True),
    ],
)
def test_a_send_frames_envelope_text_is_exactly_its_envelope(frame: str, cut: bool) -> None:
    parsed = parse_frame(frame.replace("%s", "ab" * 16))
    assert isinstance(parsed, Send)
    assert (parsed.text is not None) is cut
    if parsed.text is not None:
        assert json.loads(parsed.text) == parsed.envelope
