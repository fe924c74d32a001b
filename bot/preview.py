"""Printing the Telegram cards a payload file gives (``skald-telegram render FILE.json``).

For template authors and operators: it accepts a single approval, a single question, an
``inbox_update`` body or a whole payload ``{"kind": "inbox_update", "body": …}``, and
prints each card's HTML plus a note about the file that would be attached.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from bot.errors import PayloadError, RenderError
from bot.protocol.encoding import loads_limited
from bot.protocol.payloads import (
    MAX_PAYLOAD_BYTES,
    Approval,
    Clarification,
    InboxUpdate,
    parse_approval,
    parse_clarification,
    parse_inbox_update,
    parse_payload,
)
from bot.render.renderer import RenderedCard, Renderer
from bot.render.values import SecretsMode


def render_command(args: argparse.Namespace) -> int:
    """Print the cards for ``args.file``; ``args.chat_type == "group"`` masks secrets,
    ``args.templates`` names an operator template folder. Bad input raises a
    :class:`bot.errors.SkaldError` subclass (the CLI prints it and exits 1)."""
    path = Path(args.file)
    update = load_items(path)
    renderer = Renderer(Path(args.templates) if args.templates else None)
    secrets: SecretsMode = "masked" if args.chat_type == "group" else "spoiler"
    now = _clock()
    for approval in update.approvals:
        card = renderer.approval_card(
            approval, agent_name=update.agent_name, secrets=secrets, now=now
        )
        _print_card("approval " + approval.id, card)
    for clarification in update.clarifications:
        card = renderer.question_card(clarification, agent_name=update.agent_name, now=now)
        _print_card("question " + clarification.id, card)
    return 0


def load_items(path: Path) -> InboxUpdate:
    """Read ``path`` as any of the accepted shapes, as an :class:`InboxUpdate`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RenderError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        obj = loads_limited(raw, max_bytes=MAX_PAYLOAD_BYTES)
        if not isinstance(obj, dict):
            raise PayloadError("expected a JSON object")
        return _as_update(obj, raw)
    except PayloadError as exc:
        raise PayloadError(f"{path}: {exc}") from exc


def _as_update(obj: dict[str, object], raw: bytes) -> InboxUpdate:
    if "kind" in obj:
        payload = parse_payload(raw)
        if not isinstance(payload, InboxUpdate):
            raise PayloadError(f"a {obj['kind']!s:.40} payload has no cards; expected inbox_update")
        return payload
    if any(key in obj for key in ("approvals", "clarifications", "rev")):
        return parse_inbox_update(obj)
    if "tool" in obj:
        return _single(parse_approval(obj))
    if "question" in obj:
        return _single(parse_clarification(obj))
    raise PayloadError("not an approval, a question, an inbox_update body or a payload")


def _single(item: Approval | Clarification) -> InboxUpdate:
    if isinstance(item, Approval):
        return InboxUpdate(rev=0, agent_name="", approvals=(item,))
    return InboxUpdate(rev=0, agent_name="", clarifications=(item,))


def _print_card(title: str, card: RenderedCard) -> None:
    print(f"=== {title} ===")
    print(card.html)
    if card.attachment is not None:
        size = len(card.attachment.content)
        print(f"--- attachment: {card.attachment.filename} ({size:,} bytes)")
    print()


def _clock() -> datetime:
    """The one clock read of this package: the command line shows cards as of now."""
    return datetime.now(UTC)
