"""The Bot API methods the bot uses, answered from and into the world with Telegram's shapes.

Each method takes the call's typed parameters and returns its ``result``, or raises the
:class:`ApiError` Telegram would answer with.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bot.playground.stub.errors import ApiError, bad_request
from bot.playground.stub.shapes import chat_json, member_json, message_json
from bot.playground.stub.validation import checked_markup, inline_markup, parse_text
from bot.playground.stub.webhook import Webhook
from bot.playground.stub.world import Chat, StoredDocument, StoredMessage, World
from bot.playground.tg_html import Entity

Method = Callable[[dict[str, Any]], Awaitable[Any]]

DEFAULT_UPDATE_TYPES = frozenset(
    {
        "message", "edited_message", "channel_post", "edited_channel_post", "inline_query",
        "chosen_inline_result", "callback_query", "shipping_query", "pre_checkout_query",
        "poll", "poll_answer", "my_chat_member", "chat_join_request",
    }
)  # fmt: skip
_QUERY_EXPIRED = "Bad Request: query is too old and response timeout expired or query ID is invalid"
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)
_CONFLICT = (
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance "
    "is running"
)


class BotApi:
    """The methods, by their lower-cased name in :attr:`handlers`."""

    def __init__(self, world: World, long_poll_cap: float) -> None:
        self.world = world
        self.long_poll_cap = long_poll_cap
        self._allowed_updates = DEFAULT_UPDATE_TYPES
        self._poll_generation = 0
        self.webhook = Webhook(world)
        self.handlers: dict[str, Method] = {
            name.removeprefix("_api_").lower(): getattr(self, name)
            for name in dir(self)
            if name.startswith("_api_")
        }

    def canonical(self, method: str) -> str:
        """The method's name as the Bot API spells it (names are case-insensitive)."""
        handler = self.handlers.get(method.lower())
        return handler.__name__.removeprefix("_api_") if handler else method

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        handler = self.handlers.get(method.lower())
        if handler is None:
            raise ApiError(404, "Not Found: method not found")
        return await handler(params)

    # --- the bot and its updates ---------------------------------------------------------

    async def _api_getMe(self, params: dict[str, Any]) -> Any:
        return {
            **self.world.bot_user(),
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
            "can_connect_to_business": False,
            "has_main_web_app": False,
        }

    async def _api_setWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook.set(params, DEFAULT_UPDATE_TYPES)
        return True

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook.delete(drop_pending=bool(params.get("drop_pending_updates")))
        return True

    async def _api_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        return self.webhook.info()

    async def _api_setMyCommands(self, params: dict[str, Any]) -> Any:
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise bad_request('parameter "commands" is required and must be an Array')
        self.world.commands[_scope_key(params)] = commands
        return True

    async def _api_getMyCommands(self, params: dict[str, Any]) -> Any:
        return self.world.commands.get(_scope_key(params), [])

    async def _api_deleteMyCommands(self, params: dict[str, Any]) -> Any:
        self.world.commands.pop(_scope_key(params), None)
        return True

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        self.webhook.refuse_polling()
        world = self.world
        offset = params.get("offset")
        if isinstance(offset, int) and offset > 0:
            world.updates = [u for u in world.updates if u["update_id"] >= offset]
        allowed = params.get("allowed_updates")
        if isinstance(allowed, list):
            self._allowed_updates = frozenset(allowed) or DEFAULT_UPDATE_TYPES
        limit = max(1, min(int(params.get("limit") or 100), 100))
        self._poll_generation += 1
        generation = self._poll_generation
        wait = min(float(params.get("timeout") or 0), self.long_poll_cap)

        def ready() -> bool:
            superseded = generation != self._poll_generation
            return world.closing or superseded or bool(self._deliverable(offset))

        if wait > 0:
            await world.changed.wait_until(ready, wait)
        if generation != self._poll_generation and not world.closing:
            raise ApiError(409, _CONFLICT)
        return self._deliverable(offset)[:limit]

    def _deliverable(self, offset: Any) -> list[dict[str, Any]]:
        updates = self.world.updates
        if isinstance(offset, int) and offset < 0:
            updates = updates[offset:]
        return [u for u in updates if _update_type(u) in self._allowed_updates]

    # --- messages ------------------------------------------------------------------------

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        self._chat_to_send(params)
        return True

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        chat = self._chat_to_send(params)
        text = params.get("text")
        if not isinstance(text, str) or not text:
            raise bad_request("message text is empty")
        visible, entities = parse_text(text, params.get("parse_mode"), caption=False)
        return message_json(self.world, self._store_sent(chat, params, visible, text, entities))

    async def _api_sendDocument(self, params: dict[str, Any]) -> Any:
        chat = self._chat_to_send(params)
        document = self.world.keep_document(params.get("document"), chat.id)
        caption = params.get("caption") or ""
        visible, entities = parse_text(caption, params.get("parse_mode"), caption=True)
        message = self._store_sent(chat, params, visible, caption or None, entities, document)
        return message_json(self.world, message)

    def _store_sent(
        self,
        chat: Chat,
        params: dict[str, Any],
        visible: str,
        html: str | None,
        entities: list[Entity],
        document: StoredDocument | None = None,
    ) -> StoredMessage:
        """Store what the bot sent, with the markup, thread and reply its request asks for."""
        markup = checked_markup(params.get("reply_markup"), private=chat.type == "private")
        return self.world.store(
            chat,
            from_id=self.world.bot_id,
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
        visible, entities = parse_text(text, params.get("parse_mode"), caption=False)
        markup = inline_markup(params.get("reply_markup"), private=self._private(message))
        if (visible, entities, markup) == (message.text, message.entities, message.reply_markup):
            raise ApiError(400, _NOT_MODIFIED)
        self._edit(message, markup, (visible, text, entities))
        return message_json(self.world, message)

    async def _api_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:
        message = self._message_to_edit(params)
        markup = inline_markup(params.get("reply_markup"), private=self._private(message))
        if markup == message.reply_markup:
            raise ApiError(400, _NOT_MODIFIED)
        self._edit(message, markup)
        return message_json(self.world, message)

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
        self.world.touch(message)

    async def _api_deleteMessage(self, params: dict[str, Any]) -> Any:
        chat = self._chat_to_send(params)
        message = self.world.live(chat.id, params.get("message_id", 0))
        if message is None:
            raise bad_request("message to delete not found")
        message.deleted = True
        self.world.touch(message)
        return True

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        query_id = str(params.get("callback_query_id", ""))
        if query_id not in self.world.open_queries:
            raise ApiError(400, _QUERY_EXPIRED)
        if len(params.get("text") or "") > 200:
            raise bad_request("MESSAGE_TOO_LONG")
        self.world.open_queries.discard(query_id)
        self.world.callback_answers[query_id] = params
        return True

    # --- chats ---------------------------------------------------------------------------

    async def _api_getChat(self, params: dict[str, Any]) -> Any:
        chat = self._chat_by_param(params)
        return {
            **chat_json(self.world, chat),
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
        return [member_json(self.world, chat, user_id) for user_id in chat.admins]

    async def _api_getChatMember(self, params: dict[str, Any]) -> Any:
        chat = self._chat_by_param(params)
        user_id = params.get("user_id")
        if not isinstance(user_id, int) or (
            user_id not in self.world.users and user_id != self.world.bot_id
        ):
            raise bad_request("user not found")
        return member_json(self.world, chat, user_id)

    # --- what the methods look up --------------------------------------------------------

    def _chat_by_param(self, params: dict[str, Any]) -> Chat:
        chat_id = params.get("chat_id")
        if not isinstance(chat_id, int) or chat_id not in self.world.chats:
            raise bad_request("chat not found")
        chat = self.world.chats[chat_id]
        if chat.migrated_to is not None:
            raise ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": chat.migrated_to},
            )
        return chat

    def _chat_to_send(self, params: dict[str, Any]) -> Chat:
        chat = self._chat_by_param(params)
        if chat.blocked:
            raise ApiError(403, _blocked_description(chat))
        return chat

    def _private(self, message: StoredMessage) -> bool:
        return self.world.chat(message.chat_id).type == "private"

    def _message_to_edit(self, params: dict[str, Any]) -> StoredMessage:
        if "inline_message_id" in params:
            raise bad_request("inline messages are not supported by the test stub")
        chat = self._chat_to_send(params)
        message = self.world.live(chat.id, params.get("message_id", 0))
        if message is None:
            raise bad_request("message to edit not found")
        if message.from_id != self.world.bot_id:
            raise bad_request("message can't be edited")
        return message

    def _reply_target(self, chat: Chat, params: dict[str, Any]) -> int | None:
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            target, lenient = reply.get("message_id"), reply.get("allow_sending_without_reply")
        else:
            target = params.get("reply_to_message_id")
            lenient = params.get("allow_sending_without_reply")
        if target is None:
            return None
        if self.world.live(chat.id, target) is None:
            if lenient:
                return None
            raise bad_request("message to be replied not found")
        return int(target)


def _scope_key(params: dict[str, Any]) -> str:
    scope = params.get("scope") or {"type": "default"}
    return f"{json.dumps(scope, sort_keys=True)}/{params.get('language_code', '')}"


def _update_type(update: dict[str, Any]) -> str:
    return next((key for key in update if key != "update_id"), "")


def _blocked_description(chat: Chat) -> str:
    if chat.type == "private":
        return "Forbidden: bot was blocked by the user"
    return f"Forbidden: bot was kicked from the {chat.type} chat"
