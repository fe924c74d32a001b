"""Supervision of the bot's long-lived tasks: a task that fails is logged with its
traceback and restarted after a backoff; one that keeps failing is given up on, and the
process exits non-zero so that its own supervisor (systemd, Docker) restarts it. A task
stopped by the store being unavailable (a full disk, a database server away) is waited out
instead: restarted with the same backoff, never given up on for it (the store's health says
it is failing).

Each task's liveness goes into the status file, where ``skald-telegram health`` reads it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from bot.backoff import Backoff, Retries
from bot.clock import SYSTEM_CLOCK, Clock
from bot.errors import StoreUnavailable

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S: Final = 1.0
BACKOFF_MAX_S: Final = 30.0
MAX_FAILURES: Final = 5
"""Failures within :data:`FAILURE_WINDOW_S` after which a task is given up on."""
FAILURE_WINDOW_S: Final = 600.0

CANCEL_AGAIN_S: Final = 0.1

TaskFactory = Callable[[], Coroutine[Any, Any, None]]


@dataclass
class TaskState:
    """One supervised task, as the status file shows it."""

    alive: bool = True
    restarts: int = 0
    last_error: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"alive": self.alive, "restarts": self.restarts, "last_error": self.last_error}


class Supervisor:
    """Runs and restarts named tasks; :attr:`failed` is set when one is given up on."""

    def __init__(
        self,
        *,
        backoff_initial: float = BACKOFF_INITIAL_S,
        backoff_max: float = BACKOFF_MAX_S,
        max_failures: int = MAX_FAILURES,
        window_s: float = FAILURE_WINDOW_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._backoff = Backoff(backoff_initial, backoff_max)
        self._max_failures = max_failures
        self._window_s = window_s
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.states: dict[str, TaskState] = {}
        self.failed = asyncio.Event()
        self.changed = asyncio.Event()
        """Set whenever a task fails (the heartbeat writes the status file at once)."""
        self.reason: str | None = None

    def start(self, name: str, factory: TaskFactory) -> None:
        """Run ``factory()`` as the task ``name`` until :meth:`stop`."""
        self.states[name] = TaskState()
        self._tasks[name] = asyncio.create_task(self._keep(name, factory), name=name)

    def give_up(self, reason: str) -> None:
        """Stop the process (exit 1) for ``reason``, as when a task keeps failing."""
        self.reason = reason
        log.critical("giving up: %s", reason)
        self.failed.set()

    def liveness(self) -> dict[str, dict[str, object]]:
        return {name: state.to_json() for name, state in self.states.items()}

    async def stop(self, *names: str) -> None:
        """Cancel the tasks ``names`` (all when none is named) and wait for them."""
        tasks = [task for name, task in self._tasks.items() if not names or name in names]
        # Cancel again until each task has ended: on Python 3.11, asyncio.wait_for can
        # swallow a cancellation that arrives just as what it waits for completes.
        while pending := [task for task in tasks if not task.done()]:
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _keep(self, name: str, factory: TaskFactory) -> None:
        state = self.states[name]
        failures: list[float] = []
        retries = Retries(self._backoff)
        while True:
            started = self._clock.time()
            try:
                await factory()
                error = "stopped by itself"
                log.error("%s stopped by itself; restarting it", name)
            except asyncio.CancelledError:
                raise
            except StoreUnavailable as exc:
                delay = retries.next_delay()
                log.warning("%s paused, the store cannot work for now (%s); again in %.1f s",
                            name, exc, delay)
                await self._clock.sleep(delay)
                continue
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.exception("%s failed", name)
            self.changed.set()
            now = self._clock.time()
            if now - started > self._backoff.max_s:
                retries.reset()  # it ran well for a while: start over
            failures = [t for t in failures if now - t <= self._window_s] + [now]
            state.last_error = error
            if len(failures) >= self._max_failures:
                state.alive = False
                self.reason = (f"{name} failed {len(failures)} times within "
                               f"{self._window_s:g} s (last: {error})")
                log.critical("giving up: %s", self.reason)
                self.failed.set()
                return
            state.restarts += 1
            delay = retries.next_delay()
            log.warning("restarting %s in %.1f s (failure %d of %d)", name, delay,
                        len(failures), self._max_failures)
            await self._clock.sleep(delay)
