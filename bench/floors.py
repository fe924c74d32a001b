"""The latency floors the end-to-end benchmarks share, and the cores they run on.

A floor is what the path cannot go below on this machine at this moment, measured in the
same run as the path itself:

- a Bot API stand-in round trip: ``getUpdates`` with nothing pending and no wait, over a
  kept-alive connection as the bot's (how a tap reaches the bot at the least);
- a bare relay hop: an envelope sealed beforehand, queued by a relay client that does
  nothing else and read by one whose handler only notes the arrival, through the relay
  under test (which stores it and syncs it to disk, as for any envelope);
- an agent host API round trip on its Unix socket (the long poll's answer at the least).

:func:`pinned` keeps the load generator (this process: the stand-in, the agent, the API
client) on a core of its own and the processes under test on the others, where the machine
has two cores or more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import httpx

from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import raw_payload
from bot.relay.client import MemoryOutbox, RelayClient, one_at_a_time
from skald_telegram import AsyncAgentClient

STAND_IN_GOAL_S = 0.001
"""A stand-in round trip above this (p50) makes the floor too coarse to steer by."""


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass(frozen=True)
class Cores:
    """Where the load generator runs and where the processes under test go."""

    generator: frozenset[int]
    tested: frozenset[int]

    def place(self, pid: int) -> None:
        """Put a process under test (and the threads it starts later) on its cores."""
        if self.tested:
            os.sched_setaffinity(pid, self.tested)

    def describe(self) -> str:
        if not self.tested:
            return "one core: the load generator shares it with the processes under test"
        return (f"the load generator on CPU {_cpus(self.generator)}, the processes under "
                f"test on CPU {_cpus(self.tested)}")


@contextlib.contextmanager
def pinned() -> Iterator[Cores]:
    """This process on the first core it may use, the processes under test (placed with
    :meth:`Cores.place`) on the rest; as it was afterwards."""
    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        yield Cores(allowed, frozenset())
        return
    first = min(allowed)
    os.sched_setaffinity(0, {first})
    try:
        yield Cores(frozenset({first}), allowed - {first})
    finally:
        os.sched_setaffinity(0, allowed)


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


async def stand_in_round_trips(api_url: str, token: str, rounds: int) -> list[float]:
    """``getUpdates`` (nothing pending, no wait) on one kept-alive connection, before the
    bot polls: how a tap reaches the bot at the least."""
    url = f"{api_url}/bot{token}/getUpdates"
    times = []
    async with httpx.AsyncClient() as client:
        (await client.post(url, json={"timeout": 0})).raise_for_status()
        for _ in range(rounds):
            started = time.perf_counter()
            response = await client.post(url, json={"timeout": 0})
            times.append(time.perf_counter() - started)
            response.raise_for_status()
    return times


async def relay_hops(relay_url: str, payload_bytes: int, rounds: int) -> list[float]:
    """One bare relay hop each: an envelope sealed beforehand (its payload
    ``payload_bytes`` long) from one bare relay client to another."""
    loop = asyncio.get_running_loop()
    sender, receiver = Identity.generate("floor sender"), Identity.generate("floor receiver")
    arrivals: asyncio.Queue[float] = asyncio.Queue()

    async def note(_envelope: dict[str, object]) -> None:
        arrivals.put_nowait(loop.time())

    outbox = MemoryOutbox()
    clients = [
        RelayClient(relay_url, sender, handler=one_at_a_time(_ignore), outbox=outbox,
                    backoff_initial=0.05),
        RelayClient(relay_url, receiver, handler=one_at_a_time(note), outbox=MemoryOutbox(),
                    backoff_initial=0.05),
    ]
    tasks = [asyncio.create_task(client.run()) for client in clients]
    payload = raw_payload("ping", {"pad": "x" * max(0, payload_bytes - 40)})
    try:
        async with asyncio.timeout(30):
            while not all(client.connected for client in clients):
                await asyncio.sleep(0.01)
        hops = []
        for _ in range(rounds):
            envelope = seal(payload, sender=sender, recipient=receiver.card,
                            ts_ms=int(time.time() * 1000)).to_json()
            started = loop.time()
            outbox.add(relay_url, envelope)
            clients[0].wake()
            hops.append(await asyncio.wait_for(arrivals.get(), 30) - started)
        return hops
    finally:
        for client in clients:
            await client.stop()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _ignore(_envelope: dict[str, object]) -> None:
    return None


async def api_round_trips(client: AsyncAgentClient, item_id: str, rounds: int) -> list[float]:
    """The agent host's outcome of an item that has ended, asked with a wait (so answered
    at once): one local API round trip on the socket each."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await client.outcome(item_id, wait=1.0)
        times.append(time.perf_counter() - started)
    return times


@dataclass(frozen=True)
class Floor:
    """A floor made of parts measured in the same run: each part's samples by name."""

    parts: dict[str, list[float]]

    def at(self, fraction: float) -> float:
        """The floor at a percentile: the sum of its parts' at that percentile."""
        return sum(percentile(samples, fraction) for samples in self.parts.values())

    def rows(self, row: Callable[[str, str], None]) -> None:
        for name, samples in self.parts.items():
            row(f"  floor: {name}", f"{percentile(samples, 0.5) * 1000:.2f} / "
                f"{percentile(samples, 0.99) * 1000:.2f} ms")
