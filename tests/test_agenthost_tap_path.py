"""The agent host's side of a tap: a program waiting on the item is answered as soon as
the decision has committed, and before the decision is acknowledged to the relay; the
devices' update follows, lists only what ended since the one before, and survives a
killed host; the envelopes the relay took leave the outbox together, without a disk sync
each."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from test_grants_agenthost import ADA, RELAY, Clock, Phone, paired_host

from bot.agenthost.outbox import HostOutbox
from bot.agenthost.service import AgentHost
from bot.agenthost.store import AgentStore
from bot.protocol.encoding import args_sha256
from bot.protocol.envelope import seal
from bot.protocol.payloads import ApprovalDecision, InboxRequest, InboxUpdate, encode_payload


def updates(phone: Phone) -> list[InboxUpdate]:
    return [p for p in phone.received() if isinstance(p, InboxUpdate)]


def submit(host: AgentHost) -> str:
    item = host.submit_approval(tool="Bash", summary="run: ls", arguments={"command": "ls"},
                                blocks=None, timeout_s=600)
    return item.item_id


def approval_envelope(host: AgentHost, phone: Phone, item_id: str) -> dict[str, object]:
    decision = ApprovalDecision(str(uuid.uuid4()), item_id, "approve", None, ADA,
                                "2027-01-15T08:00:00Z",
                                args_sha256(host.get(item_id).wire["arguments"]), None)
    return seal(encode_payload(decision), sender=phone.identity,
                recipient=host.identity.card, ts_ms=phone.clock()).to_json()


async def test_the_waiting_program_is_answered_before_the_update_is_built(
        tmp_path: Path) -> None:
    with paired_host(tmp_path, Clock(), on_relay=lambda: True) as (host, phone):
        item_id = submit(host)
        assert updates(phone)  # the update that showed the item
        seen_when_answered: list[int] = []

        async def ask() -> None:
            outcome = await host.wait(item_id, 10)
            seen_when_answered.append(len(updates(phone)))
            assert outcome.state.value == "approved"

        waiting = asyncio.create_task(ask())
        await asyncio.sleep(0)  # the long poll is in place
        await host.inbound.on_envelope(approval_envelope(host, phone, item_id))
        await waiting
        assert seen_when_answered == [0]
        update = phone.last_update()
        assert update.approvals == () and [r.id for r in update.resolved] == [item_id]


async def test_the_waiting_program_has_answered_before_the_decision_is_acknowledged(
        tmp_path: Path) -> None:
    with paired_host(tmp_path, Clock(), on_relay=lambda: True) as (host, phone):
        item_id = submit(host)
        answered: list[str] = []

        async def ask() -> None:
            outcome = await host.wait(item_id, 10)
            await asyncio.sleep(0)  # a response goes through a few awaits on its way out
            answered.append(outcome.state.value)

        waiting = asyncio.create_task(ask())
        await asyncio.sleep(0)
        # The relay client acknowledges the envelope once this returns.
        await host.inbound.on_delivery(approval_envelope(host, phone, item_id))
        assert answered == ["approved"]
        await waiting


async def test_an_update_a_killed_host_owed_is_sent_when_it_starts(tmp_path: Path) -> None:
    clock = Clock()
    with paired_host(tmp_path, clock, on_relay=lambda: True) as (host, phone):
        item_id = submit(host)
        phone.received()
        await host.inbound.on_envelope(approval_envelope(host, phone, item_id))
        identity = host.identity
        # Killed once the decision committed, before the loop's next turn queued the update.
        host.store.close()
    store = AgentStore(tmp_path / "agent")
    try:
        again = AgentHost(store, identity, RELAY, clock=clock, on_relay=lambda: True)
        phone.host = again
        assert again.get(item_id).state.value == "approved"
        assert updates(phone) == []
        running = asyncio.create_task(again.run())
        await asyncio.sleep(0)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        update = phone.last_update()
        assert update.approvals == () and [r.id for r in update.resolved] == [item_id]
        assert store.get_meta("inbox_owed") is None
    finally:
        store.close()


async def test_the_envelopes_the_relay_took_leave_the_outbox_together(
        tmp_path: Path) -> None:
    store = AgentStore(tmp_path / "agent")
    try:
        for n in range(3):
            store.add_outgoing(RELAY, {"id": f"e{n}", "v": 1}, 0)
        outbox = HostOutbox(store)
        outbox.outbox_mark_sent("e0")
        outbox.outbox_mark_sent("e1")
        # Not sent again, not counted as waiting; their rows go later, together.
        assert [e["id"] for e in outbox.outbox_pending(RELAY)] == ["e2"]
        assert outbox.size() == 1 and store.outbox_size() == 3
        # A host killed now sends them again (their recipient's replay set drops them).
        assert [e["id"] for e in HostOutbox(store).outbox_pending(RELAY)] == ["e0", "e1", "e2"]
        outbox.forget()
        assert store.outbox_size() == 1 and outbox.size() == 1
        assert [e["id"] for e in HostOutbox(store).outbox_pending(RELAY)] == ["e2"]
    finally:
        store.close()


async def test_an_update_lists_what_ended_since_the_last_one_and_an_asked_one_all(
        tmp_path: Path) -> None:
    with paired_host(tmp_path, Clock(), on_relay=lambda: True) as (host, phone):
        first, second = submit(host), submit(host)
        await host.inbound.on_envelope(approval_envelope(host, phone, first))
        await asyncio.sleep(0)
        assert [r.id for r in phone.last_update().resolved] == [first]
        await host.inbound.on_envelope(approval_envelope(host, phone, second))
        await asyncio.sleep(0)
        # The device was sent the update that listed the first: not again.
        assert [r.id for r in phone.last_update().resolved] == [second]
        withdrawn = submit(host)
        host.withdraw(withdrawn)
        assert [r.id for r in phone.last_update().resolved] == [withdrawn]
        # A device that asks (after a reconnection, say) gets the last ones that ended.
        await phone.send(InboxRequest(since_rev=None))
        assert [(r.id, r.outcome) for r in phone.last_update().resolved] == [
            (withdrawn, "cancelled"), (second, "approved"), (first, "approved")]
