"""Rendering: approvals and questions as Telegram HTML cards, through Jinja templates."""

from bot.render.renderer import (
    Attachment,
    CardStatus,
    GrantGiven,
    RenderedCard,
    Renderer,
    Tap,
)
from bot.render.values import SecretsMode

__all__ = ["Attachment", "CardStatus", "GrantGiven", "RenderedCard", "Renderer", "SecretsMode",
           "Tap"]
