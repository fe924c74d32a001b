"""Stopping on SIGTERM or SIGINT (Ctrl-C) in a running event loop, for every long-running
command (the bot, the relay, the demo, the playground)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def run_until_stopped(main: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run ``main(stop)``, with ``stop`` set when the process receives SIGTERM or SIGINT.

    Where the loop cannot handle signals (Windows), ``stop`` is never set and Ctrl-C stops
    the process with :class:`KeyboardInterrupt` as usual.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for signum in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
            handled.append(signum)
    try:
        return await main(stop)
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


async def until_signalled() -> None:
    """Return when the process receives SIGTERM or SIGINT."""

    async def wait(stop: asyncio.Event) -> int:
        await stop.wait()
        return 0

    await run_until_stopped(wait)
