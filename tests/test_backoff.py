"""One backoff for every loop that tries again: its waits, their cap, the jitter, the
fresh start; and the supervisor waiting it out on the injected clock."""

from __future__ import annotations

import asyncio

from conftest import eventually

from bot.backoff import Backoff, Retries
from bot.supervisor import Supervisor
from bot.testing.clock import ShiftedClock


def test_waits_double_up_to_the_cap_and_start_over_after_a_reset() -> None:
    retries = Retries(Backoff(initial_s=0.5, max_s=30.0))
    assert [retries.next_delay() for _ in range(9)] == [
        0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    retries.reset()
    assert retries.next_delay() == 0.5


def test_a_long_run_of_failures_stays_at_the_cap() -> None:
    backoff = Backoff(initial_s=5.0, max_s=600.0)
    assert backoff.delay(1) == 5.0
    assert backoff.delay(8) == 600.0
    assert backoff.delay(10_000) == 600.0


def test_jitter_draws_between_half_and_all_of_the_wait() -> None:
    drawn: list[tuple[float, float]] = []

    def draw(low: float, high: float) -> float:
        drawn.append((low, high))
        return low

    retries = Retries(Backoff(initial_s=0.5, max_s=1.0, jitter=True), draw=draw)
    assert [retries.next_delay() for _ in range(3)] == [0.25, 0.5, 0.5]
    assert drawn == [(0.25, 0.5), (0.5, 1.0), (0.5, 1.0)]


async def test_the_supervisor_waits_out_its_backoff_on_the_clock() -> None:
    """A task that fails is restarted after 60 s, then 120 s of the clock; one that then
    ran longer than the longest wait starts over at 60 s."""
    clock = ShiftedClock()
    supervisor = Supervisor(backoff_initial=60.0, backoff_max=120.0, max_failures=10,
                            clock=clock)
    runs: list[float] = []
    keep_running = asyncio.Event()

    async def flaky() -> None:
        runs.append(clock.time())
        if len(runs) == 3:
            await keep_running.wait()
        raise RuntimeError("down")

    supervisor.start("flaky", flaky)
    await eventually(lambda: len(runs) == 1)

    async def restarted_after(seconds: float, count: int) -> None:
        clock.advance(seconds - 1)
        await asyncio.sleep(0.05)
        assert len(runs) == count - 1, "restarted before its backoff"
        clock.advance(1)
        await eventually(lambda: len(runs) == count)

    await restarted_after(60, 2)
    await restarted_after(120, 3)
    clock.advance(121)  # the third run lasts longer than the longest wait
    keep_running.set()
    await eventually(lambda: supervisor.states["flaky"].restarts == 3)
    await restarted_after(60, 4)
    await supervisor.stop()
