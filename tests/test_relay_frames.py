"""Relay frames (protocol §4): parsing what arrives, building what leaves."""

from __future__ import annotations

import json

import pytest

from bot.errors import ProtocolError
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
