"""The relay client (protocol §4): keeps one authenticated session open and loses nothing.

Each session reads frames, hands deliveries to the handler (:mod:`bot.relay.incoming`:
in order, in batches, acknowledged only after the handler returns; a handler that fails
ends the session, and the envelope comes again on the next) and sends what waits in the
outbox (:mod:`bot.relay.outgoing`: until the relay answers ``sent``, again after every
reconnection). Handling runs apart from reading, so a slow handler does not stop the
client from answering keepalive. The client never opens an envelope: the handler does.
The relay's ``delivered`` receipts (a recipient acknowledged one of our envelopes) go to
``on_delivered`` when given, and are ignored otherwise; frame types the client does not
know are ignored.

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
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException
from websockets.uri import parse_uri

from bot.backoff import Backoff, Retries
from bot.errors import RelayError, SkaldError, StoreUnavailable
from bot.protocol.identity import Identity
from bot.protocol.relayauth import auth_frame
from bot.relay.frames import (
    DELIVER_WINDOW,
    MAX_FRAME_BYTES,
    Challenge,
    Deliver,
    Delivered,
    Error,
    FrameError,
    Ready,
    Sent,
    UnknownFrameType,
    auth_frame_text,
    parse_frame,
)
from bot.relay.incoming import Deliveries, EnvelopeHandler, SessionState, one_at_a_time
from bot.relay.outgoing import MemoryOutbox, Outbox, Sender

__all__ = ["EnvelopeHandler", "MemoryOutbox", "Outbox", "RelayClient", "RelayStatus",
           "authenticate", "one_at_a_time"]
log = logging.getLogger(__name__)

HEALTHY_SESSION_S: Final = 10.0
CLOSE_TIMEOUT_S: Final = 5.0


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
        on_delivered: Callable[[str], None] | None = None,
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
        self._deliveries = Deliveries(url, handler)
        self._sender = Sender(url, outbox, retry_after=backoff_max)
        self._on_ready = on_ready
        self._on_delivered = on_delivered
        self._backoff = Backoff(backoff_initial, backoff_max, jitter=True)
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._open_timeout = open_timeout
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
        self._sender.wake()

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
        log.info("relay %s: connected as %s", self._url, self._identity.id)
        session = SessionState()
        deliveries: asyncio.Queue[Deliver] = asyncio.Queue(DELIVER_WINDOW)
        self._sender.start_session()  # whatever waits in the outbox goes out first
        reader = asyncio.create_task(self._read(ws, deliveries, session))
        worker = asyncio.create_task(self._deliveries.serve(ws, deliveries, session))
        tasks = [reader, worker, asyncio.create_task(self._sender.serve(ws))]
        extra = []
        if self._on_ready is not None:
            extra.append(asyncio.create_task(self._call_on_ready(self._on_ready)))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if reader in done and session.handling:
                # The connection is gone: let the handler finish what it started (its ack
                # cannot be sent, so the envelope comes again and the replay set drops it).
                await asyncio.wait([worker])
        finally:
            self._sender.end_session()
            failures = await _cancel([*tasks, *extra])
        if failures:
            raise failures[0]
        if session.failure is not None:
            self._last_error = session.failure
            return False
        return session.traffic or loop.time() - ready_at >= HEALTHY_SESSION_S

    async def _read(
        self, ws: ClientConnection, deliveries: asyncio.Queue[Deliver], session: SessionState
    ) -> None:
        try:
            async for message in ws:
                await self._on_message(message, deliveries, session)
        except ConnectionClosed as exc:
            self._last_error = f"connection closed (code {_close_code(exc)})"
        else:
            self._last_error = f"connection closed (code {ws.close_code})"

    async def _on_message(
        self, message: str | bytes, deliveries: asyncio.Queue[Deliver], session: SessionState
    ) -> None:
        try:
            frame = parse_frame(message)
        except UnknownFrameType as exc:
            log.debug("relay %s: ignored a frame: %s", self._url, exc.detail)
            return
        except FrameError as exc:
            log.warning("relay %s: dropped a frame: %s", self._url, exc)
            return
        if isinstance(frame, Deliver):
            await deliveries.put(frame)
        elif isinstance(frame, Sent):
            self._sender.sent(frame.id)
            session.traffic = True
        elif isinstance(frame, Delivered):
            if self._on_delivered is not None:
                try:
                    self._on_delivered(frame.id)
                except Exception:  # a courtesy: never worth the session
                    log.exception("relay %s: on_delivered failed", self._url)
        elif isinstance(frame, Error):
            if frame.id is None:
                log.warning("relay %s: error %s (%s)", self._url, frame.code, frame.message)
            else:
                self._sender.refused(frame, frame.id)
        else:
            log.debug("relay %s: ignored a %s frame", self._url, type(frame).__name__)

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


def _close_code(exc: ConnectionClosed) -> int | None:
    frame = exc.rcvd or exc.sent
    return frame.code if frame is not None else None
