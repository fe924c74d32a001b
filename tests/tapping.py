"""A person's taps on the cards that hooks, the MCP server and the gateway put in Telegram."""

from __future__ import annotations

import re
from collections.abc import Callable

from agenthost_world import HostWorld
from world import ADA

from bot.playground.stub import StoredMessage

SLOW_MACHINE_SECONDS = 30.0
"""How long a card may take to show: each one waits on process starts, which a busy
machine slows down."""
_BOT_COMMAND = re.compile(r"(?<![\w/<>])/(?=\w)")


def titled(text: str) -> str:
    """``text`` as a card's title shows it: a word joiner after each ``/`` that Telegram
    would otherwise make a tappable bot command of."""
    return _BOT_COMMAND.sub("/\u2060", text)


async def card_showing(hw: HostWorld, needle: str,
                       where: Callable[[StoredMessage], bool] = lambda m: True
                       ) -> StoredMessage:
    """The card in Ada's chat whose text holds ``needle`` (and that ``where`` accepts)."""
    return await hw.world.wait_card(ADA, needle, where, timeout=SLOW_MACHINE_SECONDS)


async def approve(hw: HostWorld, needle: str) -> StoredMessage:
    found = await card_showing(hw, needle)
    hw.world.tap(ADA, found, ADA, "Approve")
    return found


def _prompts(hw: HostWorld) -> int:
    return sum(1 for call in hw.tg.calls("sendMessage")
               if isinstance(call.params.get("reply_markup"), dict)
               and call.params["reply_markup"].get("force_reply"))


async def answer_prompt(hw: HostWorld, needle: str, label: str, text: str) -> StoredMessage:
    """Tap ``label`` on the card and answer the bot's prompt (a ForceReply) with ``text``;
    the card."""
    found = await card_showing(hw, needle)
    before = _prompts(hw)
    hw.world.tap(ADA, found, ADA, label)
    await hw.tg.wait_for(lambda tg: _prompts(hw) > before, timeout=SLOW_MACHINE_SECONDS)
    prompt = await hw.world.force_reply_prompt(ADA)
    hw.tg.send_text(ADA, ADA, text, reply_to=prompt.message_id)
    return found


async def deny_with_reason(hw: HostWorld, needle: str, reason: str) -> None:
    """Tap "Deny with reason" and answer the bot's prompt with ``reason``."""
    await answer_prompt(hw, needle, "Deny with reason", reason)


async def edit_and_approve(hw: HostWorld, needle: str, value: str) -> StoredMessage:
    """Tap "✏️ Edit" on the card, reply ``value`` to the bot's prompt, and approve the
    edited card; the card (as it is now)."""
    found = await answer_prompt(hw, needle, "✏️ Edit", value)
    await hw.tg.wait_for(lambda tg: "Approve edited" in str(found.buttons()),
                         timeout=SLOW_MACHINE_SECONDS)
    hw.world.tap(ADA, found, ADA, "Approve edited")
    return found
