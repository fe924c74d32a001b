"""Two bot replicas (real ``skald-telegram run`` processes) on one PostgreSQL database,
the stand-in Telegram posting its webhook to each in turn: every tap decided once, and the
leading replica killed in the middle of a burst of taps is replaced within 5 s."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import world as world_module
from conftest import eventually
from test_bot_kill import bot_process
from test_shortcuts import _approval as approval_of
from test_shortcuts import _inbox as inbox
from test_shortcuts import _sealed as sealed
from test_webhook import PUBLIC_URL, SECRET, free_port
from world import ADA, World, approval, button_data, make_world, running_bot

from bot.app import Bot
from bot.bridge import Bridge, TapReport
from bot.cli import main as cli_main
from bot.clock import SYSTEM_CLOCK
from bot.config import parse_config
from bot.core.model import Peer
from bot.core.policy import Action, Decided, Refusal, Refused
from bot.errors import ConfigError, StoreError
from bot.protocol.identity import Identity
from bot.protocol.payloads import ApprovalDecision, Person
from bot.replicas import Replica, default_name
from bot.store import Store
from bot.testing.clock import ShiftedClock

LEASE_S = 2.0
"""The replicas' lease: short, so that the takeover is quick to wait for."""
TAKEOVER_S = 5.0
ITEMS = 12


@pytest.fixture
def shared_database(postgres_url: str) -> Iterator[str]:
    """A migrated PostgreSQL database the bots :mod:`world` configures use."""
    Store.migrate(postgres_url)
    world_module.STORAGE_URL = postgres_url
    try:
        yield postgres_url
    finally:
        world_module.STORAGE_URL = None


def config_of(world: World, name: str) -> Path:
    return world.tmp / f"skald-telegram-{name}.toml"


@asynccontextmanager
async def replica(world: World, name: str, port: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m bot run`` as the replica ``name``, with a state folder of its own holding
    a copy of replica ``a``'s identity, its webhook on ``port``."""
    state = world.tmp / f"state-{name}"
    state.mkdir(exist_ok=True)
    if name != "a":
        shutil.copy(world.tmp / "state-a" / "identity.json", state / "identity.json")
    async with bot_process(world, name=name, settings=(
            f'mode = "webhook"\nwebhook_url = "{PUBLIC_URL}"\nwebhook_secret = "{SECRET}"\n'
            f'[replica]\nname = "{name}"\nlease_seconds = {LEASE_S}\n'
            f'[http]\nlisten = "127.0.0.1:{port}"\n')) as process:
        yield process


def leader_seen_by(world: World, name: str) -> str | None:
    """The leader the replica ``name`` last wrote into its status file."""
    try:
        status = json.loads((world.tmp / f"state-{name}" / "status.json").read_text())
    except (OSError, ValueError):
        return None
    leader = (status.get("replica") or {}).get("leader")
    return leader if isinstance(leader, str) else None


def decided(world: World) -> Counter[str]:
    return Counter(p.approval_id for p in world.agent.received
                   if isinstance(p, ApprovalDecision))


async def test_the_leader_killed_mid_burst_is_replaced_and_each_tap_decided_once(
    tmp_path: Path, shared_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with make_world(tmp_path) as world:
        ports = free_port(), free_port()
        world.tg.api.webhook.spread_to = [f"http://127.0.0.1:{port}" for port in ports]
        async with replica(world, "a", ports[0]) as first:
            await eventually(lambda: leader_seen_by(world, "a") == "a", timeout=20)
            async with replica(world, "b", ports[1]):
                await eventually(lambda: leader_seen_by(world, "b") == "a", timeout=20)
                await world.pair(ADA)
                for n in range(ITEMS):
                    world.agent.submit_approval(approval(f"apr_r{n}"))
                await world.tg.wait_for(lambda tg: len(world.cards(ADA)) == ITEMS, timeout=30)
                cards = [world.card(ADA, f"(apr_r{n})") for n in range(ITEMS)]
                # Each card's Approve as first shown (a decided card loses its buttons).
                approve = [button_data(card, "Approve") for card in cards]

                def tap(n: int) -> str:
                    return world.tg.tap(ADA, cards[n].message_id, ADA, approve[n])

                def shows(n: int) -> bool:
                    """Whether the card still shows its Approve (one decided lost it)."""
                    shown = world.card(ADA, f"(apr_r{n})").buttons()
                    return approve[n] in [button["callback_data"] for button in shown]

                taps = [tap(n) for n in range(ITEMS // 2)]
                await world.tg.wait_for(
                    lambda tg: sum(q in tg.callback_answers for q in taps) >= 2, timeout=20)
                first.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                await first.wait()
                # The rest of the burst, and the same taps again, as impatient people do.
                taps += [tap(n) for n in range(ITEMS // 2, ITEMS)]
                taps += [tap(n) for n in range(2) if shows(n)]
                await eventually(lambda: leader_seen_by(world, "b") == "b", timeout=10)
                takeover = time.monotonic() - killed

                # (A tap the killed replica decided may go unanswered: its decision stands.)
                await world.agent.wait_for(lambda a: len(decided(world)) == ITEMS, timeout=30)
                await asyncio.sleep(LEASE_S)  # time for a decision sent twice to arrive
                assert decided(world) == Counter(f"apr_r{n}" for n in range(ITEMS))
                for n in range(ITEMS):
                    await world.wait_card(ADA, f"(apr_r{n})", lambda m: "Approved by" in m.text,
                                          timeout=20)
                code = await asyncio.to_thread(
                    cli_main, ["health", "--config", str(config_of(world, "b"))])
                out = capsys.readouterr().out
    assert takeover <= TAKEOVER_S, f"replica b led {takeover:.1f} s after the kill"
    # Measured against the lease: no sooner than it could run out after the last renewal.
    assert takeover >= LEASE_S * 2 / 3 - 0.2
    assert code == 0 and "replica b leads (this one)" in out


async def test_two_replicas_share_the_taps_on_one_card_as_one_process_does(
    tmp_path: Path, shared_database: str
) -> None:
    async with make_world(tmp_path) as world:
        ports = free_port(), free_port()
        world.tg.api.webhook.spread_to = [f"http://127.0.0.1:{port}" for port in ports]
        async with replica(world, "a", ports[0]):
            await eventually(lambda: leader_seen_by(world, "a") == "a", timeout=20)
            async with replica(world, "b", ports[1]):
                await eventually(lambda: leader_seen_by(world, "b") == "a", timeout=20)
                await world.pair(ADA)
                world.agent.submit_approval(approval("apr_one"))
                card = await world.wait_card(ADA, "apr_one", timeout=20)
                taps = [world.tap(ADA, card, ADA, label)
                        for label in ("Approve", "Deny", "Approve", "Deny") * 3]
                await world.tg.wait_for(lambda tg: all(q in tg.callback_answers for q in taps),
                                        timeout=30)
                await world.agent.wait_for(lambda a: len(decided(world)) == 1, timeout=20)
                await asyncio.sleep(LEASE_S)
                received = [p for p in world.agent.received if isinstance(p, ApprovalDecision)]
                # The first tap decides; each later one finds the card decided.
                assert [d.decision for d in received] == ["approve"]
                served = {d.status for d in world.tg.api.webhook.deliveries}
                assert served == {200}


async def test_a_second_run_on_one_sqlite_file_is_refused_in_one_line(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        with pytest.raises(StoreError) as refused:
            async with Bot(world.config, clock=world.clock):
                pass
    assert str(refused.value) == (f"another skald-telegram run uses {world.config.database}; "
                                  "several replicas need PostgreSQL ([storage] url)")


@pytest.mark.parametrize(("replica", "error"), [
    ({"lease_seconds": 0.5}, "replica.lease_seconds: must be a number from 1 to 60"),
    ({"lease_seconds": True}, "replica.lease_seconds: must be a number from 1 to 60"),
    ({"name": "a\nb"}, "replica.name: must be printable text"),
    ({"leader": True}, "replica.leader: unknown setting"),
])
def test_replica_settings_are_checked(replica: dict[str, object], error: str,
                                      tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_config({"replica": replica}, base=tmp_path)


def test_a_replica_is_named_by_its_host_and_process_unless_configured(tmp_path: Path) -> None:
    assert (parse_config({}, base=tmp_path).replica_name, default_name()) == \
        (None, f"{socket.gethostname()}:{os.getpid()}")
    config = parse_config({"replica": {"name": "bot-1", "lease_seconds": 2}}, base=tmp_path)
    assert (config.replica_name, config.lease_s) == ("bot-1", 2.0)


@contextlib.contextmanager
def two_replicas(url: str, clock: ShiftedClock) -> Iterator[tuple[Replica, Replica, Store]]:
    """Replicas ``a`` and ``b`` on one database, each with a connection of its own, on one
    clock; and the store of ``a``."""
    stores = [Store.open(url), Store.open(url)]
    try:
        yield (Replica(stores[0], "a", lease_s=LEASE_S, clock=clock),
               Replica(stores[1], "b", lease_s=LEASE_S, clock=clock), stores[0])
    finally:
        for store in stores:
            store.close()


async def test_the_lease_passes_once_it_ran_out_and_the_old_leader_then_exits(
    shared_database: str
) -> None:
    clock = ShiftedClock()
    with two_replicas(shared_database, clock) as (a, b, _):
        assert a.renew() and not b.renew()
        assert (a.leader, b.leader, b.others) == ("a", "a", 1)
        clock.advance(LEASE_S - 0.1)
        assert not b.renew()  # renewed by a less than a lease ago
        clock.advance(0.2)
        assert b.renew() and b.leader == "b"
        lost: list[str] = []
        await asyncio.wait_for(a.keep(on_lead=lambda: None, on_lost=lost.append,
                                      tick=lambda: None), TAKEOVER_S)
        assert lost == ["replica b took the leader's lease"]
        b.release()
        assert a.renew()  # given up: taken at once


async def test_updates_a_dead_replica_claimed_go_to_another_once_its_lease_ran_out(
    shared_database: str
) -> None:
    clock = ShiftedClock()
    with two_replicas(shared_database, clock) as (a, b, store):
        a.renew()
        b.renew()
        for update_id in (7, 8):
            store.updates.add(update_id, "{}")
        now = clock.now_ms()
        assert [u for u, _ in store.updates.claim("a", now, limit=1)] == [7]
        assert [u for u, _ in store.updates.claim("b", now)] == [8]
        assert store.updates.claim("b", now) == [(8, "{}")]  # its own, not a's
        assert store.updates.done(8) and not store.updates.done(8)
        clock.advance(LEASE_S + 0.1)
        b.renew()
        assert store.updates.claim("b", clock.now_ms()) == [(7, "{}")]


def test_two_taps_on_one_card_in_two_processes_come_out_as_in_one(
    tmp_path: Path, shared_database: str
) -> None:
    """The first tap holds its transaction open at its commit while the second comes, on a
    connection of its own as another replica's: the second waits for the card and finds
    it decided."""
    device, agent = Identity.generate("bot"), Identity.generate("agent")
    config = parse_config({"telegram": {"token": "1:x", "admins": [1]},
                           "state": {"dir": str(tmp_path)}}, base=tmp_path)
    stores = [Store.open(shared_database), Store.open(shared_database)]
    try:
        bridges = [Bridge(identity=device, store=store, config=config, clock=SYSTEM_CLOCK)
                   for store in stores]
        stores[0].agents.add_peer(Peer(agent.id, "ws://relay", json.dumps(
            agent.card.to_json()), "agent"), 0)
        stores[0].agents.bind(agent.id, 5, None, 0)
        bridges[0].handle_envelopes([sealed(bridges[0], agent, inbox(1, [approval_of("t1")]))])
        token = stores[0].view().cards.dirty(5)[0].token
        committing = threading.Event()

        def slow_commit() -> None:
            committing.set()
            time.sleep(0.5)

        stores[0].on_commit(slow_commit)
        reports: dict[int, TapReport] = {}

        def tap(replica: int) -> None:
            reports[replica] = bridges[replica].tap(
                token, Action.APPROVE, chat_id=5, tapper=Person("Ada", 5),
                approvers=frozenset({5}))

        first = threading.Thread(target=tap, args=(0,))
        first.start()
        assert committing.wait(5)
        tap(1)
        first.join()
        assert isinstance(reports[0].result, Decided)
        assert reports[1].result == Refused(Refusal.CLOSED)
        counted = stores[1].db.one("SELECT count(*) AS n FROM decisions")
        assert counted is not None and counted["n"] == 1
    finally:
        for store in stores:
            store.close()
