"""The protocol's test vectors (tests/data/vectors.json): every `open` envelope opens to
exactly its payload, every `reject` envelope is refused for its own reason, and the
examples match byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from bot.errors import EnvelopeRefused, RefusalReason
from bot.protocol.encoding import args_sha256, b64u_decode, b64u_encode, canonical_json
from bot.protocol.envelope import (
    MAX_FUTURE_SKEW_MS,
    Envelope,
    build_info,
    open_envelope,
    parse_envelope,
    seal,
)
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import pairing_proof
from bot.protocol.payloads import (
    ApprovalDecision,
    InboxUpdate,
    PairRequest,
    UnknownPayload,
    encode_payload,
    parse_payload,
)
from bot.protocol.relayauth import auth_frame, verify_auth_frame
from bot.protocol.replay import MAX_AGE_MS, RETENTION_MS
from bot.testing.replay import MemoryReplayGuard

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "vectors.json").read_text(encoding="utf-8")
)

IDENTITIES = {
    name: Identity.from_seeds(
        b64u_decode(entry["sign_seed"]), b64u_decode(entry["kx_seed"]), entry["name"]
    )
    for name, entry in VECTORS["identities"].items()
}
AGENT = IDENTITIES["agent"]
DEVICE = IDENTITIES["device"]
STRANGER = IDENTITIES["stranger"]

# The agent is the device's only peer; the device is the agent's only peer.
PEERS = {"device": {AGENT.id: AGENT.card}, "agent": {DEVICE.id: DEVICE.card}}

# Why each reject vector must be refused: the first §2 rule it breaks.
REJECT_REASONS = {
    "ciphertext bit flipped": RefusalReason.BAD_SIGNATURE,
    "signature bit flipped": RefusalReason.BAD_SIGNATURE,
    "header ts changed after sealing": RefusalReason.BAD_SIGNATURE,
    "header id changed after sealing": RefusalReason.BAD_SIGNATURE,
    "addressed to someone else": RefusalReason.NOT_FOR_ME,
    "unknown envelope version": RefusalReason.BAD_VERSION,
    "truncated ciphertext": RefusalReason.MALFORMED,
    "ciphertext not base64url": RefusalReason.MALFORMED,
    "signature missing": RefusalReason.MALFORMED,
    "ts is a string": RefusalReason.MALFORMED,
    "sealed and signed by a stranger who is not a peer": RefusalReason.UNKNOWN_SENDER,
    "timestamp far in the future (year 2100)": RefusalReason.FROM_FUTURE,
    # The stranger sealed it to the agent and signed it; only the headers were rewritten,
    # so the agent's key does not verify the signature.
    "sealed to another key, headers rewritten to look right": RefusalReason.BAD_SIGNATURE,
}

VECTOR_NOW_MS = max(v["envelope"]["ts"] for v in VECTORS["open"])


def _open(vector: dict[str, Any], *, now_ms: int | None = None, replay: Any = None) -> Any:
    recipient = vector["recipient"]
    is_pairing = vector["payload"]["kind"] == "pair_request" if "payload" in vector else False
    return open_envelope(
        vector["envelope"],
        me=IDENTITIES[recipient],
        peers={} if is_pairing else PEERS[recipient],
        now_ms=VECTOR_NOW_MS if now_ms is None else now_ms,
        replay=replay if replay is not None else MemoryReplayGuard(),
        accept_pair_requests=is_pairing,
    )


def test_identities_match_their_public_cards() -> None:
    for name, entry in VECTORS["identities"].items():
        identity = IDENTITIES[name]
        assert identity.card.to_json() == {
            key: entry[key] for key in ("id", "sign_pub", "kx_pub", "name")
        }
        assert identity.to_private_json() == {
            key: entry[key] for key in ("id", "name", "sign_seed", "kx_seed")
        }


@pytest.mark.parametrize("vector", VECTORS["open"], ids=lambda v: v["note"])
def test_open_vector_opens_to_exactly_its_payload(vector: dict[str, Any]) -> None:
    opened = _open(vector)
    assert json.loads(opened.plaintext) == vector["payload"]
    assert opened.payload == parse_payload(canonical_json(vector["payload"]))
    assert opened.envelope.to_json() == vector["envelope"]
    sender_id = vector["envelope"]["from"]
    assert opened.sender.id == sender_id


@pytest.mark.parametrize("vector", VECTORS["open"], ids=lambda v: v["note"])
def test_second_open_of_the_same_envelope_is_a_replay(vector: dict[str, Any]) -> None:
    replay = MemoryReplayGuard()
    opened = _open(vector, replay=replay)
    replay.remember(opened.envelope.id, opened.envelope.ts)
    with pytest.raises(EnvelopeRefused) as refused:
        _open(vector, replay=replay)
    assert refused.value.reason is RefusalReason.REPLAY


def test_opening_does_not_record_the_replay_set() -> None:
    replay = MemoryReplayGuard()
    vector = VECTORS["open"][0]
    _open(vector, replay=replay)
    assert not replay.seen(vector["envelope"]["id"])
    _open(vector, replay=replay)  # a crash before recording must not lose the envelope


@pytest.mark.parametrize("vector", VECTORS["reject"], ids=lambda v: v["note"])
def test_reject_vector_is_refused_for_its_reason(vector: dict[str, Any]) -> None:
    with pytest.raises(EnvelopeRefused) as refused:
        _open(vector)
    assert refused.value.reason is REJECT_REASONS[vector["note"]]


def test_every_reject_vector_has_an_expected_reason() -> None:
    assert {v["note"] for v in VECTORS["reject"]} == set(REJECT_REASONS)


def test_future_skew_limit_is_five_minutes_relative_to_the_envelope() -> None:
    vector = VECTORS["open"][0]
    ts = vector["envelope"]["ts"]
    _open(vector, now_ms=ts - MAX_FUTURE_SKEW_MS)
    with pytest.raises(EnvelopeRefused) as refused:
        _open(vector, now_ms=ts - MAX_FUTURE_SKEW_MS - 1)
    assert refused.value.reason is RefusalReason.FROM_FUTURE


def test_envelope_older_than_the_replay_set_remembers_is_stale() -> None:
    vector = VECTORS["open"][0]
    ts = vector["envelope"]["ts"]
    _open(vector, now_ms=ts + MAX_AGE_MS)
    with pytest.raises(EnvelopeRefused) as refused:
        _open(vector, now_ms=ts + MAX_AGE_MS + 1)
    assert refused.value.reason is RefusalReason.STALE


@pytest.mark.parametrize("skew_ms", [0, MAX_FUTURE_SKEW_MS])
def test_envelope_cannot_be_replayed_once_its_id_is_forgotten(skew_ms: int) -> None:
    # Accepted while its ts was up to 5 minutes ahead; remembered under the time it was
    # seen (as the store does), then forgotten after the retention.
    vector = VECTORS["open"][0]
    seen_at = vector["envelope"]["ts"] - skew_ms
    replay = MemoryReplayGuard()
    opened = _open(vector, now_ms=seen_at, replay=replay)
    replay.remember(opened.envelope.id, seen_at)
    later = seen_at + RETENTION_MS + 1
    assert replay.forget_expired(later) == 1
    with pytest.raises(EnvelopeRefused) as refused:
        _open(vector, now_ms=later, replay=replay)
    assert refused.value.reason is RefusalReason.STALE


def test_opened_repr_shows_no_decrypted_content() -> None:
    opened = _open(VECTORS["open"][0])
    shown = repr(opened)
    assert "payload=" not in shown and "apr_email_1" not in shown
    assert opened.envelope.id in shown


def test_year_2100_envelope_is_only_refused_for_its_time() -> None:
    vector = next(v for v in VECTORS["reject"] if "2100" in v["note"])
    opened = _open(vector, now_ms=vector["envelope"]["ts"])
    assert opened.sender == AGENT.card


def test_pair_request_vector_gives_the_device_card() -> None:
    vector = next(v for v in VECTORS["open"] if v["payload"]["kind"] == "pair_request")
    opened = _open(vector)
    assert isinstance(opened.payload, PairRequest)
    assert opened.sender == DEVICE.card


def test_unknown_kind_opens_as_unknown_payload() -> None:
    vector = next(v for v in VECTORS["open"] if v["payload"]["kind"] == "hologram_sync")
    assert _open(vector).payload == UnknownPayload("hologram_sync")


def test_first_inbox_update_reads_as_the_spec_describes() -> None:
    update = _open(VECTORS["open"][0]).payload
    assert isinstance(update, InboxUpdate)
    assert (update.rev, update.agent_name) == (1, "build-bot")
    email, write, everything, raw, bare = update.approvals
    assert [b.label for b in email.blocks] == ["Email-To", "Subject", "Body"]
    assert [b.value_type for b in everything.blocks][-1] == "hologram"
    assert everything.blocks[9].value == {
        "replicas": 3,
        "image": "web:1.2.3",
        "env": {"DEBUG": False},
    }
    assert everything.blocks[10].value == 3
    assert raw.blocks == () and raw.arguments == {"flag": True, "count": 2}
    assert [b.label for b in bare.blocks] == ["URL"]
    assert email.expires_at is not None and write.expires_at is None
    (question,) = update.clarifications
    assert question.options == ("staging", "production")
    assert question.expires_at is None


def test_info_example_matches_byte_for_byte() -> None:
    example = VECTORS["info_example"]
    info = build_info(example["id"], example["from"], example["to"], example["ts"])
    assert b64u_encode(info) == example["info_b64u"]


def test_relay_auth_signature_matches_byte_for_byte() -> None:
    example = VECTORS["relay_auth"]
    identity = IDENTITIES[example["identity"]]
    nonce = b64u_decode(example["nonce"])
    frame = auth_frame(identity, nonce)
    assert frame["sig"] == example["sig"]
    assert verify_auth_frame(frame, nonce) == identity.id


def test_pairing_proof_matches_byte_for_byte() -> None:
    example = VECTORS["pairing"]
    proof = pairing_proof(b64u_decode(example["secret"]), example["device_id"], example["agent_id"])
    assert proof == example["proof"]


@pytest.mark.parametrize("example", VECTORS["args_digest"], ids=lambda e: e["args_sha256"])
def test_args_digest_matches(example: dict[str, Any]) -> None:
    assert args_sha256(example["arguments"]) == example["args_sha256"]


def test_decision_digest_in_the_vector_binds_the_first_approval() -> None:
    decision = _open(VECTORS["open"][5]).payload
    update = _open(VECTORS["open"][0]).payload
    assert isinstance(decision, ApprovalDecision) and isinstance(update, InboxUpdate)
    assert decision.args_sha256 == args_sha256(update.approvals[0].arguments)


def _independent_open(envelope: dict[str, Any], me: Identity, sender: PublicCard) -> bytes:
    """Open with the primitives directly, following protocol §2 word by word."""
    info = b"\x00".join(
        [b"skald-e2e-v1"] + [str(envelope[k]).encode() for k in ("id", "from", "to", "ts")]
    )
    ct = b64u_decode(envelope["ct"])
    Ed25519PublicKey.from_public_bytes(sender.sign_pub).verify(
        b64u_decode(envelope["sig"]), info + b"\x00" + ct
    )
    suite = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.CHACHA20_POLY1305)
    return suite.decrypt(ct, me.kx_key, info=info)


@pytest.mark.parametrize("vector", VECTORS["open"], ids=lambda v: v["note"])
def test_envelopes_sealed_here_open_under_the_vector_keys(vector: dict[str, Any]) -> None:
    sender = IDENTITIES["device" if vector["recipient"] == "agent" else "agent"]
    recipient = IDENTITIES[vector["recipient"]]
    payload = parse_payload(canonical_json(vector["payload"]))
    plaintext = encode_payload(payload)
    envelope = seal(plaintext, sender=sender, recipient=recipient.card, ts_ms=VECTOR_NOW_MS)
    wire = json.loads(canonical_json(envelope.to_json()))
    assert _independent_open(wire, recipient, sender.card) == plaintext
    opened = open_envelope(
        wire,
        me=recipient,
        peers={sender.id: sender.card},
        now_ms=VECTOR_NOW_MS,
        replay=MemoryReplayGuard(),
    )
    assert opened.payload == payload
    assert parse_envelope(canonical_json(envelope.to_json())) == envelope


# Rules the vectors do not reach, exercised with envelopes sealed under the vector keys.


def _device_opens(envelope: Any, *, replay: MemoryReplayGuard | None = None) -> Any:
    return open_envelope(
        envelope.to_json(),
        me=DEVICE,
        peers=PEERS["device"],
        now_ms=VECTOR_NOW_MS,
        replay=replay or MemoryReplayGuard(),
    )


def _refusal(call: Any) -> EnvelopeRefused:
    with pytest.raises(EnvelopeRefused) as refused:
        call()
    return refused.value


def test_signed_by_the_peer_but_sealed_to_another_key_fails_to_decrypt() -> None:
    wrong_key = PublicCard(
        id=DEVICE.id, sign_pub=DEVICE.card.sign_pub, kx_pub=STRANGER.card.kx_pub, name="device"
    )
    envelope = seal(b"{}", sender=AGENT, recipient=wrong_key, ts_ms=VECTOR_NOW_MS)
    refusal = _refusal(lambda: _device_opens(envelope))
    assert refusal.reason is RefusalReason.DECRYPT_FAILED


def test_bad_payload_is_refused_without_plaintext_in_the_detail() -> None:
    secret = "SECRET-PLAINTEXT-42"
    bodies = [
        secret.encode(),
        json.dumps({"kind": "inbox_update", "v": 1, "body": {"rev": secret}}).encode(),
        json.dumps([secret]).encode(),
        b"\xff" + secret.encode(),
    ]
    for body in bodies:
        envelope = seal(body, sender=AGENT, recipient=DEVICE.card, ts_ms=VECTOR_NOW_MS)
        refusal = _refusal(lambda envelope=envelope: _device_opens(envelope))
        assert refusal.reason is RefusalReason.BAD_PAYLOAD
        assert secret not in str(refusal)


def test_pairing_side_refuses_a_stranger_that_does_not_ask_to_pair() -> None:
    envelope = seal(
        encode_payload(UnknownPayload("hello")),
        sender=STRANGER,
        recipient=AGENT.card,
        ts_ms=VECTOR_NOW_MS,
    )
    refusal = _refusal(
        lambda: open_envelope(
            envelope.to_json(),
            me=AGENT,
            peers={},
            now_ms=VECTOR_NOW_MS,
            replay=MemoryReplayGuard(),
            accept_pair_requests=True,
        )
    )
    assert refusal.reason is RefusalReason.UNKNOWN_SENDER


def _pair_request_body() -> bytes:
    vector = next(v for v in VECTORS["open"] if v["payload"]["kind"] == "pair_request")
    return canonical_json(vector["payload"])


def test_pair_request_for_another_device_id_is_refused() -> None:
    # The stranger forwards the device's pair_request under its own id.
    envelope = seal(
        _pair_request_body(), sender=STRANGER, recipient=AGENT.card, ts_ms=VECTOR_NOW_MS
    )
    refusal = _refusal(
        lambda: open_envelope(
            envelope.to_json(),
            me=AGENT,
            peers={},
            now_ms=VECTOR_NOW_MS,
            replay=MemoryReplayGuard(),
            accept_pair_requests=True,
        )
    )
    assert refusal.reason is RefusalReason.UNKNOWN_SENDER


def test_pair_request_signed_by_another_key_is_refused() -> None:
    # The stranger claims the device's id and card, seals correctly, but cannot sign
    # with the device's key.
    envelope_id = "1" * 32
    info = build_info(envelope_id, DEVICE.id, AGENT.id, VECTOR_NOW_MS)
    suite = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.CHACHA20_POLY1305)
    ct = suite.encrypt(_pair_request_body(), AGENT.kx_key.public_key(), info=info)
    forged = Envelope(
        id=envelope_id,
        sender=DEVICE.id,
        recipient=AGENT.id,
        ts=VECTOR_NOW_MS,
        ct=ct,
        sig=STRANGER.sign(info + b"\x00" + ct),
    )
    refusal = _refusal(
        lambda: open_envelope(
            forged.to_json(),
            me=AGENT,
            peers={},
            now_ms=VECTOR_NOW_MS,
            replay=MemoryReplayGuard(),
            accept_pair_requests=True,
        )
    )
    assert refusal.reason is RefusalReason.BAD_SIGNATURE


def test_pair_requests_are_refused_when_not_accepted() -> None:
    envelope = seal(_pair_request_body(), sender=DEVICE, recipient=AGENT.card, ts_ms=VECTOR_NOW_MS)
    refusal = _refusal(
        lambda: open_envelope(
            envelope.to_json(), me=AGENT, peers={}, now_ms=VECTOR_NOW_MS, replay=MemoryReplayGuard()
        )
    )
    assert refusal.reason is RefusalReason.UNKNOWN_SENDER


def test_push_is_sealed_kept_and_limited() -> None:
    push = encode_payload(parse_payload(canonical_json(VECTORS["open"][2]["payload"])))
    envelope = seal(b"{}", sender=AGENT, recipient=DEVICE.card, ts_ms=1, push=push)
    assert envelope.push is not None
    assert parse_envelope(envelope.to_json()) == envelope
    push_info = build_info(f"{envelope.id}.push", AGENT.id, DEVICE.id, 1)
    suite = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.CHACHA20_POLY1305)
    assert suite.decrypt(b64u_decode(envelope.push), DEVICE.kx_key, info=push_info) == push
    too_long = {**envelope.to_json(), "push": "A" * 3504}
    assert _refusal(lambda: parse_envelope(too_long)).reason is RefusalReason.MALFORMED


def test_explicit_envelope_id_is_used_and_checked() -> None:
    envelope = seal(b"{}", sender=AGENT, recipient=DEVICE.card, ts_ms=1, envelope_id="0" * 32)
    assert envelope.id == "0" * 32
    random_ids = {seal(b"{}", sender=AGENT, recipient=DEVICE.card, ts_ms=1).id for _ in range(3)}
    assert len(random_ids) == 3


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"v": True}, RefusalReason.MALFORMED),
        ({"v": "1"}, RefusalReason.MALFORMED),
        ({"v": 0}, RefusalReason.BAD_VERSION),
        ({"id": "A" * 32}, RefusalReason.MALFORMED),
        ({"from": "ab"}, RefusalReason.MALFORMED),
        ({"to": None}, RefusalReason.MALFORMED),
        ({"ts": -1}, RefusalReason.MALFORMED),
        ({"ts": True}, RefusalReason.MALFORMED),
        ({"ts": 1.5}, RefusalReason.MALFORMED),
        ({"ts": 1 << 63}, RefusalReason.MALFORMED),
        ({"sig": b64u_encode(b"\x00" * 63)}, RefusalReason.MALFORMED),
        ({"ct": "AAAA="}, RefusalReason.MALFORMED),
        ({"push": 5}, RefusalReason.MALFORMED),
        ({"padding": "x" * (1 << 20)}, RefusalReason.TOO_LARGE),
    ],
)
def test_parse_envelope_refuses_each_malformed_field(
    change: dict[str, Any], reason: RefusalReason
) -> None:
    raw = {**VECTORS["open"][0]["envelope"], **change}
    assert _refusal(lambda: parse_envelope(raw)).reason is reason


def test_parse_envelope_reads_text_and_bytes_and_measures_them() -> None:
    raw = VECTORS["open"][0]["envelope"]
    text = json.dumps(raw)
    assert parse_envelope(text) == parse_envelope(text.encode()) == parse_envelope(raw)
    padded = text[:-1] + " " * (1 << 20) + "}"
    assert _refusal(lambda: parse_envelope(padded)).reason is RefusalReason.TOO_LARGE
    assert _refusal(lambda: parse_envelope(b"[1]")).reason is RefusalReason.MALFORMED
    assert _refusal(lambda: parse_envelope(42)).reason is RefusalReason.MALFORMED
