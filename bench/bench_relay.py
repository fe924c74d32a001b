"""Relay round-trip latency and sustained throughput against a bare websockets floor.

Through the built-in relay on loopback (its SQLite queue in a temporary folder, fsync on
every commit), with two relay clients, an agent and a device:

- round trip (p50, p99): agent → relay → device → ack. The agent's client sends an
  envelope; the relay queues it (one commit) and delivers it; the device's client hands it
  to its handler and writes the ``ack`` to its socket. Timed from the agent's send to the
  moment the device's ack has been written (the relay reads it from loopback right after;
  its deletion is batched and not waited for);
- throughput: the agent queues a burst of envelopes; envelopes per second until the
  device's handler has received the last one and its ack has been written.

The floor is a bare websockets echo server measured in the same run: one send + echoed
reply per round trip (one message each way, nothing stored), and a pipelined burst of
messages of the same size.
Envelopes are sealed before timing starts: crypto is measured by ``bench_envelope``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import raw_payload
from bot.relay.client import MemoryOutbox, RelayClient
from bot.relay.frames import MAX_FRAME_BYTES, deliver_frame, encode_envelope
from bot.relay.server import RelayServer

AGENT = Identity.from_seeds(b"\x01" * 32, b"\x02" * 32, "build-bot")
DEVICE = Identity.from_seeds(b"\x03" * 32, b"\x04" * 32, "Telegram @bench_bot")
BODY = {"rev": 1, "agent": {"name": "build-bot"}, "note": "x" * 2000}


def _envelopes(count: int) -> list[dict[str, object]]:
    payload = raw_payload("inbox_update", BODY)
    now = int(time.time() * 1000)
    return [
        seal(payload, sender=AGENT, recipient=DEVICE.card, ts_ms=now).to_json()
        for _ in range(count)
    ]


class _Device:
    """The device's relay client; its handler counts arrivals.

    The client writes the ack as soon as the handler returns, before anything else runs,
    so a task woken by :meth:`expect` resumes after the ack is on the socket.
    """

    def __init__(self, url: str) -> None:
        self.received = 0
        self._target = 0
        self._arrived = asyncio.Event()
        self.client = RelayClient(url, DEVICE, handler=self._on_envelope, outbox=MemoryOutbox())
        self.task = asyncio.create_task(self.client.run())

    async def _on_envelope(self, envelope: dict[str, object]) -> None:
        self.received += 1
        if self.received >= self._target:
            self._arrived.set()

    async def expect(self, count: int) -> None:
        self._target = self.received + count
        self._arrived.clear()
        await asyncio.wait_for(self._arrived.wait(), 120)

    async def close(self) -> None:
        await self.client.stop()
        await self.task


async def _relay_numbers(rounds: int, burst: int) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as folder:
        cap = 10 * burst
        async with RelayServer(Path(folder), queue_cap=cap, sender_queue_cap=cap) as relay:
            outbox = MemoryOutbox()
            agent = RelayClient(relay.url, AGENT, handler=_ignore, outbox=outbox)
            agent_task = asyncio.create_task(agent.run())
            device = _Device(relay.url)
            while not (agent.connected and device.client.connected):
                await asyncio.sleep(0.01)
            latencies = []
            for envelope in _envelopes(rounds):
                started = time.perf_counter()
                outbox.add(relay.url, envelope)
                agent.wake()
                await device.expect(1)
                latencies.append(time.perf_counter() - started)
            burst_envelopes = _envelopes(burst)
            started = time.perf_counter()
            for envelope in burst_envelopes:
                outbox.add(relay.url, envelope)
            agent.wake()
            await device.expect(burst)
            rate = burst / (time.perf_counter() - started)
            await agent.stop()
            await agent_task
            await device.close()
    return latencies, rate


async def _ignore(envelope: dict[str, object]) -> None:
    return None


async def _echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


async def _floor_numbers(rounds: int, burst: int) -> tuple[list[float], float]:
    message = deliver_frame(encode_envelope(_envelopes(1)[0]))
    async with serve(_echo, "127.0.0.1", 0, max_size=MAX_FRAME_BYTES, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(
            f"ws://127.0.0.1:{port}/", max_size=MAX_FRAME_BYTES, compression=None
        ) as ws:
            latencies = []
            for _ in range(rounds):
                started = time.perf_counter()
                await ws.send(message)
                await ws.recv()
                latencies.append(time.perf_counter() - started)

            async def send_all() -> None:
                for _ in range(burst):
                    await ws.send(message)

            started = time.perf_counter()
            sender = asyncio.create_task(send_all())
            for _ in range(burst):
                await ws.recv()
            await sender
            rate = burst / (time.perf_counter() - started)
    return latencies, rate


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def _run(quick: bool) -> None:
    rounds, burst = (200, 1000) if quick else (2000, 10000)
    relay_latencies, relay_rate = await _relay_numbers(rounds, burst)
    floor_latencies, floor_rate = await _floor_numbers(rounds, burst)
    size = len(encode_envelope(_envelopes(1)[0]))
    print(f"   {rounds} round trips, burst of {burst}, envelopes of {size / 1024:.1f} KiB")
    print("   round trip: agent send -> relay (queued, fsync) -> device handler -> ack written;")
    print("   floor: a bare websockets echo (send + reply, nothing stored)")
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        ours = _percentile(relay_latencies, fraction) * 1000
        floor = _percentile(floor_latencies, fraction) * 1000
        print(
            f"     round trip {label} {ours:8.2f} ms   floor {floor:8.2f} ms   "
            f"ratio {ours / floor:.1f}x"
        )
    print(f"     round trip mean {statistics.fmean(relay_latencies) * 1000:7.2f} ms")
    print(
        f"     throughput {relay_rate:9.0f} env/s   floor {floor_rate:9.0f} msg/s   "
        f"ratio {floor_rate / relay_rate:.1f}x"
    )


def main(quick: bool) -> None:
    asyncio.run(_run(quick))


if __name__ == "__main__":
    main(quick=False)
