"""The agent host's grants, in process with an injected clock: what an approval offers,
a decision's grant kept or refused, covered calls approved at once with an activity entry,
revoke, expiry and a restart. Devices are real identities whose envelopes the host opens;
what the host sends them is read back from its outbox and opened as a device would."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.agenthost import grants as gr
from bot.agenthost.service import AgentHost, Refusal
from bot.agenthost.store import AgentStore
from bot.clock import Clock as SystemClock
from bot.protocol.encoding import args_sha256
from bot.protocol.envelope import open_envelope, seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import (
    Activity,
    ApprovalDecision,
    GrantRequest,
    GrantRevoke,
    InboxUpdate,
    Payload,
    Person,
    encode_payload,
)
from bot.testing.replay import MemoryReplayGuard

RELAY = "ws://127.0.0.1:9/v1/connect"
T0 = 1_800_000_000_000
ADA = Person("Ada Lovelace", 4242, "ada")
HOOK_KEY = "Claude Code|s1|shell|git status"
LABEL = "`git status` in this session"
OFFER = gr.scope_offer("hook", HOOK_KEY, LABEL)
KEY = OFFER.key
"""The key the host offers and keeps for the hook's scope."""


class Clock(SystemClock):
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now

    def time(self) -> float:
        return self.now / 1000

    def now_ms(self) -> int:
        return self.now

    def advance(self, minutes: float) -> None:
        self.now += int(minutes * 60_000)


class Phone:
    """A paired device: seals decisions to the host and opens what the host sent it."""

    def __init__(self, host: AgentHost, identity: Identity, clock: Clock) -> None:
        self.host, self.identity, self.clock = host, identity, clock
        self.replay = MemoryReplayGuard()
        self.seen: set[str] = set()

    async def send(self, payload: Payload) -> None:
        envelope = seal(encode_payload(payload), sender=self.identity,
                        recipient=self.host.identity.card, ts_ms=self.clock())
        await self.host.inbound.on_envelope(envelope.to_json())
        await asyncio.sleep(0)  # the host queues the devices' update on its next turn

    def received(self) -> list[Payload]:
        """Payloads the host queued for this device since the last call."""
        found = []
        for raw in self.host.store.outbox_pending(RELAY):
            if raw["to"] != self.identity.id or raw["id"] in self.seen:
                continue
            self.seen.add(str(raw["id"]))
            opened = open_envelope(raw, me=self.identity,
                                   peers={self.host.identity.id: self.host.identity.card},
                                   now_ms=self.clock(), replay=self.replay)
            found.append(opened.payload)
        return found

    def last_update(self) -> InboxUpdate:
        updates = [p for p in self.received() if isinstance(p, InboxUpdate)]
        assert updates, "no inbox_update was sent"
        return updates[-1]

    async def decide(self, item_id: str, *, grant: GrantRequest | None,
                     decision: str = "approve") -> None:
        item = self.host.get(item_id)
        await self.send(ApprovalDecision(
            str(uuid.uuid4()), item_id, decision, None, ADA, "2027-01-15T08:00:00Z",
            args_sha256(item.wire["arguments"]), grant))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[AgentHost, Phone, Clock]]:
    clock = Clock()
    with paired_host(tmp_path, clock, on_relay=lambda: True) as (host, phone):
        yield host, phone, clock


@contextmanager
def paired_host(folder: Path, clock: Clock, *, on_relay: Callable[[], bool] | None = None) \
        -> Iterator[tuple[AgentHost, Phone]]:
    """A host in ``folder`` with one paired device, and that device."""
    store = AgentStore(folder / "agent")
    device = Identity.generate("Telegram @bot")
    store.add_device(device.card, "telegram", clock())
    host = AgentHost(store, Identity.generate("laptop"), RELAY, clock=clock, on_relay=on_relay)
    try:
        yield host, Phone(host, device, clock)
    finally:
        store.close()


def git_status(host: AgentHost, command: str = "git status -s", **extra: Any) -> Any:
    return host.submit_approval(tool="Bash", summary=f"run: {command}",
                                arguments={"command": command, **extra}, blocks=None,
                                timeout_s=600, grant=OFFER)


async def test_a_grant_covers_its_key_until_it_expires(
        world: tuple[AgentHost, Phone, Clock]) -> None:
    host, phone, clock = world
    first = git_status(host)
    offered = phone.last_update().approvals[0].grant_offer
    assert offered is not None and (offered.key, offered.label) == (KEY, LABEL)
    await phone.decide(first.item_id, grant=GrantRequest(KEY, 30))
    assert host.get(first.item_id).state.value == "approved"
    update = phone.last_update()
    assert [(g.key, g.label, g.granted_by.name, g.uses) for g in update.grants] == [
        (KEY, LABEL, "Ada Lovelace", 0)]

    clock.advance(18)
    covered = git_status(host, "git status --porcelain")
    assert covered.state.value == "approved"
    assert covered.reason == ("approved by Ada Lovelace's grant (`git status` in this "
                              "session, 12 min left)")
    activity = [p for p in phone.received() if isinstance(p, Activity)]
    assert len(activity) == 1
    entry = activity[0].entries[0]
    assert (entry.tool, entry.summary, entry.grant_id) == (
        "Bash", "run: git status --porcelain", update.grants[0].id)
    assert [g.uses for g in host.grants()] == [1]

    asks = host.submit_approval(tool="Bash", summary="run: git log", arguments={},
                                blocks=None, timeout_s=600,
                                grant=gr.scope_offer("hook", "Claude Code|s1|shell|git log",
                                                     "x"))
    assert asks.pending

    clock.advance(13)
    host.expire_due()
    assert phone.last_update().grants == ()
    assert git_status(host, "git status").pending
    assert host.grants() == []


async def test_an_unoffered_key_is_refused_and_the_approval_applies(
        world: tuple[AgentHost, Phone, Clock]) -> None:
    host, phone, _clock = world
    item = git_status(host)
    await phone.decide(item.item_id, grant=GrantRequest("Claude Code|s1|shell|rm", 30))
    assert host.get(item.item_id).state.value == "approved"
    assert host.grants() == []
    assert phone.last_update().grants == ()

    plain = host.submit_approval(tool="deploy", summary=None, arguments={"env": "prod"},
                                 blocks=None, timeout_s=600)
    assert "grant_offer" not in plain.wire
    await phone.decide(plain.item_id, grant=GrantRequest("deploy", 30))
    assert host.get(plain.item_id).state.value == "approved" and host.grants() == []


async def test_no_offer_for_a_secret_and_a_key_never_widens(
        world: tuple[AgentHost, Phone, Clock]) -> None:
    host, phone, _clock = world
    secret = host.submit_approval(
        tool="Bash", summary="run: git status", arguments={"api_key": "sk-live-123456789"},
        blocks=None, timeout_s=600, grant=OFFER)
    assert "grant_offer" not in secret.wire

    item = git_status(host)
    await phone.decide(item.item_id, grant=GrantRequest(KEY, 500))
    (grant,) = host.grants()
    assert grant.expires_ms - grant.granted_ms == 120 * 60_000  # the offer's max_minutes
    wider = host.submit_approval(tool="Bash", summary="run: git status", arguments={},
                                 blocks=None, timeout_s=600,
                                 grant=gr.scope_offer("hook", HOOK_KEY, "every git command"))
    assert wider.pending  # other words: another key
    assert host.grants()[0].label == LABEL


async def test_revoked_from_a_device_or_here_and_kept_over_a_restart(
        tmp_path: Path, world: tuple[AgentHost, Phone, Clock]) -> None:
    host, phone, clock = world
    await phone.decide(git_status(host).item_id, grant=GrantRequest(KEY, 30))
    (grant,) = host.grants()

    restarted = AgentHost(host.store, host.identity, RELAY, clock=clock,
                          on_relay=lambda: True)
    assert [g.grant_id for g in restarted.grants()] == [grant.grant_id]
    assert git_status(restarted).state.value == "approved"

    await phone.send(GrantRevoke(grant.grant_id, ADA, "2027-01-15T08:01:00Z"))
    assert host.grants() == [] and phone.last_update().grants == ()
    assert git_status(host).pending
    await phone.send(GrantRevoke(grant.grant_id, ADA, "2027-01-15T08:02:00Z"))  # harmless

    await phone.decide(git_status(host, "git status -b").item_id, grant=GrantRequest(KEY, 5))
    (second,) = host.grants()
    host.revoke_grant(second.grant_id)
    assert phone.last_update().grants == ()
    with pytest.raises(Refusal, match="no grant"):
        host.revoke_grant(second.grant_id)


@pytest.fixture
def offline_world(tmp_path: Path) -> Iterator[tuple[AgentHost, Phone, Clock, list[bool]]]:
    """A host whose relay session the test turns on and off (``online[0]``)."""
    clock, online = Clock(), [True]
    with paired_host(tmp_path, clock, on_relay=lambda: online[0]) as (host, phone):
        yield host, phone, clock, online


async def granted_then_off_the_relay(host: AgentHost, phone: Phone,
                                    online: list[bool]) -> None:
    """A grant given while on the relay; then the host drops off it."""
    await phone.decide(git_status(host).item_id, grant=GrantRequest(KEY, 60))
    host.expire_due()
    online[0] = False


async def test_a_grant_lapses_after_five_minutes_off_the_relay(
        offline_world: tuple[AgentHost, Phone, Clock, list[bool]]) -> None:
    host, phone, clock, online = offline_world
    await granted_then_off_the_relay(host, phone, online)
    clock.advance(4.9)
    host.expire_due()
    assert git_status(host).state.value == "approved"  # a short drop changes nothing
    clock.advance(0.2)
    host.expire_due()
    assert host.grants() == [] and phone.last_update().grants == ()
    assert git_status(host).pending
    online[0] = True  # back on the relay: a lapsed grant stays ended
    host.expire_due()
    assert git_status(host).pending and host.grants() == []


async def test_a_call_off_the_relay_too_long_is_asked_even_before_the_tick(
        offline_world: tuple[AgentHost, Phone, Clock, list[bool]]) -> None:
    host, phone, clock, online = offline_world
    await granted_then_off_the_relay(host, phone, online)
    clock.advance(30)
    assert git_status(host).pending  # no tick ran meanwhile: the call itself checks


async def test_a_restarted_host_counts_the_time_it_was_stopped(
        offline_world: tuple[AgentHost, Phone, Clock, list[bool]]) -> None:
    host, phone, clock, online = offline_world
    await phone.decide(git_status(host).item_id, grant=GrantRequest(KEY, 60))
    host.expire_due()  # on the relay: the moment is saved
    clock.advance(3)
    online[0] = False
    soon = AgentHost(host.store, host.identity, RELAY, clock=clock, on_relay=lambda: False)
    assert git_status(soon).state.value == "approved"  # 3 minutes off: still in force
    clock.advance(7)
    later = AgentHost(host.store, host.identity, RELAY, clock=clock, on_relay=lambda: False)
    assert git_status(later).pending
    assert later.grants() == []


async def test_a_revoke_seen_ends_the_grant_for_every_later_call(
        offline_world: tuple[AgentHost, Phone, Clock, list[bool]]) -> None:
    host, phone, clock, _online = offline_world
    await phone.decide(git_status(host).item_id, grant=GrantRequest(KEY, 60))
    (grant,) = host.grants()
    await phone.send(GrantRevoke(grant.grant_id, ADA, "2027-01-15T08:01:00Z"))
    for command in ("git status", "git status -s", "git status --porcelain"):
        assert git_status(host, command).pending
    restarted = AgentHost(host.store, host.identity, RELAY, clock=clock,
                          on_relay=lambda: True)
    assert git_status(restarted).pending and restarted.grants() == []


async def test_a_script_grant_never_covers_a_hook_call_nor_the_other_way(
        world: tuple[AgentHost, Phone, Clock]) -> None:
    host, phone, _clock = world
    script = gr.script_offer(HOOK_KEY, LABEL)
    item = host.submit_approval(tool="Bash", summary="run: git status", arguments={},
                                blocks=None, timeout_s=600, grant=script)
    offered = phone.last_update().approvals[0].grant_offer
    assert offered is not None and offered.label == (
        f"offered by a script: key `{HOOK_KEY}` — {LABEL}")
    await phone.decide(item.item_id, grant=GrantRequest(script.key, 30))
    assert [g.key for g in host.grants()] == [script.key]
    assert git_status(host).pending  # the hook's own key, same words: not covered
    again = host.submit_approval(tool="deploy", summary=None, arguments={}, blocks=None,
                                 timeout_s=600, grant=gr.script_offer(HOOK_KEY, "other"))
    assert again.state.value == "approved"  # a script's key covers the script's asks

    await phone.decide(git_status(host).item_id, grant=GrantRequest(KEY, 30))
    forged = gr.script_offer(KEY, LABEL)  # the hook grant's own key, named by a script
    assert host.submit_approval(tool="Bash", summary="run: git status", arguments={},
                                blocks=None, timeout_s=600, grant=forged).pending


async def test_a_grant_never_covers_a_call_that_holds_a_credential(
        world: tuple[AgentHost, Phone, Clock]) -> None:
    host, phone, _clock = world
    item = git_status(host)
    await phone.decide(item.item_id, grant=GrantRequest(KEY, 30))
    for command in ("git status -- https://ada:hunter2@example.com",
                    "git status -s 'Authorization: Bearer tok-987'"):
        asked = git_status(host, command)
        assert asked.pending and "grant_offer" not in asked.wire
        assert "hunter2" not in asked.summary and "tok-987" not in asked.summary
    assert git_status(host, "git status --porcelain").state.value == "approved"
    entries = [e for p in phone.received() if isinstance(p, Activity) for e in p.entries]
    assert [e.summary for e in entries] == ["run: git status --porcelain"]


async def test_an_edited_decision_is_refused_and_the_approval_stays_open(
        world: tuple[AgentHost, Phone, Clock]) -> None:
    # The host lists no editable keys: an approval of edited arguments must not run the
    # call as it was shown, nor any other.
    host, phone, _ = world
    item = git_status(host)
    edited = {**item.wire["arguments"], "command": "git push --force"}
    await phone.send(ApprovalDecision(
        str(uuid.uuid4()), item.item_id, "approve", None, ADA, "2027-01-15T08:00:00Z",
        args_sha256(item.wire["arguments"]), arguments=edited,
        edited_sha256=args_sha256(edited)))
    assert host.get(item.item_id).pending
