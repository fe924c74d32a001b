"""The bot, end to end: a card holding invisible or direction-changing characters warns
and offers no grant, whatever the agent offers; activity notes mark them too.

The real relay, the in-memory agent, the real bot and the Telegram stand-in, on loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from world import ADA, approval, button_data, make_world, running_bot

KEY = "session-1:Bash:git status"
OFFER = {"key": KEY, "label": "`git status` in this session", "max_minutes": 120}
WARNING = "⚠️ contains invisible or direction-changing characters"


def command_approval(item_id: str, command: str) -> dict[str, Any]:
    blocks = {"v": 1, "blocks": [{"type": "block", "label": "Command", "value": command,
                                  "value_type": "command"}]}
    return approval(item_id, tool="Bash", summary=f"run {item_id}", blocks=blocks,
                    arguments={"command": command}, grant_offer=OFFER)


async def test_card_with_hidden_characters_warns_and_offers_no_grant(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(command_approval("apr_ok", "git status"))
        plain = await world.wait_card(ADA, "run apr_ok")
        assert any("Approve +" in b["text"] for b in plain.buttons())
        assert WARNING not in plain.text

        world.agent.submit_approval(
            command_approval("apr_bidi", "git status \u2067;rm -rf ~ #\u2069"))
        card = await world.wait_card(ADA, "run apr_bidi")
        assert WARNING in card.text
        assert "git status ⟦U+2067⟧;rm -rf ~ #⟦U+2069⟧" in card.text
        labels = [b["text"] for b in card.buttons()]
        assert "✅ Approve" in labels and not any("Approve +" in label for label in labels)


async def test_activity_notes_mark_hidden_characters(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(command_approval("apr_g", "git status"))
        card = await world.wait_card(ADA, "run apr_g")
        world.tap(ADA, card, ADA, "Approve +")
        await world.agent.wait_for(lambda a: bool(a.grants_in_force()))
        world.agent.run_covered(KEY, "Bash", "git status\u202e" + "\n" * 40 + "rm -rf ~")
        await world.tg.wait_for(lambda tg: any(
            m.text.startswith("Ran under") for m in tg.bot_messages(ADA)))
        note = next(m for m in world.tg.bot_messages(ADA) if m.text.startswith("Ran under"))
        assert "git status⟦?⟧ (+40 more lines)" in note.text
        assert "\u202e" not in note.text


async def test_grant_asked_for_by_hand_on_a_card_with_hidden_characters_is_refused(
    tmp_path: Path,
) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(
            command_approval("apr_bidi", "git status \u2067;rm -rf ~ #\u2069"))
        card = await world.wait_card(ADA, "run apr_bidi")
        forged = button_data(card, "✅ Approve")[:-1] + "g"
        query = world.tg.tap(ADA, card.message_id, ADA, forged, forged=True)
        answer = await world.answer_of(query)
        assert answer["show_alert"] is True and "does not fit this card" in answer["text"]
        assert world.agent.decisions == []

        world.tap(ADA, card, ADA, "✅ Approve")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].grant is None
