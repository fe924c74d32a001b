"""Identities (protocol §1): an Ed25519 signing key, an X25519 exchange key, and the id
and public card derived from them."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bot.errors import IdentityError, ProtocolError
from bot.protocol.encoding import b64u_decode, b64u_encode

KEY_BYTES = 32
SIGNATURE_BYTES = 64
ID_HEX_CHARS = 32
_ID = re.compile(f"[0-9a-f]{{{ID_HEX_CHARS}}}")


def derive_id(sign_pub: bytes) -> str:
    """A party's id: the first 16 bytes of SHA-256 of its Ed25519 public key, in hex."""
    return hashlib.sha256(sign_pub).digest()[:16].hex()


def is_id(value: object) -> bool:
    """Whether ``value`` is an id as written on the wire: 32 lowercase hex characters."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


@dataclass(frozen=True)
class PublicCard:
    """What a party shows the world: ``{"id", "sign_pub", "kx_pub", "name"}``."""

    id: str
    sign_pub: bytes
    kx_pub: bytes
    name: str

    def to_json(self) -> dict[str, str]:
        return {
            "id": self.id,
            "sign_pub": b64u_encode(self.sign_pub),
            "kx_pub": b64u_encode(self.kx_pub),
            "name": self.name,
        }

    @classmethod
    def from_json(cls, obj: object) -> PublicCard:
        """Read a card, checking key lengths and that ``id`` belongs to ``sign_pub``."""
        if not isinstance(obj, dict):
            raise ProtocolError("a public card must be a JSON object")
        card_id = obj.get("id")
        name = obj.get("name")
        if not is_id(card_id):
            raise ProtocolError("public card: id must be 32 lowercase hex characters")
        if not isinstance(name, str):
            raise ProtocolError("public card: name must be a string")
        sign_pub = _key_field(obj, "sign_pub")
        kx_pub = _key_field(obj, "kx_pub")
        if derive_id(sign_pub) != card_id:
            raise ProtocolError("public card: id does not match sign_pub")
        return cls(id=str(card_id), sign_pub=sign_pub, kx_pub=kx_pub, name=name)


def _key_field(obj: dict[str, object], name: str) -> bytes:
    value = obj.get(name)
    if not isinstance(value, str):
        raise ProtocolError(f"public card: {name} must be a base64url string")
    try:
        key = b64u_decode(value)
    except ProtocolError as exc:
        raise ProtocolError(f"public card: {name} is not base64url") from exc
    if len(key) != KEY_BYTES:
        raise ProtocolError(f"public card: {name} must be {KEY_BYTES} bytes, got {len(key)}")
    return key


@dataclass(frozen=True)
class Identity:
    """A party's private keys and name. Its repr never shows key material."""

    sign_key: Ed25519PrivateKey = field(repr=False, compare=False)
    kx_key: X25519PrivateKey = field(repr=False, compare=False)
    name: str = field(compare=False)
    card: PublicCard = field(init=False)

    def __post_init__(self) -> None:
        sign_pub = self.sign_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        kx_pub = self.kx_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        card = PublicCard(id=derive_id(sign_pub), sign_pub=sign_pub, kx_pub=kx_pub, name=self.name)
        object.__setattr__(self, "card", card)

    @classmethod
    def generate(cls, name: str) -> Identity:
        return cls.from_seeds(os.urandom(KEY_BYTES), os.urandom(KEY_BYTES), name)

    @classmethod
    def from_seeds(cls, sign_seed: bytes, kx_seed: bytes, name: str) -> Identity:
        """Build from the raw 32-byte private keys (as in the test vectors)."""
        if len(sign_seed) != KEY_BYTES or len(kx_seed) != KEY_BYTES:
            raise IdentityError(f"private keys must be {KEY_BYTES} bytes each")
        return cls(
            sign_key=Ed25519PrivateKey.from_private_bytes(sign_seed),
            kx_key=X25519PrivateKey.from_private_bytes(kx_seed),
            name=name,
        )

    @property
    def id(self) -> str:
        return self.card.id

    def sign(self, data: bytes) -> bytes:
        return self.sign_key.sign(data)

    def with_name(self, name: str) -> Identity:
        return Identity(sign_key=self.sign_key, kx_key=self.kx_key, name=name)

    def to_private_json(self) -> dict[str, str]:
        """``{"id", "name", "sign_seed", "kx_seed"}``: secret, for the key file only."""
        return {
            "id": self.id,
            "name": self.name,
            "sign_seed": b64u_encode(self.sign_key.private_bytes_raw()),
            "kx_seed": b64u_encode(self.kx_key.private_bytes_raw()),
        }

    @classmethod
    def from_private_json(cls, obj: object) -> Identity:
        """Read :meth:`to_private_json` output; :class:`IdentityError` on any bad shape."""
        if not isinstance(obj, dict):
            raise IdentityError("an identity must be a JSON object")
        name = obj.get("name")
        if not isinstance(name, str):
            raise IdentityError("identity: name must be a string")
        seeds = []
        for key in ("sign_seed", "kx_seed"):
            value = obj.get(key)
            try:
                if not isinstance(value, str):
                    raise ProtocolError(f"{key} is missing")
                seeds.append(b64u_decode(value))
            except ProtocolError as exc:
                raise IdentityError(f"identity: {key} must be a base64url string") from exc
        identity = cls.from_seeds(seeds[0], seeds[1], name)
        if "id" in obj and obj["id"] != identity.id:
            raise IdentityError("identity: id does not match the signing key")
        return identity


def verify_signature(sign_pub: bytes, sig: bytes, data: bytes) -> bool:
    """Whether ``sig`` is a valid Ed25519 signature of ``data`` under ``sign_pub``."""
    if len(sign_pub) != KEY_BYTES or len(sig) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(sign_pub).verify(sig, data)
    except (InvalidSignature, ValueError):
        return False
    return True
