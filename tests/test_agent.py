"""The agent end to end: pairing, inbox updates, decisions and answers, through the real
relay over loopback, with a device built from the protocol core."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import pytest
from conftest import eventually

from bot.clock import Clock
from bot.errors import EnvelopeRefused, ProtocolError
from bot.protocol.encoding import args_sha256
from bot.protocol.envelope import open_envelope, seal
from bot.protocol.identity import Identity, PublicCard
from bot.protocol.pairing import build_pair_request, parse_pairing_uri
from bot.protocol.payloads import (
    ApprovalDecision,
    ClarificationAnswer,
    InboxRequest,
    InboxUpdate,
    Notification,
    PairAccept,
    Payload,
    Person,
    UnknownPayload,
    encode_payload,
)
from bot.relay.client import MemoryOutbox, RelayClient, one_at_a_time
from bot.relay.server import RelayServer
from bot.testing.agent import Agent
from bot.testing.replay import MemoryReplayGuard

TIMEOUT = 10.0
ADA = Person(name="Ada Lovelace", telegram_user_id=4242, username="ada")
ARGUMENTS = {"to": "to@mail.com", "subject": "Q3 Estimate", "body": "Numbers attached."}
APPROVAL: dict[str, object] = {
    "id": "apr_1",
    "tool": "send_email",
    "summary": "Send an email to to@mail.com",
    "blocks": {
        "v": 1,
        "summary": "Send an email to to@mail.com",
        "blocks": [
            {"type": "key_value", "key": "To", "value": "to@mail.com", "value_type": "email"}
        ],
    },
    "arguments": ARGUMENTS,
    "created_at": "2026-11-29T10:00:00Z",
    "expires_at": "2026-11-29T10:15:00Z",
}
CLARIFICATION: dict[str, object] = {
    "id": "clr_2",
    "question": "Which environment should I deploy to?",
    "options": ["staging", "production"],
    "created_at": "2026-11-29T10:00:00Z",
    "expires_at": None,
}


def now_ms() -> int:
    return int(time.time() * 1000)


class Device:
    """An end-user client reduced to the protocol: it opens what arrives and records it."""

    def __init__(self, relay_url: str, name: str = "Telegram @test_bot") -> None:
        self.relay_url = relay_url
        self.identity = Identity.generate(name)
        self.peers: dict[str, PublicCard] = {}
        self.payloads: list[Payload] = []
        self.refused: list[EnvelopeRefused] = []
        self._replay = MemoryReplayGuard()
        self._outbox = MemoryOutbox()
        self.client = RelayClient(
            relay_url,
            self.identity,
            handler=one_at_a_time(self._on_envelope),
            outbox=self._outbox,
            backoff_initial=0.02,
            backoff_max=0.2,
        )
        self._task = asyncio.create_task(self.client.run())

    @property
    def id(self) -> str:
        return self.identity.id

    async def _on_envelope(self, wire: dict[str, object]) -> None:
        try:
            opened = open_envelope(
                wire, me=self.identity, peers=self.peers, now_ms=now_ms(), replay=self._replay
            )
        except EnvelopeRefused as exc:
            self.refused.append(exc)
            return
        self._replay.remember(opened.envelope.id, opened.envelope.ts)
        self.payloads.append(opened.payload)

    def pair(self, uri_text: str) -> PublicCard:
        uri = parse_pairing_uri(uri_text)
        self.peers[uri.agent.id] = uri.agent
        self.send(uri.agent, build_pair_request(self.identity, uri, device_name="Test device"))
        return uri.agent

    def send(self, to: PublicCard, payload: Payload) -> None:
        sealed = seal(encode_payload(payload), sender=self.identity, recipient=to, ts_ms=now_ms())
        self._outbox.add(self.relay_url, sealed.to_json())
        self.client.wake()

    def updates(self) -> list[InboxUpdate]:
        return [p for p in self.payloads if isinstance(p, InboxUpdate)]

    async def latest_update(self, predicate: Callable[[InboxUpdate], bool]) -> InboxUpdate:
        await eventually(lambda: any(predicate(u) for u in self.updates()))
        return [u for u in self.updates() if predicate(u)][-1]

    async def close(self) -> None:
        await self.client.stop()
        await self._task


@pytest.fixture
async def agent(relay: RelayServer) -> AsyncIterator[Agent]:
    agent = Agent(Identity.generate("build-bot"), relay.url, backoff_initial=0.02)
    await agent.start()
    await agent.wait_for(lambda a: a.connected)
    yield agent
    await agent.stop()


@pytest.fixture
async def device(relay: RelayServer, agent: Agent) -> AsyncIterator[Device]:
    device = Device(relay.url)
    device.pair(agent.new_pairing_uri())
    await eventually(lambda: len(device.updates()) == 1)
    yield device
    await device.close()


def decision(
    approval_id: str, arguments: object, verdict: str = "approve", decision_id: str | None = None
) -> ApprovalDecision:
    return ApprovalDecision(
        decision_id=decision_id or str(uuid.uuid4()),
        approval_id=approval_id,
        decision=verdict,
        reason=None,
        decided_by=ADA,
        decided_at="2026-11-29T10:03:12Z",
        args_sha256=args_sha256(arguments),
    )


async def test_pairing_end_to_end(relay: RelayServer, agent: Agent) -> None:
    device = Device(relay.url)
    agent_card = device.pair(agent.new_pairing_uri())
    assert agent_card == agent.identity.card
    await eventually(lambda: len(device.payloads) == 2)
    accept, update = device.payloads
    assert accept == PairAccept(
        agent_id=agent.identity.id, agent_name="build-bot", device_id=device.id
    )
    assert isinstance(update, InboxUpdate)
    assert (update.rev, update.agent_name, update.approvals) == (agent.rev, "build-bot", ())
    assert agent.peers[device.id].sign_pub == device.identity.card.sign_pub
    assert agent.refused == []
    await device.close()


async def test_a_pairing_secret_works_once(relay: RelayServer, agent: Agent) -> None:
    uri = agent.new_pairing_uri()
    first, second = Device(relay.url), Device(relay.url)
    first.pair(uri)
    await agent.wait_for(lambda a: first.id in a.peers)
    second.pair(uri)
    await agent.wait_for(lambda a: len(a.refused) == 1)
    assert "no open pairing secret" in agent.refused[0]
    assert second.id not in agent.peers
    assert second.payloads == []
    await first.close()
    await second.close()


async def test_approval_decided_on_one_device_resolves_everywhere(
    relay: RelayServer, agent: Agent, device: Device
) -> None:
    other = Device(relay.url, "Phone")
    other.pair(agent.new_pairing_uri())
    await eventually(lambda: len(other.updates()) == 1)
    agent.submit_approval(APPROVAL)
    shown = await device.latest_update(lambda u: bool(u.approvals))
    (approval,) = shown.approvals
    assert (approval.id, approval.tool, approval.arguments) == ("apr_1", "send_email", ARGUMENTS)
    await other.latest_update(lambda u: bool(u.approvals))

    device.send(agent.identity.card, decision("apr_1", approval.arguments))
    await agent.wait_for(lambda a: len(a.decisions) == 1)
    for seen_by in (device, other):
        after = await seen_by.latest_update(lambda u: bool(u.resolved))
        assert after.approvals == ()
        assert [(r.id, r.outcome, r.by) for r in after.resolved] == [
            ("apr_1", "approved", "Ada Lovelace")
        ]
        assert after.rev > shown.rev
    assert agent.refused == []
    await other.close()


async def test_a_repeated_decision_is_harmless(agent: Agent, device: Device) -> None:
    agent.submit_approval(APPROVAL)
    again = decision("apr_1", ARGUMENTS, verdict="deny")
    device.send(agent.identity.card, again)
    await agent.wait_for(lambda a: len(a.decisions) == 1)
    device.send(agent.identity.card, again)  # a new envelope, the same decision_id
    await agent.wait_for(lambda a: sum(isinstance(p, ApprovalDecision) for p in a.received) == 2)
    assert len(agent.decisions) == 1
    assert agent.refused == []
    resolved = await device.latest_update(lambda u: bool(u.resolved))
    assert resolved.resolved[0].outcome == "denied"


async def test_a_decision_for_other_arguments_is_refused(agent: Agent, device: Device) -> None:
    agent.submit_approval(APPROVAL)
    device.send(agent.identity.card, decision("apr_1", {**ARGUMENTS, "to": "eve@mail.com"}))
    await agent.wait_for(lambda a: len(a.refused) == 1)
    assert "args_sha256" in agent.refused[0]
    assert agent.decisions == []
    assert [item["id"] for item in agent.inbox()["approvals"]] == ["apr_1"]  # type: ignore[attr-defined]


async def test_clarification_answered(agent: Agent, device: Device) -> None:
    agent.submit_clarification(CLARIFICATION)
    asked = await device.latest_update(lambda u: bool(u.clarifications))
    assert asked.clarifications[0].options == ("staging", "production")
    answer = ClarificationAnswer(
        answer_id=str(uuid.uuid4()),
        clarification_id="clr_2",
        answer="staging",
        answered_by=ADA,
        answered_at="2026-11-29T10:04:00Z",
    )
    device.send(agent.identity.card, answer)
    device.send(agent.identity.card, answer)
    await agent.wait_for(lambda a: len(a.answers) == 1)
    after = await device.latest_update(lambda u: bool(u.resolved))
    assert (after.clarifications, after.resolved[0].outcome) == ((), "answered")
    await agent.wait_for(lambda a: sum(isinstance(p, ClarificationAnswer) for p in a.received) == 2)
    assert len(agent.answers) == 1


async def test_inbox_request_and_resolve(agent: Agent, device: Device) -> None:
    agent.submit_approval(APPROVAL)
    agent.submit_clarification(CLARIFICATION)
    await device.latest_update(lambda u: bool(u.approvals and u.clarifications))
    count = len(device.updates())
    device.send(agent.identity.card, InboxRequest(since_rev=None))
    await eventually(lambda: len(device.updates()) == count + 1)
    full = device.updates()[-1]
    assert ([a.id for a in full.approvals], [c.id for c in full.clarifications]) == (
        ["apr_1"],
        ["clr_2"],
    )
    assert agent.resolve("apr_1", "cancelled")
    assert not agent.resolve("apr_1", "cancelled")
    after = await device.latest_update(lambda u: bool(u.resolved))
    assert [(r.id, r.outcome) for r in after.resolved] == [("apr_1", "cancelled")]
    assert [c.id for c in after.clarifications] == ["clr_2"]


async def test_rev_is_strictly_increasing_from_the_clock(relay: RelayServer) -> None:
    frozen = now_ms() // 1000 * 1000  # whole seconds: exact as float seconds

    class Frozen(Clock):
        def time(self) -> float:
            return frozen / 1000

    agent = Agent(Identity.generate("build-bot"), relay.url, clock=Frozen())
    assert agent.rev == frozen
    agent.submit_approval(APPROVAL)
    agent.submit_clarification(CLARIFICATION)
    agent.resolve("apr_1", "expired")
    assert agent.rev == frozen + 3


async def test_notification_twins(relay: RelayServer) -> None:
    agent = Agent(Identity.generate("build-bot"), relay.url, notifications=True)
    await agent.start()
    device = Device(relay.url)
    device.pair(agent.new_pairing_uri())
    await eventually(lambda: len(device.updates()) == 1)
    agent.submit_approval(APPROVAL)
    await eventually(lambda: any(isinstance(p, Notification) for p in device.payloads))
    (note,) = [p for p in device.payloads if isinstance(p, Notification)]
    assert note == Notification("apr_1", "approval", "build-bot", "Send an email to to@mail.com")
    await device.close()
    await agent.stop()


async def test_send_raw_and_strangers(relay: RelayServer, agent: Agent, device: Device) -> None:
    agent.send_raw(device.id, "future_kind", {"anything": 1})
    await eventually(lambda: UnknownPayload("future_kind") in device.payloads)
    with pytest.raises(ProtocolError):
        agent.send_raw("0" * 32, "inbox_update", {})
    stranger = Device(relay.url, "stranger")
    stranger.send(agent.identity.card, InboxRequest())
    await agent.wait_for(lambda a: len(a.refused) == 1)
    assert "unknown_sender" in agent.refused[0]
    await stranger.close()


def edited_decision(approval_id: str, arguments: dict[str, object]) -> ApprovalDecision:
    """An approve of ``ARGUMENTS`` as shown, with ``arguments`` as edited (§3.3)."""
    return replace(decision(approval_id, ARGUMENTS), arguments=arguments,
                   edited_sha256=args_sha256(arguments))


async def test_an_edited_approval_is_taken(agent: Agent, device: Device) -> None:
    agent.submit_approval({**APPROVAL, "editable": ["body"]})
    edited = {**ARGUMENTS, "body": "Numbers attached, rounded."}
    device.send(agent.identity.card, edited_decision("apr_1", edited))
    await agent.wait_for(lambda a: len(a.decisions) == 1)
    assert agent.refused == []
    assert agent.decisions[0].arguments == edited
    resolved = await device.latest_update(lambda u: bool(u.resolved))
    assert [(r.id, r.outcome) for r in resolved.resolved] == [("apr_1", "approved")]
    (entry,) = agent.inbox()["resolved"]  # type: ignore[misc]
    assert entry["edited"] is True  # the wire entry says it was edited


async def test_an_edit_that_changes_nothing_is_a_plain_approval(
    agent: Agent, device: Device
) -> None:
    agent.submit_approval({**APPROVAL, "editable": ["body"]})
    device.send(agent.identity.card, edited_decision("apr_1", dict(ARGUMENTS)))
    await agent.wait_for(lambda a: len(a.decisions) == 1)
    assert agent.refused == []
    (entry,) = agent.inbox()["resolved"]  # type: ignore[misc]
    assert "edited" not in entry


@pytest.mark.parametrize(
    ("editable", "edited", "why"),
    [
        ([], {**ARGUMENTS, "body": "x"}, "lists no editable keys"),
        (["body"], {**ARGUMENTS, "to": "eve@mail.com"}, "'to' is not editable"),
        (["body"], {**ARGUMENTS, "body": 7}, "changed its type"),
        (["body"], {**ARGUMENTS, "body": "x", "cc": "eve@mail.com"}, "add or remove a key"),
        (["body"], {**ARGUMENTS, "body": "x\u202e"}, "invisible or control character"),
    ],
)
async def test_a_bad_edit_is_refused_and_the_approval_stays_open(
    agent: Agent, device: Device, editable: list[str], edited: dict[str, object], why: str
) -> None:
    agent.submit_approval({**APPROVAL, "editable": editable} if editable else APPROVAL)
    device.send(agent.identity.card, edited_decision("apr_1", edited))
    await agent.wait_for(lambda a: len(a.refused) == 1)
    assert why in agent.refused[0]
    assert agent.decisions == []
    assert [item["id"] for item in agent.inbox()["approvals"]] == ["apr_1"]  # type: ignore[attr-defined]
