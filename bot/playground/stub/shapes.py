"""The world's things in the Bot API's JSON shapes: chats, members, messages, entities;
and the views of them the playground's page reads."""

from __future__ import annotations

from typing import Any

from bot.playground.stub.world import Chat, StoredMessage, World
from bot.playground.tg_html import Entity

_ADMIN_RIGHTS = (
    "can_manage_chat", "can_delete_messages", "can_manage_video_chats", "can_restrict_members",
    "can_change_info", "can_invite_users", "can_pin_messages",
)  # fmt: skip


def chat_json(world: World, chat: Chat) -> dict[str, Any]:
    if chat.type == "private":
        user = world.user(chat.user_id or chat.id)
        fields = {k: v for k, v in user.items() if k in {"first_name", "last_name", "username"}}
        return {"id": chat.id, "type": "private", **fields}
    result: dict[str, Any] = {"id": chat.id, "type": chat.type, "title": chat.title}
    if chat.is_forum:
        result["is_forum"] = True
    return result


def member_json(world: World, chat: Chat, user_id: int) -> dict[str, Any]:
    user = world.user(user_id)
    if chat.type == "private":
        return {"status": "member", "user": user}
    if chat.admins and user_id == chat.admins[0]:
        return {"status": "creator", "user": user, "is_anonymous": False}
    if user_id in chat.admins:
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
            **dict.fromkeys(_ADMIN_RIGHTS, True),
        }
    if user_id in chat.members:
        return {"status": "member", "user": user}
    return {"status": "left", "user": user}


def message_json(world: World, message: StoredMessage, *, nested: bool = False) -> dict[str, Any]:
    chat = world.chats[message.chat_id]
    result: dict[str, Any] = {
        "message_id": message.message_id,
        "date": message.date,
        "chat": chat_json(world, chat),
        "from": world.user(message.from_id),
    }
    is_document = message.document is not None
    text_key = "caption" if is_document else "text"
    entities_key = "caption_entities" if is_document else "entities"
    if message.text or (message.document is None and message.service is None):
        result[text_key] = message.text
    if message.entities:
        result[entities_key] = [_entity_json(world, e) for e in message.entities]
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
        replied = world.messages[message.chat_id][message.reply_to]
        result["reply_to_message"] = message_json(world, replied, nested=True)
    return result


def page_message_json(world: World, message: StoredMessage) -> dict[str, Any]:
    """A message as the Bot API shows it, with what the playground's page needs besides."""
    result = message_json(world, message)
    result["revision"] = message.revision
    result["deleted"] = message.deleted
    if message.force_reply:
        result["force_reply"] = message.force_reply
    return result


def world_json(world: World) -> dict[str, Any]:
    """The bot, the users and the chats (with their members), for the playground's page."""
    chats = []
    for chat in world.chats.values():
        if chat.migrated_to is not None:
            continue
        members = [chat.user_id or chat.id] if chat.type == "private" else sorted(
            chat.members - {world.bot_id}, key=lambda user_id: (user_id not in chat.admins,
                                                                user_id)
        )
        chats.append({**chat_json(world, chat), "members": members, "admins": chat.admins})
    return {"bot": world.bot_user(), "users": list(world.users.values()), "chats": chats}


def _entity_json(world: World, entity: Entity) -> dict[str, Any]:
    result: dict[str, Any] = {
        "type": entity.type,
        "offset": entity.offset,
        "length": entity.length,
    }
    if entity.type == "text_link":
        result["url"] = entity.url
    elif entity.type == "text_mention" and entity.url:
        user_id = int(entity.url.rpartition("=")[2])
        result["user"] = world.users.get(
            user_id, {"id": user_id, "is_bot": False, "first_name": ""}
        )
    elif entity.type == "pre" and entity.language:
        result["language"] = entity.language
    return result
