"""Relay frames (protocol §4): parsing what arrives, building what leaves."""

from __future__ import annotations

import binascii
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.errors import EnvelopeRefused, PayloadError, ProtocolError, RefusalReason
from bot.protocol.encoding import b64u_decode, b64u_encode, loads_limited
from bot.protocol.envelope import (
    MAX_ENVELOPE_BYTES,
    MIN_CT_BYTES,
    DecodedEnvelope,
    Envelope,
    parse_envelope,
)
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
    _parse_deliver,
    _read_deliver,
    ack_frame,
    challenge_frame,
    deliver_frame,
    encode_envelope,
    error_frame,
    parse_frame,
    read_send,
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


def _full_read(text: str) -> tuple[str, str, str, str | None] | None:
    """What parse_frame and parse_envelope make of a send frame: its headers, or None."""
    try:
        frame = parse_frame(text)
        assert isinstance(frame, Send)
        envelope = parse_envelope(frame.envelope)
    except (ProtocolError, EnvelopeRefused):
        return None
    return envelope.id, envelope.sender, envelope.recipient, frame.text


def _send_text(**fields: object) -> str:
    envelope: dict[str, object] = {
        "v": 1,
        "id": ID,
        "from": "1" * 32,
        "to": "2" * 32,
        "ts": 1_700_000_000_000,
        "ct": b64u_encode(bytes(range(48))),
        "sig": b64u_encode(bytes(64)),
    }
    envelope.update(fields)
    return send_frame(encode_envelope({k: v for k, v in envelope.items() if v is not None}))


_GOOD_SENDS = [
    _send_text(),
    _send_text(ts=0),
    _send_text(ts=(1 << 63) - 1),
    _send_text(ct=b64u_encode(bytes(2000))),
    _send_text(push=b64u_encode(bytes(100))),
    _send_text(push=""),
]
_OTHER_SENDS = [
    _send_text(v=2),
    _send_text(v=1.0),
    _send_text(ts=1 << 63),
    _send_text(ts=-1),
    _send_text(ts=1.5),
    _send_text(id=ID.upper()),
    _send_text(to="2" * 31),
    _send_text(ct=b64u_encode(bytes(47))),
    _send_text(ct=b64u_encode(bytes(49))[:-1] + "B"),  # stray trailing bits
    _send_text(ct=b64u_encode(bytes(48)) + "A"),  # a length no base64 has
    _send_text(ct=b64u_encode(bytes(49)) + "=="),
    _send_text(ct="+" + b64u_encode(bytes(48))[1:]),
    _send_text(ct="\\u0041" + b64u_encode(bytes(48))[1:]),
    _send_text(sig=b64u_encode(bytes(63))),
    _send_text(sig=b64u_encode(bytes(64))[:-1] + "B"),
    _send_text(push="A" * 3501),
    _send_text(push="!" * 4),
    _send_text(ct=b64u_encode(bytes(MAX_ENVELOPE_BYTES * 3 // 4))),
    _send_text(extra="x"),
    _send_text().replace('"v":1,', '"v": 1,'),
    _send_text().replace('"v":1,', '"v":01,'),
    _send_text().replace('"ts":', '"ts":0'),
    _send_text().replace('"sig":', '"sig":"x","sig":'),
    _send_text()[:-1] + ',"sig":"AA"}',
    _send_text() + " ",
    _send_text()[:-2] + "}",
    '{"envelope":' + _send_text()[len('{"type":"send","envelope":') : -1] + ',"type":"send"}',
]


@pytest.mark.parametrize("text", _GOOD_SENDS + _OTHER_SENDS)
def test_read_send_agrees_with_the_full_checks(text: str) -> None:
    """The fast reading of a send frame accepts only what the full checks accept, with
    the same headers and text; anything else is left to them (and their refusals)."""
    fast = read_send(text)
    full = _full_read(text)
    if text in _GOOD_SENDS:
        assert fast is not None
    if fast is not None:
        assert full == (fast.envelope_id, fast.sender, fast.recipient, fast.text)


@given(st.text(alphabet='{}":,0123456789abcdefvitsgpuhromAB-_', max_size=60))
def test_read_send_refuses_what_the_full_checks_refuse(tail: str) -> None:
    text = _send_text()[:-60] + tail
    if (fast := read_send(text)) is not None:
        assert _full_read(text) == (fast.envelope_id, fast.sender, fast.recipient, fast.text)


def _as_deliver(send_text: str) -> str:
    return deliver_frame(send_text[len('{"type":"send","envelope":') : -1])


def _full_deliver(text: str) -> Deliver | None:
    """What the full parse (JSON decoded under every limit) makes of a deliver frame."""
    try:
        obj = loads_limited(text, max_bytes=MAX_FRAME_BYTES)
        assert isinstance(obj, dict) and obj.get("type") == "deliver"
        return _parse_deliver(obj)
    except (ProtocolError, PayloadError, AssertionError):
        return None


@pytest.mark.parametrize("text", [_as_deliver(t) for t in _GOOD_SENDS + _OTHER_SENDS])
def test_a_deliver_frame_read_without_json_is_the_full_parses(text: str) -> None:
    """A deliver frame in the form clients write envelopes is read without decoding its
    JSON, into exactly the envelope the full parse makes (keys in order); any other form
    is left to the full parse."""
    fast = _read_deliver(text)
    if text in [_as_deliver(t) for t in _GOOD_SENDS]:
        assert fast is not None
    if fast is not None:
        full = _full_deliver(text)
        assert full == fast
        assert list(full.envelope.items()) == list(fast.envelope.items())
        assert parse_frame(text) == fast
        assert _parsed(fast.envelope) == _parsed(full.envelope)


def _parsed(envelope: dict[str, object]) -> Envelope | str:
    try:
        return parse_envelope(envelope)
    except EnvelopeRefused as refusal:
        return str(refusal)


def test_a_deliver_frames_ciphertext_is_decoded_once_and_only_for_its_own_text() -> None:
    """The fast read hands its decoded ``ct`` on with the envelope; an envelope whose ``ct``
    was replaced since, or a copy, is decoded as any other."""
    fast = _read_deliver(_as_deliver(_send_text()))
    assert isinstance(fast, Deliver) and isinstance(fast.envelope, DecodedEnvelope)
    assert parse_envelope(fast.envelope).ct == fast.envelope.ct_bytes
    other = b64u_encode(b"\x01" * MIN_CT_BYTES)
    changed = fast.envelope
    changed["ct"] = other
    assert parse_envelope(changed).ct == b"\x01" * MIN_CT_BYTES
    copy = dict(fast.envelope, ct="not base64url!")
    with pytest.raises(EnvelopeRefused, match="ct: not unpadded base64url"):
        parse_envelope(copy)


@given(st.text(alphabet='{}":,0123456789abcdefvitsgpuhromAB-_\\\n', max_size=60))
def test_a_deliver_frame_read_without_json_agrees_with_the_full_parse(tail: str) -> None:
    text = _as_deliver(_send_text())[:-60] + tail
    if (fast := _read_deliver(text)) is not None:
        full = _full_deliver(text)
        assert full == fast
        assert full is not None and list(full.envelope.items()) == list(fast.envelope.items())
