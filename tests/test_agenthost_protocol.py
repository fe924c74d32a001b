"""The agent host's protocol side, seen by devices built from the protocol core: pairing
and ``pair_reject``, decisions bound to ``args_sha256``, first decision wins,
``inbox_request``; and ``agent status`` / ``agent unpair``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from agenthost_world import Host, kill_children, run_cli
from conftest import eventually
from world import FAST_RELAY

from bot.protocol.encoding import args_sha256
from bot.protocol.envelope import open_envelope, seal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import PairingUri, build_pair_request, parse_pairing_uri
from bot.protocol.payloads import (
    ApprovalDecision,
    InboxRequest,
    Person,
    encode_payload,
)
from bot.relay.client import MemoryOutbox, RelayClient, one_at_a_time
from bot.relay.server import RelayServer
from bot.testing.replay import MemoryReplayGuard

ADA = Person(name="Ada Lovelace", telegram_user_id=4242, username="ada")


class Device:
    """A device that pairs and decides through the relay, recording what it receives."""

    def __init__(self, relay_url: str, name: str) -> None:
        self.identity = Identity.generate(name)
        self.relay_url = relay_url
        self.outbox = MemoryOutbox()
        self.agent: PublicCard | None = None
        self.received: list[tuple[str, Any]] = []
        """``(kind, body)`` of every payload received, in order."""
        self.relay = RelayClient(relay_url, self.identity, handler=one_at_a_time(self._on_envelope),
                                 outbox=self.outbox, **FAST_RELAY)
        self._replay = MemoryReplayGuard()

    async def _on_envelope(self, raw: dict[str, object]) -> None:
        assert self.agent is not None
        opened = open_envelope(raw, me=self.identity, peers={self.agent.id: self.agent},
                               now_ms=int(time.time() * 1000), replay=self._replay)
        self._replay.remember(opened.envelope.id, opened.envelope.ts)
        message = json.loads(opened.plaintext)
        self.received.append((message["kind"], message["body"]))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.received]

    def bodies(self, kind: str) -> list[Any]:
        return [body for k, body in self.received if k == kind]

    def send(self, payload: bytes) -> None:
        assert self.agent is not None
        envelope = seal(payload, sender=self.identity, recipient=self.agent,
                        ts_ms=int(time.time() * 1000))
        self.outbox.add(self.relay_url, envelope.to_json())
        self.relay.wake()

    def pair(self, uri: PairingUri) -> None:
        self.agent = uri.agent
        request = build_pair_request(self.identity, uri, device_name=self.identity.name)
        self.send(encode_payload(request))

    def decide(self, item_id: str, decision: str, arguments: Any, reason: str | None = None
               ) -> None:
        self.send(encode_payload(ApprovalDecision(
            decision_id=str(uuid.uuid4()), approval_id=item_id, decision=decision,
            reason=reason, decided_by=ADA, decided_at="2026-11-29T10:03:12Z",
            args_sha256=args_sha256(arguments))))

    async def wait_for(self, condition: Callable[[Device], bool]) -> None:
        await eventually(lambda: condition(self))


@contextlib.asynccontextmanager
async def devices(relay_url: str, *names: str) -> AsyncIterator[list[Device]]:
    made = [Device(relay_url, name) for name in names]
    tasks = [asyncio.create_task(d.relay.run()) for d in made]
    try:
        yield made
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def running_host(tmp: Path, *args: str) -> AsyncIterator[tuple[Host, RelayServer]]:
    async with RelayServer(tmp / "relay") as relay:
        host = Host(tmp / "agent", relay.url, *args)
        await host.start()
        try:
            yield host, relay
        finally:
            await host.stop()
            await kill_children()


def latest_update(device: Device) -> dict[str, Any]:
    return device.bodies("inbox_update")[-1]  # type: ignore[no-any-return]


async def test_pairing_and_every_pair_reject_reason(tmp_path: Path) -> None:
    async with running_host(tmp_path) as (host, relay), devices(
        relay.url, "phone", "late", "guesser", "prober") as (phone, late, guesser, prober):
        async with host.client() as client:
            first = parse_pairing_uri((await client.new_pairing())["link"])
        phone.pair(first)
        await phone.wait_for(lambda d: d.kinds()[:2] == ["pair_accept", "inbox_update"])
        accept = phone.bodies("pair_accept")[0]
        assert accept == {"agent": {"id": first.agent.id, "name": "build-host"},
                          "device_id": phone.identity.id}

        late.pair(first)  # the secret worked once already
        await late.wait_for(lambda d: d.kinds() == ["pair_reject"])
        assert late.bodies("pair_reject") == [{"reason": "used"}]

        forged = PairingUri(relay=first.relay, agent=first.agent, secret=os.urandom(16))
        guesser.pair(forged)  # no link is open: nobody knows such a secret
        await guesser.wait_for(lambda d: d.kinds() == ["pair_reject"])
        assert guesser.bodies("pair_reject") == [{"reason": "unknown"}]

        async with host.client() as client:
            await client.new_pairing()  # a link is open now, and the prober guesses wrong
        prober.pair(forged)
        prober.pair(forged)  # within the same second: no second reject
        await prober.wait_for(lambda d: d.kinds() == ["pair_reject"])
        assert prober.bodies("pair_reject") == [{"reason": "bad_proof"}]

        status = await run_cli("agent", "status", env=host.env)
        assert status.code == 0
        assert "phone" in status.out and "paired devices: 1" in status.out
        assert "\nstore: ok\n" in status.out
        assert prober.kinds() == ["pair_reject"]  # still one, well over the same second later

        unpaired = await run_cli("agent", "unpair", "phone", env=host.env)
        assert (unpaired.code, unpaired.out.strip()) == (
            0, f"unpaired phone ({phone.identity.id})")
        missing = await run_cli("agent", "unpair", "phone", env=host.env)
        assert missing.code == 1 and "no paired device named 'phone'" in missing.err


async def test_a_decision_for_other_arguments_is_refused(tmp_path: Path) -> None:
    async with running_host(tmp_path) as (host, relay), devices(relay.url, "phone") as (
            phone,), host.client() as client:
        phone.pair(parse_pairing_uri((await client.new_pairing())["link"]))
        await phone.wait_for(lambda d: "inbox_update" in d.kinds())
        arguments = {"to": "mario@acme.com", "amount": 120}
        item_id = await client.submit_approval("pay", arguments=arguments, timeout=60)
        await phone.wait_for(lambda d: bool(latest_update(d)["approvals"]))
        shown = latest_update(phone)["approvals"][0]
        assert shown["id"] == item_id and shown["arguments"] == arguments
        assert shown["summary"] == "pay(mario@acme.com)"

        phone.decide(item_id, "approve", {**arguments, "amount": 120000})
        phone.send(encode_payload(InboxRequest(since_rev=None)))  # a marker after the decision
        updates = len(phone.bodies("inbox_update"))
        await phone.wait_for(lambda d: len(d.bodies("inbox_update")) > updates)
        assert (await client.outcome(item_id)).state == "pending"
        assert [a["id"] for a in latest_update(phone)["approvals"]] == [item_id]

        phone.decide(item_id, "deny", arguments, reason="not this month")
        outcome = await client.wait(item_id, timeout=10)
        assert (outcome.state, outcome.reason) == ("denied", "not this month")
        assert outcome.decided_by == {"name": "Ada Lovelace", "username": "ada",
                                      "telegram_user_id": 4242}
        await phone.wait_for(lambda d: latest_update(d)["approvals"] == [])
        assert latest_update(phone)["resolved"][0]["id"] == item_id
        assert latest_update(phone)["resolved"][0]["outcome"] == "denied"

        phone.decide(item_id, "approve", arguments)  # too late: the first decision won
        updates = len(phone.bodies("inbox_update"))
        await phone.wait_for(lambda d: len(d.bodies("inbox_update")) > updates)
        assert (await client.outcome(item_id)).state == "denied"
        revs = [body["rev"] for body in phone.bodies("inbox_update")]
        assert revs == sorted(set(revs))

        status = await client.status()
        assert status["open_items"] == [] and status["relay"]["connected"]
        verdicts = _verdicts(host.state, item_id)
        assert verdicts == ["refused: args_sha256 does not match the arguments shown",
                            "accepted", "refused: already denied"]


async def test_notifications_when_enabled_carry_no_arguments(tmp_path: Path) -> None:
    async with running_host(tmp_path, "--notifications") as (host, relay), devices(
            relay.url, "phone") as (phone,), host.client() as client:
        phone.pair(parse_pairing_uri((await client.new_pairing())["link"]))
        await phone.wait_for(lambda d: "inbox_update" in d.kinds())
        item_id = await client.submit_question("Which environment?", ["staging", "prod"])
        await phone.wait_for(lambda d: "notification" in d.kinds())
        assert phone.bodies("notification") == [{
            "item_id": item_id, "category": "clarification", "title": "build-host",
            "body": "Which environment?"}]
        assert (await client.withdraw(item_id)).state == "withdrawn"
        await phone.wait_for(lambda d: [r["outcome"] for r in latest_update(d)["resolved"]]
                             == ["cancelled"])


def _verdicts(state: Path, item_id: str) -> list[str]:
    with sqlite3.connect(state / "agent.sqlite3") as db:
        rows = db.execute("SELECT verdict FROM received WHERE item_id = ? ORDER BY at, rowid",
                          (item_id,)).fetchall()
    return [row[0] for row in rows]

