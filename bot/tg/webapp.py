"""The Mini App with each card's details (``[webapp]``): its page, its static files and its
JSON API, served on the bot's HTTP server under the path of ``webapp.url``.

Every API request carries Telegram's ``initData`` (``Authorization: tma <initData>``),
checked by :mod:`bot.tg.initdata` (401 otherwise). A card is named by its opaque ``ref``
(404 when there is none such) and shown only to its chat's approvers and members (403
otherwise), with secrets masked; ``…/reveal`` shows them to approvers, audited.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route
from telegram import Bot
from telegram import error as tg_error

from bot.bridge import Bridge
from bot.config import WebAppConfig
from bot.core.model import CardRow, ItemRow, parse_item
from bot.core.policy import may_decide
from bot.errors import InitDataError
from bot.render.details import card_details
from bot.tg.approvers import ApproverLookup
from bot.tg.initdata import InitData, check_init_data

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).parent / "webapp_static"
STATIC_FILES: Final = frozenset({"app.js", "style.css"})
BASE_MARK: Final = "%BASE%"
"""Replaced in ``index.html`` by the path the app is served under."""
AUTH_SCHEME: Final = "tma "
MEMBER_STATUSES: Final = frozenset({"creator", "administrator", "member"})


@dataclass(frozen=True)
class WebAppContext:
    """What the API needs of the running bot."""

    token: str
    bridge: Bridge
    approvers: ApproverLookup
    bot: Bot


@dataclass(frozen=True)
class _Access:
    """A checked request: who asks for which card, and whether they may decide it."""

    user: InitData
    card: CardRow
    item: ItemRow
    approver: bool


class _Page:
    def __init__(self, config: WebAppConfig) -> None:
        html = (STATIC / "index.html").read_text(encoding="utf-8")
        self._html = html.replace(BASE_MARK, config.path)

    async def index(self, request: Request) -> Response:
        return HTMLResponse(self._html, headers={"Cache-Control": "no-store"})

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response("Not Found\n", status_code=404, media_type="text/plain")
        return FileResponse(STATIC / name, headers={"Cache-Control": "no-cache"})


class _Api:
    def __init__(self, context: WebAppContext) -> None:
        self._context = context

    async def card(self, request: Request) -> Response:
        access = await self._access(request)
        if isinstance(access, Response):
            return access
        return self._details(access, reveal=False)

    async def reveal(self, request: Request) -> Response:
        access = await self._access(request)
        if isinstance(access, Response):
            return access
        if not access.approver:
            return _error(403, "only an approver of this chat may reveal secrets")
        self._context.bridge.secret_revealed(access.card, access.user.user_id,
                                             access.user.first_name)
        log.info("user %d revealed the secrets of card %d", access.user.user_id,
                 access.card.card_id)
        return self._details(access, reveal=True)

    def _details(self, access: _Access, *, reveal: bool) -> Response:
        bridge = self._context.bridge
        peer = bridge.view.agents.peer(access.card.agent_id)
        details = card_details(
            parse_item(access.item), agent_name=peer.name if peer else "",
            votes=bridge.view.cards.votes(access.card.card_id),
            required=bridge.policy(access.card.chat_id).required_approvals, reveal=reveal)
        details.update(state=access.item.state, approver=access.approver)
        return JSONResponse(details, headers={"Cache-Control": "no-store"})

    async def _access(self, request: Request) -> _Access | Response:
        header = request.headers.get("authorization", "")
        if not header.startswith(AUTH_SCHEME):
            return _error(401, "no initData")
        try:
            user = check_init_data(header.removeprefix(AUTH_SCHEME), self._context.token,
                                   self._context.bridge.now_ms() / 1000)
        except InitDataError as exc:
            log.warning("refused a Mini App request: %s", exc)
            return _error(401, str(exc))
        view = self._context.bridge.view
        card = view.cards.by_ref(request.path_params["ref"])
        item = view.items.get(card.agent_id, card.item_id) if card else None
        if card is None or item is None:
            return _error(404, "no such card")
        approvers = await self._context.approvers.of(card.chat_id)
        approver = may_decide(user.user_id, approvers)
        if not approver and not await self._member(card.chat_id, user.user_id):
            return _error(403, "not a member of this card's chat")
        return _Access(user, card, item, approver)

    async def _member(self, chat_id: int, user_id: int) -> bool:
        """Whether the user is in the chat now; when Telegram cannot tell, they are not."""
        if chat_id > 0:
            return chat_id == user_id
        try:
            member = await self._context.bot.get_chat_member(chat_id, user_id)
        except tg_error.TelegramError as exc:
            log.warning("could not check user %s in chat %s (%s): not shown the card",
                        user_id, chat_id, exc)
            return False
        return member.status in MEMBER_STATUSES or (
            member.status == "restricted" and bool(getattr(member, "is_member", False)))


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def webapp_routes(config: WebAppConfig, context: WebAppContext) -> list[BaseRoute]:
    """The Mini App's routes, for :class:`bot.tg.webhook.HttpServer`."""
    page, api = _Page(config), _Api(context)
    base = config.path
    routes: list[BaseRoute] = [
        Route(f"{base}/", page.index, methods=["GET"]),
        Route(f"{base}/static/{{name}}", page.static, methods=["GET"]),
        Route(f"{base}/api/card/{{ref}}", api.card, methods=["GET"]),
        Route(f"{base}/api/card/{{ref}}/reveal", api.reveal, methods=["POST"]),
    ]
    if base:
        routes.append(Route(base, page.index, methods=["GET"]))
    return routes
