"""Rendering: approvals and questions as Telegram HTML cards, through Jinja templates."""

from bot.render.renderer import Attachment, CardStatus, RenderedCard, Renderer, Tap
from bot.render.values import SecretsMode

__all__ = ["Attachment", "CardStatus", "RenderedCard", "Renderer", "SecretsMode", "Tap"]
