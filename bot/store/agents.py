"""Paired agents, their bindings to chats, pairings in progress and each agent's last
inbox revision."""

from __future__ import annotations

from bot.core.model import Binding, Pairing, Peer
from bot.store.sql import Sql


class AgentsView:
    """Reading the agents' tables."""

    def __init__(self, db: Sql) -> None:
        self._db = db

    def peers(self) -> list[Peer]:
        rows = self._db.all("SELECT agent_id, relay_url, card_json, name FROM peers ORDER BY rowid")
        return [Peer(**dict(row)) for row in rows]

    def peer(self, agent_id: str) -> Peer | None:
        row = self._db.one(
            "SELECT agent_id, relay_url, card_json, name FROM peers WHERE agent_id = ?",
            (agent_id,),
        )
        return Peer(**dict(row)) if row else None

    def is_bound(self, agent_id: str, chat_id: int) -> bool:
        row = self._db.one(
            "SELECT 1 FROM bindings WHERE agent_id = ? AND chat_id = ?", (agent_id, chat_id)
        )
        return row is not None

    def bindings_for_agent(self, agent_id: str) -> list[Binding]:
        rows = self._db.all(
            "SELECT agent_id, chat_id, topic_id FROM bindings WHERE agent_id = ? ORDER BY rowid",
            (agent_id,),
        )
        return [Binding(**dict(row)) for row in rows]

    def bindings_for_chat(self, chat_id: int) -> list[Binding]:
        rows = self._db.all(
            "SELECT agent_id, chat_id, topic_id FROM bindings WHERE chat_id = ? ORDER BY rowid",
            (chat_id,),
        )
        return [Binding(**dict(row)) for row in rows]

    def last_rev(self, agent_id: str) -> int | None:
        row = self._db.one("SELECT last_rev FROM agent_state WHERE agent_id = ?", (agent_id,))
        return int(row["last_rev"]) if row else None

    def last_update_at(self, agent_id: str) -> int | None:
        row = self._db.one("SELECT updated_at FROM agent_state WHERE agent_id = ?", (agent_id,))
        return int(row["updated_at"]) if row else None

    def pending_pairings(self, since_ms: int) -> list[Pairing]:
        """Pairings started at or after ``since_ms`` that the agent has not accepted yet."""
        rows = self._db.all(
            "SELECT * FROM pairings WHERE accepted_at IS NULL AND created_at >= ?"
            " ORDER BY created_at",
            (since_ms,),
        )
        return [Pairing(**dict(row)) for row in rows]

    def pairing(self, agent_id: str) -> Pairing | None:
        row = self._db.one("SELECT * FROM pairings WHERE agent_id = ?", (agent_id,))
        return Pairing(**dict(row)) if row else None

    def pairing_rejection(self, agent_id: str) -> str | None:
        """Why the agent refused the latest pairing with it (None: it did not)."""
        row = self._db.one("SELECT reason FROM pairing_rejections WHERE agent_id = ?",
                           (agent_id,))
        return str(row["reason"]) if row else None


class Agents(AgentsView):
    """Reading and writing the agents' tables."""

    def add_peer(self, peer: Peer, now_ms: int) -> None:
        self._db.run(
            "INSERT INTO peers (agent_id, relay_url, card_json, name, paired_at)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (agent_id) DO UPDATE SET"
            " relay_url = excluded.relay_url, card_json = excluded.card_json,"
            " name = excluded.name",
            (peer.agent_id, peer.relay_url, peer.card_json, peer.name, now_ms),
        )

    def bind(self, agent_id: str, chat_id: int, topic_id: int | None, now_ms: int) -> None:
        self._db.run(
            "INSERT INTO bindings (agent_id, chat_id, topic_id, bound_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (agent_id, chat_id) DO UPDATE SET topic_id = excluded.topic_id",
            (agent_id, chat_id, topic_id, now_ms),
        )

    def unbind(self, agent_id: str, chat_id: int) -> None:
        """Remove a binding; the agent's cards in the chat are marked for editing."""
        self._db.run(
            "DELETE FROM bindings WHERE agent_id = ? AND chat_id = ?", (agent_id, chat_id)
        )
        self._db.run(
            "UPDATE cards SET dirty = dirty + 1 WHERE agent_id = ? AND chat_id = ?",
            (agent_id, chat_id),
        )

    def set_rev(self, agent_id: str, rev: int, now_ms: int) -> None:
        self._db.run(
            "INSERT INTO agent_state (agent_id, last_rev, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT (agent_id) DO UPDATE SET last_rev = excluded.last_rev,"
            " updated_at = excluded.updated_at",
            (agent_id, rev, now_ms),
        )

    def add_pairing(
        self,
        agent_id: str,
        relay_url: str,
        card_json: str,
        *,
        chat_id: int,
        topic_id: int | None,
        requested_by: int | None,
        now_ms: int,
    ) -> None:
        self._db.run(
            "INSERT INTO pairings (agent_id, relay_url, card_json, chat_id, topic_id,"
            " requested_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id)"
            " DO UPDATE SET relay_url = excluded.relay_url, card_json = excluded.card_json,"
            " chat_id = excluded.chat_id, topic_id = excluded.topic_id,"
            " requested_by = excluded.requested_by, created_at = excluded.created_at,"
            " accepted_at = NULL",
            (agent_id, relay_url, card_json, chat_id, topic_id, requested_by, now_ms),
        )
        self._db.run("DELETE FROM pairing_rejections WHERE agent_id = ?", (agent_id,))

    def pairing_rejected(self, agent_id: str, reason: str, now_ms: int) -> None:
        """The agent refused: the pairing is over (no relay session is kept for it)."""
        self._db.run("DELETE FROM pairings WHERE agent_id = ? AND accepted_at IS NULL",
                     (agent_id,))
        self._db.run("INSERT INTO pairing_rejections (agent_id, reason, at) VALUES (?, ?, ?)"
                     " ON CONFLICT (agent_id) DO UPDATE SET reason = excluded.reason,"
                     " at = excluded.at", (agent_id, reason, now_ms))

    def cancel_pairing(self, agent_id: str) -> None:
        """Give up a pairing the agent has not accepted."""
        self._db.run("DELETE FROM pairings WHERE agent_id = ? AND accepted_at IS NULL",
                     (agent_id,))

    def pairing_accepted(self, agent_id: str, now_ms: int) -> None:
        self._db.run(
            "UPDATE pairings SET accepted_at = ? WHERE agent_id = ?", (now_ms, agent_id)
        )
