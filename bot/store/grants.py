"""Grants: the ones agents report in force, the ones approvers gave on cards, the calls
that ran under them (activity), and the bot's messages that show them (notes: activity
logs and ``/grants`` lists).

A note waiting to be posted or edited has a non-zero change counter (``dirty``), as cards
do; the note worker clears it once the message shows the current state.
"""

from __future__ import annotations

from typing import cast

from bot.core.grants import ActivityRow, GrantedRow, GrantRow, NoteKind, NoteRow
from bot.store.sql import Row, Sql

_NOTES_SHOWING_GRANT = (
    "SELECT l.note_id FROM note_lines l JOIN notes n ON n.note_id = l.note_id"
    " WHERE n.kind = 'grants' AND l.agent_id = ? AND l.ref = ?"
    " UNION SELECT l.note_id FROM note_lines l JOIN notes n ON n.note_id = l.note_id"
    " JOIN activity a ON a.agent_id = l.agent_id AND a.entry_id = l.ref"
    " WHERE n.kind = 'activity' AND a.agent_id = ? AND a.grant_id = ?"
)


class GrantsView:
    """Reading grants, activity and notes."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def of_agent(self, agent_id: str) -> dict[str, GrantRow]:
        rows = self._db.all("SELECT * FROM grants WHERE agent_id = ?", (agent_id,))
        return {str(r["grant_id"]): GrantRow(**dict(r)) for r in rows}

    def get(self, agent_id: str, grant_id: str) -> GrantRow | None:
        row = self._db.one("SELECT * FROM grants WHERE agent_id = ? AND grant_id = ?",
                           (agent_id, grant_id))
        return GrantRow(**dict(row)) if row else None

    def by_token(self, token: str) -> GrantRow | None:
        row = self._db.one("SELECT * FROM grants WHERE token = ?", (token,))
        return GrantRow(**dict(row)) if row else None

    def active_for_chat(self, chat_id: int, now_ms: int) -> list[GrantRow]:
        """Grants in force for the agents bound to a chat, the soonest to end first."""
        rows = self._db.all(
            "SELECT g.* FROM grants g JOIN bindings b ON b.agent_id = g.agent_id"
            " WHERE b.chat_id = ? AND g.state = 'active'"
            " AND (g.expires_at IS NULL OR g.expires_at > ?)"
            " ORDER BY coalesce(g.expires_at, 9e18), g.grant_id",
            (chat_id, now_ms),
        )
        return [GrantRow(**dict(r)) for r in rows]

    def granted(self, agent_id: str, item_id: str) -> GrantedRow | None:
        row = self._db.one("SELECT * FROM granted WHERE agent_id = ? AND item_id = ?",
                           (agent_id, item_id))
        return GrantedRow(**dict(row)) if row else None

    def note(self, note_id: int) -> NoteRow | None:
        row = self._db.one("SELECT * FROM notes WHERE note_id = ?", (note_id,))
        return _note(row) if row else None

    def latest_note(self, chat_id: int, kind: NoteKind) -> NoteRow | None:
        row = self._db.one(
            "SELECT * FROM notes WHERE chat_id = ? AND kind = ? ORDER BY note_id DESC LIMIT 1",
            (chat_id, kind),
        )
        return _note(row) if row else None

    def dirty_notes(self, chat_id: int) -> list[NoteRow]:
        rows = self._db.all(
            "SELECT * FROM notes WHERE dirty > 0 AND chat_id = ? ORDER BY note_id", (chat_id,)
        )
        return [_note(r) for r in rows]

    def chats_with_dirty_notes(self) -> list[int]:
        """Chats with notes waiting to be posted or edited (forbidden ones too)."""
        rows = self._db.all("SELECT DISTINCT chat_id FROM notes WHERE dirty > 0")
        return [int(r["chat_id"]) for r in rows]

    def note_activity(self, note_id: int) -> list[ActivityRow]:
        """The calls an activity note lists, in the order they were added."""
        rows = self._db.all(
            "SELECT a.* FROM note_lines l JOIN activity a"
            " ON a.agent_id = l.agent_id AND a.entry_id = l.ref"
            " WHERE l.note_id = ? ORDER BY l.seq",
            (note_id,),
        )
        return [ActivityRow(**dict(r)) for r in rows]

    def note_grants(self, note_id: int) -> list[tuple[str, str]]:
        """(agent id, grant id) of the grants a ``/grants`` note lists, in order."""
        rows = self._db.all(
            "SELECT agent_id, ref FROM note_lines WHERE note_id = ? ORDER BY seq", (note_id,)
        )
        return [(str(r["agent_id"]), str(r["ref"])) for r in rows]

    def has_activity(self, agent_id: str, entry_id: str) -> bool:
        row = self._db.one("SELECT 1 FROM activity WHERE agent_id = ? AND entry_id = ?",
                           (agent_id, entry_id))
        return row is not None


class Grants(GrantsView):
    """Reading and writing grants, activity and notes."""

    def add(self, agent_id: str, row: GrantRow) -> None:
        self._db.run(
            "INSERT INTO grants (agent_id, grant_id, key, label, granted_by, granted_at,"
            " expires_at, uses, token) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (agent_id, row.grant_id, row.key, row.label, row.granted_by, row.granted_at,
             row.expires_at, row.uses, row.token),
        )

    def update(self, agent_id: str, grant_id: str, *, uses: int, expires_at: int | None) -> None:
        """New uses or expiry of a grant in force (its key and label never change)."""
        self._db.run(
            "UPDATE grants SET uses = ?, expires_at = ? WHERE agent_id = ? AND grant_id = ?",
            (uses, expires_at, agent_id, grant_id),
        )

    def end(self, agent_id: str, grant_id: str, *, state: str, now_ms: int) -> None:
        """The agent no longer lists the grant: ``revoked`` or ``ended``."""
        self._db.run(
            "UPDATE grants SET state = ?, ended_at = ? WHERE agent_id = ? AND grant_id = ?",
            (state, now_ms, agent_id, grant_id),
        )
        self.mark_notes(agent_id, grant_id)

    def revoke_requested(self, agent_id: str, grant_id: str, *, by: str, now_ms: int) -> None:
        self._db.run(
            "UPDATE grants SET revoke_by = ?, revoke_at = ? WHERE agent_id = ? AND grant_id = ?",
            (by, now_ms, agent_id, grant_id),
        )
        self.mark_notes(agent_id, grant_id)

    def mark_notes(self, agent_id: str, grant_id: str) -> None:
        """Every note showing the grant is to be edited."""
        self._db.run(
            f"UPDATE notes SET dirty = dirty + 1 WHERE note_id IN ({_NOTES_SHOWING_GRANT})",
            (agent_id, grant_id, agent_id, grant_id),
        )

    def add_granted(self, row: GrantedRow) -> None:
        self._db.run(
            "INSERT INTO granted (agent_id, item_id, chat_id, label, minutes, until, user_name)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id, item_id) DO UPDATE SET"
            " chat_id = excluded.chat_id, label = excluded.label, minutes = excluded.minutes,"
            " until = excluded.until, user_name = excluded.user_name",
            (row.agent_id, row.item_id, row.chat_id, row.label, row.minutes, row.until,
             row.user_name),
        )

    def add_activity(self, row: ActivityRow) -> bool:
        """Hold a call reported under a grant; False when its id was seen before."""
        cursor = self._db.run(
            "INSERT INTO activity (agent_id, entry_id, tool, summary, grant_id, at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (row.agent_id, row.entry_id, row.tool, row.summary, row.grant_id, row.at),
        )
        return cursor.rowcount == 1

    def add_note(self, kind: NoteKind, chat_id: int, topic_id: int | None, now_ms: int) -> int:
        """A new note, waiting to be posted."""
        row = self._db.one(
            "INSERT INTO notes (kind, chat_id, topic_id, opened_at) VALUES (?, ?, ?, ?)"
            " RETURNING note_id",
            (kind, chat_id, topic_id, now_ms),
        )
        return int(row[0]) if row else 0

    def add_note_line(self, note_id: int, agent_id: str, ref: str) -> None:
        """Append a line: an activity entry id, or a grant id."""
        self._db.run(
            "INSERT INTO note_lines (note_id, seq, agent_id, ref) SELECT ?,"
            " coalesce(max(seq), 0) + 1, ?, ? FROM note_lines WHERE note_id = ?",
            (note_id, agent_id, ref, note_id),
        )

    def mark_note(self, note_id: int) -> None:
        self._db.run("UPDATE notes SET dirty = dirty + 1 WHERE note_id = ?", (note_id,))

    def note_posted(self, note_id: int, message_id: int) -> None:
        self._db.run("UPDATE notes SET message_id = ? WHERE note_id = ?", (message_id, note_id))

    def note_clean(self, note_id: int, generation: int) -> None:
        self._db.run("UPDATE notes SET dirty = 0 WHERE note_id = ? AND dirty = ?",
                     (note_id, generation))

    def note_gone(self, note_id: int) -> None:
        """The note's message was deleted: it stays gone (an activity log is not reposted)."""
        self._db.run("UPDATE notes SET dirty = 0 WHERE note_id = ?", (note_id,))


def _note(row: Row) -> NoteRow:
    values = dict(row)
    values["kind"] = cast(NoteKind, values["kind"])
    return NoteRow(**values)
