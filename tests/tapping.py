"""A person's taps on the cards that hooks, the MCP server and the gateway put in Telegram."""

from __future__ import annotations

from agenthost_world import HostWorld
from world import ADA

from bot.playground.stub import StoredMessage


async def approve(hw: HostWorld, needle: str) -> StoredMessage:
    card = await hw.world.wait_card(ADA, needle)
    hw.world.tap(ADA, card, ADA, "Approve")
    return card


def _prompts(hw: HostWorld) -> int:
    return sum(1 for call in hw.tg.calls("sendMessage")
               if isinstance(call.params.get("reply_markup"), dict)
               and call.params["reply_markup"].get("force_reply"))


async def deny_with_reason(hw: HostWorld, needle: str, reason: str) -> None:
    """Tap "Deny with reason" and answer the bot's prompt with ``reason``."""
    card = await hw.world.wait_card(ADA, needle)
    before = _prompts(hw)
    hw.world.tap(ADA, card, ADA, "Deny with reason")
    await hw.tg.wait_for(lambda tg: _prompts(hw) > before)
    prompt = await hw.world.force_reply_prompt(ADA)
    hw.tg.send_text(ADA, ADA, reason, reply_to=prompt.message_id)
