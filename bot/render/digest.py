"""What a digest shows of each waiting approval: its title line (a shell command as it
will run, a file change with its +/− line counts), and why an item is left out of batch
decisions (a secret, a card that warns, or an edit in progress)."""

from __future__ import annotations

import json
from typing import Literal

from bot import hidden
from bot.protocol.payloads import Approval, Block
from bot.render.hosts import honest_hosts
from bot.render.masking import masker
from bot.render.values import plain_text, secret_values

LINE_CHARS = 600
"""A digest line longer than this is cut with "…" (the card shows it all)."""

LeftOut = Literal["secret", "hidden", "host", "editing"]


def left_out(approval: Approval) -> LeftOut | None:
    """Why ``approval`` may only be decided on its own card (None: it may be batched): it
    holds a secret block, or its card warns of hidden characters or a host name that
    could pass for another. Anything the card could show is looked at."""
    if any(block.value_type == "secret" for block in approval.blocks):
        return "secret"
    shown: list[object] = [approval.summary, approval.tool, approval.arguments,
                           *(block.label for block in approval.blocks),
                           *(block.value for block in approval.blocks)]
    if hidden.holds_hidden(shown):
        return "hidden"
    if honest_hosts(json.dumps(shown, ensure_ascii=False))[1]:
        return "host"
    return None


def digest_line(approval: Approval) -> str:
    """The item's title line: its command if it has one, else its summary, with the
    +/− line counts of a diff it carries; secrets masked, hidden characters marked."""
    mask = masker(secret_values(approval.blocks))
    command = _first(approval.blocks, "command")
    text = plain_text(command.value) if command is not None else approval.summary
    diff = _first(approval.blocks, "diff")
    if diff is not None:
        added, removed = _counts(plain_text(diff.value))
        text = f"{text} (+{added} −{removed})"
    text = " ⏎ ".join(line.strip() for line in hidden.BREAKS.sub("\n", text).split("\n")
                      if line.strip())
    line = hidden.strip(honest_hosts(mask(text))[0])
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def _first(blocks: tuple[Block, ...], value_type: str) -> Block | None:
    return next((b for b in blocks if b.value_type == value_type), None)


def _counts(diff: str) -> tuple[int, int]:
    lines = diff.splitlines()
    added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
    removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
    return added, removed

