"""The one writer of the relay's queue: a group commit of everything sessions send and
acknowledge, and the periodic purge of expired envelopes.

There is one transaction at a time, written in a worker thread while the event loop goes
on reading: everything that arrives meanwhile, from every session (envelopes,
acknowledgements, new sessions), shares the next transaction, so a burst costs one disk
sync, and a handful of statements, rather than one of each per frame. ``sent`` is
answered, and an envelope delivered, only once it is committed (``synchronous=FULL``), and
an acknowledged envelope is forgotten only by a committed deletion; once it is, its sender
is told (``delivered``) if it has a session open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from bot.errors import StoreError
from bot.relay.frames import delivered_frame
from bot.relay.queue import Acknowledged, Batch, Incoming, PutResult, Queued
from bot.relay.session import PendingSend, Session
from bot.relay.store import QueueStore
from bot.relay.transport import frame_size
from bot.storefaults import StoreHealth

log = logging.getLogger(__name__)

PURGE_INTERVAL_S: Final = 600.0

T = TypeVar("T")


class QueueWriter:
    """Writes the relay queue: batches in a worker thread, one after another, and purges.

    A failing write is recorded in ``health``; envelopes committed for a recipient that
    has a session are handed to it (``sessions``, the server's live map)."""

    def __init__(
        self,
        queue: QueueStore,
        health: StoreHealth,
        sessions: Mapping[str, Session],
        *,
        max_age_ms: int,
        unseen_max_age_ms: int,
    ) -> None:
        self.queue = queue
        self._health = health
        self._sessions = sessions
        self._max_age_ms = max_age_ms
        self._unseen_max_age_ms = unseen_max_age_ms
        self._batch = Batch()
        self._batch_ready = asyncio.Event()
        self._batch_written: asyncio.Future[list[PutResult | None]] | None = None
        """Resolved once the batch now being filled is written (or failed), with a result
        for each envelope in ``_batch.puts``, in the same order."""
        self._disk = asyncio.Lock()
        """Held while the queue writes (a batch in a worker thread, or a purge)."""
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start writing batches and purging (the queue was purged already: :meth:`purge`)."""
        self._stopping = False
        self._tasks = [
            asyncio.create_task(self._write_batches()),
            asyncio.create_task(self._purge_periodically()),
        ]

    async def stop(self) -> None:
        """Stop purging, and write what came last."""
        if not self._tasks:
            return
        writer, purger = self._tasks
        self._tasks = []
        purger.cancel()
        await asyncio.gather(purger, return_exceptions=True)
        self._stopping = True
        self._batch_ready.set()
        await writer

    def put(self, item: Incoming) -> PendingSend:
        """Queue a checked envelope in the next transaction; its pending answer."""
        self._batch_ready.set()  # _schedule written out: put and ack run once per frame
        if (results := self._batch_written) is None:
            results = self._batch_written = asyncio.get_running_loop().create_future()
        puts = self._batch.puts
        puts.append(item)
        return PendingSend(item.envelope_id, results, len(puts) - 1)

    def ack(self, session_id: str, envelope_id: str) -> None:
        """Forget an acknowledged envelope in the next transaction."""
        self._batch_ready.set()  # _schedule written out (see put)
        if self._batch_written is None:
            self._batch_written = asyncio.get_running_loop().create_future()
        self._batch.acks.append(Acknowledged(session_id, envelope_id))

    def connected(self, session_id: str) -> asyncio.Future[list[PutResult | None]]:
        """Record a new session in the next transaction, after the acks of the session it
        may replace; the future of that transaction."""
        written = self._schedule()
        self._batch.connected.append(session_id)
        return written

    def _schedule(self) -> asyncio.Future[list[PutResult | None]]:
        """Make sure the batch is written: by the next transaction, once the one being
        written (if any) is committed. Returns the future of its results."""
        self._batch_ready.set()
        if self._batch_written is None:
            self._batch_written = asyncio.get_running_loop().create_future()
        return self._batch_written

    async def _write_batches(self) -> None:
        """Write batches one after another, each in a worker thread, so that the event loop
        goes on reading frames (into the next batch) while the disk syncs."""
        while not self._stopping:
            await self._batch_ready.wait()
            self._batch_ready.clear()
            await self._commit()
        await self._commit()

    async def _commit(self) -> None:
        """Write everything that arrived since the last call in one transaction (one disk
        sync), then answer the senders and hand the envelopes to their recipients."""
        batch, self._batch = self._batch, Batch()
        written, self._batch_written = self._batch_written, None
        results: list[PutResult | None] = [None] * len(batch.puts)
        try:
            results = await self._write(batch)
        finally:
            if written is not None and not written.done():
                written.set_result(results)

    async def _write(self, batch: Batch) -> list[PutResult | None]:
        """Write a batch; a result for each envelope in it (``None`` if the store failed)."""
        results: list[PutResult | None] = [None] * len(batch.puts)
        if not batch:
            return results
        seqs = [0] * len(batch.puts)
        try:
            async with self._disk:
                applied = await asyncio.to_thread(self.queue.apply, batch, _now_ms())
        except StoreError as exc:
            # Acks are lost with it: those envelopes come again, at-least-once holds.
            self._health.failed(exc)
        else:
            self._health.wrote()
            results, seqs = list(applied.results), applied.seqs
            if applied.removed < len(batch.acks):
                log.debug("%d acks for envelopes not queued", len(batch.acks) - applied.removed)
            if applied.senders:
                self._tell_senders(applied.senders)
        sessions = self._sessions
        for item, result, seq in zip(batch.puts, results, seqs, strict=True):
            recipient = sessions.get(item.recipient)
            if result is PutResult.QUEUED and recipient is not None:
                recipient.hand_over(Queued(seq, item.envelope_id, frame_size(item.body), item.body))
        return results

    def _tell_senders(self, senders: list[tuple[str, str]]) -> None:
        """Tell each sender with a session open now that its envelope was acknowledged
        (protocol §4 ``delivered``): a courtesy, never stored, dropped when the session's
        answers are backed up."""
        sessions = self._sessions
        for sender, envelope_id in senders:
            session = sessions.get(sender)
            if session is not None:
                with contextlib.suppress(asyncio.QueueFull):
                    session.answers.put_nowait(delivered_frame(envelope_id))

    async def between_batches(self, work: Callable[[], T]) -> T:
        """Run ``work`` in a worker thread while no batch or purge is being written."""
        async with self._disk:
            return await asyncio.to_thread(work)

    def purge(self) -> None:
        """Delete expired envelopes now (the caller holds no transaction)."""
        now = _now_ms()
        removed = self.queue.purge(
            now - self._max_age_ms, unseen_older_than_ms=now - self._unseen_max_age_ms
        )
        if removed:
            log.info("purged %d expired envelopes", removed)

    async def _purge_periodically(self) -> None:
        shortest = min(self._max_age_ms, self._unseen_max_age_ms) / 1000
        interval = min(PURGE_INTERVAL_S, max(shortest, 1.0))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.between_batches(self.purge)  # a database may take its time
            except StoreError as exc:
                self._health.failed(exc)


def _now_ms() -> int:
    return int(time.time() * 1000)
