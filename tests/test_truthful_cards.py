"""Cards say what is true: a decision shows as "sending…" until its relay takes it, the
tap's answer claims no delivery that has not happened, and a decision the agent did not
take (the item expired before it arrived) ends the card saying so, with both in the audit
trail. The real bot against the Telegram stand-in; the real agent host in this process,
on the bot's clock."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from test_grants_agenthost import Clock, paired_host
from world import ADA, FAST_RELAY, World, approval, make_world, running_bot

from bot.agenthost.service import AgentHost
from bot.agenthost.store import AgentStore
from bot.protocol.identity import Identity
from bot.relay.server import RelayServer

LATE = "Expired before the approval reached the agent: nothing ran"


async def test_the_host_answers_a_late_decision_with_how_the_item_ended(tmp_path: Path) -> None:
    clock = Clock()
    with paired_host(tmp_path, clock) as (host, phone):
        def ask(name: str) -> str:
            return host.submit_approval(tool="send_email", summary=name, arguments={},
                                        blocks=None, timeout_s=60).item_id

        # Its time ran out, and the decision came before the host's expiry loop did.
        first = ask("first")
        clock.advance(2)
        await phone.decide(first, grant=None)
        assert host.get(first).state.value == "expired"
        resolved = {e.id: e.outcome for e in phone.last_update().resolved}
        assert resolved[first] == "expired"

        # Expired long ago: a hundred items ended after it.
        second = ask("second")
        clock.advance(2)
        assert [item.item_id for item in host.expire_due()] == [second]
        for index in range(100):
            clock.advance(0.01)
            host.withdraw(ask(f"other {index}"))
        phone.received()
        await phone.decide(second, grant=None)
        assert host.get(second).state.value == "expired"
        resolved = {e.id: e.outcome for e in phone.last_update().resolved}
        assert resolved[second] == "expired"


async def test_relay_away_the_tap_says_it_waits_and_the_card_says_sending(
    tmp_path: Path,
) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_up"))
        world.agent.submit_approval(approval("apr_away"))
        up = await world.wait_card(ADA, "apr_up")
        away = await world.wait_card(ADA, "apr_away")

        answer = await world.answer_of(world.tap(ADA, up, ADA, "Approve"))
        assert answer["text"] == "Approved ✅ – the agent has it."
        await world.wait_card(ADA, "apr_up", lambda m: "Approved by Ada Lovelace" in m.text
                              and "sending" not in m.text)

        port = world.relay.port
        await world.relay.close()
        answer = await world.answer_of(world.tap(ADA, away, ADA, "Approve"))
        assert answer["text"] == "Approved; it will reach the agent when the relay is back"
        assert "sent to the agent" not in answer["text"]
        card = await world.wait_card(ADA, "apr_away", lambda m: "Approved by" in m.text)
        assert "Approved by Ada Lovelace" in card.text and "· sending…" in card.text
        assert card.buttons() == []

        async with RelayServer(tmp_path / "relay", port=port):
            await world.agent.wait_for(lambda a: len(a.decisions) == 2, timeout=20)
            card = await world.wait_card(ADA, "apr_away",
                                         lambda m: "sending" not in m.text, timeout=20)
            assert "Approved by Ada Lovelace" in card.text
            store = world.running.store
            await world.tg.wait_for(lambda tg: len(store.audit.rows(
                events=("outcome_reported",))) == 2, timeout=20)
        reports = store.audit.rows(events=("outcome_reported",))
        assert {(r.item_id, r.detail["outcome"], r.detail["taken"]) for r in reports} == {
            ("apr_up", "approved", True), ("apr_away", "approved", True)}


async def test_agent_away_the_tap_says_sent_but_not_confirmed(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_late"))
        card = await world.wait_card(ADA, "apr_late")
        await world.agent.stop()
        first = world.tap(ADA, card, ADA, "Approve")
        # The first answer waits for the agent's word; a tap after it is not held behind it.
        again = await world.answer_of(world.tap(ADA, card, ADA, "Deny"))
        assert first not in world.tg.callback_answers
        assert again["show_alert"] is True
        answer = await world.answer_of(first)
        assert answer["text"] == "Approved ✅ – sent; the agent has not confirmed it yet."
        card = await world.wait_card(ADA, "apr_late", lambda m: "Approved by" in m.text)
        assert "sending" not in card.text and card.buttons() == []


@contextlib.asynccontextmanager
async def _host(world: World, store: AgentStore, identity: Identity) -> AsyncIterator[AgentHost]:
    """The agent host running in this process on the bot's clock, until the block ends
    (as a host that stops or dies: what it committed stays in its store)."""
    host = AgentHost(store, identity, world.relay.url, clock=world.clock,
                     relay_options=FAST_RELAY)
    task = asyncio.create_task(host.run())
    try:
        yield host
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_decision_that_reaches_the_host_after_the_item_expired(tmp_path: Path) -> None:
    store = AgentStore(tmp_path / "agent")
    identity = Identity.generate("build-host")
    try:
        async with make_world(tmp_path) as world, running_bot(world):
            async with _host(world, store, identity) as host:
                _secret, link = host.new_pairing()
                world.tg.send_text(ADA, ADA, f"/pair {link}")
                await world.tg.wait_for(lambda tg: any("Paired with" in m.text
                                                       for m in tg.bot_messages(ADA)))
                item = host.submit_approval(
                    tool="send_email", summary="Send the Q3 estimate (late)",
                    arguments={"to": "mario@acme.com"}, blocks=None, timeout_s=60)
                card = await world.wait_card(ADA, "(late)")
            # The host is down: the approval waits at the relay while the item's time runs
            # out.
            await world.answer_of(world.tap(ADA, card, ADA, "Approve"))
            card = await world.wait_card(ADA, "(late)", lambda m: "Approved by" in m.text
                                         and "sending" not in m.text)
            world.clock.advance(timedelta(seconds=61))

            async with _host(world, store, identity) as host:
                card = await world.wait_card(ADA, "(late)", lambda m: LATE in m.text,
                                             timeout=20)
                assert host.get(item.item_id).state.value == "expired"
            assert "⌛ " + LATE in card.text
            assert "Approved by Ada Lovelace" in card.text  # the decision as made
            assert card.buttons() == []
            rows = world.running.store.audit.rows(
                events=("decision_sent", "outcome_reported"))
            assert [(r.event, r.item_id, r.user_name) for r in rows] == [
                ("decision_sent", item.item_id, "Ada Lovelace"),
                ("outcome_reported", item.item_id, "Ada Lovelace")]
            assert rows[0].detail["decision"] == "approve"
            assert (rows[1].detail["outcome"], rows[1].detail["taken"]) == ("expired", False)
            assert rows[1].detail["decision_id"] == rows[0].detail["decision_id"]
    finally:
        store.close()
