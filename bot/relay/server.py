"""The built-in zero-trust relay (protocol §4): routes sealed envelopes between ids.

It authenticates each session with an Ed25519 challenge, checks an envelope's structure,
its ``from`` against the session's id and its size (1 MiB), and queues it for its
recipient in SQLite (WAL, under ``--data``) until the recipient acknowledges it. It never
holds a private key and never parses ``ct``.

Defaults: one session per id (a newer one replaces the older, closed with code 4409);
envelopes older than :data:`DEFAULT_MAX_AGE_S` (7 days) are purged; a client must
authenticate within :data:`AUTH_TIMEOUT_S` seconds. Delivery is at-least-once:
unacknowledged envelopes are delivered again, oldest first, on the recipient's next
session.

Anyone can make an identity and authenticate, so what strangers can make the relay hold is
bounded (a sender gets ``queue_full`` beyond a limit, and retries later):

- per recipient: ``queue_cap`` envelopes (10 000) and ``queue_bytes`` (256 MiB);
- per (sender, recipient): ``sender_queue_cap`` envelopes (2 500) and ``sender_bytes``
  (64 MiB), so that one sender cannot fill a recipient's queue and starve the others;
- for the whole relay: ``total_bytes`` (2 GiB) of queued envelopes;
- in memory: a session reads at most :data:`MAX_QUEUED_FRAMES` frames ahead; before
  authentication a frame may hold :data:`PRE_AUTH_FRAME_BYTES` (a larger one is refused
  with ``too_large`` and the connection closed, 1009); deliveries are loaded from disk
  :data:`DELIVER_PAGE_BYTES` at a time, and at most ``DELIVER_WINDOW`` (256) of them,
  and :data:`DELIVER_WINDOW_BYTES`, wait unacknowledged per session.

``sent`` is answered only once the envelope is committed (``synchronous=FULL``); envelopes
arriving together share one transaction, and so do acknowledgements, so a burst costs one
disk sync rather than one per envelope. Answers keep the order of the frames they answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Final
from urllib.parse import urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

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
    ready_frame,
    sent_frame,
)
from bot.relay.queue import (
    DEFAULT_RECIPIENT_BYTES,
    DEFAULT_RECIPIENT_COUNT,
    DEFAULT_SENDER_BYTES,
    DEFAULT_SENDER_COUNT,
    DEFAULT_TOTAL_BYTES,
    Incoming,
    PutResult,
    QueueLimits,
    RelayQueue,
)

log = logging.getLogger(__name__)

PATH: Final = "/v1/connect"
DEFAULT_QUEUE_CAP: Final = DEFAULT_RECIPIENT_COUNT
DEFAULT_QUEUE_BYTES: Final = DEFAULT_RECIPIENT_BYTES
DEFAULT_SENDER_QUEUE_CAP: Final = DEFAULT_SENDER_COUNT
DEFAULT_MAX_AGE_S: Final = 7 * 24 * 3600
AUTH_TIMEOUT_S: Final = 10.0
PURGE_INTERVAL_S: Final = 600.0
DELIVER_PAGE: Final = 256
"""Envelopes looked up at once when delivering (ids and sizes only)."""
DELIVER_PAGE_BYTES: Final = 4 * 1024 * 1024
"""Bodies loaded from disk at once when delivering (at least one envelope)."""
DELIVER_WINDOW_BYTES: Final = 8 * 1024 * 1024
"""Bytes of deliveries a session may have unacknowledged (besides ``DELIVER_WINDOW``)."""
MAX_QUEUED_FRAMES: Final = 4
"""Frames websockets reads ahead of the session (its ``max_queue``)."""
PRE_AUTH_FRAME_BYTES: Final = 4096
"""The largest frame answered before authentication (an ``auth`` frame is ~200 bytes)."""
PRE_AUTH_MESSAGE_BYTES: Final = 64 * 1024
"""Before authentication, websockets itself closes (1009) on a larger message."""
ANSWER_BACKLOG: Final = 1000
"""Unanswered frames per session before the relay stops reading from it (backpressure)."""

CLOSE_AUTH_FAILED: Final = 4401
CLOSE_AUTH_TIMEOUT: Final = 4408
CLOSE_REPLACED: Final = 4409
CLOSE_INTERNAL: Final = 1011
CLOSE_TOO_BIG: Final = 1009

STORE_FAILED: Final = "unavailable"
"""Error code for a transient failure of the relay's own queue: the sender retries."""


@dataclass(eq=False)
class _Session:
    """One authenticated connection; ``wakeup`` is set when something is queued for it."""

    ws: ServerConnection
    id: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    acks: list[str] = field(default_factory=list)
    """Acknowledged ids not yet deleted: acks arriving together share one transaction."""
    answers: asyncio.Queue[str | _PendingSend] = field(
        default_factory=lambda: asyncio.Queue(ANSWER_BACKLOG)
    )
    """Answers to the session's frames, in the order the frames came."""
    unacked: list[tuple[str, int]] = field(default_factory=list)
    """Ids and sizes delivered in this session and not acknowledged yet, oldest first."""
    unacked_bytes: int = 0
    window_open: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while another delivery may be sent; once the window is full, it opens again
    when half of it is acknowledged (fewer wake-ups than one per ack)."""

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
    """A ``send`` waiting for the transaction that queues it; ``None`` if the store failed."""

    envelope_id: str
    result: asyncio.Future[PutResult | None]


class RelayServer:
    """The relay, listening on ``ws://host:port/v1/connect``; use ``port=0`` in tests."""

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        queue_cap: int = DEFAULT_QUEUE_CAP,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
        sender_queue_cap: int = DEFAULT_SENDER_QUEUE_CAP,
        sender_bytes: int = DEFAULT_SENDER_BYTES,
        total_bytes: int = DEFAULT_TOTAL_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        auth_timeout: float = AUTH_TIMEOUT_S,
        ping_interval: float | None = 20.0,
        ping_timeout: float | None = 20.0,
    ) -> None:
        self._data_dir = data_dir
        self._host = host
        self._port = port
        self._limits = QueueLimits(
            recipient_count=queue_cap,
            recipient_bytes=queue_bytes,
            sender_count=min(sender_queue_cap, queue_cap),
            sender_bytes=min(sender_bytes, queue_bytes),
            total_bytes=total_bytes,
        )
        self._max_age_ms = int(max_age_s * 1000)
        self._auth_timeout = auth_timeout
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._queue: RelayQueue | None = None
        self._server: Server | None = None
        self._purger: asyncio.Task[None] | None = None
        self._sessions: dict[str, _Session] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._incoming: list[tuple[Incoming, asyncio.Future[PutResult | None]]] = []

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
        self._purge()
        try:
            self._server = await serve(
                self._handle,
                self._host,
                self._port,
                process_request=_only_relay_path,
                max_size=PRE_AUTH_MESSAGE_BYTES,  # raised once the session is authenticated
                max_queue=MAX_QUEUED_FRAMES,
                compression=None,  # ciphertext: deflate costs CPU and saves little
                ping_interval=self._ping_interval,
                ping_timeout=self._ping_timeout,
                server_header=None,
            )
        except OSError as exc:
            self._queue.close()
            self._queue = None
            raise RelayError(f"cannot listen on {self._host}:{self._port}: {exc}") from exc
        self._purger = asyncio.create_task(self._purge_periodically())

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
        removed = self._queue.purge(_now_ms() - self._max_age_ms)
        if removed:
            log.info("purged %d expired envelopes", removed)

    async def _purge_periodically(self) -> None:
        interval = min(PURGE_INTERVAL_S, max(self._max_age_ms / 1000, 1.0))
        while True:
            await asyncio.sleep(interval)
            try:
                self._purge()
            except StoreError as exc:
                log.error("relay queue purge failed: %s", exc)

    async def _handle(self, ws: ServerConnection) -> None:
        try:
            session_id = await self._authenticate(ws)
        except (ConnectionClosed, TimeoutError):
            log.info("connection from %s closed before authentication", _peer(ws))
            await ws.close(CLOSE_AUTH_TIMEOUT, "authentication timed out")
            return
        if session_id is None:
            return
        ws.protocol.max_message_size = MAX_FRAME_BYTES
        session = _Session(ws, session_id)
        previous = self._sessions.get(session_id)
        self._sessions[session_id] = session
        replacing = " (replacing the previous session)" if previous else ""
        log.info("session open: %s from %s%s", session_id, _peer(ws), replacing)
        if previous is not None:
            closing = asyncio.create_task(
                previous.ws.close(CLOSE_REPLACED, "replaced by a newer session")
            )
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        helpers = [
            asyncio.create_task(self._deliver(session)),
            asyncio.create_task(self._answer(session)),
        ]
        try:
            await ws.send(ready_frame(session_id))
            session.wakeup.set()
            async for message in ws:
                await self._on_frame(session, message)
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
        await ws.send(challenge_frame(nonce))
        async with asyncio.timeout(self._auth_timeout):
            while True:
                message = await ws.recv()
                if _size(message) > PRE_AUTH_FRAME_BYTES:
                    detail = f"frames before auth are limited to {PRE_AUTH_FRAME_BYTES} bytes"
                    await _refuse(ws, ErrorCode.TOO_LARGE, detail)
                    await ws.close(CLOSE_TOO_BIG, "authenticate first")
                    return None
                try:
                    frame = parse_frame(message)
                except FrameError as exc:
                    await _refuse(ws, exc.code, exc.detail, exc.envelope_id)
                    continue
                if not isinstance(frame, Auth):
                    envelope_id = frame.envelope_id if isinstance(frame, Send) else None
                    detail = "authenticate first"
                    await _refuse(ws, ErrorCode.NOT_AUTHENTICATED, detail, envelope_id)
                    continue
                try:
                    return verify_auth_frame(frame.frame, nonce)
                except ProtocolError as exc:
                    await _refuse(ws, ErrorCode.AUTH_FAILED, str(exc))
                    await ws.close(CLOSE_AUTH_FAILED, "authentication failed")
                    return None

    async def _on_frame(self, session: _Session, message: str | bytes) -> None:
        try:
            frame = parse_frame(message)
        except FrameError as exc:
            answer = _refusal(session.id, exc.code, exc.detail, exc.envelope_id)
            await session.answers.put(answer)
            return
        if isinstance(frame, Send):
            await session.answers.put(self._accept(session, frame))
        elif isinstance(frame, Ack):
            session.acknowledged(frame.id)
            self._acknowledge(session, frame.id)
        else:
            detail = f"unexpected {type(frame).__name__.lower()} frame"
            await session.answers.put(_refusal(session.id, ErrorCode.BAD_FRAME, detail))

    def _accept(self, session: _Session, frame: Send) -> str | _PendingSend:
        """Check an envelope and hand it to the next queue transaction; the answer."""
        try:
            envelope = parse_envelope(frame.envelope)
        except EnvelopeRefused as exc:
            code = (
                ErrorCode.TOO_LARGE
                if exc.reason is RefusalReason.TOO_LARGE
                else ErrorCode.BAD_ENVELOPE
            )
            return _refusal(session.id, code, str(exc), frame.envelope_id)
        if envelope.sender != session.id:
            detail = "from is not this session's id"
            return _refusal(session.id, ErrorCode.BAD_ENVELOPE, detail, envelope.id)
        body = encode_envelope(frame.envelope)
        item = Incoming(envelope.recipient, envelope.sender, envelope.id, body)
        future: asyncio.Future[PutResult | None] = asyncio.get_running_loop().create_future()
        if not self._incoming:
            asyncio.get_running_loop().call_soon(self._commit_incoming)
        self._incoming.append((item, future))
        return _PendingSend(envelope.id, future)

    def _commit_incoming(self) -> None:
        """Queue every envelope accepted since the last call in one transaction: envelopes
        arriving together share one disk sync."""
        batch, self._incoming = self._incoming, []
        results: list[PutResult | None] = [None] * len(batch)
        if self._queue is not None:
            try:
                results = list(self._queue.put_many([item for item, _ in batch], _now_ms()))
            except StoreError as exc:
                log.error("relay queue failed: %s", exc)
        for (item, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)
            recipient = self._sessions.get(item.recipient)
            if result is PutResult.QUEUED and recipient is not None:
                recipient.wakeup.set()

    async def _answer(self, session: _Session) -> None:
        """Send the answers to the session's frames in order, each once it is known."""
        while True:
            answer = await session.answers.get()
            if isinstance(answer, _PendingSend):
                answer = _send_answer(session.id, answer.envelope_id, await answer.result)
            await session.ws.send(answer)

    def _acknowledge(self, session: _Session, envelope_id: str) -> None:
        if not session.acks:
            asyncio.get_running_loop().call_soon(self._delete_acknowledged, session)
        session.acks.append(envelope_id)

    def _delete_acknowledged(self, session: _Session) -> None:
        envelope_ids, session.acks = session.acks, []
        if self._queue is None:
            return  # closing: the envelopes are delivered again, at-least-once holds
        try:
            removed = self._queue.ack_many(session.id, envelope_ids)
        except StoreError as exc:
            log.error("relay queue failed: %s", exc)
            return
        if removed < len(envelope_ids):
            log.debug(
                "%d acks from %s for envelopes not queued", len(envelope_ids) - removed, session.id
            )

    async def _deliver(self, session: _Session) -> None:
        """Stream the session's queue, oldest first, then whatever arrives for it; at most
        ``DELIVER_WINDOW`` deliveries wait for their acks at any time."""
        assert self._queue is not None
        last_seq = 0
        session.window_open.set()
        try:
            while True:
                await session.wakeup.wait()
                session.wakeup.clear()
                while page := self._queue.pending(
                    session.id,
                    after_seq=last_seq,
                    limit=min(DELIVER_PAGE, DELIVER_WINDOW),
                    max_bytes=DELIVER_PAGE_BYTES,
                ):
                    for item in page:
                        await session.window_open.wait()
                        await session.ws.send(deliver_frame(item.body))
                        session.delivered(item.envelope_id, item.size)
                        last_seq = item.seq
        except ConnectionClosed:
            return
        except StoreError as exc:
            log.error("relay queue failed, closing session %s: %s", session.id, exc)
            await session.ws.close(CLOSE_INTERNAL, "relay queue failed")


def _only_relay_path(connection: ServerConnection, request: Request) -> Response | None:
    if urlsplit(request.path).path != PATH:
        return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
    return None


def _refusal(who: str, code: str, detail: str, envelope_id: str | None = None) -> str:
    """Log a refused frame (never its contents) and return the ``error`` frame for it."""
    log.warning("refused frame from %s: %s (%s)", who, code, detail)
    return error_frame(code, envelope_id, detail)


async def _refuse(
    ws: ServerConnection, code: str, detail: str, envelope_id: str | None = None
) -> None:
    await ws.send(_refusal(_peer(ws), code, detail, envelope_id))


def _send_answer(who: str, envelope_id: str, result: PutResult | None) -> str:
    if result is None:
        return _refusal(who, STORE_FAILED, "the relay queue failed, try again", envelope_id)
    if result in (PutResult.QUEUED, PutResult.DUPLICATE):
        return sent_frame(envelope_id)  # queued now, or already waiting: stored once
    return _refusal(who, ErrorCode.QUEUE_FULL, _FULL_DETAILS[result], envelope_id)


_FULL_DETAILS: Final = {
    PutResult.FULL: "the recipient's queue is full",
    PutResult.SENDER_FULL: "your share of the recipient's queue is full",
    PutResult.RELAY_FULL: "the relay is full",
}


def _size(message: str | bytes) -> int:
    return len(message.encode("utf-8", "surrogatepass") if isinstance(message, str) else message)


def _peer(ws: ServerConnection) -> str:
    address = ws.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _now_ms() -> int:
    return int(time.time() * 1000)


def relay_command(args: argparse.Namespace) -> int:
    """``skald-telegram relay``: serve until SIGTERM or Ctrl-C, then shut down cleanly."""
    relay = RelayServer(
        Path(args.data),
        host=args.host,
        port=args.port,
        queue_cap=_given(args.queue_cap, DEFAULT_QUEUE_CAP),
        queue_bytes=_given(args.queue_bytes, DEFAULT_QUEUE_BYTES),
        sender_queue_cap=_given(args.sender_queue_cap, DEFAULT_SENDER_QUEUE_CAP),
        sender_bytes=_given(args.sender_bytes, DEFAULT_SENDER_BYTES),
        total_bytes=_given(args.total_bytes, DEFAULT_TOTAL_BYTES),
        max_age_s=_given(args.max_age, DEFAULT_MAX_AGE_S),
    )
    asyncio.run(_serve_until_signalled(relay))
    return 0


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


async def _serve_until_signalled(relay: RelayServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with relay:
        log.info("relay listening on %s", relay.url)
        await stop.wait()
        log.info("relay shutting down")
