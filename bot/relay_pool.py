"""One relay session per distinct relay URL among the paired agents (and pending pairings)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from bot.bridge import Bridge, Changes
from bot.relay.client import RelayClient, RelayStatus

log = logging.getLogger(__name__)


class RelayPool:
    """Starts a :class:`RelayClient` for every relay the bridge needs, each handing
    delivered envelopes to the bridge and flushing the bridge's outbox.

    :meth:`act_on` acts on what a use case changed, after its commit: it flushes the relays
    with new envelopes and hands the rest to ``after`` (which wakes the card worker).

    A pool that does not ``lead`` (a replica that follows) opens no session until
    :meth:`lead`: the leading replica sends what this one puts in the outbox."""

    def __init__(
        self, bridge: Bridge, *, after: Callable[[Changes], None], leads: bool = True,
        **client_options: float,
    ) -> None:
        self._bridge = bridge
        self._after = after
        self._leads = leads
        self._options = client_options
        self._clients: dict[str, RelayClient] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def ensure(self, url: str) -> None:
        """Open a session with ``url`` unless one is already running (or this replica
        does not lead)."""
        if url in self._clients or not self._leads:
            return

        async def handle(envelopes: list[dict[str, object]]) -> None:
            self.act_on(await self._bridge.receive(envelopes))

        async def ready() -> None:
            self.act_on(self._bridge.request_inboxes(url))

        client = RelayClient(
            url,
            self._bridge.identity,
            handler=handle,
            outbox=_Outbox(self._bridge, self.act_on),
            on_ready=ready,
            on_delivered=lambda envelope_id: log.debug(
                "relay %s: envelope %s reached its agent", url, envelope_id),
            **self._options,
        )
        self._clients[url] = client
        self._tasks[url] = asyncio.create_task(client.run(), name=f"relay {url}")
        log.info("relay session for %s started", url)

    def alive(self, url: str) -> bool:
        """Whether the session task for ``url`` still runs (it only ends on :meth:`stop`)."""
        task = self._tasks.get(url)
        return task is not None and not task.done()

    def lead(self) -> None:
        """This replica leads from now on: open every session it needs."""
        self._leads = True
        self.ensure_all()

    def ensure_all(self) -> None:
        for url in sorted(self._bridge.relay_urls()):
            self.ensure(url)

    def act_on(self, changes: Changes) -> None:
        for url in sorted(changes.relays):
            self.wake(url)
        self._after(changes)

    def wake(self, url: str) -> None:
        """New envelopes wait in the outbox for ``url``: send them now."""
        client = self._clients.get(url)
        if client is None:
            self.ensure(url)
        else:
            client.wake()

    def statuses(self) -> list[RelayStatus]:
        return [client.status() for client in self._clients.values()]

    async def stop(self) -> None:
        await asyncio.gather(*(client.stop() for client in self._clients.values()),
                             return_exceptions=True)
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._clients.clear()
        self._tasks.clear()


class _Outbox:
    """The bridge's outbox as a relay client uses it, acting on what marking an envelope
    sent changed (a decision's cards stop saying "sending")."""

    def __init__(self, bridge: Bridge, act_on: Callable[[Changes], None]) -> None:
        self._bridge = bridge
        self._act_on = act_on

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        return self._bridge.outbox_pending(relay_url)

    def outbox_mark_sent(self, envelope_id: str) -> None:
        self._act_on(self._bridge.outbox_mark_sent(envelope_id))
