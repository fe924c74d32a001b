"""Pairing (protocol §5): the one-time pairing URI, the proof of knowing its secret, and
the ``pair_request`` a device sends and an agent verifies."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, urlsplit

from bot.errors import PairingError, ProtocolError
from bot.protocol.encoding import b64u_decode, b64u_encode
from bot.protocol.identity import KEY_BYTES, Identity, PublicCard, derive_id, is_id
from bot.protocol.payloads import DeviceCard, PairRequest

SCHEME = "skald-pair"
VERSION = "v1"
SECRET_BYTES = 16
MAX_URI_CHARS = 4096
_PARAMETERS = ("relay", "agent", "sign", "kx", "name", "secret")
_PROOF_PREFIX = b"skald-pair-v1"


@dataclass(frozen=True)
class PairingUri:
    """What an agent's pairing URI says: where to reach it, who it is, the one-time secret."""

    relay: str
    agent: PublicCard
    secret: bytes = field(repr=False)


def format_pairing_uri(relay: str, agent: PublicCard, secret: bytes) -> str:
    """``skald-pair:v1?relay=…&agent=…&sign=…&kx=…&name=…&secret=…``."""
    return (
        f"{SCHEME}:{VERSION}?relay={quote(relay, safe='')}&agent={agent.id}"
        f"&sign={b64u_encode(agent.sign_pub)}&kx={b64u_encode(agent.kx_pub)}"
        f"&name={quote(agent.name, safe='')}&secret={b64u_encode(secret)}"
    )


def parse_pairing_uri(text: str) -> PairingUri:
    """Read a pairing URI; :class:`PairingError` says which part is missing or wrong."""
    if not isinstance(text, str):
        raise PairingError("a pairing URI must be text")
    text = text.strip()
    if len(text) > MAX_URI_CHARS:
        raise PairingError(f"pairing URI longer than {MAX_URI_CHARS} characters")
    scheme, colon, rest = text.partition(":")
    if not colon or scheme.lower() != SCHEME:
        raise PairingError(f"not a pairing URI: it must start with {SCHEME}:{VERSION}?")
    version, _, query = rest.partition("?")
    if version != VERSION:
        raise PairingError(f"unsupported pairing URI version (this client reads {VERSION})")
    params = _query_parameters(query)
    agent_id = params["agent"]
    if not is_id(agent_id):
        raise PairingError("pairing URI: agent must be 32 lowercase hex characters")
    sign_pub = _b64u_parameter(params, "sign", KEY_BYTES)
    if derive_id(sign_pub) != agent_id:
        raise PairingError("pairing URI: agent id does not match its signing key (sign)")
    agent = PublicCard(
        id=agent_id,
        sign_pub=sign_pub,
        kx_pub=_b64u_parameter(params, "kx", KEY_BYTES),
        name=params["name"],
    )
    return PairingUri(
        relay=_relay_url(params["relay"]),
        agent=agent,
        secret=_b64u_parameter(params, "secret", SECRET_BYTES),
    )


def _query_parameters(query: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(
            query, keep_blank_values=True, errors="strict", max_num_fields=2 * len(_PARAMETERS)
        )
    except ValueError as exc:  # UnicodeDecodeError too
        raise PairingError(f"pairing URI: unreadable parameters ({exc})") from exc
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise PairingError(f"pairing URI: parameter {key} given twice")
        params[key] = value
    for key in _PARAMETERS:
        if key not in params:
            raise PairingError(f"pairing URI: missing parameter {key}")
    return params


def _b64u_parameter(params: dict[str, str], key: str, size: int) -> bytes:
    try:
        value = b64u_decode(params[key])
    except ProtocolError as exc:
        raise PairingError(f"pairing URI: {key} is not base64url") from exc
    if len(value) != size:
        raise PairingError(f"pairing URI: {key} must be {size} bytes, got {len(value)}")
    return value


def _relay_url(relay: str) -> str:
    try:
        parts = urlsplit(relay)
        host = parts.hostname
        parts.port  # noqa: B018  # raises ValueError for a bad port
    except ValueError as exc:
        raise PairingError(f"pairing URI: relay is not a valid URL ({exc})") from exc
    if parts.scheme not in ("ws", "wss"):
        raise PairingError("pairing URI: relay must be a ws:// or wss:// URL")
    if not host:
        raise PairingError("pairing URI: relay URL has no host")
    return relay


def pairing_proof(secret: bytes, device_id: str, agent_id: str) -> str:
    """b64u HMAC-SHA256 under ``secret`` of ``"skald-pair-v1" 0x00 device_id 0x00 agent_id``."""
    return b64u_encode(_proof_bytes(secret, device_id, agent_id))


def _proof_bytes(secret: bytes, device_id: str, agent_id: str) -> bytes:
    message = b"\x00".join((_PROOF_PREFIX, device_id.encode(), agent_id.encode()))
    return hmac.new(secret, message, hashlib.sha256).digest()


def build_pair_request(
    identity: Identity, uri: PairingUri, *, device_name: str, platform: str = "telegram"
) -> PairRequest:
    """The ``pair_request`` body a device sends to the agent named in ``uri``."""
    card = identity.card
    return PairRequest(
        device=DeviceCard(
            id=card.id,
            sign_pub=b64u_encode(card.sign_pub),
            kx_pub=b64u_encode(card.kx_pub),
            name=device_name,
            platform=platform,
        ),
        proof=pairing_proof(uri.secret, card.id, uri.agent.id),
    )


def device_public_card(device: DeviceCard) -> PublicCard:
    """The public card a ``pair_request`` carries, checked (keys, id against sign_pub)."""
    try:
        return PublicCard.from_json(
            {
                "id": device.id,
                "sign_pub": device.sign_pub,
                "kx_pub": device.kx_pub,
                "name": device.name,
            }
        )
    except ProtocolError as exc:
        raise PairingError(f"pair_request device: {exc}") from exc


def verify_pair_request(request: PairRequest, *, secret: bytes, agent_id: str) -> PublicCard:
    """Agent side: check the device card and the proof; return the device's card."""
    card = device_public_card(request.device)
    try:
        proof = b64u_decode(request.proof)
    except ProtocolError as exc:
        raise PairingError("pair_request: proof is not base64url") from exc
    if not hmac.compare_digest(proof, _proof_bytes(secret, card.id, agent_id)):
        raise PairingError("pair_request: proof does not match this pairing secret")
    return card
