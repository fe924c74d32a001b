"""Identities, public cards, base64url and relay authentication (protocol §1, §4)."""

from __future__ import annotations

import hashlib

import pytest

from bot.errors import IdentityError, ProtocolError
from bot.protocol.encoding import b64u_decode, b64u_encode
from bot.protocol.identity import Identity, PublicCard, derive_id, verify_signature
from bot.protocol.relayauth import auth_frame, auth_message, verify_auth_frame

SIGN_SEED = bytes(range(32))
KX_SEED = bytes(range(32, 64))


@pytest.fixture
def identity() -> Identity:
    return Identity.from_seeds(SIGN_SEED, KX_SEED, "Ada's bot")


def test_b64u_round_trips_without_padding() -> None:
    for size in range(0, 40):
        data = bytes(range(size))
        text = b64u_encode(data)
        assert "=" not in text and "+" not in text and "/" not in text
        assert b64u_decode(text) == data


@pytest.mark.parametrize(
    "text",
    ["AA==", "A", "AB+/", "AB C", "ABC\n", "AB*_", "AAé", "ABD"],
)
def test_b64u_decode_is_strict(text: str) -> None:
    with pytest.raises(ProtocolError):
        b64u_decode(text)


@pytest.mark.parametrize("value", [None, 5, b"AAAA", ["AA"]])
def test_b64u_decode_refuses_non_strings(value: object) -> None:
    with pytest.raises(ProtocolError):
        b64u_decode(value)  # type: ignore[arg-type]


def test_id_is_first_16_bytes_of_sha256_in_hex() -> None:
    key = b"\x01" * 32
    assert derive_id(key) == hashlib.sha256(key).hexdigest()[:32]


def test_identity_is_deterministic_from_seeds(identity: Identity) -> None:
    again = Identity.from_seeds(SIGN_SEED, KX_SEED, "other name")
    assert again.id == identity.id
    assert again.card.kx_pub == identity.card.kx_pub
    assert identity.id == derive_id(identity.card.sign_pub)
    assert identity.card.name == "Ada's bot"


def test_generated_identities_differ() -> None:
    assert Identity.generate("a").id != Identity.generate("a").id


def test_repr_shows_no_key_material(identity: Identity) -> None:
    text = repr(identity) + str(identity)
    private = identity.to_private_json()
    for secret in (
        private["sign_seed"],
        private["kx_seed"],
        SIGN_SEED.hex(),
        KX_SEED.hex(),
        repr(SIGN_SEED),
        repr(KX_SEED),
    ):
        assert secret not in text
    assert identity.id in text


def test_private_json_round_trips(identity: Identity) -> None:
    private = identity.to_private_json()
    assert set(private) == {"id", "name", "sign_seed", "kx_seed"}
    assert b64u_decode(private["sign_seed"]) == SIGN_SEED
    restored = Identity.from_private_json(private)
    assert restored == identity and restored.name == identity.name


@pytest.mark.parametrize(
    "broken",
    [
        None,
        [],
        {"name": "x"},
        {"name": 5, "sign_seed": b64u_encode(SIGN_SEED), "kx_seed": b64u_encode(KX_SEED)},
        {"name": "x", "sign_seed": "not b64!", "kx_seed": b64u_encode(KX_SEED)},
        {"name": "x", "sign_seed": b64u_encode(b"short"), "kx_seed": b64u_encode(KX_SEED)},
        {"name": "x", "sign_seed": b64u_encode(SIGN_SEED), "kx_seed": 7},
        {
            "name": "x",
            "sign_seed": b64u_encode(SIGN_SEED),
            "kx_seed": b64u_encode(KX_SEED),
            "id": "0" * 32,
        },
    ],
)
def test_from_private_json_refuses_bad_shapes(broken: object) -> None:
    with pytest.raises(IdentityError):
        Identity.from_private_json(broken)


def test_with_name_keeps_the_keys(identity: Identity) -> None:
    renamed = identity.with_name("new")
    assert renamed.name == renamed.card.name == "new"
    assert renamed.id == identity.id


def test_signatures_verify_only_for_the_right_key_and_data(identity: Identity) -> None:
    sig = identity.sign(b"data")
    pub = identity.card.sign_pub
    assert verify_signature(pub, sig, b"data")
    assert not verify_signature(pub, sig, b"Data")
    assert not verify_signature(Identity.generate("x").card.sign_pub, sig, b"data")
    assert not verify_signature(pub[:31], sig, b"data")
    assert not verify_signature(pub, sig[:63], b"data")


def test_public_card_round_trips(identity: Identity) -> None:
    card = identity.card
    assert PublicCard.from_json(card.to_json()) == card


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": "0" * 32}, "does not match"),
        ({"id": "ABC"}, "id must be"),
        ({"sign_pub": b64u_encode(b"\x00" * 31)}, "sign_pub must be 32 bytes"),
        ({"kx_pub": "!!"}, "kx_pub is not base64url"),
        ({"kx_pub": None}, "kx_pub must be"),
        ({"name": 3}, "name must be"),
    ],
)
def test_public_card_from_json_explains_what_is_wrong(
    identity: Identity, change: dict[str, object], message: str
) -> None:
    with pytest.raises(ProtocolError, match=message):
        PublicCard.from_json({**identity.card.to_json(), **change})


def test_public_card_must_be_an_object() -> None:
    with pytest.raises(ProtocolError):
        PublicCard.from_json(["id"])


def test_relay_auth_frame_verifies(identity: Identity) -> None:
    nonce = b"\x07" * 32
    frame = auth_frame(identity, nonce)
    assert frame["type"] == "auth" and frame["id"] == identity.id
    assert verify_signature(identity.card.sign_pub, b64u_decode(frame["sig"]), auth_message(nonce))
    assert verify_auth_frame(frame, nonce) == identity.id


@pytest.mark.parametrize(
    "tamper",
    [
        lambda f: {**f, "id": derive_id(b"\x00" * 32)},
        lambda f: {**f, "sign_pub": b64u_encode(Identity.generate("x").card.sign_pub)},
        lambda f: {**f, "sig": b64u_encode(b"\x00" * 64)},
        lambda f: {**f, "sig": "short"},
        lambda f: {**f, "type": "hello"},
        lambda f: {k: v for k, v in f.items() if k != "sign_pub"},
        lambda f: [f],
    ],
)
def test_relay_auth_refuses_tampered_frames(identity: Identity, tamper: object) -> None:
    nonce = b"\x07" * 32
    frame = tamper(auth_frame(identity, nonce))  # type: ignore[operator]
    with pytest.raises(ProtocolError):
        verify_auth_frame(frame, nonce)


def test_relay_auth_refuses_another_nonce(identity: Identity) -> None:
    frame = auth_frame(identity, b"\x07" * 32)
    with pytest.raises(ProtocolError, match="signature"):
        verify_auth_frame(frame, b"\x08" * 32)
