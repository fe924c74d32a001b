"""The agent host end to end: submit → card posted, and tap → ``ask``'s long poll answered.

Everything is real and on loopback, each in a process of its own as in use: the agent
host (``skald-telegram agent serve``), the relay (``python -m bot relay``) and the bot
(``python -m bot run``, PTB long polling, per-chat pacing off), on the cores of the
processes under test; the Telegram Bot API stand-in of the tests and the local API client
run here, on a core of their own where the machine has two (see :func:`floors.load_generator`).

1. Submit → card: from ``AsyncAgentClient.submit_approval`` over the Unix socket to the
   card's ``sendMessage`` reaching the stand-in (host → relay → bot → Telegram).
2. Tap → long poll answered: the item's outcome asked with a long wait, as ``ask`` does;
   from the injected tap to the answer (bot → relay → host → long poll).

Floor, sampled before every item (:class:`floors.Probe`), at the same percentile: one
stand-in ``getUpdates`` round trip, one bare relay hop (an envelope sealed beforehand,
between two bare relay clients, through the same relay) and one API round trip on the
host's socket. Items are spaced :data:`ITEM_SPACING_S` apart so that PTB's rate
limiter (30 requests a second overall) does not queue them, and the floor is sampled only
once the item before has settled (its card shows the outcome, and a spacing more passed):
sampled while the processes still finish the last item, a floor comes out slower than its
parts can be and flatters the ratios.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import floors
from agenthost_world import Host, finished, kill_children, start_cli
from bench_bot import _bot_process, _config_toml, _now, _sent
from test_relay_client import RelayProcess
from world import ADA, TOKEN, button_data

from bot.playground.stub import StoredMessage, TelegramStub
from skald_telegram import AsyncAgentClient

ITEM_SPACING_S: Final = 0.1
GOAL: Final = 3.0
"""Both paths: p50 and p99 at most this many times their floor's."""
DECISION_BYTES: Final = 700
TIMEOUT_S: Final = 60.0


async def _pair(tg: TelegramStub, host: Host) -> None:
    """``agent pair`` prints a link; ``/pair <link>`` in Ada's chat; the command exits."""
    pairing = await start_cli("agent", "pair", "--wait", "30", env=host.env)
    assert pairing.stdout is not None
    link = (await pairing.stdout.readline()).decode().strip()
    tg.send_text(ADA, ADA, f"/pair {link}")
    result = await finished(pairing, 40)
    if result.code != 0:
        raise RuntimeError(f"pairing failed: {result.err}")


async def _card(tg: TelegramStub, needle: str) -> StoredMessage:
    def shown(stub: TelegramStub) -> bool:
        return any(needle in m.text and m.buttons() for m in stub.bot_messages(ADA))

    await tg.wait_for(shown, TIMEOUT_S)
    return next(m for m in tg.bot_messages(ADA) if needle in m.text and m.buttons())


async def _items(
    tg: TelegramStub, client: AsyncAgentClient, probe: floors.Probe, count: int
) -> tuple[list[float], list[float]]:
    """(seconds from each submit to its card's ``sendMessage``, from each tap to the long
    poll's answer), the floor sampled before each item."""
    to_card: list[float] = []
    to_answer: list[float] = []
    item_id: str | None = None
    for n in range(count):
        await probe.sample(item_id)
        started = _now()
        since = len(tg.requests)
        needle = f"bench_{n}("
        item_id = await client.submit_approval(f"bench_{n}", arguments={"n": n})

        posted = await _sent(tg, needle, since)
        to_card.append(posted.at - started)
        card = await _card(tg, needle)
        poll = asyncio.create_task(client.outcome(item_id, wait=TIMEOUT_S))
        await asyncio.sleep(ITEM_SPACING_S)  # the card recorded, the long poll in place
        tapped = _now()
        tg.tap(ADA, card.message_id, ADA, button_data(card, "Approve"))
        outcome = await poll
        to_answer.append(_now() - tapped)
        if outcome.pending:
            raise RuntimeError(f"the long poll on {item_id} ended without a decision")
        await _settled(tg, card.message_id)
    return to_card, to_answer


async def _settled(tg: TelegramStub, message_id: int) -> None:
    """Until the tapped card shows its outcome (no buttons left), and a spacing more for
    what follows it (the tap's answer, acknowledgements, checkpoints)."""
    def edited(stub: TelegramStub) -> bool:
        return any(m.message_id == message_id and not m.buttons()
                   for m in stub.bot_messages(ADA))

    await tg.wait_for(edited, TIMEOUT_S)
    await asyncio.sleep(ITEM_SPACING_S)


async def _run(quick: bool) -> None:
    count = 20 if quick else 300
    with tempfile.TemporaryDirectory() as folder, floors.load_generator() as cores:
        tmp = Path(folder)
        relay = await RelayProcess.start(tmp / "relay")
        cores.place(relay.process.pid)
        host = Host(tmp / "agent", relay.url, log=tmp / "host.log")
        try:
            async with TelegramStub(token=TOKEN) as tg:
                tg.add_user(ADA, "Ada", "Lovelace", username="ada")
                tg.add_private_chat(ADA)
                config = tmp / "skald-telegram.toml"
                config.write_text(_config_toml(tg.api_url, tmp / "state", chat_pace_seconds=0))
                async with _bot_process(config, tmp / "bot.log", cores):
                    await host.start()
                    assert host.process is not None
                    cores.place(host.process.pid)
                    await _pair(tg, host)
                    async with host.client() as client, \
                            floors.Probe(relay.url, DECISION_BYTES, client) as probe:
                        to_card, to_answer = await _items(tg, client, probe, count)
        except BaseException:
            for log in (tmp / "host.log", tmp / "bot.log"):
                if log.exists():
                    print(log.read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            await host.stop()
            await kill_children()
            await relay.kill()
    _report(cores, count, to_card, to_answer, probe.floor())


def _report(cores: floors.Cores, count: int, to_card: list[float], to_answer: list[float],
            floor: floors.Floor) -> None:
    print(f"   {count} approvals one at a time, one private chat, chat pace 0; "
          f"{cores.describe()}")
    print(f"     {'':<34} {'p50 / p99':>18}   {'floor p50 / p99':>20}")
    for label, values in (("submit → card sendMessage", to_card),
                          ("tap → long poll answered", to_answer)):
        p50, p99 = floors.percentile(values, 0.5), floors.percentile(values, 0.99)
        ratio50, ratio99 = p50 / floor.at(0.5), p99 / floor.at(0.99)
        met = "met" if max(ratio50, ratio99) <= GOAL else "NOT met"
        print(f"     {label:<34} {p50 * 1000:7.2f} / {p99 * 1000:7.2f} ms   "
              f"{floor.at(0.5) * 1000:7.2f} / {floor.at(0.99) * 1000:7.2f} ms   "
              f"{ratio50:.1f}x / {ratio99:.1f}x (goal ≤ {GOAL:.0f}x: {met})")
    for name, samples in floor.parts.items():
        print(f"       floor: {name:<27} {floors.percentile(samples, 0.5) * 1000:7.2f} / "
              f"{floors.percentile(samples, 0.99) * 1000:7.2f} ms")


def main(quick: bool) -> None:
    asyncio.run(_run(quick))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
