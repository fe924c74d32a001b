"""Hostile and arbitrary input to every protocol entry point: only SkaldError comes out."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.errors import EnvelopeRefused, PayloadError, ProtocolError, RefusalReason, SkaldError
from bot.protocol.encoding import args_sha256, b64u_decode, b64u_encode, canonical_json
from bot.protocol.envelope import MAX_ENVELOPE_BYTES, open_envelope, parse_envelope, seal
from bot.protocol.identity import Identity
from bot.protocol.pairing import format_pairing_uri, parse_pairing_uri
from bot.protocol.payloads import (
    InboxUpdate,
    encode_payload,
    item_to_wire,
    parse_payload,
    raw_payload,
)
from bot.render import Renderer
from bot.testing.replay import MemoryReplayGuard

AGENT = Identity.from_seeds(b"\x01" * 32, b"\x02" * 32, "agent")
DEVICE = Identity.from_seeds(b"\x03" * 32, b"\x04" * 32, "device")
NOW_MS = 1_800_000_000_000
FUZZ = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=30,
)

KINDS = [
    "inbox_update",
    "notification",
    "approval_decision",
    "clarification_answer",
    "inbox_request",
    "pair_request",
    "pair_accept",
    "other",
]
FIELDS = [
    "rev",
    "agent",
    "name",
    "approvals",
    "clarifications",
    "resolved",
    "id",
    "tool",
    "summary",
    "blocks",
    "arguments",
    "created_at",
    "expires_at",
    "question",
    "options",
    "outcome",
    "by",
    "at",
    "type",
    "key",
    "label",
    "value",
    "value_type",
    "v",
    "item_id",
    "category",
    "title",
    "body",
    "decision_id",
    "approval_id",
    "decision",
    "reason",
    "decided_by",
    "decided_at",
    "args_sha256",
    "answer_id",
    "clarification_id",
    "answer",
    "answered_by",
    "answered_at",
    "telegram_user_id",
    "username",
    "since_rev",
    "device",
    "proof",
    "sign_pub",
    "kx_pub",
    "platform",
    "device_id",
]

# Objects shaped like protocol objects, with field names the parsers look for.
shaped = st.recursive(
    json_values,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS), children, max_size=8)
    ),
    max_leaves=40,
)
payload_objects = st.fixed_dictionaries(
    {"kind": st.sampled_from(KINDS), "v": st.sampled_from([1, 1, 2, "1", None]), "body": shaped}
)


def _sealed(plaintext: bytes) -> dict[str, object]:
    return seal(plaintext, sender=AGENT, recipient=DEVICE.card, ts_ms=NOW_MS).to_json()


def _open(raw: object) -> object:
    return open_envelope(
        raw, me=DEVICE, peers={AGENT.id: AGENT.card}, now_ms=NOW_MS, replay=MemoryReplayGuard()
    )


def _only_skald_errors(call: Any, *args: object) -> None:
    with contextlib.suppress(SkaldError):
        call(*args)


VALID_ENVELOPE = _sealed(raw_payload("inbox_request", {"since_rev": None}))


@FUZZ
@given(json_values)
def test_arbitrary_json_values(value: object) -> None:
    _only_skald_errors(parse_envelope, value)
    _only_skald_errors(_open, value)
    _only_skald_errors(parse_payload, json.dumps(value).encode())
    _only_skald_errors(parse_pairing_uri, value)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes(data: bytes) -> None:
    _only_skald_errors(parse_envelope, data)
    _only_skald_errors(_open, data)
    _only_skald_errors(parse_payload, data)
    _only_skald_errors(parse_pairing_uri, data.decode("latin-1"))


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text(text: str) -> None:
    _only_skald_errors(parse_envelope, text)
    _only_skald_errors(parse_pairing_uri, text)
    _only_skald_errors(parse_pairing_uri, "skald-pair:v1?" + text)


@FUZZ
@given(st.dictionaries(st.sampled_from([*sorted(VALID_ENVELOPE), "push"]), json_values))
def test_envelope_with_arbitrary_fields(changes: dict[str, object]) -> None:
    _only_skald_errors(_open, {**VALID_ENVELOPE, **changes})


@FUZZ
@given(payload_objects)
def test_shaped_payloads_parse_or_fail_cleanly(obj: dict[str, object]) -> None:
    _only_skald_errors(parse_payload, json.dumps(obj).encode())


@FUZZ
@given(payload_objects | json_values)
def test_sealed_arbitrary_payloads_open_or_are_refused(obj: object) -> None:
    try:
        _open(_sealed(json.dumps(obj).encode()))
    except EnvelopeRefused as refused:
        assert refused.reason is RefusalReason.BAD_PAYLOAD


@FUZZ
@given(
    st.sampled_from(["relay", "agent", "sign", "kx", "name", "secret"]),
    st.text(max_size=60),
)
def test_pairing_uri_with_one_arbitrary_parameter(name: str, value: str) -> None:
    uri = format_pairing_uri("ws://127.0.0.1:8765/v1/connect", AGENT.card, b"\x05" * 16)
    head, query = uri.split("?", 1)
    pairs = [pair.split("=", 1) for pair in query.split("&")]
    text = head + "?" + "&".join(f"{k}={value if k == name else v}" for k, v in pairs)
    _only_skald_errors(parse_pairing_uri, text)


# -- accepted means usable: whatever parses survives digest, storage and rendering -------------

RENDERER = Renderer()
RENDER_NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)
HOSTILE_TIMES = [
    "9999-12-31T23:59:59-05:00",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "9000-12-31T18:59:59-05:00",
    "2025-11-29T22:00:00+14:00",
    "2025-11-29T10:15:00Z",
    "2025-W01-1T10:00:00Z",
    "yesterday",
    5,
    None,
]
# json.dumps writes a lone surrogate as a \\uXXXX escape, which json.loads accepts.
hostile_text = st.lists(
    st.sampled_from(["\ud800", "\udfff", "\ud83d", "😀", "<b>", "&#95;", "\\_", "**", "ok"])
    | st.text(max_size=6),
    max_size=4,
).map("".join)
hostile_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=8,
)
hostile_times = st.sampled_from(HOSTILE_TIMES)


@st.composite
def hostile_updates(draw: st.DrawFn) -> dict[str, object]:
    """Well-shaped inbox_update payloads with hostile text, values and times inside."""
    blocks = st.fixed_dictionaries(
        {
            "type": st.sampled_from(["key_value", "field", "block", "x"]),
            "label": hostile_text,
            "value": hostile_json,
            "value_type": st.sampled_from(["string", "secret", "markdown", "datetime", "json"]),
        }
    )
    approvals = [
        {
            "id": f"apr_{index}",
            "tool": draw(hostile_text),
            "summary": draw(hostile_text),
            "arguments": draw(hostile_json),
            "blocks": draw(st.lists(blocks, max_size=4)),
            "created_at": draw(hostile_times),
            "expires_at": draw(hostile_times),
        }
        for index in range(draw(st.integers(0, 2)))
    ]
    clarifications = [
        {
            "id": f"clr_{index}",
            "question": draw(hostile_text),
            "options": draw(st.lists(hostile_text, max_size=3)),
            "expires_at": draw(hostile_times),
        }
        for index in range(draw(st.integers(0, 2)))
    ]
    resolved = [
        {"id": "r", "outcome": "expired", "by": draw(hostile_text), "at": draw(hostile_times)}
    ]
    body = {
        "rev": 1,
        "agent": {"name": draw(hostile_text)},
        "approvals": approvals,
        "clarifications": clarifications,
        "resolved": resolved,
    }
    return {"kind": "inbox_update", "v": 1, "body": body}


def _shift_safely(moment: datetime | None) -> None:
    if moment is not None:
        for days in (-7, 0, 7):
            (moment + timedelta(days=days)).timestamp()
        moment.astimezone(UTC)


@FUZZ
@given(hostile_updates())
def test_every_accepted_payload_survives_digest_storage_and_rendering(obj: object) -> None:
    try:
        payload = parse_payload(json.dumps(obj).encode())
    except PayloadError:
        return
    assert isinstance(payload, InboxUpdate)
    encode_payload(payload)
    for approval in payload.approvals:
        args_sha256(approval.arguments)
        json.dumps(item_to_wire(approval), ensure_ascii=False).encode("utf-8")
        _shift_safely(approval.created_at)
        _shift_safely(approval.expires_at)
        RENDERER.title(approval)
        for secrets in ("masked", "spoiler"):
            RENDERER.approval_card(
                approval, agent_name=payload.agent_name, secrets=secrets, now=RENDER_NOW
            )
    for question in payload.clarifications:
        json.dumps(item_to_wire(question), ensure_ascii=False).encode("utf-8")
        _shift_safely(question.expires_at)
        RENDERER.question_card(question, agent_name=payload.agent_name, now=RENDER_NOW)
    for resolved in payload.resolved:
        _shift_safely(resolved.at)


def test_sealed_payload_with_a_lone_surrogate_is_refused_as_bad_payload() -> None:
    body = {"rev": 1, "approvals": [{"id": "a", "tool": "t", "summary": "\ud800"}]}
    refusal = _refusal(_sealed(json.dumps({"kind": "inbox_update", "v": 1, "body": body}).encode()))
    assert refusal.reason is RefusalReason.BAD_PAYLOAD
    assert "lone surrogate" in refusal.detail


# -- explicit hostile cases -------------------------------------------------------------------


def _refusal(raw: object) -> EnvelopeRefused:
    with pytest.raises(EnvelopeRefused) as refused:
        _open(raw)
    return refused.value


def test_ten_thousand_approvals_are_refused_as_bad_payload() -> None:
    approvals = [{"id": f"a{i}", "tool": "t", "summary": "s"} for i in range(10_000)]
    sealed = _sealed(raw_payload("inbox_update", {"rev": 1, "approvals": approvals}))
    refusal = _refusal(sealed)
    assert refusal.reason is RefusalReason.BAD_PAYLOAD
    assert "at most 1000" in refusal.detail


def test_hundred_thousand_deep_nesting() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    assert _refusal(deep).reason is RefusalReason.MALFORMED
    assert _refusal(deep.decode()).reason is RefusalReason.MALFORMED
    assert _refusal(_sealed(deep)).reason is RefusalReason.BAD_PAYLOAD
    with pytest.raises(PayloadError, match="nested deeper"):
        parse_payload(b'{"kind":"inbox_update","v":1,"body":' + b"[" * 100_000)


def test_deep_nesting_inside_a_dict_envelope() -> None:
    value: object = []
    for _ in range(100_000):
        value = [value]
    assert _refusal({**VALID_ENVELOPE, "extra": value}).reason is RefusalReason.MALFORMED


def test_invalid_utf8() -> None:
    assert _refusal(b'{"v": 1, "id": "\xff"}').reason is RefusalReason.MALFORMED
    refusal = _refusal(_sealed(b'{"kind": "notification", "v": 1, "body": "\xc3\x28"}'))
    assert refusal.reason is RefusalReason.BAD_PAYLOAD


def test_two_mebibyte_envelope_is_too_large() -> None:
    huge = {**VALID_ENVELOPE, "ct": b64u_encode(b"\x00" * (3 << 19))}
    assert len(canonical_json(huge)) > 2 * MAX_ENVELOPE_BYTES - 100_000
    assert _refusal(huge).reason is RefusalReason.TOO_LARGE
    assert _refusal(canonical_json(huge)).reason is RefusalReason.TOO_LARGE
    assert _refusal(canonical_json(huge).decode()).reason is RefusalReason.TOO_LARGE


def test_largest_envelope_still_opens() -> None:
    filler = "x" * (MAX_ENVELOPE_BYTES * 3 // 4 - 2000)
    sealed = _sealed(raw_payload("future_kind", filler))
    assert len(canonical_json(sealed)) <= MAX_ENVELOPE_BYTES
    _open(sealed)


@FUZZ
@given(st.binary(max_size=100))
def test_b64u_round_trips(data: bytes) -> None:
    assert b64u_decode(b64u_encode(data)) == data


@FUZZ
@given(
    st.text(
        alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/= ", max_size=12
    )
)
def test_b64u_accepts_only_canonical_text(text: str) -> None:
    try:
        data = b64u_decode(text)
    except ProtocolError:
        return
    assert b64u_encode(data) == text


def test_envelope_size_limit_is_exact() -> None:
    base = len(canonical_json({**VALID_ENVELOPE, "pad": ""}))
    pad = "é" * ((MAX_ENVELOPE_BYTES - base) // 2)  # two bytes each: count bytes, not chars
    pad += "x" * (MAX_ENVELOPE_BYTES - len(canonical_json({**VALID_ENVELOPE, "pad": pad})))
    at_limit = {**VALID_ENVELOPE, "pad": pad}
    assert len(canonical_json(at_limit)) == MAX_ENVELOPE_BYTES
    assert parse_envelope(at_limit).id == VALID_ENVELOPE["id"]
    over = {**VALID_ENVELOPE, "pad": pad + "x"}
    with pytest.raises(EnvelopeRefused) as refused:
        parse_envelope(over)
    assert refused.value.reason is RefusalReason.TOO_LARGE
    assert parse_envelope(canonical_json(at_limit)).id == VALID_ENVELOPE["id"]
    with pytest.raises(EnvelopeRefused):
        parse_envelope(canonical_json(over))
