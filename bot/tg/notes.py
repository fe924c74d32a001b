"""Shows what ran under grants, and keeps ``/grants`` lists current: the bot's quiet
messages that are not cards (notes).

An activity note lists the calls agents ran without asking because a grant covered them,
with each grant's remaining time and a Revoke button; it is sent without a notification
and edited as new calls arrive (see :func:`bot.bridge.Bridge._apply_activity` for when a
new one starts). A ``/grants`` note is edited when a grant it lists is revoked or ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from bot.bridge import Bridge
from bot.clock import Clock, from_ms
from bot.config import Config
from bot.core.grants import (
    ACTIVITY_LINES_SHOWN,
    GrantRow,
    NoteRow,
    grant_status,
    minutes_left,
)
from bot.errors import ChatUnavailable, MessageGone, SkaldError, StoreUnavailable, Throttled
from bot.render import Renderer
from bot.render.environment import in_zone
from bot.tg.gateway import Gateway
from bot.tg.keyboards import Keyboard, revoke_keyboard

log = logging.getLogger(__name__)

RETRY_DELAY_S = 5.0


class NoteWorker:
    """Posts and edits activity and grants notes, one chat at a time, paced per chat."""

    def __init__(
        self, *, bridge: Bridge, gateway: Gateway, renderer: Renderer, config: Config,
        clock: Clock,
    ) -> None:
        self._bridge = bridge
        self._view = bridge.view
        self._gateway = gateway
        self._renderer = renderer
        self._pace_s = config.chat_pace_s
        self._clock = clock
        self._wake = asyncio.Event()
        self._last_send: dict[int, float] = {}
        self._unrecorded: dict[int, int] = {}
        """Per note: the message Telegram took that the store has not recorded yet (no
        other note goes out meanwhile)."""

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            failed = False
            for chat_id in self._postable_chats():
                for note in self._view.grants.dirty_notes(chat_id):
                    failed |= not await self._attempt(note)
            if failed:
                await self._clock.wait(self._wake, RETRY_DELAY_S)
            elif not self._postable_chats():
                await self._wake.wait()

    def _postable_chats(self) -> list[int]:
        """Chats with notes to show where the bot may post."""
        return [chat_id for chat_id in self._view.grants.chats_with_dirty_notes()
                if not self._view.chats.forbidden(chat_id)]

    async def _attempt(self, note: NoteRow) -> bool:
        """Show one note; False when it must be tried again later."""
        return await shown(self._show(note), f"note {note.note_id}", note.chat_id,
                           self._bridge, self._clock)

    async def _show(self, note: NoteRow) -> None:
        sent = self._unrecorded.get(note.note_id)
        if sent is not None:
            # Sent already: record it (never send it again); edits come on the next pass.
            self._record(note.note_id, sent)
            return
        html, buttons = self._activity(note) if note.kind == "activity" else self._grants(note)
        wait = self._last_send.get(note.chat_id, 0.0) + self._pace_s - self._clock.time()
        if wait > 0:
            await self._clock.sleep(wait)
        try:
            if note.message_id is None:
                if self._unrecorded:
                    raise StoreUnavailable("a note sent is not recorded yet: waiting for "
                                           "the store")
                message_id = await self._gateway.send(
                    note.chat_id, html, keyboard=buttons, topic_id=note.topic_id, quiet=True)
                self._unrecorded[note.note_id] = message_id
                self._record(note.note_id, message_id)
            else:
                try:
                    await self._gateway.edit(note.chat_id, note.message_id, html,
                                             keyboard=buttons)
                except MessageGone:
                    self._bridge.note_gone(note.note_id)
                    return
        finally:
            self._last_send[note.chat_id] = self._clock.time()
        self._bridge.note_shown(note.note_id, note.dirty)

    def _record(self, note_id: int, message_id: int) -> None:
        """Record a note Telegram took; while the store fails, it is recorded again on the
        note's next turn, and no other note goes out."""
        try:
            self._bridge.note_posted(note_id, message_id)
        except StoreUnavailable:
            raise  # kept: recorded on the note's next turn
        except BaseException:
            del self._unrecorded[note_id]  # not the store: waiting would not help
            raise
        del self._unrecorded[note_id]

    def _activity(self, note: NoteRow) -> tuple[str, Keyboard]:
        now = self._bridge.now_ms()
        entries = self._view.grants.note_activity(note.note_id)
        grants: dict[tuple[str, str], GrantRow | None] = {}
        lines = []
        agents = sorted({self._agent_name(entry.agent_id) for entry in entries})
        for entry in entries:
            grant = self._view.grants.get(entry.agent_id, entry.grant_id) \
                if entry.grant_id else None
            if entry.grant_id:
                grants.setdefault((entry.agent_id, entry.grant_id), grant)
            lines.append({"summary": entry.summary, "tool": entry.tool,
                          "by": grant.granted_by if grant else None,
                          "agent": self._agent_name(entry.agent_id)})
        zone = self._bridge.policy(note.chat_id).timezone
        shown = [self._grant_view(row, grant_id, now, zone)
                 for (_a, grant_id), row in grants.items()]
        html = self._renderer.message(
            "activity", lines=lines[-ACTIVITY_LINES_SHOWN:],
            earlier=max(0, len(lines) - ACTIVITY_LINES_SHOWN), grants=shown,
            agents=agents,
        )
        return html, self._revoke_buttons([g for g in grants.values() if g is not None], now)

    def _grants(self, note: NoteRow) -> tuple[str, Keyboard]:
        now = self._bridge.now_ms()
        rows = [self._view.grants.get(agent_id, grant_id)
                for agent_id, grant_id in self._view.grants.note_grants(note.note_id)]
        known = [row for row in rows if row is not None]
        zone = self._bridge.policy(note.chat_id).timezone
        html = self._renderer.message(
            "grants", grants=[self._grant_view(row, row.grant_id, now, zone) for row in known])
        return html, self._revoke_buttons(known, now)

    def _grant_view(
        self, row: GrantRow | None, grant_id: str, now: int, zone: str
    ) -> dict[str, object]:
        if row is None:
            return {"id": grant_id, "status": "unknown", "label": grant_id, "by": None,
                    "agent": None, "until": None, "minutes_left": None, "uses": None,
                    "revoke_by": None}
        return {
            "id": grant_id,
            "status": grant_status(row, now),
            "label": row.label,
            "by": row.granted_by,
            "agent": self._agent_name(row.agent_id),
            "until": None if row.expires_at is None else in_zone(from_ms(row.expires_at), zone),
            "minutes_left": minutes_left(row, now),
            "uses": row.uses,
            "revoke_by": row.revoke_by,
        }

    @staticmethod
    def _revoke_buttons(grants: list[GrantRow], now: int) -> Keyboard:
        return revoke_keyboard([(g.token, g.label) for g in grants
                                if grant_status(g, now) == "active"])

    def _agent_name(self, agent_id: str) -> str:
        peer = self._view.agents.peer(agent_id)
        return peer.name if peer else agent_id[:8]


async def shown(showing: Awaitable[None], what: str, chat_id: int, bridge: Bridge,
                clock: Clock) -> bool:
    """Await ``showing`` (a message of the bot's kept up to date in ``chat_id``); False when
    it must be tried again later: Telegram throttled the bot (waited out here) or refused
    for a reason that may pass. A chat the bot may no longer post in is recorded as such."""
    try:
        await showing
    except Throttled as exc:
        await clock.sleep(exc.retry_after)
        return False
    except ChatUnavailable as exc:
        log.warning("stopped posting in chat %s: %s", chat_id, exc)
        bridge.chat_unavailable(chat_id)
    except SkaldError as exc:
        log.warning("could not update %s in chat %s: %s", what, chat_id, exc)
        return False
    return True
