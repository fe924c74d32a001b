"""The bot process of ``bench_load``: ``python bench/monitored_bot.py CONFIG REPORT``.

It runs the bot as ``skald-telegram run`` does, plus what the benchmark measures from the
inside: a task that notes how late the event loop wakes it (the longest stall), the loop
time and CPU time of every delivery the bot applies (the envelopes that queued up on a
relay session, applied together), and the store's durable commits. On ``SIGUSR1`` it
writes what it saw since the previous report to REPORT (JSON, replaced atomically) and
starts afresh; ``SIGTERM`` stops it.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bot.app import Bot, settle_memory
from bot.config import load_config
from bot.signals import until_signalled

TICK_S = 0.002
_spent: contextvars.ContextVar[list[tuple[float, bool]]] = contextvars.ContextVar("spent")
"""The envelope being received: the CPU seconds applying it took, and whether on the loop."""


class Stats:
    """What the bot did since the last report."""

    def __init__(self) -> None:
        self.max_lag_s = 0.0
        self.max_busy_s = 0.0
        self.deliveries: list[tuple[float, float, float, int]] = []
        """Of each delivery applied (the envelopes that queued up on a relay session, applied
        together): seconds from its arrival to its changes, CPU seconds spent applying it
        on the event loop's thread (its loop time) and in all, and how many envelopes."""

    def take(self, durable_commits: int) -> dict[str, Any]:
        """What was seen so far, with the store's count of durable commits since it opened;
        starts afresh."""
        seen = {"max_lag_s": self.max_lag_s, "max_busy_s": self.max_busy_s,
                "deliveries": self.deliveries, "durable_commits": durable_commits}
        self.max_lag_s, self.max_busy_s, self.deliveries = 0.0, 0.0, []
        return seen


async def _monitor(stats: Stats) -> None:
    """Sleep :data:`TICK_S` again and again, noting how much later than asked it wakes
    (wall time: on a busy machine this counts waiting for a CPU too) and how much CPU the
    loop's thread spent meanwhile (the work that held the loop)."""
    loop = asyncio.get_running_loop()
    while True:
        started, cpu = loop.time(), time.thread_time()
        await asyncio.sleep(TICK_S)
        stats.max_lag_s = max(stats.max_lag_s, loop.time() - started - TICK_S)
        stats.max_busy_s = max(stats.max_busy_s, time.thread_time() - cpu)


async def _run(config_path: str, report: Path) -> None:
    config = load_config(config_path, environ=dict(os.environ))
    stats = Stats()
    async with Bot(config) as running:
        settle_memory()
        bridge = running.bridge
        receive, handle = bridge.receive, bridge.handle_envelopes
        loop_thread = threading.get_ident()

        def timed_handle(raws: list[dict[str, object]]) -> Any:
            cpu = time.thread_time()
            try:
                return handle(raws)
            finally:
                _spent.get().append((time.thread_time() - cpu,
                                     threading.get_ident() == loop_thread))

        async def timed(raws: list[dict[str, object]]) -> Any:
            spent: list[tuple[float, bool]] = []
            _spent.set(spent)  # a worker thread gets a copy of this context: the same list
            wall = time.perf_counter()
            try:
                return await receive(raws)
            finally:
                stats.deliveries.append((time.perf_counter() - wall,
                                         sum(cpu for cpu, on_loop in spent if on_loop),
                                         sum(cpu for cpu, _ in spent), len(raws)))

        bridge.receive = timed  # type: ignore[method-assign]
        bridge.handle_envelopes = timed_handle  # type: ignore[method-assign]

        def write_report() -> None:
            partial = report.with_suffix(".part")
            partial.write_text(json.dumps(stats.take(running.store.db.durable_commits)))
            partial.replace(report)

        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, write_report)
        monitor = asyncio.create_task(_monitor(stats))
        try:
            await until_signalled()
        finally:
            monitor.cancel()


if __name__ == "__main__":
    asyncio.run(_run(sys.argv[1], Path(sys.argv[2])))
