"""The agent host's outbox as its relay client sees it: envelopes wait in the store until
the relay takes them (``sent``); the rows of those it took are deleted together a moment
later, in one commit that does not wait for the disk, so that no ``sent`` costs a disk
sync of its own on the way of what the host does next.

Losing such a delete is safe: an envelope whose row outlives a killed process or a power
loss is sent again with the same id, and its recipient's replay set drops it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from bot.agenthost.store import AgentStore
from bot.errors import StoreError

log = logging.getLogger(__name__)

FORGET_AFTER_S: Final = 0.05
"""How long the rows of envelopes the relay took wait, to be deleted together."""
RETRY_S: Final = 1.0
"""How soon deleting them is tried again after the store failed."""


class HostOutbox:
    """The relay client's :class:`~bot.relay.outgoing.Outbox` over the host's store."""

    def __init__(self, store: AgentStore) -> None:
        self._store = store
        self._taken: set[str] = set()
        """Envelopes the relay took whose rows are not deleted yet."""
        self._timer: asyncio.TimerHandle | None = None

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        return [envelope for envelope in self._store.outbox_pending(relay_url)
                if envelope.get("id") not in self._taken]

    def outbox_mark_sent(self, envelope_id: str) -> None:
        self._taken.add(envelope_id)
        self._forget_in(FORGET_AFTER_S)

    def size(self) -> int:
        """Envelopes waiting for the relay to take them."""
        return max(0, self._store.outbox_size() - len(self._taken))

    def forget(self) -> None:
        """Delete the rows of every envelope the relay took now (as on stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._delete():
            self._forget_in(RETRY_S)

    def _delete(self) -> bool:
        """Whether the rows of the envelopes taken are deleted (or there were none)."""
        if not self._taken:
            return True
        taken = set(self._taken)
        try:
            with self._store.transaction(durable=False):
                self._store.outbox_forget(taken)
        except StoreError as exc:
            log.warning("could not delete %d sent envelope(s) from the outbox: %s",
                        len(taken), exc)
            return False
        self._taken -= taken
        return True

    def _forget_in(self, delay_s: float) -> None:
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wait on: now, or with the next envelope taken
            self._delete()
            return
        self._timer = loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.forget()
