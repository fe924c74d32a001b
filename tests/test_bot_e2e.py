"""The bot end to end: a real agent's inbox_update becomes a card, a tap becomes a decision.

Everything runs for real on loopback: the relay server, the agent, the bot (PTB long
polling) and the Telegram Bot API stand-in.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
from world import (
    ADA,
    BOB,
    TOKEN,
    World,
    approval,
    bot_config,
    button_data,
    iso,
    make_world,
    question,
    running_bot,
    storage_toml,
)

from bot.cli import main as cli_main
from bot.cli.pair import pair
from bot.config import parse_config
from bot.health import write_status
from bot.protocol.encoding import args_sha256
from bot.protocol.identity import Identity
from bot.protocol.pairing import format_pairing_uri
from bot.protocol.payloads import InboxRequest
from bot.relay.server import RelayServer
from bot.store import Store

pytestmark = pytest.mark.usefixtures("state_store")

async def test_pair_by_command_then_card_and_approve(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        item = approval("apr_1")
        world.agent.submit_approval(item)
        card = await world.wait_card(ADA, "apr_1")
        assert "build-bot" in card.text and "send_email" in card.text
        assert "Subject" in card.text and "Q3 Estimate" in card.text
        labels = [b["text"] for b in card.buttons()]
        assert any("Approve" in label for label in labels)
        assert any("Deny" in label for label in labels)
        assert any("Deny with reason" in label for label in labels)
        styles = {b["text"]: b.get("style") for b in card.buttons()}
        assert "success" in styles.values() and "danger" in styles.values()
        assert all(len(b["callback_data"].encode()) <= 64 for b in card.buttons())
        assert all("apr_1" not in b["callback_data"] for b in card.buttons())

        query = world.tap(ADA, card, ADA, "Approve")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        decision = world.agent.decisions[0]
        assert decision.approval_id == "apr_1"
        assert decision.decision == "approve"
        assert decision.reason is None
        assert decision.decided_by.name == "Ada Lovelace"
        assert decision.decided_by.telegram_user_id == ADA
        assert decision.decided_by.username == "ada"
        assert decision.args_sha256 == args_sha256(item["arguments"])
        assert world.agent.refused == []
        answer = await world.answer_of(query)
        assert answer.get("show_alert") in (None, False)

        card = await world.wait_card(ADA, "apr_1", lambda m: "Approved by" in m.text)
        assert "Approved by Ada Lovelace" in card.text
        assert card.buttons() == []


async def test_deny_and_deny_with_reason(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_deny"))
        world.agent.submit_approval(approval("apr_reason"))
        plain = await world.wait_card(ADA, "apr_deny")
        world.tap(ADA, plain, ADA, "❌ Deny")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].decision == "deny"
        await world.wait_card(ADA, "apr_deny", lambda m: "Denied by Ada Lovelace" in m.text)

        card = await world.wait_card(ADA, "apr_reason")
        world.tap(ADA, card, ADA, "Deny with reason")
        prompt = await world.force_reply_prompt(ADA)
        assert prompt.reply_to == card.message_id
        world.tg.send_text(ADA, ADA, "not before the release", reply_to=prompt.message_id)
        await world.agent.wait_for(lambda a: len(a.decisions) == 2)
        second = world.agent.decisions[1]
        assert (second.approval_id, second.decision, second.reason) == (
            "apr_reason", "deny", "not before the release")
        card = await world.wait_card(ADA, "apr_reason", lambda m: "not before the release"
                                     in m.text)
        assert card.buttons() == []


async def test_question_by_option_and_by_typed_reply(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_clarification(question("clr_1", ["staging", "production"]))
        card = await world.wait_card(ADA, "Which environment")
        assert [b["text"] for b in card.buttons()] == ["staging", "production"]
        world.tap(ADA, card, ADA, "staging")
        await world.agent.wait_for(lambda a: len(a.answers) == 1)
        answer = world.agent.answers[0]
        assert (answer.clarification_id, answer.answer) == ("clr_1", "staging")
        assert answer.answered_by.telegram_user_id == ADA
        await world.tg.wait_for(lambda tg: world.card(ADA, "Which environment").buttons() == [])

        world.agent.resolve("clr_1", "answered")
        world.agent.submit_clarification(question("clr_2"))
        await world.tg.wait_for(lambda tg: len(world.cards(ADA)) == 2)
        typed = next(m for m in world.cards(ADA) if m.buttons() == [] and not m.edits)
        world.tg.send_text(ADA, ADA, "canary first, then production", reply_to=typed.message_id)
        await world.agent.wait_for(lambda a: len(a.answers) == 2)
        assert world.agent.answers[1].answer == "canary first, then production"
        assert world.agent.answers[1].clarification_id == "clr_2"


async def test_stale_duplicate_and_forged_taps_send_nothing_twice(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_dup"))
        card = await world.wait_card(ADA, "apr_dup")
        data = button_data(card, "Approve")
        first = world.tg.tap(ADA, card.message_id, ADA, data)
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        await world.answer_of(first)
        second = world.tg.tap(ADA, card.message_id, ADA, data, forged=True)
        answer = await world.answer_of(second)
        assert answer["show_alert"] is True
        assert "Already approved" in answer["text"]

        forged = world.tg.tap(ADA, card.message_id, ADA, "1:AAAAAAAAAAAAAAAA:a", forged=True)
        assert (await world.answer_of(forged))["show_alert"] is True
        old = world.tg.tap(ADA, card.message_id, ADA, "approve:apr_dup", forged=True)
        assert "older version" in (await world.answer_of(old))["text"]
        await asyncio.sleep(0)  # let any wrongly sent envelope reach the outbox
        await world.agent.wait_for(lambda a: a.unsent == 0)
        assert len(world.agent.decisions) == 1
        rows = world.running.store.audit.rows(events=("tap",))
        assert [(r.detail["allowed"], r.detail["refusal"]) for r in rows] == [
            (True, None), (False, "closed"), (False, "unknown_card"), (False, "outdated")]
        assert all(r.user_id == ADA for r in rows)


async def test_resolution_elsewhere_and_expiry(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_else"))
        world.agent.submit_approval(approval("apr_soon", expires_at=iso(timedelta(seconds=2))))
        await world.wait_card(ADA, "apr_else")
        soon = await world.wait_card(ADA, "apr_soon")
        assert "expires" in soon.text

        world.agent.resolve("apr_else", "approved", by="iPhone of Ada")
        card = await world.wait_card(ADA, "apr_else", lambda m: "iPhone of Ada" in m.text)
        assert card.buttons() == []

        world.clock.advance(timedelta(seconds=2))
        card = await world.wait_card(ADA, "apr_soon", lambda m: "Expired" in m.text)
        assert card.buttons() == []
        assert world.agent.decisions == []


async def test_notification_for_unknown_item_requests_the_inbox(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        device = next(iter(world.agent.peers))
        before = sum(isinstance(p, InboxRequest) for p in world.agent.received)
        world.agent.send_raw(device, "notification", {
            "item_id": "apr_unknown", "category": "approval", "title": "build-bot",
            "body": "Something new"})
        await world.agent.wait_for(
            lambda a: sum(isinstance(p, InboxRequest) for p in a.received) > before)


async def test_relay_restart_loses_no_decision(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_relay"))
        card = await world.wait_card(ADA, "apr_relay")
        port = world.relay.port
        await world.relay.close()
        world.tap(ADA, card, ADA, "Approve")
        await world.wait_card(ADA, "apr_relay", lambda m: "Approved by" in m.text)
        assert world.running.store.outbox.depth() == 1
        async with RelayServer(tmp_path / "relay", port=port):
            await world.agent.wait_for(lambda a: len(a.decisions) == 1, timeout=20)
            assert world.agent.decisions[0].approval_id == "apr_relay"
        assert world.running.store.outbox.depth() == 0


async def test_rate_limit_storm_and_parse_error_lose_no_card(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.tg.rate_limit_storm(times=3, retry_after=1)
        world.tg.fail_next("sendMessage", error_code=400,
                           description="Bad Request: can't parse entities: Unsupported start "
                                       "tag \"x\" at byte offset 0", times=1)
        for n in range(4):
            world.agent.submit_approval(approval(f"apr_storm_{n}"))
        await world.tg.wait_for(lambda tg: len(world.cards(ADA)) == 4, timeout=20)
        texts = sorted(m.text for m in world.cards(ADA))
        for n in range(4):
            assert sum(f"apr_storm_{n}" in t for t in texts) == 1
        plain = [c for c in world.tg.calls("sendMessage")
                 if c.params["text"].startswith("🤖") and c.params.get("parse_mode") is None]
        assert len(plain) == 1  # the refused one went out again as plain text
        assert "<b>" not in plain[0].params["text"]


async def test_chat_migration_is_recorded_once_in_the_audit_trail(tmp_path: Path) -> None:
    old, new = -4002, -1004002
    async with make_world(tmp_path) as world, running_bot(world):
        world.tg.add_group(old, "Ops", admins=[ADA], members=[BOB], supergroup=False)
        await world.pair(old)
        world.tg.migrate_group(old, new)  # a service message in the old chat and the new
        world.tg.send_text(new, ADA, "/help")  # handled after both
        await world.tg.wait_for(lambda tg: len(tg.bot_messages(new)) == 1)
        audit = world.running.store.audit
        rows = audit.rows(events=("chat_migrated",))
        assert [(r.chat_id, r.detail) for r in rows] == [(new, {"old_chat_id": old})]
        assert [r.chat_id for r in audit.rows(chat_id=new, events=("paired",))] == [old]


async def test_chat_migration_moves_cards_and_keeps_the_chat_settings(tmp_path: Path) -> None:
    old, new = -4001, -1004001
    async with make_world(tmp_path) as world:
        data = bot_config(tmp_path, world.tg.api_url)
        data["chats"] = [{"id": old, "approvers": [BOB]}]  # Bob approves; he is no admin
        async with running_bot(world, parse_config(data, base=tmp_path)):
            world.tg.add_group(old, "Ops", admins=[ADA], members=[BOB], supergroup=False)
            await world.pair(old)
            world.agent.submit_approval(approval("apr_before"))
            await world.wait_card(old, "apr_before")
            world.tg.migrate_group(old, new)
            agents = world.running.store.agents
            await world.tg.wait_for(lambda tg: agents.bindings_for_chat(new) != [])
            world.agent.submit_approval(approval("apr_after"))
            card = await world.wait_card(new, "apr_after")
            refused = world.tap(new, card, ADA, "Approve")
            assert (await world.answer_of(refused))["show_alert"] is True
            world.tap(new, card, BOB, "Approve")
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            assert world.agent.decisions[0].decided_by.telegram_user_id == BOB


async def test_blocked_chat_stops_sending(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.tg.block_bot(ADA)
        world.agent.submit_approval(approval("apr_blocked"))
        await world.tg.wait_for(lambda tg: world.running.store.chats.forbidden(ADA))
        sends = len(world.tg.calls("sendMessage"))
        world.agent.submit_approval(approval("apr_blocked_2"))
        await world.agent.wait_for(lambda a: a.unsent == 0)
        await asyncio.sleep(0.2)
        assert len(world.tg.calls("sendMessage")) == sends


async def test_commands_start_pending_status(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_cmd"))
        await world.wait_card(ADA, "apr_cmd")
        for command in ("/start", "/help", "/pending", "/status"):
            world.tg.send_text(ADA, ADA, command)
        await world.tg.wait_for(lambda tg: any("outbox" in m.text for m in tg.bot_messages(ADA)))
        await world.tg.wait_for(lambda tg: len(tg.bot_messages(ADA)) >= 7)
        texts = "\n".join(m.text for m in world.tg.bot_messages(ADA))
        assert world.running.bridge.identity.id in texts
        assert "build-bot" in texts
        assert "Send the Q3 estimate (apr_cmd)" in texts
        assert "outbox" in texts

        world.tg.send_text(ADA, BOB, "/pair skald-pair:v1?nope")
        await world.tg.wait_for(lambda tg: any("Only the bot's administrators" in m.text
                                               for m in tg.bot_messages(ADA)))


def _config_file(world: World) -> Path:
    """The world's bot configuration as a file, for the command line."""
    config_file = world.tmp / "skald-telegram.toml"
    config_file.write_text(
        f'[telegram]\ntoken = "{TOKEN}"\napi_url = "{world.tg.api_url}"\nadmins = [{ADA}]\n'
        f'[state]\ndir = "{world.tmp / "state"}"\n{storage_toml()}'
    )
    return config_file


async def test_pair_cli_binds_the_chat(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        config_file = _config_file(world)
        uri = world.agent.new_pairing_uri()
        code = await asyncio.to_thread(
            cli_main, ["pair", "--config", str(config_file), "--chat", str(ADA), uri])
        assert code == 0
        assert len(world.agent.peers) == 1
        store = Store.open(world.config.database)
        bindings = store.agents.bindings_for_agent(world.agent.identity.id)
        assert [b.chat_id for b in bindings] == [ADA]
        store.close()

        bad = await asyncio.to_thread(
            cli_main, ["pair", "--config", str(config_file), "--chat", "1", "skald-pair:v2?x"])
        assert bad == 1
        write_status(tmp_path / "state" / "status.json",  # a running bot
                     {"pid": os.getpid(), "relays": []})
        busy = await asyncio.to_thread(cli_main, [
            "pair", "--config", str(config_file), "--chat", str(ADA),
            world.agent.new_pairing_uri()])
        assert busy == 1
        (tmp_path / "state" / "status.json").unlink()
        nobody = Identity.generate("nobody")
        unanswered = format_pairing_uri("ws://127.0.0.1:9/v1/connect", nobody.card, bytes(16))
        code = await asyncio.to_thread(pair, str(config_file), unanswered, ADA, timeout=1)
        assert code == 1


async def test_a_chat_bound_from_the_command_line_gets_its_type_from_telegram(
    tmp_path: Path,
) -> None:
    async with make_world(tmp_path) as world:
        uri = world.agent.new_pairing_uri()
        assert await asyncio.to_thread(pair, str(_config_file(world)), uri, ADA) == 0
        async with running_bot(world):
            world.agent.submit_approval(approval("apr_cli"))
            card = await world.wait_card(ADA, "apr_cli")
            assert [int(c.params["chat_id"]) for c in world.tg.calls("getChat")] == [ADA]
            world.tap(ADA, card, ADA, "Approve")  # a private chat: its own user approves
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            await world.wait_card(ADA, "apr_cli", lambda m: "Approved" in m.text)
            assert len(world.tg.calls("getChat")) == 1


@pytest.mark.parametrize("mode", ["jsonl", "csv"])
async def test_restart_posts_no_duplicate_and_keeps_decisions(tmp_path: Path, mode: str) -> None:
    async with make_world(tmp_path) as world:
        async with running_bot(world):
            await world.pair(ADA)
            world.agent.submit_approval(approval("apr_keep"))
            card = await world.wait_card(ADA, "apr_keep")
        world.tap(ADA, card, ADA, "Approve")  # tapped while the bot is down
        world.agent.submit_approval(approval("apr_new"))
        async with running_bot(world):
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            await world.wait_card(ADA, "apr_new")
            await world.wait_card(ADA, "apr_keep", lambda m: "Approved by" in m.text)
        assert len(world.cards(ADA)) == 2
        out = tmp_path / "audit.out"
        config_file = tmp_path / "skald-telegram.toml"
        config_file.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n{storage_toml()}')
        code = await asyncio.to_thread(_audit_to, out, config_file, mode)
        assert code == 0
        text = out.read_text()
        assert "decision_sent" in text and "card_posted" in text
        if mode == "jsonl":
            events = [json.loads(line)["event"] for line in text.splitlines()]
            assert events.count("decision_sent") == 1


def _audit_to(out: Path, config_file: Path, mode: str) -> int:
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli_main(["audit", "--config", str(config_file), "--format", mode])
    out.write_text(buffer.getvalue())
    return code
