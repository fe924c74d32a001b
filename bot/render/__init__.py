"""Rendering: approvals and questions as Telegram HTML cards, through Jinja templates."""

from bot.render.item import render_card
from bot.render.renderer import Attachment, RenderedCard, Renderer
from bot.render.values import SecretsMode

__all__ = ["Attachment", "RenderedCard", "Renderer", "SecretsMode", "render_card"]
