"""The playground's web page: a Telegram-like chat view of the stand-in, on the same origin.

The page (``static/``) renders each message from its text and entities, as a Telegram client
does, and acts as the people in the chats: it sends their messages and button taps through
the stand-in (``send_text``, ``tap``) and follows every change live (server-sent events).

Every route here needs the playground's key: a random secret in the address the playground
prints (``?key=…``), kept afterwards in an HttpOnly, SameSite=Strict cookie, or sent by a
local tool in the ``X-Playground-Key`` header. Anyone else on the machine reaches the port
but gets 403. The bot's token never leaves the process: a tool posting as the bot goes
through ``/playground/bot/<method>``.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from bot.playground.miniapp import MiniAppLinks
from bot.playground.stub import ApiError, TelegramStub, bad_request
from bot.playground.tg_html import HtmlRefused

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).parent / "static"
HEARTBEAT_S: Final = 15.0
"""A comment line this often keeps the live feed open through idle periods."""
ANSWER_WAIT_S: Final = 10.0
"""How long a tap waits for the bot's answer (Telegram clients give up after about that)."""
MAX_TEXT: Final = 4096
KEY_PARAMETER: Final = "key"
"""The query parameter of the address the playground prints, carrying its key."""
KEY_HEADER: Final = "X-Playground-Key"
"""How a local tool (``render --playground``) presents the key."""
STATIC_FILES: Final = frozenset({"app.js", "style.css"})
REFUSED: Final = "Forbidden: open the playground with the address it printed (with its key)"

Handler = Callable[[Request], Awaitable[Response]]

Roles = Mapping[int, Mapping[int, str]]
"""Per chat id, a label for some members ("approver", "observer"), shown beside their names."""


def page_routes(stub: TelegramStub, *, key: str, roles: Roles | None = None,
                miniapp: MiniAppLinks | None = None) -> list[BaseRoute]:
    """The page's routes, to serve beside the stand-in's Bot API (``stub.add_routes``); each
    answers only a request that carries ``key``. ``miniapp``: Details buttons open the
    bot's Mini App."""
    page = _Page(stub, roles or {}, miniapp)
    guard = _Guard(key, stub)
    return [
        Route("/", guard(page.index), methods=["GET"]),
        Route("/static/{name}", guard(page.static), methods=["GET"]),
        Route("/playground/events", guard(page.events), methods=["GET"]),
        Route("/playground/send", guard(page.send), methods=["POST"]),
        Route("/playground/tap", guard(page.tap), methods=["POST"]),
        Route("/playground/files/{file_id}", guard(page.file), methods=["GET"]),
        Route("/playground/bot", guard(page.bot), methods=["GET"]),
        Route("/playground/bot/{method}", guard(page.bot_call), methods=["POST"]),
        Route("/playground/webapp", guard(page.webapp), methods=["POST"]),
    ]


def playground_url(api_url: str, key: str) -> str:
    """The page's address with its key, as the playground prints and opens it."""
    return f"{api_url}/?{KEY_PARAMETER}={key}"


class _Guard:
    """Wraps a route's handler so that it answers only a request carrying the key."""

    def __init__(self, key: str, stub: TelegramStub) -> None:
        self._key = key.encode()
        self._stub = stub

    def __call__(self, handler: Handler) -> Handler:
        async def guarded(request: Request) -> Response:
            cookie = f"skald_playground_{self._stub.port}"  # cookies do not tell ports apart
            if self._matches(request.cookies.get(cookie)) or self._matches(
                    request.headers.get(KEY_HEADER)):
                return await handler(request)
            if not self._matches(request.query_params.get(KEY_PARAMETER)):
                log.info("refused %s %s: no playground key", request.method, request.url.path)
                return _refused(request)
            response = await handler(request)
            response.set_cookie(cookie, self._key.decode(), httponly=True, samesite="strict",
                                path="/")
            return response
        return guarded

    def _matches(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(errors="replace"),
                                                         self._key)


def _refused(request: Request) -> Response:
    if request.url.path.startswith("/playground/"):
        return JSONResponse(ApiError(403, REFUSED).payload(), status_code=403)
    return Response(f"{REFUSED}\n", status_code=403, media_type="text/plain")


class _Page:
    def __init__(self, stub: TelegramStub, roles: Roles,
                 miniapp: MiniAppLinks | None) -> None:
        self.stub = stub
        self.miniapp = miniapp
        self.roles = {str(chat): {str(u): label for u, label in members.items()}
                      for chat, members in roles.items()}

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response("Not Found\n", status_code=404, media_type="text/plain")
        return FileResponse(STATIC / name)

    async def events(self, request: Request) -> Response:
        return StreamingResponse(
            self._feed(), media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )  # fmt: skip

    async def _feed(self) -> AsyncIterator[str]:
        world = self._world()
        yield _event("world", world)
        revision = 0
        while not self.stub.closing:
            changed = self.stub.changed_since(revision)
            # The first batch replays the chats (a page just loaded): in their order, not
            # in the order of their last change, so that a decided card stays where it was.
            shown = changed if revision else sorted(changed, key=lambda m: m.message_id)
            for message in shown:
                revision = max(revision, message.revision)
                yield _event("message", self.stub.message_json(message))
            latest = self._world()
            if latest != world:
                world = latest
                yield _event("world", world)
            if not changed:
                yield ": ping\n\n"
            await self.stub.wait_for_change(revision, HEARTBEAT_S)

    def _world(self) -> dict[str, Any]:
        return {**self.stub.world_json(), "roles": self.roles}

    async def send(self, request: Request) -> Response:
        try:
            body = await _json_body(request)
            chat_id, user_id = _int(body, "chat_id"), _int(body, "user_id")
            text = body.get("text")
            if not isinstance(text, str) or not text.strip():
                raise bad_request("message text is empty")
            if len(text) > MAX_TEXT:
                raise bad_request("message is too long")
            reply_to = body.get("reply_to")
            if reply_to is not None and not isinstance(reply_to, int):
                raise bad_request("reply_to must be a message id")
            self._check_member(chat_id, user_id)
            update = self.stub.send_text(chat_id, user_id, text, reply_to=reply_to)
        except ApiError as error:
            return JSONResponse(error.payload(), status_code=error.error_code)
        except (HtmlRefused, ValueError) as error:
            refused = bad_request(str(error).removeprefix("Bad Request: "))
            return JSONResponse(refused.payload(), status_code=400)
        return JSONResponse({"ok": True, "result": update["message"]["message_id"]})

    async def tap(self, request: Request) -> Response:
        try:
            body = await _json_body(request)
            chat_id, user_id = _int(body, "chat_id"), _int(body, "user_id")
            message_id, data = _int(body, "message_id"), body.get("data")
            if not isinstance(data, str):
                raise bad_request("data must be a string")
            self._check_member(chat_id, user_id)
            query_id = self.stub.tap(chat_id, message_id, user_id, data)
        except ApiError as error:
            return JSONResponse(error.payload(), status_code=error.error_code)
        except (AssertionError, ValueError) as error:
            return JSONResponse(bad_request(str(error)).payload(), status_code=400)
        answer = await self.stub.answer_of(query_id, ANSWER_WAIT_S)
        result = {k: answer[k] for k in ("text", "show_alert", "url") if answer and k in answer}
        return JSONResponse({"ok": True, "result": result})

    async def webapp(self, request: Request) -> Response:
        """Where the page opens a Mini App button's ``link`` for ``user_id`` in
        ``chat_id``: the bot's local app address with signed ``initData``."""
        try:
            body = await _json_body(request)
            chat_id, user_id, link = _int(body, "chat_id"), _int(body, "user_id"), body.get("link")
            self._check_member(chat_id, user_id)
            chat = self.stub.world.chat(chat_id)
            opened = None if self.miniapp is None or not isinstance(link, str) else \
                self.miniapp.open(link, user=self.stub.world.user(user_id),
                                  chat_type=chat.type, now=time.time())
            if opened is None:
                raise bad_request("not a Mini App of this bot")
        except ApiError as error:
            return JSONResponse(error.payload(), status_code=error.error_code)
        return JSONResponse({"ok": True, "result": opened}, headers={"Cache-Control": "no-store"})

    async def bot(self, request: Request) -> Response:
        """The chats a local tool posting as the playground's bot (``render --playground``)
        posts in."""
        chats = self.stub.world_json()["chats"]
        return JSONResponse({
            "private": next((c["id"] for c in chats if c["type"] == "private"), None),
            "group": next((c["id"] for c in chats if c["type"] != "private"), None),
        }, headers={"Cache-Control": "no-store"})

    async def bot_call(self, request: Request) -> Response:
        """A Bot API method called as the playground's bot, without its token."""
        return await self.stub.answer_as_bot(request.path_params["method"], request)

    async def file(self, request: Request) -> Response:
        document = self.stub.document(request.path_params["file_id"])
        if document is None:
            return JSONResponse(ApiError(404, "Not Found: file").payload(), status_code=404)
        safe_name = "".join(c if c.isalnum() or c in "._-" else "_" for c in document.filename)
        return Response(
            document.data, media_type=document.mime_type or "application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{safe_name}"'},
        )  # fmt: skip

    def _check_member(self, chat_id: int, user_id: int) -> None:
        for chat in self.stub.world_json()["chats"]:
            if chat["id"] == chat_id:
                if user_id not in chat["members"]:
                    raise ApiError(403, "Forbidden: this person is not a member of the chat")
                return
        raise bad_request("chat not found")


async def _json_body(request: Request) -> dict[str, Any]:
    # Only JSON: a page on another site cannot send it here without the browser asking first.
    if not request.headers.get("content-type", "").startswith("application/json"):
        raise bad_request("expected a JSON body (Content-Type: application/json)")
    try:
        body = json.loads(await request.body())
    except ValueError:
        raise bad_request("can't parse request body as JSON") from None
    if not isinstance(body, dict):
        raise bad_request("expected a JSON object")
    return body


def _int(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_request(f"{name} must be an integer")
    return value


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
