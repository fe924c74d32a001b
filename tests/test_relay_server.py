"""The built-in relay (protocol §4), driven frame by frame over real loopback sockets."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidMessage, InvalidStatus

from bot.protocol.encoding import b64u_decode, b64u_encode
from bot.protocol.envelope import MAX_ENVELOPE_BYTES, seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import raw_payload
from bot.protocol.relayauth import auth_frame
from bot.relay.admission import address_key
from bot.relay.frames import DELIVER_WINDOW, encode_envelope
from bot.relay.handshake import PRE_AUTH_FRAME_BYTES
from bot.relay.limits import ConnectionLimits
from bot.relay.queue import Batch, Incoming, PutResult, RelayQueue
from bot.relay.refusals import MAX_REFUSED_FRAMES, WARNINGS_PER_MINUTE
from bot.relay.server import RelayServer

TIMEOUT = 5.0


async def recv(ws: ClientConnection) -> dict[str, object]:
    async with asyncio.timeout(TIMEOUT):
        frame = json.loads(await ws.recv())
    assert isinstance(frame, dict)
    return frame


async def send(ws: ClientConnection, frame: object) -> None:
    await ws.send(json.dumps(frame))


async def session(url: str, identity: Identity) -> ClientConnection:
    ws = await connect(url)
    challenge = await recv(ws)
    assert challenge["type"] == "challenge"
    assert len(b64u_decode(str(challenge["nonce"]))) == 32
    await send(ws, auth_frame(identity, b64u_decode(str(challenge["nonce"]))))
    assert await recv(ws) == {"type": "ready", "id": identity.id}
    return ws


def envelope(sender: Identity, recipient: Identity, n: int = 0) -> dict[str, object]:
    payload = raw_payload("inbox_request", {"since_rev": n})
    sealed = seal(payload, sender=sender, recipient=recipient.card, ts_ms=int(time.time() * 1000))
    return sealed.to_json()


async def closed_code(ws: ClientConnection) -> int | None:
    async with asyncio.timeout(TIMEOUT):
        await ws.wait_closed()
    return ws.close_code


async def test_send_deliver_ack(relay: RelayServer, alice: Identity, bob: Identity) -> None:
    a = await session(relay.url, alice)
    b = await session(relay.url, bob)
    env = envelope(alice, bob)
    await send(a, {"type": "send", "envelope": env})
    assert await recv(a) == {"type": "sent", "id": env["id"]}
    assert await recv(b) == {"type": "deliver", "envelope": env}
    await send(b, {"type": "ack", "id": env["id"]})
    assert await recv(a) == {"type": "delivered", "id": env["id"]}
    await b.close()
    # Acknowledged: the next session gets only what was sent after it.
    later = envelope(alice, bob, 1)
    await send(a, {"type": "send", "envelope": later})
    assert (await recv(a))["type"] == "sent"
    b = await session(relay.url, bob)
    assert await recv(b) == {"type": "deliver", "envelope": later}
    await a.close()
    await b.close()


async def test_offline_queue_redelivers_unacked_oldest_first(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = await session(relay.url, alice)
    envs = [envelope(alice, bob, n) for n in range(3)]
    for env in [*envs, envs[1]]:  # a duplicate id is stored once
        await send(a, {"type": "send", "envelope": env})
        assert await recv(a) == {"type": "sent", "id": env["id"]}
    b = await session(relay.url, bob)
    assert [(await recv(b))["envelope"] for _ in envs] == envs
    await send(b, {"type": "ack", "id": envs[0]["id"]})
    await b.close()
    b = await session(relay.url, bob)
    assert [(await recv(b))["envelope"] for _ in envs[1:]] == envs[1:]
    await a.close()
    await b.close()


async def test_bad_signature_is_refused_with_4401(relay: RelayServer, alice: Identity) -> None:
    ws = await connect(relay.url)
    challenge = await recv(ws)
    frame = auth_frame(alice, b64u_decode(str(challenge["nonce"])))
    frame["sig"] = b64u_encode(bytes(64))
    await send(ws, frame)
    assert await recv(ws) == {
        "type": "error",
        "code": "auth_failed",
        "message": "auth: signature does not verify",
    }
    assert await closed_code(ws) == 4401


async def test_auth_for_someone_else_is_refused(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    ws = await connect(relay.url)
    challenge = await recv(ws)
    frame = auth_frame(alice, b64u_decode(str(challenge["nonce"])))
    frame["id"] = bob.id
    await send(ws, frame)
    assert (await recv(ws))["code"] == "auth_failed"
    assert await closed_code(ws) == 4401


async def test_frames_before_auth_are_refused(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    ws = await connect(relay.url)
    challenge = await recv(ws)
    env = envelope(alice, bob)
    await send(ws, {"type": "send", "envelope": env})
    refused = await recv(ws)
    assert (refused["code"], refused["id"]) == ("not_authenticated", env["id"])
    await send(ws, {"type": "ack", "id": env["id"]})
    assert (await recv(ws))["code"] == "not_authenticated"
    await ws.send("garbage")
    assert (await recv(ws))["code"] == "bad_frame"
    await send(ws, auth_frame(alice, b64u_decode(str(challenge["nonce"]))))
    assert await recv(ws) == {"type": "ready", "id": alice.id}
    await ws.close()


async def test_authentication_times_out(tmp_path: Path, alice: Identity) -> None:
    async with RelayServer(tmp_path, auth_timeout=0.2) as server:
        ws = await connect(server.url)
        assert (await recv(ws))["type"] == "challenge"
        assert await closed_code(ws) == 4408


async def test_garbage_frames_get_errors_and_harm_nobody(
    relay: RelayServer, alice: Identity, bob: Identity, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    a = await session(relay.url, alice)
    b = await session(relay.url, bob)
    for garbage in ["{", "[]", '{"type": "teleport"}', '{"type": "ack", "id": 3}', "null"]:
        await a.send(garbage)
        assert (await recv(a))["code"] == "bad_frame"
    await a.send(b"\x00\x01")
    assert (await recv(a))["code"] == "bad_frame"
    await send(a, {"type": "ready", "id": alice.id})
    assert (await recv(a))["code"] == "bad_frame"
    await send(a, {"type": "send", "envelope": {"v": 1}})
    assert (await recv(a))["code"] == "bad_envelope"
    broken = {**envelope(alice, bob), "sig": "not base64!"}
    await send(a, {"type": "send", "envelope": broken})
    assert await recv(a) == {
        "type": "error",
        "code": "bad_envelope",
        "id": broken["id"],
        "message": "malformed: sig: not unpadded base64url",
    }
    env = envelope(alice, bob)
    await send(a, {"type": "send", "envelope": env})
    assert (await recv(a))["type"] == "sent"
    assert await recv(b) == {"type": "deliver", "envelope": env}
    assert str(env["ct"]) not in caplog.text
    await a.close()
    await b.close()


async def test_spoofed_from_is_refused(relay: RelayServer, alice: Identity, bob: Identity) -> None:
    a = await session(relay.url, alice)
    spoofed = envelope(bob, alice)  # claims to come from bob
    await send(a, {"type": "send", "envelope": spoofed})
    refused = await recv(a)
    assert (refused["type"], refused["code"], refused["id"]) == (
        "error",
        "bad_envelope",
        spoofed["id"],
    )
    await a.close()


async def test_oversized_envelopes(relay: RelayServer, alice: Identity, bob: Identity) -> None:
    a = await session(relay.url, alice)
    big = {**envelope(alice, bob), "padding": "x" * MAX_ENVELOPE_BYTES}
    await send(a, {"type": "send", "envelope": big})
    refused = await recv(a)
    assert (refused["code"], refused["id"]) == ("too_large", big["id"])
    # The session survives an oversized envelope ...
    env = envelope(alice, bob)
    await send(a, {"type": "send", "envelope": env})
    assert (await recv(a))["type"] == "sent"
    # ... but a message beyond any frame limit is closed by the transport.
    await a.send("x" * (3 * MAX_ENVELOPE_BYTES))
    assert await closed_code(a) == 1009


async def test_second_session_replaces_the_first(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = await session(relay.url, alice)
    env = envelope(alice, bob)
    await send(a, {"type": "send", "envelope": env})
    assert (await recv(a))["type"] == "sent"
    first = await session(relay.url, bob)
    assert (await recv(first))["envelope"] == env  # delivered, never acknowledged
    second = await session(relay.url, bob)
    assert await closed_code(first) == 4409
    assert (await recv(second))["envelope"] == env
    live = envelope(alice, bob, 1)
    await send(a, {"type": "send", "envelope": live})
    assert (await recv(second))["envelope"] == live
    await a.close()
    await second.close()


async def test_queue_cap(tmp_path: Path, alice: Identity, bob: Identity) -> None:
    async with RelayServer(tmp_path, queue_cap=3) as relay:
        a = await session(relay.url, alice)
        for n in range(3):
            await send(a, {"type": "send", "envelope": envelope(alice, bob, n)})
            assert (await recv(a))["type"] == "sent"
        env = envelope(alice, bob, 3)
        await send(a, {"type": "send", "envelope": env})
        refused = await recv(a)
        assert (refused["code"], refused["id"]) == ("queue_full", env["id"])
        await a.close()


def size(env: dict[str, object]) -> int:
    return len(encode_envelope(env).encode("utf-8"))


async def send_all(ws: ClientConnection, envs: list[dict[str, object]]) -> list[str]:
    """Send envelopes; the answer for each (``sent`` or the error code), in order."""
    for env in envs:
        await send(ws, {"type": "send", "envelope": env})
    codes = []
    for env in envs:
        answer = await recv(ws)
        assert answer["id"] == env["id"]
        codes.append(str(answer.get("code", answer["type"])))
    return codes


async def test_one_sender_cannot_fill_a_recipients_queue(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    mallory = Identity.generate("mallory")
    floods = [envelope(mallory, bob, n) for n in range(4)]
    share = 2 * size(floods[0]) + 10
    async with RelayServer(tmp_path, sender_bytes=share, queue_bytes=4 * share) as relay:
        m = await session(relay.url, mallory)
        assert await send_all(m, floods) == ["sent", "sent", "queue_full", "queue_full"]
        a = await session(relay.url, alice)
        wanted = envelope(alice, bob)
        assert await send_all(a, [wanted]) == ["sent"]
        b = await session(relay.url, bob)
        assert [(await recv(b))["envelope"] for _ in range(3)] == [*floods[:2], wanted]
        await b.close()
        await m.close()
        await a.close()


async def test_envelope_cap_per_sender(tmp_path: Path, alice: Identity, bob: Identity) -> None:
    mallory = Identity.generate("mallory")
    async with RelayServer(tmp_path, queue_cap=10, sender_queue_cap=2) as relay:
        m = await session(relay.url, mallory)
        floods = [envelope(mallory, bob, n) for n in range(3)]
        assert await send_all(m, floods) == ["sent", "sent", "queue_full"]
        a = await session(relay.url, alice)
        assert await send_all(a, [envelope(alice, bob)]) == ["sent"]
        await m.close()
        await a.close()


async def test_byte_caps_per_recipient_and_for_the_relay(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    carol = Identity.generate("carol")
    one = size(envelope(alice, bob)) + 10
    async with RelayServer(tmp_path, queue_bytes=2 * one, total_bytes=3 * one) as relay:
        a = await session(relay.url, alice)
        to_bob = [envelope(alice, bob, n) for n in range(3)]
        assert await send_all(a, to_bob) == ["sent", "sent", "queue_full"]
        to_carol = [envelope(alice, carol, n) for n in range(2)]
        assert await send_all(a, to_carol) == ["sent", "queue_full"]  # the relay is full
        b = await session(relay.url, bob)
        assert [(await recv(b))["envelope"] for _ in range(2)] == to_bob[:2]
        await send(b, {"type": "ack", "id": to_bob[0]["id"]})
        await send(b, {"type": "bogus"})  # answered after the ack is committed
        assert (await recv(b))["code"] == "bad_frame"
        assert await recv(a) == {"type": "delivered", "id": to_bob[0]["id"]}
        assert await send_all(a, to_carol[1:]) == ["sent"]
        await a.close()
        await b.close()


async def test_the_same_id_from_two_senders_is_two_envelopes(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    carol = Identity.generate("carol")
    from_alice = envelope(alice, bob)
    from_carol = {**envelope(carol, bob), "id": from_alice["id"]}
    a = await session(relay.url, alice)
    c = await session(relay.url, carol)
    assert await send_all(a, [from_alice]) == ["sent"]
    assert await send_all(c, [from_carol]) == ["sent"]
    b = await session(relay.url, bob)
    assert [(await recv(b))["envelope"] for _ in range(2)] == [from_alice, from_carol]
    for _ in range(2):
        await send(b, {"type": "ack", "id": from_alice["id"]})
    await b.close()
    b = await session(relay.url, bob)  # both acknowledged: nothing comes back
    await send(b, {"type": "bogus"})
    assert (await recv(b))["code"] == "bad_frame"
    await a.close()
    await c.close()
    await b.close()


async def test_large_frames_before_auth_are_refused(relay: RelayServer) -> None:
    ws = await connect(relay.url)
    assert (await recv(ws))["type"] == "challenge"
    await send(ws, {"type": "auth", "padding": "x" * PRE_AUTH_FRAME_BYTES})
    assert (await recv(ws))["code"] == "too_large"
    assert await closed_code(ws) == 1009
    ws = await connect(relay.url)
    assert (await recv(ws))["type"] == "challenge"
    await ws.send("x" * 100_000)  # beyond what websockets reads before authentication
    assert await closed_code(ws) == 1009


async def test_deliveries_wait_for_acks(tmp_path: Path, alice: Identity, bob: Identity) -> None:
    async with RelayServer(tmp_path) as relay:
        await (await session(relay.url, bob)).close()  # known to the relay: a full queue
        a = await session(relay.url, alice)
        envs = [envelope(alice, bob, n) for n in range(DELIVER_WINDOW + 2)]
        assert set(await send_all(a, envs)) == {"sent"}
        b = await session(relay.url, bob)
        window = [(await recv(b))["envelope"] for _ in range(DELIVER_WINDOW)]
        assert window == envs[:DELIVER_WINDOW]

        async def nothing_more_delivered() -> None:
            await send(b, {"type": "bogus"})  # answered before any delivery sent later
            assert (await recv(b))["code"] == "bad_frame"

        await nothing_more_delivered()
        await send(b, {"type": "ack", "id": "f" * 32})  # not delivered: makes no room
        half = DELIVER_WINDOW // 2
        for env in envs[: half - 1]:
            await send(b, {"type": "ack", "id": env["id"]})
        await nothing_more_delivered()
        # Once half the window is acknowledged, deliveries go on.
        await send(b, {"type": "ack", "id": envs[half - 1]["id"]})
        assert [(await recv(b))["envelope"] for _ in range(2)] == envs[DELIVER_WINDOW:]
        await a.close()
        await b.close()


async def test_other_paths_are_404(relay: RelayServer) -> None:
    with pytest.raises(InvalidStatus) as caught:
        await connect(relay.url.replace("/v1/connect", "/v2/elsewhere"))
    assert caught.value.response.status_code == 404


async def test_queue_survives_a_restart_and_expires(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    data = tmp_path / "relay"
    queue = RelayQueue.open(data)
    expired = envelope(alice, bob, 0)
    put = Incoming(bob.id, alice.id, str(expired["id"]), json.dumps(expired))
    assert queue.apply(Batch(puts=[put]), now_ms=1).results == [PutResult.QUEUED]
    queue.close()
    kept = envelope(alice, bob, 1)
    async with RelayServer(data) as first:
        port = first.port
        a = await session(first.url, alice)
        await send(a, {"type": "send", "envelope": kept})
        assert (await recv(a))["type"] == "sent"
        await a.close()
    async with RelayServer(data, port=port) as second:
        b = await session(second.url, bob)
        assert (await recv(b))["envelope"] == kept  # the expired one was purged at start
        await b.close()


async def test_connections_close_when_the_relay_stops(tmp_path: Path, alice: Identity) -> None:
    async with RelayServer(tmp_path) as server:
        ws = await session(server.url, alice)
    with pytest.raises(ConnectionClosed):
        await recv(ws)
    assert ws.close_code == 1001


async def test_relay_command_runs_until_sigterm(tmp_path: Path, alice: Identity) -> None:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bot", "relay", "--port", "0", "--data", str(tmp_path / "d")),
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    match = None
    async with asyncio.timeout(30):
        while match is None:
            line = (await process.stderr.readline()).decode()
            assert line, "the relay exited"
            match = re.search(r"relay listening on (ws://\S+)", line)
    ws = await session(match.group(1), alice)
    process.send_signal(signal.SIGTERM)
    async with asyncio.timeout(TIMEOUT):
        await ws.wait_closed()
        rest = (await process.stderr.read()).decode()
        assert await process.wait() == 0
    assert "shutting down" in rest
    assert (tmp_path / "d" / "relay-queue.sqlite3").exists()


# The relay as an internet-facing service: what one address can hold, and for how long.


async def challenged(url: str) -> ClientConnection:
    """A connection that got its challenge and does not authenticate."""
    ws = await connect(url)
    assert (await recv(ws))["type"] == "challenge"
    return ws


async def refused_at_once(url: str) -> bool:
    """Whether the relay closes a new connection before its handshake ends, and fast."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(TIMEOUT):
            ws = await connect(url, open_timeout=TIMEOUT)
    except (InvalidMessage, OSError, ConnectionClosed):
        assert time.monotonic() - started < 1.0, "refused, but left hanging"
        return True
    await ws.close()
    return False


async def test_unauthenticated_connections_per_address_are_capped(tmp_path: Path) -> None:
    limits = ConnectionLimits(unauthenticated_per_address=3)
    async with RelayServer(tmp_path, connections=limits) as relay:
        waiting = [await challenged(relay.url) for _ in range(3)]
        assert await refused_at_once(relay.url)
        await waiting.pop().close()
        async with asyncio.timeout(TIMEOUT):
            while await refused_at_once(relay.url):  # until the relay has seen the close
                await asyncio.sleep(0.01)
        waiting.append(await challenged(relay.url))  # room again
        for ws in waiting:
            await ws.close()


async def test_sessions_per_address_are_capped(tmp_path: Path, alice: Identity) -> None:
    limits = ConnectionLimits(unauthenticated_per_address=2, authenticated_per_address=3)
    async with RelayServer(tmp_path, connections=limits) as relay:
        identities = [Identity.generate(f"x{n}") for n in range(3)]
        sessions = [await session(relay.url, identity) for identity in identities]
        ws = await connect(relay.url)  # sessions leave room for connections to authenticate
        challenge = await recv(ws)
        await send(ws, auth_frame(alice, b64u_decode(str(challenge["nonce"]))))
        assert await closed_code(ws) == 1013  # a fourth session from this address
        # An identity reconnecting from the same address replaces its own session.
        again = await session(relay.url, identities[0])
        assert await closed_code(sessions[0]) == 4409
        await again.close()
        for ws in sessions[1:]:
            await ws.close()


async def test_connections_in_all_are_capped(tmp_path: Path) -> None:
    async with RelayServer(tmp_path, connections=ConnectionLimits(total=2)) as relay:
        first, second = await challenged(relay.url), await challenged(relay.url)
        assert await refused_at_once(relay.url)
        await first.close()
        await second.close()


async def test_sessions_that_carry_nothing_are_closed(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    async with RelayServer(tmp_path, idle_timeout=0.3) as relay:
        idle = await session(relay.url, alice)
        busy = await session(relay.url, bob)
        started = time.monotonic()
        while time.monotonic() - started < 0.6:
            await send(busy, {"type": "ack", "id": "f" * 32})  # carries something
            await asyncio.sleep(0.05)
        assert await closed_code(idle) == 1000
        assert idle.close_reason == "idle"
        await send(busy, {"type": "bogus"})
        assert (await recv(busy))["code"] == "bad_frame"
        await busy.close()


async def test_a_connection_is_closed_after_refused_frames(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    before_auth = await challenged(relay.url)
    for _ in range(MAX_REFUSED_FRAMES):
        await before_auth.send("junk")
    assert await closed_code(before_auth) == 1008
    a = await session(relay.url, alice)
    for _ in range(MAX_REFUSED_FRAMES - 1):
        await a.send("junk")
        assert (await recv(a))["code"] == "bad_frame"
    await send(a, {"type": "send", "envelope": envelope(alice, bob)})
    assert (await recv(a))["type"] == "sent"  # an accepted frame starts the count again
    for _ in range(MAX_REFUSED_FRAMES):
        await a.send("junk")
    for _ in range(MAX_REFUSED_FRAMES):
        assert (await recv(a))["code"] == "bad_frame"  # every answer comes before the close
    assert await closed_code(a) == 1008


async def test_junk_floods_give_a_few_log_lines(
    relay: RelayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(200):
        ws = await connect(relay.url)
        for _ in range(50):  # junk before auth, without reading the answers
            await ws.send("junk")
        await ws.wait_closed()
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 0 < len(lines) <= WARNINGS_PER_MINUTE
    assert len(caplog.records) < 100


async def test_throwaway_identities_cannot_fill_a_real_agents_queue(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    async with RelayServer(tmp_path, queue_cap=40, stranger_queue_cap=8) as relay:
        a = await session(relay.url, alice)
        b = await session(relay.url, bob)
        hello = envelope(alice, bob)
        assert await send_all(a, [hello]) == ["sent"]
        assert (await recv(b))["envelope"] == hello
        await send(b, {"type": "ack", "id": hello["id"]})  # bob has heard from alice
        assert await recv(a) == {"type": "delivered", "id": hello["id"]}
        await b.close()
        answers: list[str] = []
        for n in range(5):
            fake = Identity.generate(f"fake{n}")
            f = await session(relay.url, fake)
            answers += await send_all(f, [envelope(fake, bob, k) for k in range(10)])
            await f.close()
        assert answers.count("sent") == 8
        # Bob's real correspondent still has the rest of his queue.
        assert set(await send_all(a, [envelope(alice, bob, n) for n in range(32)])) == {"sent"}
        await a.close()


async def test_one_address_has_a_quota_across_identities(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    carol = Identity.generate("carol")
    async with RelayServer(tmp_path, address_queue_cap=3) as relay:
        for identity in (alice, bob, carol):
            await (await session(relay.url, identity)).close()
        a = await session(relay.url, alice)
        c = await session(relay.url, carol)
        assert await send_all(a, [envelope(alice, bob, n) for n in range(2)]) == ["sent"] * 2
        answers = await send_all(c, [envelope(carol, bob), envelope(carol, alice)])
        assert answers == ["sent", "queue_full"]
        await a.close()
        await c.close()


async def test_recipients_that_never_connected_get_a_small_queue(
    tmp_path: Path, alice: Identity, bob: Identity
) -> None:
    async with RelayServer(tmp_path, unseen_queue_cap=2) as relay:
        a = await session(relay.url, alice)
        envs = [envelope(alice, bob, n) for n in range(3)]
        assert await send_all(a, envs) == ["sent", "sent", "queue_full"]
        b = await session(relay.url, bob)
        assert [(await recv(b))["envelope"] for _ in range(2)] == envs[:2]
        assert await send_all(a, envs[2:]) == ["sent"]  # bob has connected: a full queue now
        await a.close()
        await b.close()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], capture_output=True, text=True, timeout=60
    )


def test_relay_help_shows_every_default() -> None:
    shown = run_cli("relay", "--help")
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    options = re.findall(r"^\s+(--[a-z-]+)", shown.stdout, re.MULTILINE)
    assert len(options) == 21
    assert text.count("(default: ") == len(options)
    for default in ("(default: 4096)", "(default: 32)", "(default: 128)", "(default: 10000)"):
        assert default in text


@pytest.mark.parametrize("args", [
    ["--port", "99999"], ["--port", "-1"], ["--queue-cap", "-5"], ["--store", "mysql://h/db"],
    ["--store", "postgresql://skald:hunter2@127.0.0.1:1/nowhere"],
])
def test_bad_relay_arguments_are_one_line(tmp_path: Path, args: list[str]) -> None:
    result = run_cli("relay", "--data", str(tmp_path), *args)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def test_out_of_descriptors_pauses_accepting(tmp_path: Path, alice: Identity) -> None:
    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bot", "relay", "--port", "0", "--data", str(tmp_path / "d")),
        *("--max-unauthenticated-per-address", "1000"),
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=few_descriptors,
    )
    assert process.stderr is not None
    lines: list[str] = []
    listening = asyncio.get_running_loop().create_future()

    async def read_log() -> None:
        assert process.stderr is not None
        while line := (await process.stderr.readline()).decode():
            lines.append(line)
            if (
                found := re.search(r"relay listening on (ws://\S+)", line)
            ) and not listening.done():
                listening.set_result(found.group(1))

    reader = asyncio.create_task(read_log())
    try:
        url = await asyncio.wait_for(listening, 30)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        logged = len(lines)
        hogs = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
        cpu = cpu_seconds(process.pid)
        await asyncio.sleep(2.0)
        assert cpu_seconds(process.pid) - cpu < 0.5  # paused, not spinning
        assert len(lines) - logged <= 5, "".join(lines[logged:])
        for hog in hogs:
            hog.close()
        ws = await asyncio.wait_for(session(url, alice), 10)  # accepting again
        await ws.close()
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(TIMEOUT):
            await process.wait()
        await reader


def test_an_address_is_an_ipv4_address_or_an_ipv6_64() -> None:
    assert address_key(("192.0.2.7", 5000)) == "192.0.2.7"
    assert address_key(("::ffff:192.0.2.7", 5000, 0, 0)) == "192.0.2.7"
    assert address_key(("2001:db8:1:2:aaaa::1", 5000, 0, 0)) == "2001:db8:1:2::/64"
    assert address_key(("2001:db8:1:2:bbbb::9", 5000, 0, 0)) == "2001:db8:1:2::/64"
    assert address_key(("2001:db8:1:3::1", 5000, 0, 0)) == "2001:db8:1:3::/64"


async def test_a_sender_online_is_told_when_its_envelope_is_acknowledged(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = await session(relay.url, alice)
    b = await session(relay.url, bob)
    envs = [envelope(alice, bob, n) for n in range(3)]
    await send_all(a, envs)
    for env in envs:
        assert await recv(b) == {"type": "deliver", "envelope": env}
    await send(b, {"type": "ack", "id": envs[0]["id"]})
    assert await recv(a) == {"type": "delivered", "id": envs[0]["id"]}
    for env in envs[1:]:  # a receipt each, however the acks share transactions
        await send(b, {"type": "ack", "id": env["id"]})
    assert {str((await recv(a))["id"]) for _ in envs[1:]} == {str(e["id"]) for e in envs[1:]}
    # The recipient is never told about its own acks; a second ack of one id tells nobody.
    await send(b, {"type": "ack", "id": envs[0]["id"]})
    probe = envelope(bob, alice)
    await send(b, {"type": "send", "envelope": probe})
    assert await recv(b) == {"type": "sent", "id": probe["id"]}
    assert await recv(a) == {"type": "deliver", "envelope": probe}
    await a.close()
    await b.close()


async def test_the_delivered_receipt_is_never_stored(
    relay: RelayServer, alice: Identity, bob: Identity
) -> None:
    a = await session(relay.url, alice)
    env = envelope(alice, bob)
    await send(a, {"type": "send", "envelope": env})
    assert await recv(a) == {"type": "sent", "id": env["id"]}
    await a.close()
    b = await session(relay.url, bob)
    assert await recv(b) == {"type": "deliver", "envelope": env}
    await send(b, {"type": "ack", "id": env["id"]})
    carol = Identity.generate("carol")
    probe = envelope(bob, carol)  # its sent answer comes after the ack's commit
    await send(b, {"type": "send", "envelope": probe})
    assert await recv(b) == {"type": "sent", "id": probe["id"]}
    # The sender comes back after the ack: nothing waits for it, receipt or envelope.
    a = await session(relay.url, alice)
    probe = envelope(alice, carol)
    await send(a, {"type": "send", "envelope": probe})
    assert await recv(a) == {"type": "sent", "id": probe["id"]}
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await a.recv()
    await a.close()
    await b.close()


async def test_a_client_cannot_send_delivered(relay: RelayServer, alice: Identity) -> None:
    a = await session(relay.url, alice)
    await send(a, {"type": "delivered", "id": "0" * 32})
    answer = await recv(a)
    assert answer["type"] == "error" and answer["code"] == "bad_frame"
    await a.close()


def test_a_relay_on_postgresql_without_the_extra_says_how_to_install_it(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "psycopg"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'psycopg\'", name="psycopg")\n')
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-m", "bot", "relay", "--data", str(tmp_path / "d"),
         "--store", "postgresql://127.0.0.1:1/none"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(root)])},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr == ("skald-telegram: a relay on PostgreSQL needs the PostgreSQL extra:"
                             " pip install 'skald-telegram[postgresql]'\n")
