"""Digests and batch taps: keeping each agent's digest of waiting approvals in step with
the store (a new version whenever its list changes), and "Approve all" / "Deny all",
which decide the items of the version tapped, one tap each, through :meth:`Decisions.tap`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from bot.bridge.base import NOTHING, REDRAW, BridgeBase, Changes, new_token
from bot.bridge.decisions import Decisions, TapReport
from bot.core.digest import wanted_items
from bot.core.policy import Action, Refusal
from bot.protocol.payloads import Person


@dataclass(frozen=True)
class BatchReport:
    """What a confirmed batch tap did: one report per item it reached, the items it
    skipped (decided meanwhile, or left out of batches), and ``refusal`` when it reached
    nothing because the digest is unknown here."""

    taps: tuple[TapReport, ...] = ()
    skipped: tuple[str, ...] = ()
    refusal: Refusal | None = None
    changes: Changes = NOTHING


class DigestKeeping(Decisions, BridgeBase):
    """Digests in step with the open approvals, and batch decisions."""

    def sync_digests(self) -> Changes:
        """Give every digest whose list of waiting approvals changed a new version (and a
        digest to each agent and chat that needs one first)."""
        wanted: dict[tuple[int, str], list[str]] = {}
        topics: dict[tuple[int, str], int | None] = {}
        for chat_id, agent_id, topic_id, item_id in self._store.digests.waiting():
            wanted.setdefault((chat_id, agent_id), []).append(item_id)
            topics.setdefault((chat_id, agent_id), topic_id)
        for known in self._store.digests.all():
            wanted.setdefault((known.chat_id, known.agent_id), [])
        news: list[tuple[int, str, tuple[str, ...]]] = []
        for (chat_id, agent_id), open_items in wanted.items():
            items = wanted_items(open_items, batch=self.policy(chat_id).batch)
            digest = self._store.digests.of(chat_id, agent_id)
            if (digest is None and items) or (digest is not None and items != (
                    self._store.digests.items(digest.digest_id, digest.version))):
                news.append((chat_id, agent_id, items))
        if not news:
            return NOTHING
        # Durable: a version number must never come back listing other items after a crash
        # (a button of the lost version would then decide what its tapper never saw).
        with self._store.transaction():
            for chat_id, agent_id, items in news:
                digest = self._store.digests.of(chat_id, agent_id)
                digest_id = digest.digest_id if digest is not None else \
                    self._store.digests.add(chat_id, agent_id, topics.get((chat_id, agent_id)),
                                            new_token())
                self._store.digests.add_version(digest_id, items)
        return REDRAW

    def digest_posted(self, digest_id: int, message_id: int | None) -> None:
        """The digest's message is ``message_id`` now (None: removed)."""
        with self._store.transaction():
            self._store.digests.posted(digest_id, message_id)

    def digest_shown(self, digest_id: int, generation: int) -> None:
        with self._store.transaction(durable=False):
            self._store.digests.clean(digest_id, generation)

    def batch(
        self,
        token: str,
        version: int,
        action: Action,
        *,
        chat_id: int,
        tapper: Person,
        approvers: frozenset[int],
        left_out: Collection[str],
    ) -> BatchReport:
        """A confirmed "Approve all" or "Deny all" (``action`` APPROVE or DENY) on version
        ``version`` of a digest: each item that version listed and that is still open,
        except those ``left_out`` of batches (a secret, a warning) and those with an edit
        in progress, is tapped once by
        ``tapper``: in a quorum chat, one vote each. Never a grant."""
        if action not in (Action.APPROVE, Action.DENY):
            raise ValueError(f"a batch approves or denies, not {action.name}")
        digest = self._store.digests.by_token(token)
        if digest is None or digest.chat_id != chat_id or version < 1 \
                or version > digest.version:
            self.record_refused_tap(chat_id, tapper, "batch_" + action.name.lower(),
                                    Refusal.UNKNOWN_CARD)
            return BatchReport(refusal=Refusal.UNKNOWN_CARD)
        cards = {item.item_id: card for item, card in self._store.items.open_in_chat(chat_id)
                 if card.agent_id == digest.agent_id and item.kind == "approval"}
        taps: list[TapReport] = []
        skipped: list[str] = []
        changes = NOTHING
        for item_id in self._store.digests.items(digest.digest_id, version):
            card = cards.get(item_id)
            if card is None or item_id in left_out or self._store.edits.in_progress(
                    card.card_id):
                skipped.append(item_id)
                continue
            report = self.tap(card.token, action, chat_id=chat_id, tapper=tapper,
                              approvers=approvers)
            taps.append(report)
            changes |= report.changes
        return BatchReport(tuple(taps), tuple(skipped), changes=changes)
