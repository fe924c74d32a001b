"""The bridge's shared vocabulary, below its parts: what a use case changed
(:class:`Changes`), the log held until a batch commits, sealing a payload into the outbox,
and a chat's rules from the configuration."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from bot.clock import Clock, to_ms
from bot.config import ChatPolicy, Config
from bot.core.model import Peer
from bot.errors import PayloadError
from bot.protocol.envelope import seal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.payloads import Approval, Clarification, Payload, encode_payload, item_to_wire
from bot.protocol.snapshot import SeenSnapshot
from bot.store import StateStore

log = logging.getLogger(__name__)

PAIRING_WINDOW_MS = 10 * 60 * 1000
"""How long a pairing in progress waits for the agent's pair_accept."""


class HeldLog:
    """The log of what delivered envelopes did: written at once, or, while a batch of them
    is applied (:meth:`holding`), once its transaction has committed, so that nothing is
    logged as done that was not, and a batch delivered again after the store failed logs
    nothing twice."""

    def __init__(self) -> None:
        self._held: contextvars.ContextVar[list[tuple[int, str, tuple[object, ...]]] | None] \
            = contextvars.ContextVar("held_log", default=None)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the lines logged in the block; write them if it ends without an error."""
        lines: list[tuple[int, str, tuple[object, ...]]] = []
        token = self._held.set(lines)
        try:
            yield
        finally:
            self._held.reset(token)
        for level, message, args in lines:
            log.log(level, message, *args)

    def log(self, level: int, message: str, *args: object) -> None:
        held = self._held.get()
        if held is None:
            log.log(level, message, *args)
        else:
            held.append((level, message, args))

    def info(self, message: str, *args: object) -> None:
        self.log(logging.INFO, message, *args)

    def warning(self, message: str, *args: object) -> None:
        self.log(logging.WARNING, message, *args)

    def error(self, message: str, *args: object) -> None:
        self.log(logging.ERROR, message, *args)


held_log = HeldLog()


@dataclass(frozen=True)
class Changes:
    """What a use case changed, for the caller to act on after the commit."""

    cards: bool = False
    """Cards to show or redraw, due times that moved, or a pairing that finished."""
    relays: frozenset[str] = frozenset()
    """Relays with new envelopes waiting in the outbox."""

    def __or__(self, other: Changes) -> Changes:
        return Changes(self.cards or other.cards, self.relays | other.relays)


NOTHING = Changes()
REDRAW = Changes(cards=True)


class BridgeBase:
    """What every part of the bridge shares: the store it writes, the bot's identity,
    configuration and clock."""

    def __init__(self, *, identity: Identity, store: StateStore, config: Config,
                 clock: Clock) -> None:
        self.identity = identity
        self._store = store
        self.view = store.view()
        """The bot's state, read-only, for the Telegram side."""
        self.config = config
        self._clock = clock
        self._seen: dict[str, SeenSnapshot] = {}
        """Each agent's last snapshot applied, to read its next one (memory only). Items
        enter the store only from snapshots, and never leave it: every item of it is held,
        and every item the bot holds open is one of it."""

    def now_ms(self) -> int:
        return self._clock.now_ms()

    @property
    def clock(self) -> Clock:
        return self._clock

    def policy(self, chat_id: int) -> ChatPolicy:
        """A chat's rules from the configuration, following supergroup migrations. A chat
        whose type Telegram has not reported yet gets a group's (stricter) defaults."""
        return self.config.policy(
            chat_id, private=self._store.chats.kind(chat_id) == "private",
            former_ids=tuple(self._store.chats.former_ids(chat_id)),
        )

    def _send_to_agent(self, agent_id: str, payload: Payload) -> tuple[str, Changes]:
        """Queue ``payload`` for a paired agent: the envelope's id, and the relay to wake."""
        peer = self._store.agents.peer(agent_id)
        if peer is None:
            raise PayloadError(f"agent {agent_id[:8]} is no longer paired")
        return self._seal_to(peer, payload), Changes(relays=frozenset({peer.relay_url}))

    def _send(self, peer: Peer, payload: Payload) -> Changes:
        self._seal_to(peer, payload)
        return Changes(relays=frozenset({peer.relay_url}))

    def _seal_to(self, peer: Peer, payload: Payload) -> str:
        now = self.now_ms()
        card = PublicCard.from_json(json.loads(peer.card_json))
        envelope = seal(encode_payload(payload), sender=self.identity, recipient=card, ts_ms=now)
        self._store.outbox.add(peer.relay_url, envelope.to_json(), now)
        return envelope.id


def new_token() -> str:
    """A random, unguessable per-card token for callback data (16 characters)."""
    return secrets.token_urlsafe(12)


def item_body(item: Approval | Clarification) -> str:
    """An item as the store keeps it."""
    return json.dumps(item_to_wire(item), ensure_ascii=False)


def maybe_ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_ms(moment)


def short(value: object) -> str:
    return value[:12] if isinstance(value, str) else "?"
