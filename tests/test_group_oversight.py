"""Group chats: approvers and observers, quorum, vetoes, several chats, secrets, topics,
the audit trail and reminders — with several distinct users against the Bot API stand-in."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import eventually
from world import (
    ADA,
    BOB,
    CAROL,
    DAVE,
    OPS_GROUP,
    approval,
    bot_config,
    button_data,
    iso,
    make_world,
    running_bot,
)

from bot.config import parse_config
from bot.core.policy import ANONYMOUS_ADMIN_ID

pytestmark = pytest.mark.usefixtures("state_store")
SECRET = "sk-live-51H8xQ2eZvKYlo2C"


def group_config(world: Any, **chat: Any) -> Any:
    data = bot_config(world.tmp, world.tg.api_url)
    data["chats"] = [{"id": OPS_GROUP, **chat}]
    return parse_config(data, base=world.tmp)


async def test_observer_tap_is_refused_named_and_recorded(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, DAVE])
        config = group_config(world, approvers=[ADA, BOB])
        async with running_bot(world, config):
            world.tg.send_text(OPS_GROUP, BOB, "/start")  # so the bot knows Bob's name
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_obs"))
            card = await world.wait_card(OPS_GROUP, "apr_obs")
            query = world.tap(OPS_GROUP, card, DAVE, "Approve")
            answer = await world.answer_of(query)
            assert answer["show_alert"] is True
            assert "Ada Lovelace" in answer["text"] and "Bob Builder" in answer["text"]
            world.tg.add_user(ANONYMOUS_ADMIN_ID, "Group", username="GroupAnonymousBot")
            anonymous = world.tap(OPS_GROUP, card, ANONYMOUS_ADMIN_ID, "Approve")
            assert (await world.answer_of(anonymous))["show_alert"] is True
            taps = world.running.store.audit.rows(events=("tap",))
            assert [(t.user_id, t.detail["allowed"], t.detail["refusal"]) for t in taps] == [
                (DAVE, False, "not_approver"), (ANONYMOUS_ADMIN_ID, False, "not_approver")]
            assert world.agent.decisions == []
            assert world.card(OPS_GROUP, "apr_obs").buttons() != []


async def test_two_of_three_quorum_with_double_tap_and_withdraw(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, CAROL])
        config = group_config(world, approvers=[ADA, BOB, CAROL], required_approvals=2)
        async with running_bot(world, config):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_q"))
            card = await world.wait_card(OPS_GROUP, "apr_q")

            world.tap(OPS_GROUP, card, ADA, "Approve")
            card = await world.wait_card(OPS_GROUP, "apr_q", lambda m: "1 of 2" in m.text)
            assert "Ada" in card.text
            again = world.tg.tap(OPS_GROUP, card.message_id, ADA, button_data(card, "Approve"))
            assert "already counted" in (await world.answer_of(again))["text"]

            world.tap(OPS_GROUP, card, ADA, "Withdraw")
            card = await world.wait_card(OPS_GROUP, "apr_q", lambda m: "1 of 2" not in m.text
                                         and not any("Withdraw" in b["text"]
                                                     for b in m.buttons()))
            world.tap(OPS_GROUP, card, BOB, "Approve")
            card = await world.wait_card(OPS_GROUP, "apr_q", lambda m: "1 of 2" in m.text)
            assert world.agent.decisions == []
            world.tap(OPS_GROUP, card, CAROL, "Approve")
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            decision = world.agent.decisions[0]
            assert decision.decision == "approve"
            assert decision.decided_by.telegram_user_id == CAROL
            sent = world.running.store.audit.rows(events=("decision_sent",))
            assert [a["user_id"] for a in sent[0].detail["approvers"]] == [BOB, CAROL]
            card = await world.wait_card(OPS_GROUP, "apr_q", lambda m: "Approved" in m.text)
            assert "Bob" in card.text and "Carol" in card.text
            assert card.buttons() == []


async def test_veto_after_one_approval(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, CAROL])
        config = group_config(world, approvers=[ADA, BOB, CAROL], required_approvals=2)
        async with running_bot(world, config):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_veto"))
            card = await world.wait_card(OPS_GROUP, "apr_veto")
            world.tap(OPS_GROUP, card, ADA, "Approve")
            card = await world.wait_card(OPS_GROUP, "apr_veto", lambda m: "1 of 2" in m.text)
            world.tap(OPS_GROUP, card, BOB, "❌ Deny")
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            assert world.agent.decisions[0].decision == "deny"
            assert world.agent.decisions[0].decided_by.telegram_user_id == BOB
            await world.wait_card(OPS_GROUP, "apr_veto", lambda m: "Denied by Bob" in m.text)


async def test_admins_as_approvers_and_private_decision_closes_group_card(
    tmp_path: Path,
) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops team", admins=[ADA, BOB], members=[DAVE])
        config = group_config(world, approvers="admins")
        async with running_bot(world, config):
            await world.pair(OPS_GROUP)
            world.agent.peers.clear()  # the same agent, paired again from Ada's private chat
            await world.pair(ADA)
            world.agent.submit_approval(approval("apr_multi"))
            private = await world.wait_card(ADA, "apr_multi")
            await world.wait_card(OPS_GROUP, "apr_multi")
            world.tap(ADA, private, ADA, "Approve")
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            group_card = await world.wait_card(
                OPS_GROUP, "apr_multi", lambda m: "Approved" in m.text)
            assert group_card.buttons() == []
            assert "Approved by Ada Lovelace elsewhere (private chat)" in group_card.text
            late = world.tg.tap(OPS_GROUP, group_card.message_id, BOB,
                                "1:whatever:a", forged=True)
            assert (await world.answer_of(late))["show_alert"] is True
            assert len(world.agent.decisions) == 1


async def test_secrets_never_reach_a_group(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        config = group_config(world, approvers=[ADA])
        async with running_bot(world, config):
            await world.pair(OPS_GROUP)
            long_log = "\n".join(f"+ line {n} uses {SECRET}" for n in range(3000))
            world.agent.submit_approval(approval(
                "apr_secret",
                summary=f"Deploy web with key {SECRET}",
                blocks=[
                    {"type": "key_value", "key": "API key", "value": SECRET,
                     "value_type": "secret"},
                    {"type": "block", "label": "Diff", "value": long_log, "value_type": "diff"},
                ],
                arguments={"api_key": SECRET, "service": "web"},
            ))
            card = await world.wait_card(OPS_GROUP, "Deploy web")
            await world.tg.wait_for(lambda tg: any(m.document for m in tg.messages(OPS_GROUP)))
            for message in world.tg.messages(OPS_GROUP):
                assert SECRET not in message.text
                assert SECRET not in (message.html or "")
                if message.document is not None:
                    assert SECRET.encode() not in message.document.data
            assert "tg-spoiler" not in (card.html or "")


async def test_topic_routing(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB], forum=True)
        config = group_config(world, approvers=[ADA])
        async with running_bot(world, config):
            await world.pair(OPS_GROUP, thread_id=77)
            world.agent.submit_approval(approval("apr_topic"))
            card = await world.wait_card(OPS_GROUP, "apr_topic")
            assert card.thread_id == 77
            world.tap(OPS_GROUP, card, ADA, "Deny with reason")
            prompt = await world.force_reply_prompt(OPS_GROUP)
            assert prompt.thread_id == 77


async def test_history_and_audit_trail(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        config = group_config(world, approvers=[ADA, BOB])
        async with running_bot(world, config):
            await world.pair(OPS_GROUP)
            for n in range(3):
                world.agent.submit_approval(approval(f"apr_h{n}"))
            for n, user in enumerate((ADA, BOB, ADA)):
                card = await world.wait_card(OPS_GROUP, f"apr_h{n}")
                world.tap(OPS_GROUP, card, user, "Approve" if n != 1 else "❌ Deny")
            await world.agent.wait_for(lambda a: len(a.decisions) == 3)
            world.tg.send_text(OPS_GROUP, ADA, "/history@skald_test_bot 2")
            await world.tg.wait_for(lambda tg: any("Last 2 decision" in m.text
                                                   for m in tg.bot_messages(OPS_GROUP)))
            history = next(m for m in world.tg.bot_messages(OPS_GROUP)
                           if "Last 2 decision" in m.text)
            assert "denied by Bob Builder" in history.text
            assert "approved by Ada Lovelace" in history.text
            store = world.running.store
            events = [r.event for r in store.audit.rows(chat_id=OPS_GROUP)]
            assert events.count("card_posted") == 3
            assert events.count("tap") == 3
            assert events.count("decision_sent") == 3
            await eventually(lambda: [r.event for r in store.audit.rows(
                chat_id=OPS_GROUP)].count("decision_acknowledged") == 3)
            rows = store.audit.rows(chat_id=OPS_GROUP, events=("decision_sent",))
            assert [json.loads(json.dumps(r.detail))["decision"] for r in rows] == [
                "approve", "deny", "approve"]


async def test_reminder_mentions_approvers_who_have_not_tapped(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, CAROL])
        config = group_config(world, approvers=[ADA, BOB, CAROL], required_approvals=2)
        async with running_bot(world, config):
            world.tg.send_text(OPS_GROUP, BOB, "/help")  # the bot learns Bob's name
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval(
                "apr_remind", created_at=iso(), expires_at=iso(timedelta(seconds=60))))
            card = await world.wait_card(OPS_GROUP, "apr_remind")
            await world.answer_of(world.tap(OPS_GROUP, card, ADA, "Approve"))
            world.clock.advance(timedelta(seconds=48.5))  # a reminder at 80 % of the time
            await world.tg.wait_for(lambda tg: any(
                "Still waiting" in m.text for m in tg.bot_messages(OPS_GROUP)))
            reminder = next(m for m in world.tg.bot_messages(OPS_GROUP)
                            if "Still waiting" in m.text)
            assert reminder.reply_to == card.message_id
            mentions = {e.url for e in reminder.entities if e.type == "text_link"} | {
                e.type for e in reminder.entities if e.type == "text_mention"}
            assert f"tg://user?id={BOB}" in (reminder.html or "")
            assert f"tg://user?id={CAROL}" in (reminder.html or "")
            assert f"tg://user?id={ADA}" not in (reminder.html or "")
            assert mentions
            reminders = [m for m in world.tg.bot_messages(OPS_GROUP) if "Still waiting" in m.text]
            assert len(reminders) == 1


async def test_binding_a_second_chat_shows_the_open_items_there(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        async with running_bot(world, group_config(world, approvers=[ADA])):
            await world.pair(ADA)
            world.agent.submit_approval(approval("apr_early"))
            await world.wait_card(ADA, "apr_early")
            world.agent.peers.clear()
            await world.pair(OPS_GROUP)
            card = await world.wait_card(OPS_GROUP, "apr_early")
            assert card.buttons() != []
            assert len(world.cards(ADA)) == 1


async def test_a_card_token_replayed_in_another_chat_decides_nothing(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        async with running_bot(world, group_config(world, approvers=[ADA])):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_leak"))
            card = await world.wait_card(OPS_GROUP, "apr_leak")
            # Bob only observes the group, but decides in his own private chat: a crafted
            # client replays the group card's button data on a message there.
            world.tg.send_text(BOB, BOB, "/start")
            await world.tg.wait_for(lambda tg: bool(tg.bot_messages(BOB)))
            own = world.tg.bot_messages(BOB)[0]
            query = world.tg.tap(BOB, own.message_id, BOB, button_data(card, "Approve"),
                                 forged=True)
            assert (await world.answer_of(query))["show_alert"] is True
            assert world.agent.decisions == []
            items = world.running.store.items
            assert items.get(world.agent.identity.id, "apr_leak").state == "open"


async def test_unpair_closes_the_chat_to_decisions(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        async with running_bot(world, group_config(world, approvers=[ADA])):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_unpair"))
            card = await world.wait_card(OPS_GROUP, "apr_unpair")
            data = button_data(card, "Approve")
            world.tg.send_text(OPS_GROUP, BOB, "/unpair@skald_test_bot")
            await world.tg.wait_for(lambda tg: any("Only the bot's administrators" in m.text
                                                   for m in tg.bot_messages(OPS_GROUP)))
            world.tg.send_text(OPS_GROUP, ADA, "/unpair")
            card = await world.wait_card(OPS_GROUP, "apr_unpair",
                                         lambda m: "unbound" in m.text)
            assert card.buttons() == []
            late = world.tg.tap(OPS_GROUP, card.message_id, ADA, data, forged=True)
            assert (await world.answer_of(late))["show_alert"] is True
            assert world.agent.decisions == []
