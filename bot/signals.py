"""Waiting for SIGTERM or SIGINT (Ctrl-C) in a running event loop, for every long-running
command (the bot, the relay, the demo)."""

from __future__ import annotations

import asyncio
import contextlib
import signal

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def until_signalled() -> None:
    """Return when the process receives SIGTERM or SIGINT.

    Where the loop cannot handle signals (Windows), this waits forever and Ctrl-C stops
    the process with :class:`KeyboardInterrupt` as usual.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    await stop.wait()
