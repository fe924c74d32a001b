"""The stand-in's server lifecycle: uvicorn on a loopback socket, in the caller's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import BaseRoute

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
"""The only address the stand-in listens on: it is for one person on their own machine."""


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the program that runs the stand-in owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class LoopbackServer:
    """Serves routes on :data:`LOOPBACK` from :meth:`start` until :meth:`stop`."""

    def __init__(self, port: int) -> None:
        self.port = port
        """The port asked for; once started, the port listened on (0 asks for any free one)."""
        self._server: _Server | None = None
        self._serving: asyncio.Task[None] | None = None

    async def start(self, routes: list[BaseRoute]) -> None:
        # IPPROTO_TCP, so that asyncio sets TCP_NODELAY on the connections it accepts:
        # without it every answer (headers, then body) waits ~40 ms for a delayed ACK.
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((LOOPBACK, self.port))
        except OSError:
            listener.close()
            raise
        self.port = listener.getsockname()[1]
        app = Starlette(
            routes=routes,
            # A page elsewhere that resolves its own name to 127.0.0.1 gets nothing.
            middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=[LOOPBACK, "localhost"])],
        )
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off",
            timeout_graceful_shutdown=2, timeout_keep_alive=30,
        )  # fmt: skip
        self._server = _Server(config)
        self._serving = asyncio.create_task(self._server.serve(sockets=[listener]))
        while not self._server.started:
            if self._serving.done():
                await self._serving
                raise RuntimeError("the Telegram stand-in stopped while starting")
            await asyncio.sleep(0.005)
        logger.debug("telegram stand-in listening on %s:%d", LOOPBACK, self.port)

    async def stop(self) -> None:
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            await self._serving
