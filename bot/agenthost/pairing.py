"""Judging a ``pair_request`` against the host's one-time secrets (pure: no I/O).

A secret pairs one device once (the same device asking again with it is accepted again,
so a lost ``pair_accept`` can be asked for anew). Anything else gets one of protocol §5's
``pair_reject`` reasons: ``used``, ``expired``, ``unknown`` or ``bad_proof``.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from bot.errors import ProtocolError
from bot.protocol.encoding import b64u_decode
from bot.protocol.pairing import pairing_proof
from bot.protocol.payloads import PairRequest

USED_SECRET_KEPT_MS: Final = 24 * 60 * 60 * 1000
"""How long a used or expired secret is kept, so that a late request hears why."""
REJECT_INTERVAL_MS: Final = 1000
"""At most one ``pair_reject`` per device id in this time."""


@dataclass(frozen=True)
class PairingSecret:
    pairing_id: str
    secret: bytes = field(repr=False)
    created_ms: int
    expires_ms: int
    used_ms: int | None = None
    device_id: str | None = None
    """The device that paired with it."""


@dataclass(frozen=True)
class Accept:
    secret: PairingSecret


@dataclass(frozen=True)
class Reject:
    reason: str  # used | expired | unknown | bad_proof


def judge(
    request: PairRequest, agent_id: str, secrets: Iterable[PairingSecret], now_ms: int
) -> Accept | Reject:
    """Which secret the request proves knowledge of, and whether it may still pair."""
    try:
        proof = b64u_decode(request.proof)
    except ProtocolError:
        return Reject("bad_proof")
    device_id = request.device.id
    candidates = list(secrets)
    for candidate in candidates:
        expected = b64u_decode(pairing_proof(candidate.secret, device_id, agent_id))
        if not hmac.compare_digest(proof, expected):
            continue
        if candidate.used_ms is not None:
            return Accept(candidate) if candidate.device_id == device_id else Reject("used")
        if candidate.expires_ms <= now_ms:
            return Reject("expired")
        return Accept(candidate)
    live = any(c.used_ms is None and c.expires_ms > now_ms for c in candidates)
    return Reject("bad_proof" if live else "unknown")


def reject_allowed(last_sent_ms: int | None, now_ms: int) -> bool:
    """Whether a ``pair_reject`` may go to a device that last got one at ``last_sent_ms``."""
    return last_sent_ms is None or now_ms - last_sent_ms >= REJECT_INTERVAL_MS
