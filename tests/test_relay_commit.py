"""The relay's group commit, seen in its SQLite file: acknowledgements from several
sessions share one transaction, a committed deletion is never undone by a crash, and a
crash before the commit loses nothing (the envelopes come again).

The relay runs as its own process (``python -m bot relay``) so that it can be killed with
SIGKILL. To hold acknowledgements in the relay's memory while they arrive, the test takes
the queue file's write lock itself: the relay's writer waits on it (for up to SQLite's
busy timeout, 5 s) with a transaction already taken, and what arrives meanwhile waits for
the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from conftest import eventually
from test_relay_client import RelayProcess
from test_relay_server import TIMEOUT, envelope, recv, send, session
from websockets.asyncio.client import ClientConnection

from bot.protocol.identity import Identity
from bot.relay.queue import DB_NAME

WAL_HEADER_BYTES = 32
WAL_FRAME_HEADER_BYTES = 24


@contextlib.asynccontextmanager
async def relay_process(data: Path) -> AsyncIterator[tuple[str, RelayProcess]]:
    """The relay as a child process on a free port: its URL and the process (killed at
    the end if it still runs)."""
    relay = await RelayProcess.start(data)
    try:
        yield relay.url, relay
    finally:
        await relay.kill()


@contextlib.contextmanager
def write_lock(data: Path) -> Iterator[None]:
    """Hold the queue file's write lock: the relay's next transaction waits for it."""
    connection = sqlite3.connect(data / DB_NAME, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def queued_ids(data: Path) -> set[str]:
    """The ids of the envelopes waiting in the queue, as committed now."""
    with contextlib.closing(sqlite3.connect(data / DB_NAME)) as connection:
        return {row[0] for row in connection.execute("SELECT envelope_id FROM queue")}


def queued_after_each_commit(data: Path, scratch: Path) -> list[set[str]]:
    """The ids waiting after each transaction in the queue's write-ahead log, oldest
    first: the log is cut after each commit and replayed by SQLite on a copy of the files.
    (Valid while nothing was checkpointed: the tests write far less than a checkpoint.)"""
    log = (data / f"{DB_NAME}-wal").read_bytes()
    page_bytes = int.from_bytes(log[8:12], "big")
    salts = log[16:24]
    frame_bytes = WAL_FRAME_HEADER_BYTES + page_bytes
    states: list[set[str]] = []
    for end in range(WAL_HEADER_BYTES + frame_bytes, len(log) + 1, frame_bytes):
        header = log[end - frame_bytes : end - page_bytes]
        if header[8:16] != salts:
            break  # left over from an earlier generation of the log
        if int.from_bytes(header[4:8], "big") == 0:
            continue  # not the last frame of a transaction
        copy = scratch / f"after-{len(states)}"
        copy.mkdir()
        shutil.copy(data / DB_NAME, copy / DB_NAME)
        (copy / f"{DB_NAME}-wal").write_bytes(log[:end])
        states.append(queued_ids(copy))
    return states


async def read_so_far(ws: ClientConnection) -> None:
    """Return once the relay has handled every frame this session sent before: a bad
    frame is refused at once, in order, with nothing else pending on the session."""
    await ws.send("{}")
    assert (await recv(ws))["code"] == "bad_frame"


async def deliveries(
    url: str, identity: Identity, count: int
) -> tuple[ClientConnection, list[str]]:
    """A session for ``identity`` and the ids of its first ``count`` deliveries."""
    ws = await session(url, identity)
    ids = []
    for _ in range(count):
        frame = await recv(ws)
        assert frame["type"] == "deliver"
        envelope_json = frame["envelope"]
        assert isinstance(envelope_json, dict)
        ids.append(str(envelope_json["id"]))
    return ws, ids


async def queue_two(url: str, sender: Identity, bob: Identity, carol: Identity) -> list[str]:
    """Queue one envelope for bob and one for carol; their ids, once both are ``sent``."""
    ws = await session(url, sender)
    ids = []
    for recipient in (bob, carol):
        env = envelope(sender, recipient)
        await send(ws, {"type": "send", "envelope": env})
        assert await recv(ws) == {"type": "sent", "id": env["id"]}
        ids.append(str(env["id"]))
    await ws.close()
    return ids


async def ack_while_the_writer_waits(url: str, acks: list[tuple[ClientConnection, str]]) -> None:
    """Make the relay take a transaction that waits on the write lock (a new session's
    first connection), then send ``acks`` and wait until the relay has read them all."""
    newcomer = await session(url, Identity.generate("dave"))  # its ready comes at once
    for ws, envelope_id in acks:
        await send(ws, {"type": "ack", "id": envelope_id})
    for ws, _ in acks:
        await read_so_far(ws)
    await newcomer.close()


@pytest.fixture
def carol() -> Identity:
    return Identity.generate("carol")


async def test_acks_from_two_sessions_share_one_transaction(
    tmp_path: Path, alice: Identity, bob: Identity, carol: Identity
) -> None:
    data = tmp_path / "relay"
    async with relay_process(data) as (url, process):
        for_bob, for_carol = await queue_two(url, alice, bob, carol)
        b, [delivered_b] = await deliveries(url, bob, 1)
        c, [delivered_c] = await deliveries(url, carol, 1)
        assert (delivered_b, delivered_c) == (for_bob, for_carol)
        with write_lock(data):
            await ack_while_the_writer_waits(url, [(b, for_bob), (c, for_carol)])
            assert queued_ids(data) == {for_bob, for_carol}
        await eventually(lambda: not queued_ids(data))
        # Every committed state of the queue from the moment both were queued: the two
        # deletions appear in the same transaction.
        states = queued_after_each_commit(data, tmp_path)
        both = {for_bob, for_carol}
        since_both = states[next(n for n, ids in enumerate(states) if both <= ids) :]
        assert [ids & both for ids in since_both if len(ids & both) == 1] == []
        assert not since_both[-1] & both
        await b.close()
        await c.close()
        await process.kill()
    # Nothing acknowledged comes back after a crash and restart: the first delivery is a
    # marker sent afterwards.
    async with relay_process(data) as (url, _):
        markers = await queue_two(url, alice, bob, carol)
        _, [first_b] = await deliveries(url, bob, 1)
        _, [first_c] = await deliveries(url, carol, 1)
        assert [first_b, first_c] == markers


async def test_a_crash_before_the_commit_delivers_again(
    tmp_path: Path, alice: Identity, bob: Identity, carol: Identity
) -> None:
    data = tmp_path / "relay"
    async with relay_process(data) as (url, process):
        for_bob, for_carol = await queue_two(url, alice, bob, carol)
        b, _ = await deliveries(url, bob, 1)
        c, _ = await deliveries(url, carol, 1)
        with write_lock(data):
            await ack_while_the_writer_waits(url, [(b, for_bob), (c, for_carol)])
            await process.kill()  # the acknowledgements were read, never committed
        async with asyncio.timeout(TIMEOUT):
            await b.wait_closed()
    assert queued_ids(data) == {for_bob, for_carol}
    async with relay_process(data) as (url, _):
        _, [again_b] = await deliveries(url, bob, 1)
        _, [again_c] = await deliveries(url, carol, 1)
        assert [again_b, again_c] == [for_bob, for_carol]


async def test_an_envelope_answered_sent_survives_a_crash(
    tmp_path: Path, alice: Identity, bob: Identity, carol: Identity
) -> None:
    data = tmp_path / "relay"
    async with relay_process(data) as (url, process):
        sent = await queue_two(url, alice, bob, carol)
        await process.kill()  # right after the last ``sent``
    async with relay_process(data) as (url, _):
        _, [to_bob] = await deliveries(url, bob, 1)
        _, [to_carol] = await deliveries(url, carol, 1)
        assert [to_bob, to_carol] == sent
