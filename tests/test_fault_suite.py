"""Fault suite: the relay, the bot and the agent host as real processes, with ``ask``
processes waiting on them, killed and their stores filled at random; what must hold
whatever happened.

A run draws a seed (``FAULT_SUITE_SEED=N`` replays it; a failure names it, and the
output lists each round as it is played). It plays one round for each fault below, in an
order the seed shuffles, twice over, then a calm round. A round starts two or three asks,
waits for their cards, and taps some of the cards not decided yet (Approve or Deny; the
first ask and about one in eight others are never tapped) while its fault happens:

- *kill relay, kill bot, kill host:* SIGKILL and start again, with the taps made while
  the process is down, or at once after the bot has answered them (decisions and card
  edits in flight); the bot also as soon as the first of the taps is answered, or as
  soon as the first card of two asks started after the taps shows (the other being
  posted: the window for one extra copy). A waiting ``ask`` may die with the host;
  ``ask --item`` then takes over.
- *fill relay, fill bot, fill host:* the process may write no file (``RLIMIT_FSIZE`` of
  0, set on it while it runs: SQLite's ``max_page_count`` is a setting of one connection,
  so another process cannot fill a database that way) until it has failed on what the
  taps set going, and then may write again. The relay must refuse the decision (and its
  ``GET /health`` answer 503); the bot must fail to hold a tap, and to handle an update
  for an ask started meanwhile, whose card must not show yet; the host must fail to
  handle a decision. A bot or host that fails on a delivery must leave it at the relay.
  Each store is freed after its first failure: the client's reconnection backoff, which
  grows while a store fails, is real time here (``tests/test_store_faults.py`` keeps a
  store failing for many more attempts). The processes' logs come through pipes, which a
  full disk does not stop. With the bot's state on PostgreSQL (the suite runs once on
  each store), *fill bot* stops the database server instead, and starts it again.

Once every process is up and every store writes, it checks:

- every tapped ask gets exactly its decision: ``ask`` exits 0 with ``approved`` for
  Approve and 1 with ``denied`` for Deny, and the host accepted one decision for its item;
- nothing is decided without a tap: an ask never tapped is still waiting, its item
  pending at the host with no decision received, and its card has no outcome and keeps
  its buttons;
- no card claims an outcome the agent did not report: a card whose status line starts
  with ✅, ❌, ⌛ or 🚫 is read by the line's first word (Approved, Denied, Expired,
  Cancelled; what follows may change) and must say what the host recorded for the item,
  and each tapped ask's card shows it;
- duplicates stay within the documented budget: at most one extra copy of a card per
  bot kill;
- no process logged a traceback or ended on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from agenthost_world import CLI, Process, finished, kill_children, start_cli
from conftest import OwnServer
from test_store_faults import disk_full
from world import ADA, TOKEN, button_data

from bot.playground.stub import StoredMessage, TelegramStub
from skald_telegram import AsyncAgentClient

SEED_VARIABLE = "FAULT_SUITE_SEED"
FAULTS = ("kill relay", "kill bot", "kill host", "fill relay", "fill bot", "fill host")
WAIT_S = 45.0
"""The longest wait for anything: a relay client's reconnection backoff (at most 30 s) and
a process start on a busy machine. A decision the relay refused while full is sent again
with the bot's next envelope or 30 s later."""
POLL_S = 0.05
STATUS_MARKS = ("✅", "❌", "⌛", "🚫")
OUTCOMES = {"Approved": "approved", "Denied": "denied", "Expired": "expired",
            "Cancelled": "withdrawn"}
"""A card's status line, by its first word, and the host's state of an item it claims."""
LABELS = {"approve": "Approve", "deny": "❌ Deny"}
EXITS = {"approve": (0, "approved"), "deny": (1, "denied")}


async def until(condition: Callable[[], bool], what: str,
                timeout: float = WAIT_S) -> None:
    """Wait for ``condition`` (checked every :data:`POLL_S`), failing with ``what``."""
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:g} s: {what}") from None


class Service:
    """A long-lived process of the suite. Its output is read through pipes (a process
    that may write no file still logs) and copied to ``log`` for reading after a run."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log = log
        self.lines: list[str] = []
        self.process: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.argv, env=self.env, cwd=self.log.parent, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [asyncio.create_task(self._read(stream))
                         for stream in (self.process.stdout, self.process.stderr)]

    async def _read(self, stream: asyncio.StreamReader) -> None:
        with self.log.open("a", encoding="utf-8") as copy:
            while line := await stream.readline():
                text = line.decode(errors="replace")
                self.lines.append(text)
                copy.write(text)
                copy.flush()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def mark(self) -> int:
        """Where its log is now, for :meth:`logged` to look after."""
        return len(self.lines)

    def logged(self, needle: str, since: int = 0) -> list[str]:
        return [line for line in self.lines[since:] if needle in line]

    def disk_full(self, full: bool) -> None:
        assert self.process is not None
        disk_full(self.process.pid, full)

    async def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()
        await asyncio.gather(*self._readers)

    async def stop(self) -> None:
        if self.running:
            await self.kill()


@dataclass
class Ask:
    """One ``ask`` process and what the suite did to its card."""

    tool: str
    process: asyncio.subprocess.Process
    stays: bool
    """Never tapped."""
    decision: str | None = None
    """``approve`` or ``deny`` once tapped."""

    @property
    def needle(self) -> str:
        return f"{self.tool}("


def cards(tg: TelegramStub) -> list[StoredMessage]:
    return [m for m in tg.bot_messages(ADA) if m.document is None
            and m.text.startswith(("🤖", "❓"))]


def outcome(card: StoredMessage) -> str | None:
    """The host state a card claims for its item, read loosely from its status line."""
    for line in card.text.splitlines():
        if line.startswith(STATUS_MARKS):
            word = line.removeprefix(line[0]).split(maxsplit=1)[:1]
            if word and word[0] in OUTCOMES:
                return OUTCOMES[word[0]]
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Suite:
    """The processes, the asks, and the rounds played on them."""

    def __init__(self, tmp: Path, tg: TelegramStub, rng: random.Random,
                 database: OwnServer | None) -> None:
        self.tmp = tmp
        self.tg = tg
        self.rng = rng
        self.database = database
        storage = f'[storage]\nurl = "{database.database}"\n' if database else ""
        self.port = free_port()
        self.host_env = {**os.environ, "SKALD_AGENT_STATE": str(tmp / "agent")}
        config = tmp / "skald-telegram.toml"
        config.write_text(
            f'[telegram]\napi_url = "{tg.api_url}"\nadmins = [{ADA}]\n'
            f'chat_pace_seconds = 0\n[state]\ndir = "{tmp / "state"}"\n{storage}')
        self.relay = Service("relay", [*CLI, "relay", "--port", str(self.port), "--data",
                                       str(tmp / "relay")], dict(os.environ), tmp / "relay.log")
        self.host = Service("host", [*CLI, "agent", "serve", "--relay",
                                     f"ws://127.0.0.1:{self.port}/v1/connect", "--name",
                                     "build-host"], self.host_env, tmp / "host.log")
        self.bot = Service("bot", [*CLI, "run", "--config", str(config)],
                           {**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN}, tmp / "bot.log")
        self.services = (self.relay, self.host, self.bot)
        self.asks: list[Ask] = []
        self.bot_kills = 0
        self.started = 0.0
        self.bot_id = ""
        self.host_id = ""

    # -- processes -------------------------------------------------------------------

    async def start_relay(self) -> None:
        since = self.relay.mark()
        await self.relay.start()
        await until(lambda: bool(self.relay.logged("relay listening", since)), "relay up")

    async def start_host(self) -> None:
        since = self.host.mark()
        await self.host.start()
        await until(lambda: bool(self.host.logged("serving on", since)), "host serving")

    async def connected(self, *ids: str, since: int) -> None:
        """Wait until the relay has opened a session for each of ``ids`` after ``since``."""
        await until(lambda: all(self.relay.logged(f"session open: {i}", since) for i in ids),
                    f"sessions of {ids} open at the relay")

    async def setup(self) -> None:
        self.started = asyncio.get_running_loop().time()
        await self.start_relay()
        await self.start_host()
        await self.bot.start()
        pairing = await start_cli("agent", "pair", "--wait", "30", env=self.host_env)
        assert pairing.stdout is not None
        async with asyncio.timeout(WAIT_S):
            link = (await pairing.stdout.readline()).decode().strip()
        assert link.startswith("skald-pair:v1?"), link
        self.tg.send_text(ADA, ADA, f"/pair {link}")
        paired = await finished(pairing, timeout=WAIT_S)
        assert paired.code == 0, paired.err
        async with AsyncAgentClient(self.tmp / "agent") as client:
            status = await client.status()
        self.host_id = status["agent"]["id"]
        self.bot_id = status["devices"][0]["id"]
        await self.connected(self.host_id, self.bot_id, since=0)

    # -- asks and taps ---------------------------------------------------------------

    async def start_asks(self, count: int) -> list[Ask]:
        """``count`` new asks, once their cards show; the last is one to tap."""
        new = [await self.submit(stays=i < count - 1 and self.rng.random() < 1 / 8)
               for i in range(count)]
        await until(lambda: all(self.copies(a) for a in new),
                    f"cards of {[a.tool for a in new]}")
        return new

    async def submit(self, *, stays: bool = False) -> Ask:
        n = len(self.asks)
        process = await start_cli("ask", "--tool", f"step_{n}", "--arg", f"n={n}", "--json",
                                  env=self.host_env)
        ask = Ask(f"step_{n}", process, stays=stays or n == 0)
        self.asks.append(ask)
        return ask

    def copies(self, ask: Ask) -> list[StoredMessage]:
        return [m for m in cards(self.tg) if ask.needle in m.text]

    def pick_taps(self) -> list[tuple[Ask, str]]:
        """Some of the asks not decided yet (at least one), each with a decision."""
        open_asks = [a for a in self.asks if not a.stays and a.decision is None]
        chosen = [a for a in open_asks if self.rng.random() < 0.7] or open_asks[:1]
        return [(a, self.rng.choice(("approve", "deny"))) for a in chosen]

    def tap(self, taps: list[tuple[Ask, str]]) -> list[str]:
        queries = []
        for ask, decision in taps:
            card = self.copies(ask)[-1]
            ask.decision = decision
            queries.append(self.tg.tap(ADA, card.message_id, ADA,
                                       button_data(card, LABELS[decision])))
        return queries

    async def answered(self, queries: list[str], count: int | None = None) -> None:
        """Wait until the bot has answered ``count`` (default: all) of the taps."""
        need = len(queries) if count is None else count
        await self.tg.wait_for(
            lambda tg: sum(q in tg.callback_answers for q in queries) >= need,
            timeout=WAIT_S)

    # -- faults ----------------------------------------------------------------------

    async def killed(self, service: Service, taps: list[tuple[Ask, str]]) -> str:
        """Kill ``service`` and make the taps while it is down, or kill it at once after
        the bot has answered them; which, in words."""
        down = self.rng.random() < 0.5
        if down:
            await service.kill()
            await self.answered(self.tap(taps))
        else:
            await self.answered(self.tap(taps))
            await service.kill()
        return "taps while it is down" if down else "killed once the taps are answered"

    async def kill_relay(self, taps: list[tuple[Ask, str]]) -> str:
        how = await self.killed(self.relay, taps)
        since = self.relay.mark()
        await self.start_relay()
        await self.connected(self.host_id, self.bot_id, since=since)
        return how

    async def kill_bot(self, taps: list[tuple[Ask, str]]) -> str:
        when = self.rng.choice(("down", "first answered", "answered", "posting"))
        if when == "down":
            await self.bot.kill()
            self.tap(taps)
        elif when == "posting":
            self.tap(taps)
            late = [await self.submit(), await self.submit()]
            await until(lambda: any(self.copies(a) for a in late), "a card of a late ask")
            await self.bot.kill()
        else:
            queries = self.tap(taps)
            await self.answered(queries, 1 if when == "first answered" else None)
            await self.bot.kill()
        self.bot_kills += 1
        since = self.relay.mark()
        await self.bot.start()
        await self.connected(self.bot_id, since=since)
        return {"down": "taps while it is down",
                "first answered": "killed once the first tap is answered",
                "answered": "killed once the taps are answered",
                "posting": "killed once the first card of two late asks shows"}[when]

    async def kill_host(self, taps: list[tuple[Ask, str]]) -> str:
        how = await self.killed(self.host, taps)
        waiting = [a for a in self.asks if a.process.returncode is None]
        orphan = self.rng.choice(waiting) if waiting and self.rng.random() < 0.5 else None
        if orphan is not None:
            orphan.process.kill()
            await orphan.process.wait()
        since = self.relay.mark()
        await self.start_host()
        await self.connected(self.host_id, since=since)
        if orphan is not None:
            item_id = host_items(self.tmp / "agent")[orphan.tool][0]
            orphan.process = await start_cli("ask", "--item", item_id, "--json",
                                             env=self.host_env)
        return how + (f", {orphan.tool}'s ask killed with it" if orphan else "")

    async def fill_relay(self, taps: list[tuple[Ask, str]]) -> str:
        since = self.bot.mark()
        self.relay.disk_full(True)
        await self.answered(self.tap(taps))
        await until(lambda: bool(self.bot.logged("not taken (unavailable)", since)),
                    "the relay refusing a decision")
        async with httpx.AsyncClient() as http:
            health = await http.get(f"http://127.0.0.1:{self.port}/health")
        assert health.status_code == 503 and "store: failing" in health.text, health.text
        self.relay.disk_full(False)
        return "until it refused a decision"

    async def fill_bot(self, taps: list[tuple[Ask, str]]) -> str:
        since, relay_since = self.bot.mark(), self.relay.mark()
        if self.database:  # the bot writes no file of its own: its server stops
            self.database.stop()
        else:
            self.bot.disk_full(True)
        self.tap(taps)
        late = await self.submit()
        await until(lambda: bool(self.bot.logged("cannot hold", since)),
                    "the bot failing to hold a tap")
        await self.handler_failed(self.bot_id, relay_since)
        assert not self.copies(late)
        if self.database:
            self.database.start()
        else:
            self.bot.disk_full(False)
        return f"until it could not hold a tap nor handle {late.tool}'s update"

    async def fill_host(self, taps: list[tuple[Ask, str]]) -> str:
        since = self.relay.mark()
        self.host.disk_full(True)
        await self.answered(self.tap(taps))
        await self.handler_failed(self.host_id, since)
        self.host.disk_full(False)
        return "until it could not handle a decision"

    async def handler_failed(self, device: str, since: int) -> None:
        """Wait until the relay has seen ``device`` fail on what it delivered after
        ``since`` (its session closed with code 1011), and check the relay kept it."""
        closed = f"session closed: {device} (code 1011)"
        await until(lambda: bool(self.relay.logged(closed, since)),
                    f"{device} failing on a delivery")
        assert self.relay_holds(device), (
            f"{device} acknowledged what it failed on while its store could not write")

    def relay_holds(self, device: str) -> int:
        """How many envelopes the relay keeps for ``device``."""
        with read_only(self.tmp / "relay" / "relay-queue.sqlite3") as db:
            row = db.execute("SELECT COUNT(*) FROM queue WHERE recipient = ?",
                             (device,)).fetchone()
        return int(row[0])

    async def calm(self, taps: list[tuple[Ask, str]]) -> str:
        await self.answered(self.tap(taps))
        return "no fault"

    async def play(self, number: int, fault: str) -> None:
        faults: dict[str, Callable[[list[tuple[Ask, str]]], Awaitable[str]]] = {
            "kill relay": self.kill_relay, "kill bot": self.kill_bot,
            "kill host": self.kill_host, "fill relay": self.fill_relay,
            "fill bot": self.fill_bot, "fill host": self.fill_host, "calm": self.calm}
        new = await self.start_asks(self.rng.randint(2, 3))
        taps = self.pick_taps()
        elapsed = asyncio.get_running_loop().time() - self.started
        print(f"{elapsed:4.1f} s, round {number}: {fault}; new {[a.tool for a in new]}; "
              f"taps {[f'{a.tool} {d}' for a, d in taps]}")
        print(f"  {await faults[fault](taps)}")

    # -- what must hold --------------------------------------------------------------

    async def settle(self) -> None:
        tapped = [a for a in self.asks if a.decision is not None]
        ends = {a.tool: asyncio.ensure_future(a.process.wait()) for a in tapped}
        await asyncio.wait(ends.values(), timeout=WAIT_S)
        waiting = [tool for tool, end in ends.items() if not end.done()]
        assert not waiting, f"tapped asks still waiting after {WAIT_S:g} s: {waiting}"
        for ask in tapped:
            assert ask.decision is not None
            result: Process = await finished(ask.process, timeout=5)
            code, word = EXITS[ask.decision]
            assert result.code == code, f"{ask.tool} ({ask.decision}): {result}"
            assert json.loads(result.out)["decision"] == word, f"{ask.tool}: {result}"
        ended = [a.tool for a in self.asks
                 if a.decision is None and a.process.returncode is not None]
        assert not ended, f"asks never tapped that ended: {ended}"

    def check_host(self) -> dict[str, str]:
        """Each item's state at the host, checked against the taps; by tool."""
        items = host_items(self.tmp / "agent")
        received = host_received(self.tmp / "agent")
        states = {}
        for ask in self.asks:
            item_id, state = items[ask.tool]
            want = {"approve": "approved", "deny": "denied", None: "pending"}[ask.decision]
            assert state == want, f"{ask.tool} ({ask.decision}): the host says {state}"
            verdicts = [verdict for item, verdict in received if item == item_id]
            if ask.decision is None:
                assert not verdicts, f"{ask.tool}, never tapped: decisions {verdicts}"
            else:
                assert verdicts.count("accepted") == 1, f"{ask.tool}: decisions {verdicts}"
            states[ask.tool] = state
        return states

    def card_problems(self, states: dict[str, str]) -> list[str]:
        problems = []
        for ask in self.asks:
            shown = self.copies(ask)
            if not shown:
                problems.append(f"{ask.tool}: no card")
            claims = [outcome(card) for card in shown]
            for card, claim in zip(shown, claims, strict=True):
                if claim is not None and claim != states[ask.tool]:
                    problems.append(f"{ask.tool}: a card claims {claim}, the host says "
                                    f"{states[ask.tool]}: {card.text!r}")
            if ask.decision is not None and states[ask.tool] not in claims:
                problems.append(f"{ask.tool}: no card shows {states[ask.tool]}: "
                                f"{[card.text for card in shown]}")
            if ask.decision is None and not all(card.buttons() for card in shown):
                problems.append(f"{ask.tool}: never tapped, a card lost its buttons")
        return problems

    async def check(self) -> None:
        for service in self.services:
            assert service.running, f"the {service.name} ended on its own"
        await self.settle()
        states = self.check_host()
        with contextlib.suppress(AssertionError):
            await until(lambda: not self.card_problems(states), "cards settled")
        problems = self.card_problems(states)
        assert not problems, "\n".join(problems)
        extra = {a.tool: len(self.copies(a)) - 1 for a in self.asks if len(self.copies(a)) > 1}
        print(f"extra copies {extra} for {self.bot_kills} bot kill(s)")
        assert sum(extra.values()) <= self.bot_kills, (
            f"extra copies {extra} for {self.bot_kills} bot kill(s)")
        for service in self.services:
            assert not service.logged("Traceback"), f"the {service.name} logged a traceback"


def read_only(path: Path) -> contextlib.closing[sqlite3.Connection]:
    """Another process's database, read beside it."""
    return contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True))


def host_items(state: Path) -> dict[str, tuple[str, str]]:
    """Each item the host keeps, by tool: its id and its state."""
    with read_only(state / "agent.sqlite3") as db:
        rows = db.execute("SELECT item_id, wire_json, state FROM items").fetchall()
    return {json.loads(wire)["tool"]: (item_id, state) for item_id, wire, state in rows}


def host_received(state: Path) -> list[tuple[str, str]]:
    """Each decision the host received: its item and its verdict (``accepted``, or
    ``refused: …``)."""
    with read_only(state / "agent.sqlite3") as db:
        rows = db.execute("SELECT item_id, verdict FROM received").fetchall()
    return [(item_id, verdict) for item_id, verdict in rows]


async def run_suite(tmp: Path, rng: random.Random, database: OwnServer | None) -> None:
    faults = [*rng.sample(FAULTS, len(FAULTS)), *rng.sample(FAULTS, len(FAULTS)), "calm"]
    async with TelegramStub(token=TOKEN) as tg:
        tg.add_user(ADA, "Ada", "Lovelace", username="ada")
        tg.add_private_chat(ADA)
        suite = Suite(tmp, tg, rng, database)
        try:
            await suite.setup()
            for number, fault in enumerate(faults, start=1):
                await suite.play(number, fault)
            await suite.check()
        finally:
            for service in suite.services:
                await service.stop()
            await kill_children()


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
async def test_faults_lose_no_decision_invent_none_and_cards_say_what_is_true(
        tmp_path: Path, store: str, request: pytest.FixtureRequest) -> None:
    database = request.getfixturevalue("own_postgres") if store == "postgresql" else None
    seed = int(os.environ.get(SEED_VARIABLE) or random.randrange(2**32))
    print(f"fault suite seed {seed}")
    try:
        await run_suite(tmp_path, random.Random(seed), database)
    except Exception as exc:
        exc.add_note(f"fault suite seed {seed}: replay with {SEED_VARIABLE}={seed}")
        raise
