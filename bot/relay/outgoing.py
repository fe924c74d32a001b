"""The relay client's outgoing side: envelopes wait in an :class:`Outbox` until the relay
answers ``sent``, and are sent again, with the same id, after every reconnection;
envelopes refused for now are looked at again a while later (one timer for all of them),
and those refused for good are given up."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from websockets.asyncio.client import ClientConnection

from bot.errors import SkaldError
from bot.protocol.envelope import MAX_ENVELOPE_BYTES
from bot.relay.frames import PERMANENT_SEND_ERRORS, Error, encode_envelope, send_frame

log = logging.getLogger(__name__)


class Outbox(Protocol):
    """Where outgoing envelopes wait until the relay confirms them with ``sent``."""

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        """Wire envelopes for ``relay_url`` not yet acknowledged by ``sent``, oldest first."""
        ...

    def outbox_mark_sent(self, envelope_id: str) -> None:
        """The relay took the envelope (or refused it for good): stop sending it."""
        ...


class MemoryOutbox:
    """An :class:`Outbox` held in memory, for agents and tests."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[str, dict[str, object]]] = {}

    def add(self, relay_url: str, envelope: dict[str, object]) -> None:
        """Queue a wire envelope (``Envelope.to_json()``) for ``relay_url``."""
        self._pending[str(envelope["id"])] = (relay_url, envelope)

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        return [envelope for url, envelope in self._pending.values() if url == relay_url]

    def outbox_mark_sent(self, envelope_id: str) -> None:
        self._pending.pop(envelope_id, None)

    def __len__(self) -> int:
        return len(self._pending)


class Sender:
    """Sends what waits in the outbox for one relay, each envelope once per session."""

    def __init__(self, url: str, outbox: Outbox, *, retry_after: float) -> None:
        self._url = url
        self._outbox = outbox
        self._retry_after = retry_after
        self._wakeup = asyncio.Event()
        self._in_flight: set[str] = set()
        self._retry: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        """New outbox entries: send them now if connected (else after the next ready)."""
        self._wakeup.set()

    def start_session(self) -> None:
        """A new session: everything still in the outbox goes out (first)."""
        self._in_flight.clear()
        self._wakeup.set()

    def end_session(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    async def serve(self, ws: ClientConnection) -> None:
        """Send what waits in the outbox each time :meth:`wake` (or the retry timer) says
        there may be something new; envelopes already in flight are skipped."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            for envelope in self._load_outbox():
                await self._send_one(ws, envelope)

    def sent(self, envelope_id: str) -> None:
        """The relay took the envelope."""
        self._in_flight.discard(envelope_id)
        self._mark_sent(envelope_id)

    def refused(self, frame: Error, envelope_id: str) -> None:
        """The relay did not take the envelope: for good, or for now (then it is sent
        again after ``retry_after``)."""
        self._in_flight.discard(envelope_id)
        if frame.code in PERMANENT_SEND_ERRORS:
            log.warning(
                "relay %s: refused envelope %s for good: %s", self._url, envelope_id, frame.code
            )
            self._mark_sent(envelope_id)
            return
        log.warning(
            "relay %s: envelope %s not taken (%s), will retry", self._url, envelope_id,
            frame.code
        )
        self._retry_later()

    def _load_outbox(self) -> list[dict[str, object]]:
        try:
            return self._outbox.outbox_pending(self._url)
        except SkaldError as exc:
            log.error("relay %s: cannot read the outbox: %s", self._url, exc)
            self._retry_later()
            return []

    def _retry_later(self) -> None:
        """Look at the outbox again after ``retry_after``: one timer for any number of
        envelopes refused for now."""
        if self._retry is None:
            loop = asyncio.get_running_loop()
            self._retry = loop.call_later(self._retry_after, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self.wake()

    async def _send_one(self, ws: ClientConnection, envelope: dict[str, object]) -> None:
        envelope_id = envelope.get("id")
        if not isinstance(envelope_id, str) or envelope_id in self._in_flight:
            return
        text = encode_envelope(envelope)
        if len(text.encode("utf-8")) > MAX_ENVELOPE_BYTES:
            log.warning(
                "relay %s: envelope %s exceeds %d bytes, dropped",
                self._url,
                envelope_id,
                MAX_ENVELOPE_BYTES,
            )
            self._mark_sent(envelope_id)
            return
        self._in_flight.add(envelope_id)
        await ws.send(send_frame(text))

    def _mark_sent(self, envelope_id: str) -> None:
        try:
            self._outbox.outbox_mark_sent(envelope_id)
        except SkaldError as exc:
            # Sent again after the next reconnect; the recipient's replay set drops it.
            log.error("relay %s: cannot mark %s sent: %s", self._url, envelope_id, exc)
