"""The relay client's incoming side: deliveries handed to the handler in order, several at
once when they queue up, and acknowledged only once it returns.

One taken while the handler was idle waits for the frames already behind it on the
connection, so that envelopes the relay sent together are handled (and committed)
together. When the handler raises for several, they are handed over again one at a time;
when it raises for one, the session ends (code 1011) and the envelope comes again on the
next. A store that fails (:class:`StoreUnavailable`) makes the envelope wait as many times
as it takes; any other failure is the envelope's own, and one that failed
:data:`MAX_HANDLER_ATTEMPTS` times is acknowledged and dropped so that it cannot block the
queue forever.
"""

from __future__ import annotations

import asyncio
import enum
import fcntl
import logging
import struct
import termios
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from websockets.asyncio.client import ClientConnection
from websockets.frames import CloseCode

from bot.errors import StoreUnavailable
from bot.relay.frames import Deliver, ack_frame

log = logging.getLogger(__name__)

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


@dataclass
class SessionState:
    """What one session has shown so far."""

    traffic: bool = False
    """A delivery was handled or an outgoing envelope confirmed: the session worked."""
    handling: bool = False
    """The handler is working on a delivery."""
    failure: str | None = None
    """Why the handler failed: the session ends, and is no sign of a healthy connection."""


class _Outcome(enum.Enum):
    HANDLED = "handled"
    FAILED = "failed"
    NOT_YET = "not yet"
    """The store failed: the envelope waits for it, however many times it takes."""
    DROPPED = "dropped"


class Deliveries:
    """Hands one identity's deliveries to its handler, session after session, and
    remembers the envelopes whose handler failed."""

    def __init__(self, url: str, handler: EnvelopeHandler) -> None:
        self._url = url
        self._handler = handler
        self._failures: dict[str, int] = {}
        """Failed handler attempts per envelope id, oldest first."""

    async def serve(
        self, ws: ClientConnection, deliveries: asyncio.Queue[Deliver], session: SessionState
    ) -> None:
        """Hand deliveries to the handler in order, acknowledging each once it returns,
        until the handler fails (then the session is closed with 1011)."""
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
                    session.failure = (
                        f"the store failed handling envelope {frame.envelope_id}"
                        if outcome is _Outcome.NOT_YET
                        else f"handler failed for envelope {frame.envelope_id}")
                    await ws.close(CloseCode.INTERNAL_ERROR, "handler failed")
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
