"""The test agent's one-time pairing secrets (protocol §5): a fresh one for each pairing
URI, used up by the device it pairs, and why a request that matches none is refused."""

from __future__ import annotations

import contextlib
import os

from bot.errors import PairingError
from bot.protocol.identity import PublicCard
from bot.protocol.pairing import SECRET_BYTES, verify_pair_request
from bot.protocol.payloads import PairRequest

REJECT_EVERY_MS = 1000
"""At most one ``pair_reject`` per device this often."""


class PairingSecrets:
    """Open and used pairing secrets, and when each device was last refused."""

    def __init__(self) -> None:
        self._open: list[bytes] = []
        self._used: list[bytes] = []
        self._rejected_at: dict[str, int] = {}

    def new(self) -> bytes:
        """A fresh secret, open until a device pairs with it."""
        secret = os.urandom(SECRET_BYTES)
        self._open.append(secret)
        return secret

    def accept(self, request: PairRequest, agent_id: str) -> PublicCard | None:
        """The device's card, its secret used up, when ``request`` proves an open one."""
        for secret in self._open:
            try:
                card = verify_pair_request(request, secret=secret, agent_id=agent_id)
            except PairingError:
                continue
            self._open.remove(secret)
            self._used.append(secret)
            return card
        return None

    def reject_reason(self, request: PairRequest, agent_id: str) -> str:
        """``used`` for a secret that paired a device already, else ``unknown``."""
        for secret in self._used:
            with contextlib.suppress(PairingError):
                verify_pair_request(request, secret=secret, agent_id=agent_id)
                return "used"
        return "unknown"

    def may_reject(self, device_id: str, now_ms: int) -> bool:
        """Whether a ``pair_reject`` may go to ``device_id`` now (and note that it did)."""
        if now_ms - self._rejected_at.get(device_id, -REJECT_EVERY_MS) < REJECT_EVERY_MS:
            return False
        self._rejected_at[device_id] = now_ms
        return True
