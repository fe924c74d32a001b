"""Shared fixtures and helpers: a real relay on a loopback port, two device identities,
a bridge over a real store with one paired agent, and :func:`eventually` for conditions
that no event announces."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pgcluster import URL_VARIABLE, ClusterError
from pgcluster import halt as halt_cluster
from pgcluster import resume as resume_cluster
from pgcluster import start as start_cluster
from pgcluster import stop as stop_cluster

from bot.bridge import Bridge
from bot.clock import SYSTEM_CLOCK
from bot.config import parse_config
from bot.core.model import Peer
from bot.protocol.identity import Identity
from bot.relay.server import RelayServer
from bot.store import Store

# PTB's future behaviour (RetryAfter.retry_after as a timedelta), as the command line sets it.
os.environ.setdefault("PTB_TIMEDELTA", "1")

EVENTUALLY_TIMEOUT_S = 10.0
_databases = itertools.count(1)


async def eventually(condition: Callable[[], bool], timeout: float = EVENTUALLY_TIMEOUT_S) -> None:
    """Wait until ``condition()`` holds, checking every few milliseconds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server's URL: ``$SKALD_TEST_POSTGRES_URL`` (``.ci/run`` starts one), or
    a throwaway cluster started for this run."""
    given = os.environ.get(URL_VARIABLE)
    if given:
        yield given
        return
    # Not below pytest's own folders: as root, the cluster's owner must reach its folder.
    folder = Path(tempfile.mkdtemp(prefix="skald-pg-"))
    try:
        url = start_cluster(folder)
    except ClusterError as exc:
        stop_cluster(folder)
        pytest.fail(f"no PostgreSQL for the tests: {exc}", pytrace=False)
    try:
        yield url
    finally:
        stop_cluster(folder)


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """The URL of a new, empty database on :func:`postgres_server`, for one test."""
    import psycopg

    name = f"test_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return postgres_server.rsplit("/", 1)[0] + "/" + name


@dataclass(frozen=True)
class OwnServer:
    """A PostgreSQL cluster of one test's own, which it may stop and start again."""

    folder: Path
    admin_url: str
    database: str
    """The URL of a migrated database for the bot."""

    def stop(self) -> None:
        halt_cluster(self.folder)

    def start(self) -> None:
        resume_cluster(self.folder, self.admin_url)


@pytest.fixture
def own_postgres() -> Iterator[OwnServer]:
    """A cluster for a test that stops the bot's database server (a throwaway one: the
    shared server stays up for the others)."""
    import psycopg

    folder = Path(tempfile.mkdtemp(prefix="skald-pg-own-"))
    try:
        url = start_cluster(folder)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE bot")
        database = url.rsplit("/", 1)[0] + "/bot"
        Store.migrate(database)
        yield OwnServer(folder, url, database)
    except ClusterError as exc:
        pytest.fail(f"no PostgreSQL for the test: {exc}", pytrace=False)
    finally:
        stop_cluster(folder)


@pytest.fixture(params=["sqlite", "postgresql"])
def state_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    """Where the bot keeps its state, once for each store: the SQLite file in
    ``tmp_path / "state"``, then a new PostgreSQL database, migrated. The bots that
    :mod:`world` configures while the test runs use it (``[storage] url``)."""
    import world

    if request.param == "sqlite":
        yield tmp_path / "state" / "skald-telegram.sqlite3"
        return
    url: str = request.getfixturevalue("postgres_url")
    Store.migrate(url)
    world.STORAGE_URL = url
    try:
        yield url
    finally:
        world.STORAGE_URL = None


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[RelayServer]:
    async with RelayServer(tmp_path / "relay") as server:
        yield server


@pytest.fixture
def alice() -> Identity:
    return Identity.generate("alice")


@pytest.fixture
def bob() -> Identity:
    return Identity.generate("bob")


@pytest.fixture
def bridge_and_agent(tmp_path: Path, state_store: Path | str
                     ) -> Iterator[tuple[Bridge, Identity, Store]]:
    """A bot's bridge over a store (each of :func:`state_store`), and an agent paired and
    bound to chat 5."""
    device, agent = Identity.generate("bot"), Identity.generate("agent")
    store = Store.open(state_store)
    config = parse_config({"telegram": {"token": "1:x", "admins": [1]},
                           "state": {"dir": str(tmp_path)}}, base=tmp_path)
    bridge = Bridge(identity=device, store=store, config=config, clock=SYSTEM_CLOCK)
    store.agents.add_peer(Peer(agent.id, "ws://relay", json.dumps(agent.card.to_json()),
                               "agent"), 0)
    store.agents.bind(agent.id, 5, None, 0)
    yield bridge, agent, store
    bridge.close()
    store.close()
