"""Pairing (protocol §5): the pairing URI, the proof and the pair_request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.errors import PairingError
from bot.protocol.encoding import b64u_decode, b64u_encode
from bot.protocol.identity import Identity
from bot.protocol.pairing import (
    PairingUri,
    build_pair_request,
    format_pairing_uri,
    pairing_proof,
    parse_pairing_uri,
    verify_pair_request,
)
from bot.protocol.payloads import DeviceCard, PairRequest, encode_payload

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "vectors.json").read_text(encoding="utf-8")
)
URI: str = VECTORS["pairing"]["uri"]
SECRET = b64u_decode(VECTORS["pairing"]["secret"])


def _identity(name: str) -> Identity:
    entry = VECTORS["identities"][name]
    return Identity.from_seeds(
        b64u_decode(entry["sign_seed"]), b64u_decode(entry["kx_seed"]), entry["name"]
    )


AGENT = _identity("agent")
DEVICE = _identity("device")


def test_vector_uri_parses_to_the_agent_card() -> None:
    uri = parse_pairing_uri(URI)
    assert uri == PairingUri(
        relay="ws://127.0.0.1:8765/v1/connect", agent=AGENT.card, secret=SECRET
    )


def test_format_reproduces_the_vector_uri() -> None:
    assert format_pairing_uri("ws://127.0.0.1:8765/v1/connect", AGENT.card, SECRET) == URI


def test_uri_round_trips_awkward_names_and_relays() -> None:
    card = AGENT.with_name("Ada's bot & co = 100% ✓ + more").card
    relay = "wss://relay.example.com:443/v1/connect?x=1&y=2"
    uri = parse_pairing_uri(format_pairing_uri(relay, card, SECRET))
    assert (uri.relay, uri.agent, uri.secret) == (relay, card, SECRET)


def test_surrounding_whitespace_is_forgiven() -> None:
    assert parse_pairing_uri(f"  {URI}\n").agent == AGENT.card


def _replace(name: str, value: str | None) -> str:
    head, query = URI.split("?", 1)
    pairs = [p.split("=", 1) for p in query.split("&")]
    kept = [(k, value if k == name else v) for k, v in pairs if k != name or value is not None]
    return head + "?" + "&".join(f"{k}={v}" for k, v in kept)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("https://example.com", "must start with skald-pair:v1"),
        ("", "must start with skald-pair:v1"),
        (URI.replace("skald-pair:v1", "skald-pair:v2"), "unsupported pairing URI version"),
        (URI.replace("skald-pair:v1?", "skald-pair:v1"), "unsupported pairing URI version"),
        (_replace("relay", None), "missing parameter relay"),
        (_replace("agent", None), "missing parameter agent"),
        (_replace("sign", None), "missing parameter sign"),
        (_replace("kx", None), "missing parameter kx"),
        (_replace("name", None), "missing parameter name"),
        (_replace("secret", None), "missing parameter secret"),
        (URI + "&secret=AAAA", "secret given twice"),
        (_replace("relay", "http%3A%2F%2Fexample.com"), "ws:// or wss://"),
        (_replace("relay", "ws%3A%2F%2F"), "no host"),
        (_replace("relay", "ws%3A%2F%2Fhost%3Anotaport"), "not a valid URL"),
        (_replace("agent", "3A076396B1419969BEB853B1023B906E"), "agent must be 32 lowercase hex"),
        (_replace("agent", "0" * 32), "does not match its signing key"),
        (_replace("sign", "not-base64!"), "sign is not base64url"),
        (_replace("sign", b64u_encode(b"\x01" * 31)), "sign must be 32 bytes"),
        (_replace("kx", "AAAA"), "kx must be 32 bytes"),
        (_replace("secret", b64u_encode(b"\x01" * 15)), "secret must be 16 bytes"),
        (_replace("secret", "tBvuYF4xq5bxGxayHAXO2g%3D%3D"), "secret is not base64url"),
        (_replace("name", "%FF"), "unreadable parameters"),
        (URI + "&x=" + "a" * 5000, "longer than"),
    ],
)
def test_uri_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(PairingError, match=message):
        parse_pairing_uri(text)


def test_uri_repr_shows_no_secret() -> None:
    uri = parse_pairing_uri(URI)
    shown = repr(uri)
    assert repr(SECRET) not in shown and VECTORS["pairing"]["secret"] not in shown
    assert "secret" not in shown and uri.agent.id in shown


def test_non_text_uri_is_refused() -> None:
    with pytest.raises(PairingError):
        parse_pairing_uri(None)  # type: ignore[arg-type]


def test_pair_request_matches_the_vector() -> None:
    uri = parse_pairing_uri(URI)
    request = build_pair_request(DEVICE, uri, device_name=DEVICE.name)
    vector = next(v for v in VECTORS["open"] if v["payload"]["kind"] == "pair_request")
    assert json.loads(encode_payload(request)) == vector["payload"]
    assert request.proof == VECTORS["pairing"]["proof"]


def test_agent_verifies_a_good_pair_request() -> None:
    request = build_pair_request(DEVICE, parse_pairing_uri(URI), device_name="Telegram @x")
    card = verify_pair_request(request, secret=SECRET, agent_id=AGENT.id)
    assert card.id == DEVICE.id and card.kx_pub == DEVICE.card.kx_pub
    assert card.name == "Telegram @x"


def _request_with(**changes: str) -> PairRequest:
    request = build_pair_request(DEVICE, parse_pairing_uri(URI), device_name="d")
    device = {**request.device.__dict__, **{k: v for k, v in changes.items() if k != "proof"}}
    return PairRequest(device=DeviceCard(**device), proof=changes.get("proof", request.proof))


@pytest.mark.parametrize(
    ("request_", "secret", "agent_id", "message"),
    [
        (_request_with(), b"\x00" * 16, AGENT.id, "proof does not match"),
        (_request_with(), SECRET, "0" * 32, "proof does not match"),
        (_request_with(proof="!!"), SECRET, AGENT.id, "proof is not base64url"),
        (_request_with(proof=b64u_encode(b"\x00" * 32)), SECRET, AGENT.id, "proof does not"),
        (_request_with(id="0" * 32), SECRET, AGENT.id, "id does not match"),
        (
            _request_with(sign_pub=b64u_encode(AGENT.card.sign_pub)),
            SECRET,
            AGENT.id,
            "id does not match",
        ),
        (_request_with(kx_pub="AAAA"), SECRET, AGENT.id, "kx_pub must be 32 bytes"),
    ],
)
def test_agent_refuses_a_bad_pair_request(
    request_: PairRequest, secret: bytes, agent_id: str, message: str
) -> None:
    with pytest.raises(PairingError, match=message):
        verify_pair_request(request_, secret=secret, agent_id=agent_id)


def test_proof_binds_device_and_agent() -> None:
    proof = pairing_proof(SECRET, DEVICE.id, AGENT.id)
    assert proof != pairing_proof(SECRET, AGENT.id, DEVICE.id)
    assert len(b64u_decode(proof)) == 32
