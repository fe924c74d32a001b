"""The built-in relay: one hop's latency, and many sessions at once, against bare floors.

1. Round trip, through the built-in relay in this process (its SQLite queue in a temporary
   folder, fsync on every commit), with two relay clients, an agent and a device: agent →
   relay → device → ack, timed from the agent's send to the moment the device's ack has been
   written (the relay reads it from loopback right after; its deletion is batched and not
   waited for); and a burst through the same pair. Floor: a bare websockets echo server
   measured in the same run, one send + echoed reply per round trip (nothing stored), and a
   pipelined burst of messages of the same size.
2. Many sessions: the relay as its own process (``python -m bot relay``), holding idle
   sessions (1,000; 50 in quick mode) beside sender → receiver pairs (50; 5 in quick
   mode) on raw WebSocket connections. Envelopes of 2.5 KiB have the right shape but random
   ``ct`` and ``sig`` (the relay never opens them). Each receiver acks every delivery at
   once. Measured: the most envelopes a second the relay carries (every sender keeps a
   window of sends in flight), then delivery latency (a sender's ``send`` written → the
   ``deliver`` read by its receiver) at a steady 3,000 a second, and the CPU time per
   envelope from the first envelope to the last (sessions already open) of the relay's
   process and of its event loop (the main thread: what one loop can carry). Floor: a
   forwarding server in its own process with the same frames and connections that stores
   and checks nothing, measured the same way in the same run.

   The load generator shares the machine's cores with the server, so the pairs' sessions,
   once opened and authenticated by websockets, are driven on their sockets directly
   (:class:`_RawSession`): frames masked before timing starts, frames read by their
   header. The server, and the floor, get the same bytes as from any WebSocket client.

Envelopes are sealed (or made) before timing starts: crypto is measured by
``bench_envelope``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

try:
    from websockets.speedups import apply_mask
except ImportError:  # websockets built without its C extension
    from websockets.utils import apply_mask

from bot.protocol.encoding import b64u_encode
from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import raw_payload
from bot.relay.client import MemoryOutbox, RelayClient, authenticate, one_at_a_time
from bot.relay.frames import MAX_FRAME_BYTES, deliver_frame, encode_envelope, send_frame
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
        self.client = RelayClient(url, DEVICE, handler=one_at_a_time(self._on_envelope),
                                  outbox=MemoryOutbox())
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
            agent = RelayClient(relay.url, AGENT, handler=one_at_a_time(_ignore), outbox=outbox)
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


def _header() -> None:
    print(f"     {'':<34} {'relay':>12} {'floor':>12}   ratio")


def _row(
    label: str, ours: float, floor: float | None, shown: str, *, higher_is_better: bool = False
) -> None:
    """One line of a table: the figure, its floor measured in the same run, how far off."""
    if floor is None:
        print(f"     {label:<34} {shown.format(ours):>12}")
        return
    ratio = floor / ours if higher_is_better else ours / floor
    print(f"     {label:<34} {shown.format(ours):>12} {shown.format(floor):>12}   {ratio:.1f}x")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# --- 2. many sessions ----------------------------------------------------------------------

ENVELOPE_BYTES = 2560
SEND_WINDOW = 64
"""Sends a sender keeps in flight (unanswered) when measuring the most the relay carries."""
STEADY_RATE = 3000
"""Envelopes a second, over all pairs, when measuring delivery latency."""
FLOOD_RATE = 12_000
"""Envelopes sent per second of the run when measuring the most the relay carries (as
fast as it takes them)."""
ID_KEY = '"id":"'
GOAL_RATE = 10_000
GOAL_P99_MS = 10.0


def _fake_envelope(sender: str, recipient: str) -> str:
    """A ``send`` frame around an envelope of the right shape, ``ENVELOPE_BYTES`` long."""
    envelope = {
        "v": 1,
        "id": os.urandom(16).hex(),
        "from": sender,
        "to": recipient,
        "ts": int(time.time() * 1000),
        "ct": "",
        "sig": b64u_encode(os.urandom(64)),
    }
    room = ENVELOPE_BYTES - len(encode_envelope(envelope))
    envelope["ct"] = b64u_encode(os.urandom(room * 3 // 4))
    return send_frame(encode_envelope(envelope))


def _id_of(frame: str) -> str:
    """The first ``id`` in a frame: the envelope's in ``send``/``deliver``, the one answered
    in ``sent``/``error`` (read without parsing the JSON, as a load generator must)."""
    start = frame.index(ID_KEY) + len(ID_KEY)
    return frame[start : start + 32]


_ID_KEY_BYTES = ID_KEY.encode()


def _id_in(payload: bytes) -> str:
    """:func:`_id_of` for a frame's bytes."""
    start = payload.index(_ID_KEY_BYTES) + len(_ID_KEY_BYTES)
    return payload[start : start + 32].decode()


class _RawSession(asyncio.Protocol):
    """A pair's session, once open, driven on its socket with as little work as a client
    can do, so that the load generator (which shares the machine's two cores) costs less
    than the server it measures: text frames written already masked, frames read by their
    header alone. The server gets the same bytes as from any WebSocket client.

    The connection is opened and authenticated by websockets; its socket is then taken
    over (nothing is in flight: the server sends nothing until something is queued)."""

    def __init__(self, ws: ClientConnection, on_frame: Callable[[bytes], None]) -> None:
        transport = ws.transport
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._on_frame = on_frame
        self._buffer = bytearray()
        self._mask = os.urandom(4)
        transport.set_protocol(self)

    def frame(self, text: str, opcode: int = 0x1) -> bytes:
        """A masked client frame, ready to write."""
        data = text.encode()
        size = len(data)
        if size < 126:
            head = bytes((0x80 | opcode, 0x80 | size))
        elif size < 1 << 16:
            head = bytes((0x80 | opcode, 0x80 | 126)) + size.to_bytes(2, "big")
        else:
            head = bytes((0x80 | opcode, 0x80 | 127)) + size.to_bytes(8, "big")
        return head + self._mask + apply_mask(data, self._mask)

    def write(self, frame: bytes) -> None:
        self._transport.write(frame)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos, end = 0, len(buffer)
        while end - pos >= 2:
            opcode, size, head = buffer[pos] & 0x0F, buffer[pos + 1] & 0x7F, 2
            if size == 126:
                if end - pos < 4:
                    break
                size, head = int.from_bytes(buffer[pos + 2 : pos + 4], "big"), 4
            elif size == 127:
                if end - pos < 10:
                    break
                size, head = int.from_bytes(buffer[pos + 2 : pos + 10], "big"), 10
            if end - pos < head + size:
                break
            payload = bytes(buffer[pos + head : pos + head + size])
            pos += head + size
            if opcode == 0x1:
                self._on_frame(payload)
            elif opcode == 0x9:  # ping: pong
                self.write(self.frame(payload.decode("latin-1"), 0xA))
        del buffer[:pos]

    def close(self) -> None:
        self.write(self.frame("\x03\xe8", 0x8))  # close, code 1000
        self._transport.close()


@dataclass
class _Load:
    """What the pairs did: when each envelope was sent, and delivery latencies."""

    sent_at: dict[str, float] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    delivered: int = 0
    refused: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    target: int = 0

    def arrived(self, envelope_id: str) -> None:
        started = self.sent_at.pop(envelope_id, None)
        if started is not None:
            self.latencies.append(time.perf_counter() - started)
        self.delivered += 1
        if self.delivered >= self.target:
            self.done.set()


Connector = Callable[[Identity, str], Awaitable[ClientConnection]]
"""Opens a session for an identity in a role (``idle``, ``send`` or ``receive``)."""


async def _relay_connection(url: str, identity: Identity, role: str) -> ClientConnection:
    ws = await connect(url, max_size=MAX_FRAME_BYTES, compression=None, ping_interval=None)
    await authenticate(ws, identity)
    return ws


async def _floor_connection(url: str, identity: Identity, role: str) -> ClientConnection:
    return await connect(
        f"{url}/{role}/{identity.id}",
        max_size=MAX_FRAME_BYTES,
        compression=None,
        ping_interval=None,
    )


def _receiver(ws: ClientConnection, load: _Load) -> _RawSession:
    """A receiver: acks every delivery at once."""

    def on_frame(payload: bytes) -> None:
        envelope_id = _id_in(payload)
        load.arrived(envelope_id)
        session.write(session.frame('{"type":"ack","id":"' + envelope_id + '"}'))

    session = _RawSession(ws, on_frame)
    return session


def _sender(ws: ClientConnection, load: _Load, window: asyncio.Semaphore) -> _RawSession:
    """A sender: each answer opens its window by one."""

    def on_frame(payload: bytes) -> None:
        if payload.startswith(b'{"type":"delivered"'):
            return  # the relay's receipt for an acknowledged envelope: no answer to a send
        if b'"sent"' not in payload:
            load.refused += 1
        window.release()

    return _RawSession(ws, on_frame)


@dataclass(frozen=True)
class _Cpu:
    """CPU seconds of a server process: in all, and of its event loop's thread alone."""

    process: float
    loop: float

    def __sub__(self, other: _Cpu) -> _Cpu:
        return _Cpu(self.process - other.process, self.loop - other.loop)


@dataclass(frozen=True)
class _Figures:
    rate: float
    """Envelopes a second carried at saturation."""
    latencies: list[float]
    """Delivery latencies at the steady rate, in seconds."""
    refused: int
    carried: int
    """Envelopes carried in all (every session open)."""
    cpu: _Cpu
    """The server's CPU time while it carried them."""


@dataclass
class _Pair:
    sender: Identity
    receiver: Identity
    send_ws: ClientConnection
    receive_ws: ClientConnection


async def _pairs_run(
    connection: Connector,
    cpu: Callable[[], _Cpu],
    pairs: int,
    idle: int,
    seconds: float,
    steady_rate: int = STEADY_RATE,
) -> _Figures:
    """Open the sessions, then measure envelopes a second at saturation and latencies at
    the steady rate, and the server's CPU time from the first envelope to the last."""
    idle_sessions = [await connection(Identity.generate("idle"), "idle") for _ in range(idle)]
    the_pairs = []
    for _ in range(pairs):
        sender, receiver = Identity.generate("s"), Identity.generate("r")
        the_pairs.append(
            _Pair(
                sender,
                receiver,
                await connection(sender, "send"),
                await connection(receiver, "receive"),
            )
        )
    load = _Load()
    windows = [asyncio.Semaphore(SEND_WINDOW) for _ in the_pairs]
    receivers = [_receiver(p.receive_ws, load) for p in the_pairs]
    senders = [_sender(p.send_ws, load, w) for p, w in zip(the_pairs, windows, strict=True)]

    def wire(sender: _RawSession, frames: list[str]) -> list[tuple[str, bytes]]:
        return [(_id_of(frame), sender.frame(frame)) for frame in frames]

    async def flood(
        sender: _RawSession, window: asyncio.Semaphore, frames: list[tuple[str, bytes]]
    ) -> None:
        for _, frame in frames:
            await window.acquire()
            sender.write(frame)

    # Warm-up: every receiver hears from its sender once (a contact from then on).
    cpu_before = cpu()
    load.target = pairs
    await asyncio.gather(
        *(
            flood(r, w, wire(r, [_fake_envelope(p.sender.id, p.receiver.id)]))
            for p, r, w in zip(the_pairs, senders, windows, strict=True)
        )
    )
    await asyncio.wait_for(load.done.wait(), 60)

    # Saturation: every sender keeps SEND_WINDOW sends in flight.
    per_pair = max(int(FLOOD_RATE * seconds / pairs), SEND_WINDOW)
    carried = pairs * (1 + per_pair)
    frames = [
        wire(r, [_fake_envelope(p.sender.id, p.receiver.id) for _ in range(per_pair)])
        for p, r in zip(the_pairs, senders, strict=True)
    ]
    load.delivered, load.done = 0, asyncio.Event()
    load.target = per_pair * pairs
    started = time.perf_counter()
    await asyncio.gather(
        *(flood(r, w, f) for r, w, f in zip(senders, windows, frames, strict=True))
    )
    await asyncio.wait_for(load.done.wait(), 120)
    rate = load.target / (time.perf_counter() - started)

    # Steady rate: each sender sends on a fixed schedule; latency is send → deliver.
    per_pair = max(int(steady_rate * seconds / pairs), 1)
    carried += pairs * per_pair
    gap = pairs / steady_rate
    frames = [
        wire(r, [_fake_envelope(p.sender.id, p.receiver.id) for _ in range(per_pair)])
        for p, r in zip(the_pairs, senders, strict=True)
    ]
    load.delivered, load.done, load.latencies = 0, asyncio.Event(), []
    load.target = per_pair * pairs

    async def paced(
        sender: _RawSession,
        window: asyncio.Semaphore,
        frames: list[tuple[str, bytes]],
        offset: float,
    ) -> None:
        begin = time.perf_counter() + offset
        for n, (envelope_id, frame) in enumerate(frames):
            delay = begin + n * gap - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await window.acquire()
            load.sent_at[envelope_id] = time.perf_counter()
            sender.write(frame)

    await asyncio.gather(
        *(
            paced(r, w, f, gap * n / pairs)
            for n, (r, w, f) in enumerate(zip(senders, windows, frames, strict=True))
        )
    )
    await asyncio.wait_for(load.done.wait(), 60)
    used = cpu() - cpu_before
    for session in senders + receivers:
        session.close()
    for ws in idle_sessions:
        await ws.close()
    return _Figures(rate, load.latencies, load.refused, carried, used)


@contextlib.asynccontextmanager
async def _process(*args: str) -> AsyncIterator[tuple[str, int]]:
    """A child process that prints ``listening on ws://…``; its URL and pid."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    url = None
    while url is None:
        line = (await process.stderr.readline()).decode()
        if not line:
            raise RuntimeError(f"{args} exited")
        if found := re.search(r"listening on (ws://\S+)", line):
            url = found.group(1)
    drain = asyncio.create_task(process.stderr.read())
    try:
        yield url, process.pid
    finally:
        process.terminate()
        await process.wait()
        await drain


def _cpu(pid: int) -> _Cpu:
    """CPU time (user and system) of process ``pid``, and of its main thread (which runs
    the event loop)."""

    def seconds(stat: Path) -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    return _Cpu(seconds(Path(f"/proc/{pid}/stat")), seconds(Path(f"/proc/{pid}/task/{pid}/stat")))


async def _many_sessions(quick: bool) -> None:
    pairs, idle, seconds = (5, 50, 0.1) if quick else (50, 1000, 5.0)
    with tempfile.TemporaryDirectory() as folder:
        relay_args = (
            "-m",
            "bot",
            "relay",
            "--port",
            "0",
            "--data",
            folder,
            "--idle-timeout",
            "0",
            "--max-unauthenticated-per-address",
            str(2 * (idle + 2 * pairs)),
            "--max-authenticated-per-address",
            str(2 * (idle + 2 * pairs)),
        )
        async with _process(*relay_args) as (url, pid):
            ours = await _pairs_run(
                lambda identity, role: _relay_connection(url, identity, role),
                lambda: _cpu(pid),
                pairs,
                idle,
                seconds,
            )
    async with _process(__file__, "--floor-server") as (url, pid):
        floor = await _pairs_run(
            lambda identity, role: _floor_connection(url, identity, role),
            lambda: _cpu(pid),
            pairs,
            idle,
            seconds,
        )
    print(
        f"   {pairs} sender -> receiver pairs beside {idle} idle sessions, envelopes of"
        f" {ENVELOPE_BYTES / 1024:.1f} KiB; floor: a forwarding server (nothing stored)"
    )
    _header()
    _row("most carried (env/s)", ours.rate, floor.rate, "{:.0f}", higher_is_better=True)
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        value = _percentile(ours.latencies, fraction) * 1000
        bound = _percentile(floor.latencies, fraction) * 1000
        _row(f"delivery {label} at {STEADY_RATE}/s (ms)", value, bound, "{:.2f}")
    for label, ours_cpu, floor_cpu in (
        ("process", ours.cpu.process, floor.cpu.process),
        ("event loop", ours.cpu.loop, floor.cpu.loop),
    ):
        per_envelope = ours_cpu / ours.carried * 1e6
        floor_per_envelope = floor_cpu / floor.carried * 1e6
        _row(f"{label} CPU per envelope (us)", per_envelope, floor_per_envelope, "{:.1f}")
        _row(
            f"  so one {'core' if label == 'process' else 'loop'} carries (env/s)",
            1e6 / per_envelope,
            1e6 / floor_per_envelope,
            "{:.0f}",
            higher_is_better=True,
        )
    print("     (CPU from the first envelope to the last; the event loop is the main thread)")
    print(
        f"     goals: {GOAL_RATE:,} env/s in one process, delivery p99 < {GOAL_P99_MS:.0f} ms"
        f" at {STEADY_RATE:,}/s"
    )
    if ours.refused:
        print(f"     ({ours.refused} sends refused)")


async def _forward(ws: ServerConnection, receivers: dict[str, ServerConnection]) -> None:
    """The floor's handler: ``/receive/<id>`` waits for deliveries, ``/send/<id>`` forwards
    each frame to the receiver named in the path's pair and answers ``sent``."""
    assert ws.request is not None
    _, role, who = ws.request.path.rsplit("/", 2)
    if role != "send":
        receivers[who] = ws
        async for _ in ws:  # acks: read and dropped
            pass
        return
    async for frame in ws:
        text = str(frame)
        to = text.index('"to":"') + 6
        await receivers[text[to : to + 32]].send(text)
        await ws.send('{"type":"sent","id":"' + _id_of(text) + '"}')


async def _serve_floor() -> None:
    receivers: dict[str, ServerConnection] = {}
    async with serve(
        lambda ws: _forward(ws, receivers),
        "127.0.0.1",
        0,
        max_size=MAX_FRAME_BYTES,
        compression=None,
        ping_interval=None,
    ) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"floor listening on ws://127.0.0.1:{port}", file=sys.stderr, flush=True)
        await asyncio.Future()


async def _run(quick: bool) -> None:
    rounds, burst = (100, 500) if quick else (2000, 10000)
    relay_latencies, relay_rate = await _relay_numbers(rounds, burst)
    floor_latencies, floor_rate = await _floor_numbers(rounds, burst)
    size = len(encode_envelope(_envelopes(1)[0]))
    print(f"   {rounds} round trips, burst of {burst}, envelopes of {size / 1024:.1f} KiB")
    print("   round trip: agent send -> relay (queued, fsync) -> device handler -> ack written;")
    print("   floor: a bare websockets echo (send + reply, nothing stored)")
    _header()
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        ours = _percentile(relay_latencies, fraction) * 1000
        floor = _percentile(floor_latencies, fraction) * 1000
        _row(f"round trip {label} (ms)", ours, floor, "{:.2f}")
    _row("round trip mean (ms)", statistics.fmean(relay_latencies) * 1000, None, "{:.2f}")
    _row("throughput (env/s)", relay_rate, floor_rate, "{:.0f}", higher_is_better=True)
    await _many_sessions(quick)


def main(quick: bool) -> None:
    asyncio.run(_run(quick))


if __name__ == "__main__":
    if sys.argv[1:] == ["--floor-server"]:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve_floor())
    else:
        main(quick="--quick" in sys.argv[1:])
