"""The Bot API's limits as the bot keeps them: 30 requests a second overall, counted from
when each left unless its answer shows it was held up, and a pace per chat that two
requests never beat at the stand-in, the most urgent of a chat's requests first (a
decided card's edit before new cards and reminders). Everything waits on the injected
clock."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

from world import ADA, approval, make_world, running_bot

from bot.testing.clock import ShiftedClock
from bot.tg.ratelimit import CARD, OUTCOME, REMINDER, ChatTurns, SlidingWindow


class Requests:
    """Requests through a window, each under way until the test answers it."""

    def __init__(self, window: SlidingWindow) -> None:
        self._window = window
        self._answers: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.left: list[str] = []

    def send(self, name: str) -> asyncio.Task[None]:
        answer = self._answers[name] = asyncio.Event()

        async def request() -> None:
            async with self._window.slot():
                self.left.append(name)
                await answer.wait()

        self.tasks[name] = task = asyncio.create_task(request())
        return task

    async def answer(self, name: str) -> None:
        self._answers[name].set()
        await asyncio.wait_for(self.tasks[name], 5)

    async def left_now(self, name: str) -> bool:
        """Whether the request left the window, once everything ready has run."""
        for _ in range(20):
            await asyncio.sleep(0)
        return name in self.left

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


@contextlib.asynccontextmanager
async def requests(limit: int) -> AsyncIterator[tuple[Requests, ShiftedClock]]:
    clock = ShiftedClock()
    through = Requests(SlidingWindow(limit, 1.0, clock))
    try:
        yield through, clock
    finally:
        await through.close()


async def test_a_burst_goes_at_once_and_the_next_a_second_after_it_left() -> None:
    async with requests(3) as (through, clock):
        for name in "abcde":
            through.send(name)
        assert await through.left_now("c")
        for name in "abc":
            await through.answer(name)  # answered at once: counted from when they left
        assert not await through.left_now("d")
        clock.advance(0.99)
        assert not await through.left_now("d")
        clock.advance(0.02)
        assert await through.left_now("e")
        assert through.left == ["a", "b", "c", "d", "e"]  # in the order they came


async def test_a_slow_answer_counts_the_request_from_about_when_it_arrived() -> None:
    async with requests(2) as (through, clock):
        through.send("quick")
        await through.answer("quick")  # the quickest round trip: about nothing
        through.send("slow")
        assert await through.left_now("slow")
        clock.advance(0.3)
        await through.answer("slow")  # held up 0.3 s: it may have arrived that late
        through.send("next")
        through.send("last")
        clock.advance(0.75)
        assert await through.left_now("next")  # the quick one's place, a second after it
        await through.answer("next")
        clock.advance(0.2)
        assert not await through.left_now("last")  # "slow" counts until 1.3 s
        clock.advance(0.06)
        assert await through.left_now("last")


async def test_a_request_under_way_holds_its_place_until_answered() -> None:
    async with requests(1) as (through, clock):
        through.send("first")
        through.send("second")
        assert await through.left_now("first")
        clock.advance(5)
        assert not await through.left_now("second")
        await through.answer("first")  # nothing quicker seen: it may have just arrived
        assert not await through.left_now("second")
        clock.advance(1.01)
        assert await through.left_now("second")


async def test_two_cards_in_one_chat_reach_telegram_no_closer_than_the_pace(
    tmp_path: Path,
) -> None:
    pace = 1.0
    async with make_world(tmp_path, stub_on_bot_clock=True, chat_pace_seconds=pace) as world, \
            running_bot(world):
        await world.pair(ADA)
        for index in range(4):
            world.agent.submit_approval(approval(f"paced{index}"))

        def sends() -> list[float]:
            return [r.at for r in world.tg.calls("sendMessage")
                    if r.params.get("chat_id") == ADA and "(paced" in str(r.params["text"])]

        for _ in range(2000):
            if len(sends()) == 4:
                break
            world.clock.advance(0.1)  # a busy bot: its clock runs ahead in uneven steps
            await asyncio.sleep(0.002)
        times = sends()
        assert len(times) == 4
        assert all(later - earlier >= pace for earlier, later in itertools.pairwise(times))


async def test_a_chat_takes_its_most_urgent_request_first_and_keeps_the_pace() -> None:
    clock = ShiftedClock()
    turns = ChatTurns(1.0, clock)
    went: list[str] = []

    async def request(name: str, urgency: int) -> None:
        async with turns.turn(ADA, urgency):
            went.append(name)

    await request("first", CARD)
    waiting = [asyncio.create_task(request(name, urgency)) for name, urgency in (
        ("new card", CARD), ("reminder", REMINDER), ("outcome", OUTCOME), ("other", CARD))]
    for _ in range(20):
        await asyncio.sleep(0)
    assert went == ["first"]  # the pace holds them all
    for _ in range(4):
        clock.advance(1.0)
        for _ in range(20):
            await asyncio.sleep(0)
    await asyncio.gather(*waiting)
    assert went == ["first", "outcome", "reminder", "new card", "other"]


async def test_a_decided_card_loses_its_buttons_before_the_new_cards_queued_ahead_of_it(
    tmp_path: Path,
) -> None:
    async with make_world(tmp_path, stub_on_bot_clock=True, chat_pace_seconds=1.0) as world, \
            running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("decided"))
        first = await world.wait_card(ADA, "(decided)")
        for index in range(5):
            world.agent.submit_approval(approval(f"queued{index}"))
        await world.tg.wait_for(lambda tg: any("(queued0)" in m.text for m in world.cards(ADA)))
        tapped = len(world.tg.requests)
        await world.answer_of(world.tap(ADA, first, ADA, "Approve"))

        def in_chat() -> list[str]:
            """What reached the stand-in in the chat since the tap, in order."""
            shown = []
            for request in world.tg.requests[tapped:]:
                text = str(request.params.get("text", ""))
                if request.params.get("chat_id") != ADA:
                    continue
                if request.method == "sendMessage" and "(queued" in text:
                    shown.append("new card")
                elif request.method == "editMessageText" and "(decided)" in text:
                    shown.append("decided")
            return shown

        for _ in range(2000):
            if in_chat().count("new card") == 4:
                break
            world.clock.advance(0.1)
            await asyncio.sleep(0.002)
        order = in_chat()
        assert order.count("new card") == 4
        # At most the one new card whose turn had come when the tap did goes first.
        assert "decided" in order[:2], order
