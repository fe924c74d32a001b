"""What links relay nodes that share one PostgreSQL queue: each listens for what the others
commit (``LISTEN``, :mod:`bot.relay.pgqueue` notifies) and acts on its own sessions.

- an envelope queued elsewhere for a device connected here: what was queued for the
  sessions woken meanwhile is read in one query and handed to them;
- a device that connected elsewhere: its session here ends (code 4409, one session per
  device), unless the session here is the newer one. Notifications come in the order of
  the transactions that sent them, so the session here is the older one exactly when this
  node's own notice of it came first;
- an envelope acknowledged elsewhere whose sender is connected here: the §4 ``delivered``.

``NOTIFY`` has no replay: what was sent while the listening connection was down is lost.
So each session's queue is also checked every ``rescan_s`` seconds (one query for all the
sessions here), and all of them at once after the listener reconnects. The counts behind
the limits are taken afresh from the database every :data:`RECOUNT_S` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Final

import psycopg

from bot.dburl import masked_url
from bot.errors import StoreError
from bot.relay.commit import QueueWriter
from bot.relay.frames import RelayCloseCode, delivered_frame
from bot.relay.limits import DEFAULT_RESCAN_S
from bot.relay.pgqueue import CONNECT_TIMEOUT_S, DELIVERED, SESSION, WAKE, PostgresQueue
from bot.relay.session import Session
from bot.storefaults import StoreHealth, one_line

log = logging.getLogger(__name__)

RECOUNT_S: Final = 10.0
FETCH_SESSIONS: Final = 64
"""Woken sessions whose new envelopes are read in one query, at most."""
FETCH_ENVELOPES: Final = 64
FETCH_BYTES: Final = 256 * 1024
"""What is read for one woken session at most (at least one envelope); past half of it,
the session reads the rest itself."""
RETRY_S: Final = (0.5, 1.0, 2.0, 5.0)
"""Waits before listening again after the connection failed, the last one repeated."""


class NodeLink:
    """Listens for the other nodes' notifications and rescans the sessions of this one."""

    def __init__(
        self,
        queue: PostgresQueue,
        writer: QueueWriter,
        sessions: Mapping[str, Session],
        health: StoreHealth,
        *,
        rescan_s: float = DEFAULT_RESCAN_S,
    ) -> None:
        self._queue = queue
        self._writer = writer
        self._sessions = sessions
        self._health = health
        self._rescan_s = rescan_s
        self._announced: dict[str, Session] = {}
        """Sessions here whose own notice has come back: older than any notice after it."""
        self._woken: set[str] = set()
        """Devices with a session here that another node queued something for."""
        self._wakeups = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing: set[asyncio.Task[None]] = set()
        self.listening = asyncio.Event()
        """Set while the listening connection is up."""

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen()),
            asyncio.create_task(self._rescan_periodically()),
            asyncio.create_task(self._fetch_for_woken()),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._closing, return_exceptions=True)
        self._tasks = []

    async def _listen(self) -> None:
        """Listen, and listen again after a failure (then rescan every session)."""
        failures = 0
        while True:
            try:
                connection = await psycopg.AsyncConnection.connect(
                    self._queue.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                )
                async with connection:
                    for channel in (WAKE, SESSION, DELIVERED):
                        await connection.execute(f"LISTEN {channel}")
                    self.listening.set()
                    if failures:
                        log.info("listening to the other relay nodes again")
                        self._rescan_all()
                    failures = 0
                    async for notice in connection.notifies():
                        self._on_notice(notice.channel, notice.payload, notice.pid)
            except psycopg.Error as exc:
                self.listening.clear()
                wait = RETRY_S[min(failures, len(RETRY_S) - 1)]
                if not failures:
                    log.warning(
                        "cannot listen to the other relay nodes at %s (%s): retrying",
                        masked_url(self._queue.url), one_line(str(exc)),
                    )
                failures += 1
                await asyncio.sleep(wait)

    def _on_notice(self, channel: str, payload: str, pid: int) -> None:
        own = pid in self._queue.writer_pids
        if channel == WAKE:
            if payload in self._sessions and not own:
                self._woken.add(payload)
                self._wakeups.set()
        elif channel == SESSION:
            self._on_session(payload, own=own)
        elif channel == DELIVERED and not own:
            sender, _, envelope_id = payload.partition(" ")
            session = self._sessions.get(sender)
            if session is not None:
                with contextlib.suppress(asyncio.QueueFull):
                    session.answers.put_nowait(delivered_frame(envelope_id))

    def _on_session(self, device: str, *, own: bool) -> None:
        if not own:
            self._queue.saw(device)
        session = self._sessions.get(device)
        if session is None:
            self._announced.pop(device, None)
        elif own:
            self._announced[device] = session
        elif self._announced.get(device) is session:
            del self._announced[device]
            log.info("session %s moved to another relay node", device)
            closing = asyncio.create_task(
                session.ws.close(RelayCloseCode.REPLACED, "replaced by a newer session")
            )
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _fetch_for_woken(self) -> None:
        """Read what was queued for the sessions woken since the last read, for many
        sessions in one query, and hand it to them as the writer hands over what this
        node commits (a session that is not caught up reads its queue itself)."""
        while True:
            await self._wakeups.wait()
            self._wakeups.clear()
            woken, self._woken = self._woken, set()
            ready = []
            for device in woken:
                session = self._sessions.get(device)
                if session is None:
                    continue
                if session.caught_up:
                    ready.append(session)
                else:
                    session.rescan()
            for start in range(0, len(ready), FETCH_SESSIONS):
                await self._fetch(ready[start : start + FETCH_SESSIONS])

    async def _fetch(self, sessions: list[Session]) -> None:
        after = {
            session.id: max(session.sent_seq, session.handed[-1].seq if session.handed else 0)
            for session in sessions
        }
        try:
            found = await asyncio.to_thread(
                self._queue.newer, after, limit=FETCH_ENVELOPES, max_bytes=FETCH_BYTES
            )
        except StoreError as exc:
            self._health.failed(exc)
            found = {}
            for session in sessions:
                session.rescan()  # reads its queue itself, and closes if that fails too
        for session in sessions:
            items = found.get(session.id, [])
            for item in items:
                session.hand_over(item)
            if len(items) >= FETCH_ENVELOPES or sum(i.size for i in items) >= FETCH_BYTES // 2:
                session.rescan()  # more may wait: the session pages through it

    def _rescan_all(self) -> None:
        for session in list(self._sessions.values()):
            session.rescan()

    async def _rescan_periodically(self) -> None:
        recount_every = max(1, round(RECOUNT_S / self._rescan_s))
        rounds = 0
        while True:
            await asyncio.sleep(self._rescan_s)
            rounds += 1
            try:
                await self._rescan()
                if rounds % recount_every == 0:
                    await self._writer.between_batches(self._queue.recount)
            except StoreError as exc:
                self._health.failed(exc)

    async def _rescan(self) -> None:
        """Wake each session here whose queue holds something newer than it was sent."""
        sessions = self._sessions
        for device in [d for d, s in self._announced.items() if sessions.get(d) is not s]:
            del self._announced[device]
        if not sessions:
            return
        newest = await asyncio.to_thread(self._queue.newest, list(sessions))
        for device, seq in newest.items():
            session = sessions.get(device)
            if session is not None and seq > session.sent_seq:
                session.rescan()
