"""One authenticated session on the relay and the streams it sends: answers to its frames
in the order the frames came, and deliveries from its queue through a bounded window.

At most ``DELIVER_WINDOW`` deliveries, and :data:`DELIVER_WINDOW_BYTES`, wait for their
acknowledgements; deliveries are loaded from disk :data:`DELIVER_PAGE_BYTES` at a time.
Once everything queued on disk is sent, envelopes committed for the session are handed
over in memory (:meth:`Session.hand_over`), up to ``DELIVER_WINDOW`` of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from bot.errors import StoreError
from bot.relay.frames import DELIVER_WINDOW, deliver_frame
from bot.relay.queue import PutResult, Queued
from bot.relay.refusals import WarningBudget, send_answer
from bot.relay.store import QueueStore
from bot.relay.transport import RelayConnection
from bot.storefaults import StoreHealth

log = logging.getLogger(__name__)

DELIVER_PAGE: Final = 256
"""Envelopes looked up at once when delivering (ids and sizes only)."""
DELIVER_PAGE_BYTES: Final = 4 * 1024 * 1024
"""Bodies loaded from disk at once when delivering (at least one envelope)."""
DELIVER_WINDOW_BYTES: Final = 8 * 1024 * 1024
"""Bytes of deliveries a session may have unacknowledged (besides ``DELIVER_WINDOW``)."""
WRITE_BYTES: Final = 64 * 1024
"""Deliveries ready together are written to the socket together up to about this size
(one system call for many small envelopes; a large one is written alone)."""
ANSWER_BACKLOG: Final = 1000
"""Unanswered frames per session before the relay stops reading from it (backpressure)."""


@dataclass(eq=False)
class PendingSend:
    """A ``send`` waiting for the transaction that queues it: the batch's results, which
    come all at once (each ``None`` if the store failed), and its place among them."""

    envelope_id: str
    results: asyncio.Future[list[PutResult | None]]
    index: int


@dataclass(frozen=True)
class Close:
    """Close the connection once the answers before this one are sent."""

    code: int
    reason: str


TOO_MANY_REFUSALS: Final = Close(CloseCode.POLICY_VIOLATION, "too many refused frames")


@dataclass(eq=False)
class Session:
    """One authenticated connection; ``wakeup`` is set when something is queued for it."""

    ws: RelayConnection
    id: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    answers: asyncio.Queue[str | PendingSend | Close] = field(
        default_factory=lambda: asyncio.Queue(ANSWER_BACKLOG)
    )
    """Answers to the session's frames, in the order the frames came."""
    unacked: list[tuple[str, int]] = field(default_factory=list)
    """Ids and sizes delivered in this session and not acknowledged yet, oldest first."""
    unacked_bytes: int = 0
    window_open: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while another delivery may be sent; once the window is full, it opens again
    when half of it is acknowledged (fewer wake-ups than one per ack)."""
    active: float = field(default_factory=time.monotonic)
    """When the session last carried something (a frame either way)."""
    caught_up: bool = False
    """Whether everything queued on disk for the session up to now has been sent."""
    handed: deque[Queued] = field(default_factory=deque)
    """Envelopes committed since the session caught up, to send from memory."""
    sent_seq: int = 0
    """The position of the newest envelope sent in this session."""

    def hand_over(self, item: Queued) -> None:
        """Pass a newly committed envelope to the session; past ``DELIVER_WINDOW`` of
        them, the session reads from disk again (memory stays bounded)."""
        if self.caught_up:
            if len(self.handed) < DELIVER_WINDOW:
                self.handed.append(item)
            else:
                self.caught_up = False
                self.handed.clear()
        self.wakeup.set()

    def rescan(self) -> None:
        """Read the queue again: something was queued for the session elsewhere (another
        relay node), or may have been."""
        self.caught_up = False
        self.wakeup.set()

    def delivered(self, envelope_id: str, size: int) -> None:
        self.unacked.append((envelope_id, size))
        self.unacked_bytes += size
        if len(self.unacked) >= DELIVER_WINDOW or self.unacked_bytes >= DELIVER_WINDOW_BYTES:
            self.window_open.clear()

    def acknowledged(self, envelope_id: str) -> None:
        for index, (delivered_id, size) in enumerate(self.unacked):
            if delivered_id == envelope_id:
                del self.unacked[index]
                self.unacked_bytes -= size
                break
        if (
            len(self.unacked) <= DELIVER_WINDOW // 2
            and self.unacked_bytes <= DELIVER_WINDOW_BYTES // 2
        ):
            self.window_open.set()

    async def answer(self, warnings: WarningBudget) -> None:
        """Send the answers to the session's frames in order, each once it is known;
        those known together (a batch's ``sent`` frames) go out in one write."""
        ws, answers = self.ws, self.answers
        while True:
            answer = await answers.get()
            texts: list[str] = []
            while True:
                if isinstance(answer, Close):
                    if texts:
                        await ws.send_texts(texts)
                    await ws.close(answer.code, answer.reason)
                    return
                if isinstance(answer, PendingSend):
                    if not answer.results.done():
                        if texts:  # the answers before it need not wait for its batch
                            await ws.send_texts(texts)
                            texts = []
                        await asyncio.shield(answer.results)  # shared: never cancel it
                    result = answer.results.result()[answer.index]
                    answer = send_answer(warnings, self.id, answer.envelope_id, result)
                texts.append(answer)
                if answers.empty():
                    break
                answer = answers.get_nowait()
            await ws.send_texts(texts)

    async def close_when_idle(self, idle_timeout: float) -> None:
        """Close the session once it has carried nothing for ``idle_timeout`` seconds."""
        while (left := self.active + idle_timeout - time.monotonic()) > 0:
            await asyncio.sleep(left)
        log.info("closing idle session %s", self.id)
        await self.ws.close(CloseCode.NORMAL_CLOSURE, "idle")

    async def deliver(
        self,
        queue: QueueStore,
        health: StoreHealth,
        written: asyncio.Future[list[PutResult | None]] | None,
    ) -> None:
        """Stream the session's queue, oldest first, then whatever arrives for it, once
        ``written`` (the transaction recording the session) is; at most
        ``DELIVER_WINDOW`` deliveries wait for their acks at any time."""
        self.window_open.set()
        if written is not None:
            await asyncio.shield(written)  # shared with other sessions: never cancel it

        async def send(items: deque[Queued]) -> None:
            """Send ``items`` (taking them from the front) as the window allows, those
            it allows at once in one write."""
            while items:
                await self.window_open.wait()
                frames, size = [], 0
                while items and self.window_open.is_set() and size < WRITE_BYTES:
                    item = items.popleft()
                    if item.seq <= self.sent_seq:
                        continue  # already sent from disk
                    frames.append(deliver_frame(item.body))
                    self.delivered(item.envelope_id, item.size)
                    size += item.size
                    self.sent_seq = item.seq
                if frames:
                    await self.ws.send_texts(frames)
                    self.active = time.monotonic()

        try:
            while True:
                await self.wakeup.wait()
                self.wakeup.clear()
                while not self.caught_up:
                    # Set first: a rescan asked for while the queue is read reads it again.
                    self.caught_up = True
                    while page := await queue.load(
                        self.id,
                        after_seq=self.sent_seq,
                        limit=min(DELIVER_PAGE, DELIVER_WINDOW),
                        max_bytes=DELIVER_PAGE_BYTES,
                    ):
                        await send(deque(page))
                await send(self.handed)
        except ConnectionClosed:
            return
        except StoreError as exc:
            health.failed(exc)
            log.debug("closing session %s: the relay queue failed", self.id)
            await self.ws.close(CloseCode.INTERNAL_ERROR, "relay queue failed")
