"""Webhook mode: the endpoint Telegram posts updates to, served by uvicorn in the bot's loop
(on the one HTTP server the bot has, shared with the Mini App).

Each request must carry the secret given to ``setWebhook`` in
``X-Telegram-Bot-Api-Secret-Token`` (compared in constant time; 403 otherwise). Its body is
held in the update inbox (:mod:`bot.tg.update_inbox`) under its ``update_id``, a copy of one
held before being ignored, and committed before the 200 that makes Telegram forget it; a
store that cannot write answers 503, and Telegram posts the update again later. Refused
posts are logged once a minute at most for each reason, with how many there were, so that
anyone who can reach the endpoint cannot fill the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
import time
from collections.abc import Callable, Generator
from typing import Final

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from bot.config import WebhookConfig
from bot.errors import BotApiError, StoreError
from bot.tg.update_inbox import UpdateInbox

log = logging.getLogger(__name__)

SECRET_HEADER: Final = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY_BYTES: Final = 1 << 20
"""Largest body taken: an update is a few kilobytes."""
START_TIMEOUT_S: Final = 10.0
REFUSALS_LOGGED_EVERY_S: Final = 60.0


class _Refusals:
    """Logs each reason for refusing a post at most once every
    :data:`REFUSALS_LOGGED_EVERY_S`, saying how many went unlogged since."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._logged: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def log(self, reason: str, detail: str) -> None:
        now = self._now()
        if now - self._logged.get(reason, -REFUSALS_LOGGED_EVERY_S) < REFUSALS_LOGGED_EVERY_S:
            self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
            return
        self._logged[reason] = now
        unlogged = self._unlogged.pop(reason, 0)
        more = f" ({unlogged} more since the last such line)" if unlogged else ""
        log.warning("%s: %s%s", reason, detail, more)


class WebhookEndpoint:
    """Answers Telegram's posts: checks the secret, holds the update, then says 200."""

    def __init__(self, inbox: UpdateInbox, secret: str,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._inbox = inbox
        self._secret = secret.encode()
        self._refusals = _Refusals(now)

    async def answer(self, request: Request) -> Response:
        given = request.headers.get(SECRET_HEADER, "").encode(errors="replace")
        if not hmac.compare_digest(given, self._secret):
            self._refusals.log("refused a webhook request: wrong or missing secret token",
                               f"the last from {_peer(request)}")
            return Response(status_code=403)
        body = await _body(request)
        if body is None:
            self._refusals.log("refused a webhook body", f"over {MAX_BODY_BYTES} bytes")
            return Response(status_code=413)
        text = _text(body)
        update_id = None if text is None else _update_id(text)
        if text is None or update_id is None:
            self._refusals.log("dropped a webhook body that is not a Telegram update",
                               f"the last {len(body)} bytes")
            return Response(status_code=400)
        try:
            self._inbox.hold([(update_id, text)], durable=True)
        except StoreError as exc:
            log.warning("cannot hold update %d, the store failed (%s); answered 503, "
                        "Telegram posts it again", update_id, exc)
            return Response(status_code=503)
        return Response(status_code=200)


async def _body(request: Request) -> bytes | None:
    """The body, or None when it is longer than :data:`MAX_BODY_BYTES`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return None
    return bytes(body)


def _text(body: bytes) -> str | None:
    try:
        return body.decode()
    except UnicodeDecodeError:
        return None


def _update_id(text: str) -> int | None:
    """The ``update_id`` of a body that is a JSON object with one; None otherwise."""
    try:
        update = json.loads(text)
    except ValueError:
        return None
    if not isinstance(update, dict):
        return None
    update_id = update.get("update_id")
    if isinstance(update_id, bool) or not isinstance(update_id, int) or update_id < 0:
        return None
    return update_id


def _peer(request: Request) -> str:
    return request.client.host if request.client else "an unknown address"


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the bot owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def webhook_routes(config: WebhookConfig, inbox: UpdateInbox) -> list[BaseRoute]:
    """The webhook endpoint's route, for :class:`HttpServer`."""
    endpoint = WebhookEndpoint(inbox, config.secret)
    return [Route(config.path, endpoint.answer, methods=["POST"])]


class HttpServer:
    """Serves ``routes`` (the webhook's, the Mini App's) on ``http.listen`` from
    :meth:`start` until :meth:`stop`."""

    def __init__(self, host: str, port: int, routes: list[BaseRoute]) -> None:
        self._host, self._port = host, port
        # log_config=None: uvicorn's lines go through the bot's own logging (and its
        # redaction) instead of handlers of its own.
        self._server = _Server(uvicorn.Config(
            Starlette(routes=routes), log_config=None, log_level="warning", access_log=False,
            lifespan="off", timeout_graceful_shutdown=2))
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen, or BotApiError saying why the address cannot be taken."""
        listener = bind(self._host, self._port)
        self._serving = asyncio.create_task(self._server.serve(sockets=[listener]))
        async with asyncio.timeout(START_TIMEOUT_S):
            while not self._server.started:
                if self._serving.done():
                    await self._serving
                    raise BotApiError("the HTTP server stopped while starting")
                await asyncio.sleep(0.01)
        log.info("HTTP server listening on %s:%d", self._host, self._port)

    async def stop(self) -> None:
        if self._serving is not None:
            self._server.should_exit = True
            await self._serving


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; BotApiError (one line) when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        listener = socket.socket(family, kind, proto)
    except OSError as exc:
        raise BotApiError(f"http.listen: cannot listen on {host}:{port}: "
                          f"{exc.strerror or exc}") from exc
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(128)
    except OSError as exc:
        listener.close()
        raise BotApiError(f"http.listen: cannot listen on {host}:{port}: "
                          f"{exc.strerror or exc}") from exc
    return listener
