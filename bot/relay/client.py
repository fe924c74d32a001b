"""The relay client (protocol §4): keeps one authenticated session open and loses nothing.

Incoming envelopes go to a handler in order, all those that have arrived while it was busy
at once (up to :data:`MAX_BATCH` of them and :data:`MAX_BATCH_CIPHERTEXT`), and are
acknowledged only after it returns; one taken while it was idle waits for the frames
already behind it on the connection, so that envelopes the relay sent together are
handled (and committed) together. When it raises for several, they are handed over again
one at a time. A handler that raises for one envelope ends the session (code 1011),
so the envelope and everything after it are delivered again on the next session, after
the backoff (which keeps growing, up to ``backoff_max``, while the handler fails). When
the store fails (:class:`StoreUnavailable`: a full disk, an I/O error, a locked or
read-only database), the envelope is not handled yet and comes again as many times as it
takes: it applies by itself once the store can write again. Any other failure is the
envelope's own: one whose handler failed so :data:`MAX_HANDLER_ATTEMPTS` times is
acknowledged and dropped (logged as an error) so that it cannot block the queue forever.
Handling runs apart from reading, so a slow handler does not stop the client from
answering keepalive. Outgoing envelopes wait in an :class:`Outbox` until the relay answers
``sent``, and are sent again, with the same id, after every reconnection; envelopes
refused for now are retried ``backoff_max`` seconds later. The client never opens an
envelope: the handler does.

Reconnection uses exponential backoff with jitter (``backoff_initial`` doubling to
``backoff_max``; each wait is drawn between half and all of the current delay). The delay
goes back to ``backoff_initial`` after a healthy session: one that authenticated and then
either carried traffic (a delivery handled or a ``sent``) or stayed up for
:data:`HEALTHY_SESSION_S` seconds. Liveness uses WebSocket ping/pong, so a dead
connection is noticed within ``ping_interval + ping_timeout`` seconds; a relay that does
not complete the handshake, challenge and ``ready`` within ``open_timeout`` is given up
on and retried. Nothing but :meth:`RelayClient.stop` (or cancellation) ends
:meth:`RelayClient.run`: even an unexpected error is logged and followed by a reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import logging
import struct
import termios
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException
from websockets.uri import parse_uri

from bot.backoff import Backoff, Retries
from bot.errors import RelayError, SkaldError, StoreUnavailable
from bot.protocol.envelope import MAX_ENVELOPE_BYTES
from bot.protocol.identity import Identity
from bot.protocol.relayauth import auth_frame
from bot.relay.frames import (
    DELIVER_WINDOW,
    MAX_FRAME_BYTES,
    PERMANENT_SEND_ERRORS,
    Challenge,
    Deliver,
    Error,
    FrameError,
    Ready,
    Sent,
    UnknownFrameType,
    ack_frame,
    auth_frame_text,
    encode_envelope,
    parse_frame,
    send_frame,
)

log = logging.getLogger(__name__)

HEALTHY_SESSION_S: Final = 10.0
CLOSE_TIMEOUT_S: Final = 5.0
CLOSE_HANDLER_FAILED: Final = 1011
MAX_HANDLER_ATTEMPTS: Final = 5
"""Deliveries of one envelope whose handler failed before it is acknowledged and dropped
(a failing store does not count: the envelope waits for it)."""
REMEMBERED_FAILURES: Final = 1000
"""Envelopes whose failed attempts are remembered (the oldest are forgotten first)."""
MAX_BATCH: Final = 64
"""Deliveries handed to the handler at once, at most."""
MAX_BATCH_CIPHERTEXT: Final = 4 * 1024 * 1024
"""Ciphertext handed to the handler at once, at most (beyond the first delivery's): what
it opens together stays in memory together."""
CATCH_UP_PASSES: Final = 16
"""Loop passes a delivery waits at most for the frames behind it (each pass reads up to
256 KiB from the connection: 16 of them, a batch's ciphertext)."""


class Outbox(Protocol):
    """Where outgoing envelopes wait until the relay confirms them with ``sent``."""

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        """Wire envelopes for ``relay_url`` not yet acknowledged by ``sent``, oldest first."""
        ...

    def outbox_mark_sent(self, envelope_id: str) -> None:
        """The relay took the envelope (or refused it for good): stop sending it."""
        ...


EnvelopeHandler = Callable[[list[dict[str, object]]], Awaitable[None]]
"""Durably processes or durably refuses delivered envelopes, in order; raising means "not
now" (for one envelope: it comes back on the next session; at most
:data:`MAX_HANDLER_ATTEMPTS` times, unless it raised :class:`StoreUnavailable`)."""


def one_at_a_time(handle: Callable[[dict[str, object]], Awaitable[None]]) -> EnvelopeHandler:
    """A handler that hands each delivered envelope to ``handle`` in turn."""

    async def handler(envelopes: list[dict[str, object]]) -> None:
        for envelope in envelopes:
            await handle(envelope)

    return handler


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


class _Outcome(enum.Enum):
    HANDLED = "handled"
    FAILED = "failed"
    NOT_YET = "not yet"
    """The store failed: the envelope waits for it, however many times it takes."""
    DROPPED = "dropped"


@dataclass
class _SessionState:
    traffic: bool = False
    """A delivery was handled or an outgoing envelope confirmed: the session worked."""
    handling: bool = False
    """The handler is working on a delivery."""
    failed: bool = False
    """The handler failed: the session ends, and is no sign of a healthy connection."""


@dataclass(frozen=True)
class RelayStatus:
    """A snapshot of the connection, for status commands and logs."""

    url: str
    connected: bool
    since: datetime | None
    """When the current state (connected or not) began; ``None`` before the first try."""
    last_error: str | None
    reconnects: int


class RelayClient:
    """One identity's session with one relay, reconnecting until :meth:`stop`."""

    def __init__(
        self,
        url: str,
        identity: Identity,
        *,
        handler: EnvelopeHandler,
        outbox: Outbox,
        on_ready: Callable[[], Awaitable[None]] | None = None,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        ping_interval: float = 20.0,
        ping_timeout: float = 20.0,
        open_timeout: float = 10.0,
    ) -> None:
        try:
            parse_uri(url)
        except InvalidURI as exc:
            raise RelayError(f"not a relay URL: {url!r}") from exc
        self._url = url
        self._identity = identity
        self._handler = handler
        self._outbox = outbox
        self._on_ready = on_ready
        self._backoff = Backoff(backoff_initial, backoff_max, jitter=True)
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._open_timeout = open_timeout
        self._wakeup = asyncio.Event()
        self._in_flight: set[str] = set()
        self._failures: dict[str, int] = {}
        """Failed handler attempts per envelope id, oldest first."""
        self._retry: asyncio.TimerHandle | None = None
        self._main: asyncio.Task[None] | None = None
        self._connected = False
        self._since: datetime | None = None
        self._last_error: str | None = None
        self._reconnects = 0

    @property
    def url(self) -> str:
        return self._url

    @property
    def connected(self) -> bool:
        return self._connected

    def status(self) -> RelayStatus:
        return RelayStatus(
            url=self._url,
            connected=self._connected,
            since=self._since,
            last_error=self._last_error,
            reconnects=self._reconnects,
        )

    def wake(self) -> None:
        """New outbox entries: send them now if connected (else after the next ready)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Connect, serve and reconnect until :meth:`stop`; connection problems never
        escape (they are logged and retried)."""
        if self._main is not None:
            raise RelayError("this relay client is already running")
        self._main = asyncio.create_task(self._reconnect_forever())
        try:
            await self._main
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            # Otherwise stop() cancelled the loop: a normal end.
        finally:
            self._main = None

    async def stop(self) -> None:
        """Close the session and make :meth:`run` return. Must not be called from the
        handler or ``on_ready``."""
        main = self._main
        if main is None:
            return
        main.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await main

    async def _reconnect_forever(self) -> None:
        retries = Retries(self._backoff)
        while True:
            try:
                healthy = await self._session()
            except Exception:
                # A bug, not a network problem: log it and keep the client alive.
                log.exception("relay %s: session failed unexpectedly", self._url)
                self._last_error = "internal error (see the log)"
                healthy = False
            if healthy:
                retries.reset()
            wait = retries.next_delay()
            log.info("relay %s: retrying in %.2f s (%s)", self._url, wait, self._last_error)
            await asyncio.sleep(wait)
            self._reconnects += 1

    async def _session(self) -> bool:
        """One connection from opening to closing; whether it was healthy."""
        ws: ClientConnection | None = None
        try:
            async with asyncio.timeout(self._open_timeout):
                ws = await connect(
                    self._url,
                    open_timeout=None,
                    ping_interval=self._ping_interval,
                    ping_timeout=self._ping_timeout,
                    close_timeout=CLOSE_TIMEOUT_S,
                    max_size=MAX_FRAME_BYTES,
                    compression=None,  # ciphertext: deflate costs CPU and saves little
                )
                await authenticate(ws, self._identity)
            return await self._serve(ws)
        except TimeoutError:
            self._last_error = "timed out waiting for the relay"
        except ConnectionClosed as exc:
            self._last_error = f"connection closed (code {_close_code(exc)})"
        except (OSError, WebSocketException, SkaldError) as exc:
            self._last_error = str(exc) or type(exc).__name__
        finally:
            self._go_offline()
            if ws is not None:
                await ws.close()
        return False

    async def _serve(self, ws: ClientConnection) -> bool:
        """Read, handle deliveries and send, each in its own task, until one of them ends;
        whether the session was healthy (it carried traffic or stayed up long enough).

        Deliveries are handled in order by one task fed through a bounded queue, so the
        reader keeps reading frames (and with them the pongs keepalive waits for) while
        a handler is slow.
        """
        loop = asyncio.get_running_loop()
        ready_at = loop.time()
        self._connected = True
        self._since = datetime.now(UTC)
        self._in_flight.clear()
        log.info("relay %s: connected as %s", self._url, self._identity.id)
        session = _SessionState()
        deliveries: asyncio.Queue[Deliver] = asyncio.Queue(DELIVER_WINDOW)
        reader = asyncio.create_task(self._read(ws, deliveries, session))
        worker = asyncio.create_task(self._handle_deliveries(ws, deliveries, session))
        tasks = [reader, worker, asyncio.create_task(self._send_forever(ws))]
        extra = []
        if self._on_ready is not None:
            extra.append(asyncio.create_task(self._call_on_ready(self._on_ready)))
        self._wakeup.set()  # whatever waits in the outbox goes out first
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if reader in done and session.handling:
                # The connection is gone: let the handler finish what it started (its ack
                # cannot be sent, so the envelope comes again and the replay set drops it).
                await asyncio.wait([worker])
        finally:
            self._cancel_retry()
            failures = await _cancel([*tasks, *extra])
        if failures:
            raise failures[0]
        if session.failed:
            return False
        return session.traffic or loop.time() - ready_at >= HEALTHY_SESSION_S

    async def _read(
        self, ws: ClientConnection, deliveries: asyncio.Queue[Deliver], session: _SessionState
    ) -> None:
        try:
            async for message in ws:
                await self._on_message(message, deliveries, session)
        except ConnectionClosed as exc:
            self._last_error = f"connection closed (code {_close_code(exc)})"
        else:
            self._last_error = f"connection closed (code {ws.close_code})"

    async def _on_message(
        self, message: str | bytes, deliveries: asyncio.Queue[Deliver], session: _SessionState
    ) -> None:
        try:
            frame = parse_frame(message)
        except UnknownFrameType as exc:
            # Frame types added later (``delivered``, a courtesy to the sender) are ignored.
            log.debug("relay %s: ignored a frame: %s", self._url, exc.detail)
            return
        except FrameError as exc:
            log.warning("relay %s: dropped a frame: %s", self._url, exc)
            return
        if isinstance(frame, Deliver):
            await deliveries.put(frame)
        elif isinstance(frame, Sent):
            self._in_flight.discard(frame.id)
            self._mark_sent(frame.id)
            session.traffic = True
        elif isinstance(frame, Error):
            self._on_error(frame)
        else:
            log.debug("relay %s: ignored a %s frame", self._url, type(frame).__name__)

    async def _handle_deliveries(
        self, ws: ClientConnection, deliveries: asyncio.Queue[Deliver], session: _SessionState
    ) -> None:
        """Hand deliveries to the handler in order, acknowledging each once it returns.

        A failed handler ends the session (1011): everything not acknowledged is delivered
        again on the next one, after the backoff. An envelope whose handler failed
        :data:`MAX_HANDLER_ATTEMPTS` times (the store aside) is acknowledged and dropped.
        """
        held: Deliver | None = None
        """A delivery taken from the queue that did not fit in the batch before."""
        while True:
            if held is None:
                held = await deliveries.get()
                await _catch_up(ws, deliveries)
            batch, held = _gather(held, deliveries)
            session.handling = True
            try:
                outcomes = await self._handle_batch(batch)
            finally:
                session.handling = False
            for frame, outcome in zip(batch, outcomes, strict=False):
                if outcome in (_Outcome.FAILED, _Outcome.NOT_YET):
                    session.failed = True
                    await ws.close(CLOSE_HANDLER_FAILED, "handler failed")
                    self._last_error = (
                        f"the store failed handling envelope {frame.envelope_id}"
                        if outcome is _Outcome.NOT_YET
                        else f"handler failed for envelope {frame.envelope_id}")
                    return
                await ws.send(ack_frame(frame.envelope_id))
                if outcome is _Outcome.HANDLED:
                    session.traffic = True

    async def _handle_batch(self, batch: list[Deliver]) -> list[_Outcome]:
        """The handler's outcome for each delivery, in order, up to the first that failed:
        all of them at once, or one at a time when that fails (unless the store failed:
        then none of them can be handled yet)."""
        if len(batch) > 1:
            try:
                await self._handler([frame.envelope for frame in batch])
            except StoreUnavailable as exc:
                self._store_failed(batch[0].envelope_id, exc)
                return [_Outcome.NOT_YET]
            except Exception as exc:
                log.warning("relay %s: handling %d deliveries at once failed (%s); "
                            "handling them one at a time", self._url, len(batch),
                            type(exc).__name__)
            else:
                for frame in batch:
                    self._failures.pop(frame.envelope_id, None)
                return [_Outcome.HANDLED] * len(batch)
        outcomes = []
        for frame in batch:
            outcomes.append(await self._handle_one(frame))
            if outcomes[-1] in (_Outcome.FAILED, _Outcome.NOT_YET):
                break
        return outcomes

    async def _handle_one(self, frame: Deliver) -> _Outcome:
        envelope_id = frame.envelope_id
        try:
            await self._handler([frame.envelope])
        except StoreUnavailable as exc:
            self._store_failed(envelope_id, exc)
            return _Outcome.NOT_YET
        except Exception:
            attempts = self._failures.pop(envelope_id, 0) + 1
            log.exception(
                "relay %s: handler failed for envelope %s (attempt %d of %d)",
                self._url,
                envelope_id,
                attempts,
                MAX_HANDLER_ATTEMPTS,
            )
            if attempts >= MAX_HANDLER_ATTEMPTS:
                log.error(
                    "relay %s: envelope %s dropped after %d failed attempts",
                    self._url,
                    envelope_id,
                    attempts,
                )
                return _Outcome.DROPPED
            self._failures[envelope_id] = attempts
            while len(self._failures) > REMEMBERED_FAILURES:
                del self._failures[next(iter(self._failures))]
            return _Outcome.FAILED
        self._failures.pop(envelope_id, None)
        return _Outcome.HANDLED

    def _store_failed(self, envelope_id: str, exc: StoreUnavailable) -> None:
        log.warning("relay %s: envelope %s not handled yet, the store failed (%s); it comes "
                    "again after the backoff", self._url, envelope_id, exc)

    def _on_error(self, frame: Error) -> None:
        if frame.id is None:
            log.warning("relay %s: error %s (%s)", self._url, frame.code, frame.message)
            return
        self._in_flight.discard(frame.id)
        if frame.code in PERMANENT_SEND_ERRORS:
            log.warning(
                "relay %s: refused envelope %s for good: %s", self._url, frame.id, frame.code
            )
            self._mark_sent(frame.id)
            return
        log.warning(
            "relay %s: envelope %s not taken (%s), will retry", self._url, frame.id, frame.code
        )
        self._retry_later()

    async def _send_forever(self, ws: ClientConnection) -> None:
        """Send what waits in the outbox each time :meth:`wake` (or the retry timer) says
        there may be something new; envelopes already in flight are skipped."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            for envelope in self._load_outbox():
                await self._send_one(ws, envelope)

    def _load_outbox(self) -> list[dict[str, object]]:
        try:
            return self._outbox.outbox_pending(self._url)
        except SkaldError as exc:
            log.error("relay %s: cannot read the outbox: %s", self._url, exc)
            self._retry_later()
            return []

    def _retry_later(self) -> None:
        """Look at the outbox again after ``backoff_max``: one timer for any number of
        envelopes refused for now."""
        if self._retry is None:
            loop = asyncio.get_running_loop()
            self._retry = loop.call_later(self._backoff.max_s, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self.wake()

    def _cancel_retry(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

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

    async def _call_on_ready(self, on_ready: Callable[[], Awaitable[None]]) -> None:
        try:
            await on_ready()
        except StoreUnavailable as exc:
            log.warning("relay %s: on_ready failed, the store failed (%s)", self._url, exc)
        except Exception:
            log.exception("relay %s: on_ready failed", self._url)

    def _go_offline(self) -> None:
        if self._connected or self._since is None:
            self._since = datetime.now(UTC)
        self._connected = False


async def authenticate(ws: ClientConnection, identity: Identity) -> None:
    """The relay handshake on a fresh connection: the relay's challenge, our signed
    ``auth``, its ``ready`` for our id. Raises :class:`RelayError` saying what went wrong."""
    challenge = parse_frame(await ws.recv())
    if not isinstance(challenge, Challenge):
        raise RelayError("the relay did not start with a challenge")
    await ws.send(auth_frame_text(auth_frame(identity, challenge.nonce)))
    answer = parse_frame(await ws.recv())
    if isinstance(answer, Error):
        raise RelayError(f"the relay refused authentication ({answer.code})")
    if not isinstance(answer, Ready) or answer.id != identity.id:
        raise RelayError("the relay did not confirm this session")


async def _cancel(tasks: list[asyncio.Task[None]]) -> list[Exception]:
    """Cancel a session's tasks and wait for them; the unexpected errors they ended with
    (a closed connection is expected)."""
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return [
        result
        for result in results
        if isinstance(result, Exception) and not isinstance(result, ConnectionClosed)
    ]


async def _catch_up(ws: ClientConnection, deliveries: asyncio.Queue[Deliver]) -> None:
    """While bytes wait unread on the connection (frames right behind the delivery just
    taken), let the reader take them, up to a batch: a pass of the loop each."""
    passes = 0
    while passes < CATCH_UP_PASSES and deliveries.qsize() < MAX_BATCH and _unread_bytes(ws):
        await asyncio.sleep(0)
        passes += 1
    if passes:
        await asyncio.sleep(0)  # the reader queues the frame the last read completed


def _unread_bytes(ws: ClientConnection) -> int:
    """Bytes received on the connection's socket and not yet read (0 if it cannot tell)."""
    sock = ws.transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        unread = fcntl.ioctl(sock.fileno(), termios.FIONREAD, bytes(4))
    except OSError:
        return 0
    return int(struct.unpack("i", unread)[0])


def _gather(
    first: Deliver, deliveries: asyncio.Queue[Deliver]
) -> tuple[list[Deliver], Deliver | None]:
    """``first`` and the deliveries queued behind it, within :data:`MAX_BATCH` and
    :data:`MAX_BATCH_CIPHERTEXT`; and the one taken from the queue that did not fit."""
    batch, size = [first], 0
    while len(batch) < MAX_BATCH and not deliveries.empty():
        frame = deliveries.get_nowait()
        ct = frame.envelope.get("ct")
        size += len(ct) if isinstance(ct, str) else 0
        if size > MAX_BATCH_CIPHERTEXT:
            return batch, frame
        batch.append(frame)
    return batch, None


def _close_code(exc: ConnectionClosed) -> int | None:
    frame = exc.rcvd or exc.sent
    return frame.code if frame is not None else None
