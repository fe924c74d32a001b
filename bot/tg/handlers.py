"""python-telegram-bot handlers: taps, replies, commands and chat lifecycle events.

Handlers translate Telegram updates into calls on the :class:`~bot.bridge.Bridge` (the only
writer of the bot's state; they read it through its read-only view), hand what changed to
``act_on`` after the commit, and answer with texts rendered from ``templates/messages/``;
they hold no policy of their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from telegram import CallbackQuery, Chat, Message, Update, User
from telegram import error as tg_error
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    ChatMemberHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.bridge import (
    PAIRING_TIMEOUT_S,
    Bridge,
    Changes,
    TapReport,
    wait_until_paired,
    wait_until_revoked,
)
from bot.clock import from_ms, maybe_from_ms
from bot.config import Config
from bot.core.model import CardRow, ChatKind, ItemRow, parse_item
from bot.core.policy import Action, Answered, AskReason, Decided, Refusal, Refused, Tallied
from bot.errors import BotApiError, PairingError, RenderError, SkaldError, StoreUnavailable
from bot.protocol.pairing import PairingUri, parse_pairing_uri
from bot.protocol.payloads import Person
from bot.relay.client import RelayStatus
from bot.render import Renderer
from bot.render.environment import in_zone
from bot.tg.approvers import ApproverLookup
from bot.tg.gateway import Gateway
from bot.tg.keyboards import parse_callback_data
from bot.tg.update_inbox import leave_unhandled

log = logging.getLogger(__name__)

HISTORY_DEFAULT = 10
HISTORY_MAX = 15
PENDING_MAX = 20
TOLD_MAX = 1000
SENT_WAIT_S = 1.0
"""How long a tap's answer waits for the relay to take the decision the tap made."""

HandlerFn = Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]


class Handlers:
    """Every handler of the bot, sharing the bridge, its view of the state and the
    renderer."""

    def __init__(
        self,
        *,
        bridge: Bridge,
        renderer: Renderer,
        gateway: Gateway,
        config: Config,
        act_on: Callable[[Changes], None],
        changed: asyncio.Event,
        approvers: ApproverLookup,
        relay_views: Callable[[], list[RelayStatus]],
        on_start: Callable[[Chat, User], Awaitable[None]] | None = None,
    ) -> None:
        self._bridge = bridge
        self._view = bridge.view
        self._renderer = renderer
        self._gateway = gateway
        self._config = config
        self._act_on = act_on
        self._changed = changed
        self._approvers = approvers
        self._relay_views = relay_views
        self._on_start = on_start
        self._told: set[int] = set()
        """Updates whose sender was told that the store failed them."""

    def register(self, application: Application) -> None:  # type: ignore[type-arg]
        commands: list[tuple[str, HandlerFn, bool]] = [
            ("start", self.start, True),
            ("help", self.help, True),
            ("pending", self.pending, True),
            ("pair", self.pair, True),
            ("unpair", self.unpair, True),
            ("status", self.status, True),
            ("history", self.history, True),
            ("grants", self.grants, True),
        ]
        for name, callback, block in commands:
            application.add_handler(CommandHandler(name, self._guarded(callback), block=block))
        application.add_handler(CallbackQueryHandler(self._guarded(self.tap)))
        application.add_handler(
            MessageHandler(filters.StatusUpdate.MIGRATE, self._guarded(self.migrated))
        )
        application.add_handler(
            MessageHandler(filters.REPLY & filters.TEXT & ~filters.COMMAND,
                           self._guarded(self.reply))
        )
        application.add_handler(
            ChatMemberHandler(self._guarded(self.my_membership), ChatMemberHandler.MY_CHAT_MEMBER)
        )
        application.add_handler(
            ChatMemberHandler(self._guarded(self.membership), ChatMemberHandler.CHAT_MEMBER)
        )

    def _guarded(self, callback: HandlerFn) -> HandlerFn:
        """Log our own errors as one line instead of a traceback; never crash the bot."""

        async def run(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            try:
                self._record_seen(update)
                await callback(update, context)
            except StoreUnavailable as exc:
                log.warning("could not record update %s, the store failed (%s): handling it "
                            "again once the store can write", update.update_id, exc)
                await self._tell_not_recorded(update)
                leave_unhandled(exc)
            except SkaldError as exc:
                log.warning("could not handle update %s: %s", update.update_id, exc)

        return run

    async def _tell_not_recorded(self, update: Update) -> None:
        """Tell the person (once per update) that what they did is not recorded yet and
        applies by itself once the store can write."""
        if update.update_id in self._told:
            return
        self._told.add(update.update_id)
        if len(self._told) > TOLD_MAX:
            self._told.discard(min(self._told))
        if update.callback_query is not None:
            await self._answer_query(update.callback_query,
                                     self._renderer.text("alert_not_recorded"), alert=True)
        elif update.message is not None and update.message.text:
            await self._reply(update.message, "not_recorded")

    def _record_seen(self, update: Update) -> None:
        chat, user = update.effective_chat, update.effective_user
        if chat is not None:
            title = chat.title or chat.full_name or ""
            self._bridge.chat_seen(chat.id, title, cast(ChatKind, chat.type))
        if user is not None and not user.is_bot:
            self._bridge.user_seen(user.id, user.full_name, user.username)

    # -- helpers ----------------------------------------------------------------------------

    async def _reply(self, message: Message, template: str, **context: object) -> None:
        try:
            html = self._renderer.message(template, **context)
        except RenderError as exc:
            log.warning("could not render the %s message: %s", template, exc)
            html = self._renderer.message("render_failed")
        try:
            await self._gateway.send(
                message.chat_id,
                html,
                topic_id=message.message_thread_id if message.is_topic_message else None,
                reply_to=message.message_id,
            )
        except BotApiError as exc:
            log.warning("could not reply in chat %s: %s", message.chat_id, exc)

    @staticmethod
    def _person(user: User) -> Person:
        return Person(name=user.full_name, telegram_user_id=user.id, username=user.username)

    def _is_admin(self, user: User | None) -> bool:
        return user is not None and user.id in self._config.admins

    # -- taps and replies -------------------------------------------------------------------

    async def tap(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        if query is None:
            return
        parsed = parse_callback_data(query.data)
        message = query.message
        tapper = self._person(query.from_user)
        if parsed is None or message is None:
            chat_id = message.chat.id if message else 0
            self._bridge.record_refused_tap(chat_id, tapper, "unknown", Refusal.OUTDATED)
            await self._answer_query(query, self._renderer.text("alert_outdated"), alert=True)
            return
        chat = message.chat
        if parsed.action is Action.REVOKE:
            await self._revoke(query, parsed.token, chat.id, tapper, update, context)
            return
        # Cached approvers (the query must be answered within seconds), but a list past its
        # grace period is checked for the tapper and for whoever already voted on the card.
        policy = self._approvers.policy(chat.id)
        card = self._view.cards.by_token(parsed.token)
        voters = {v.user_id for v in self._view.cards.votes(card.card_id)} if card else set()
        report = self._bridge.tap(
            parsed.token,
            parsed.action,
            chat_id=chat.id,
            tapper=tapper,
            approvers=await self._approvers.for_decision(chat.id, {query.from_user.id, *voters}),
            required=policy.required_approvals,
            option=parsed.option,
        )
        self._act_on(report.changes)
        await asyncio.sleep(0)  # the decision leaves for the relay before the tap's answer
        alert, text = await self._tap_answer(report, chat.id)
        await self._answer_query(query, text, alert=alert)
        log.info("tap %s by user %s in chat %s on %s: %s", parsed.action.name.lower(),
                 query.from_user.id, chat.id, report.card.item_id if report.card else "?",
                 _result_name(report))
        if isinstance(report.result, AskReason) and report.card is not None:
            await self._ask_reason(chat, report.card, query.from_user)

    async def _revoke(self, query: CallbackQuery, token: str, chat_id: int, tapper: Person,
                      update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        report = self._bridge.revoke_grant(
            token, chat_id=chat_id, tapper=tapper,
            approvers=await self._approvers.of(chat_id, wait=False),
        )
        self._act_on(report.changes)
        label = report.grant.label if report.grant else ""
        if report.refusal is None:
            # Waiting for the agent runs apart, so that other updates are not held up.
            context.application.create_task(
                self._answer_revoke(query, token, label, chat_id, tapper), update=update,
                name=f"revoke in chat {chat_id}")
            return
        text = self._renderer.text(
            "alert_revoke", reason=report.refusal.value, label=label,
            approvers=self._approvers.cached_names(chat_id),
        )
        await self._answer_query(query, text, alert=True)
        log.info("revoke tap by user %s in chat %s: %s", tapper.telegram_user_id, chat_id,
                 report.refusal.value)

    async def _answer_revoke(self, query: CallbackQuery, token: str, label: str,
                             chat_id: int, tapper: Person) -> None:
        """Tell the tapper whether the agent confirmed the revoke, or that it takes effect
        when the agent is back."""
        confirmed = await wait_until_revoked(self._bridge, token, self._changed)
        text = self._renderer.text("alert_revoke", reason=None, label=label,
                                   confirmed=confirmed, approvers=[])
        await self._answer_query(query, text, alert=not confirmed)
        log.info("revoke tap by user %s in chat %s: %s", tapper.telegram_user_id, chat_id,
                 "confirmed" if confirmed else "sent, not confirmed yet")

    async def _answer_query(self, query: CallbackQuery, text: str, *, alert: bool) -> None:
        try:
            await query.answer(text or None, show_alert=alert)
        except tg_error.TelegramError as exc:  # e.g. "query is too old": the tap still counts
            log.warning("could not answer a button tap: %s", exc)

    async def _tap_answer(self, report: TapReport, chat_id: int) -> tuple[bool, str]:
        """(show as alert, text) telling the tapper what their tap did."""
        result = report.result
        if isinstance(result, Refused):
            item = report.item
            return True, self._renderer.text(
                "alert_refused",
                reason=result.reason.value,
                approvers=await self._approvers.names(chat_id),
                state=item.state if item else "",
                by=item.outcome_by if item else None,
            )
        if isinstance(result, Tallied):
            return False, self._renderer.text(
                "alert_tallied", count=len(result.voters), required=result.required
            )
        if isinstance(result, Decided):
            return False, self._renderer.text("alert_decided", decision=result.decision,
                                              delivery=await self._delivery(report.card))
        if isinstance(result, Answered):
            return False, self._renderer.text("alert_answered",
                                              delivery=await self._delivery(report.card))
        return False, ""

    async def _delivery(self, card: CardRow | None) -> str:
        """Where the decision a tap just made on ``card`` stands: ``sent`` (its relay took
        it), ``sending``, or ``queued`` (no session with its relay: it leaves once the
        relay is back). Waits up to :data:`SENT_WAIT_S` for the relay's ``sent``."""
        if card is None:
            return "queued"
        peer = self._view.agents.peer(card.agent_id)
        if peer is None or not any(relay.url == peer.relay_url and relay.connected
                                   for relay in self._relay_views()):
            return "queued"
        try:
            async with asyncio.timeout(SENT_WAIT_S):
                while True:
                    self._changed.clear()
                    if not self._view.items.sending(card.agent_id, card.item_id):
                        return "sent"
                    await self._changed.wait()  # set once the relay's sent is recorded
        except TimeoutError:
            return "sending"

    async def _ask_reason(self, chat: Chat, card: CardRow, user: User) -> None:
        html = self._renderer.message("deny_reason_prompt", person=user.full_name,
                                      mention_id=user.id)
        try:
            prompt_id = await self._gateway.send(
                chat.id, html, topic_id=card.topic_id, reply_to=card.message_id,
                force_reply=True, placeholder="Reason for denying",
            )
        except BotApiError as exc:
            log.warning("could not ask for a deny reason in chat %s: %s", chat.id, exc)
            return
        self._bridge.prompt_sent(chat.id, prompt_id, card.card_id, user.id)

    async def reply(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        if message is None or message.reply_to_message is None or message.from_user is None:
            return
        text = (message.text or "").strip()
        target = message.reply_to_message.message_id
        prompt = self._view.cards.prompt(message.chat_id, target)
        if prompt is not None:
            card_id, user_id = prompt
            if user_id != message.from_user.id:
                return
            card = self._view.cards.get(card_id)
            action = Action.DENY_WITH_REASON
        else:
            card = self._view.cards.by_message(message.chat_id, target)
            action = Action.ANSWER
            if card is None:
                return
            item = self._view.items.get(card.agent_id, card.item_id)
            if item is None or item.kind != "clarification":
                return
        if card is None or not text:
            return
        policy = self._approvers.policy(message.chat_id)
        report = self._bridge.tap(
            card.token,
            action,
            chat_id=message.chat_id,
            tapper=self._person(message.from_user),
            approvers=await self._approvers.for_decision(message.chat_id, {message.from_user.id}),
            required=policy.required_approvals,
            text=text,
        )
        self._act_on(report.changes)
        if isinstance(report.result, Refused):
            _alert, refusal = await self._tap_answer(report, message.chat_id)
            await self._reply(message, "refused", text=refusal)

    # -- commands ---------------------------------------------------------------------------

    async def start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat, user = update.effective_message, update.effective_chat, update.effective_user
        if message is None or chat is None:
            return
        if self._on_start is not None and user is not None:
            await self._on_start(chat, user)
        agents = [self._view.agents.peer(b.agent_id)
                  for b in self._view.agents.bindings_for_chat(chat.id)]
        await self._reply(
            message, "start",
            device_id=self._bridge.identity.id,
            agents=[a.name for a in agents if a is not None],
            is_admin=self._is_admin(user),
        )

    async def help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if update.effective_message is not None:
            await self._reply(update.effective_message, "help")

    async def pending(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        waiting = self._view.items.open_in_chat(chat.id)
        zone = self._approvers.policy(chat.id).timezone
        entries = []
        for item, card in waiting[:PENDING_MAX]:
            peer = self._view.agents.peer(item.agent_id)
            entries.append({
                "summary": self._title(item),
                "agent": peer.name if peer else item.agent_id[:8],
                "link": _message_link(chat, card.message_id),
                "expires_at": _local(maybe_from_ms(item.expires_at), zone),
            })
        await self._reply(message, "pending", items=entries, total=len(waiting))

    async def pair(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat, user = update.effective_message, update.effective_chat, update.effective_user
        if message is None or chat is None:
            return
        if not self._is_admin(user):
            await self._reply(message, "not_allowed", command="pair")
            return
        if not context.args:
            await self._reply(message, "pair_usage")
            return
        try:
            uri = parse_pairing_uri(context.args[0])
        except PairingError as exc:
            await self._reply(message, "pair_failed", error=str(exc))
            return
        topic = message.message_thread_id if message.is_topic_message else None
        # The update is handled once this commits (see bot.tg.update_inbox); waiting for
        # the agent runs apart, so that other updates are not held up meanwhile.
        self._act_on(self._bridge.start_pairing(uri, chat_id=chat.id, topic_id=topic,
                                               requested_by=user.id if user else None))
        context.application.create_task(self._finish_pairing(message, uri), update=update,
                                        name=f"pairing with {uri.agent.id[:8]}")

    async def _finish_pairing(self, message: Message, uri: PairingUri) -> None:
        """Say that a pairing started, wait for the agent, and say how it ended."""
        try:
            await self._await_agent(message, uri)
        except SkaldError as exc:
            log.warning("could not finish pairing with %s: %s", uri.agent.id[:8], exc)

    async def _await_agent(self, message: Message, uri: PairingUri) -> None:
        chat = message.chat
        await self._reply(message, "pair_started", agent=uri.agent.name, relay=uri.relay)
        try:
            await wait_until_paired(self._bridge.view, uri.agent.id, self._changed)
        except PairingError as exc:  # the agent refused: say why at once
            await self._reply(message, "pair_failed", error=str(exc))
            return
        except TimeoutError:
            self._bridge.cancel_pairing(uri.agent.id)
            await self._reply(message, "pair_failed", error="the agent did not answer within "
                                                            f"{PAIRING_TIMEOUT_S:g} seconds")
            return
        await self._approvers.learn_names(chat.id)
        await self._reply(message, "pair_done", agent=uri.agent.name)

    async def unpair(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat, user = update.effective_message, update.effective_chat, update.effective_user
        if message is None or chat is None:
            return
        if not self._is_admin(user):
            await self._reply(message, "not_allowed", command="unpair")
            return
        bound = [self._view.agents.peer(b.agent_id)
                 for b in self._view.agents.bindings_for_chat(chat.id)]
        peers = [p for p in bound if p is not None]
        wanted = " ".join(context.args or []).strip().lower()
        chosen = [p for p in peers if not wanted or wanted in (p.name.lower(), p.agent_id)]
        if len(chosen) != 1:
            await self._reply(message, "unpair_choose", agents=[p.name for p in peers])
            return
        self._act_on(self._bridge.unbind(chosen[0].agent_id, chat.id, user.id if user else None))
        await self._reply(message, "unpair_done", agent=chosen[0].name)

    async def status(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The agents bound here and their relays; bot admins see every agent."""
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        everything = self._is_admin(update.effective_user)
        bound = {b.agent_id for b in self._view.agents.bindings_for_chat(chat.id)}
        peers = [p for p in self._view.agents.peers() if everything or p.agent_id in bound]
        urls = {peer.relay_url for peer in peers}
        zone = self._approvers.policy(chat.id).timezone
        today = _local(from_ms(self._bridge.now_ms()), zone)
        agents = []
        for peer in peers:
            updated = _local(maybe_from_ms(self._view.agents.last_update_at(peer.agent_id)),
                             zone)
            agents.append({
                "name": peer.name,
                "relay": peer.relay_url,
                "updated_at": updated,
                "other_day": updated is not None and today is not None
                and updated.date() != today.date(),
            })
        relays = [replace(r, since=_local(r.since, zone)) for r in self._relay_views()
                  if everything or r.url in urls]
        await self._reply(
            message, "status",
            relays=relays,
            agents=agents,
            timezone=zone,
            everything=everything,
            outbox=self._view.outbox.depth(),
            open_items=self._view.items.open_count(),
        )

    async def history(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        try:
            count = int(context.args[0]) if context.args else HISTORY_DEFAULT
        except ValueError:
            count = HISTORY_DEFAULT
        count = max(1, min(count, HISTORY_MAX))
        rows = self._view.audit.rows(
            chat_id=chat.id, events=("decision_sent", "answer_sent"), limit=count,
            newest_first=True,
        )
        zone = self._approvers.policy(chat.id).timezone
        entries = [
            {
                "at": in_zone(from_ms(row.at), zone),
                "event": row.event,
                "by": row.user_name,
                "decision": row.detail.get("decision", "answer"),
                "reason": row.detail.get("reason"),
                "approvers": [a.get("name") for a in row.detail.get("approvers", [])],
                "summary": self._item_summary(row.agent_id, row.item_id),
            }
            for row in rows
        ]
        await self._reply(message, "history", entries=entries, count=count)

    async def grants(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The grants in force for the agents bound here, each with a Revoke button."""
        message, chat = update.effective_message, update.effective_chat
        if message is None or chat is None:
            return
        topic = message.message_thread_id if message.is_topic_message else None
        self._act_on(self._bridge.list_grants(chat.id, topic))

    def _item_summary(self, agent_id: str | None, item_id: str | None) -> str:
        if agent_id is None or item_id is None:
            return ""
        item = self._view.items.get(agent_id, item_id)
        return self._title(item) if item else item_id

    def _title(self, item: ItemRow) -> str:
        return self._renderer.title(parse_item(item))

    # -- chat lifecycle ---------------------------------------------------------------------

    async def migrated(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.effective_message
        if message is None:
            return
        if message.migrate_to_chat_id:
            old, new = message.chat_id, message.migrate_to_chat_id
        elif message.migrate_from_chat_id:
            old, new = message.migrate_from_chat_id, message.chat_id
        else:
            return
        self._act_on(self._bridge.chat_migrated(old, new))

    async def my_membership(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        change = update.my_chat_member
        if change is None:
            return
        status = change.new_chat_member.status
        gone = status in ("left", "kicked")
        changes = self._bridge.chat_membership(change.chat.id, present=not gone)
        log.info("bot is now %s in chat %s", status, change.chat.id)
        self._act_on(changes)

    async def membership(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        change = update.chat_member
        if change is None:
            return
        was_admin = change.old_chat_member.status in ("administrator", "creator")
        is_admin = change.new_chat_member.status in ("administrator", "creator")
        if was_admin != is_admin:
            self._bridge.admins_changed(change.chat.id)


def _message_link(chat: Chat, message_id: int | None) -> str | None:
    """A t.me link to a message where Telegram has them (supergroups and channels)."""
    if message_id is None:
        return None
    if chat.username:
        return f"https://t.me/{chat.username}/{message_id}"
    text = str(chat.id)
    if text.startswith("-100"):
        return f"https://t.me/c/{text[4:]}/{message_id}"
    return None


def _result_name(report: TapReport) -> str:
    result = report.result
    if isinstance(result, Refused):
        return "refused (" + result.reason.value + ")"
    return type(result).__name__.lower()


def _local(moment: datetime | None, zone: str) -> datetime | None:
    """``moment`` in the chat's time zone, for display."""
    return in_zone(moment, zone) if moment is not None else None
