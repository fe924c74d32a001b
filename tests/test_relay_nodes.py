"""Several relay nodes on one PostgreSQL queue: envelopes cross nodes at once (NOTIFY) or
at the next rescan when no notification came, a device has one session across nodes,
the §4 receipt crosses nodes, and a node killed in the middle of a burst loses nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import psycopg
from test_relay_client import RelayProcess
from test_relay_server import closed_code, envelope, recv, send, session
from websockets.asyncio.client import ClientConnection

from bot.protocol.identity import Identity
from bot.relay.frames import encode_envelope
from bot.relay.limits import QueueLimits
from bot.relay.pgqueue import RECOUNT_BEFORE_REFUSING_S, PostgresQueue
from bot.relay.queue import Acknowledged, Batch, Incoming, PutResult
from bot.relay.server import RelayServer
from bot.testing.clock import ShiftedClock

PROMPT_S = 1.5
"""Well below the rescan interval of the nodes that must be woken by a notification."""


@asynccontextmanager
async def nodes(
    tmp_path: Path, url: str, *, rescan_s: float = 60.0
) -> AsyncIterator[tuple[RelayServer, RelayServer]]:
    """Two relay nodes on the queue at ``url``."""
    async with (
        RelayServer(tmp_path / "a", store=url, rescan_s=rescan_s) as a,
        RelayServer(tmp_path / "b", store=url, rescan_s=rescan_s) as b,
    ):
        yield a, b


async def listening(*servers: RelayServer) -> None:
    """Wait until each node listens to the others (as it does a moment after starting)."""
    for server in servers:
        assert server._link is not None
        async with asyncio.timeout(5):
            await server._link.listening.wait()


async def test_an_envelope_sent_through_one_node_reaches_a_device_on_another_at_once(
    tmp_path: Path, postgres_url: str, alice: Identity, bob: Identity
) -> None:
    async with nodes(tmp_path, postgres_url) as (node_a, node_b):
        await listening(node_a, node_b)
        a = await session(node_a.url, alice)
        b = await session(node_b.url, bob)
        env = envelope(alice, bob)
        started = time.monotonic()
        await send(a, {"type": "send", "envelope": env})
        assert await recv(a) == {"type": "sent", "id": env["id"]}
        async with asyncio.timeout(PROMPT_S):
            assert json.loads(await b.recv()) == {"type": "deliver", "envelope": env}
        assert time.monotonic() - started < PROMPT_S
        # The receipt crosses nodes too: the ack reaches node B, the sender is on node A.
        await send(b, {"type": "ack", "id": env["id"]})
        async with asyncio.timeout(PROMPT_S):
            assert json.loads(await a.recv()) == {"type": "delivered", "id": env["id"]}
        await a.close()
        await b.close()
    with psycopg.connect(postgres_url) as db:
        assert db.execute("SELECT count(*) FROM relay_mailbox").fetchone() == (0,)


async def test_without_a_notification_the_rescan_delivers(
    tmp_path: Path, postgres_url: str, alice: Identity, bob: Identity
) -> None:
    async with nodes(tmp_path, postgres_url, rescan_s=0.3) as (node_a, _):
        b = await session(node_a.url, bob)
        await asyncio.sleep(0.1)  # its session is recorded
        # Stored by a node whose NOTIFY never arrived: a row and nothing else.
        env = envelope(alice, bob)
        with psycopg.connect(postgres_url) as db:
            db.execute(
                "INSERT INTO relay_mailbox (recipient, sender, address, envelope_id, size,"
                " queued_ms, body) VALUES (%s, %s, '', %s, 1, 0, %s)",
                (bob.id, alice.id, env["id"], encode_envelope(env)),
            )
        async with asyncio.timeout(3):
            assert json.loads(await b.recv()) == {"type": "deliver", "envelope": env}
        await b.close()


async def test_a_device_connecting_to_another_node_ends_its_session_on_the_first(
    tmp_path: Path, postgres_url: str, alice: Identity, bob: Identity
) -> None:
    async with nodes(tmp_path, postgres_url) as (node_a, node_b):
        await listening(node_a, node_b)
        a = await session(node_a.url, alice)
        first = await session(node_a.url, bob)
        await asyncio.sleep(0.3)  # its own notice came back to node A
        second = await session(node_b.url, bob)
        assert await closed_code(first) == 4409
        env = envelope(alice, bob)
        await send(a, {"type": "send", "envelope": env})
        assert (await recv(a))["type"] == "sent"
        assert (await recv(second))["envelope"] == env
        await a.close()
        await second.close()


async def receive_all(
    ws: ClientConnection, ids: set[str], counts: Counter[str], url: str
) -> None:
    """Acknowledge every delivery, counting them by id, until every id in ``ids`` came and
    nothing waits any more (an envelope sent again after its first copy was acknowledged
    is queued again: at-least-once)."""
    with psycopg.connect(url, autocommit=True) as db:
        while True:
            try:
                async with asyncio.timeout(0.5):
                    frame = json.loads(await ws.recv())
            except TimeoutError:
                if ids <= set(counts) and db.execute(
                    "SELECT count(*) FROM relay_mailbox"
                ).fetchone() == (0,):
                    return
                continue
            if frame["type"] == "deliver":
                envelope_id = frame["envelope"]["id"]
                counts[envelope_id] += 1
                await send(ws, {"type": "ack", "id": envelope_id})


@asynccontextmanager
async def node_processes(tmp_path: Path, url: str) -> AsyncIterator[list[RelayProcess]]:
    """Two relay nodes on the queue at ``url``, each in a process of its own."""
    nodes = [
        await RelayProcess.start(tmp_path / name, 0, "--store", url) for name in ("a", "b")
    ]
    try:
        yield nodes
    finally:
        for node in nodes:
            await node.kill()


async def sent_all(url: str, sender: Identity, envs: list[dict[str, object]]) -> ClientConnection:
    """A session of ``sender`` through which every envelope of ``envs`` was sent."""
    ws = await session(url, sender)
    for env in envs:
        await send(ws, {"type": "send", "envelope": env})
    return ws


async def test_a_node_killed_with_envelopes_in_flight_loses_nothing(
    tmp_path: Path, postgres_url: str, alice: Identity, bob: Identity
) -> None:
    envs = [envelope(alice, bob, n) for n in range(400)]
    counts: Counter[str] = Counter()
    async with node_processes(tmp_path, postgres_url) as (node_a, node_b):
        b = await session(node_b.url, bob)
        ids = {str(env["id"]) for env in envs}
        receiving = asyncio.create_task(receive_all(b, ids, counts, postgres_url))
        a = await sent_all(node_a.url, alice, envs)
        confirmed: set[str] = set()
        while len(confirmed) < 100:
            frame = await recv(a)
            if frame["type"] == "sent":
                confirmed.add(str(frame["id"]))
        await node_a.kill()  # SIGKILL
        # What was never confirmed is sent again, through the node still up.
        resent = [env for env in envs if env["id"] not in confirmed]
        assert resent, "the node was killed after the burst"
        await sent_all(node_b.url, alice, resent)
        async with asyncio.timeout(30):
            await receiving
        twice = {envelope_id for envelope_id, n in counts.items() if n > 1}
        assert twice <= {str(env["id"]) for env in resent}
        assert max(counts.values()) <= 2
        await b.close()  # the senders' sessions, whose answers are unread, end with the nodes


async def test_the_recipients_node_killed_mid_delivery_loses_nothing(
    tmp_path: Path, postgres_url: str, alice: Identity, bob: Identity
) -> None:
    envs = [envelope(alice, bob, n) for n in range(400)]
    counts: Counter[str] = Counter()
    async with node_processes(tmp_path, postgres_url) as (node_a, node_b):
        b = await session(node_b.url, bob)
        await sent_all(node_a.url, alice, envs)
        async with asyncio.timeout(30):
            while len(counts) < 100:
                frame = json.loads(await b.recv())
                if frame["type"] == "deliver":
                    counts[frame["envelope"]["id"]] += 1  # never acknowledged
        await node_b.kill()  # SIGKILL, with deliveries unacknowledged
        # The device comes back through the other node and gets everything.
        again = await session(node_a.url, bob)
        ids = {str(env["id"]) for env in envs}
        async with asyncio.timeout(30):
            await receive_all(again, ids, counts, postgres_url)
        assert max(counts.values()) <= 2  # at most the unacknowledged, once more
        await again.close()


async def test_a_database_away_is_a_fault_to_wait_out(
    tmp_path: Path, postgres_url: str, alice: Identity, bob: Identity
) -> None:
    server_url, name = postgres_url.rsplit("/", 1)
    async with (
        RelayServer(tmp_path / "a", store=postgres_url) as relay,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{relay.port}") as http,
    ):
        a = await session(relay.url, alice)
        b = await session(relay.url, bob)
        with psycopg.connect(f"{server_url}/postgres", autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
            away = envelope(alice, bob, 1)
            await send(a, {"type": "send", "envelope": away})
            answer = await recv(a)
            assert answer["type"] == "error" and answer["code"] == "unavailable"
            health = await http.get("/health")
            assert health.status_code == 503
            assert health.text.startswith("store: failing since ")
            assert "\n" not in health.text.rstrip("\n")
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
        # Back: the sender sends again, and the envelope arrives.
        await send(a, {"type": "send", "envelope": away})
        assert await recv(a) == {"type": "sent", "id": away["id"]}
        async with asyncio.timeout(10):
            assert json.loads(await b.recv()) == {"type": "deliver", "envelope": away}
        await a.close()
        await b.close()


def test_limits_count_what_other_nodes_delivered_and_saw(postgres_url: str) -> None:
    clock = ShiftedClock()
    limits = QueueLimits(recipient_count=2, unseen_count=1)
    node_a = PostgresQueue.open(postgres_url, limits=limits, clock=clock)
    node_b = PostgresQueue.open(postgres_url, limits=limits, clock=clock)
    bob, carol = "b" * 32, "c" * 32

    def put(n: int) -> PutResult:
        batch = Batch(puts=[Incoming(bob, carol, f"{n:032x}", "x")])
        return node_a.apply(batch, now_ms=1).results[0]

    try:
        assert put(1) is PutResult.QUEUED
        clock.advance(RECOUNT_BEFORE_REFUSING_S)
        assert put(2) is PutResult.UNSEEN_FULL  # bob has never connected
        node_b.apply(Batch(connected=[bob]), now_ms=1)  # ... then connects to node B
        assert put(2) is PutResult.UNSEEN_FULL  # counted a moment ago: the refusal stands
        clock.advance(RECOUNT_BEFORE_REFUSING_S)
        assert put(2) is PutResult.QUEUED
        clock.advance(RECOUNT_BEFORE_REFUSING_S)
        assert put(3) is PutResult.FULL
        acks = [Acknowledged(bob, f"{n:032x}") for n in (1, 2)]
        assert node_b.apply(Batch(acks=acks), now_ms=1).removed == 2
        clock.advance(RECOUNT_BEFORE_REFUSING_S)
        assert put(3) is PutResult.QUEUED
    finally:
        node_a.close()
        node_b.close()
