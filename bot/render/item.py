"""The card of an item as the store holds it: its payload read back, and drawn as an
approval card or a question card."""

from __future__ import annotations

from datetime import datetime

from bot.core.model import ItemRow, parse_item
from bot.core.status import CardStatus
from bot.protocol.payloads import Clarification
from bot.render.edits import EditShown
from bot.render.renderer import RenderedCard, Renderer
from bot.render.values import SecretsMode


def render_card(
    renderer: Renderer,
    item: ItemRow,
    status: CardStatus,
    *,
    agent_name: str,
    secrets: SecretsMode,
    now: datetime,
    zone: str | None = None,
    edited: EditShown | None = None,
) -> RenderedCard:
    """``edited``: the edit the card shows (an approval's only)."""
    parsed = parse_item(item)
    if isinstance(parsed, Clarification):
        return renderer.question_card(parsed, agent_name=agent_name, now=now, status=status,
                                      zone=zone)
    return renderer.approval_card(
        parsed, agent_name=agent_name, secrets=secrets, now=now, status=status, zone=zone,
        edited=edited,
    )
