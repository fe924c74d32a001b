"""Pairing with an agent and unbinding it from a chat."""

from __future__ import annotations

import asyncio
import contextlib
import json

from bot.bridge.base import REDRAW, BridgeBase, Changes
from bot.errors import PairingError
from bot.protocol.envelope import seal
from bot.protocol.pairing import PairingUri, build_pair_request
from bot.protocol.payloads import encode_payload
from bot.store import StoreView

PAIRING_TIMEOUT_S = 30.0
LOOK_AGAIN_S = 0.25
"""How long ``/pair`` and ``skald-telegram pair`` wait for the agent to accept."""


class Pairings(BridgeBase):
    """Pairings started here, and bindings undone."""

    def start_pairing(
        self, uri: PairingUri, *, chat_id: int, topic_id: int | None, requested_by: int | None
    ) -> Changes:
        """Record a pairing in progress and queue its ``pair_request`` for the agent's relay."""
        now = self.now_ms()
        request = build_pair_request(self.identity, uri, device_name=self.identity.card.name)
        with self._store.transaction():
            self._store.agents.add_pairing(
                uri.agent.id, uri.relay, json.dumps(uri.agent.to_json()), chat_id=chat_id,
                topic_id=topic_id, requested_by=requested_by, now_ms=now,
            )
            envelope = seal(encode_payload(request), sender=self.identity, recipient=uri.agent,
                            ts_ms=now)
            self._store.outbox.add(uri.relay, envelope.to_json(), now)
        return Changes(relays=frozenset({uri.relay}))

    def cancel_pairing(self, agent_id: str) -> None:
        """Give up a pairing the agent has not accepted, so that no relay session is kept
        open for it."""
        self._store.agents.cancel_pairing(agent_id)

    def unbind(self, agent_id: str, chat_id: int, user_id: int | None) -> Changes:
        now = self.now_ms()
        with self._store.transaction():
            self._store.agents.unbind(agent_id, chat_id)
            self._store.audit.append("unpaired", at=now, chat_id=chat_id, agent_id=agent_id,
                                     user_id=user_id)
        return REDRAW


async def wait_until_paired(
    view: StoreView, agent_id: str, changed: asyncio.Event, timeout: float = PAIRING_TIMEOUT_S
) -> None:
    """Return once the agent accepted the pairing; ``changed`` is set after each applied
    change. Raises :class:`TimeoutError` after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not _accepted(view, agent_id):
            reason = view.agents.pairing_rejection(agent_id)
            if reason is not None:
                raise PairingError(
                    f"the agent refused the pairing: {REFUSALS.get(reason, reason)}")
            changed.clear()
            # Another replica (the leading one) may apply the acceptance: look again now
            # and then rather than wait only for this process's changes.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), LOOK_AGAIN_S)


def _accepted(view: StoreView, agent_id: str) -> bool:
    pairing = view.agents.pairing(agent_id)
    return pairing is not None and pairing.accepted_at is not None


REFUSALS = {
    "used": "this link was used already: ask the agent for a new one",
    "expired": "this link has expired: ask the agent for a new one",
    "unknown": "the agent does not know this link",
    "bad_proof": "the link's secret does not match",
}
"""What each ``pair_reject`` reason means, for people."""
