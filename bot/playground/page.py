"""The playground's web page: a Telegram-like chat view of the stand-in, on the same origin.

The page (``static/``) renders each message from its text and entities, as a Telegram client
does, and acts as the people in the chats: it sends their messages and button taps through
the stand-in (``send_text``, ``tap``) and follows every change live (server-sent events).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from bot.playground.stub import ApiError, TelegramStub, bad_request
from bot.playground.tg_html import HtmlRefused

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).parent / "static"
HEARTBEAT_S: Final = 15.0
"""A comment line this often keeps the live feed open through idle periods."""
ANSWER_WAIT_S: Final = 10.0
"""How long a tap waits for the bot's answer (Telegram clients give up after about that)."""
MAX_TEXT: Final = 4096

Roles = Mapping[int, Mapping[int, str]]
"""Per chat id, a label for some members ("approver", "observer"), shown beside their names."""


def page_routes(stub: TelegramStub, *, roles: Roles | None = None) -> list[BaseRoute]:
    """The page's routes, to serve beside the stand-in's Bot API (``stub.add_routes``)."""
    page = _Page(stub, roles or {})
    return [
        Route("/", page.index, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
        Route("/playground/events", page.events, methods=["GET"]),
        Route("/playground/send", page.send, methods=["POST"]),
        Route("/playground/tap", page.tap, methods=["POST"]),
        Route("/playground/files/{file_id}", page.file, methods=["GET"]),
        Route("/playground/bot", page.bot, methods=["GET"]),
    ]


class _Page:
    def __init__(self, stub: TelegramStub, roles: Roles) -> None:
        self.stub = stub
        self.roles = {str(chat): {str(u): label for u, label in members.items()}
                      for chat, members in roles.items()}

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

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
            for message in changed:
                yield _event("message", self.stub.message_json(message))
                revision = message.revision
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

    async def bot(self, request: Request) -> Response:
        """Where a local tool posts as the playground's bot (``render --playground``): the
        Bot API root with the playground's own throwaway token, and the chats to post in."""
        chats = self.stub.world_json()["chats"]
        return JSONResponse({
            "api_root": f"{self.stub.api_url}/bot{self.stub.token}",
            "private": next((c["id"] for c in chats if c["type"] == "private"), None),
            "group": next((c["id"] for c in chats if c["type"] != "private"), None),
        }, headers={"Cache-Control": "no-store"})

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
