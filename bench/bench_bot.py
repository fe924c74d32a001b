"""The whole bot against local stand-ins: card and decision latency, a paced burst, memory.

Everything is real and on loopback: the relay server, an :class:`~bot.testing.agent.Agent`, the bot
(`bot.app.Bot`, PTB long polling) and the Telegram Bot API stand-in of the tests, reached
over HTTP through ``api_url``.

1. Latency, one item at a time in one private chat, per-chat pacing off
   (``chat_pace_seconds = 0``): from the agent submitting an approval (its ``inbox_update``
   going through the relay) to the card's ``sendMessage`` reaching the stand-in, and from an
   injected tap to the decision opened by the agent. The bot (``python -m bot run``) and the
   relay (``python -m bot relay``) run in processes of their own, as they do in use; the
   agent and the stand-in share this one's event loop. The bot's rate limiter still allows 30
   sends and edits per second overall and every item costs two (the card and its edit), so
   items start at least :data:`ITEM_SPACING_S` apart: the numbers are the bot's own path,
   not the limiter's queue. The tap comes once the bot has recorded the card, as a person's
   would. Floor: one stand-in ``getUpdates`` round trip (how a tap reaches the bot) plus one
   relay hop (``Agent.send_raw`` of an inbox of the same size to a bare relay client whose
   handler only notes the arrival), both measured in the same run.
2. A burst of approvals to an agent bound to many private chats (no 20-per-minute group
   limit), with the default pacing (one message per second per chat) and rate limiter: time
   until every card is posted, beside the least time those limits allow, the highest rates
   the stand-in saw (refusing with ``429`` past Telegram's), and again with the stand-in's
   answers :data:`BURST_ROUND_TRIP_S` late, as over a network.
3. Decided cards first: approvals waiting in one private chat with the default pace, all
   decided within a minute (one a second) while new approvals keep arriving at the chat's
   pace: from each tap to the edit that took its card's buttons away, beside the same tap
   in the idle chat (the floor, measured in the same run). A decided card waits for the
   request under way and the pace; decided as fast as the pace lets the chat's cards
   change, the edits also wait a little behind each other.
4. Peak RSS of the bot process (``python -m bot run``, a child process so that the agents,
   relay and stand-in in this process are not counted) idle and then holding open items
   from several agents (an ``inbox_update`` carries at most 1,000 items), and the size of its
   SQLite files beside the items' own JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import floors
from test_relay_client import RelayProcess
from world import (
    ADA,
    FAST_RELAY,
    TOKEN,
    World,
    approval,
    button_data,
    make_world,
    running_bot,
)

from bot.config import load_config
from bot.errors import StoreError
from bot.playground.stub import RecordedRequest, StoredMessage, TelegramStub
from bot.protocol.identity import Identity
from bot.relay.server import RelayServer
from bot.store import Store
from bot.store.db import Database
from bot.testing.agent import Agent

ITEM_SPACING_S = 0.1
"""Least time between two latency items: their two rate-limited calls each (the card and
its edit) stay well under 30 a second in any second."""
OVERALL_LIMIT = 30
"""Telegram's sends per second for one bot (and the bot's rate limiter's)."""
GROUP_LIMIT_PER_MIN = 20
ITEMS_PER_UPDATE = 1000
"""The protocol's cap on approvals + clarifications in one ``inbox_update``."""
BURST_USER_BASE = 900_000
LATENCY_GOAL = 3.0
"""Latency goals: p99 at most this many times the floor's p99."""
BURST_GOAL = 29.0
"""Least messages a second over a burst that the overall limit binds."""
TIMEOUT_S = 120.0
BURST_ROUND_TRIP_S = 0.1
"""The burst again with the stand-in's answers this late, as Telegram's are over a network."""


DECIDED_PACE_S = 1.0
"""The chat pace of the decided-first phase (the default)."""
DECIDED_FLOOR_TAPS = 5
"""Taps in the idle chat that make the decided-first phase's floor."""
STILL_SHOWN_AFTER_S = 5.0
"""The decided-first phase counts the cards still showing buttons this long after the
last tap."""


@dataclass(frozen=True)
class Sizes:
    latency_items: int
    burst_items: int
    burst_chats: int
    open_items: int
    decided_items: int
    big_taps: int


FULL = Sizes(latency_items=300, burst_items=20, burst_chats=50, open_items=10_000,
             decided_items=60, big_taps=10)
QUICK = Sizes(latency_items=30, burst_items=10, burst_chats=10, open_items=1_000,
              decided_items=10, big_taps=2)


# --- small helpers -----------------------------------------------------------------------


_percentile = floors.percentile


def _now() -> float:
    return asyncio.get_running_loop().time()


async def _until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    """Poll ``condition`` (for state no event announces, such as the card worker's queue)."""
    deadline = _now() + timeout
    while not condition():
        if _now() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
        await asyncio.sleep(0.002)


async def _sent(tg: TelegramStub, needle: str, since: int) -> RecordedRequest:
    """The first ``sendMessage`` after request ``since`` whose text holds ``needle``."""
    found: list[RecordedRequest] = []

    def arrived(stub: TelegramStub) -> bool:
        found.extend(r for r in stub.requests[since:]
                     if r.method == "sendMessage" and needle in str(r.params.get("text")))
        return bool(found)

    await tg.wait_for(arrived, timeout=TIMEOUT_S)
    return found[0]


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def _title(text: str) -> None:
    print(f"   {text}")


def _row(label: str, value: str, floor: str = "", note: str = "") -> None:
    """One line of a phase's table: what, measured, its floor or limit, a remark."""
    print(f"     {label:<32} {value:>18}   {floor:>20}   {note}".rstrip())


# --- 1. latency --------------------------------------------------------------------------


DECISION_BYTES = 700
"""About the size of a decision's payload: the floor's relay hop carries as much."""
BIG_ROWS = 5000
"""Rows of the large approval: its ``inbox_update`` seals to just under 1 MiB."""
BIG_DELAY_GOAL_S = 0.025
"""A large approval's card arriving just before a tap delays the tap by at most this."""


def _big_approval(item_id: str) -> dict[str, object]:
    """An approval whose envelope is close to the protocol's 1 MiB: many rows of text."""
    rows = [{"type": "field", "label": f"line {n}", "value": f"{n:05d} " + "lorem ipsum " * 8}
            for n in range(BIG_ROWS)]
    return approval(item_id, tool="write_file", summary=f"Write the report ({item_id})",
                    blocks={"v": 1, "blocks": rows})


async def _latency_runs(
    sizes: Sizes, tmp: Path, tg: TelegramStub, agent: Agent, cores: floors.Cores
) -> tuple[floors.Floor, list[float], list[float], list[float]]:
    """With the bot started on ``tg``: approvals one at a time, the floor sampled before
    each (see :func:`_latency_items`), then taps each just after a large approval."""
    async with _paired(tmp, tg, agent, cores) as (bot, probe):
        cards, decisions = await _latency_items(tg, agent, bot, probe, sizes.latency_items)
        behind_big = await _behind_big(tg, agent, bot, sizes.big_taps)
    return probe.floor(), cards, decisions, behind_big


@contextlib.asynccontextmanager
async def _one_chat(tmp: Path) -> AsyncIterator[tuple[TelegramStub, Agent, floors.Cores]]:
    """A relay process, the stand-in with Ada's private chat, and an agent on the relay."""
    with floors.load_generator() as cores:
        relay = await RelayProcess.start(tmp / "relay")
        cores.place(relay.process.pid)
        agent = Agent(Identity.generate("build-bot"), relay.url, **FAST_RELAY)
        try:
            async with TelegramStub(token=TOKEN) as tg:
                tg.add_user(ADA, "Ada", "Lovelace", username="ada")
                tg.add_private_chat(ADA)
                await agent.start()
                yield tg, agent, cores
        finally:
            await agent.stop()
            await relay.kill()


@contextlib.asynccontextmanager
async def _paired(
    tmp: Path, tg: TelegramStub, agent: Agent, cores: floors.Cores, storage: str | None = None
) -> AsyncIterator[tuple[Store, floors.Probe]]:
    """The bot process (chat pace 0, its state in ``storage``, None: the SQLite file)
    paired with ``agent``: its store, read through a connection of the bench's own, and
    the floor's probe. The bot's log is shown if the block fails."""
    config = tmp / "skald-telegram.toml"
    config.write_text(_config_toml(tg.api_url, tmp / "state", storage=storage,
                                   chat_pace_seconds=0))
    database = load_config(str(config), environ=_bot_environment()).database
    log = tmp / "bot.log"
    async with _bot_process(config, log, cores):
        try:
            await tg.wait_for(lambda stub: bool(stub.calls("getUpdates")), TIMEOUT_S)
            tg.send_text(ADA, ADA, f"/pair {agent.new_pairing_uri()}")
            await agent.wait_for(lambda a: len(a.peers) == 1, TIMEOUT_S)
            async with floors.Probe(agent.relay_url, DECISION_BYTES) as probe:
                with _reader(database) as bot:
                    yield bot, probe
        except BaseException:
            print(log.read_text()[-3000:], file=sys.stderr)
            raise


async def _card_of(tg: TelegramStub, bot: Store, needle: str) -> StoredMessage:
    """The card holding ``needle`` once the stand-in shows it with buttons and the bot has
    recorded it (a person taps once the card is there; the bench, once it is recorded)."""
    def shown(stub: TelegramStub) -> bool:
        return any(needle in m.text and m.buttons() for m in stub.bot_messages(ADA))

    await tg.wait_for(shown, TIMEOUT_S)
    card = next(m for m in tg.bot_messages(ADA) if needle in m.text and m.buttons())
    await _until(lambda: bot.cards.by_message(ADA, card.message_id) is not None,
                 "the bot to record the card")
    return card


async def _tap_to_decision(tg: TelegramStub, agent: Agent, card: StoredMessage,
                           label: str = "Approve") -> float:
    """Tap ``label`` on ``card``: seconds until the agent applied the decision."""
    count = len(agent.decided_at)
    tapped = _now()
    tg.tap(ADA, card.message_id, ADA, button_data(card, label))
    await agent.wait_for(lambda a: len(a.decided_at) > count, TIMEOUT_S)
    return agent.decided_at[count] - tapped


async def _settled(agent: Agent, bot: Store) -> None:
    """Until the card edits and the agent's resolved update are done."""
    await _until(
        lambda: agent.unsent == 0
        and bot.agents.last_rev(agent.identity.id) == agent.rev
        and bot.outbox.depth() == 0
        and not bot.cards.chats_with_dirty(),
        "the bot to settle",
    )


async def _latency_items(
    tg: TelegramStub, agent: Agent, bot: Store, probe: floors.Probe, count: int
) -> tuple[list[float], list[float]]:
    """Approvals one at a time, the floor sampled before each: (seconds from each submit
    to its card, from each tap to its decision applied at the agent). ``bot``: the bot's
    store, read-only."""
    cards: list[float] = []
    decisions: list[float] = []
    for index in range(count):
        item_id = f"lat{index:05d}"
        await probe.sample()
        started = _now()
        since = len(tg.requests)
        agent.submit_approval(approval(item_id))
        needle = f"({item_id})"  # the approval's summary ends with it
        posted = await _sent(tg, needle, since)
        cards.append(posted.at - started)
        card = await _card_of(tg, bot, needle)
        decisions.append(await _tap_to_decision(tg, agent, card))
        await _settled(agent, bot)
        await asyncio.sleep(max(0.0, started + ITEM_SPACING_S - _now()))
    return cards, decisions


async def _behind_big(tg: TelegramStub, agent: Agent, bot: Store, count: int) -> list[float]:
    """Taps each just after a large approval reached the relay (its card is being made
    when the tap comes): seconds from each tap to its decision at the agent. Each large
    card is denied afterwards, so that the next update is small again."""
    latencies = []
    for index in range(count):
        needle = f"(small{index:03d})"
        agent.submit_approval(approval(needle[1:-1]))
        card = await _card_of(tg, bot, needle)
        await _settled(agent, bot)
        agent.submit_approval(_big_approval(f"big{index:03d}"))
        await _until(lambda: agent.unsent == 0, "the relay to take the large update")
        latencies.append(await _tap_to_decision(tg, agent, card))
        big = await _card_of(tg, bot, f"(big{index:03d})")
        await _tap_to_decision(tg, agent, big, "Deny")
        await _settled(agent, bot)
    return latencies


async def _latency(sizes: Sizes, tmp: Path) -> None:
    async with _one_chat(tmp) as (tg, agent, cores):
        floor, cards, decisions, behind_big = await _latency_runs(sizes, tmp, tg, agent, cores)
    _title(f"latency: {sizes.latency_items} approvals one at a time, one private chat, "
           "chat pace 0")
    _title(f"  (items ≥ {ITEM_SPACING_S * 1000:.0f} ms apart; taps once the bot recorded "
           "the card;")
    _title(f"  {cores.describe()})")
    _row("", "p50 / p99", "floor p50 / p99")
    for label, values in (
        ("submit → card sendMessage", cards),
        ("tap → decision at the agent", decisions),
    ):
        p50, p99 = _percentile(values, 0.5), _percentile(values, 0.99)
        _row(label, f"{p50 * 1000:.2f} / {p99 * 1000:.2f} ms",
             f"{floor.at(0.5) * 1000:.2f} / {floor.at(0.99) * 1000:.2f} ms",
             f"{p50 / floor.at(0.5):.1f}x / {p99 / floor.at(0.99):.1f}x "
             f"(goal p99 ≤ {LATENCY_GOAL:.0f}x)")
    floor.rows(_row)
    stand_in = _percentile(floor.parts[floors.Probe.STAND_IN], 0.5)
    if stand_in > floors.STAND_IN_GOAL_S:
        _title(f"  the stand-in's round trip ({stand_in * 1000:.2f} ms) is over "
               f"{floors.STAND_IN_GOAL_S * 1000:.0f} ms: the floor is too coarse")
    _title("  floor: a stand-in getUpdates round trip plus a bare relay hop (an envelope")
    _title("  sealed beforehand, between two bare relay clients), each at the same percentile,")
    _title("  one sample of each before every item")
    worst = max(behind_big) - _percentile(decisions, 0.5)
    _row(f"tap just after a 1 MiB approval ({len(behind_big)})",
         f"{_percentile(behind_big, 0.5) * 1000:.2f} / {max(behind_big) * 1000:.2f} ms",
         "p50 / slowest",
         f"slowest {worst * 1000:+.1f} ms over the p50 tap (goal ≤ "
         f"{BIG_DELAY_GOAL_S * 1000:.0f} ms)")


async def _stores(sizes: Sizes, tmp: Path) -> None:
    """Tap → decision with the bot's state in SQLite, then in PostgreSQL (a throwaway
    cluster on this machine that waits for its disk, as a production one does), the same
    approvals one at a time as in the latency phase."""
    import pgcluster
    import psycopg

    count = max(sizes.latency_items // 3, 10)
    folder = Path(tempfile.mkdtemp(prefix="skald-pg-"))
    try:
        admin = pgcluster.start(folder, pgcluster.DURABLE_OPTIONS)
        url = admin.rsplit("/", 1)[0] + "/bench"
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute("CREATE DATABASE bench")
        Store.migrate(url)
        measured = {}
        for name, storage in (("SQLite", None), ("PostgreSQL", url)):
            (tmp / name).mkdir()
            measured[name] = await _store_latency(tmp / name, count, storage)
    except pgcluster.ClusterError as exc:
        _title(f"stores: no PostgreSQL to measure ({exc})")
        return
    finally:
        pgcluster.stop(folder)
    _title(f"stores: tap → decision at the agent, {count} approvals one at a time, the bot's "
           "state in SQLite, then in PostgreSQL 15 on this machine (fsync on)")
    _row("", "p50 / p99", "", "against SQLite")
    sqlite = measured["SQLite"]
    for name, values in measured.items():
        p50, p99 = _percentile(values, 0.5), _percentile(values, 0.99)
        _row(name, f"{p50 * 1000:.2f} / {p99 * 1000:.2f} ms", "",
             f"{p50 / _percentile(sqlite, 0.5):.2f}x / {p99 / _percentile(sqlite, 0.99):.2f}x")


async def _store_latency(tmp: Path, count: int, storage: str | None) -> list[float]:
    """Seconds from each tap to its decision at the agent, the bot's state in ``storage``
    (None: the SQLite file)."""
    async with _one_chat(tmp) as (tg, agent, cores), \
            _paired(tmp, tg, agent, cores, storage) as (bot, probe):
        _cards, decisions = await _latency_items(tg, agent, bot, probe, count)
    return decisions


def _over(seen: int, limit: int) -> str:
    return "" if seen <= limit else f"OVER the limit by {seen - limit}"


def _closest_sends(sends: list[RecordedRequest]) -> float:
    """The shortest time between two consecutive sends to the same chat."""
    by_chat: dict[int, list[float]] = {}
    for request in sends:
        by_chat.setdefault(int(request.params["chat_id"]), []).append(request.at)
    gaps = [later - earlier for times in by_chat.values()
            for earlier, later in itertools.pairwise(times)]
    return min(gaps, default=float("inf"))


# --- 2. burst ----------------------------------------------------------------------------


async def _burst(sizes: Sizes, tmp: Path, round_trip: float = 0.0) -> None:
    cards_total = sizes.burst_items * sizes.burst_chats
    async with make_world(tmp, chat_pace_seconds=1.0) as world, running_bot(world) as running:
        tg, agent = world.tg, world.agent
        tg.rate_limits = True  # a 429 past Telegram's limits, as Telegram answers
        tg.round_trip = round_trip
        await world.pair(ADA)
        agent_id = agent.identity.id
        now_ms = int(time.time() * 1000)
        chats = [BURST_USER_BASE + n for n in range(sizes.burst_chats)]
        # Benchmark setup shortcut: bind the paired agent to the burst's private chats
        # straight in the store, instead of pairing again in every chat.
        running.store.agents.unbind(agent_id, ADA)
        for chat_id in chats:
            tg.add_user(chat_id, f"User{chat_id}")
            tg.add_private_chat(chat_id)
            running.bridge.chat_seen(chat_id, f"User{chat_id}", "private")
            running.store.agents.bind(agent_id, chat_id, None, now_ms)
        burst_chats = set(chats)
        since = len(tg.requests)
        started = _now()
        for index in range(sizes.burst_items):
            agent.submit_approval(approval(f"burst{index:04d}"))

        def posted(stub: TelegramStub) -> int:
            return sum(len(stub.bot_messages(chat_id)) for chat_id in chats)

        await tg.wait_for(lambda stub: posted(stub) >= cards_total, timeout=TIMEOUT_S)
        sends = [r for r in tg.requests[since:]
                 if r.method == "sendMessage" and r.params.get("chat_id") in burst_chats]
        elapsed = max(r.at for r in sends) - started
        per_chat_1s = max(tg.max_rate(chat_id) for chat_id in chats)
        per_chat_60s = max(tg.max_rate(chat_id, window=60.0) for chat_id in chats)
        overall_1s = tg.max_rate()
        throttled = tg.throttled
        gaps = _closest_sends(sends)
        # Least time the limits allow: one card per second in each chat, and 30 per second
        # overall after the limiter's first full bucket of 30.
        floor = max(sizes.burst_items - 1.0, (cards_total - OVERALL_LIMIT) / OVERALL_LIMIT)
    _title(f"burst: {sizes.burst_items} approvals × {sizes.burst_chats} private chats = "
           f"{cards_total} cards, chat pace 1 s, the bot's rate limiter, "
           + (f"{round_trip * 1000:.0f} ms round trip to the stand-in" if round_trip
              else "loopback"))
    _row("every card posted", f"{elapsed:.1f} s", f"floor {floor:.1f} s",
         f"{len(sends)} sendMessage calls")
    rate = len(sends) / elapsed
    paced = sizes.burst_chats < OVERALL_LIMIT  # the chats' pace binds before the limit
    _row("messages per second", f"{rate:.1f}", f"goal ≥ {BURST_GOAL:.0f}",
         f"(only {sizes.burst_chats} chats: their pace binds)" if paced
         else "" if rate >= BURST_GOAL else "under the goal")
    _row("most sends per chat in 1 s", f"{per_chat_1s}", "limit 1", _over(per_chat_1s, 1))
    _row("closest two sends in one chat", f"{gaps:.3f} s", "pace 1.000 s",
         "" if gaps >= 1 else "closer than the pace")
    _row("most sends per chat in 60 s", f"{per_chat_60s}",
         f"group limit {GROUP_LIMIT_PER_MIN}", "(private chats: not bound by it)")
    _row("most sends overall in 1 s", f"{overall_1s}", f"limit {OVERALL_LIMIT}",
         _over(overall_1s, OVERALL_LIMIT))
    _row("answered 429 Too Many Requests", f"{throttled}", "goal 0")
    _title("  floor: the least time 1 card/s per chat and 30/s overall allow; \"in 1 s\": the")
    _title("  most requests in any sliding second, at the moments the stand-in received them")


# --- 3. decided cards first --------------------------------------------------------------


def _buttons_gone(tg: TelegramStub, message_id: int, since: int) -> float | None:
    """When the first edit after request ``since`` that left the card without buttons
    reached the stand-in."""
    for request in tg.requests[since:]:
        if request.method == "editMessageText" and request.params.get("chat_id") == ADA \
                and request.params.get("message_id") == message_id \
                and not _keyboard_rows(request.params.get("reply_markup")):
            return request.at
    return None


def _keyboard_rows(markup: object) -> list[object]:
    if isinstance(markup, str):
        markup = json.loads(markup)
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    return [row for row in rows or [] if row]


async def _decide_all(
    world: World, cards: list[StoredMessage], spacing: float, since: int
) -> tuple[list[float], list[float]]:
    """Tap Approve on each card, ``spacing`` seconds apart: (each tap's moment, seconds
    from it to the edit that took the card's buttons away)."""
    tapped = []
    for card in cards:
        started = _now()
        world.tg.tap(ADA, card.message_id, ADA, button_data(card, "Approve"))
        tapped.append(started)
        await asyncio.sleep(max(0.0, started + spacing - _now()))

    def edited() -> list[float | None]:
        return [_buttons_gone(world.tg, card.message_id, since) for card in cards]

    await _until(lambda: None not in edited(), "every decided card's edit")
    return tapped, [at - tap for at, tap in zip(edited(), tapped, strict=True)
                    if at is not None]


async def _posted_cards(world: World, prefix: str, count: int) -> list[StoredMessage]:
    def posted() -> list[StoredMessage]:
        return [m for m in world.cards(ADA) if f"({prefix}" in m.text and m.buttons()]

    await world.tg.wait_for(lambda _tg: len(posted()) >= count, timeout=TIMEOUT_S + count)
    return posted()


async def _decided_first(sizes: Sizes, tmp: Path) -> None:
    count = sizes.decided_items
    async with make_world(tmp, chat_pace_seconds=DECIDED_PACE_S) as world, \
            running_bot(world):
        agent = world.agent
        await world.pair(ADA)
        for index in range(DECIDED_FLOOR_TAPS):
            agent.submit_approval(approval(f"idle{index:03d}"))
        idle = await _posted_cards(world, "idle", DECIDED_FLOOR_TAPS)
        await asyncio.sleep(DECIDED_PACE_S)
        # The floor: each tap in the idle chat, a turn and a little apart.
        _, floor = await _decide_all(world, idle, DECIDED_PACE_S * 2.5, len(world.tg.requests))

        for index in range(count):
            agent.submit_approval(approval(f"wait{index:03d}"))
        waiting = await _posted_cards(world, "wait", count)

        async def keep_coming() -> None:
            for index in itertools.count():
                agent.submit_approval(approval(f"new{index:04d}"))
                await asyncio.sleep(DECIDED_PACE_S)

        arriving = asyncio.create_task(keep_coming())
        try:
            tapped, latencies = await _decide_all(world, waiting, DECIDED_PACE_S,
                                                  len(world.tg.requests))
        finally:
            arriving.cancel()
        last_tap = max(tapped)
        late = sum(tap + latency > last_tap + STILL_SHOWN_AFTER_S
                   for tap, latency in zip(tapped, latencies, strict=True))
    _title(f"decided first: {count} approvals waiting in one private chat, decided one a "
           f"second while new ones arrive one a second; chat pace {DECIDED_PACE_S:.0f} s")
    _row("", "p50 / p99", "floor p50 / p99")
    p99, floor99 = _percentile(latencies, 0.99), _percentile(floor, 0.99)
    _row("decision → card edited", f"{_percentile(latencies, 0.5) * 1000:.0f} / "
         f"{p99 * 1000:.0f} ms",
         f"{_percentile(floor, 0.5) * 1000:.0f} / {floor99 * 1000:.0f} ms",
         f"p99 {p99 - floor99:+.2f} s over the floor (the chat edits one card a "
         f"pace, {DECIDED_PACE_S:.0f} s)")
    _row(f"still with buttons {STILL_SHOWN_AFTER_S:.0f} s after the last tap", f"{late}",
         "goal 0", f"of {count}")
    _title(f"  floor: the same tap in the idle chat ({DECIDED_FLOOR_TAPS} taps, "
           f"{DECIDED_PACE_S * 2.5:.1f} s apart); \"edited\": the edit without buttons")
    _title("  reaching the stand-in")


# --- 4. memory ---------------------------------------------------------------------------


def _config_toml(api_url: str, state_dir: Path, *, storage: str | None = None,
                 **telegram: float) -> str:
    return (
        "[telegram]\n"
        f"token = {json.dumps(TOKEN)}\n"
        f"api_url = {json.dumps(api_url)}\n"
        f"admins = [{ADA}]\n"
        + "".join(f"{name} = {value}\n" for name, value in telegram.items())
        + "[state]\n"
        f"dir = {json.dumps(str(state_dir))}\n"
        + (f"[storage]\nurl = {json.dumps(storage)}\n" if storage else "")
    )


def _bot_environment() -> dict[str, str]:
    """This environment without the variables that would override the bench's config."""
    overrides = {"TELEGRAM_BOT_TOKEN", "SKALD_TELEGRAM_CONFIG", "SKALD_TELEGRAM_STATE_DIR"}
    return {name: value for name, value in os.environ.items() if name not in overrides}


def _peak_rss_kib(pid: int) -> int:
    """A live process's peak RSS (``VmHWM``, what ``ru_maxrss`` reports once it exits)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc status")


@contextlib.contextmanager
def _read_only(database: Path) -> Iterator[Store]:
    """The bot process's store, read through a connection of the bench's own."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5,
                                 isolation_level=None)
    connection.row_factory = sqlite3.Row
    try:
        yield Store(Database(connection, database))
    finally:
        connection.close()


@contextlib.contextmanager
def _reader(database: Path | str) -> Iterator[Store]:
    """The bot process's store, read through a connection of the bench's own: the SQLite
    file read-only, or the PostgreSQL database."""
    if isinstance(database, Path):
        with _read_only(database) as store:
            yield store
        return
    with contextlib.closing(Store.open(database)) as store:
        yield store


def _open_items(database: Path, agent_id: str | None = None) -> int:
    """The items the bot holds open (only one agent's, given its id)."""
    if not database.exists():
        return 0
    with _read_only(database) as store:
        try:
            if agent_id is None:
                return store.items.open_count()
            return len(store.items.open_ids(agent_id))
        except StoreError:
            return 0  # the bot has not created its tables yet


@contextlib.asynccontextmanager
async def _bot_process(
    config: Path, log: Path, cores: floors.Cores | None = None
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``python -m bot run`` on ``config``, its output in ``log``; on the cores of the
    processes under test, given ``cores``."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "bot", "run", "--config", str(config)],
            stdout=output, stderr=subprocess.STDOUT, env=_bot_environment(),
        )
    if cores is not None:
        cores.place(process.pid)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait, 10)


async def _pair_loaded_agent(tg: TelegramStub, relay_url: str, name: str, items: int) -> Agent:
    """An agent holding ``items`` approvals, paired through ``/pair``: its first
    ``inbox_update`` (sent on pairing) carries them all."""
    agent = Agent(Identity.generate(name), relay_url,
                  backoff_initial=FAST_RELAY["backoff_initial"])
    for index in range(items):
        agent.submit_approval(approval(f"{name}-{index:05d}"))
    await agent.start()
    tg.send_text(ADA, ADA, f"/pair {agent.new_pairing_uri()}")
    await agent.wait_for(lambda a: len(a.peers) == 1, TIMEOUT_S)
    return agent


async def _memory(sizes: Sizes, tmp: Path) -> None:
    agent_count = -(-sizes.open_items // ITEMS_PER_UPDATE)
    agents: list[Agent] = []
    async with TelegramStub(token=TOKEN) as tg, RelayServer(tmp / "relay") as relay:
        tg.add_user(ADA, "Ada", "Lovelace", username="ada")
        tg.add_private_chat(ADA)
        config = tmp / "skald-telegram.toml"
        config.write_text(_config_toml(tg.api_url, tmp / "state"))
        database = load_config(str(config), environ=_bot_environment()).database_path
        log = tmp / "bot.log"
        started = _now()
        async with _bot_process(config, log) as process:
            try:
                await tg.wait_for(lambda stub: bool(stub.calls("getUpdates")), TIMEOUT_S)
                cold_start = _now() - started
                idle_kib = _peak_rss_kib(process.pid)
                for number in range(agent_count):
                    count = min(ITEMS_PER_UPDATE, sizes.open_items - number * ITEMS_PER_UPDATE)
                    agents.append(await _pair_loaded_agent(tg, relay.url, f"agent{number:02d}",
                                                           count))
                await _until(lambda: _open_items(database) >= sizes.open_items,
                             "the bot to store every item")
                loaded_kib = _peak_rss_kib(process.pid)
            except BaseException:
                print(log.read_text()[-3000:], file=sys.stderr)
                raise
            finally:
                for agent in agents:
                    await agent.stop()
        exited_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        files = [database, database.with_name(database.name + "-wal")]
        database_bytes = sum(f.stat().st_size for f in files if f.exists())
        items_json = sum(len(json.dumps(a.inbox()["approvals"])) for a in agents)
    _title(f"memory: the bot process (python -m bot run) with {sizes.open_items:,} open items "
           f"from {agent_count} agent(s)")
    _title("  (all bound to one private chat; measured once the store holds every item,")
    _title("  while its cards still post at 1 per second)")
    _row("cold start: process to first poll", f"{cold_start:.2f} s")
    _row("peak RSS, running and idle", _mib(idle_kib))
    _row(f"peak RSS, {sizes.open_items:,} items open", _mib(loaded_kib),
         f"idle {_mib(idle_kib)}",
         f"+{(loaded_kib - idle_kib) / sizes.open_items:.2f} KiB per item")
    _row("ru_maxrss of the exited bot", _mib(exited_kib))
    _row("SQLite database + WAL", _mib(database_bytes / 1024),
         f"items' JSON {_mib(items_json / 1024)}")


# --- entry point -------------------------------------------------------------------------


async def _run(quick: bool) -> None:
    sizes = QUICK if quick else FULL
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        phases: tuple[tuple[str, Callable[[Sizes, Path], Awaitable[None]]], ...] = (
            ("memory", _memory), ("latency", _latency), ("stores", _stores),
            ("decided-first", _decided_first),
            ("burst", _burst),
            ("burst-far", functools.partial(_burst, round_trip=BURST_ROUND_TRIP_S)),
        )
        for name, phase in phases:
            (tmp / name).mkdir()
            await phase(sizes, tmp / name)


def main(quick: bool) -> None:
    asyncio.run(_run(quick))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
