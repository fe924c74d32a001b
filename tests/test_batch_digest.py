"""Approving several at once: the digest of one agent's waiting approvals, kept in step
with the cards, and its confirmed "Approve all" / "Deny all" — with the real bot, relay and
agent against the Bot API stand-in."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_store_formats import old_file
from world import ADA, BOB, OPS_GROUP, approval, bot_config, make_world, running_bot

from bot.config import parse_config
from bot.errors import ConfigError
from bot.playground.stub import StoredMessage, TelegramStub
from bot.protocol.encoding import args_sha256
from bot.protocol.payloads import parse_approval
from bot.render.digest import digest_line, left_out
from bot.store import SCHEMA_VERSION, Store

SECRET = "sk-live-51H8xQ2eZvKYlo2C"


def chat_config(world: Any, chat_id: int, **chat: Any) -> Any:
    data = bot_config(world.tmp, world.tg.api_url)
    data["chats"] = [{"id": chat_id, **chat}]
    return parse_config(data, base=world.tmp)


def digests(tg: TelegramStub, chat_id: int) -> list[StoredMessage]:
    return [m for m in tg.bot_messages(chat_id)
            if "requests from build-bot are waiting" in m.text and not m.deleted]


async def digest_showing(world: Any, chat_id: int, needle: str) -> StoredMessage:
    await world.tg.wait_for(lambda tg: any(needle in m.text for m in digests(tg, chat_id)))
    [digest] = digests(world.tg, chat_id)
    return digest


def confirmations(tg: TelegramStub, chat_id: int) -> list[StoredMessage]:
    return [m for m in tg.bot_messages(chat_id) if " these " in m.text and "?" in m.text]


async def confirm(world: Any, chat_id: int, digest: StoredMessage, user: int,
                  label: str) -> StoredMessage:
    """Tap ``label`` on the digest and wait for its confirmation question."""
    before = len(confirmations(world.tg, chat_id))
    world.tap(chat_id, digest, user, label)
    await world.tg.wait_for(lambda tg: len(confirmations(tg, chat_id)) > before)
    return confirmations(world.tg, chat_id)[-1]


def sent(item_id: str) -> dict[str, Any]:
    return approval(item_id, summary=f"Run the build ({item_id})", tool="Bash",
                    blocks={"v": 1, "blocks": [{"type": "field", "label": "Command",
                                                "value": f"make build ITEM={item_id}",
                                                "value_type": "command"}]},
                    arguments={"command": f"make build ITEM={item_id}"},
                    grant_offer={"key": "session-1:Bash:make build", "label": "`make build`",
                                 "max_minutes": 60})


async def test_digest_lists_a_version_and_the_batch_decides_exactly_it(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(sent("apr_1"))
        await world.wait_card(ADA, "apr_1")
        assert digests(world.tg, ADA) == []
        world.agent.submit_approval(sent("apr_2"))
        digest = await digest_showing(world, ADA, "2 requests")
        assert "make build ITEM=apr_1" in digest.text and "make build ITEM=apr_2" in digest.text
        world.agent.submit_approval(sent("apr_3"))
        digest = await digest_showing(world, ADA, "3 requests")
        assert [b["text"] for b in digest.buttons()] == ["✅ Approve all 3", "❌ Deny all 3"]
        assert "Approve + " in str(world.card(ADA, "apr_1").buttons())  # a batch never grants

        question = await confirm(world, ADA, digest, ADA, "Approve all")
        assert "Approve these 3?" in question.text
        world.agent.submit_approval(sent("apr_4"))  # arrives during the confirmation
        await digest_showing(world, ADA, "4 requests")
        world.tap(ADA, question, ADA, "Yes")
        await world.agent.wait_for(lambda a: len(a.decisions) == 3)
        decided = {d.approval_id: d for d in world.agent.decisions}
        assert set(decided) == {"apr_1", "apr_2", "apr_3"}
        for item_id, decision in decided.items():
            assert decision.decision == "approve" and decision.grant is None
            assert decision.args_sha256 == args_sha256(sent(item_id)["arguments"])
        for item_id in decided:
            await world.wait_card(ADA, item_id, lambda m: "Approved by Ada" in m.text
                                  and not m.buttons())
        assert world.card(ADA, "apr_4").buttons() != []
        await world.tg.wait_for(lambda tg: digests(tg, ADA) == [])  # one request left
        await world.tg.wait_for(lambda tg: "approved 3" in question.text)
        await asyncio.sleep(0.3)
        assert {d.approval_id for d in world.agent.decisions} == {"apr_1", "apr_2", "apr_3"}


async def test_secret_and_warning_items_are_left_out_and_said_so(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(sent("apr_plain"))
        world.agent.submit_approval(approval("apr_secret", blocks={"v": 1, "blocks": [
            {"type": "field", "label": "Token", "value": SECRET, "value_type": "secret"}]}))
        world.agent.submit_approval(approval("apr_hidden",
                                             summary="Send it (apr_hidden)\u202e gnp.exe"))
        world.agent.submit_approval(approval("apr_host",
                                             summary="Open https://аpple.com (apr_host)"))
        digest = await digest_showing(world, ADA, "4 requests")
        assert "holds a secret" in digest.text and SECRET not in digest.text
        assert "hidden characters" in digest.text and "look-alike host" in digest.text
        assert [b["text"] for b in digest.buttons()] == ["✅ Approve all 1", "❌ Deny all 1"]
        question = await confirm(world, ADA, digest, ADA, "Deny all")
        assert "Deny these 1?" in question.text
        world.tap(ADA, question, ADA, "Yes")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert [(d.approval_id, d.decision) for d in world.agent.decisions] == [
            ("apr_plain", "deny")]
        await digest_showing(world, ADA, "3 requests")
        for item_id in ("apr_secret", "apr_hidden", "apr_host"):
            assert world.card(ADA, item_id).buttons() != []


async def test_only_the_tapper_confirms_and_cancel_decides_nothing(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        config = chat_config(world, OPS_GROUP, approvers=[ADA, BOB])
        async with running_bot(world, config):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(sent("apr_a"))
            world.agent.submit_approval(sent("apr_b"))
            digest = await digest_showing(world, OPS_GROUP, "2 requests")
            question = await confirm(world, OPS_GROUP, digest, ADA, "Approve all")
            other = world.tap(OPS_GROUP, question, BOB, "Yes")
            assert (await world.answer_of(other))["show_alert"] is True
            world.tap(OPS_GROUP, question, ADA, "Cancel")
            await world.tg.wait_for(lambda tg: "cancelled" in question.text)
            await asyncio.sleep(0.3)
            assert world.agent.decisions == []


async def test_quorum_batch_is_one_vote_on_each(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        config = chat_config(world, OPS_GROUP, approvers=[ADA, BOB], required_approvals=2)
        async with running_bot(world, config):
            world.tg.send_text(OPS_GROUP, BOB, "/start")
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(sent("apr_q1"))
            world.agent.submit_approval(sent("apr_q2"))
            digest = await digest_showing(world, OPS_GROUP, "2 requests")
            for item_id in ("apr_q1", "apr_q2"):
                card = await world.wait_card(OPS_GROUP, item_id)
                await links_to(world, card.message_id)
            question = await confirm(world, OPS_GROUP, digest, ADA, "Approve all")
            world.tap(OPS_GROUP, question, ADA, "Yes")
            for item_id in ("apr_q1", "apr_q2"):
                await world.wait_card(OPS_GROUP, item_id, lambda m: "1 of 2" in m.text)
            await asyncio.sleep(0.3)
            assert world.agent.decisions == []
            digest = await digest_showing(world, OPS_GROUP, "2 requests")
            question = await confirm(world, OPS_GROUP, digest, BOB, "Approve all")
            world.tap(OPS_GROUP, question, BOB, "Yes")
            await world.agent.wait_for(lambda a: len(a.decisions) == 2)
            for item_id in ("apr_q1", "apr_q2"):
                await world.wait_card(OPS_GROUP, item_id,
                                      lambda m: "Approved by" in m.text and not m.buttons())


async def links_to(world: Any, message_id: int) -> None:
    """Wait until the group's digest links to the card ``message_id``."""
    link = f"https://t.me/c/1234567890/{message_id}"
    await world.tg.wait_for(lambda tg: any(link in (m.html or "")
                                           for m in digests(tg, OPS_GROUP)))


async def test_batch_off_shows_no_digest(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        config = chat_config(world, ADA, batch="off")
        async with running_bot(world, config):
            await world.pair(ADA)
            for n in range(3):
                world.agent.submit_approval(sent(f"apr_off{n}"))
            await world.wait_card(ADA, "apr_off2")
            await asyncio.sleep(0.5)
            assert digests(world.tg, ADA) == []


def test_an_earlier_state_file_gains_the_digest_tables(tmp_path: Path) -> None:
    store = Store.open(old_file(tmp_path / "state" / "state.sqlite3", "bot"))
    try:
        assert store.db.schema_version() == SCHEMA_VERSION
        digest_id = store.digests.add(5, "agent", None, "tok")
        assert store.digests.add_version(digest_id, ("a", "b")) == 1
        assert store.digests.items(digest_id, 1) == ("a", "b")
        assert store.chats.title(5) == "ops"
    finally:
        store.close()


async def test_an_observer_cannot_start_a_batch(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        config = chat_config(world, OPS_GROUP, approvers=[ADA])
        async with running_bot(world, config):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(sent("apr_o1"))
            world.agent.submit_approval(sent("apr_o2"))
            digest = await digest_showing(world, OPS_GROUP, "2 requests")
            answer = await world.answer_of(world.tap(OPS_GROUP, digest, BOB, "Approve all"))
            assert answer["show_alert"] is True and "not decide" in answer["text"]
            await asyncio.sleep(0.3)
            assert confirmations(world.tg, OPS_GROUP) == []
            taps = world.running.store.audit.rows(events=("tap",))
            assert [(t.user_id, t.detail["refusal"]) for t in taps] == [(BOB, "not_approver")]


def test_left_out_looks_at_everything_a_card_could_show() -> None:
    assert left_out(parse_approval(approval("a"))) is None
    assert left_out(parse_approval(approval(
        "a", arguments={"url": "https://раураl.com/login"}))) == "host"
    assert left_out(parse_approval(approval("a", blocks={"v": 1, "blocks": [
        {"type": "field", "label": "To\u200b", "value": "x", "value_type": "string"}]}))) \
        == "hidden"


def test_a_file_change_shows_its_line_counts_and_a_command_runs_as_shown() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-old\n+new\n+more\n"
    item = parse_approval(approval("a", summary="Edit x", blocks={"v": 1, "blocks": [
        {"type": "field", "label": "Diff", "value": diff, "value_type": "diff"}]}))
    assert digest_line(item) == "Edit x (+2 −1)"
    command = parse_approval(sent("apr_c"))
    assert digest_line(command) == "make build ITEM=apr_c"


def test_batch_takes_on_or_off(tmp_path: Path) -> None:
    data = bot_config(tmp_path, "http://127.0.0.1:1")
    data["chats"] = [{"id": OPS_GROUP}, {"id": ADA, "batch": "off"}]
    config = parse_config(data, base=tmp_path)
    assert config.policy(OPS_GROUP, private=False).batch is True
    assert config.policy(ADA, private=True).batch is False
    data["chats"] = [{"id": ADA, "batch": True}]
    with pytest.raises(ConfigError, match=r'^chats\[0\]\.batch: must be "on" or "off", got True$'):
        parse_config(data, base=tmp_path)


async def test_a_digest_never_takes_a_decided_card_s_turn(tmp_path: Path) -> None:
    """Decisions one a pace while the digest changes with each: every decided card still
    loses its buttons within about a pace of its tap (a digest that took the turns as they
    came would put each decision a pace further behind)."""
    async with make_world(tmp_path, stub_on_bot_clock=True, chat_pace_seconds=1.0) as world, \
            running_bot(world):
        await world.pair(ADA)
        names = [f"w{index}" for index in range(5)]
        for name in names:
            world.agent.submit_approval(sent(name))
        cards = []
        for name in names:
            for _ in range(400):
                if any(f"({name})" in m.text for m in world.cards(ADA)):
                    break
                world.clock.advance(0.1)
                await asyncio.sleep(0.002)
            cards.append(await world.wait_card(ADA, f"({name})"))
        await digest_showing(world, ADA, "5 requests")

        def edited(card: StoredMessage) -> float | None:
            for request in world.tg.requests:
                if request.method == "editMessageText" and \
                        request.params.get("message_id") == card.message_id:
                    return request.at
            return None

        tapped = []
        for card in cards:
            tapped.append(world.clock.time())
            await world.answer_of(world.tap(ADA, card, ADA, "Approve"))
            for _ in range(10):  # a pace until the next tap
                world.clock.advance(0.1)
                await asyncio.sleep(0.002)
        for _ in range(400):
            if all(edited(card) is not None for card in cards):
                break
            world.clock.advance(0.1)
            await asyncio.sleep(0.002)
        waits = [(edited(card) or float("inf")) - tap for card, tap in zip(cards, tapped,
                                                                              strict=True)]
        assert max(waits) <= 2.05, waits
