"""The stand-in's front: :class:`TelegramStub`, what tests, the playground and benchmarks use.

It serves the Bot API (:mod:`.methods`) over :mod:`.server`, answers each call through
:mod:`.faults` first, and gives tests their controls: set up the world, act as its people
(``send_text``, ``tap``, ``inject``), inspect what the bot did and wait for it.
"""

from __future__ import annotations

import asyncio
import hmac
import html
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.playground.stub.decoding import Upload, request_params
from bot.playground.stub.errors import ApiError
from bot.playground.stub.faults import Faults
from bot.playground.stub.methods import BotApi
from bot.playground.stub.server import LOOPBACK, LoopbackServer
from bot.playground.stub.shapes import chat_json, message_json, page_message_json, world_json
from bot.playground.stub.world import Chat, StoredDocument, StoredMessage, World
from bot.playground.tg_html import parse_html

BOT_USERNAME = "skald_test_bot"
BOT_FIRST_NAME = "Skald Test"
LONG_POLL_CAP = 1.0
"""Longest a getUpdates long poll is held open, whatever timeout the client asks for."""


class RecordedRequest(NamedTuple):
    method: str
    params: dict[str, Any]
    at: float
    """When the request arrived, on the stand-in's clock (`loop.time()` by default)."""


class TelegramStub:
    """A fake Bot API server with a small world model; see the package docstring."""

    def __init__(
        self,
        token: str = "123:ABC",
        *,
        long_poll_cap: float = LONG_POLL_CAP,
        port: int = 0,
        bot_name: str = BOT_FIRST_NAME,
        bot_username: str = BOT_USERNAME,
        rate_limits: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``rate_limits`` answers 429 past Telegram's limits (see :mod:`.faults`); tests
        that pace nothing leave it off. ``clock`` (seconds, default the event loop's) times
        requests."""
        self.token = token
        self.round_trip = 0.0
        """Seconds a request takes to reach the stand-in and its answer to come back, half
        each way, as over a network (loopback takes about nothing)."""
        self.world = World(token, bot_name, bot_username)
        self.api = BotApi(self.world, long_poll_cap)
        self.faults = Faults(rate_limits=rate_limits)
        self.requests: list[RecordedRequest] = []
        self.callback_answers = self.world.callback_answers
        self.commands = self.world.commands
        self.api_url = ""
        self._clock = clock
        self._server = LoopbackServer(port)
        self._routes: list[BaseRoute] = []

    @property
    def bot_id(self) -> int:
        return self.world.bot_id

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def closing(self) -> bool:
        return self.world.closing

    @property
    def rate_limits(self) -> bool:
        return self.faults.rate_limits

    @rate_limits.setter
    def rate_limits(self, on: bool) -> None:
        self.faults.rate_limits = on

    @property
    def throttled(self) -> int:
        """Requests answered 429 by :attr:`rate_limits` (not by :meth:`rate_limit_storm`)."""
        return self.faults.throttled

    # --- lifecycle ----------------------------------------------------------------------

    def add_routes(self, routes: Iterable[BaseRoute]) -> None:
        """Serve these routes too (the playground's page), before the Bot API's; call before
        entering the context."""
        self._routes.extend(routes)

    async def __aenter__(self) -> TelegramStub:
        bot_api = Route("/{path:path}", self._answer, methods=["GET", "POST"])
        await self._server.start([*self._routes, bot_api])
        self.api_url = f"http://{LOOPBACK}:{self.port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.world.closing = True
        self.world.changed.fire()
        await self.api.webhook.stop()
        await self._server.stop()

    # --- setting up the world -----------------------------------------------------------

    def add_user(
        self,
        id: int,  # the Bot API names it so
        first_name: str,
        last_name: str | None = None,
        username: str | None = None,
    ) -> dict[str, Any]:
        user: dict[str, Any] = {"id": id, "is_bot": False, "first_name": first_name}
        if last_name is not None:
            user["last_name"] = last_name
        if username is not None:
            user["username"] = username
        self.world.add_user(user)
        return user

    def add_private_chat(self, user_id: int) -> dict[str, Any]:
        chat = self.world.add_chat(Chat(user_id, "private", user_id=user_id))
        return chat_json(self.world, chat)

    def add_group(
        self,
        chat_id: int,
        title: str,
        *,
        admins: list[int],
        members: list[int],
        forum: bool = False,
        supergroup: bool = True,
    ) -> dict[str, Any]:
        kind = "supergroup" if supergroup else "group"
        chat = self.world.add_chat(Chat(chat_id, kind, title=title, admins=list(admins),
                                        members={*admins, *members}, is_forum=forum))
        return chat_json(self.world, chat)

    def bot_user(self) -> dict[str, Any]:
        return self.world.bot_user()

    def fail_next(self, method: str, *, error_code: int, description: str,
                  parameters: dict[str, Any] | None = None, times: int = 1) -> None:
        """Answer the next `times` calls of `method` with this error instead of handling them."""
        self.faults.fail_next(method, error_code=error_code, description=description,
                              parameters=parameters, times=times)

    def rate_limit_storm(self, times: int, retry_after: int) -> None:
        """The next `times` sendMessage calls get 429 "retry after `retry_after`"."""
        self.faults.rate_limit_storm(times, retry_after)

    def block_bot(self, chat_id: int) -> None:
        """The user blocked the bot (or the group removed it): sends there get 403."""
        self.world.chat(chat_id).blocked = True

    def migrate_group(self, old_id: int, new_id: int) -> list[dict[str, Any]]:
        """Upgrade a group to a supergroup; returns the two service-message updates."""
        actor = self.world.migrate(old_id, new_id)
        return [
            self._service_update(old_id, actor, {"migrate_to_chat_id": new_id}),
            self._service_update(new_id, actor, {"migrate_from_chat_id": old_id}),
        ]

    # --- acting as the world's people ---------------------------------------------------

    def send_text(
        self,
        chat_id: int,
        user_id: int,
        text: str,
        *,
        reply_to: int | None = None,
        thread_id: int | None = None,
    ) -> dict[str, Any]:
        """A user writes `text` in a chat; returns the queued message update."""
        chat = self.world.chat(chat_id)
        visible, entities = parse_html(html.escape(text, quote=False))
        if reply_to is not None:
            self.world.stored(chat_id, reply_to)
        message = self.world.store(chat, from_id=self.world.user(user_id)["id"], text=visible,
                                   html=None, entities=entities, thread_id=thread_id,
                                   reply_to=reply_to)
        return self.inject({"message": message_json(self.world, message)})

    def tap(
        self, chat_id: int, message_id: int, user_id: int, data: str, *, forged: bool = False
    ) -> str:
        """A user taps an inline button; returns the callback query id.

        The message must carry a button with this callback_data, as on Telegram; pass
        ``forged=True`` to send data no button carries (a crafted or stale client).
        """
        message = self.world.stored(chat_id, message_id)
        if not forged and data not in {b.get("callback_data") for b in message.buttons()}:
            raise AssertionError(
                f"message {message_id} in chat {chat_id} has no button with data {data!r}"
            )
        query_id = self.world.open_query()
        self.inject(
            {
                "callback_query": {
                    "id": query_id,
                    "from": self.world.user(user_id),
                    "message": message_json(self.world, message),
                    "chat_instance": str(abs(chat_id) * 7919),
                    "data": data,
                }
            }
        )
        return query_id

    def inject(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates, numbering it unless it has an update_id."""
        return self.world.inject(update)

    def _service_update(self, chat_id: int, user_id: int,
                        service: dict[str, Any]) -> dict[str, Any]:
        message = self.world.store(self.world.chat(chat_id), from_id=user_id, text="",
                                   html=None, entities=[], service=service)
        return self.inject({"message": message_json(self.world, message)})

    # --- inspection ---------------------------------------------------------------------

    def messages(self, chat_id: int) -> list[StoredMessage]:
        """Every message of a chat in order, deleted ones flagged, each in its current state."""
        return list(self.world.messages.get(chat_id, {}).values())

    def bot_messages(self, chat_id: int) -> list[StoredMessage]:
        return [m for m in self.messages(chat_id) if m.from_id == self.bot_id]

    def changed_since(self, revision: int) -> list[StoredMessage]:
        """Every message created, edited or deleted after `revision`, oldest change first."""
        return self.world.changed_since(revision)

    async def wait_for_change(self, revision: int, timeout: float) -> None:
        """Wait until a message changes after `revision`, the stand-in closes, or `timeout`."""
        world = self.world
        await world.changed.wait_until(lambda: world.closing or world.revision > revision,
                                       timeout)

    def message_json(self, message: StoredMessage) -> dict[str, Any]:
        """A message as the Bot API shows it, with what the page needs besides."""
        return page_message_json(self.world, message)

    def world_json(self) -> dict[str, Any]:
        """The bot, the users and the chats (with their members), for the page."""
        return world_json(self.world)

    def document(self, file_id: str) -> StoredDocument | None:
        return self.world.files.get(file_id)

    async def answer_of(self, query_id: str, timeout: float) -> dict[str, Any] | None:
        """The bot's answerCallbackQuery for a tap, once it comes; None after `timeout`."""
        await self.world.changed.wait_until(
            lambda: self.closing or query_id in self.callback_answers, timeout
        )
        return self.callback_answers.get(query_id)

    def calls(self, method: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method.lower() == method.lower()]

    def max_rate(self, chat_id: int | None = None, *, window: float = 1.0) -> int:
        """Most paced calls (sends and edits) inside any `window` seconds, for one chat or all."""
        return self.faults.max_rate(chat_id, window=window)

    async def wait_for(
        self, predicate: Callable[[TelegramStub], bool], timeout: float = 10
    ) -> None:
        """Wait until `predicate(stub)` holds; re-checked after every change of state."""
        if not await self.world.changed.wait_until(lambda: predicate(self), timeout):
            raise AssertionError(
                f"condition not met within {timeout} s; recent requests:\n"
                f"{_summary(self.requests)}"
            )

    # --- answering over HTTP ------------------------------------------------------------

    async def _answer(self, request: Request) -> Response:
        path = request.url.path
        travel = self.round_trip / 2
        if travel:
            await asyncio.sleep(travel)  # still on its way here
        response: Response
        if not path.startswith("/bot"):
            response = JSONResponse(ApiError(404, "Not Found").payload(), status_code=404)
        else:
            token, _, method = path.removeprefix("/bot").partition("/")
            if hmac.compare_digest(token.encode(errors="replace"), self.token.encode()):
                response = await self.answer_as_bot(method, request)
            else:
                response = JSONResponse(ApiError(401, "Unauthorized").payload(), status_code=401)
        if travel:
            await asyncio.sleep(travel)
        return response

    async def answer_as_bot(self, method: str, request: Request) -> Response:
        """Answer ``request`` as the Bot API ``method`` called with the bot's token (the
        playground's page forwards a local tool's calls here, so that it needs no token)."""
        try:
            params = await request_params(request)
            result = await self._call(method, params)
            payload: dict[str, Any] = {"ok": True, "result": result}
            status = 200
        except ClientDisconnect:
            # The caller went away before its request was read (a bot stopping): nobody
            # reads this answer, and nothing was asked.
            return Response(status_code=400)
        except ApiError as error:
            payload, status = error.payload(), error.error_code
        finally:
            self.world.changed.fire()
        return JSONResponse(payload, status_code=status)

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        canonical = self.api.canonical(method)
        now = self._clock() if self._clock else asyncio.get_running_loop().time()
        self.requests.append(RecordedRequest(canonical, params, now))
        self.world.changed.fire()
        self.faults.check(canonical, params, now)
        return await self.api.call(method, params)


def _summary(requests: list[RecordedRequest], last: int = 15) -> str:
    recent = [r for r in requests if r.method != "getUpdates"][-last:]
    lines = [f"  {r.method} {_abridged(r.params)}" for r in recent]
    return "\n".join(lines) or "  (none)"


def _abridged(params: dict[str, Any]) -> str:
    def short(value: Any) -> str:
        if isinstance(value, Upload):
            return f"<{value.filename}: {len(value.data)} bytes>"
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."

    return ", ".join(f"{name}={short(value)}" for name, value in params.items())
