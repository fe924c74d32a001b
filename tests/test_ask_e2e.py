"""``skald-telegram ask`` end to end: the agent host as a process, the built-in relay, the
real bot against the Telegram stand-in, and a person tapping the cards."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from agenthost_world import finished, host_world, start_cli
from world import ADA


async def test_approved_denied_with_reason_and_answered(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        env = hw.host.env
        world = hw.world

        approve = await start_cli("ask", "--tool", "deploy", "--arg", "env=production",
                                  "--arg", "api_key=sk-live-1234567890", "--json", env=env)
        card = await world.wait_card(ADA, "deploy(production)")
        assert "build-host" in card.text
        assert "<tg-spoiler>sk-live-1234567890</tg-spoiler>" in card.html  # a secret
        world.tap(ADA, card, ADA, "Approve")
        result = await finished(approve)
        assert result.code == 0, result.err
        report = json.loads(result.out)
        assert report["decision"] == "approved"
        assert report["decided_by"]["name"] == "Ada Lovelace"
        assert report["decided_by"]["username"] == "ada"
        assert report["item_id"].startswith("apr_") and report["reason"] is None
        await world.wait_card(ADA, "deploy(production)", lambda m: "Approved by" in m.text)

        deny = await start_cli("ask", "--tool", "drop_table", "--summary", "Drop the users table",
                               "--args-json", '{"table": "users"}', env=env)
        card = await world.wait_card(ADA, "Drop the users table")
        world.tap(ADA, card, ADA, "Deny with reason")
        prompt = await world.force_reply_prompt(ADA)
        hw.tg.send_text(ADA, ADA, "not on a Friday", reply_to=prompt.message_id)
        result = await finished(deny)
        assert result.code == 1, result.err
        assert result.out.strip() == "denied by Ada Lovelace (@ada): not on a Friday"

        ask = await start_cli("ask", "--question", "Which environment?", "--option", "staging",
                              "--option", "production", env=env)
        card = await world.wait_card(ADA, "Which environment?")
        world.tap(ADA, card, ADA, "staging")
        result = await finished(ask)
        assert (result.code, result.out.strip()) == (0, "staging")


async def test_timeout_closes_the_card_and_exits_2(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        ask = await start_cli("ask", "--tool", "slow_call", "--arg", "n=1", "--timeout", "1",
                              env=hw.host.env)
        await hw.world.wait_card(ADA, "slow_call(1)")
        result = await finished(ask)
        assert result.code == 2, result.err
        assert "expired" in result.out
        card = await hw.world.wait_card(ADA, "slow_call(1)", lambda m: "Expired" in m.text)
        assert card.buttons() == []

        interrupted = await start_cli("ask", "--tool", "long_call", "--arg", "n=2",
                                      env=hw.host.env)
        await hw.world.wait_card(ADA, "long_call(2)")
        interrupted.send_signal(signal.SIGINT)  # Ctrl-C withdraws the request
        result = await finished(interrupted)
        assert result.code == 3 and "withdrawn" in result.err
        card = await hw.world.wait_card(ADA, "long_call(2)", lambda m: "Cancelled" in m.text)
        assert card.buttons() == []


async def test_fifty_concurrent_asks_each_get_their_own_decision(tmp_path: Path) -> None:
    async with host_world(tmp_path) as hw:
        await hw.pair()
        asks = await asyncio.gather(*(
            start_cli("ask", "--tool", f"job_{n:02d}", "--arg", f"n={n}", env=hw.host.env)
            for n in range(50)
        ))
        # Fifty interpreters starting at once: generous limits for a loaded machine.
        await hw.tg.wait_for(lambda tg: len(hw.world.cards(ADA)) == 50, timeout=90)
        for n in range(50):
            card = hw.world.card(ADA, f"job_{n:02d}(")
            hw.world.tap(ADA, card, ADA, "Approve" if n % 2 == 0 else "❌ Deny")
        results = await asyncio.gather(*(finished(ask, timeout=90) for ask in asks))
        assert [r.code for r in results] == [n % 2 for n in range(50)]
        assert all(r.out.startswith("approved by" if n % 2 == 0 else "denied by")
                   for n, r in enumerate(results))
