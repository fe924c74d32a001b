"""Grants on the bot's side, end to end: "Approve + …" on a card, what ran under a grant
shown quietly in the chat, revoking from Telegram, /grants, groups and the audit trail.

The real relay, the in-memory agent (which offers grants and reports activity), the real
bot and the Telegram stand-in, on loopback.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import eventually
from world import (
    ADA,
    BOB,
    DAVE,
    OPS_GROUP,
    World,
    approval,
    bot_config,
    button_data,
    make_world,
    running_bot,
)

from bot.bridge import REVOKE_CONFIRM_S
from bot.cli import main as cli_main
from bot.config import parse_config
from bot.errors import ConfigError
from bot.playground.stub import StoredMessage

KEY = "session-1:Bash:git status"
LABEL = "`git status` in this session"


def git_status(item_id: str, max_minutes: int = 120) -> dict[str, Any]:
    return approval(item_id, tool="Bash", summary="git status -s", blocks=None,
                    arguments={"command": "git status -s", "ref": item_id},
                    grant_offer={"key": KEY, "label": LABEL, "max_minutes": max_minutes})


def activity_notes(world: World, chat_id: int) -> list[StoredMessage]:
    return [m for m in world.tg.bot_messages(chat_id) if m.text.startswith("Ran under")]


async def grant_in_chat(world: World, chat_id: int, user: int = ADA) -> StoredMessage:
    """Approve a git status card with its grant; the card once it says so."""
    world.agent.submit_approval(git_status("apr_g"))
    card = await world.wait_card(chat_id, "git status -s")
    world.tap(chat_id, card, user, "Approve +")
    await world.agent.wait_for(lambda a: bool(a.grants_in_force()))
    return await world.wait_card(chat_id, "git status -s", lambda m: "also granted" in m.text)


async def test_approve_with_grant_then_activity_quietly_and_revoke(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(git_status("apr_g"))
        card = await world.wait_card(ADA, "git status -s")
        labels = [b["text"] for b in card.buttons()]
        assert "✅ Approve + git status in this session for 30 min" in labels
        world.tap(ADA, card, ADA, "Approve +")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        decision = world.agent.decisions[0]
        assert decision.decision == "approve"
        assert decision.grant is not None
        assert (decision.grant.key, decision.grant.minutes) == (KEY, 30)
        card = await world.wait_card(ADA, "git status -s", lambda m: "also granted" in m.text)
        assert "Ada Lovelace also granted git status in this session for 30 min, until" \
            in card.text.replace("`", "")
        assert card.buttons() == []

        for summary in ("git status --porcelain", "git status", "git status -sb"):
            assert world.agent.run_covered(KEY, "Bash", summary) == "gr_1"
        await world.tg.wait_for(lambda tg: len(activity_notes(world, ADA)) == 1 and all(
            s in activity_notes(world, ADA)[0].text for s in ("--porcelain", "-sb")))
        note = activity_notes(world, ADA)[0]
        assert "🔁 git status --porcelain — under Ada Lovelace's grant" in note.text
        assert "min left" in note.text
        assert [b["text"] for b in note.buttons()] == ["⛔ Revoke git status in this session"]
        sends = [c for c in world.tg.calls("sendMessage")
                 if str(c.params.get("text", "")).startswith("<b>Ran under")]
        assert len(sends) == 1 and sends[0].params.get("disable_notification") is True
        assert not any("Approve" in b["text"] or "Deny" in b["text"] for b in note.buttons())

        query = world.tap(ADA, note, ADA, "Revoke")
        answer = await world.answer_of(query)
        assert answer["text"] == ("Revoked: `git status` in this session. The agent has "
                                  "stopped using it.")
        assert not answer.get("show_alert")
        await world.agent.wait_for(lambda a: len(a.revokes) == 1)
        assert world.agent.revokes[0].grant_id == "gr_1"
        assert world.agent.revokes[0].revoked_by.telegram_user_id == ADA
        await world.tg.wait_for(lambda tg: "revoked by Ada Lovelace"
                                in activity_notes(world, ADA)[0].text)
        assert activity_notes(world, ADA)[0].buttons() == []
        assert world.agent.run_covered(KEY, "Bash", "git status") is None

        events = [r.event for r in world.running.store.audit.rows(chat_id=ADA)]
        for event in ("grant_given", "grant_in_force", "grant_used", "grant_revoke_sent",
                      "grant_revoked"):
            assert event in events
        assert events.count("grant_used") == 3


async def test_one_activity_message_per_minute_edited_as_calls_arrive(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        await grant_in_chat(world, ADA)
        world.agent.run_covered(KEY, "Bash", "git status one")
        await world.tg.wait_for(lambda tg: len(activity_notes(world, ADA)) == 1)
        world.agent.run_covered(KEY, "Bash", "git status two")
        await world.tg.wait_for(lambda tg: "two" in activity_notes(world, ADA)[0].text)
        assert len(activity_notes(world, ADA)) == 1
        assert activity_notes(world, ADA)[0].edits

        world.clock.advance(timedelta(seconds=61))
        world.agent.run_covered(KEY, "Bash", "git status three")
        await world.tg.wait_for(lambda tg: len(activity_notes(world, ADA)) == 2)
        assert "three" in activity_notes(world, ADA)[1].text
        assert "three" not in activity_notes(world, ADA)[0].text


async def test_unknown_grant_still_shown_and_bad_batches_dropped(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.send_activity([{"id": "act_x", "tool": "Bash", "summary": "ls -la",
                                    "grant_id": "gr_nobody_knows"}])
        await world.tg.wait_for(lambda tg: len(activity_notes(world, ADA)) == 1)
        note = activity_notes(world, ADA)[0]
        assert "ls -la — under a grant this chat does not know" in note.text
        assert note.buttons() == []

        world.agent.send_activity([{"id": "act_y", "summary": "no tool"}])
        world.agent.send_activity([{"id": f"act_{i}", "tool": "Bash", "summary": "x",
                                    "grant_id": None} for i in range(101)])
        world.agent.send_activity([{"id": "act_x", "tool": "Bash", "summary": "ls -la",
                                    "grant_id": "gr_nobody_knows"}])  # seen before
        world.agent.send_activity([{"id": "act_z", "tool": "Bash", "summary": "pwd",
                                    "grant_id": None}])
        await world.tg.wait_for(lambda tg: "pwd" in activity_notes(world, ADA)[0].text)
        text = activity_notes(world, ADA)[0].text
        assert text.count("ls -la") == 1 and "no tool" not in text and "🔁 x" not in text


async def test_a_revoke_while_the_agent_is_away_says_when_it_takes_effect(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        await grant_in_chat(world, ADA)
        await eventually(lambda: "gr_1" in world.running.store.grants.of_agent(
            world.agent.identity.id))
        await world.agent.stop()  # off the relay: the revoke waits there
        world.tg.send_text(ADA, ADA, "/grants")
        await world.tg.wait_for(lambda tg: any("Grants in force" in m.text
                                               for m in tg.bot_messages(ADA)))
        listing = next(m for m in world.tg.bot_messages(ADA) if "Grants in force" in m.text)
        query = world.tap(ADA, listing, ADA, "Revoke")
        await asyncio.sleep(0.3)
        world.clock.advance(REVOKE_CONFIRM_S)
        answer = await world.answer_of(query)
        assert answer["text"] == (
            "Revoke sent; it will take effect when the agent is back (it has not confirmed "
            "yet): `git status` in this session")
        assert answer.get("show_alert") is True
        assert world.agent.revokes == []

        await world.agent.start()  # back: the revoke reaches it and it confirms
        await world.agent.wait_for(lambda a: len(a.revokes) == 1)
        assert world.agent.run_covered(KEY, "Bash", "git status") is None
        await world.tg.wait_for(lambda tg: any(
            "revoked by Ada Lovelace" in m.text for m in tg.bot_messages(ADA)))


async def test_grants_command_lists_and_revokes_and_shows_it_revoked(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.tg.send_text(ADA, ADA, "/grants")
        await world.tg.wait_for(lambda tg: any("No grants in force here" in m.text
                                               for m in tg.bot_messages(ADA)))
        await grant_in_chat(world, ADA)
        world.agent.run_covered(KEY, "Bash", "git status")
        world.agent.push_inbox()  # the agent's next update reports the use
        await eventually(lambda: getattr(world.running.store.grants.of_agent(
            world.agent.identity.id).get("gr_1"), "uses", 0) == 1)
        world.tg.send_text(ADA, ADA, "/grants")
        await world.tg.wait_for(lambda tg: any("Grants in force (1)" in m.text
                                               for m in tg.bot_messages(ADA)))
        listing = next(m for m in world.tg.bot_messages(ADA) if "Grants in force" in m.text)
        assert "git status in this session" in listing.text.replace("`", "")
        assert "Ada Lovelace's grant" in listing.text and "used 1×" in listing.text
        world.tap(ADA, listing, ADA, "Revoke")
        await world.agent.wait_for(lambda a: len(a.revokes) == 1)
        await world.tg.wait_for(lambda tg: any(
            "revoked by Ada Lovelace" in m.text and m.buttons() == []
            for m in tg.bot_messages(ADA) if "Grants in force" in m.text))


async def test_groups_grants_off_by_default_never_with_a_quorum(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, DAVE])
        data = bot_config(world.tmp, world.tg.api_url)
        data["chats"] = [{"id": OPS_GROUP, "approvers": [ADA, BOB], "required_approvals": 2}]
        quorum = parse_config(data, base=world.tmp)
        async with running_bot(world, quorum):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(git_status("apr_q"))
            card = await world.wait_card(OPS_GROUP, "git status -s")
            assert not any("Approve +" in b["text"] for b in card.buttons())
            approve = button_data(card, "✅ Approve")
            forged = approve[:-1] + "g"
            query = world.tg.tap(OPS_GROUP, card.message_id, ADA, forged, forged=True)
            assert (await world.answer_of(query))["show_alert"] is True
            assert world.agent.decisions == []

        data["chats"] = [{"id": OPS_GROUP, "approvers": [ADA, BOB], "grants": "on",
                          "grant_minutes": 500}]
        async with running_bot(world, parse_config(data, base=world.tmp)):
            world.agent.submit_approval(git_status("apr_on", max_minutes=45))
            card = await world.wait_card(OPS_GROUP, "apr_on")
            assert any(b["text"].endswith("for 45 min") for b in card.buttons())
            query = world.tap(OPS_GROUP, card, DAVE, "Approve +")
            assert (await world.answer_of(query))["show_alert"] is True
            world.tap(OPS_GROUP, card, BOB, "Approve +")
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            assert world.agent.decisions[0].grant is not None
            assert world.agent.decisions[0].grant.minutes == 45

            world.agent.run_covered(KEY, "Bash", "git status")
            await world.tg.wait_for(lambda tg: len(activity_notes(world, OPS_GROUP)) == 1)
            note = activity_notes(world, OPS_GROUP)[0]
            query = world.tap(OPS_GROUP, note, DAVE, "Revoke")
            answer = await world.answer_of(query)
            assert answer["show_alert"] is True and "approvers" in answer["text"]
            assert world.agent.revokes == []

        del data["chats"][0]["grants"]
        async with running_bot(world, parse_config(data, base=world.tmp)):
            world.agent.submit_approval(git_status("apr_off"))
            card = await world.wait_card(OPS_GROUP, "apr_off")
            assert not any("Approve +" in b["text"] for b in card.buttons())


@pytest.mark.parametrize(("chat", "message"), [
    ({"grants": "on", "required_approvals": 2, "approvers": [ADA, BOB]}, "quorum"),
    ({"grants": "yes"}, "grants"),
    ({"grant_minutes": 0}, "grant_minutes"),
    ({"grant_minutes": "30"}, "grant_minutes"),
])
def test_grant_settings_are_checked(tmp_path: Path, chat: dict[str, Any], message: str) -> None:
    data = bot_config(tmp_path, "http://127.0.0.1:1")
    data["chats"] = [{"id": OPS_GROUP, **chat}]
    with pytest.raises(ConfigError, match=message):
        parse_config(data, base=tmp_path)


def test_private_chats_offer_grants_by_default(tmp_path: Path) -> None:
    config = parse_config(bot_config(tmp_path, "http://127.0.0.1:1"), base=tmp_path)
    assert config.policy(ADA, private=True).grants is True
    assert config.policy(ADA, private=True).grant_minutes == 30
    assert config.policy(OPS_GROUP, private=False).grants is False


async def test_audit_export_has_every_grant_event(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        await grant_in_chat(world, ADA)
        world.agent.run_covered(KEY, "Bash", "git status --porcelain")
        await world.tg.wait_for(lambda tg: len(activity_notes(world, ADA)) == 1)
        world.tap(ADA, activity_notes(world, ADA)[0], ADA, "Revoke")
        await eventually(lambda: any(r.event == "grant_revoked"
                                     for r in world.running.store.audit.rows()))
    config = tmp_path / "bot.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n', encoding="utf-8")
    assert cli_main(["audit", "--config", str(config), "--chat", str(ADA),
                     "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_event = {row["event"]: row for row in rows}
    assert by_event["grant_given"]["user_name"] == "Ada Lovelace"
    assert "git status" in json.dumps(by_event["grant_given"])
    assert "--porcelain" in json.dumps(by_event["grant_used"])
    assert by_event["grant_revoked"]["user_name"] == "Ada Lovelace"
