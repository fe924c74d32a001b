"""Edits before approving, on the bot's side: "✏️ Edit" on a card, the ForceReply prompt,
the edited card with its diff, "Approve edited" sending the edited call — with the real
bot, relay and test agent against the Bot API stand-in."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from conftest import eventually
from test_batch_digest import chat_config, confirm, digest_showing
from world import (
    ADA,
    BOB,
    DAVE,
    OPS_GROUP,
    World,
    approval,
    button_data,
    make_world,
    running_bot,
)

from bot.playground.stub import StoredMessage
from bot.protocol.encoding import args_sha256


def bash(item_id: str, command: str = "rm -rf build", **overrides: Any) -> dict[str, Any]:
    """A shell command whose ``command`` (and ``timeout``) the agent can run edited."""
    item = approval(item_id, tool="Bash", summary=f"Remove the build folder ({item_id})",
                    blocks={"v": 1, "blocks": [{"type": "field", "label": "Command",
                                                "value": command, "value_type": "command"}]},
                    arguments={"command": command, "timeout": 30},
                    editable=["command"],
                    grant_offer={"key": "session:Bash:rm", "label": "`rm`", "max_minutes": 60})
    item.update(overrides)
    return item


def prompts(world: World, chat_id: int) -> list[StoredMessage]:
    """The bot's edit prompts in a chat (ForceReply messages asking for a new value)."""
    texts = {call.params["text"] for call in world.tg.calls("sendMessage")
             if isinstance(call.params.get("reply_markup"), dict)
             and call.params["reply_markup"].get("force_reply")
             and call.params.get("chat_id") == chat_id}
    return [m for m in world.tg.bot_messages(chat_id)
            if m.html in texts and "new value" in m.text]


async def edit(world: World, chat_id: int, card: StoredMessage, user: int, value: str,
               label: str = "Edit") -> StoredMessage:
    """``user`` taps ``label`` on ``card`` and replies ``value`` to the bot's prompt."""
    before = len(prompts(world, chat_id))
    world.tap(chat_id, card, user, label)
    await world.tg.wait_for(lambda tg: len(prompts(world, chat_id)) > before)
    prompt = prompts(world, chat_id)[-1]
    world.tg.send_text(chat_id, user, value, reply_to=prompt.message_id)
    return prompt


async def message_showing(world: World, chat_id: int,
                          where: Callable[[StoredMessage], bool]) -> StoredMessage:
    """The bot's latest message in a chat that ``where`` accepts, once there is one."""
    await world.tg.wait_for(lambda tg: any(where(m) for m in tg.bot_messages(chat_id)))
    return [m for m in world.tg.bot_messages(chat_id) if where(m)][-1]


@contextlib.asynccontextmanager
async def ops_group(world: World, **chat: Any) -> AsyncIterator[None]:
    """The bot running for the Ops group (Ada and Bob approve, Dave watches), paired."""
    world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, DAVE])
    async with running_bot(world, chat_config(world, OPS_GROUP, approvers=[ADA, BOB],
                                              **chat)):
        world.tg.send_text(OPS_GROUP, BOB, "/start")  # the bot learns Bob's name
        await world.pair(OPS_GROUP)
        yield


def labels(message: StoredMessage) -> list[str]:
    return [b["text"] for b in message.buttons()]


async def test_an_edit_turns_the_card_and_approve_edited_sends_the_edited_call(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        item = bash("apr_e")
        world.agent.submit_approval(item)
        card = await world.wait_card(ADA, "apr_e")
        assert "✏️ Edit" in labels(card)

        prompt = await edit(world, ADA, card, ADA, "rm -rf build/cache")
        assert prompt.reply_to == card.message_id
        assert "command" in prompt.text and "rm -rf build" in prompt.text
        card = await world.wait_card(ADA, "Edited by Ada", lambda m: "Approve edited" in str(
            m.buttons()))
        assert "- rm -rf build\n+ rm -rf build/cache" in card.text
        assert "Remove the build folder" not in card.text  # the agent's own description
        assert labels(card) == ["✅ Approve edited", "❌ Deny", "✏️ Edit again"]

        world.tap(ADA, card, ADA, "Approve edited")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        [decision] = world.agent.decisions
        edited = {"command": "rm -rf build/cache", "timeout": 30}
        assert decision.decision == "approve" and decision.grant is None
        assert decision.arguments == edited
        assert decision.edited_sha256 == args_sha256(edited)
        assert decision.args_sha256 == args_sha256(item["arguments"])
        assert world.agent.refused == []
        await world.wait_card(ADA, "Edited by Ada", lambda m: "Approved by Ada" in m.text
                              and not m.buttons())

        audit = world.running.store.audit
        [made] = audit.rows(events=("edit",))
        assert (made.user_name, made.detail["key"], made.detail["before"],
                made.detail["after"]) == ("Ada Lovelace", "command", "rm -rf build",
                                          "rm -rf build/cache")
        assert made.detail["args_sha256"] == args_sha256(item["arguments"])
        [sent] = audit.rows(events=("decision_sent",))
        assert sent.detail["edited"] is True and sent.detail["edited_by"] == "Ada Lovelace"
        assert sent.detail["edited_sha256"] == args_sha256(edited)
        assert [a["name"] for a in sent.detail["approvers"]] == ["Ada Lovelace"]
        world.tg.send_text(ADA, ADA, "/history")
        await message_showing(world, ADA, lambda m: "approved an edit by Ada Lovelace" in m.text)


async def test_a_value_of_another_type_or_a_credential_is_not_taken(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(bash("apr_t", editable=["command", "timeout"]))
        card = await world.wait_card(ADA, "apr_t")
        world.tap(ADA, card, ADA, "Edit")
        chooser = await message_showing(
            world, ADA, lambda m: "Which value should change" in m.text)
        assert labels(chooser) == ["✏️ command", "📋 Copy value", "✏️ timeout",
                                   "📋 Copy value"]
        assert [b.get("copy_text") for b in chooser.buttons()][1::2] == [
            {"text": "rm -rf build"}, {"text": "30"}]

        await edit(world, ADA, chooser, ADA, "a minute", label="timeout")
        await message_showing(world, ADA, lambda m: "Not edited: the new value must be a "
                                        "number" in m.text)
        prompt = prompts(world, ADA)[-1]
        world.tg.send_text(ADA, ADA, "curl -H 'Authorization: Bearer abcdef0123456789' x",
                           reply_to=prompt.message_id)
        await message_showing(world, ADA, lambda m: "password, token or key" in m.text)
        world.tg.send_text(ADA, ADA, "90", reply_to=prompt.message_id)
        card = await world.wait_card(ADA, "Edited by Ada", lambda m: bool(m.buttons()))
        assert "- 30\n+ 90" in card.text
        world.tap(ADA, card, ADA, "Approve edited")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].arguments == {"command": "rm -rf build", "timeout": 90}


async def test_an_observer_cannot_edit_and_a_secret_is_never_offered(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, ops_group(world):
        world.agent.submit_approval(bash("apr_o"))
        secret = "ghp_" + "a1B2c3D4e5" * 4
        world.agent.submit_approval(approval(
            "apr_s", tool="Bash", arguments={"command": f"git push https://{secret}@x.io",
                                             "api_key": "k-123456789"},
            editable=["command", "api_key"]))
        card = await world.wait_card(OPS_GROUP, "apr_o")
        query = world.tap(OPS_GROUP, card, DAVE, "Edit")
        answer = await world.answer_of(query)
        assert answer["show_alert"] is True and "watch but not decide" in answer["text"]
        await asyncio.sleep(0.3)
        assert prompts(world, OPS_GROUP) == []
        assert [r.detail["refusal"] for r in world.running.store.audit.rows(
            events=("tap",)) if r.detail["action"] == "edit"] == ["not_approver"]

        guarded = await world.wait_card(OPS_GROUP, "apr_s")
        assert not any("Edit" in label for label in labels(guarded))
        forged = guarded.buttons()[0]["callback_data"].rsplit(":", 1)[0] + ":e"
        query = world.tg.tap(OPS_GROUP, guarded.message_id, ADA, forged, forged=True)
        assert (await world.answer_of(query))["show_alert"] is True
        await asyncio.sleep(0.3)
        assert prompts(world, OPS_GROUP) == []
        assert secret not in str([m.text for m in world.tg.bot_messages(OPS_GROUP)])


async def test_an_edit_restarts_the_quorum(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, ops_group(world, required_approvals=2):
        world.agent.submit_approval(bash("apr_q"))
        card = await world.wait_card(OPS_GROUP, "apr_q")
        world.tap(OPS_GROUP, card, ADA, "✅ Approve")
        card = await world.wait_card(OPS_GROUP, "apr_q", lambda m: "1 of 2" in m.text)
        approve_original = button_data(card, "✅ Approve")

        await edit(world, OPS_GROUP, card, BOB, "rm -rf build/tmp")
        edited = await world.wait_card(OPS_GROUP, "Edited by Bob",
                                       lambda m: bool(m.buttons()))
        assert "1 of 2" not in edited.text  # Ada approved the call before the edit
        stale = world.tg.tap(OPS_GROUP, card.message_id, ADA, approve_original,
                             forged=True)
        assert (await world.answer_of(stale))["show_alert"] is True
        world.tap(OPS_GROUP, edited, BOB, "Approve edited")
        await world.wait_card(OPS_GROUP, "Edited by Bob", lambda m: "1 of 2" in m.text)
        await asyncio.sleep(0.3)
        assert world.agent.decisions == []
        world.tap(OPS_GROUP, edited, ADA, "Approve edited")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].arguments == {"command": "rm -rf build/tmp",
                                                      "timeout": 30}
        audit = world.running.store.audit
        [made] = audit.rows(events=("edit",))
        assert made.user_name == "Bob Builder"
        assert [v["name"] for v in made.detail["votes_dropped"]] == ["Ada Lovelace"]
        [sent] = audit.rows(events=("decision_sent",))
        assert [a["name"] for a in sent.detail["approvers"]] == [
            "Bob Builder", "Ada Lovelace"]


async def test_a_batch_leaves_out_an_item_being_edited(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        for item_id in ("apr_b1", "apr_b2", "apr_b3"):
            world.agent.submit_approval(bash(item_id, command=f"make {item_id}"))
        await digest_showing(world, ADA, "3 requests")
        card = await world.wait_card(ADA, "apr_b2")
        world.tap(ADA, card, ADA, "Edit")
        await world.tg.wait_for(lambda tg: bool(prompts(world, ADA)))
        digest = await digest_showing(world, ADA, "an edit is in progress")
        assert [b["text"] for b in digest.buttons()] == ["✅ Approve all 2", "❌ Deny all 2"]
        question = await confirm(world, ADA, digest, ADA, "Approve all")
        world.tap(ADA, question, ADA, "Yes")
        await world.agent.wait_for(lambda a: len(a.decisions) == 2)
        await asyncio.sleep(0.3)
        assert {d.approval_id for d in world.agent.decisions} == {"apr_b1", "apr_b3"}


async def test_a_pending_edit_survives_a_restart(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        async with running_bot(world):
            await world.pair(ADA)
            world.agent.submit_approval(bash("apr_r"))
            card = await world.wait_card(ADA, "apr_r")
            world.tap(ADA, card, ADA, "Edit")
            await world.tg.wait_for(lambda tg: bool(prompts(world, ADA)))
            store = world.running.store
            # The bot records its prompt once Telegram took it.
            await eventually(lambda: store.edits.prompt(
                ADA, prompts(world, ADA)[-1].message_id) is not None)
        prompt = prompts(world, ADA)[-1]
        async with running_bot(world):
            world.tg.send_text(ADA, ADA, "rm -rf build/old", reply_to=prompt.message_id)
            card = await world.wait_card(ADA, "Edited by Ada", lambda m: bool(m.buttons()))
        async with running_bot(world):
            world.tap(ADA, card, ADA, "Approve edited")
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            assert world.agent.decisions[0].arguments == {"command": "rm -rf build/old",
                                                          "timeout": 30}
