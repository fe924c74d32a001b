"""The relay client (protocol §4): keeps one authenticated session open and loses nothing.

Incoming envelopes go to a handler and are acknowledged only after it returns, so an
envelope whose processing was interrupted is delivered again on the next session.
Outgoing envelopes wait in an :class:`Outbox` until the relay answers ``sent``, and are
sent again, with the same id, after every reconnection. The client never opens an
envelope: the handler does.

Reconnection uses exponential backoff with jitter (``backoff_initial`` doubling to
``backoff_max``; each wait is drawn between half and all of the current delay). The delay
goes back to ``backoff_initial`` after a healthy session: one that authenticated and then
either carried traffic (a ``deliver`` or a ``sent``) or stayed up for
:data:`HEALTHY_SESSION_S` seconds. Liveness uses WebSocket ping/pong, so a dead
connection is noticed within ``ping_interval + ping_timeout`` seconds; a relay that does
not complete the handshake, challenge and ``ready`` within ``open_timeout`` is given up
on and retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidURI, WebSocketException
from websockets.uri import parse_uri

from bot.errors import RelayError, SkaldError
from bot.protocol.envelope import MAX_ENVELOPE_BYTES
from bot.protocol.identity import Identity
from bot.protocol.relayauth import auth_frame
from bot.relay.frames import (
    MAX_FRAME_BYTES,
    PERMANENT_SEND_ERRORS,
    Challenge,
    Deliver,
    Error,
    FrameError,
    Ready,
    Sent,
    ack_frame,
    auth_frame_text,
    encode_envelope,
    parse_frame,
    send_frame,
)

log = logging.getLogger(__name__)

HEALTHY_SESSION_S: Final = 10.0
CLOSE_TIMEOUT_S: Final = 5.0


class Outbox(Protocol):
    """Where outgoing envelopes wait until the relay confirms them with ``sent``."""

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        """Wire envelopes for ``relay_url`` not yet acknowledged by ``sent``, oldest first."""
        ...

    def outbox_mark_sent(self, envelope_id: str) -> None:
        """The relay took the envelope (or refused it for good): stop sending it."""
        ...


EnvelopeHandler = Callable[[dict[str, object]], Awaitable[None]]
"""Durably processes or durably refuses one delivered envelope; raising means "not now"."""


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
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._open_timeout = open_timeout
        self._wakeup = asyncio.Event()
        self._in_flight: set[str] = set()
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
        delay = self._backoff_initial
        while True:
            healthy = await self._session()
            if healthy:
                delay = self._backoff_initial
            wait = delay * random.uniform(0.5, 1.0)
            log.info("relay %s: retrying in %.2f s (%s)", self._url, wait, self._last_error)
            await asyncio.sleep(wait)
            delay = min(delay * 2, self._backoff_max)
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
                await self._authenticate(ws)
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

    async def _authenticate(self, ws: ClientConnection) -> None:
        challenge = parse_frame(await ws.recv())
        if not isinstance(challenge, Challenge):
            raise RelayError("the relay did not start with a challenge")
        await ws.send(auth_frame_text(auth_frame(self._identity, challenge.nonce)))
        answer = parse_frame(await ws.recv())
        if isinstance(answer, Error):
            raise RelayError(f"the relay refused authentication ({answer.code})")
        if not isinstance(answer, Ready) or answer.id != self._identity.id:
            raise RelayError("the relay did not confirm this session")

    async def _serve(self, ws: ClientConnection) -> bool:
        loop = asyncio.get_running_loop()
        ready_at = loop.time()
        traffic = False
        self._connected = True
        self._since = datetime.now(UTC)
        self._in_flight.clear()
        log.info("relay %s: connected as %s", self._url, self._identity.id)
        helpers = [asyncio.create_task(self._send_forever(ws))]
        if self._on_ready is not None:
            helpers.append(asyncio.create_task(self._call_on_ready(self._on_ready)))
        try:
            async for message in ws:
                traffic = await self._on_message(ws, message) or traffic
            self._last_error = f"connection closed (code {ws.close_code})"
        except ConnectionClosed as exc:
            self._last_error = f"connection closed (code {_close_code(exc)})"
        finally:
            await _cancel(helpers)
        return traffic or loop.time() - ready_at >= HEALTHY_SESSION_S

    async def _on_message(self, ws: ClientConnection, message: str | bytes) -> bool:
        """Handle one frame; whether it was traffic (a delivery or a confirmation)."""
        try:
            frame = parse_frame(message)
        except FrameError as exc:
            log.warning("relay %s: dropped a frame: %s", self._url, exc)
            return False
        if isinstance(frame, Deliver):
            await self._deliver(ws, frame)
            return True
        if isinstance(frame, Sent):
            self._in_flight.discard(frame.id)
            self._mark_sent(frame.id)
            return True
        if isinstance(frame, Error):
            self._on_error(frame)
        else:
            log.debug("relay %s: ignored a %s frame", self._url, type(frame).__name__)
        return False

    async def _deliver(self, ws: ClientConnection, frame: Deliver) -> None:
        try:
            await self._handler(frame.envelope)
        except Exception:
            # Not acknowledged: the relay delivers it again on the next session.
            log.exception("relay %s: handler failed for envelope %s", self._url, frame.envelope_id)
            return
        await ws.send(ack_frame(frame.envelope_id))

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
        asyncio.get_running_loop().call_later(self._backoff_max, self.wake)

    async def _send_forever(self, ws: ClientConnection) -> None:
        while True:
            self._wakeup.clear()
            try:
                pending = self._outbox.outbox_pending(self._url)
            except SkaldError as exc:
                log.error("relay %s: cannot read the outbox: %s", self._url, exc)
                asyncio.get_running_loop().call_later(self._backoff_max, self.wake)
                pending = []
            for envelope in pending:
                await self._send_one(ws, envelope)
            await self._wakeup.wait()

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
        except Exception:
            log.exception("relay %s: on_ready failed", self._url)

    def _go_offline(self) -> None:
        if self._connected or self._since is None:
            self._since = datetime.now(UTC)
        self._connected = False


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel helper tasks and wait for them, logging any that had failed."""
    for task in tasks:
        task.cancel()
    for result in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(result, Exception) and not isinstance(result, ConnectionClosed):
            log.error("relay session helper failed", exc_info=result)


def _close_code(exc: ConnectionClosed) -> int | None:
    frame = exc.rcvd or exc.sent
    return frame.code if frame is not None else None
