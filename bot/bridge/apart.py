"""Large envelopes checked in a process apart: verifying the signature of up to a megabyte
and reading its payload holds the interpreter lock for tens of milliseconds, which the event
loop would otherwise wait for between a worker thread's long calls. The process pool starts
on the first large envelope; one that stopped is replaced, and what it held is checked in
the calling thread instead."""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from bot.protocol.envelope import Checked, Unsealed, check
from bot.protocol.snapshot import rehashed

log = logging.getLogger(__name__)

APART_BYTES = 128 * 1024
"""Envelopes whose plaintext is at least this are checked in the process apart."""
PROCESSES = 1


def _ignore_interrupts() -> None:
    # Ctrl-C reaches the whole process group: the bot stops the pool itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _here(checked: Checked) -> Checked:
    """What the process apart found, remembered with this process's hashes."""
    if isinstance(checked.outcome, tuple):
        return checked
    return Checked(rehashed(checked.outcome))


class Apart:
    """A lazily started process pool running :func:`bot.protocol.envelope.check`."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def check_all(self, items: Sequence[Unsealed]) -> list[Checked | None]:
        """Each envelope checked in the process apart; None for each when that process
        stopped (the caller checks them itself). Blocks: call it from a worker thread."""
        pool = self._started()
        try:
            futures = [pool.submit(check, unsealed) for unsealed in items]
            return [_here(future.result()) for future in futures]
        except BrokenProcessPool:
            log.warning("the process checking large envelopes stopped: %d checked here, "
                        "another started for the next", len(items))
            self._discard(pool)
            return [None] * len(items)

    def close(self) -> None:
        """Stop the process apart, if it was started."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def _started(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    PROCESSES, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_ignore_interrupts)
                log.info("started a process to check large envelopes")
            return self._pool

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)
