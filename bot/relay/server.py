"""The built-in zero-trust relay (protocol §4): routes sealed envelopes between ids.

It authenticates each session with an Ed25519 challenge, checks an envelope's structure,
its ``from`` against the session's id and its size (1 MiB), and queues it for its
recipient in SQLite (WAL, under ``--data``), or in a PostgreSQL database that several
nodes share (``--store``, :mod:`bot.relay.pgqueue` and :mod:`bot.relay.pgwake`), until the
recipient acknowledges it. It never holds a private key and never parses ``ct``.

One session per id (a newer one replaces the older, closed with code 4409); a client must
authenticate within ``AUTH_TIMEOUT_S`` seconds. Delivery is at-least-once:
unacknowledged envelopes are delivered again, oldest first, on the recipient's next
session.

:class:`RelayServer` is the front: its options, starting and stopping, ``GET /health``,
and each connection's course from challenge to close. The ideas it holds live beside it:

- :mod:`bot.relay.admission`: connections counted per address, and which may stay;
- :mod:`bot.relay.transport`: where the relay departs from websockets' defaults (counting
  at accept, one write for frames produced together, pausing when out of descriptors);
- :mod:`bot.relay.handshake`: the challenge, under the limits before authentication;
- :mod:`bot.relay.intake`: a session's frames checked and handed to the writer;
- :mod:`bot.relay.commit`: the one writer, a group commit in a worker thread, and purges;
- :mod:`bot.relay.session`: a session's answers in order and deliveries through a window;
- :mod:`bot.relay.refusals`: refusal frames, and warnings about them rate-limited.

The relay is meant to face the internet, where anyone can connect and make identities, so
everything a stranger can make it hold is bounded:

- connections (:class:`bot.relay.limits.ConnectionLimits`): in all, and per network
  address (an IPv6 address counts by its /64) before and after authentication. A
  connection over a limit is closed the moment it is accepted; a session over the
  authenticated limit is closed with code 1013 right after authenticating. When the
  process runs out of file descriptors, accepting pauses for a second instead of spinning;
- time: a session that carries nothing for ``idle_timeout`` seconds is closed (code 1000);
- refused frames: after ``MAX_REFUSED_FRAMES`` refused frames in a row (bad frames,
  bad envelopes, frames before authentication) the connection is closed (code 1008), and
  warnings about refused frames and connections are rate-limited;
- queued envelopes: the quotas of :class:`bot.relay.limits.QueueLimits` (per recipient, per
  sender, for strangers, for recipients that never connected, per address, in all); a
  sender over a quota gets ``queue_full`` and retries later;
- memory: a session reads at most :data:`MAX_QUEUED_FRAMES` frames ahead; before
  authentication a frame may hold ``PRE_AUTH_FRAME_BYTES`` (a larger one is refused
  with ``too_large`` and the connection closed, 1009); deliveries are loaded from disk
  ``DELIVER_PAGE_BYTES`` at a time, and at most ``DELIVER_WINDOW`` (256) of them,
  and ``DELIVER_WINDOW_BYTES``, wait unacknowledged per session.

``sent`` is answered, and an envelope delivered, only once it is committed
(``synchronous=FULL``), and an acknowledged envelope is forgotten only by a committed
deletion; everything that arrives while one transaction is written, from every session,
shares the next. Answers keep the order of the frames they answer. Once an acknowledged
envelope's deletion is committed, its sender is told (``delivered``) if it has a session
open at that moment: a courtesy, never stored or sent later.

A queue that fails while the relay runs is logged as ERROR at most once a minute, and
``GET /health`` on the relay's port says so (503 ``store: failing since …``) until writes
succeed again (200 ``ok``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from bot.clock import SYSTEM_CLOCK, Clock
from bot.errors import RelayError, StoreError
from bot.relay.admission import Admission
from bot.relay.commit import QueueWriter
from bot.relay.frames import MAX_FRAME_BYTES, RelayCloseCode, ready_frame
from bot.relay.handshake import AUTH_TIMEOUT_S, PRE_AUTH_MESSAGE_BYTES, authenticate
from bot.relay.intake import Intake
from bot.relay.limits import (
    DEFAULT_ADDRESS_BYTES,
    DEFAULT_ADDRESS_COUNT,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_AGE_S,
    DEFAULT_RECIPIENT_BYTES,
    DEFAULT_RECIPIENT_COUNT,
    DEFAULT_RESCAN_S,
    DEFAULT_SENDER_BYTES,
    DEFAULT_SENDER_COUNT,
    DEFAULT_STRANGER_BYTES,
    DEFAULT_STRANGER_COUNT,
    DEFAULT_TOTAL_BYTES,
    DEFAULT_UNSEEN_BYTES,
    DEFAULT_UNSEEN_COUNT,
    DEFAULT_UNSEEN_MAX_AGE_S,
    ConnectionLimits,
    QueueLimits,
)
from bot.relay.refusals import RefusalStreak, WarningBudget
from bot.relay.session import TOO_MANY_REFUSALS, Session
from bot.relay.store import QueueStore, check_store, is_postgres, open_store
from bot.relay.transport import (
    QuietAcceptPauses,
    RelayConnection,
    TransportLog,
    close_draining,
    connection_type,
    listen,
    peer,
)
from bot.storefaults import StoreHealth

if TYPE_CHECKING:
    from bot.relay.pgwake import NodeLink

log = logging.getLogger(__name__)

PATH: Final = "/v1/connect"
HEALTH_PATH: Final = "/health"
MAX_QUEUED_FRAMES: Final = 4
"""Frames websockets reads ahead of the session (its ``max_queue``)."""
LISTEN_BACKLOG: Final = 1024


class RelayServer:
    """The relay, listening on ``ws://host:port/v1/connect``; use ``port=0`` in tests."""

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        queue_cap: int = DEFAULT_RECIPIENT_COUNT,
        queue_bytes: int = DEFAULT_RECIPIENT_BYTES,
        sender_queue_cap: int = DEFAULT_SENDER_COUNT,
        sender_bytes: int = DEFAULT_SENDER_BYTES,
        stranger_queue_cap: int = DEFAULT_STRANGER_COUNT,
        stranger_bytes: int = DEFAULT_STRANGER_BYTES,
        unseen_queue_cap: int = DEFAULT_UNSEEN_COUNT,
        unseen_bytes: int = DEFAULT_UNSEEN_BYTES,
        address_queue_cap: int = DEFAULT_ADDRESS_COUNT,
        address_bytes: int = DEFAULT_ADDRESS_BYTES,
        total_bytes: int = DEFAULT_TOTAL_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        unseen_max_age_s: float = DEFAULT_UNSEEN_MAX_AGE_S,
        connections: ConnectionLimits | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
        auth_timeout: float = AUTH_TIMEOUT_S,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
        clock: Clock = SYSTEM_CLOCK,
        store: str | None = None,
        rescan_s: float = DEFAULT_RESCAN_S,
    ) -> None:
        if not 0 <= port <= 65535:
            raise RelayError(f"port {port} is out of range: use 0 to 65535")
        check_store(store)
        self._data_dir = data_dir
        self._store = store
        self._rescan_s = rescan_s
        self._link: NodeLink | None = None
        self._host = host
        self._port = port
        self._limits = QueueLimits(
            recipient_count=queue_cap,
            recipient_bytes=queue_bytes,
            sender_count=min(sender_queue_cap, queue_cap),
            sender_bytes=min(sender_bytes, queue_bytes),
            stranger_count=stranger_queue_cap,
            stranger_bytes=stranger_bytes,
            unseen_count=unseen_queue_cap,
            unseen_bytes=unseen_bytes,
            address_count=address_queue_cap,
            address_bytes=address_bytes,
            total_bytes=total_bytes,
        )
        self._max_age_ms = int(max_age_s * 1000)
        self._unseen_max_age_ms = int(unseen_max_age_s * 1000)
        self._idle_timeout = idle_timeout
        self._auth_timeout = auth_timeout
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._warnings = WarningBudget(log)
        self._admission = Admission(connections or ConnectionLimits(), self._warnings)
        self._accept_pauses = QuietAcceptPauses()
        self._writer: QueueWriter | None = None
        self._intake: Intake | None = None
        self._server: Server | None = None
        self._sessions: dict[str, Session] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.health = StoreHealth("the relay queue", log, clock=clock)
        """Whether the queue's writes succeed; what ``GET /health`` reports."""

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"ws://{host}:{self.port}{PATH}"

    @property
    def port(self) -> int:
        if self._server is None:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Open the queue, purge expired envelopes and start listening."""
        queue = open_store(self._data_dir, self._store, self._limits)
        writer = QueueWriter(
            queue,
            self.health,
            self._sessions,
            max_age_ms=self._max_age_ms,
            unseen_max_age_ms=self._unseen_max_age_ms,
        )
        try:
            writer.purge()
            listener = listen(self._host, self._port, self._out_of_descriptors)
        except (StoreError, RelayError):
            queue.close()
            raise
        self._writer = writer
        self._intake = Intake(writer, self._warnings)
        self._accept_pauses.install(asyncio.get_running_loop())
        self._server = await serve(
            self._handle,
            sock=listener,
            process_request=self._route,
            max_size=PRE_AUTH_MESSAGE_BYTES,  # raised once the session is authenticated
            max_queue=MAX_QUEUED_FRAMES,
            compression=None,  # ciphertext: deflate costs CPU and saves little
            ping_interval=self._ping_interval,
            ping_timeout=self._ping_timeout,
            server_header=None,
            create_connection=connection_type(self._admission),
            backlog=LISTEN_BACKLOG,
            logger=TransportLog(logging.getLogger("websockets.server")),
        )
        writer.start()
        if is_postgres(self._store):
            self._link = _node_link(queue, writer, self._sessions, self.health, self._rescan_s)
            self._link.start()

    def _out_of_descriptors(self, exc: OSError) -> None:
        self._warnings.warn(
            "cannot accept connections (%s) with %d open: pausing for a second",
            os.strerror(exc.errno or 0),
            self._admission.total,
        )

    async def close(self) -> None:
        """Close every session (code 1001), stop listening and close the queue."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            self._accept_pauses.remove(asyncio.get_running_loop())
        if self._link is not None:
            await self._link.stop()
            self._link = None
        if self._writer is not None:
            await self._writer.stop()  # writes what came last
            self._writer.queue.close()
            self._writer = None
            self._intake = None

    async def __aenter__(self) -> RelayServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _route(self, connection: ServerConnection, request: Request) -> Response | None:
        """The relay's one WebSocket path, and its health for load balancers and probes."""
        path = urlsplit(request.path).path
        if path == HEALTH_PATH:
            summary = self.health.summary()
            if summary == "ok":
                return connection.respond(HTTPStatus.OK, "ok\n")
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, f"store: {summary}\n")
        if path != PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
        return None

    async def _handle(self, ws: ServerConnection) -> None:
        """One connection, from the challenge to its close."""
        assert isinstance(ws, RelayConnection)
        assert self._writer is not None and self._intake is not None
        try:
            session_id = await authenticate(ws, self._warnings, self._auth_timeout)
        except (ConnectionClosed, TimeoutError):
            log.debug("connection from %s closed before authentication", peer(ws))
            await close_draining(ws, RelayCloseCode.AUTH_TIMEOUT, "authentication timed out")
            return
        if session_id is None:
            return
        previous = self._sessions.get(session_id)
        replacing = previous is not None and previous.ws.address == ws.address
        if not self._admission.authenticate(ws.address, replacing=replacing):
            await close_draining(
                ws, CloseCode.TRY_AGAIN_LATER, "too many sessions from this address"
            )
            return
        ws.authenticated = True
        ws.protocol.max_message_size = MAX_FRAME_BYTES
        session = Session(ws, session_id)
        self._sessions[session_id] = session
        written = self._writer.connected(session_id)  # the previous session's acks first
        log.info(
            "session open: %s from %s%s",
            session_id,
            peer(ws),
            " (replacing the previous session)" if previous else "",
        )
        if previous is not None:
            closing = asyncio.create_task(
                previous.ws.close(RelayCloseCode.REPLACED, "replaced by a newer session")
            )
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        helpers = [
            asyncio.create_task(session.deliver(self._writer.queue, self.health, written)),
            asyncio.create_task(session.answer(self._warnings)),
        ]
        if self._idle_timeout > 0:
            helpers.append(asyncio.create_task(session.close_when_idle(self._idle_timeout)))
        on_frame = self._intake.on_frame
        refusals = RefusalStreak()
        dropping = False
        try:
            await ws.send(ready_frame(session_id))
            session.wakeup.set()
            async for message in ws:
                if dropping:
                    continue  # read and drop until the peer's closing frame comes
                session.active = time.monotonic()
                if refusals.count(await on_frame(session, message)):
                    await session.answers.put(TOO_MANY_REFUSALS)
                    dropping = True
        except ConnectionClosed:
            pass
        finally:
            for helper in helpers:
                helper.cancel()
            for result in await asyncio.gather(*helpers, return_exceptions=True):
                if isinstance(result, Exception) and not isinstance(result, ConnectionClosed):
                    log.error("session %s helper failed", session_id, exc_info=result)
            if self._sessions.get(session_id) is session:
                del self._sessions[session_id]
            log.info("session closed: %s (code %s)", session_id, ws.close_code)


def _node_link(
    queue: QueueStore,
    writer: QueueWriter,
    sessions: dict[str, Session],
    health: StoreHealth,
    rescan_s: float,
) -> NodeLink:
    """What links this node to the others on the same PostgreSQL queue."""
    from bot.relay.pgqueue import PostgresQueue
    from bot.relay.pgwake import NodeLink

    assert isinstance(queue, PostgresQueue)
    return NodeLink(queue, writer, sessions, health, rescan_s=rescan_s)
