"""``skald-telegram demo`` and ``demo-agent`` end to end: the real relay, the demo agent,
the bot and the local Bot API stand-in, with the demo's terminal output captured."""

from __future__ import annotations

import asyncio
import io
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from world import ADA, BOB, TOKEN, World, make_world, running_bot

from bot.cli import main as cli_main
from bot.demo import DemoOptions, run_demo
from bot.demo_agent import DEMO_ITEMS, DemoAgentOptions, printable, run_demo_agent, who
from bot.playground.stub import TelegramStub
from bot.protocol.payloads import Person

TIMEOUT = 10.0


class Output(io.StringIO):
    """A terminal stand-in that tests can wait on."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    def write(self, text: str) -> int:
        self._changed.set()
        return super().write(text)

    async def wait_for(self, needle: str, timeout: float = TIMEOUT) -> str:
        async with asyncio.timeout(timeout):
            while needle not in self.getvalue():
                self._changed.clear()
                await self._changed.wait()
        return self.getvalue()


def start_demo(world: World, out: Output, stop: asyncio.Event) -> asyncio.Task[int]:
    """``skald-telegram demo`` against the world's Telegram stand-in, until ``stop``."""
    options = DemoOptions(token=TOKEN, api_url=world.tg.api_url,
                          state=world.tmp / "demo", chat_pace_s=0)
    return asyncio.create_task(run_demo(options, stop=stop, out=out))


async def test_demo_pairs_the_first_start_asks_and_prints_decisions(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        out, stop = Output(), asyncio.Event()
        demo = start_demo(world, out, stop)
        text = await out.wait_for("send /start")
        assert "DEMO MODE" in text and "@skald_test_bot" in text

        world.tg.send_text(ADA, ADA, "/start")
        await world.tg.wait_for(lambda tg: len(world.cards(ADA)) == len(DEMO_ITEMS))
        messages = [m.text for m in world.tg.bot_messages(ADA)]
        assert any(t.startswith("🧪 Demo") and "Skald demo agent" in t for t in messages)
        assert any("Agents bound to this chat: Skald demo agent" in t for t in messages)
        cards = "\n".join(m.text for m in world.cards(ADA))
        for tool in ("send_email", "write_file", "deploy", "run_shell"):
            assert tool in cards
        assert "expires" in world.card(ADA, "send_email").text
        assert "🔗 Paired the demo agent with a private chat" in out.getvalue()

        world.tap(ADA, world.card(ADA, "send_email"), ADA, "Approve")
        await out.wait_for("✅ approved send_email by Ada Lovelace (@ada)")
        world.tap(ADA, world.card(ADA, "Where should"), ADA, "canary")
        await out.wait_for("with “canary (5% of traffic)” by Ada Lovelace (@ada)")

        world.tg.send_text(BOB, BOB, "/start")
        await world.tg.wait_for(lambda tg: len(tg.bot_messages(BOB)) == 1)
        assert "No agent is bound to this chat" in world.tg.bot_messages(BOB)[0].text
        assert out.getvalue().count("🔗 Paired") == 1

        stop.set()
        assert await asyncio.wait_for(demo, TIMEOUT) == 0
    printed = out.getvalue()
    assert "Stopping the demo" in printed
    assert "sk_live" not in printed and TOKEN not in printed


def test_demo_with_a_malformed_token_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "not-a-token")
    monkeypatch.delenv("SKALD_TELEGRAM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["demo"]) == 2
    err = capsys.readouterr().err
    for step in ("@BotFather", "/newbot", "export TELEGRAM_BOT_TOKEN=", "skald-telegram demo"):
        assert step in err
    assert "not-a-token" not in err


async def test_demo_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    async with TelegramStub(token=TOKEN) as tg:
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "demo", "--api-url", tg.api_url,
            "--state", str(tmp_path / "demo"),
            env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        seen = b""
        async with asyncio.timeout(TIMEOUT):
            while b"send /start" not in seen:
                line = await process.stdout.readline()
                assert line, f"the demo ended early: {seen!r}"
                seen += line
        process.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(process.communicate(), TIMEOUT)
        assert process.returncode == 0
        assert b"Stopping the demo" in rest


async def test_demo_agent_prints_a_link_and_serves_a_bot(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        out, stop = Output(), asyncio.Event()
        options = DemoAgentOptions(relay=world.relay.url, state=tmp_path / "agent")
        agent = asyncio.create_task(run_demo_agent(options, stop=stop, out=out))
        text = await out.wait_for("Waiting for a device")
        found = re.search(r"skald-pair:v1\?\S+", text)
        assert found is not None
        assert "▄" in text and "█" in text  # the QR code

        world.tg.send_text(ADA, ADA, f"/pair {found.group(0)}")
        await world.tg.wait_for(lambda tg: len(world.cards(ADA)) == len(DEMO_ITEMS))
        await out.wait_for("🔗 Paired with Telegram @skald_test_bot")
        world.tap(ADA, world.card(ADA, "API key"), ADA, "❌ Deny")
        await out.wait_for("❌ denied deploy by Ada Lovelace (@ada)")

        stop.set()
        assert await asyncio.wait_for(agent, TIMEOUT) == 0
    assert (tmp_path / "agent" / "demo-agent.json").exists()
    assert "sk_live" not in out.getvalue()


async def test_the_demo_offers_edits_and_reports_an_edited_approval(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        out, stop = Output(), asyncio.Event()
        demo = start_demo(world, out, stop)
        await out.wait_for("send /start")
        world.tg.send_text(ADA, ADA, "/start")
        await world.tg.wait_for(lambda tg: len(world.cards(ADA)) == len(DEMO_ITEMS))
        email = world.card(ADA, "send_email")
        assert "✏️ Edit" in str(email.buttons())
        world.tap(ADA, email, ADA, "✏️ Edit")
        await world.tg.wait_for(lambda tg: any("Which value should change" in m.text
                                               for m in tg.bot_messages(ADA)))
        chooser = [m for m in world.tg.bot_messages(ADA) if "Which value" in m.text][-1]
        world.tap(ADA, chooser, ADA, "✏️ subject")
        prompt = await world.force_reply_prompt(ADA)
        assert "Q3 estimate" in prompt.text
        world.tg.send_text(ADA, ADA, "Q3 estimate (revised)", reply_to=prompt.message_id)
        await world.tg.wait_for(lambda tg: "Approve edited" in str(email.buttons()))
        world.tap(ADA, email, ADA, "Approve edited")
        await out.wait_for("✅ approved send_email with an edit by Ada Lovelace (@ada)")
        stop.set()
        assert await asyncio.wait_for(demo, TIMEOUT) == 0


def test_typed_text_cannot_drive_the_terminal() -> None:
    assert printable("ok\x1b[2J\x07gone\nnext") == "ok [2J gone next"
    assert who(Person("Ada\x1b[31m", 1, "ada")) == "Ada [31m (@ada)"
    assert who(Person("Carol Shaw")) == "Carol Shaw"
