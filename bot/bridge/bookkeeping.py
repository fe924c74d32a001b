"""What the Telegram side saw and did, recorded: chats and people, posted cards and
notes, deny-reason prompts, reminders and expiries, and Telegram's updates held until
handled (:mod:`bot.tg.update_inbox`)."""

from __future__ import annotations

from collections.abc import Callable

from bot.bridge.base import NOTHING, REDRAW, BridgeBase, Changes, log
from bot.core.model import CardRow, ChatKind
from bot.protocol.replay import RETENTION_MS

REPLAY_PRUNE_EVERY_MS = 3600 * 1000


class Bookkeeping(BridgeBase):
    """Records what Telegram reported and what the bot showed there."""

    def note_posted(self, note_id: int, message_id: int) -> None:
        self._store.grants.note_posted(note_id, message_id)

    def note_shown(self, note_id: int, generation: int) -> None:
        self._store.grants.note_clean(note_id, generation)

    def note_gone(self, note_id: int) -> None:
        self._store.grants.note_gone(note_id)

    def expire_due(self) -> Changes:
        """Close every open item whose ``expires_at`` has passed; nothing is sent for them."""
        now = self.now_ms()
        expired = self._store.items.expired(now)
        with self._store.transaction():
            for item in expired:
                self._store.items.close(item.agent_id, item.item_id, state="expired", by=None,
                                        at=item.expires_at)
                self._store.audit.append("expired", at=now, agent_id=item.agent_id,
                                         item_id=item.item_id)
        return REDRAW if expired else NOTHING

    def claim_reminder(self, card_id: int) -> None:
        """Mark a card's reminder as sent before it goes out, so a failed send is not
        repeated."""
        self._store.cards.set_reminder(card_id, "sent")

    def reminder_sent(self, card: CardRow, approvers: list[int]) -> None:
        self._store.audit.append("reminder_sent", at=self.now_ms(), chat_id=card.chat_id,
                                 agent_id=card.agent_id, item_id=card.item_id,
                                 approvers=approvers)

    def prune_replay(self) -> int:
        """Forget applied envelopes older than the replay window's retention."""
        return self._store.outbox.forget_before(self.now_ms() - RETENTION_MS)

    def chat_seen(self, chat_id: int, title: str, kind: ChatKind) -> None:
        """A chat as an update showed it (its type is Telegram's ``chat.type``)."""
        self._store.chats.note(chat_id, title, kind)

    def user_seen(self, user_id: int, name: str, username: str | None) -> None:
        self._store.chats.note_user(user_id, name, username)

    def chat_migrated(self, old_id: int, new_id: int, *, force: bool = False) -> Changes:
        """A group became a supergroup: move its bindings, cards, prompts and settings to
        the new id (once; the audit trail records it). Without ``force`` a chat the bot
        holds nothing for is left alone."""
        chats = self._store.chats
        if not (force or self._store.agents.bindings_for_chat(old_id) or chats.title(old_id)):
            return NOTHING
        with self._store.transaction():
            first = old_id not in chats.former_ids(new_id)
            chats.migrate(old_id, new_id)
            if first:
                self._store.audit.append("chat_migrated", at=self.now_ms(), chat_id=new_id,
                                         old_chat_id=old_id)
        log.info("chat %s became supergroup %s; moved its bindings and cards", old_id, new_id)
        return REDRAW

    def chat_membership(self, chat_id: int, present: bool) -> Changes:
        """The bot was added to a chat (again) or left or was removed from it."""
        self._store.chats.set_forbidden(chat_id, not present)
        return REDRAW if present else NOTHING

    def chat_unavailable(self, chat_id: int) -> None:
        """Telegram refuses posts in the chat: stop until the bot is added again."""
        self._store.chats.set_forbidden(chat_id, True)

    def admins_changed(self, chat_id: int) -> None:
        """Forget a chat's cached administrators (someone gained or lost the role)."""
        self._store.chats.forget_admins(chat_id)

    def admins_fetched(self, chat_id: int, admins: dict[int, str]) -> None:
        with self._store.transaction():
            self._store.chats.set_admins(chat_id, admins, self.now_ms())
            for user_id, name in admins.items():
                self._store.chats.note_user(user_id, name, None)

    def prompt_sent(self, chat_id: int, message_id: int, card_id: int, user_id: int) -> None:
        """A deny-reason prompt (a ForceReply) for ``user_id`` went out for a card."""
        self._store.cards.add_prompt(chat_id, message_id, card_id, user_id)

    def secret_revealed(self, card: CardRow, user_id: int, name: str) -> None:
        """An approver had a card's secrets shown in the Mini App: the audit trail says
        who and when."""
        with self._store.transaction():
            self._store.audit.append("reveal", at=self.now_ms(), chat_id=card.chat_id,
                                     agent_id=card.agent_id, item_id=card.item_id,
                                     user_id=user_id, user_name=name)

    # -- cards as the card worker shows them ------------------------------------------------

    # What Telegram already shows is recorded without waiting for the disk: a killed
    # process keeps it, and only a power loss can make the worker show it once more.

    def card_sending(self, card_id: int) -> None:
        """A message of the card is about to go out: the store must take a write first
        (one that fails stops the message before Telegram shows what is not recorded).
        Lost with the power, it changes nothing: the card is posted again either way."""
        with self._store.transaction(durable=False):
            self._store.cards.sending(card_id, self.now_ms())

    def card_posted(self, card: CardRow, message_id: int, shown: int | None = None) -> None:
        """The card's message is out; with ``shown``, it also shows the state read at that
        generation (nothing is left to attach)."""
        now = self.now_ms()
        with self._store.transaction(durable=False):
            self._store.cards.posted(card.card_id, message_id, now)
            self._store.audit.append("card_posted", at=now, chat_id=card.chat_id,
                                     agent_id=card.agent_id, item_id=card.item_id,
                                     message_id=message_id)
            if shown is not None:
                self._store.cards.clean(card.card_id, shown)

    def card_shown(self, card_id: int, generation: int) -> None:
        """The card's message shows the state read at ``generation``."""
        with self._store.transaction(durable=False):
            self._store.cards.clean(card_id, generation)

    def card_message_gone(self, card_id: int) -> None:
        """Someone deleted the card's message: post it again."""
        self._store.cards.repost(card_id)

    def card_topic_gone(self, card_id: int) -> None:
        """The card's forum topic is gone: post it in the chat itself."""
        self._store.cards.clear_topic(card_id)

    def card_attachment_sent(self, card_id: int, generation: int) -> None:
        """The full content went out under the card, which shows ``generation``."""
        with self._store.transaction(durable=False):
            self._store.cards.attachment_sent(card_id)
            self._store.cards.clean(card_id, generation)

    def hold_updates(self, updates: list[tuple[int, str]], *, durable: bool = False) -> None:
        """Store fetched updates (id, JSON) before ``getUpdates`` confirms them.

        By default without waiting for the disk: a killed process keeps them, and the
        handler's own commit (durable for a tap) makes them durable too, so a tap costs one
        ``fsync``. ``durable`` waits for it (a webhook's answer confirms the update at once).
        """
        with self._store.transaction(durable=durable):
            for update_id, body in updates:
                self._store.updates.add(update_id, body)

    def claim_updates(self, replica: str) -> list[tuple[int, str]]:
        """Held updates ``replica`` handles next (see :meth:`Updates.claim`)."""
        return self._store.updates.claim(replica, self.now_ms())

    def next_update_offset(self) -> int | None:
        return self._store.updates.next_offset()

    def update_handled(self, update_id: int) -> bool:
        """Mark an update handled: inside a transaction in progress, as part of it;
        otherwise (its handler changed nothing) without waiting for the disk, like
        :meth:`hold_updates`. False when another replica marked it first."""
        with self._store.transaction(durable=False):
            return self._store.updates.done(update_id)

    def prune_updates(self) -> None:
        self._store.updates.prune()

    def before_each_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` inside every transaction, just before it commits."""
        self._store.on_commit(hook)
