"""Relay session authentication (protocol §4 steps 3–4): the client signs the relay's
nonce; the relay checks that the id belongs to the key and the signature holds."""

from __future__ import annotations

from bot.errors import ProtocolError
from bot.protocol.encoding import b64u_decode, b64u_encode
from bot.protocol.identity import (
    KEY_BYTES,
    SIGNATURE_BYTES,
    Identity,
    derive_id,
    is_id,
    verify_signature,
)

_AUTH_PREFIX = b"skald-relay-auth-v1"


def auth_message(nonce: bytes) -> bytes:
    """``"skald-relay-auth-v1" 0x00 nonce``: what the client signs."""
    return _AUTH_PREFIX + b"\x00" + nonce


def auth_frame(identity: Identity, nonce: bytes) -> dict[str, str]:
    """The client's answer to a challenge."""
    return {
        "type": "auth",
        "id": identity.id,
        "sign_pub": b64u_encode(identity.card.sign_pub),
        "sig": b64u_encode(identity.sign(auth_message(nonce))),
    }


def verify_auth_frame(frame: object, nonce: bytes) -> str:
    """Relay side: return the id the frame proves, or raise :class:`ProtocolError`."""
    if not isinstance(frame, dict) or frame.get("type") != "auth":
        raise ProtocolError("expected an auth frame")
    client_id = frame.get("id")
    if not is_id(client_id):
        raise ProtocolError("auth: id must be 32 lowercase hex characters")
    sign_pub = _b64u_field(frame, "sign_pub", KEY_BYTES)
    sig = _b64u_field(frame, "sig", SIGNATURE_BYTES)
    if derive_id(sign_pub) != client_id:
        raise ProtocolError("auth: id does not match sign_pub")
    if not verify_signature(sign_pub, sig, auth_message(nonce)):
        raise ProtocolError("auth: signature does not verify")
    return str(client_id)


def _b64u_field(frame: dict[str, object], name: str, size: int) -> bytes:
    value = frame.get(name)
    if not isinstance(value, str):
        raise ProtocolError(f"auth: {name} must be a base64url string")
    data = b64u_decode(value)
    if len(data) != size:
        raise ProtocolError(f"auth: {name} must be {size} bytes")
    return data
