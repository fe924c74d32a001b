"""An end-to-end world for bot tests: the real relay, a real agent, the real bot, and the
local Telegram Bot API stand-in, all on loopback in the test's event loop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.app import Bot, Running
from bot.config import Config, parse_config
from bot.playground.stub import StoredMessage, TelegramStub
from bot.protocol.identity import Identity
from bot.relay.server import RelayServer
from bot.testing.agent import Agent
from bot.testing.clock import ShiftedClock

TOKEN = "123456:TEST-token"
ADA, BOB, CAROL, DAVE = 4242, 4343, 4444, 4545
OPS_GROUP = -1001234567890
FAST_RELAY = {"backoff_initial": 0.05, "backoff_max": 0.5}


def iso(delta: timedelta = timedelta()) -> str:
    return (datetime.now(UTC) + delta).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def approval(item_id: str, **overrides: Any) -> dict[str, Any]:
    """A realistic approval: an email with blocks and arguments."""
    item: dict[str, Any] = {
        "id": item_id,
        "tool": "send_email",
        "summary": f"Send the Q3 estimate ({item_id})",
        "blocks": {"v": 1, "blocks": [
            {"type": "key_value", "key": "To", "value": "mario@acme.com", "value_type": "email"},
            {"type": "field", "label": "Subject", "value": "Q3 Estimate", "value_type": "string"},
        ]},
        "arguments": {"to": "mario@acme.com", "subject": "Q3 Estimate", "id": item_id},
        "created_at": iso(),
    }
    item.update(overrides)
    return item


def question(item_id: str, options: list[str] | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": item_id,
        "question": "Which environment should I deploy to?",
        "created_at": iso(),
    }
    if options is not None:
        item["options"] = options
    return item


STORAGE_URL: str | None = None
"""The PostgreSQL database the bots of the running test keep their state in (set by the
``state_store`` fixture); ``None``: the SQLite file in the state folder."""


def storage_toml() -> str:
    """The ``[storage]`` table for :data:`STORAGE_URL`, for a configuration file."""
    return f'[storage]\nurl = "{STORAGE_URL}"\n' if STORAGE_URL else ""


def bot_config(tmp: Path, api_url: str, **telegram: Any) -> dict[str, Any]:
    storage = {"storage": {"url": STORAGE_URL}} if STORAGE_URL else {}
    return {
        "telegram": {"token": TOKEN, "api_url": api_url, "admins": [ADA],
                     "chat_pace_seconds": 0, **telegram},
        "state": {"dir": str(tmp / "state")},
        **storage,
    }


@dataclass
class World:
    tg: TelegramStub
    relay: RelayServer
    agent: Agent
    tmp: Path
    config: Config
    clock: ShiftedClock
    """The bot's clock: tests move it forward instead of waiting."""
    bot: Running | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> Running:
        assert self.bot is not None
        return self.bot

    async def pair(self, chat_id: int, admin: int = ADA, *, agent: Agent | None = None,
                   thread_id: int | None = None) -> None:
        """Pair the agent with the bot through ``/pair`` sent in ``chat_id``."""
        agent = agent or self.agent
        uri = agent.new_pairing_uri()
        self.tg.send_text(chat_id, admin, f"/pair {uri}", thread_id=thread_id)
        await agent.wait_for(lambda a: len(a.peers) == 1)
        await self.tg.wait_for(lambda tg: any("Paired with" in m.text
                                              for m in tg.bot_messages(chat_id)))

    def cards(self, chat_id: int) -> list[StoredMessage]:
        """The bot's messages in a chat that carry (or carried) decision buttons or a status."""
        return [m for m in self.tg.bot_messages(chat_id) if _is_card(m)]

    def card(self, chat_id: int, needle: str) -> StoredMessage:
        found = [m for m in self.cards(chat_id) if needle in m.text]
        assert len(found) == 1, f"{len(found)} cards with {needle!r}: {[m.text for m in found]}"
        return found[0]

    async def wait_card(self, chat_id: int, needle: str,
                        where: Callable[[StoredMessage], bool] = lambda m: True,
                        timeout: float = 10) -> StoredMessage:
        await self.tg.wait_for(
            lambda tg: any(needle in m.text and where(m) for m in self.cards(chat_id)),
            timeout=timeout,
        )
        return self.card(chat_id, needle)

    def tap(self, chat_id: int, message: StoredMessage, user: int, label: str) -> str:
        data = button_data(message, label)
        return self.tg.tap(chat_id, message.message_id, user, data)

    async def force_reply_prompt(self, chat_id: int) -> StoredMessage:
        """The bot's latest message in a chat that was sent with a ForceReply."""

        def forced(tg: TelegramStub) -> list[StoredMessage]:
            texts = {
                call.params["text"] for call in tg.calls("sendMessage")
                if isinstance(call.params.get("reply_markup"), dict)
                and call.params["reply_markup"].get("force_reply")
                and call.params.get("chat_id") == chat_id
            }
            return [m for m in tg.bot_messages(chat_id) if m.html in texts]

        await self.tg.wait_for(lambda tg: bool(forced(tg)))
        return forced(self.tg)[-1]

    async def answer_of(self, query_id: str) -> dict[str, Any]:
        await self.tg.wait_for(lambda tg: query_id in tg.callback_answers)
        answer: dict[str, Any] = self.tg.callback_answers[query_id]
        return answer


def button_data(message: StoredMessage, label: str) -> str:
    for button in message.buttons():
        if label in button["text"]:
            return str(button["callback_data"])
    raise AssertionError(f"no button {label!r} on {[b['text'] for b in message.buttons()]}")


def _is_card(message: StoredMessage) -> bool:
    return message.document is None and message.text.startswith(("🤖", "❓"))


@contextlib.asynccontextmanager
async def make_world(tmp: Path, *, stub_on_bot_clock: bool = False,
                     **telegram: Any) -> AsyncIterator[World]:
    """``stub_on_bot_clock`` times the stand-in's requests on the bot's clock (which tests
    move forward) instead of the event loop's."""
    clock = ShiftedClock()
    stub = TelegramStub(token=TOKEN, clock=clock.time if stub_on_bot_clock else None)
    async with stub as tg, RelayServer(tmp / "relay") as relay:
        tg.add_user(ADA, "Ada", "Lovelace", username="ada")
        tg.add_user(BOB, "Bob", "Builder", username="bob")
        tg.add_user(CAROL, "Carol", "Shaw")
        tg.add_user(DAVE, "Dave", "Observer")
        tg.add_private_chat(ADA)
        tg.add_private_chat(BOB)
        agent = Agent(Identity.generate("build-bot"), relay.url, **FAST_RELAY)
        await agent.start()
        config = parse_config(bot_config(tmp, tg.api_url, **telegram), base=tmp)
        world = World(tg, relay, agent, tmp, config, clock)
        try:
            yield world
        finally:
            await agent.stop()


@contextlib.asynccontextmanager
async def running_bot(world: World, config: Config | None = None) -> AsyncIterator[Running]:
    async with Bot(config or world.config, clock=world.clock,
                   relay_options=FAST_RELAY) as running:
        world.bot = running
        try:
            yield running
        finally:
            world.bot = None
