"""The relay's hold on websockets and the socket below it: where it departs from the
library's defaults so that a stranger's connections cost as little as possible.

- :class:`RelayConnection` counts a connection from the moment it is accepted (closing it
  at once over a limit) and writes frames produced together in one system call;
- :class:`Listener` pauses accepting for a second when the process runs out of file
  descriptors, rather than retrying in a loop, and :class:`QuietAcceptPauses` keeps
  asyncio from logging each such pause again;
- :class:`TransportLog` drops websockets' line for every connection opened and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Final

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from bot.errors import RelayError
from bot.relay.admission import Admission, address_key
from bot.relay.queue import message_bytes

OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class TransportLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """websockets' own log, without its line for every connection opened and closed: a
    connection flood must not become a log flood (sessions are logged by the relay)."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if level >= logging.WARNING:
            super().log(level, msg, *args, **kwargs)


class RelayConnection(ServerConnection):
    """A WebSocket connection that is counted from the moment it is accepted, and closed
    at once when a connection limit is reached."""

    admission: Admission
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


def connection_type(admission: Admission) -> type[ServerConnection]:
    """The connection class for one server, counting against ``admission``."""
    return type("RelayConnection", (RelayConnection,), {"admission": admission})


class Listener(socket.socket):
    """A listening socket that makes asyncio pause accepting (for a second) when the
    process is out of file descriptors, rather than retry at once in a loop, and that
    reports it through ``on_exhausted``."""

    on_exhausted: Callable[[OSError], None] | None = None
    _quiet_until: float = 0.0

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno not in OUT_OF_DESCRIPTORS:
                raise
            now = time.monotonic()
            if now < self._quiet_until:
                # asyncio already paused this socket in this turn: end the turn quietly.
                raise BlockingIOError(errno.EAGAIN, "paused") from exc
            self._quiet_until = now + 0.5
            if self.on_exhausted is not None:
                self.on_exhausted(exc)
            raise  # asyncio stops reading this socket and starts again a second later


def listen(host: str, port: int, on_exhausted: Callable[[OSError], None]) -> Listener:
    """Bind the listening socket (the first address ``host`` resolves to)."""
    where = f"{host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        listener = Listener(family, kind, proto)
    except OSError as exc:
        raise RelayError(f"cannot listen on {where}: {exc}") from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
    except OSError as exc:
        listener.close()
        raise RelayError(f"cannot listen on {where}: {exc}") from exc
    listener.on_exhausted = on_exhausted
    return listener


class QuietAcceptPauses:
    """An event loop's exception handler that leaves out asyncio's report of a pause that
    :class:`Listener` already logged, and passes everything else on."""

    def __init__(self) -> None:
        self._previous: Any = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self._previous = loop.get_exception_handler()
        loop.set_exception_handler(self._handle)

    def remove(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.set_exception_handler(self._previous)

    def _handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            isinstance(exc, OSError)
            and exc.errno in OUT_OF_DESCRIPTORS
            and "accept" in str(context.get("message", ""))
        ):
            return
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)


async def close_draining(ws: ServerConnection, code: int, reason: str) -> None:
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


def frame_size(message: str | bytes) -> int:
    """A frame's size in bytes, as the limits count it."""
    if isinstance(message, str):
        return message_bytes(message)
    return len(message)


def peer(ws: ServerConnection) -> str:
    """The connection's remote address and port, for the log."""
    address = ws.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)
