"""The bot under the largest payloads the protocol allows: event-loop stalls, snapshot cost.

The bot runs as its own process (``bench/monitored_bot.py``: the bot of ``skald-telegram
run`` plus a task that measures how late the event loop wakes it, and the loop and CPU time
of every envelope it applies), so that the agents, relay and Bot API stand-in of this
process are not counted. Each agent is paired through ``/pair`` in a private chat of its
own. In turn:

1. a card of 6,500 secrets in 13,000 blocks (the card shows a few dozen, the attached file
   all): posted, tapped, decided and edited;
2. an agent whose first ``inbox_update`` holds 1,000 items (the protocol's most);
3. an agent whose inbox grows one item at a time, every update a complete snapshot (it
   waits for the bot every :data:`GROW_WAVE` updates, as the relay keeps at most 64 MiB
   from one sender for one recipient);
4. more agents until 10,000 items are open, then one more approval, posted and decided.

Floors, measured in this process in the same run: ``json.loads`` of the same payload text
(what applying a snapshot cannot go below); for the growing inbox also verifying and
decrypting every snapshot (what every envelope costs before a byte of it is read), beside
what one durable SQLite commit for each snapshot would cost (the bot commits once for the
envelopes that queued up on its relay session); for the stall goal the goal itself (25 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_bot import _bot_environment, _now, _open_items, _percentile, _read_only, _until
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite
from world import FAST_RELAY, TOKEN, approval

from bot.config import load_config
from bot.playground.stub import TelegramStub
from bot.protocol.envelope import build_info, seal
from bot.protocol.identity import Identity, verify_signature
from bot.protocol.payloads import raw_payload
from bot.relay.server import RelayServer
from bot.testing.agent import Agent

HERE = Path(__file__).resolve().parent
SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.CHACHA20_POLY1305)
STALL_GOAL_S = 0.025
SNAPSHOT_GOAL_S = 0.005
GROW_GOAL_S = 1.0
TIMEOUT_S = 600.0
USER_BASE = 700_000
PACE_S = 1.0
GROW_WAVE = 25
"""Snapshots the growing agent sends before it waits for the bot to catch up."""


@dataclass(frozen=True)
class Sizes:
    secrets: int
    snapshot: int
    grow: int
    open_items: int


FULL = Sizes(secrets=6500, snapshot=1000, grow=1000, open_items=10_000)
QUICK = Sizes(secrets=650, snapshot=100, grow=50, open_items=300)


def _secrets_approval(item_id: str, count: int) -> dict[str, Any]:
    """``count`` secrets, each echoed in a row of its own: ``2 * count`` blocks, short
    enough that 6,500 secrets fit in one envelope."""
    blocks: list[dict[str, Any]] = []
    for i in range(count):
        secret = f"sk_{i:07d}"
        blocks.append({"type": "field", "value": secret, "value_type": "secret"})
        blocks.append({"type": "field", "value": f"r{i} {secret}"})
    return approval(item_id, tool="configure", summary=f"Rotate keys ({item_id})",
                    blocks={"v": 1, "blocks": blocks})


class Process:
    """The monitored bot process and the reports it writes on ``SIGUSR1``."""

    def __init__(self, popen: subprocess.Popen[bytes], report: Path) -> None:
        self.popen = popen
        self._report = report

    async def report(self) -> dict[str, Any]:
        """What the bot saw since the previous report."""
        self._report.unlink(missing_ok=True)
        self.popen.send_signal(signal.SIGUSR1)
        await _until(self._report.exists, "the bot's report", 30)
        seen: dict[str, Any] = json.loads(self._report.read_text())
        return seen

    def cpu_s(self) -> float:
        """User and system CPU seconds the bot process has used so far."""
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def _monitored_bot(config: Path, tmp: Path) -> AsyncIterator[Process]:
    log = tmp / "bot.log"
    with log.open("wb") as output:
        popen = subprocess.Popen(
            [sys.executable, str(HERE / "monitored_bot.py"), str(config), str(tmp / "report")],
            stdout=output, stderr=subprocess.STDOUT, env=_bot_environment(),
        )
    try:
        yield Process(popen, tmp / "report")
    except BaseException:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(popen.wait, 30)
            except subprocess.TimeoutExpired:
                popen.kill()
                await asyncio.to_thread(popen.wait, 10)


class Bench:
    """The stand-in, the relay, the bot process and the agents paired with it."""

    def __init__(self, tg: TelegramStub, relay: RelayServer, bot: Process, database: Path):
        self.tg, self.relay, self.bot, self.database = tg, relay, bot, database
        self.agents: list[Agent] = []

    async def pair(self, user: int, items: list[dict[str, Any]]) -> Agent:
        """A new agent holding ``items``, paired in ``user``'s private chat; returns once
        the bot holds every item."""
        agent = Agent(Identity.generate(f"agent{len(self.agents)}"), self.relay.url,
                      backoff_initial=FAST_RELAY["backoff_initial"])
        self.agents.append(agent)
        for item in items:
            agent.submit_approval(item)
        await agent.start()
        self.tg.send_text(user, user, f"/pair {agent.new_pairing_uri()}")
        await agent.wait_for(lambda a: len(a.peers) == 1, TIMEOUT_S)
        await self.holds(agent, len(items))
        return agent

    async def holds(self, agent: Agent, count: int) -> None:
        await _until(lambda: _open_items(self.database, agent.identity.id) >= count,
                     f"the bot to hold {count} items of {agent.identity.name}", TIMEOUT_S)

    async def decide(self, user: int, agent: Agent, needle: str) -> tuple[float, float]:
        """Wait for the card holding ``needle`` in ``user``'s chat, tap Approve once the bot
        recorded it; (seconds to the card, seconds from the tap to the decision)."""
        tg = self.tg
        started = _now()
        card = None

        def posted(stub: TelegramStub) -> bool:
            nonlocal card
            card = next((m for m in stub.bot_messages(user)
                         if needle in m.text and m.buttons()), None)
            return card is not None

        await tg.wait_for(posted, timeout=TIMEOUT_S)
        to_card = _now() - started
        assert card is not None
        await _until(lambda: self._recorded(card.message_id, user), "the card's record",
                     TIMEOUT_S)
        decided = len(agent.decisions)
        data = next(b["callback_data"] for b in card.buttons() if "Approve" in b["text"])
        tapped = _now()
        tg.tap(user, card.message_id, user, str(data))
        await agent.wait_for(lambda a: len(a.decisions) > decided, TIMEOUT_S)
        return to_card, _now() - tapped

    def _recorded(self, message_id: int, chat_id: int) -> bool:
        with _read_only(self.database) as store:
            return store.cards.by_message(chat_id, message_id) is not None


def _loads_s(text: str, rounds: int = 5) -> float:
    """The least time ``json.loads`` takes over ``text`` (the floor of applying it)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        json.loads(text)
        best = min(best, time.perf_counter() - started)
    return best


def _open_s(plaintext: bytes, rounds: int = 5) -> float:
    """The least CPU time verifying and decrypting an envelope of ``plaintext`` takes
    (what every snapshot costs before a byte of it is read)."""
    sender, me = Identity.generate("floor-agent"), Identity.generate("floor-bot")
    envelope = seal(plaintext, sender=sender, recipient=me.card, ts_ms=0)
    info = build_info(envelope.id, envelope.sender, envelope.recipient, envelope.ts)
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        verify_signature(sender.card.sign_pub, envelope.sig, info + b"\x00" + envelope.ct)
        SUITE.decrypt(envelope.ct, me.kx_key, info=info)
        best = min(best, time.process_time() - started)
    return best


def _commits_s(count: int) -> float:
    """The CPU time ``count`` durable commits of one item each take, in a database set up as
    the bot's (write-ahead log, ``synchronous=FULL``): applying a snapshot commits once
    before the relay may forget it."""
    with tempfile.TemporaryDirectory() as folder:
        connection = sqlite3.connect(Path(folder) / "floor.sqlite3", isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            connection.execute("CREATE TABLE item (id TEXT PRIMARY KEY, body TEXT)")
            body = json.dumps(approval("floor"))
            started = time.thread_time()
            for i in range(count):
                connection.execute("BEGIN IMMEDIATE")
                connection.execute("INSERT INTO item VALUES (?, ?)", (f"floor{i:05d}", body))
                connection.execute("COMMIT")
            return time.thread_time() - started
        finally:
            connection.close()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _row(label: str, value: str, floor: str = "", note: str = "") -> None:
    print(f"     {label:<40} {value:>12}   {floor:>22}   {note}".rstrip())


def _stalls(seen: dict[str, Any]) -> None:
    busy, lag = seen["max_busy_s"], seen["max_lag_s"]
    _row("longest event-loop stall (loop's CPU)", _ms(busy), f"goal ≤ {_ms(STALL_GOAL_S)}",
         _verdict(busy <= STALL_GOAL_S))
    _row("  (wall time, waiting for a CPU too)", _ms(lag))


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


async def _scenarios(sizes: Sizes, bench: Bench) -> None:
    bot = bench.bot
    users = iter(range(USER_BASE, USER_BASE + 100))

    # 1. the largest card
    user = next(users)
    agent = await bench.pair(user, [])
    await bot.report()
    big = _secrets_approval("big0", sizes.secrets)
    agent.submit_approval(big)
    to_card, to_decision = await bench.decide(user, agent, "(big0)")
    await bench.tg.wait_for(lambda s: any(r.method == "editMessageText"
                                          and r.params.get("chat_id") == user
                                          for r in s.requests), timeout=TIMEOUT_S)
    seen = await bot.report()
    print(f"   {sizes.secrets:,} secrets in {2 * sizes.secrets:,} blocks, one card "
          f"(posted in {_ms(to_card)}, decided {_ms(to_decision)} after the tap)")
    _stalls(seen)
    payload = json.dumps(big)
    _row("applying its envelope (loop time)", _ms(max(e[1] for e in seen["deliveries"])),
         f"json.loads {_ms(_loads_s(payload))}")

    # 2. one snapshot of the most items
    items = [approval(f"snap{i:05d}") for i in range(sizes.snapshot)]
    floor = _loads_s(json.dumps({"approvals": items}))
    await bot.report()
    holder = await bench.pair(next(users), items)
    seen = await bot.report()
    applied = max(e[1] for e in seen["deliveries"])
    holder.resolve("snap00000", "cancelled")  # the next snapshot: the others unchanged
    await _until(lambda: _open_items(bench.database, holder.identity.id) < sizes.snapshot,
                 "the bot to apply the next snapshot", TIMEOUT_S)
    again = max(e[1] for e in (await bot.report())["deliveries"])
    print(f"   one inbox_update of {sizes.snapshot:,} items")
    _row(f"applying it (loop time; goal ≤ {_ms(SNAPSHOT_GOAL_S)})", _ms(applied),
         f"json.loads {_ms(floor)}", _verdict(applied <= SNAPSHOT_GOAL_S))
    _row("the next, one item resolved (loop time)", _ms(again), "",
         _verdict(again <= SNAPSHOT_GOAL_S))
    _stalls(seen)

    # 3. an inbox growing one item at a time
    grower = await bench.pair(next(users), [])
    commits_before = (await bot.report())["durable_commits"]
    cpu_before = bot.cpu_s()
    for i in range(sizes.grow):
        grower.submit_approval(approval(f"grow{i:05d}"))
        if i % GROW_WAVE == GROW_WAVE - 1:  # within the relay's share for one sender
            await bench.holds(grower, i + 1)
    await bench.holds(grower, sizes.grow)
    cpu = bot.cpu_s() - cpu_before
    seen = await bot.report()
    applying = sum(e[2] for e in seen["deliveries"])
    snapshots = sum(e[3] for e in seen["deliveries"])
    # What decoding every snapshot once costs: json.loads of the last, times the number of
    # snapshots, times the mean size against the last's (one half).
    last_items = [approval(f"grow{i:05d}") for i in range(sizes.grow)]
    last = _loads_s(json.dumps({"approvals": last_items}))
    floor = last * (sizes.grow + 1) / 2
    crypto = _open_s(raw_payload("inbox_update", {"rev": 1, "approvals": last_items})) \
        * (sizes.grow + 1) / 2
    print(f"   an inbox growing one item at a time to {sizes.grow:,} ({snapshots:,} complete "
          f"snapshots, in {len(seen['deliveries']):,} deliveries)")
    _row(f"CPU applying them (goal < {GROW_GOAL_S:.0f} s)", f"{applying:.2f} s",
         f"json.loads of all {floor:.2f} s", _verdict(applying < GROW_GOAL_S))
    _row("", "", f"verify + decrypt {crypto:.2f} s")
    _row("durable commits (bot, all)", f"{seen['durable_commits'] - commits_before:,}",
         f"one each {_commits_s(snapshots):.2f} s")
    _row("the bot process's CPU meanwhile", f"{cpu:.2f} s", "", "(cards posted as well)")
    _stalls(seen)

    # 4. many open items, then one more approval
    loader_user = next(users)
    while (held := _open_items(bench.database)) < sizes.open_items:
        count = min(sizes.snapshot, sizes.open_items - held)
        index = len(bench.agents)
        await bench.pair(loader_user, [approval(f"load{index:03d}-{i:05d}")
                                       for i in range(count)])
    await bot.report()
    latencies = []
    for i in range(5):
        # Past the chat's pace (the last card's edit came about PACE_S after its post):
        # every card goes out at once.
        await asyncio.sleep(2 * PACE_S)
        agent.submit_approval(approval(f"late{i}"))
        latencies.append(await bench.decide(user, agent, f"(late{i})"))
    seen = await bot.report()
    print(f"   {_open_items(bench.database):,} items open, then 5 approvals one at a time")
    _row("submit → card, slowest", _ms(max(c for c, _ in latencies)))
    _row("tap → decision, slowest", _ms(max(d for _, d in latencies)))
    _row("applying a delivery, p50 (loop time)",
         _ms(_percentile([e[1] for e in seen["deliveries"]], 0.5)))
    _stalls(seen)


async def _run(quick: bool) -> None:
    sizes = QUICK if quick else FULL
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        async with TelegramStub(token=TOKEN) as tg, RelayServer(tmp / "relay") as relay:
            admins = list(range(USER_BASE, USER_BASE + 100))
            for user in admins[:10]:
                tg.add_user(user, f"User{user}")
                tg.add_private_chat(user)
            config = tmp / "skald-telegram.toml"
            config.write_text(
                "[telegram]\n"
                f"token = {json.dumps(TOKEN)}\n"
                f"api_url = {json.dumps(tg.api_url)}\n"
                f"admins = {json.dumps(admins)}\n"
                "[state]\n"
                f"dir = {json.dumps(str(tmp / 'state'))}\n"
            )
            database = load_config(str(config), environ=_bot_environment()).database_path
            async with _monitored_bot(config, tmp) as bot:
                await tg.wait_for(lambda stub: bool(stub.calls("getUpdates")), TIMEOUT_S)
                bench = Bench(tg, relay, bot, database)
                try:
                    await _scenarios(sizes, bench)
                finally:
                    for agent in bench.agents:
                        await agent.stop()


def main(quick: bool) -> None:
    asyncio.run(_run(quick))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
