"""The relay client against the real relay over loopback: nothing lost, nothing applied
twice, whatever dies in between."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from conftest import eventually
from websockets.asyncio.server import ServerConnection, serve

from bot.bridge import Bridge
from bot.clock import SYSTEM_CLOCK
from bot.config import Config
from bot.errors import RelayError
from bot.protocol.envelope import MAX_ENVELOPE_BYTES, seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import raw_payload
from bot.relay.client import (
    MemoryOutbox,
    Outbox,
    RelayClient,
    one_at_a_time,
)
from bot.relay.frames import challenge_frame, deliver_frame, encode_envelope, ready_frame
from bot.relay.incoming import MAX_BATCH_CIPHERTEXT, MAX_HANDLER_ATTEMPTS
from bot.relay.server import RelayServer
from bot.store import Store

TIMEOUT = 10.0


def envelope(sender: Identity, recipient: Identity, n: int = 0) -> dict[str, object]:
    payload = raw_payload("inbox_request", {"since_rev": n})
    sealed = seal(payload, sender=sender, recipient=recipient.card, ts_ms=int(time.time() * 1000))
    return sealed.to_json()


class Peer:
    """One identity with a relay client, an in-memory outbox and a recording handler."""

    def __init__(
        self,
        url: str,
        identity: Identity,
        *,
        handler: Callable[[dict[str, object]], Awaitable[None]] | None = None,
        on_ready: Callable[[], Awaitable[None]] | None = None,
        open_timeout: float = 2.0,
        outbox: Outbox | None = None,
        backoff_initial: float = 0.02,
        backoff_max: float = 0.2,
        ping_interval: float = 20.0,
        ping_timeout: float = 20.0,
    ) -> None:
        self.url = url
        self.identity = identity
        self.outbox = outbox if isinstance(outbox, MemoryOutbox) else MemoryOutbox()
        self.received: list[dict[str, object]] = []
        self.delivered: list[str] = []
        self.client = RelayClient(
            url,
            identity,
            handler=one_at_a_time(handler or self.record),
            outbox=self.outbox if outbox is None else outbox,
            on_ready=on_ready,
            on_delivered=self.delivered.append,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            open_timeout=open_timeout,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
        )
        self._task: asyncio.Task[None] | None = None

    async def record(self, envelope: dict[str, object]) -> None:
        self.received.append(envelope)

    def start(self) -> None:
        self._task = asyncio.create_task(self.client.run())

    async def stop(self) -> None:
        await self.client.stop()
        assert self._task is not None
        async with asyncio.timeout(TIMEOUT):
            await self._task  # run() returned: it never raised

    def send(self, recipient: Identity, n: int = 0) -> dict[str, object]:
        env = envelope(self.identity, recipient, n)
        self.outbox.add(self.url, env)
        self.client.wake()
        return env

    async def send_stored(self, recipient: Identity, count: int) -> list[dict[str, object]]:
        """``count`` envelopes to ``recipient``, once the relay holds every one of them."""
        sent = [self.send(recipient, n) for n in range(count)]
        await eventually(lambda: len(self.outbox) == 0)
        return sent


class AppliedLog:
    """What a recipient durably applied: a replay set and an applied table in one SQLite
    file, written in one transaction per envelope (the model of "processed")."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS applied (envelope_id TEXT PRIMARY KEY, n INTEGER)"
        )
        self.duplicates = 0

    def apply(self, envelope: dict[str, object]) -> bool:
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            seen = self._db.execute(
                "SELECT 1 FROM applied WHERE envelope_id = ?", (envelope["id"],)
            ).fetchone()
            if seen:
                self.duplicates += 1
                return False
            self._db.execute("INSERT INTO applied VALUES (?, ?)", (envelope["id"], self.count()))
        return True

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM applied").fetchone()[0])

    def ids(self) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT envelope_id FROM applied")}

    def close(self) -> None:
        self._db.close()


class RelayProcess:
    """``skald-telegram relay`` in a child process, so it can really be killed."""

    def __init__(self, process: asyncio.subprocess.Process, url: str) -> None:
        self.process = process
        self.url = url
        self._drain = asyncio.create_task(self._discard_output())

    @classmethod
    async def start(cls, data: Path, port: int = 0, *options: str) -> RelayProcess:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bot", "relay", "--port", str(port), "--data", str(data)),
            *options,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stderr is not None
        async with asyncio.timeout(30):
            while True:
                line = (await process.stderr.readline()).decode()
                assert line, "the relay exited"
                if match := re.search(r"relay listening on (ws://\S+)", line):
                    return cls(process, match.group(1))

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    async def _discard_output(self) -> None:
        assert self.process.stderr is not None
        while await self.process.stderr.readline():
            pass

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await self.process.wait()
        await self._drain


async def test_delivery_both_ways(relay: RelayServer, alice: Identity, bob: Identity) -> None:
    a, b = Peer(relay.url, alice), Peer(relay.url, bob)
    a.start()
    b.start()
    to_bob = [a.send(bob, n) for n in range(5)]
    to_alice = b.send(alice)
    await eventually(lambda: len(b.received) == 5 and len(a.received) == 1)
    assert b.received == to_bob
    assert a.received == [to_alice]
    await eventually(lambda: len(a.outbox) == 0 and len(b.outbox) == 0)
    assert a.client.connected
    status = a.client.status()
    assert (status.url, status.connected, status.reconnects) == (relay.url, True, 0)
    await a.stop()
    await b.stop()
    assert not a.client.connected


async def test_the_sender_hears_when_the_recipient_acknowledged(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a, b = Peer(relay.url, alice), Peer(relay.url, bob)
    a.start()
    to_bob = [a.send(bob, n) for n in range(3)]
    await eventually(lambda: len(a.outbox) == 0)
    b.start()  # bob acknowledges while alice is online: she hears of each
    await eventually(lambda: len(a.delivered) == 3)
    assert sorted(a.delivered) == sorted(str(env["id"]) for env in to_bob)
    await a.stop()
    to_alice = b.send(alice)  # bob is gone when she acknowledges it: he is never told
    await eventually(lambda: len(b.outbox) == 0)
    await b.stop()
    a.start()
    await eventually(lambda: a.received == [to_alice])
    await asyncio.sleep(0.2)  # her ack is committed
    b.start()
    await asyncio.sleep(0.3)
    assert b.delivered == [] and b.client.connected
    await a.stop()
    await b.stop()


async def test_queued_for_an_offline_client(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = Peer(relay.url, alice)
    a.start()
    sent = await a.send_stored(bob, 3)
    await a.stop()
    b = Peer(relay.url, bob)
    b.start()
    await eventually(lambda: len(b.received) == 3)
    assert b.received == sent
    await b.stop()


async def test_the_durable_outbox_survives_a_restart(
    relay: RelayServer, alice: Identity, bob: Identity, tmp_path: Path
) -> None:
    store = Store.open(tmp_path / "bot.sqlite3")
    written = [envelope(alice, bob, n) for n in range(3)]
    for n, env in enumerate(written):
        store.outbox.add(relay.url, env, now_ms=n)
    store.close()  # the process ends before anything reached the relay
    reopened = Store.open(tmp_path / "bot.sqlite3")
    bridge = Bridge(identity=alice, store=reopened, config=Config(), clock=SYSTEM_CLOCK)
    a, b = Peer(relay.url, alice, outbox=bridge), Peer(relay.url, bob)
    a.start()
    b.start()
    await eventually(lambda: len(b.received) == 3 and reopened.outbox.depth() == 0)
    assert b.received == written
    await a.stop()
    await b.stop()
    reopened.close()


async def batches_handed_over(
    url: str, identity: Identity, held: list[dict[str, object]], *, busy: bool
) -> list[int]:
    """How a client of ``identity`` is handed the envelopes the relay holds for it
    (``held``, checked to come in order): the size of each batch. ``busy``: its handler
    takes long over the first (else it returns at once: the client is never busy)."""
    batches: list[list[dict[str, object]]] = []
    release = asyncio.Event()

    async def handle(envelopes: list[dict[str, object]]) -> None:
        batches.append(envelopes)
        await release.wait()  # busy: the rest queue up meanwhile

    if not busy:
        release.set()
    client = RelayClient(url, identity, handler=handle, outbox=MemoryOutbox())
    task = asyncio.create_task(client.run())
    if busy:
        await eventually(lambda: len(batches) == 1)
        await asyncio.sleep(0.2)  # the relay has sent them all at once: let them be read
        release.set()
    await eventually(lambda: sum(map(len, batches)) == len(held))
    await client.stop()
    await task
    assert [e["id"] for batch in batches for e in batch] == [e["id"] for e in held]
    return [len(batch) for batch in batches]


async def test_deliveries_that_queue_up_are_handed_over_together(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = Peer(relay.url, alice)
    a.start()
    sent = await a.send_stored(bob, 5)
    assert len(await batches_handed_over(relay.url, bob, sent, busy=True)) <= 2
    again = Peer(relay.url, bob)
    again.start()
    later = a.send(bob, 5)
    await eventually(lambda: len(again.received) == 1)
    assert again.received == [later]  # every one of them was acknowledged
    await again.stop()
    await a.stop()


async def _stored_large(relay: RelayServer, sender: Peer, recipient: Identity,
                        count: int, pad: int) -> list[dict[str, object]]:
    """``count`` envelopes of about ``pad`` bytes each, once the relay holds them all."""
    known = Peer(relay.url, recipient)  # the relay keeps more for a recipient it has seen
    known.start()
    await eventually(lambda: known.client.connected)
    await known.stop()
    now = int(time.time() * 1000)
    large = [seal(raw_payload("inbox_request", {"since_rev": n, "pad": "x" * pad}),
                  sender=sender.identity, recipient=recipient.card, ts_ms=now).to_json()
             for n in range(count)]
    for sealed in large:
        sender.outbox.add(relay.url, sealed)
    sender.client.wake()
    await eventually(lambda: len(sender.outbox) == 0)
    return large


async def test_a_batch_holds_at_most_so_much_ciphertext(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = Peer(relay.url, alice)
    a.start()
    large = await _stored_large(relay, a, bob, 8, 700_000)
    sizes = await batches_handed_over(relay.url, bob, large, busy=True)
    ct_bytes = len(str(large[0]["ct"]))  # the same for each
    assert max(sizes) <= 1 + MAX_BATCH_CIPHERTEXT // ct_bytes  # what follows the first fits
    assert len(sizes) >= 2
    await a.stop()


async def test_an_idle_client_takes_the_frames_already_behind_a_delivery_with_it(
    relay: RelayServer, alice: Identity, bob: Identity, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The relay sends what it holds back to back: the first delivery does not go to the
    handler alone while the others are still being read (each would cost a commit)."""
    a = Peer(relay.url, alice)
    a.start()
    # 6 of 400 kB of ciphertext: each longer than a read from the socket, all in one batch.
    large = await _stored_large(relay, a, bob, 6, 300_000)
    assert await batches_handed_over(relay.url, bob, large, busy=False) == [6]
    monkeypatch.setattr("bot.relay.incoming.CATCH_UP_PASSES", 0)
    large = await _stored_large(relay, a, bob, 6, 300_000)
    assert len(await batches_handed_over(relay.url, bob, large, busy=False)) > 1
    await a.stop()


async def test_a_failing_handler_gets_the_envelope_again_after_the_backoff(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    calls: list[object] = []

    async def flaky(envelope: dict[str, object]) -> None:
        calls.append(envelope["id"])
        # Twice: handed over with the next one and then alone, or alone on two sessions.
        if calls.count(first["id"]) <= 2:
            raise RuntimeError("disk full")

    a, b = Peer(relay.url, alice), Peer(relay.url, bob, handler=flaky)
    a.start()
    b.start()
    first, second = a.send(bob, 0), a.send(bob, 1)
    await eventually(lambda: len(calls) == 4)  # no restart: the client reconnects by itself
    assert calls == [first["id"]] * 3 + [second["id"]]  # still in order
    assert b.client.status().reconnects >= 1
    await a.stop()
    await b.stop()


async def test_a_poison_envelope_is_dropped_after_repeated_failures(
    relay: RelayServer, alice: Identity, bob: Identity, caplog: pytest.LogCaptureFixture
) -> None:
    handled: list[dict[str, object]] = []

    async def chokes_on_the_first(envelope: dict[str, object]) -> None:
        if envelope["id"] == poison["id"]:
            raise ValueError("cannot handle this one")
        handled.append(envelope)

    a = Peer(relay.url, alice)
    a.start()
    poison, after = a.send(bob, 0), a.send(bob, 1)
    b = Peer(relay.url, bob, handler=chokes_on_the_first, backoff_initial=0.05, backoff_max=5)
    b.start()
    await eventually(lambda: handled == [after])
    # A session may hand both over together first: only the poison handled alone counts.
    attempts = [r.created for r in caplog.records
                if r.getMessage().startswith(f"relay {relay.url}: handler failed for envelope")]
    assert len(attempts) == MAX_HANDLER_ATTEMPTS
    # A failed handler is no sign of a healthy session: the backoff keeps growing (the
    # fourth wait is drawn from [0.2, 0.4] s), rather than starting again at 0.05 s.
    assert attempts[4] - attempts[3] >= 0.2
    dropped = [r for r in caplog.records if "dropped after" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in dropped] == [
        (
            logging.ERROR,
            f"relay {relay.url}: envelope {poison['id']} dropped after 5 failed attempts",
        )
    ]
    await b.stop()
    again = Peer(relay.url, bob)
    again.start()
    later = a.send(bob, 2)
    await eventually(lambda: len(again.received) == 1)
    assert again.received == [later]  # the dropped one was acknowledged: gone from the relay
    await again.stop()
    await a.stop()


class FailsToMarkOnce(MemoryOutbox):
    """An outbox whose first ``outbox_mark_sent`` hits a bug (not a :class:`SkaldError`)."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def outbox_mark_sent(self, envelope_id: str) -> None:
        if not self.failed:
            self.failed = True
            raise RuntimeError("a bug in the outbox")
        super().outbox_mark_sent(envelope_id)


async def test_an_unexpected_error_ends_the_session_not_the_client(
    relay: RelayServer, alice: Identity, bob: Identity, caplog: pytest.LogCaptureFixture
) -> None:
    outbox = FailsToMarkOnce()
    a, b = Peer(relay.url, alice, outbox=outbox), Peer(relay.url, bob)
    a.start()
    b.start()
    env = a.send(bob)
    await eventually(lambda: outbox.failed and len(outbox) == 0)
    assert a.client.status().reconnects >= 1
    assert any("failed unexpectedly" in r.getMessage() for r in caplog.records)
    await eventually(lambda: len(b.received) >= 1)
    # Sent again after the reconnect: the relay stores it once while it waits, but if bob
    # had already acknowledged it, it comes again (at-least-once; bob's replay set).
    assert all(received == env for received in b.received)
    await a.stop()  # run() was still running and returns normally
    await b.stop()


class RecordingOutbox(MemoryOutbox):
    """An outbox that notes when the client reads it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[float] = []

    def outbox_pending(self, relay_url: str) -> list[dict[str, object]]:
        self.reads.append(asyncio.get_running_loop().time())
        return super().outbox_pending(relay_url)


async def test_refused_envelopes_are_retried_together(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    retry = 0.2
    outbox = RecordingOutbox()
    async with RelayServer(tmp_path, queue_cap=0) as relay:  # takes nothing: queue_full
        a = Peer(relay.url, alice, outbox=outbox, backoff_max=retry)
        a.start()

        async def send_and_wait_for_a_read(n: int) -> None:
            before = len(outbox.reads)
            a.send(bob, n)
            await eventually(lambda: len(outbox.reads) > before)

        for n in range(8):  # refused one after the other, a few milliseconds apart
            await send_and_wait_for_a_read(n)
        settled = len(outbox.reads)
        await eventually(lambda: len(outbox.reads) >= settled + 3)
        first, second, third = outbox.reads[settled : settled + 3]
        # One retry timer for all of them: the outbox is read again once per period, not
        # once per refusal.
        assert second - first >= retry / 2
        assert third - second >= retry / 2
        await a.stop()


async def test_a_slow_handler_does_not_break_keepalive(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = Peer(relay.url, alice)
    a.start()
    sent = [a.send(bob, n) for n in range(100)]
    await eventually(lambda: len(a.outbox) == 0)  # all waiting at the relay
    received: list[dict[str, object]] = []

    async def slow_at_first(envelope: dict[str, object]) -> None:
        if not received:
            await asyncio.sleep(1.5)  # far longer than ping_interval + ping_timeout
        received.append(envelope)

    b = Peer(relay.url, bob, handler=slow_at_first, ping_interval=0.05, ping_timeout=0.5)
    b.start()
    await eventually(lambda: len(received) == len(sent))
    assert received == sent
    assert b.client.status().reconnects == 0  # pongs were read while the handler worked
    await a.stop()
    await b.stop()


async def test_killed_between_receive_and_ack(
    relay: RelayServer, alice: Identity, bob: Identity, tmp_path: Path
) -> None:
    applied = AppliedLog(tmp_path / "bob.sqlite3")
    arrived = asyncio.Event()

    async def dies_after_applying(envelope: dict[str, object]) -> None:
        applied.apply(envelope)
        arrived.set()
        await asyncio.Event().wait()  # killed here, before the ack

    a = Peer(relay.url, alice)
    a.start()
    env = a.send(bob)
    first = Peer(relay.url, bob, handler=dies_after_applying)
    first.start()
    async with asyncio.timeout(TIMEOUT):
        await arrived.wait()
    await first.stop()
    applied.close()

    restarted = AppliedLog(tmp_path / "bob.sqlite3")
    handled: list[bool] = []

    async def applies(envelope: dict[str, object]) -> None:
        handled.append(restarted.apply(envelope))

    second = Peer(relay.url, bob, handler=applies)
    second.start()
    await eventually(lambda: len(handled) == 1)
    assert handled == [False]  # redelivered, recognised, not applied again
    assert restarted.ids() == {env["id"]}
    await second.stop()
    await a.stop()
    restarted.close()


async def test_relay_killed_and_restarted_mid_stream(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    data = tmp_path / "relay"
    relay = await RelayProcess.start(data)
    applied = AppliedLog(tmp_path / "bob.sqlite3")
    stalled, resume = asyncio.Event(), asyncio.Event()

    async def applies(envelope: dict[str, object]) -> None:
        applied.apply(envelope)
        if applied.count() == 6 and not resume.is_set():
            stalled.set()
            await resume.wait()  # the relay dies while this envelope is unacknowledged

    a, b = Peer(relay.url, alice), Peer(relay.url, bob, handler=applies)
    a.start()
    b.start()
    first_half = [a.send(bob, n) for n in range(15)]
    async with asyncio.timeout(TIMEOUT):
        await stalled.wait()
    await relay.kill()
    second_half = [a.send(bob, n) for n in range(15, 30)]  # written while the relay is down
    relay = await RelayProcess.start(data, port=relay.port)
    resume.set()
    await eventually(lambda: applied.count() == 30 and len(a.outbox) == 0)
    assert applied.ids() == {env["id"] for env in first_half + second_half}
    assert applied.duplicates >= 1  # the unacknowledged one came back and was recognised
    assert a.client.status().reconnects >= 1
    await a.stop()
    await b.stop()
    await relay.kill()
    applied.close()


async def test_on_ready_after_every_reconnection(tmp_path: Path, alice: Identity) -> None:
    readies: list[bool] = []

    async def on_ready() -> None:
        readies.append(True)

    async with RelayServer(tmp_path) as first:
        port = first.port
        a = Peer(first.url, alice, on_ready=on_ready)
        a.start()
        await eventually(lambda: len(readies) == 1)
    await eventually(lambda: not a.client.connected)
    assert a.client.status().last_error is not None
    async with RelayServer(tmp_path, port=port):
        await eventually(lambda: len(readies) == 2 and a.client.connected)
        assert a.client.status().reconnects >= 1
        await a.stop()


async def test_refused_envelopes_do_not_loop(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a, b = Peer(relay.url, alice), Peer(relay.url, bob)
    a.outbox.add(relay.url, envelope(bob, alice))  # from someone else: bad_envelope
    a.outbox.add(relay.url, {**envelope(alice, bob), "pad": "x" * MAX_ENVELOPE_BYTES})
    good = a.send(bob)
    a.start()
    b.start()
    await eventually(lambda: len(a.outbox) == 0 and len(b.received) == 1)
    assert b.received == [good]
    assert a.client.connected
    await a.stop()
    await b.stop()


async def test_queue_full_is_retried(tmp_path: Path, alice: Identity, bob: Identity) -> None:
    async with RelayServer(tmp_path, queue_cap=1) as relay:
        a = Peer(relay.url, alice)
        a.start()
        sent = [a.send(bob, n) for n in range(3)]
        await eventually(lambda: len(a.outbox) == 2)  # one taken, two refused for now
        b = Peer(relay.url, bob)
        b.start()
        await eventually(lambda: len(b.received) == 3)
        assert b.received == sent
        await a.stop()
        await b.stop()


async def test_a_relay_that_never_answers_is_given_up_and_retried(alice: Identity) -> None:
    attempts: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        attempts.append(writer)
        await reader.read()  # never writes a byte; returns when the client hangs up
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    a = Peer(f"ws://127.0.0.1:{port}/v1/connect", alice, open_timeout=0.2)
    a.start()
    await eventually(lambda: len(attempts) >= 2)
    assert not a.client.connected
    assert "timed out" in str(a.client.status().last_error)
    await a.stop()
    server.close()
    await server.wait_closed()


async def test_a_relay_that_never_confirms_auth_is_given_up(alice: Identity) -> None:
    challenges: list[bool] = []

    async def mute(ws: ServerConnection) -> None:
        await ws.send(challenge_frame(bytes(32)))
        challenges.append(True)
        await ws.wait_closed()

    async with serve(mute, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        a = Peer(f"ws://127.0.0.1:{port}/v1/connect", alice, open_timeout=0.2)
        a.start()
        await eventually(lambda: len(challenges) >= 2)
        assert not a.client.connected
        await a.stop()


async def test_stop_while_the_relay_is_unreachable(alice: Identity) -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    a = Peer(f"ws://127.0.0.1:{port}/v1/connect", alice)
    a.start()
    await eventually(lambda: a.client.status().reconnects >= 2)
    assert a.client.status().last_error
    await a.stop()


def test_a_bad_url_is_refused(alice: Identity) -> None:
    async def ignore(envelope: dict[str, object]) -> None:
        return None

    with pytest.raises(RelayError):
        RelayClient("http://example.org/", alice, handler=one_at_a_time(ignore),
                    outbox=MemoryOutbox())


async def test_frame_types_it_does_not_know_are_ignored_quietly(
    alice: Identity, bob: Identity, caplog: pytest.LogCaptureFixture
) -> None:
    """Frame types added later neither warn nor end the session (protocol §4: a client
    ignores frame types it does not know); the ``delivered`` receipt goes to its callback."""
    delivered = envelope(bob, alice)
    acks: list[str] = []

    async def relay_of_a_later_version(ws: ServerConnection) -> None:
        await ws.send(challenge_frame(bytes(32)))
        await ws.recv()  # auth: not checked by this stand-in
        await ws.send(ready_frame(alice.id))
        await ws.send(json.dumps({"type": "delivered", "id": delivered["id"]}))
        await ws.send(json.dumps({"type": "presence", "devices": 2}))
        await ws.send(deliver_frame(encode_envelope(delivered)))
        acks.append(await ws.recv())  # type: ignore[arg-type]
        await ws.wait_closed()

    caplog.set_level(logging.DEBUG, logger="bot.relay.client")
    async with serve(relay_of_a_later_version, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        a = Peer(f"ws://127.0.0.1:{port}/v1/connect", alice)
        a.start()
        await eventually(lambda: len(acks) == 1)
        assert a.received == [delivered] and a.client.connected
        assert a.delivered == [delivered["id"]]
        await a.stop()
    assert json.loads(acks[0]) == {"type": "ack", "id": delivered["id"]}
    client_records = [r for r in caplog.records if r.name == "bot.relay.client"]
    assert not [r.getMessage() for r in client_records if r.levelno >= logging.WARNING]
    assert any("ignored a frame" in r.getMessage() for r in client_records)
