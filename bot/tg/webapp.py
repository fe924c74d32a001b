"""The Mini App with each card's details (``[webapp]``): its page, its static files and its
JSON API, served on the bot's HTTP server under the path of ``webapp.url``.

Every API request carries Telegram's ``initData`` (``Authorization: tma <initData>``),
checked by :mod:`bot.tg.initdata` (401 otherwise). A card is named by its opaque ``ref``
(404 when there is none such) and shown only to its chat's approvers and members (403
otherwise), with secrets masked; ``…/reveal`` shows them to approvers, audited, where the
chat lets secrets be seen (``secrets = "spoiler"``, the default in private chats only).
``…/decide`` applies a decision or answer as a tap on the card's button would: the same
bridge, rules, quorum and signed decision, and the chat's card is edited after it. An
edited card is approved with ``approve_edited`` naming the revision shown (as "Approve
edited" in the chat: a revision the card no longer shows is refused as outdated).
``…/edit`` is an edit as a reply to the chat's edit prompt makes it, bound to the revision
the person edited.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route
from telegram import Bot
from telegram import error as tg_error

from bot.bridge import Bridge, Changes, TapReport
from bot.config import WebAppConfig
from bot.core.model import CardRow, ItemRow, parse_item
from bot.core.policy import Action, Refused, may_decide
from bot.errors import InitDataError
from bot.protocol.encoding import is_int
from bot.protocol.payloads import Approval, Person
from bot.render.credentials import holds_credential
from bot.render.details import card_details
from bot.render.edits import offered_keys
from bot.tg.approvers import ApproverLookup
from bot.tg.initdata import InitData, check_init_data

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).parent / "webapp_static"
STATIC_FILES: Final = frozenset({"app.js", "highlight.js", "style.css"})
BASE_MARK: Final = "%BASE%"
"""Replaced in ``index.html`` by the path the app is served under."""
AUTH_SCHEME: Final = "tma "
MEMBER_STATUSES: Final = frozenset({"creator", "administrator", "member"})
ACTIONS: Final = {"approve": Action.APPROVE, "approve_edited": Action.APPROVE_EDITED,
                  "deny": Action.DENY, "deny_with_reason": Action.DENY_WITH_REASON,
                  "answer": Action.ANSWER}
"""What ``…/decide`` takes: the buttons of a card, by name."""
MAX_DECIDE_BYTES: Final = 16384
MAX_TEXT_CHARS: Final = 4096
MAX_EDIT_BYTES: Final = 262144
"""The longest ``…/edit`` body: a new value can be a whole file's content."""


@dataclass(frozen=True)
class WebAppContext:
    """What the API needs of the running bot."""

    token: str
    bridge: Bridge
    approvers: ApproverLookup
    bot: Bot
    act_on: Callable[[Changes], None]
    """Acts on what a decision changed, after its commit (as after a tap)."""


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
        if not self._revealable(access):
            return _error(403, 'this chat keeps secrets masked (its secrets = "masked")')
        self._context.bridge.secret_revealed(access.card, access.user.user_id,
                                             access.user.first_name)
        log.info("user %d revealed the secrets of card %d", access.user.user_id,
                 access.card.card_id)
        return self._details(access, reveal=True)

    async def decide(self, request: Request) -> Response:
        access = await self._access(request)
        if isinstance(access, Response):
            return access
        asked = _decision(await request.body())
        if asked is None:
            return _error(400, 'expected {"action": "approve" | "approve_edited" | "deny" | '
                               '"deny_with_reason" | "answer", "option": n, "revision": n '
                               'or "text": "…"}')
        action, option, text = asked
        context, card = self._context, access.card
        report = context.bridge.tap(
            card.token, action, chat_id=card.chat_id, approvers=await self._approvers(access),
            tapper=_person(access.user), option=option, text=text)
        context.act_on(report.changes)
        log.info("Mini App %s by user %s in chat %s on %s: %s", action.name.lower(),
                 access.user.user_id, card.chat_id, card.item_id, _outcome(report))
        item = report.item or access.item
        return JSONResponse({"outcome": _outcome(report), "state": item.state},
                            status_code=409 if isinstance(report.result, Refused) else 200)

    async def edit(self, request: Request) -> Response:
        access = await self._access(request)
        if isinstance(access, Response):
            return access
        asked = _edit(await request.body())
        if asked is None:
            return _error(400, 'expected {"key": "…", "text": "…", "revision": n}')
        key, text, revision = asked
        if access.approver and holds_credential(text):
            # A card never shows a credential: it could not show this edit as it runs.
            # (Anyone else is refused by the bridge, audited, whatever the value.)
            return _error(422, "the new value holds a password, token or key")
        context, card = self._context, access.card
        parsed = parse_item(access.item)
        report = context.bridge.edit_value(
            card.card_id, key, chat_id=card.chat_id, tapper=_person(access.user),
            approvers=await self._approvers(access),
            offered=offered_keys(parsed) if isinstance(parsed, Approval) else (),
            text=text, revision=revision)
        context.act_on(report.changes)
        log.info("Mini App edit by user %s in chat %s on %s: %s", access.user.user_id,
                 card.chat_id, card.item_id,
                 report.refusal.value if report.refusal else
                 "not taken" if report.problem else f"revision {report.revision}")
        if report.refusal is not None:
            return JSONResponse({"outcome": f"refused:{report.refusal.value}"},
                                status_code=409)
        if report.problem is not None:
            return _error(422, report.problem)
        item = context.bridge.view.items.get(card.agent_id, card.item_id) or access.item
        return self._details(_Access(access.user, card, item, access.approver), reveal=False)

    async def _approvers(self, access: _Access) -> frozenset[int]:
        """The chat's approvers, checked for the user and whoever voted on the card."""
        card = access.card
        voters = {v.user_id for v in self._context.bridge.view.cards.votes(card.card_id)}
        return await self._context.approvers.for_decision(card.chat_id,
                                                          {access.user.user_id, *voters})

    def _details(self, access: _Access, *, reveal: bool) -> Response:
        bridge = self._context.bridge
        peer = bridge.view.agents.peer(access.card.agent_id)
        edit = bridge.view.edits.of(access.card.card_id)
        details = card_details(
            parse_item(access.item), agent_name=peer.name if peer else "",
            votes=bridge.view.cards.votes(access.card.card_id),
            required=bridge.policy(access.card.chat_id).required_approvals, reveal=reveal,
            edit=edit if edit is not None and edit.arguments else None)
        details.update(state=access.item.state, approver=access.approver,
                       revealable=self._revealable(access))
        return JSONResponse(details, headers={"Cache-Control": "no-store"})

    def _revealable(self, access: _Access) -> bool:
        """Whether the user may have the card's secrets shown: an approver, in a chat that
        shows secrets to those who ask (``secrets = "spoiler"``)."""
        return access.approver and \
            self._context.bridge.policy(access.card.chat_id).secrets == "spoiler"

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


def _body(body: bytes, limit: int) -> dict[str, object] | None:
    """A request's JSON object; None when it is none or longer than ``limit`` bytes."""
    if len(body) > limit:
        return None
    try:
        asked = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return asked if isinstance(asked, dict) else None


def _decision(body: bytes) -> tuple[Action, int | None, str | None] | None:
    """The action, option and text a ``…/decide`` body asks for; None when it is not one.
    A deny with reason needs its reason, an answer its option or text, an approval of an
    edited card the revision it approves (as its option)."""
    asked = _body(body, MAX_DECIDE_BYTES)
    if asked is None or asked.get("action") not in ACTIONS:
        return None
    action = ACTIONS[str(asked["action"])]
    option, text = asked.get("option"), asked.get("text")
    if action is Action.APPROVE_EDITED:
        revision = asked.get("revision")
        if option is not None or not is_int(revision) or revision < 1:
            return None
        option = revision
    elif "revision" in asked:
        return None
    number = option if is_int(option) else None
    if option is not None and number is None:
        return None
    if text is not None and (not isinstance(text, str) or not text.strip()
                             or len(text) > MAX_TEXT_CHARS):
        return None
    if action is Action.DENY_WITH_REASON and text is None:
        return None
    if action is Action.ANSWER and (option is None) == (text is None):
        return None
    if action in (Action.APPROVE, Action.DENY) and (option, text) != (None, None):
        return None
    if action is Action.APPROVE_EDITED and text is not None:
        return None
    return action, number, text.strip() if text else None


def _edit(body: bytes) -> tuple[str, str, int] | None:
    """The key, new value and revision an ``…/edit`` body asks for; None when it is not
    one."""
    asked = _body(body, MAX_EDIT_BYTES)
    if asked is None:
        return None
    key, text, revision = asked.get("key"), asked.get("text"), asked.get("revision")
    if isinstance(key, str) and isinstance(text, str) and is_int(revision):
        return key, text, revision
    return None


def _person(user: InitData) -> Person:
    return Person(name=user.full_name, telegram_user_id=user.user_id, username=user.username)


def _outcome(report: TapReport) -> str:
    """``refused:<reason>``, ``tallied``, ``decided`` or ``answered``."""
    result = report.result
    if isinstance(result, Refused):
        return f"refused:{result.reason.value}"
    return type(result).__name__.lower()


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
        Route(f"{base}/api/card/{{ref}}/decide", api.decide, methods=["POST"]),
        Route(f"{base}/api/card/{{ref}}/edit", api.edit, methods=["POST"]),
    ]
    if base:
        routes.append(Route(base, page.index, methods=["GET"]))
    return routes
