"""A Skald agent built from the protocol core: the other end of the bot, for tests,
benchmarks and the demo.

It keeps an inbox of approvals and clarifications, pairs devices with one-time pairing
URIs, pushes a complete ``inbox_update`` to every paired device on every change, and
applies the decisions and answers it receives (protocol §3, §5). Everything is held in
memory: outgoing envelopes in a :class:`~bot.relay.client.MemoryOutbox`, the replay set in
a :class:`~bot.testing.replay.MemoryReplayGuard`. A payload a device sends goes to the
handler :data:`HANDLERS` registers for its type; its grants are
:class:`~bot.testing.agent_grants.AgentGrants`, its pairing secrets
:class:`~bot.testing.agent_pairing.PairingSecrets`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Final

from bot.agenthost.edits import edit_refusal
from bot.clock import SYSTEM_CLOCK, Clock, from_ms
from bot.errors import EnvelopeRefused, ProtocolError
from bot.protocol.encoding import args_sha256, format_rfc3339
from bot.protocol.envelope import Opened, open_envelope, seal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import device_public_card, format_pairing_uri
from bot.protocol.payloads import (
    ApprovalDecision,
    ClarificationAnswer,
    GrantRevoke,
    InboxRequest,
    PairRequest,
    Payload,
    raw_payload,
)
from bot.relay.client import MemoryOutbox, RelayClient, one_at_a_time
from bot.testing.agent_grants import AgentGrants, activity_id
from bot.testing.agent_pairing import PairingSecrets
from bot.testing.replay import MemoryReplayGuard

log = logging.getLogger(__name__)

MAX_RESOLVED: Final = 100
"""How many resolved items an ``inbox_update`` keeps listing."""

_POLL_S: Final = 0.05


class Agent:
    """An agent identity with an inbox, talking to its paired devices through one relay."""

    def __init__(
        self,
        identity: Identity,
        relay_url: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        notifications: bool = False,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        self.identity = identity
        self.relay_url = relay_url
        self.notifications = notifications
        """Also send a ``notification`` twin for every new item."""
        self.peers: dict[str, PublicCard] = {}
        self.decisions: list[ApprovalDecision] = []
        self.decided_at: list[float] = []
        """The event loop's time at which each decision was applied (for benchmarks)."""
        self.answers: list[ClarificationAnswer] = []
        self.refused: list[str] = []
        """Why envelopes, pairings, decisions or answers were refused, one line each."""
        self.received: list[Payload] = []
        """Every payload accepted, in order (including ones the agent only ignores)."""
        self.revokes: list[GrantRevoke] = []
        self._clock = clock
        self._grants = AgentGrants(clock)
        self._rev = clock.now_ms()
        self._approvals: dict[str, dict[str, object]] = {}
        self._clarifications: dict[str, dict[str, object]] = {}
        self._resolved: list[dict[str, object]] = []
        self._pairing = PairingSecrets()
        self._seen_ids: set[str] = set()
        self._replay = MemoryReplayGuard()
        self._outbox = MemoryOutbox()
        self._changed = asyncio.Event()
        self._client = RelayClient(
            relay_url,
            identity,
            handler=one_at_a_time(self._on_envelope),
            outbox=self._outbox,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self._task: asyncio.Task[None] | None = None

    # -- running ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the relay session in the background (see :meth:`wait_for`)."""
        if self._task is None:
            self._task = asyncio.create_task(self._client.run())

    async def stop(self) -> None:
        if self._task is not None:
            await self._client.stop()
            await self._task
            self._task = None

    @property
    def connected(self) -> bool:
        return self._client.connected

    @property
    def client(self) -> RelayClient:
        return self._client

    @property
    def unsent(self) -> int:
        """Envelopes the relay has not confirmed yet."""
        return len(self._outbox)

    async def wait_for(self, predicate: Callable[[Agent], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate(self)`` holds; :class:`TimeoutError` after ``timeout``."""
        async with asyncio.timeout(timeout):
            while True:
                self._changed.clear()
                if predicate(self):
                    return
                # Woken by every applied envelope; the poll catches connection changes.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), _POLL_S)

    # -- the inbox -------------------------------------------------------------------

    @property
    def rev(self) -> int:
        return self._rev

    def new_pairing_uri(self) -> str:
        """A pairing URI with a fresh one-time secret."""
        return format_pairing_uri(self.relay_url, self.identity.card, self._pairing.new())

    def inbox(self) -> dict[str, object]:
        """The current ``inbox_update`` body."""
        return {
            "rev": self._rev,
            "agent": {"name": self.identity.name},
            "approvals": list(self._approvals.values()),
            "clarifications": list(self._clarifications.values()),
            "resolved": list(self._resolved),
            "grants": self.grants_in_force(),
        }

    # -- grants ------------------------------------------------------------------------

    def grants_in_force(self) -> list[dict[str, object]]:
        """The grants given with approvals that have neither expired nor been revoked."""
        return self._grants.in_force()

    def run_covered(self, key: str, tool: str, summary: str) -> str | None:
        """A call under ``key``: when a grant in force covers it, count the use, tell every
        device in an ``activity`` entry and return the grant's id; else None (ask)."""
        grant_id = self._grants.covering(key)
        if grant_id is not None:
            self.send_activity([{"id": activity_id(), "tool": tool, "summary": summary,
                                 "grant_id": grant_id, "at": self._now_text()}])
        return grant_id

    def send_activity(self, entries: list[dict[str, object]]) -> None:
        for device_id in self.peers:
            self.send_raw(device_id, "activity", {"entries": entries})

    def push_inbox(self) -> None:
        """Send the current inbox to every device (e.g. after a grant expired)."""
        self._changed_inbox()

    def submit_approval(self, approval: dict[str, object]) -> None:
        """Add an approval (a raw wire dict) and push the inbox to every device."""
        item_id = _item_id(approval)
        self._approvals[item_id] = dict(approval)
        self._changed_inbox()
        if self.notifications:
            self._notify(item_id, "approval", str(approval.get("summary", "")))

    def submit_clarification(self, clarification: dict[str, object]) -> None:
        """Add a clarification (a raw wire dict) and push the inbox to every device."""
        item_id = _item_id(clarification)
        self._clarifications[item_id] = dict(clarification)
        self._changed_inbox()
        if self.notifications:
            self._notify(item_id, "clarification", str(clarification.get("question", "")))

    def resolve(
        self, item_id: str, outcome: str, by: str | None = None, *, edited: bool = False
    ) -> bool:
        """Remove an item, list it as resolved with ``outcome`` (and ``"edited": true``
        when a person approved it edited) and push the inbox; ``False`` when no such item
        is open."""
        if self._approvals.pop(item_id, None) is None and (
            self._clarifications.pop(item_id, None) is None
        ):
            return False
        entry: dict[str, object] = {"id": item_id, "outcome": outcome, "at": self._now_text()}
        if by is not None:
            entry["by"] = by
        if edited:
            entry["edited"] = True
        self._resolved = [*self._resolved, entry][-MAX_RESOLVED:]
        self._changed_inbox()
        return True

    def send_raw(self, device_id: str, kind: str, body: object) -> str:
        """Seal any payload to a paired device and queue it; returns the envelope id."""
        peer = self.peers.get(device_id)
        if peer is None:
            raise ProtocolError(f"{device_id} is not a paired device")
        envelope = seal(raw_payload(kind, body), sender=self.identity, recipient=peer,
                        ts_ms=self._clock.now_ms())
        self._outbox.add(self.relay_url, envelope.to_json())
        self._client.wake()
        return envelope.id

    def _changed_inbox(self) -> None:
        self._rev = max(self._rev + 1, self._clock.now_ms())
        for device_id in self.peers:
            self.send_raw(device_id, "inbox_update", self.inbox())

    def _notify(self, item_id: str, category: str, text: str) -> None:
        body = {"item_id": item_id, "category": category, "title": self.identity.name}
        for device_id in self.peers:
            self.send_raw(device_id, "notification", {**body, "body": text})

    def _now_text(self) -> str:
        return format_rfc3339(from_ms(self._clock.now_ms()))

    def _refuse(self, reason: str) -> None:
        log.warning("agent %s refused: %s", self.identity.id, reason)
        self.refused.append(reason)

    # -- incoming --------------------------------------------------------------------

    async def _on_envelope(self, wire: dict[str, object]) -> None:
        try:
            opened = open_envelope(
                wire,
                me=self.identity,
                peers=self.peers,
                now_ms=self._clock.now_ms(),
                replay=self._replay,
                accept_pair_requests=True,
            )
        except EnvelopeRefused as exc:
            self._refuse(f"envelope {exc}")
        else:
            self._replay.remember(opened.envelope.id, opened.envelope.ts)
            self.received.append(opened.payload)
            self._apply(opened)
        self._changed.set()

    def _apply(self, opened: Opened) -> None:
        handler = HANDLERS.get(type(opened.payload))
        if handler is None:
            log.debug("agent %s ignored a %s", self.identity.id, type(opened.payload).__name__)
        else:
            handler(self, opened.sender.id, opened.payload)

    def _pair(self, device_id: str, request: PairRequest) -> None:
        card = self._pairing.accept(request, self.identity.id)
        if card is None:
            self._refuse(f"pair_request from {request.device.id}: no open pairing secret "
                         "matches")
            self._reject_pairing(request)
            return
        self.peers[card.id] = card
        log.info("agent %s paired with %s", self.identity.id, card.id)
        agent = {"id": self.identity.id, "name": self.identity.name}
        self.send_raw(card.id, "pair_accept", {"agent": agent, "device_id": card.id})
        self.send_raw(card.id, "inbox_update", self.inbox())

    def _reject_pairing(self, request: PairRequest) -> None:
        """Say why (§5), at most one ``pair_reject`` per device a second."""
        card = device_public_card(request.device)
        now = self._clock.now_ms()
        if not self._pairing.may_reject(card.id, now):
            return
        reason = self._pairing.reject_reason(request, self.identity.id)
        envelope = seal(raw_payload("pair_reject", {"reason": reason}), sender=self.identity,
                        recipient=card, ts_ms=now)
        self._outbox.add(self.relay_url, envelope.to_json())
        self._client.wake()

    def _send_inbox(self, device_id: str, request: InboxRequest) -> None:
        self.send_raw(device_id, "inbox_update", self.inbox())

    def _revoke(self, device_id: str, revoke: GrantRevoke) -> None:
        self.revokes.append(revoke)
        self._grants.revoke(revoke.grant_id)
        self._changed_inbox()

    def _decide(self, device_id: str, decision: ApprovalDecision) -> None:
        if decision.decision_id in self._seen_ids:
            return  # the same decision again: already applied
        approval = self._approvals.get(decision.approval_id)
        if approval is None:
            self._refuse(f"decision {decision.decision_id}: no open approval")
            self.send_raw(device_id, "inbox_update", self.inbox())
            return
        if args_sha256(approval.get("arguments")) != decision.args_sha256:
            self._refuse(f"decision {decision.decision_id}: args_sha256 does not match")
            return
        if decision.arguments is not None:
            why = _edit_refusal(approval, decision)
            if why is not None:
                self._refuse(f"decision {decision.decision_id}: {why}")
                return
        self._seen_ids.add(decision.decision_id)
        self.decisions.append(decision)
        self.decided_at.append(asyncio.get_running_loop().time())
        refused = self._grants.give(approval, decision)
        if refused is not None:
            self._refuse(f"decision {decision.decision_id}: {refused}")
        outcome = "approved" if decision.decision == "approve" else "denied"
        edited = decision.arguments is not None and decision.edited_sha256 != decision.args_sha256
        self.resolve(decision.approval_id, outcome, by=decision.decided_by.name, edited=edited)

    def _answer(self, device_id: str, answer: ClarificationAnswer) -> None:
        if answer.answer_id in self._seen_ids:
            return
        if answer.clarification_id not in self._clarifications:
            self._refuse(f"answer {answer.answer_id}: no open clarification")
            self.send_raw(device_id, "inbox_update", self.inbox())
            return
        self._seen_ids.add(answer.answer_id)
        self.answers.append(answer)
        self.resolve(answer.clarification_id, "answered", by=answer.answered_by.name)


HANDLERS: Final[dict[type, Callable[[Agent, str, Any], None]]] = {
    PairRequest: Agent._pair,
    InboxRequest: Agent._send_inbox,
    ApprovalDecision: Agent._decide,
    ClarificationAnswer: Agent._answer,
    GrantRevoke: Agent._revoke,
}
"""The payload types the agent takes from a device (by the sender's id), each with its
handler."""


def _edit_refusal(approval: dict[str, object], decision: ApprovalDecision) -> str | None:
    """Why the edited arguments of ``decision`` are refused (§3.3), or ``None``. The
    payload's parsing has already bound ``edited_sha256`` to them and kept them off a deny
    and a grant."""
    editable = approval.get("editable")
    if not isinstance(editable, list) or not editable:
        return "edited arguments, and the approval lists no editable keys"
    original = approval.get("arguments")
    edited = decision.arguments
    if not isinstance(original, dict) or not isinstance(edited, dict):
        return "edited arguments, and the approval's arguments are no object"
    why = edit_refusal(original, [str(key) for key in editable], edited)
    return None if why is None else f"a bad edit: {why}"


def _item_id(item: dict[str, object]) -> str:
    item_id = item.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise ProtocolError("an inbox item needs a non-empty string id")
    return item_id
