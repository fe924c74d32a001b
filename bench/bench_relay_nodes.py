"""The relay on PostgreSQL: two relay nodes sharing one database against one node on SQLite,
with the same load generator as ``bench_relay``'s many sessions.

Every sender's session is on node A and every receiver's on node B, so that each envelope
crosses nodes (queued by A, committed, announced by ``NOTIFY``, read by B from the
database); idle sessions alternate between the nodes. Measured, as in ``bench_relay``: the
most envelopes a second carried (every sender keeps a window of sends in flight), and
delivery latency (send written → ``deliver`` read) at a steady 3,000 a second. The floor is
one relay node on its SQLite queue (fsync on every commit) measured the same way in the
same run.

The load generator runs on the first core and the servers (relay nodes, PostgreSQL) on the
others, when there are several. The full run starts a PostgreSQL cluster of its own with
``fsync`` and ``synchronous_commit`` on, so that both stores make each commit durable;
quick mode (CI) uses ``$SKALD_TEST_POSTGRES_URL`` when set (a test cluster: fsync off).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
from bench_relay import (
    ENVELOPE_BYTES,
    STEADY_RATE,
    _Cpu,
    _cpu,
    _Figures,
    _header,
    _pairs_run,
    _percentile,
    _process,
    _relay_connection,
    _row,
)

from bot.protocol.identity import Identity

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import pgcluster  # noqa: E402  (the tests' throwaway cluster, standard library only)

DURABLE = ("fsync", "synchronous_commit", "full_page_writes")
CARRIED_SHARE = 0.5
"""The steady rate measured besides 3,000 a second, as a share of the most carried."""


def _cores() -> tuple[set[int], set[int]]:
    """The load generator's core, and the servers' (all of them on one core)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return set(cores), set(cores)
    return {cores[0]}, set(cores[1:])


def _pin(pid: int, cores: set[int]) -> None:
    """Pin a process and every thread and child it has now (its future children inherit)."""
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), cores)
            children = (task / "children").read_text().split()
            for child in children:
                _pin(int(child), cores)


@contextlib.contextmanager
def _cluster(quick: bool) -> Iterator[tuple[str, int | None]]:
    """A PostgreSQL server's URL, and its postmaster's pid when this run started it."""
    given = os.environ.get(pgcluster.URL_VARIABLE)
    if quick and given:
        yield given, None
        return
    folder = Path(tempfile.mkdtemp(prefix="skald-bench-pg-"))
    tests_options = pgcluster.SERVER_OPTIONS
    # The tests' cluster trades durability for speed; here each commit is made durable.
    pgcluster.SERVER_OPTIONS = " ".join(
        f"-c {option}" for option in re.findall(r"-c (\S+)", tests_options)
        if option.split("=")[0] not in DURABLE
    )
    try:
        url = pgcluster.start(folder)
        pgcluster.SERVER_OPTIONS = tests_options
        with psycopg.connect(url) as db:
            assert db.execute("SHOW fsync").fetchone() == ("on",)
        postmaster = int((folder / "data" / "postmaster.pid").read_text().split()[0])
        yield url, postmaster
    finally:
        pgcluster.stop(folder)


def _database(server: str) -> str:
    """A new database on ``server``; its URL."""
    name = f"bench_relay_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + "/" + name


def _relay_args(folder: str, size: tuple[int, int], *store: str) -> tuple[str, ...]:
    pairs, idle = size
    allowed = str(2 * (idle + 2 * pairs))
    return (
        "-m", "bot", "relay", "--port", "0", "--data", folder, "--idle-timeout", "0",
        "--max-unauthenticated-per-address", allowed,
        "--max-authenticated-per-address", allowed, *store,
    )


@contextlib.asynccontextmanager
async def _nodes(url: str, size: tuple[int, int]) -> AsyncIterator[list[tuple[str, int]]]:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        async with (
            _process(*_relay_args(a, size, "--store", url)) as node_a,
            _process(*_relay_args(b, size, "--store", url)) as node_b,
        ):
            yield [node_a, node_b]


async def _two_nodes(url: str, size: tuple[int, int], seconds: float,
                     servers: set[int], steady_rate: int) -> _Figures:
    async with _nodes(url, size) as nodes:
        for _, pid in nodes:
            _pin(pid, servers)
        alternate = itertools.cycle(nodes)

        async def connection(identity: Identity, role: str) -> object:
            node = nodes[0] if role == "send" else nodes[1] if role == "receive" else next(
                alternate)
            return await _relay_connection(node[0], identity, role)

        def cpu() -> _Cpu:
            used = [_cpu(pid) for _, pid in nodes]
            return _Cpu(sum(c.process for c in used), sum(c.loop for c in used))

        return await _pairs_run(  # type: ignore[arg-type]
            connection, cpu, *size, seconds, steady_rate
        )


async def _one_node(size: tuple[int, int], seconds: float, servers: set[int]) -> _Figures:
    with tempfile.TemporaryDirectory() as folder:
        async with _process(*_relay_args(folder, size)) as (url, pid):
            _pin(pid, servers)
            return await _pairs_run(
                lambda identity, role: _relay_connection(url, identity, role),
                lambda: _cpu(pid),
                *size,
                seconds,
            )


async def _run(quick: bool) -> None:
    pairs, idle, seconds = (5, 20, 0.1) if quick else (50, 1000, 5.0)
    generator, servers = _cores()
    with _cluster(quick) as (server, postmaster):
        if postmaster is not None:
            _pin(postmaster, servers)
        url = _database(server)
        os.sched_setaffinity(0, generator)
        try:
            single = await _one_node((pairs, idle), seconds, servers)
            double = await _two_nodes(url, (pairs, idle), seconds, servers, STEADY_RATE)
            # ... and at a rate they carry, if 3,000 a second is more (full runs only).
            carried = min(STEADY_RATE, int(double.rate * CARRIED_SHARE) // 100 * 100)
            if quick:
                carried = STEADY_RATE
            if carried < STEADY_RATE:
                lighter = await _two_nodes(url, (pairs, idle), seconds, servers, carried)
        finally:
            os.sched_setaffinity(0, generator | servers)
    durable = "fsync on" if postmaster is not None else "the test cluster: fsync off"
    print(
        f"   {pairs} sender -> receiver pairs beside {idle} idle sessions, envelopes of"
        f" {ENVELOPE_BYTES / 1024:.1f} KiB; ours: two nodes on one PostgreSQL ({durable}),"
        " senders on one, receivers on the other; floor: one node on SQLite"
    )
    print(f"   load generator on core {sorted(generator)}, servers on {sorted(servers)}")
    _header()
    _row("most carried (env/s)", double.rate, single.rate, "{:.0f}", higher_is_better=True)
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        value = _percentile(double.latencies, fraction) * 1000
        bound = _percentile(single.latencies, fraction) * 1000
        _row(f"delivery {label} at {STEADY_RATE}/s (ms)", value, bound, "{:.2f}")
    if carried < STEADY_RATE:
        for label, fraction in (("p50", 0.5), ("p99", 0.99)):
            value = _percentile(lighter.latencies, fraction) * 1000
            print(f"     delivery {label} at {carried}/s (ms)".ljust(45), f"{value:10.2f}")
    per_envelope = double.cpu.process / double.carried * 1e6
    floor_per_envelope = single.cpu.process / single.carried * 1e6
    _row("relay CPU per envelope (us)", per_envelope, floor_per_envelope, "{:.1f}")
    print("     (relay processes only: PostgreSQL's own CPU is not counted)")
    if double.refused or single.refused:
        print(f"     ({double.refused} and {single.refused} sends refused)")


def main(quick: bool) -> None:
    asyncio.run(_run(quick))


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])
