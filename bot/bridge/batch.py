"""A batch of delivered envelopes as it is opened: each agent's snapshot read last, the
replay set, and runs of one agent's snapshots of which only the newest is read."""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.bridge.base import held_log, short
from bot.errors import EnvelopeRefused, RefusalReason
from bot.protocol.envelope import Checked, Opened, Unsealed, accept
from bot.protocol.payloads import InboxUpdate
from bot.protocol.snapshot import SeenSnapshot, rev_hint, snapshot_rev


@dataclass(frozen=True)
class Received:
    """An envelope opened in a batch, and the snapshot of its sender it was read against
    (None: read in full, or read against nothing)."""

    opened: Opened
    basis: SeenSnapshot | None
    supersedes: tuple[Unsealed, ...] = ()
    """The same agent's older snapshots beside this one in the batch (nothing else of the
    agent's in between), left unread and unchecked: this one is the agent's complete inbox
    after them. Opened should this one fail to apply."""


class Snapshots:
    """The last snapshot applied of each agent, as a batch of envelopes sees it while it
    applies them: the bridge's, then those the batch applies, kept once it committed."""

    def __init__(self, kept: dict[str, SeenSnapshot]) -> None:
        self._kept = kept
        self._applied: dict[str, SeenSnapshot | None] = {}

    def get(self, agent_id: str) -> SeenSnapshot | None:
        if agent_id in self._applied:
            return self._applied[agent_id]
        return self._kept.get(agent_id)

    def applied(self, agent_id: str, seen: SeenSnapshot | None) -> None:
        """An agent's snapshot was applied; None: it was read in full (the next one is
        read in full too)."""
        self._applied[agent_id] = seen

    def keep(self) -> None:
        """After the commit: read the agents' next snapshots against these."""
        for agent_id, seen in self._applied.items():
            if seen is None:
                self._kept.pop(agent_id, None)
            else:
                self._kept[agent_id] = seen


@dataclass
class BatchReplay:
    """The envelopes of a batch that the replay set holds (looked up together), and those
    of the batch opened so far (not stored yet)."""

    stored: set[str]
    ids: set[str] = field(default_factory=set)

    def seen(self, envelope_id: str) -> bool:
        return envelope_id in self.ids or envelope_id in self.stored


Hinted = tuple[int, Unsealed]
"""An envelope, and the revision its snapshot seems to have (:func:`rev_hint`)."""


def stretches(unsealed: Sequence[Unsealed]) -> list[list[Hinted]]:
    """The batch in groups, in order of each group's first envelope: each stretch of one
    agent's envelopes that all seem to hold snapshots (two or more, nothing else of the
    agent's in between), and every other envelope alone."""
    senders = collections.Counter(item.envelope.sender for item in unsealed)
    groups: list[list[Hinted]] = []
    open_stretch: dict[str, list[Hinted]] = {}
    for item in unsealed:
        sender = item.envelope.sender
        hint = None
        if senders[sender] > 1 and item.plaintext is not None:
            hint = rev_hint(item.plaintext)
        if hint is None:
            open_stretch.pop(sender, None)
            groups.append([(-1, item)])
            continue
        stretch = open_stretch.get(sender)
        if stretch is None:
            stretch = open_stretch[sender] = []
            groups.append(stretch)
        stretch.append((hint, item))
    return groups


@dataclass
class Batch:
    """What a batch's envelopes are opened against: each agent's snapshot read last, and
    the replay set."""

    reading: dict[str, SeenSnapshot]
    replay: BatchReplay
    checked: dict[int, Checked] = field(default_factory=dict)
    """Envelopes checked ahead (:func:`bot.protocol.envelope.check`), by the ``id()`` of
    their :class:`Unsealed` (envelope ids may repeat in a batch)."""

    def accept(self, item: Unsealed, now: int) -> Received | None:
        """One envelope opened, or None (refused: logged)."""
        sender = item.envelope.sender
        basis = self.reading.get(sender)
        try:
            opened = accept(item, now_ms=now, replay=self.replay, seen=self.reading,
                            checked=self.checked.get(id(item)))
        except EnvelopeRefused as refusal:
            dropped(item.envelope.id, sender, refusal)
            return None
        self.replay.ids.add(opened.envelope.id)
        if isinstance(opened.payload, InboxUpdate):
            seen = opened.read.seen if opened.read else None
            if seen is None:
                self.reading.pop(sender, None)
            else:
                self.reading[sender] = seen
        return Received(opened, basis)

    def accept_stretch(self, stretch: list[Hinted], now: int) -> list[Received]:
        """The newest snapshot of a stretch that opens, standing for the others, when they
        are all older snapshots; or else each that opens, in order."""
        refused: set[int] = set()
        for at in sorted(range(len(stretch)), key=lambda at: (-stretch[at][0], at)):
            newest = self.accept(stretch[at][1], now)
            if newest is None:
                refused.add(at)
                continue
            others = [(index, item) for index, (_, item) in enumerate(stretch)
                      if index != at and index not in refused]
            if _all_older(newest, at, others):
                return [dataclasses.replace(newest, supersedes=tuple(i for _, i in others))]
            held_log.info("snapshots from %s not told apart: opening %d one by one",
                          newest.opened.sender.id[:8], len(others) + 1)
            self._forget(newest)
            return [delivery for index, (_, item) in enumerate(stretch)
                    if index not in refused and (delivery := self.accept(item, now))]
        return []

    def _forget(self, delivery: Received) -> None:
        """Undo :meth:`accept` of an envelope, to accept it again in its turn."""
        sender = delivery.opened.sender.id
        self.replay.ids.discard(delivery.opened.envelope.id)
        if delivery.basis is None:
            self.reading.pop(sender, None)
        else:
            self.reading[sender] = delivery.basis


def _all_older(newest: Received, at: int, others: list[tuple[int, Unsealed]]) -> bool:
    """Whether each of ``others`` (by its place in the stretch) holds a snapshot older than
    ``newest``'s, at ``at``, or as old and after it; checked against its layout."""
    update, read = newest.opened.payload, newest.opened.read
    if not isinstance(update, InboxUpdate):
        return False
    layout = read.layout if read else None
    for index, item in others:
        rev = None if item.plaintext is None else snapshot_rev(item.plaintext, layout)
        if rev is None or rev > update.rev or (rev == update.rev and index < at):
            return False
    return True


def dropped(envelope_id: object, sender: object, refusal: EnvelopeRefused) -> None:
    level = logging.INFO if refusal.reason is RefusalReason.REPLAY else logging.WARNING
    held_log.log(level, "dropped envelope %s from %s: %s", short(envelope_id), short(sender),
                 refusal)
