"""Cards per second for the vectors' every-value-type approval, a 4,000-line diff and an
approval of 6,500 secrets each echoed in a row of its own (13,000 blocks: the card shows
a few dozen, the attached file all of them), beside a bare ``html.escape`` of the same
text (the floor) measured in the same run; and the first render of an overflowing card
(200 rows: its blocks' skeleton costs not yet known) beside a redraw of the same card (they
are remembered), the floor of a first render."""

from __future__ import annotations

import html
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bot.protocol.payloads import Approval, Block, parse_inbox_update
from bot.render import Renderer, fit
from bot.render.values import plain_text

VECTORS = Path(__file__).resolve().parent.parent / "tests" / "data" / "vectors.json"
NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)


def main(quick: bool) -> None:
    renderer = Renderer()
    seconds = 0.3 if quick else 3.0
    cases = (
        ("every value type", _every_value_type()),
        ("4,000-line diff", _diff()),
        ("6,500 secrets", _many_secrets()),
    )
    for name, approval in cases:
        text = "\n".join([approval.summary, *(plain_text(b.value) for b in approval.blocks)])

        def render(approval: Approval = approval) -> None:
            renderer.approval_card(approval, agent_name="build-bot", secrets="masked", now=NOW)

        def escape(text: str = text) -> None:
            html.escape(text, quote=True)

        cards = _rate(render, seconds)
        floor = _rate(escape, seconds)
        print(
            f"   {name:<18} {cards:>10,.{1 if cards < 10 else 0}f} cards/s"
            f"   html.escape {floor:>12,.0f}/s"
            f"   ratio {floor / cards:,.0f}x   ({len(text):,} chars)",
            flush=True,
        )


    overflowing = _rows(200)

    def redraw() -> None:
        renderer.approval_card(overflowing, agent_name="build-bot", secrets="masked", now=NOW)

    def first() -> None:
        fit.forget_skeletons()
        redraw()

    firsts, redraws = _interleaved(first, redraw, 30 if quick else 300)
    print(
        f"   {'overflowing card':<18} first render {firsts * 1000:.2f} ms"
        f"   redraw (floor) {redraws * 1000:.2f} ms   ratio {firsts / redraws:.2f}x"
        f"   (200 rows of 120 chars; medians)",
        flush=True,
    )


def _interleaved(
    one: Callable[[], None], other: Callable[[], None], rounds: int
) -> tuple[float, float]:
    """Median seconds of each, run in turns so that a busy machine slows both alike."""
    ones: list[float] = []
    others: list[float] = []
    other()
    for _ in range(rounds):
        for work, times in ((one, ones), (other, others)):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
    return statistics.median(ones), statistics.median(others)


def _rows(count: int) -> Approval:
    blocks = tuple(Block("key_value", f"Setting {i}", f"value {i} " * 15, "string")
                   for i in range(count))
    return Approval("apr_rows", "configure", "Apply settings", blocks, None)


def _every_value_type() -> Approval:
    vectors = json.loads(VECTORS.read_text("utf-8"))
    inbox = parse_inbox_update(vectors["open"][0]["payload"]["body"])
    return next(a for a in inbox.approvals if a.id == "apr_all_3")


def _diff() -> Approval:
    lines = (
        ("+", "-", " ")[i % 3] + " value_" + str(i) + " = compute(" + str(i) + ")"
        for i in range(4000)
    )
    block = Block("block", "Diff", "\n".join(lines), "diff")
    return Approval("apr_diff", "write_file", "Write src/app.py", (block,), None)


def _many_secrets() -> Approval:
    blocks = []
    for i in range(6500):
        secret = f"sk_live_{i:08d}{i * 7919 % 100_000:05d}"
        blocks.append(Block("key_value", f"Key {i}", secret, "secret"))
        blocks.append(Block("key_value", f"Row {i}", f"value {i} uses {secret} here", "string"))
    return Approval("apr_secrets", "configure", "Rotate keys", tuple(blocks), None)


def _rate(work: Callable[[], None], seconds: float) -> float:
    """Calls per second of ``work`` over about ``seconds``."""
    work()
    calls = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        work()
        calls += 1
        now = time.perf_counter()
        if now >= deadline:
            return calls / (now - started)
