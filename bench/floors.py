"""The latency floors the end-to-end benchmarks share, and the cores they run on.

A floor is what the path cannot go below on this machine at this moment, measured in the
same run as the path itself, one sample of each part between two items measured
(:class:`Probe`), so that the floor sees the machine as the items do (each sample the
last of a few back to back: the least the part costs, caches and cores awake):

- a Bot API stand-in round trip: ``getUpdates`` with nothing pending and no wait, over a
  kept-alive connection as the bot's (how a tap reaches the bot at the least), to a
  stand-in of the tests' kind in this process that nothing else polls;
- a bare relay hop: an envelope sealed beforehand, queued by a relay client that does
  nothing else and read by one whose handler only notes the arrival, through the relay
  under test (which stores it and syncs it to disk, as for any envelope);
- an agent host API round trip on its Unix socket (the long poll's answer at the least).

:func:`load_generator` keeps the load generator (this process: the stand-in, the agent, the API
client) on a core of its own and the processes under test on the others, where the machine
has two cores or more.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import httpx

from bot.playground.stub import TelegramStub
from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import raw_payload
from bot.relay.client import MemoryOutbox, RelayClient, one_at_a_time
from skald_telegram import AsyncAgentClient

TOKEN = "123456:floor-stand-in"

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
def load_generator() -> Iterator[Cores]:
    """This process as a load generator that keeps out of the way: on the first core it
    may use, the processes under test (placed with :meth:`Cores.place`) on the rest, and
    no garbage collection (a full one walks the large approvals it holds, tens of
    milliseconds in which nothing it measures is noticed); as it was afterwards."""
    allowed = frozenset(os.sched_getaffinity(0))
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        if len(allowed) < 2:
            yield Cores(allowed, frozenset())
            return
        first = min(allowed)
        os.sched_setaffinity(0, {first})
        try:
            yield Cores(frozenset({first}), allowed - {first})
        finally:
            os.sched_setaffinity(0, allowed)
    finally:
        gc.enable()
        gc.unfreeze()


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


class Probe:
    """Samples every part of a floor once at a time, between the items measured, so that
    the floor sees the machine as they do: a stand-in ``getUpdates`` round trip (a stand-in
    of its own, which nothing else polls), a bare relay hop and, given an API client, an
    API round trip on the agent host's socket."""

    WARM_ROUNDS = 3
    STAND_IN = "stand-in getUpdates round trip"
    RELAY = "bare relay hop"
    API = "API round trip on the socket"

    def __init__(self, relay_url: str, payload_bytes: int,
                 api: AsyncAgentClient | None = None) -> None:
        self._relay_url = relay_url
        self._api = api
        self.parts: dict[str, list[float]] = {self.STAND_IN: [], self.RELAY: []}
        if api is not None:
            self.parts[self.API] = []
        self._sender = Identity.generate("floor sender")
        self._receiver = Identity.generate("floor receiver")
        self._payload = raw_payload("ping", {"pad": "x" * max(0, payload_bytes - 40)})
        self._outbox = MemoryOutbox()
        self._arrivals: asyncio.Queue[float] = asyncio.Queue()
        self._clients = [
            RelayClient(relay_url, self._sender, handler=one_at_a_time(_ignore),
                        outbox=self._outbox, backoff_initial=0.05),
            RelayClient(relay_url, self._receiver, handler=one_at_a_time(self._note),
                        outbox=MemoryOutbox(), backoff_initial=0.05),
        ]
        self._stack = contextlib.AsyncExitStack()
        self._http: httpx.AsyncClient | None = None
        self._url = ""

    async def __aenter__(self) -> Probe:
        stand_in = await self._stack.enter_async_context(TelegramStub(token=TOKEN))
        self._url = f"{stand_in.api_url}/bot{TOKEN}/getUpdates"
        self._http = await self._stack.enter_async_context(httpx.AsyncClient())
        (await self._http.post(self._url, json={"timeout": 0})).raise_for_status()
        tasks = [asyncio.create_task(client.run()) for client in self._clients]
        self._stack.push_async_callback(_stopped, self._clients, tasks)
        async with asyncio.timeout(30):
            while not all(client.connected for client in self._clients):
                await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def sample(self, ended_item: str | None = None) -> None:
        """One sample of each part, the last of :data:`WARM_ROUNDS` back to back (the
        first after a pause pays for caches and cores woken from idle); the API's asks
        for ``ended_item``, an item that has ended (with a wait: answered at once)."""
        for _ in range(self.WARM_ROUNDS):
            stand_in = await self._stand_in()
        self.parts[self.STAND_IN].append(stand_in)
        for _ in range(self.WARM_ROUNDS):
            hop = await self._hop()
        self.parts[self.RELAY].append(hop)
        if self._api is not None and ended_item is not None:
            for _ in range(self.WARM_ROUNDS):
                started = time.perf_counter()
                await self._api.outcome(ended_item, wait=1.0)
            self.parts[self.API].append(time.perf_counter() - started)

    async def _stand_in(self) -> float:
        assert self._http is not None
        started = time.perf_counter()
        response = await self._http.post(self._url, json={"timeout": 0})
        elapsed = time.perf_counter() - started
        response.raise_for_status()
        return elapsed

    async def _hop(self) -> float:
        loop = asyncio.get_running_loop()
        envelope = seal(self._payload, sender=self._sender, recipient=self._receiver.card,
                        ts_ms=int(time.time() * 1000)).to_json()
        started = loop.time()
        self._outbox.add(self._relay_url, envelope)
        self._clients[0].wake()
        return await asyncio.wait_for(self._arrivals.get(), 30) - started

    async def _note(self, _envelope: dict[str, object]) -> None:
        self._arrivals.put_nowait(asyncio.get_running_loop().time())

    def floor(self) -> Floor:
        return Floor(self.parts)


async def _stopped(clients: list[RelayClient], tasks: list[asyncio.Task[None]]) -> None:
    for client in clients:
        await client.stop()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _ignore(_envelope: dict[str, object]) -> None:
    return None


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
