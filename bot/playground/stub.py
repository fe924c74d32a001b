"""A local stand-in for the Telegram Bot API, served over real HTTP on 127.0.0.1.

A bot reaches it through python-telegram-bot's ``base_url`` (or ``telegram.api_url``)::

    async with TelegramStub(token="123:ABC") as tg:
        bot = Bot("123:ABC", base_url=f"{tg.api_url}/bot")

It keeps a small world (users, chats, messages, pending updates) and answers the methods the
bot uses with the Bot API's JSON shapes. What Telegram refuses it refuses with Telegram's own
error descriptions (see `tg_html` for HTML parse mode), so PTB raises the exceptions it would
raise against Telegram. Tests inject user actions (`send_text`, `tap`, `inject`), inspect the
resulting state (`messages`, `requests`, `callback_answers`) and wait on it (`wait_for`).
The server runs in the test's own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import hmac
import html
import json
import logging
import math
import socket
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.playground.tg_html import Entity, HtmlRefused, checked_link, parse_caption, parse_html

logger = logging.getLogger(__name__)

BOT_USERNAME = "skald_test_bot"
BOT_FIRST_NAME = "Skald Test"
LONG_POLL_CAP = 1.0
"""Longest a getUpdates long poll is held open, whatever timeout the client asks for."""
DEFAULT_UPDATE_TYPES = frozenset(
    {
        "message", "edited_message", "channel_post", "edited_channel_post", "inline_query",
        "chosen_inline_result", "callback_query", "shipping_query", "pre_checkout_query",
        "poll", "poll_answer", "my_chat_member", "chat_join_request",
    }
)  # fmt: skip
PACED_METHODS = frozenset(
    {"sendMessage", "sendDocument", "editMessageText", "editMessageReplyMarkup"}
)
OVERALL_RATE = 30
"""Messages a bot may send or edit in one second, all chats together (Telegram's bot FAQ)."""
GROUP_RATE = 20
"""Messages a bot may send or edit in one group in one minute (Telegram's bot FAQ)."""

_QUERY_EXPIRED = "Bad Request: query is too old and response timeout expired or query ID is invalid"
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
_INT_PARAMS = frozenset(
    {
        "chat_id", "message_id", "offset", "limit", "timeout", "user_id", "message_thread_id",
        "reply_to_message_id", "cache_time", "from_chat_id",
    }
)  # fmt: skip
_BOOL_PARAMS = frozenset(
    {
        "show_alert", "disable_notification", "protect_content", "drop_pending_updates",
        "disable_web_page_preview", "allow_sending_without_reply",
        "disable_content_type_detection",
    }
)  # fmt: skip
_JSON_PARAMS = frozenset(
    {
        "reply_markup", "reply_parameters", "link_preview_options", "allowed_updates",
        "commands", "scope", "entities", "caption_entities",
    }
)  # fmt: skip
LOOPBACK = "127.0.0.1"
"""The only address the stand-in listens on: it is for one person on their own machine."""


class ApiError(Exception):
    """A Bot API error answer: ``{"ok": false, "error_code": …, "description": …}``."""

    def __init__(
        self, error_code: int, description: str, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__(description)
        self.error_code = error_code
        self.description = description
        self.parameters = parameters

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.error_code,
            "description": self.description,
        }
        if self.parameters:
            body["parameters"] = self.parameters
        return body


def bad_request(description: str) -> ApiError:
    return ApiError(400, f"Bad Request: {description}")


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request."""

    filename: str
    data: bytes
    content_type: str


@dataclass(frozen=True)
class StoredDocument:
    filename: str
    data: bytes
    mime_type: str
    file_id: str


@dataclass(frozen=True)
class MessageVersion:
    """A message's content before an edit."""

    text: str
    html: str | None
    entities: list[Entity]
    reply_markup: dict[str, Any] | None


@dataclass
class StoredMessage:
    """The current state of one message in a chat, as Telegram keeps it."""

    chat_id: int
    message_id: int
    date: int
    from_id: int
    text: str
    html: str | None
    entities: list[Entity]
    reply_markup: dict[str, Any] | None = None
    thread_id: int | None = None
    reply_to: int | None = None
    document: StoredDocument | None = None
    edits: list[MessageVersion] = field(default_factory=list)
    edit_date: int | None = None
    deleted: bool = False
    service: dict[str, Any] | None = None
    force_reply: dict[str, Any] | None = None
    """The ForceReply markup the message was sent with, which the page acts on."""
    revision: int = 0
    """Grows with every change of the stand-in's messages; the page's live feed follows it."""

    def version(self) -> MessageVersion:
        return MessageVersion(self.text, self.html, list(self.entities), self.reply_markup)

    def buttons(self) -> list[dict[str, Any]]:
        rows = (self.reply_markup or {}).get("inline_keyboard", [])
        return [button for row in rows for button in row]


class RecordedRequest(NamedTuple):
    method: str
    params: dict[str, Any]
    at: float
    """When the request arrived, on the stand-in's clock (`loop.time()` by default)."""


@dataclass
class _Chat:
    id: int
    type: str
    title: str | None = None
    user_id: int | None = None
    admins: list[int] = field(default_factory=list)
    members: set[int] = field(default_factory=set)
    is_forum: bool = False
    migrated_to: int | None = None
    blocked: bool = False


@dataclass
class _Failure:
    error_code: int
    description: str
    parameters: dict[str, Any] | None
    remaining: int


class _ChangeSignal:
    """Wakes every waiter on each change of state; fired from plain (non-async) code too."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()

    def fire(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds; False if `timeout` seconds pass first."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                while not predicate():
                    waiter = loop.create_future()
                    self._waiters.add(waiter)
                    try:
                        await waiter
                    finally:
                        self._waiters.discard(waiter)
        except TimeoutError:
            return False
        return True


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the program that runs the stand-in owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class TelegramStub:
    """A fake Bot API server with a small world model; see the module docstring."""

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
        """``rate_limits`` answers 429 past Telegram's limits (:data:`OVERALL_RATE`,
        :data:`GROUP_RATE`); tests that pace nothing leave it off. ``clock`` (seconds,
        default the event loop's) times requests."""
        self.token = token
        self.rate_limits = rate_limits
        self.round_trip = 0.0
        """Seconds a request takes to reach the stand-in and its answer to come back, half
        each way, as over a network (loopback takes about nothing)."""
        self._clock = clock
        self.port = port
        self.bot_name = bot_name
        self.bot_username = bot_username
        prefix = token.partition(":")[0]
        self.bot_id = int(prefix) if prefix.isdigit() and int(prefix) != 777000 else 5000000001
        self.long_poll_cap = long_poll_cap
        self.requests: list[RecordedRequest] = []
        self.callback_answers: dict[str, dict[str, Any]] = {}
        self.commands: dict[str, list[dict[str, Any]]] = {}
        self._users: dict[int, dict[str, Any]] = {}
        self._chats: dict[int, _Chat] = {}
        self._messages: dict[int, dict[int, StoredMessage]] = {}
        self._next_message_id: dict[int, int] = {}
        self._updates: list[dict[str, Any]] = []
        self._next_update_id = 1
        self._allowed_updates = DEFAULT_UPDATE_TYPES
        self._poll_generation = 0
        self._open_queries: set[str] = set()
        self._next_query_id = 1
        self._failures: dict[str, list[_Failure]] = {}
        self._paced: list[tuple[float, int]] = []
        self.throttled = 0
        """Requests answered 429 by :attr:`rate_limits` (not by :meth:`rate_limit_storm`)."""
        self._files: dict[str, StoredDocument] = {}
        self._changed = _ChangeSignal()
        self._revision = 0
        self._routes: list[BaseRoute] = []
        self._server: _Server | None = None
        self._serving: asyncio.Task[None] | None = None
        self._closing = False
        self.api_url = ""
        self._handlers = {
            name.removeprefix("_api_").lower(): getattr(self, name)
            for name in dir(self)
            if name.startswith("_api_")
        }

    # --- lifecycle ----------------------------------------------------------------------

    def add_routes(self, routes: Iterable[BaseRoute]) -> None:
        """Serve these routes too (the playground's page), before the Bot API's; call before
        entering the context."""
        self._routes.extend(routes)

    async def __aenter__(self) -> TelegramStub:
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
            routes=[*self._routes, Route("/{path:path}", self._answer, methods=["GET", "POST"])],
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
        self.api_url = f"http://{LOOPBACK}:{self.port}"
        logger.debug("telegram stand-in listening on %s:%d", LOOPBACK, self.port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing = True
        self._changed.fire()
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            await self._serving

    @property
    def closing(self) -> bool:
        return self._closing

    # --- world ---------------------------------------------------------------------------

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
        self._users[id] = user
        return user

    def add_private_chat(self, user_id: int) -> dict[str, Any]:
        self._user(user_id)
        self._chats[user_id] = _Chat(user_id, "private", user_id=user_id)
        return self._chat_json(self._chats[user_id])

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
        for user_id in [*admins, *members]:
            if user_id != self.bot_id:
                self._user(user_id)
        chat = _Chat(
            chat_id,
            "supergroup" if supergroup else "group",
            title=title,
            admins=list(admins),
            members={*admins, *members},
            is_forum=forum,
        )
        self._chats[chat_id] = chat
        return self._chat_json(chat)

    def bot_user(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": self.bot_name,
            "username": self.bot_username,
        }

    # --- failure injection --------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        error_code: int,
        description: str,
        parameters: dict[str, Any] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next `times` calls of `method` with this error instead of handling them."""
        failure = _Failure(error_code, description, parameters, times)
        self._failures.setdefault(method.lower(), []).append(failure)

    def rate_limit_storm(self, times: int, retry_after: int) -> None:
        """The next `times` sendMessage calls get 429 "retry after `retry_after`"."""
        refusal = _too_many(retry_after)
        self.fail_next(
            "sendMessage",
            error_code=refusal.error_code,
            description=refusal.description,
            parameters=refusal.parameters,
            times=times,
        )

    def block_bot(self, chat_id: int) -> None:
        """The user blocked the bot (or the group removed it): sends there get 403."""
        self._chat(chat_id).blocked = True

    def migrate_group(self, old_id: int, new_id: int) -> list[dict[str, Any]]:
        """Upgrade a group to a supergroup; returns the two service-message updates."""
        old = self._chat(old_id)
        old.migrated_to = new_id
        self._chats[new_id] = _Chat(
            new_id, "supergroup", old.title, None, list(old.admins), set(old.members), old.is_forum
        )
        actor = old.admins[0] if old.admins else next(iter(old.members))
        return [
            self._inject_message(old_id, actor, {"migrate_to_chat_id": new_id}),
            self._inject_message(new_id, actor, {"migrate_from_chat_id": old_id}),
        ]

    # --- injected user actions ----------------------------------------------------------

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
        chat = self._chat(chat_id)
        visible, entities = parse_html(html.escape(text, quote=False))
        if reply_to is not None:
            self._stored(chat_id, reply_to)
        message = self._store(
            chat,
            from_id=self._user(user_id)["id"],
            text=visible,
            html=None,
            entities=entities,
            thread_id=thread_id,
            reply_to=reply_to,
        )
        return self.inject({"message": self._message_json(message)})

    def tap(
        self, chat_id: int, message_id: int, user_id: int, data: str, *, forged: bool = False
    ) -> str:
        """A user taps an inline button; returns the callback query id.

        The message must carry a button with this callback_data, as on Telegram; pass
        ``forged=True`` to send data no button carries (a crafted or stale client).
        """
        message = self._stored(chat_id, message_id)
        if not forged and data not in {b.get("callback_data") for b in message.buttons()}:
            raise AssertionError(
                f"message {message_id} in chat {chat_id} has no button with data {data!r}"
            )
        query_id = f"{self.bot_id}{self._next_query_id:08d}"
        self._next_query_id += 1
        self._open_queries.add(query_id)
        self.inject(
            {
                "callback_query": {
                    "id": query_id,
                    "from": self._user(user_id),
                    "message": self._message_json(message),
                    "chat_instance": str(abs(chat_id) * 7919),
                    "data": data,
                }
            }
        )
        return query_id

    def inject(self, update: dict[str, Any]) -> dict[str, Any]:
        """Queue an update for getUpdates, numbering it unless it has an update_id."""
        if "update_id" not in update:
            update = {"update_id": self._next_update_id, **update}
        self._next_update_id = max(self._next_update_id, update["update_id"]) + 1
        self._updates.append(update)
        self._changed.fire()
        return update

    # --- inspection ---------------------------------------------------------------------

    def messages(self, chat_id: int) -> list[StoredMessage]:
        """Every message of a chat in order, deleted ones flagged, each in its current state."""
        return list(self._messages.get(chat_id, {}).values())

    def changed_since(self, revision: int) -> list[StoredMessage]:
        """Every message created, edited or deleted after `revision`, oldest change first."""
        changed = [
            m for chat in self._messages.values() for m in chat.values() if m.revision > revision
        ]
        return sorted(changed, key=lambda m: m.revision)

    async def wait_for_change(self, revision: int, timeout: float) -> None:
        """Wait until a message changes after `revision`, the stand-in closes, or `timeout`."""
        await self._changed.wait_until(
            lambda: self._closing or self._revision > revision, timeout
        )

    def message_json(self, message: StoredMessage) -> dict[str, Any]:
        """A message as the Bot API shows it, with what the page needs besides."""
        result = self._message_json(message)
        result["revision"] = message.revision
        result["deleted"] = message.deleted
        if message.force_reply:
            result["force_reply"] = message.force_reply
        return result

    def world_json(self) -> dict[str, Any]:
        """The bot, the users and the chats (with their members), for the page."""
        chats = []
        for chat in self._chats.values():
            if chat.migrated_to is not None:
                continue
            members = [chat.user_id or chat.id] if chat.type == "private" else sorted(
                chat.members - {self.bot_id}, key=lambda user_id: (user_id not in chat.admins,
                                                                   user_id)
            )
            chats.append({**self._chat_json(chat), "members": members, "admins": chat.admins})
        return {"bot": self.bot_user(), "users": list(self._users.values()), "chats": chats}

    def document(self, file_id: str) -> StoredDocument | None:
        return self._files.get(file_id)

    async def answer_of(self, query_id: str, timeout: float) -> dict[str, Any] | None:
        """The bot's answerCallbackQuery for a tap, once it comes; None after `timeout`."""
        await self._changed.wait_until(
            lambda: self._closing or query_id in self.callback_answers, timeout
        )
        return self.callback_answers.get(query_id)

    def bot_messages(self, chat_id: int) -> list[StoredMessage]:
        return [m for m in self.messages(chat_id) if m.from_id == self.bot_id]

    def calls(self, method: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method.lower() == method.lower()]

    def max_rate(self, chat_id: int | None = None, *, window: float = 1.0) -> int:
        """Most paced calls (sends and edits) inside any `window` seconds, for one chat or all."""
        times = sorted(t for t, chat in self._paced if chat_id is None or chat == chat_id)
        best = start = 0
        for end, moment in enumerate(times):
            while moment - times[start] >= window:
                start += 1
            best = max(best, end - start + 1)
        return best

    async def wait_for(
        self, predicate: Callable[[TelegramStub], bool], timeout: float = 10
    ) -> None:
        """Wait until `predicate(stub)` holds; re-checked after every change of state."""
        if not await self._changed.wait_until(lambda: predicate(self), timeout):
            raise AssertionError(
                f"condition not met within {timeout} s; recent requests:\n{self._summary()}"
            )

    def _summary(self, last: int = 15) -> str:
        recent = [r for r in self.requests if r.method != "getUpdates"][-last:]
        lines = [f"  {r.method} {_abridged(r.params)}" for r in recent]
        return "\n".join(lines) or "  (none)"

    # --- HTTP ---------------------------------------------------------------------------

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
            body = await request.body()
            params = _request_params(request.headers.get("content-type", ""), body,
                                     request.url.query)
            result = await self._call(method, params)
            payload: dict[str, Any] = {"ok": True, "result": result}
            status = 200
        except ApiError as error:
            payload, status = error.payload(), error.error_code
        finally:
            self._changed.fire()
        return JSONResponse(payload, status_code=status)

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        handler = self._handlers.get(method.lower())
        canonical = handler.__name__.removeprefix("_api_") if handler else method
        now = self._clock() if self._clock else asyncio.get_running_loop().time()
        self.requests.append(RecordedRequest(canonical, params, now))
        self._changed.fire()
        if canonical in PACED_METHODS and isinstance(params.get("chat_id"), int):
            if self.rate_limits:
                try:
                    self._check_rate(now, params["chat_id"])
                except ApiError:
                    self.throttled += 1
                    raise
            self._paced.append((now, params["chat_id"]))
        failures = self._failures.get(method.lower())
        if failures:
            failure = failures[0]
            failure.remaining -= 1
            if failure.remaining <= 0:
                failures.pop(0)
            raise ApiError(failure.error_code, failure.description, failure.parameters)
        if handler is None:
            raise ApiError(404, "Not Found: method not found")
        return await handler(params)

    def _check_rate(self, now: float, chat_id: int) -> None:
        """Refuse a send or edit past Telegram's limits, as Telegram does (429)."""
        overall = [t for t, _ in self._paced if now - t < 1.0]
        if len(overall) >= OVERALL_RATE:
            raise _too_many(1)
        if chat_id < 0:
            in_group = [t for t, chat in self._paced if chat == chat_id and now - t < 60.0]
            if len(in_group) >= GROUP_RATE:
                raise _too_many(max(1, math.ceil(60.0 - (now - in_group[0]))))

    # --- Bot API methods ----------------------------------------------------------------

    async def _api_getMe(self, params: dict[str, Any]) -> Any:
        return {
            **self.bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> Any:
        if params.get("drop_pending_updates"):
            self._updates.clear()
        return True

    async def _api_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        return {"url": "", "has_custom_certificate": False, "pending_update_count": 0}

    async def _api_setMyCommands(self, params: dict[str, Any]) -> Any:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise bad_request('parameter "commands" is required and must be an Array')
        self.commands[_scope_key(params)] = commands
        return True

    async def _api_getMyCommands(self, params: dict[str, Any]) -> Any:
        return self.commands.get(_scope_key(params), [])

    async def _api_deleteMyCommands(self, params: dict[str, Any]) -> Any:
        self.commands.pop(_scope_key(params), None)
        return True

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        self._chat_to_send(params)
        return True

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        offset = params.get("offset")
        if isinstance(offset, int) and offset > 0:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        allowed = params.get("allowed_updates")
        if isinstance(allowed, list):
            self._allowed_updates = frozenset(allowed) or DEFAULT_UPDATE_TYPES
        limit = max(1, min(int(params.get("limit") or 100), 100))
        self._poll_generation += 1
        generation = self._poll_generation
        wait = min(float(params.get("timeout") or 0), self.long_poll_cap)

        def ready() -> bool:
            superseded = generation != self._poll_generation
            return self._closing or superseded or bool(self._deliverable(offset))

        if wait > 0:
            await self._changed.wait_until(ready, wait)
        if generation != self._poll_generation and not self._closing:
            raise ApiError(
                409,
                "Conflict: terminated by other getUpdates request; make sure that only one "
                "bot instance is running",
            )
        return self._deliverable(offset)[:limit]

    def _deliverable(self, offset: Any) -> list[dict[str, Any]]:
        updates = self._updates
        if isinstance(offset, int) and offset < 0:
            updates = updates[offset:]
        return [u for u in updates if _update_type(u) in self._allowed_updates]

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        chat = self._chat_to_send(params)
        text = params.get("text")
        if not isinstance(text, str) or not text:
            raise bad_request("message text is empty")
        visible, entities = _parse(text, params.get("parse_mode"), caption=False)
        return self._message_json(self._store_sent(chat, params, visible, text, entities))

    async def _api_sendDocument(self, params: dict[str, Any]) -> Any:
        chat = self._chat_to_send(params)
        document = self._document(params.get("document"), chat.id)
        caption = params.get("caption") or ""
        visible, entities = _parse(caption, params.get("parse_mode"), caption=True)
        message = self._store_sent(chat, params, visible, caption or None, entities, document)
        return self._message_json(message)

    def _store_sent(
        self,
        chat: _Chat,
        params: dict[str, Any],
        visible: str,
        html: str | None,
        entities: list[Entity],
        document: StoredDocument | None = None,
    ) -> StoredMessage:
        """Store what the bot sent, with the markup, thread and reply its request asks for."""
        markup = _checked_markup(params.get("reply_markup"))
        return self._store(
            chat,
            from_id=self.bot_id,
            text=visible,
            html=html,
            entities=entities,
            reply_markup=markup if markup and "inline_keyboard" in markup else None,
            thread_id=params.get("message_thread_id"),
            reply_to=self._reply_target(chat, params),
            document=document,
            force_reply=markup if markup and markup.get("force_reply") else None,
        )

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        message = self._message_to_edit(params)
        if message.document is not None:
            raise bad_request("there is no text in the message to edit")
        text = params.get("text")
        if not isinstance(text, str) or not text:
            raise bad_request("message text is empty")
        visible, entities = _parse(text, params.get("parse_mode"), caption=False)
        markup = _inline_markup(params.get("reply_markup"))
        if (visible, entities, markup) == (message.text, message.entities, message.reply_markup):
            raise ApiError(400, _NOT_MODIFIED)
        self._edit(message, markup, (visible, text, entities))
        return self._message_json(message)

    async def _api_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:
        message = self._message_to_edit(params)
        markup = _inline_markup(params.get("reply_markup"))
        if markup == message.reply_markup:
            raise ApiError(400, _NOT_MODIFIED)
        self._edit(message, markup)
        return self._message_json(message)

    def _edit(
        self,
        message: StoredMessage,
        markup: dict[str, Any] | None,
        content: tuple[str, str, list[Entity]] | None = None,
    ) -> None:
        """Replace a message's keyboard (and its text, html and entities), keeping history."""
        message.edits.append(message.version())
        if content is not None:
            message.text, message.html, message.entities = content
        message.reply_markup = markup
        message.edit_date = int(time.time())
        self._touch(message)

    async def _api_deleteMessage(self, params: dict[str, Any]) -> Any:
        chat = self._chat_to_send(params)
        message = self._messages.get(chat.id, {}).get(params.get("message_id", 0))
        if message is None or message.deleted:
            raise bad_request("message to delete not found")
        message.deleted = True
        self._touch(message)
        return True

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        query_id = str(params.get("callback_query_id", ""))
        if query_id not in self._open_queries:
            raise ApiError(400, _QUERY_EXPIRED)
        if len(params.get("text") or "") > 200:
            raise bad_request("MESSAGE_TOO_LONG")
        self._open_queries.discard(query_id)
        self.callback_answers[query_id] = params
        return True

    async def _api_getChat(self, params: dict[str, Any]) -> Any:
        chat = self._chat_by_param(params)
        return {
            **self._chat_json(chat),
            "accent_color_id": 0,
            "max_reaction_count": 11,
            "accepted_gift_types": {
                "unlimited_gifts": False,
                "limited_gifts": False,
                "unique_gifts": False,
                "premium_subscription": False,
                "gifts_from_channels": False,
            },
        }

    async def _api_getChatAdministrators(self, params: dict[str, Any]) -> Any:
        chat = self._chat_by_param(params)
        if chat.type == "private":
            raise bad_request("there are no administrators in the private chat")
        return [self._member_json(chat, user_id) for user_id in chat.admins]

    async def _api_getChatMember(self, params: dict[str, Any]) -> Any:
        chat = self._chat_by_param(params)
        user_id = params.get("user_id")
        if not isinstance(user_id, int) or (user_id not in self._users and user_id != self.bot_id):
            raise bad_request("user not found")
        return self._member_json(chat, user_id)

    # --- helpers for the methods --------------------------------------------------------

    def _user(self, user_id: int) -> dict[str, Any]:
        if user_id == self.bot_id:
            return self.bot_user()
        if user_id not in self._users:
            raise ValueError(f"unknown user {user_id}: add it with add_user() first")
        return self._users[user_id]

    def _chat(self, chat_id: int) -> _Chat:
        if chat_id not in self._chats:
            raise ValueError(f"unknown chat {chat_id}: add it with add_private_chat/add_group")
        return self._chats[chat_id]

    def _chat_by_param(self, params: dict[str, Any]) -> _Chat:
        chat_id = params.get("chat_id")
        if not isinstance(chat_id, int) or chat_id not in self._chats:
            raise bad_request("chat not found")
        chat = self._chats[chat_id]
        if chat.migrated_to is not None:
            raise ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": chat.migrated_to},
            )
        return chat

    def _chat_to_send(self, params: dict[str, Any]) -> _Chat:
        chat = self._chat_by_param(params)
        if chat.blocked:
            raise ApiError(403, _blocked_description(chat))
        return chat

    def _stored(self, chat_id: int, message_id: int) -> StoredMessage:
        message = self._messages.get(chat_id, {}).get(message_id)
        if message is None:
            raise ValueError(f"no message {message_id} in chat {chat_id}")
        return message

    def _message_to_edit(self, params: dict[str, Any]) -> StoredMessage:
        if "inline_message_id" in params:
            raise bad_request("inline messages are not supported by the test stub")
        chat = self._chat_to_send(params)
        message = self._messages.get(chat.id, {}).get(params.get("message_id", 0))
        if message is None or message.deleted:
            raise bad_request("message to edit not found")
        if message.from_id != self.bot_id:
            raise bad_request("message can't be edited")
        return message

    def _reply_target(self, chat: _Chat, params: dict[str, Any]) -> int | None:
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            target, lenient = reply.get("message_id"), reply.get("allow_sending_without_reply")
        else:
            target = params.get("reply_to_message_id")
            lenient = params.get("allow_sending_without_reply")
        if target is None:
            return None
        message = self._messages.get(chat.id, {}).get(target)
        if message is None or message.deleted:
            if lenient:
                return None
            raise bad_request("message to be replied not found")
        return int(target)

    def _document(self, value: Any, chat_id: int) -> StoredDocument:
        if isinstance(value, Upload):
            file_id = f"BQAC-{chat_id}-{len(self._files) + 1}"
            document = StoredDocument(value.filename, value.data, value.content_type, file_id)
            self._files[file_id] = document
            return document
        if isinstance(value, str) and value in self._files:
            return self._files[value]
        raise bad_request("wrong remote file identifier specified: can't unserialize it")

    def _store(
        self,
        chat: _Chat,
        *,
        from_id: int,
        text: str,
        html: str | None,
        entities: list[Entity],
        reply_markup: dict[str, Any] | None = None,
        thread_id: int | None = None,
        reply_to: int | None = None,
        document: StoredDocument | None = None,
        service: dict[str, Any] | None = None,
        force_reply: dict[str, Any] | None = None,
    ) -> StoredMessage:
        message_id = self._next_message_id.get(chat.id, 1)
        self._next_message_id[chat.id] = message_id + 1
        message = StoredMessage(
            chat_id=chat.id,
            message_id=message_id,
            date=int(time.time()),
            from_id=from_id,
            text=text,
            html=html,
            entities=entities,
            reply_markup=reply_markup,
            thread_id=thread_id,
            reply_to=reply_to,
            document=document,
            service=service,
            force_reply=force_reply,
        )
        self._messages.setdefault(chat.id, {})[message_id] = message
        self._touch(message)
        return message

    def _touch(self, message: StoredMessage) -> None:
        self._revision += 1
        message.revision = self._revision

    def _inject_message(
        self, chat_id: int, user_id: int, service: dict[str, Any]
    ) -> dict[str, Any]:
        chat = self._chat(chat_id)
        message = self._store(
            chat, from_id=user_id, text="", html=None, entities=[], service=service
        )
        return self.inject({"message": self._message_json(message)})

    def _chat_json(self, chat: _Chat) -> dict[str, Any]:
        if chat.type == "private":
            user = self._user(chat.user_id or chat.id)
            fields = {k: v for k, v in user.items() if k in {"first_name", "last_name", "username"}}
            return {"id": chat.id, "type": "private", **fields}
        result: dict[str, Any] = {"id": chat.id, "type": chat.type, "title": chat.title}
        if chat.is_forum:
            result["is_forum"] = True
        return result

    def _member_json(self, chat: _Chat, user_id: int) -> dict[str, Any]:
        user = self._user(user_id)
        if chat.type == "private":
            return {"status": "member", "user": user}
        if chat.admins and user_id == chat.admins[0]:
            return {"status": "creator", "user": user, "is_anonymous": False}
        if user_id in chat.admins:
            rights = [
                "can_manage_chat", "can_delete_messages", "can_manage_video_chats",
                "can_restrict_members", "can_change_info", "can_invite_users", "can_pin_messages",
            ]  # fmt: skip
            return {
                "status": "administrator",
                "user": user,
                "can_be_edited": False,
                "is_anonymous": False,
                "can_promote_members": False,
                "can_post_stories": False,
                "can_edit_stories": False,
                "can_delete_stories": False,
                "can_manage_topics": chat.is_forum,
                **dict.fromkeys(rights, True),
            }
        if user_id in chat.members:
            return {"status": "member", "user": user}
        return {"status": "left", "user": user}

    def _message_json(self, message: StoredMessage, *, nested: bool = False) -> dict[str, Any]:
        chat = self._chats[message.chat_id]
        result: dict[str, Any] = {
            "message_id": message.message_id,
            "date": message.date,
            "chat": self._chat_json(chat),
            "from": self._user(message.from_id),
        }
        is_document = message.document is not None
        text_key = "caption" if is_document else "text"
        entities_key = "caption_entities" if is_document else "entities"
        if message.text or (message.document is None and message.service is None):
            result[text_key] = message.text
        if message.entities:
            result[entities_key] = [self._entity_json(e) for e in message.entities]
        if message.document is not None:
            result["document"] = {
                "file_id": message.document.file_id,
                "file_unique_id": message.document.file_id.replace("-", ""),
                "file_name": message.document.filename,
                "mime_type": message.document.mime_type,
                "file_size": len(message.document.data),
            }
        if message.service:
            result.update(message.service)
        if message.reply_markup:
            result["reply_markup"] = message.reply_markup
        if message.edit_date is not None:
            result["edit_date"] = message.edit_date
        if message.thread_id is not None:
            result["message_thread_id"] = message.thread_id
            if chat.is_forum:
                result["is_topic_message"] = True
        if message.reply_to is not None and not nested:
            replied = self._messages[message.chat_id][message.reply_to]
            result["reply_to_message"] = self._message_json(replied, nested=True)
        return result

    def _entity_json(self, entity: Entity) -> dict[str, Any]:
        result: dict[str, Any] = {
            "type": entity.type,
            "offset": entity.offset,
            "length": entity.length,
        }
        if entity.type == "text_link":
            result["url"] = entity.url
        elif entity.type == "text_mention" and entity.url:
            user_id = int(entity.url.rpartition("=")[2])
            result["user"] = self._users.get(
                user_id, {"id": user_id, "is_bot": False, "first_name": ""}
            )
        elif entity.type == "pre" and entity.language:
            result["language"] = entity.language
        return result


# --- request decoding and validation -----------------------------------------------------


def _request_params(content_type: str, body: bytes, query: str) -> dict[str, Any]:
    """Decode the parameters the way the Bot API does: query, JSON, url-encoded or multipart."""
    raw: dict[str, Any] = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    try:
        if content_type.startswith("application/json"):
            decoded = json.loads(body or b"{}")
            if not isinstance(decoded, dict):
                raise ValueError("expected a JSON object")
            raw.update(decoded)
        elif content_type.startswith("application/x-www-form-urlencoded"):
            raw.update(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
        elif content_type.startswith("multipart/form-data"):
            raw.update(_multipart_fields(content_type, body))
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(f"can't parse request body: {error}") from None
    return {name: _typed(name, value) for name, value in raw.items()}


def _multipart_fields(content_type: str, body: bytes) -> dict[str, Any]:
    envelope = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode() + body
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(envelope)
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True)
        if not isinstance(name, str) or not isinstance(data, bytes):
            continue
        filename = part.get_filename()
        if filename is not None:
            fields[name] = Upload(filename, data, part.get_content_type())
        else:
            fields[name] = data.decode(part.get_content_charset() or "utf-8")
    return fields


def _typed(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if name in _INT_PARAMS and value.lstrip("-").isdigit():
        return int(value)
    if name in _BOOL_PARAMS:
        return value.lower() == "true"
    if name in _JSON_PARAMS:
        try:
            return json.loads(value)
        except ValueError:
            raise bad_request(f"can't parse {name} JSON object") from None
    return value


def _parse(text: str, parse_mode: Any, *, caption: bool) -> tuple[str, list[Entity]]:
    if parse_mode is None or parse_mode == "":
        text = html.escape(text, quote=False)
    elif not isinstance(parse_mode, str) or parse_mode.lower() != "html":
        raise bad_request(f"unsupported parse_mode {parse_mode!r} (the stub speaks HTML)")
    try:
        return parse_caption(text) if caption else parse_html(text)
    except HtmlRefused as refused:
        raise ApiError(400, refused.description) from None


def _checked_markup(markup: Any) -> dict[str, Any] | None:
    """Validate any reply_markup like Telegram; an empty inline keyboard means none."""
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise bad_request("can't parse reply keyboard markup JSON object")
    if "inline_keyboard" in markup:
        return _inline_markup(markup)
    if "force_reply" in markup:
        if len(markup.get("input_field_placeholder") or "") > 64:
            raise bad_request("can't parse reply keyboard markup JSON object")
        return markup
    if "keyboard" in markup or "remove_keyboard" in markup:
        return markup
    raise bad_request("can't parse reply keyboard markup JSON object")


def _inline_markup(markup: Any) -> dict[str, Any] | None:
    """Validate an inline keyboard (the only markup a message keeps); None when absent."""
    if markup is None:
        return None
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise bad_request("inline keyboard expected")
    if sum(len(row) for row in rows) > 100 or any(len(row) > 8 for row in rows):
        raise bad_request("reply markup is too long")
    for button in (button for row in rows for button in row):
        _check_button(button)
    kept = [row for row in rows if row]
    return {"inline_keyboard": kept} if kept else None


def _check_button(button: Any) -> None:
    if not isinstance(button, dict) or not isinstance(button.get("text"), str):
        raise bad_request(
            'can\'t parse inline keyboard button: Field "text" must be of type String'
        )
    data = button.get("callback_data")
    if data is not None:
        if not isinstance(data, str) or data == "":
            raise bad_request(
                "can't parse inline keyboard button: Text buttons are unallowed in the inline "
                "keyboard"
            )
        if len(data.encode("utf-8")) > 64:
            raise bad_request("BUTTON_DATA_INVALID")
        return
    url = button.get("url")
    if url is not None:
        if not isinstance(url, str) or checked_link(url) is None:
            raise bad_request("BUTTON_URL_INVALID")
        return
    actions = {"login_url", "switch_inline_query", "switch_inline_query_current_chat",
               "switch_inline_query_chosen_chat", "callback_game", "pay", "web_app",
               "copy_text"}  # fmt: skip
    if not actions & button.keys():
        raise bad_request(
            "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
        )


def _too_many(retry_after: int) -> ApiError:
    return ApiError(429, f"Too Many Requests: retry after {retry_after}",
                    {"retry_after": retry_after})


def _scope_key(params: dict[str, Any]) -> str:
    scope = params.get("scope") or {"type": "default"}
    return f"{json.dumps(scope, sort_keys=True)}/{params.get('language_code', '')}"


def _update_type(update: dict[str, Any]) -> str:
    return next((key for key in update if key != "update_id"), "")


def _blocked_description(chat: _Chat) -> str:
    if chat.type == "private":
        return "Forbidden: bot was blocked by the user"
    return f"Forbidden: bot was kicked from the {chat.type} chat"


def _abridged(params: dict[str, Any]) -> str:
    def short(value: Any) -> str:
        if isinstance(value, Upload):
            return f"<{value.filename}: {len(value.data)} bytes>"
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."

    return ", ".join(f"{name}={short(value)}" for name, value in params.items())
