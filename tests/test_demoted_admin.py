"""With ``approvers = "admins"``, an administrator list older than a short grace period is
not trusted for a decision: the tapper, and whoever's vote completes a quorum, are checked
with ``getChatMember`` first. A demoted admin can neither veto nor complete a quorum."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from world import (
    ADA,
    BOB,
    DAVE,
    FAST_RELAY,
    OPS_GROUP,
    World,
    approval,
    bot_config,
    make_world,
)

from bot.app import Bot
from bot.config import parse_config
from bot.playground.stub import StoredMessage
from bot.testing.clock import ShiftedClock
from bot.tg.approvers import ADMIN_CACHE_MS, ADMIN_GRACE_MS

PAST_GRACE_S = (ADMIN_GRACE_MS + 60_000) / 1000
assert PAST_GRACE_S * 1000 < ADMIN_CACHE_MS  # still inside the cache's ten minutes


@asynccontextmanager
async def admins_decide(
    tmp: Path, required: int
) -> AsyncIterator[tuple[World, ShiftedClock, StoredMessage]]:
    """A group whose admins Ada and Bob approve, with one card posted in it."""
    async with make_world(tmp) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA, BOB], members=[DAVE])
        data = bot_config(tmp, world.tg.api_url)
        data["chats"] = [{"id": OPS_GROUP, "approvers": "admins",
                          "required_approvals": required}]
        clock = ShiftedClock()
        async with Bot(parse_config(data, base=tmp), clock=clock, relay_options=FAST_RELAY):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_admins"))
            yield world, clock, await world.wait_card(OPS_GROUP, "apr_admins")


async def test_a_demoted_admin_cannot_veto(tmp_path: Path) -> None:
    async with admins_decide(tmp_path, required=1) as (world, clock, card):
        observer = world.tap(OPS_GROUP, card, DAVE, "Deny")  # fills the admin cache
        assert (await world.answer_of(observer))["show_alert"] is True
        world.tg.world.chat(OPS_GROUP).admins.remove(BOB)  # demoted in Telegram
        clock.advance(PAST_GRACE_S)
        veto = world.tap(OPS_GROUP, card, BOB, "❌ Deny")
        assert (await world.answer_of(veto))["show_alert"] is True
        assert world.agent.decisions == []
        world.tap(OPS_GROUP, card, ADA, "❌ Deny")  # a current admin still decides
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)


async def test_a_demoted_admins_vote_does_not_complete_a_quorum(tmp_path: Path) -> None:
    async with admins_decide(tmp_path, required=2) as (world, clock, card):
        first = world.tap(OPS_GROUP, card, BOB, "Approve")
        assert (await world.answer_of(first))["show_alert"] is False
        card = await world.wait_card(OPS_GROUP, "apr_admins", lambda m: "1 of 2" in m.text)
        world.tg.world.chat(OPS_GROUP).admins.remove(BOB)
        clock.advance(PAST_GRACE_S)
        second = world.tap(OPS_GROUP, card, ADA, "Approve")
        assert (await world.answer_of(second))["text"] == "Counted: 1 of 2 approvals."
        assert world.agent.decisions == []


async def test_a_demoted_admins_vote_leaves_the_cards_tally(tmp_path: Path) -> None:
    async with admins_decide(tmp_path, required=2) as (world, clock, card):
        world.tap(OPS_GROUP, card, BOB, "Approve")
        card = await world.wait_card(OPS_GROUP, "apr_admins", lambda m: "1 of 2" in m.text)
        assert "Bob" in card.text
        world.tg.world.chat(OPS_GROUP).admins.remove(BOB)
        clock.advance(PAST_GRACE_S)
        world.tap(OPS_GROUP, card, ADA, "Approve")
        card = await world.wait_card(
            OPS_GROUP, "apr_admins", lambda m: "Approvals 1 of 2: Ada" in m.text)
        assert "Bob" not in card.text.split("Approvals", 1)[1]
        with sqlite3.connect(tmp_path / "state" / "skald-telegram.sqlite3") as db:
            lapsed = db.execute("SELECT user_id, detail FROM audit WHERE event = 'vote_lapsed'"
                                ).fetchall()
        assert lapsed == [(BOB, json.dumps({"reason": "no longer an approver"}))]
