"""The bot's use cases: the only writer of its state, independent of Telegram and sockets.

It applies what agents send (envelopes in, store changes out), turns what people decide
into sealed envelopes in the outbox, and records what the Telegram side saw and did (chats,
posted cards, prompts, reminders). Each use case is one store transaction and returns the
:class:`Changes` it made; the caller acts on them (wakes the card worker, flushes a relay)
only after the commit. A crash between any two steps leaves a state the next start
finishes: cards are rows waiting to be shown, decisions are outbox rows waiting for the
relay.

One module per job, over :mod:`bot.bridge.base` (the shared vocabulary):
:mod:`~bot.bridge.intake` (deliveries opened and batched, :mod:`~bot.bridge.batch`),
:mod:`~bot.bridge.applying` (agents' payloads applied), :mod:`~bot.bridge.decisions`
(taps, decisions and grants), :mod:`~bot.bridge.editing` (edits before approving),
:mod:`~bot.bridge.digests` (digests, batch taps),
:mod:`~bot.bridge.pairing` and :mod:`~bot.bridge.bookkeeping` (what Telegram reported
and showed).
"""

from __future__ import annotations

from bot.bridge.base import Changes
from bot.bridge.bookkeeping import REPLAY_PRUNE_EVERY_MS, Bookkeeping
from bot.bridge.decisions import (
    REVOKE_CONFIRM_S,
    Decisions,
    RevokeReport,
    TapReport,
    wait_until_revoked,
)
from bot.bridge.digests import BatchReport, DigestKeeping
from bot.bridge.editing import Editing, EditReport
from bot.bridge.intake import OFF_LOOP_BYTES, Intake
from bot.bridge.pairing import PAIRING_TIMEOUT_S, Pairings, wait_until_paired

__all__ = [
    "OFF_LOOP_BYTES",
    "PAIRING_TIMEOUT_S",
    "REPLAY_PRUNE_EVERY_MS",
    "REVOKE_CONFIRM_S",
    "BatchReport",
    "Bridge",
    "Changes",
    "EditReport",
    "RevokeReport",
    "TapReport",
    "wait_until_paired",
    "wait_until_revoked",
]


class Bridge(Intake, DigestKeeping, Editing, Decisions, Pairings, Bookkeeping):
    """Applies agents' envelopes, people's decisions and what Telegram reported to the
    store: the one writer of the bot's state."""
