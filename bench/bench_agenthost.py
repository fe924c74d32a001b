"""The agent host end to end: submit → card posted, and tap → ``ask`` returns.

Everything is real and on loopback: the agent host (``skald-telegram agent serve``, a
child process), the built-in relay, the bot (PTB long polling) and the Telegram Bot API
stand-in of the tests, with per-chat pacing off.

1. Submit → card: from ``AsyncAgentClient.submit_approval`` over the Unix socket to the
   card's ``sendMessage`` reaching the stand-in (host → relay → bot → Telegram).
2. Tap → ``ask`` returns: an ``skald-telegram ask`` process waits on a card; from the
   injected tap to the process's exit (bot → relay → host → long poll → exit).

Floor, measured in the same run: the bare relay round trip, one sealed envelope from one
relay client to another and a sealed answer back, with handlers that only note arrival.
Items are spaced :data:`ITEM_SPACING_S` apart so that PTB's rate limiter (30 requests a
second overall) does not queue them.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from agenthost_world import finished, host_world, start_cli
from world import ADA

from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.relay.client import MemoryOutbox, RelayClient, one_at_a_time
from bot.relay.server import RelayServer

ITEM_SPACING_S: Final = 0.1
FAST: Final = {"backoff_initial": 0.05, "backoff_max": 0.5}


def _percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms   (n={len(ordered)})"


async def _relay_round_trips(tmp: Path, count: int) -> list[float]:
    async with RelayServer(tmp / "floor-relay") as relay:
        alice, bob = Identity.generate("alice"), Identity.generate("bob")
        arrived: asyncio.Queue[float] = asyncio.Queue()
        outboxes = {alice.id: MemoryOutbox(), bob.id: MemoryOutbox()}
        clients: dict[str, RelayClient] = {}

        def send(sender: Identity, recipient: Identity) -> None:
            envelope = seal(b'{"kind":"ping","v":1,"body":{}}', sender=sender,
                            recipient=recipient.card, ts_ms=int(time.time() * 1000))
            outboxes[sender.id].add(relay.url, envelope.to_json())
            clients[sender.id].wake()

        async def at_alice(envelope: dict[str, object]) -> None:
            arrived.put_nowait(time.perf_counter())

        async def at_bob(envelope: dict[str, object]) -> None:
            send(bob, alice)

        clients[alice.id] = RelayClient(relay.url, alice, handler=one_at_a_time(at_alice),
                                        outbox=outboxes[alice.id], **FAST)
        clients[bob.id] = RelayClient(relay.url, bob, handler=one_at_a_time(at_bob),
                                      outbox=outboxes[bob.id], **FAST)
        tasks = [asyncio.create_task(c.run()) for c in clients.values()]
        while not all(c.connected for c in clients.values()):
            await asyncio.sleep(0.01)
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            send(alice, bob)
            samples.append(await asyncio.wait_for(arrived.get(), 10) - started)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return samples


async def _run(quick: bool) -> None:
    cards = 5 if quick else 40
    asks = 3 if quick else 20
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        floor = await _relay_round_trips(tmp, 10 if quick else 100)
        log = tmp / "host.log"
        try:
            results = await _measure(tmp, log, cards, asks)
        except BaseException:
            print(log.read_text()[-3000:] if log.exists() else "", file=sys.stderr)
            raise
    submit_to_card, tap_to_exit = results
    print(f"   submit → card posted      {_percentiles(submit_to_card)}")
    print(f"   tap → ask returns         {_percentiles(tap_to_exit)}")
    print(f"   floor: relay round trip   {_percentiles(floor)}")


async def _measure(tmp: Path, log: Path, cards: int, asks: int) -> tuple[list[float], list[float]]:
    """(submit → card, tap → ask's exit), the host's log in ``log``."""
    async with host_world(tmp, host_log=log) as hw:
        await hw.pair()
        submit_to_card = []
        async with hw.host.client() as client:
            for n in range(cards):
                started = time.perf_counter()
                await client.submit_approval(f"bench_{n}", arguments={"n": n})
                await hw.tg.wait_for(lambda tg, n=n: any(
                    f"bench_{n}(" in m.text for m in hw.world.cards(ADA)))
                submit_to_card.append(time.perf_counter() - started)
                await asyncio.sleep(ITEM_SPACING_S)
        tap_to_exit = []
        for n in range(asks):
            process = await start_cli("ask", "--tool", f"tap_{n}", "--arg", f"n={n}",
                                      env=hw.host.env)
            card = await hw.world.wait_card(ADA, f"tap_{n}(")
            await asyncio.sleep(ITEM_SPACING_S)
            started = time.perf_counter()
            hw.world.tap(ADA, card, ADA, "Approve")
            result = await finished(process)
            tap_to_exit.append(time.perf_counter() - started)
            assert result.code == 0, result.err
    return submit_to_card, tap_to_exit


def main(quick: bool) -> None:
    asyncio.run(_run(quick))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
