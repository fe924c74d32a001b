"""Cards per second for the vectors' every-value-type approval and a 4,000-line diff,
beside a bare ``html.escape`` of the same text (the floor) measured in the same run."""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bot.protocol.payloads import Approval, Block, parse_inbox_update
from bot.render import Renderer
from bot.render.values import plain_text

VECTORS = Path(__file__).resolve().parent.parent / "tests" / "data" / "vectors.json"
NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)


def main(quick: bool) -> None:
    renderer = Renderer()
    seconds = 0.3 if quick else 3.0
    for name, approval in (("every value type", _every_value_type()), ("4,000-line diff", _diff())):
        text = "\n".join([approval.summary, *(plain_text(b.value) for b in approval.blocks)])

        def render(approval: Approval = approval) -> None:
            renderer.approval_card(approval, agent_name="build-bot", secrets="masked", now=NOW)

        def escape(text: str = text) -> None:
            html.escape(text, quote=True)

        cards = _rate(render, seconds)
        floor = _rate(escape, seconds)
        print(
            f"   {name:<18} {cards:>10,.0f} cards/s   html.escape {floor:>12,.0f}/s"
            f"   ratio {floor / cards:,.0f}x   ({len(text):,} chars)",
            flush=True,
        )


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
