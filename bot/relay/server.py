"""The built-in zero-trust relay (protocol §4): routes sealed envelopes between ids.

It authenticates each session with an Ed25519 challenge, checks an envelope's structure,
its ``from`` against the session's id and its size (1 MiB), and queues it for its
recipient in SQLite (WAL, under ``--data``) until the recipient acknowledges it. It never
holds a private key and never parses ``ct``.

One session per id (a newer one replaces the older, closed with code 4409); a client must
authenticate within :data:`AUTH_TIMEOUT_S` seconds. Delivery is at-least-once:
unacknowledged envelopes are delivered again, oldest first, on the recipient's next
session.

The relay is meant to face the internet, where anyone can connect and make identities, so
everything a stranger can make it hold is bounded:

- connections (:class:`bot.relay.limits.ConnectionLimits`): in all, and per network
  address (an IPv6 address counts by its /64) before and after authentication. A
  connection over a limit is closed the moment it is accepted; a session over the
  authenticated limit is closed with code 1013 right after authenticating. When the
  process runs out of file descriptors, accepting pauses for a second instead of spinning;
- time: a session that carries nothing for ``idle_timeout`` seconds is closed (code 1000);
- refused frames: after :data:`MAX_REFUSED_FRAMES` refused frames in a row (bad frames,
  bad envelopes, frames before authentication) the connection is closed (code 1008), and
  warnings about refused frames and connections are rate-limited (:class:`WarningBudget`);
- queued envelopes: the quotas of :class:`bot.relay.limits.QueueLimits` (per recipient, per
  sender, for strangers, for recipients that never connected, per address, in all); a
  sender over a quota gets ``queue_full`` and retries later;
- memory: a session reads at most :data:`MAX_QUEUED_FRAMES` frames ahead; before
  authentication a frame may hold :data:`PRE_AUTH_FRAME_BYTES` (a larger one is refused
  with ``too_large`` and the connection closed, 1009); deliveries are loaded from disk
  :data:`DELIVER_PAGE_BYTES` at a time, and at most ``DELIVER_WINDOW`` (256) of them,
  and :data:`DELIVER_WINDOW_BYTES`, wait unacknowledged per session.

``sent`` is answered, and an envelope delivered, only once it is committed
(``synchronous=FULL``), and an acknowledged envelope is forgotten only by a committed
deletion. There is one writer and one transaction at a time, written in a worker thread
while the event loop goes on reading: everything that arrives meanwhile, from every session
(envelopes, acknowledgements, new sessions), shares the next transaction, so a burst costs
one disk sync, and a handful of statements, rather than one of each per frame. Answers keep
the order of the frames they answer.

A queue that fails while the relay runs is logged as ERROR at most once a minute, and
``GET /health`` on the relay's port says so (503 ``store: failing since …``) until writes
succeed again (200 ``ok``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import socket
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Any, Final
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from bot.clock import SYSTEM_CLOCK, Clock
from bot.errors import EnvelopeRefused, ProtocolError, RefusalReason, RelayError, StoreError
from bot.protocol.envelope import parse_envelope
from bot.protocol.relayauth import verify_auth_frame
from bot.relay.frames import (
    DELIVER_WINDOW,
    MAX_FRAME_BYTES,
    NONCE_BYTES,
    Ack,
    Auth,
    ErrorCode,
    FrameError,
    Send,
    challenge_frame,
    deliver_frame,
    encode_envelope,
    error_frame,
    parse_frame,
    read_send,
    ready_frame,
    sent_frame,
)
from bot.relay.limits import (
    DEFAULT_ADDRESS_BYTES,
    DEFAULT_ADDRESS_COUNT,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_AGE_S,
    DEFAULT_RECIPIENT_BYTES,
    DEFAULT_RECIPIENT_COUNT,
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
from bot.relay.queue import (
    Acknowledged,
    Batch,
    Incoming,
    PutResult,
    Queued,
    RelayQueue,
    message_bytes,
)
from bot.storefaults import StoreHealth

log = logging.getLogger(__name__)

PATH: Final = "/v1/connect"
HEALTH_PATH: Final = "/health"
MAX_REFUSED_FRAMES: Final = 10
"""Refused frames in a row after which the connection is closed (code 1008)."""
AUTH_TIMEOUT_S: Final = 10.0
PURGE_INTERVAL_S: Final = 600.0
DELIVER_PAGE: Final = 256
"""Envelopes looked up at once when delivering (ids and sizes only)."""
DELIVER_PAGE_BYTES: Final = 4 * 1024 * 1024
"""Bodies loaded from disk at once when delivering (at least one envelope)."""
DELIVER_WINDOW_BYTES: Final = 8 * 1024 * 1024
"""Bytes of deliveries a session may have unacknowledged (besides ``DELIVER_WINDOW``)."""
WRITE_BYTES: Final = 64 * 1024
"""Deliveries ready together are written to the socket together up to about this size
(one system call for many small envelopes; a large one is written alone)."""
MAX_QUEUED_FRAMES: Final = 4
"""Frames websockets reads ahead of the session (its ``max_queue``)."""
PRE_AUTH_FRAME_BYTES: Final = 4096
"""The largest frame answered before authentication (an ``auth`` frame is ~200 bytes)."""
PRE_AUTH_MESSAGE_BYTES: Final = 64 * 1024
"""Before authentication, websockets itself closes (1009) on a larger message."""
ANSWER_BACKLOG: Final = 1000
"""Unanswered frames per session before the relay stops reading from it (backpressure)."""
WARNINGS_PER_MINUTE: Final = 20
"""Warnings about refused frames and connections logged per minute; the rest are counted
and summed up in one line."""
LISTEN_BACKLOG: Final = 1024

CLOSE_NORMAL: Final = 1000
CLOSE_POLICY: Final = 1008
CLOSE_TOO_BIG: Final = 1009
CLOSE_INTERNAL: Final = 1011
CLOSE_TRY_LATER: Final = 1013
CLOSE_AUTH_FAILED: Final = 4401
CLOSE_AUTH_TIMEOUT: Final = 4408
CLOSE_REPLACED: Final = 4409

STORE_FAILED: Final = "unavailable"
"""Error code for a transient failure of the relay's own queue: the sender retries."""

_OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class WarningBudget:
    """Logs at most ``per_minute`` warnings a minute; the others are counted, and the count
    is logged (one line) when the next minute's first warning is."""

    def __init__(
        self, per_minute: int = WARNINGS_PER_MINUTE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._per_minute = per_minute
        self._clock = clock
        self._minute_started = -60.0
        self._logged = 0
        self._suppressed = 0

    def warn(self, message: str, *args: object) -> None:
        now = self._clock()
        if now - self._minute_started >= 60.0:
            if self._suppressed:
                log.warning("%d more such warnings in the last minute", self._suppressed)
            self._minute_started, self._logged, self._suppressed = now, 0, 0
        if self._logged < self._per_minute:
            self._logged += 1
            log.warning(message, *args)
        else:
            self._suppressed += 1


class _TransportLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """websockets' own log, without its line for every connection opened and closed: a
    connection flood must not become a log flood (sessions are logged by the relay)."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if level >= logging.WARNING:
            super().log(level, msg, *args, **kwargs)


class _Admission:
    """Counts connections per address and decides which may stay."""

    def __init__(self, limits: ConnectionLimits, warnings: WarningBudget) -> None:
        self._limits = limits
        self._warnings = warnings
        self.total = 0
        self._unauthenticated: Counter[str] = Counter()
        self._authenticated: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        """Count a new connection, or refuse it (``False``) when a limit is reached."""
        if self.total >= self._limits.total:
            self._warnings.warn("refused a connection from %s: %d open", address, self.total)
            return False
        if self._unauthenticated[address] >= self._limits.unauthenticated_per_address:
            self._warnings.warn(
                "refused a connection from %s: %d unauthenticated connections from there",
                address,
                self._unauthenticated[address],
            )
            return False
        self.total += 1
        self._unauthenticated[address] += 1
        return True

    def authenticate(self, address: str, *, replacing: bool) -> bool:
        """Count a connection as a session; ``False`` when its address has too many.
        A session replacing one of the same id from the same address always may."""
        if not replacing and self._authenticated[address] >= self._limits.authenticated_per_address:
            self._warnings.warn(
                "refused a session from %s: %d sessions from there",
                address,
                self._authenticated[address],
            )
            return False
        self._drop(self._unauthenticated, address)
        self._authenticated[address] += 1
        return True

    def release(self, address: str, *, authenticated: bool) -> None:
        self.total -= 1
        self._drop(self._authenticated if authenticated else self._unauthenticated, address)

    @staticmethod
    def _drop(counter: Counter[str], address: str) -> None:
        counter[address] -= 1
        if counter[address] <= 0:
            del counter[address]


class _Connection(ServerConnection):
    """A WebSocket connection that is counted from the moment it is accepted, and closed
    at once when a connection limit is reached."""

    admission: _Admission
    address: str = ""
    admitted: bool = False
    authenticated: bool = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.address = address_key(transport.get_extra_info("peername"))
        self.admitted = self.admission.admit(self.address)
        if not self.admitted:
            assert isinstance(transport, asyncio.Transport)
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.admitted = False
            self.admission.release(self.address, authenticated=self.authenticated)
        super().connection_lost(exc)

    async def send_texts(self, texts: list[str]) -> None:
        """Send text frames, in order, in one write to the socket (one system call
        rather than one per frame); raises ``ConnectionClosed`` as ``send`` does."""
        async with self.send_context():
            for text in texts:
                self.protocol.send_text(text.encode())

    def send_data(self) -> None:
        """Write what the protocol has to send, frames produced together in one write."""
        chunks = self.protocol.data_to_send()
        run: list[bytes] = []
        for data in chunks:
            if data:
                run.append(data)
                continue
            self._write(run)
            run = []
            # The end of the stream: half-close, as websockets itself does.
            if self.transport.can_write_eof():
                with contextlib.suppress(Exception):
                    self.transport.write_eof()
            else:
                self.transport.close()
        self._write(run)

    def _write(self, run: list[bytes]) -> None:
        if len(run) == 1:
            self.transport.write(run[0])
        elif run:
            self.transport.write(b"".join(run))


def _connection_type(admission: _Admission) -> type[ServerConnection]:
    return type("RelayConnection", (_Connection,), {"admission": admission})


class _Listener(socket.socket):
    """A listening socket that makes asyncio pause accepting (for a second) when the
    process is out of file descriptors, rather than retry at once in a loop, and that
    reports it through ``on_exhausted``."""

    on_exhausted: Callable[[OSError], None] | None = None
    _quiet_until: float = 0.0

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno not in _OUT_OF_DESCRIPTORS:
                raise
            now = time.monotonic()
            if now < self._quiet_until:
                # asyncio already paused this socket in this turn: end the turn quietly.
                raise BlockingIOError(errno.EAGAIN, "paused") from exc
            self._quiet_until = now + 0.5
            if self.on_exhausted is not None:
                self.on_exhausted(exc)
            raise  # asyncio stops reading this socket and starts again a second later


@dataclass(eq=False)
class _Session:
    """One authenticated connection; ``wakeup`` is set when something is queued for it."""

    ws: _Connection
    id: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    answers: asyncio.Queue[str | _PendingSend | _Close] = field(
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


@dataclass(eq=False)
class _PendingSend:
    """A ``send`` waiting for the transaction that queues it: the batch's results, which
    come all at once (each ``None`` if the store failed), and its place among them."""

    envelope_id: str
    results: asyncio.Future[list[PutResult | None]]
    index: int


@dataclass(frozen=True)
class _Close:
    """Close the connection once the answers before this one are sent."""

    code: int
    reason: str


class _Refusals:
    """Refused frames in a row on one connection."""

    def __init__(self) -> None:
        self.in_a_row = 0

    def count(self, refused: bool) -> bool:
        """Record one answered frame; ``True`` once too many were refused in a row."""
        self.in_a_row = self.in_a_row + 1 if refused else 0
        return self.in_a_row >= MAX_REFUSED_FRAMES


_TOO_MANY_REFUSALS: Final = _Close(CLOSE_POLICY, "too many refused frames")


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
    ) -> None:
        if not 0 <= port <= 65535:
            raise RelayError(f"port {port} is out of range: use 0 to 65535")
        self._data_dir = data_dir
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
        self._warnings = WarningBudget()
        self._admission = _Admission(connections or ConnectionLimits(), self._warnings)
        self._queue: RelayQueue | None = None
        self._server: Server | None = None
        self._purger: asyncio.Task[None] | None = None
        self._sessions: dict[str, _Session] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._batch = Batch()
        self._batch_ready = asyncio.Event()
        self._batch_written: asyncio.Future[list[PutResult | None]] | None = None
        """Resolved once the batch now being filled is written (or failed), with a result
        for each envelope in ``_batch.puts``, in the same order."""
        self._disk = asyncio.Lock()
        """Held while the queue writes (a batch in a worker thread, or a purge)."""
        self._writer: asyncio.Task[None] | None = None
        self._stopping = False
        self._previous_handler: Any = None
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
        self._queue = RelayQueue.open(self._data_dir, limits=self._limits)
        try:
            self._purge()
            listener = self._listen()
        except (StoreError, RelayError):
            self._queue.close()
            self._queue = None
            raise
        loop = asyncio.get_running_loop()
        self._previous_handler = loop.get_exception_handler()
        loop.set_exception_handler(self._on_loop_exception)
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
            create_connection=_connection_type(self._admission),
            backlog=LISTEN_BACKLOG,
            logger=_TransportLog(logging.getLogger("websockets.server")),
        )
        self._stopping = False
        self._writer = asyncio.create_task(self._write_batches())
        self._purger = asyncio.create_task(self._purge_periodically())

    def _listen(self) -> _Listener:
        """Bind the listening socket (the first address ``host`` resolves to)."""
        where = f"{self._host}:{self._port}"
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                self._host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            listener = _Listener(family, kind, proto)
        except OSError as exc:
            raise RelayError(f"cannot listen on {where}: {exc}") from exc
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(address)
        except OSError as exc:
            listener.close()
            raise RelayError(f"cannot listen on {where}: {exc}") from exc
        listener.on_exhausted = self._out_of_descriptors
        return listener

    def _out_of_descriptors(self, exc: OSError) -> None:
        self._warnings.warn(
            "cannot accept connections (%s) with %d open: pausing for a second",
            os.strerror(exc.errno or 0),
            self._admission.total,
        )

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Leave out asyncio's report of a pause that :class:`_Listener` already logged."""
        exc = context.get("exception")
        if (
            isinstance(exc, OSError)
            and exc.errno in _OUT_OF_DESCRIPTORS
            and "accept" in str(context.get("message", ""))
        ):
            return
        if self._previous_handler is not None:
            self._previous_handler(loop, context)
        else:
            loop.default_exception_handler(context)

    async def close(self) -> None:
        """Close every session (code 1001), stop listening and close the queue."""
        if self._purger is not None:
            self._purger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._purger
            self._purger = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            asyncio.get_running_loop().set_exception_handler(self._previous_handler)
        if self._writer is not None:
            self._stopping = True
            self._batch_ready.set()
            await self._writer  # writes what came last
            self._writer = None
        if self._queue is not None:
            self._queue.close()
            self._queue = None

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

    def _purge(self) -> None:
        assert self._queue is not None
        now = _now_ms()
        removed = self._queue.purge(
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
                async with self._disk:
                    self._purge()
            except StoreError as exc:
                self.health.failed(exc)

    async def _handle(self, ws: ServerConnection) -> None:
        assert isinstance(ws, _Connection)
        try:
            session_id = await self._authenticate(ws)
        except (ConnectionClosed, TimeoutError):
            log.debug("connection from %s closed before authentication", _peer(ws))
            await _close(ws, CLOSE_AUTH_TIMEOUT, "authentication timed out")
            return
        if session_id is None:
            return
        previous = self._sessions.get(session_id)
        replacing = previous is not None and previous.ws.address == ws.address
        if not self._admission.authenticate(ws.address, replacing=replacing):
            await _close(ws, CLOSE_TRY_LATER, "too many sessions from this address")
            return
        ws.authenticated = True
        ws.protocol.max_message_size = MAX_FRAME_BYTES
        session = _Session(ws, session_id)
        self._sessions[session_id] = session
        self._schedule_commit()
        self._batch.connected.append(session_id)
        written = self._batch_written  # the previous session's last acks come before
        log.info(
            "session open: %s from %s%s",
            session_id,
            _peer(ws),
            " (replacing the previous session)" if previous else "",
        )
        if previous is not None:
            closing = asyncio.create_task(
                previous.ws.close(CLOSE_REPLACED, "replaced by a newer session")
            )
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        helpers = [
            asyncio.create_task(self._deliver(session, written)),
            asyncio.create_task(self._answer(session)),
        ]
        if self._idle_timeout > 0:
            helpers.append(asyncio.create_task(self._close_when_idle(session)))
        refusals = _Refusals()
        dropping = False
        try:
            await ws.send(ready_frame(session_id))
            session.wakeup.set()
            async for message in ws:
                if dropping:
                    continue  # read and drop until the peer's closing frame comes
                session.active = time.monotonic()
                if refusals.count(await self._on_frame(session, message)):
                    await session.answers.put(_TOO_MANY_REFUSALS)
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

    async def _authenticate(self, ws: ServerConnection) -> str | None:
        """Run the challenge; the session's id, or ``None`` after refusing it."""
        nonce = os.urandom(NONCE_BYTES)
        refusals = _Refusals()
        await ws.send(challenge_frame(nonce))
        async with asyncio.timeout(self._auth_timeout):
            while True:
                message = await ws.recv()
                if _size(message) > PRE_AUTH_FRAME_BYTES:
                    detail = f"frames before auth are limited to {PRE_AUTH_FRAME_BYTES} bytes"
                    await self._refuse(ws, ErrorCode.TOO_LARGE, detail)
                    await _close(ws, CLOSE_TOO_BIG, "authenticate first")
                    return None
                try:
                    frame = parse_frame(message)
                except FrameError as exc:
                    await self._refuse(ws, exc.code, exc.detail, exc.envelope_id)
                else:
                    if isinstance(frame, Auth):
                        try:
                            return verify_auth_frame(frame.frame, nonce)
                        except ProtocolError as exc:
                            await self._refuse(ws, ErrorCode.AUTH_FAILED, str(exc))
                            await _close(ws, CLOSE_AUTH_FAILED, "authentication failed")
                            return None
                    envelope_id = frame.envelope_id if isinstance(frame, Send) else None
                    detail = "authenticate first"
                    await self._refuse(ws, ErrorCode.NOT_AUTHENTICATED, detail, envelope_id)
                if refusals.count(True):
                    await _close(ws, _TOO_MANY_REFUSALS.code, _TOO_MANY_REFUSALS.reason)
                    return None

    async def _on_frame(self, session: _Session, message: str | bytes) -> bool:
        """Handle one frame of a session; ``True`` if it was refused."""
        if isinstance(message, str) and (send := read_send(message)) is not None:
            accepted = self._queue_send(
                session, send.envelope_id, send.sender, send.recipient, send.text
            )
            await session.answers.put(accepted)
            return isinstance(accepted, str)
        try:
            frame = parse_frame(message)
        except FrameError as exc:
            answer = self._refusal(session.id, exc.code, exc.detail, exc.envelope_id)
            await session.answers.put(answer)
            return True
        if isinstance(frame, Send):
            accepted = self._accept(session, frame)
            await session.answers.put(accepted)
            return isinstance(accepted, str)
        if isinstance(frame, Ack):
            session.acknowledged(frame.id)
            self._schedule_commit()
            self._batch.acks.append(Acknowledged(session.id, frame.id))
            return False
        detail = f"unexpected {type(frame).__name__.lower()} frame"
        await session.answers.put(self._refusal(session.id, ErrorCode.BAD_FRAME, detail))
        return True

    def _accept(self, session: _Session, frame: Send) -> str | _PendingSend:
        """Check an envelope and hand it to the next transaction; its pending answer, or
        the refusal to send at once."""
        try:
            envelope = parse_envelope(frame.envelope)
        except EnvelopeRefused as exc:
            code = (
                ErrorCode.TOO_LARGE
                if exc.reason is RefusalReason.TOO_LARGE
                else ErrorCode.BAD_ENVELOPE
            )
            return self._refusal(session.id, code, str(exc), frame.envelope_id)
        body = frame.text if frame.text is not None else encode_envelope(frame.envelope)
        return self._queue_send(session, envelope.id, envelope.sender, envelope.recipient, body)

    def _queue_send(
        self, session: _Session, envelope_id: str, sender: str, recipient: str, body: str
    ) -> str | _PendingSend:
        """Hand a checked envelope to the next transaction, unless its ``from`` is not the
        session's id; its pending answer, or the refusal to send at once."""
        if sender != session.id:
            detail = "from is not this session's id"
            return self._refusal(session.id, ErrorCode.BAD_ENVELOPE, detail, envelope_id)
        item = Incoming(recipient, sender, envelope_id, body, address=session.ws.address)
        results = self._schedule_commit()
        self._batch.puts.append(item)
        return _PendingSend(envelope_id, results, len(self._batch.puts) - 1)

    def _schedule_commit(self) -> asyncio.Future[list[PutResult | None]]:
        """Make sure the batch is written: by the next transaction, once the one being
        written (if any) is committed. Returns the future of its results."""
        self._batch_ready.set()
        if self._batch_written is None:
            self._batch_written = asyncio.get_running_loop().create_future()
        return self._batch_written

    async def _write_batches(self) -> None:
        """Write batches one after another, each in a worker thread, so that the event loop
        goes on reading frames (into the next batch) while the disk syncs: everything that
        arrives meanwhile, from every session, shares the next transaction."""
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
        if not batch or self._queue is None:
            return results
        seqs = [0] * len(batch.puts)
        try:
            async with self._disk:
                applied = await asyncio.to_thread(self._queue.apply, batch, _now_ms())
        except StoreError as exc:
            # Acks are lost with it: those envelopes come again, at-least-once holds.
            self.health.failed(exc)
        else:
            self.health.wrote()
            results, seqs = list(applied.results), applied.seqs
            if applied.removed < len(batch.acks):
                log.debug("%d acks for envelopes not queued", len(batch.acks) - applied.removed)
        for item, result, seq in zip(batch.puts, results, seqs, strict=True):
            recipient = self._sessions.get(item.recipient)
            if result is PutResult.QUEUED and recipient is not None:
                recipient.hand_over(Queued(seq, item.envelope_id, _size(item.body), item.body))
        return results

    async def _answer(self, session: _Session) -> None:
        """Send the answers to the session's frames in order, each once it is known;
        those known together (a batch's ``sent`` frames) go out in one write."""
        ws, answers = session.ws, session.answers
        while True:
            answer = await answers.get()
            texts: list[str] = []
            while True:
                if isinstance(answer, _Close):
                    if texts:
                        await ws.send_texts(texts)
                    await ws.close(answer.code, answer.reason)
                    return
                if isinstance(answer, _PendingSend):
                    if not answer.results.done():
                        if texts:  # the answers before it need not wait for its batch
                            await ws.send_texts(texts)
                            texts = []
                        await asyncio.shield(answer.results)  # shared: never cancel it
                    result = answer.results.result()[answer.index]
                    answer = self._send_answer(session.id, answer.envelope_id, result)
                texts.append(answer)
                if answers.empty():
                    break
                answer = answers.get_nowait()
            await ws.send_texts(texts)

    async def _close_when_idle(self, session: _Session) -> None:
        """Close the session once it has carried nothing for ``idle_timeout`` seconds."""
        while (left := session.active + self._idle_timeout - time.monotonic()) > 0:
            await asyncio.sleep(left)
        log.info("closing idle session %s", session.id)
        await session.ws.close(CLOSE_NORMAL, "idle")

    async def _deliver(
        self, session: _Session, written: asyncio.Future[list[PutResult | None]] | None
    ) -> None:
        """Stream the session's queue, oldest first, then whatever arrives for it; at most
        ``DELIVER_WINDOW`` deliveries wait for their acks at any time.

        Once the queue on disk is sent, envelopes committed for the session are handed
        over in memory (:meth:`_Session.hand_over`); when too many wait there, it reads
        from disk again."""
        assert self._queue is not None
        last_seq = 0
        session.window_open.set()
        if written is not None:
            await asyncio.shield(written)  # shared with other sessions: never cancel it

        async def send(items: deque[Queued]) -> None:
            """Send ``items`` (taking them from the front) as the window allows, those
            it allows at once in one write."""
            nonlocal last_seq
            while items:
                await session.window_open.wait()
                frames, size = [], 0
                while items and session.window_open.is_set() and size < WRITE_BYTES:
                    item = items.popleft()
                    if item.seq <= last_seq:
                        continue  # already sent from disk
                    frames.append(deliver_frame(item.body))
                    session.delivered(item.envelope_id, item.size)
                    size += item.size
                    last_seq = item.seq
                if frames:
                    await session.ws.send_texts(frames)
                    session.active = time.monotonic()

        try:
            while True:
                await session.wakeup.wait()
                session.wakeup.clear()
                if not session.caught_up:
                    while page := self._queue.pending(
                        session.id,
                        after_seq=last_seq,
                        limit=min(DELIVER_PAGE, DELIVER_WINDOW),
                        max_bytes=DELIVER_PAGE_BYTES,
                    ):
                        await send(deque(page))
                    session.caught_up = True
                await send(session.handed)
        except ConnectionClosed:
            return
        except StoreError as exc:
            self.health.failed(exc)
            log.debug("closing session %s: the relay queue failed", session.id)
            await session.ws.close(CLOSE_INTERNAL, "relay queue failed")

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

    def _refusal(self, who: str, code: str, detail: str, envelope_id: str | None = None) -> str:
        """Log a refused frame (never its contents, and not too often) and return the
        ``error`` frame for it."""
        self._warnings.warn("refused frame from %s: %s (%s)", who, code, detail)
        return error_frame(code, envelope_id, detail)

    async def _refuse(
        self, ws: ServerConnection, code: str, detail: str, envelope_id: str | None = None
    ) -> None:
        await ws.send(self._refusal(_peer(ws), code, detail, envelope_id))

    def _send_answer(self, who: str, envelope_id: str, result: PutResult | None) -> str:
        if result is None:
            detail = "the relay queue failed, try again"
            return self._refusal(who, STORE_FAILED, detail, envelope_id)
        if result in (PutResult.QUEUED, PutResult.DUPLICATE):
            return sent_frame(envelope_id)  # queued now, or already waiting: stored once
        return self._refusal(who, ErrorCode.QUEUE_FULL, _FULL_DETAILS[result], envelope_id)


_FULL_DETAILS: Final = {
    PutResult.FULL: "the recipient's queue is full",
    PutResult.SENDER_FULL: "your share of the recipient's queue is full",
    PutResult.STRANGERS_FULL: "the recipient's queue for senders it has not heard is full",
    PutResult.UNSEEN_FULL: "the recipient has never connected and its queue is full",
    PutResult.ADDRESS_FULL: "your address has as much queued as it may",
    PutResult.RELAY_FULL: "the relay is full",
}


async def _close(ws: ServerConnection, code: int, reason: str) -> None:
    """Close with ``code``, reading (and dropping) whatever the peer still sends meanwhile:
    its closing frame may be queued behind frames nobody reads any more."""
    drain = asyncio.create_task(_drop_frames(ws))
    try:
        await ws.close(code, reason)
    finally:
        drain.cancel()


async def _drop_frames(ws: ServerConnection) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for _ in ws:
            pass


def address_key(peer: object) -> str:
    """The address a connection counts against: its IP, or the /64 of an IPv6 address."""
    host = peer[0] if isinstance(peer, tuple) and peer else peer
    try:
        address = ipaddress.ip_address(str(host))
    except ValueError:
        return str(host)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _size(message: str | bytes) -> int:
    if isinstance(message, str):
        return message_bytes(message)
    return len(message)


def _peer(ws: ServerConnection) -> str:
    address = ws.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _now_ms() -> int:
    return int(time.time() * 1000)
