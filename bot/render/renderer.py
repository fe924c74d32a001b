"""Approval and question cards: payload dataclasses in, Telegram HTML (plus an optional
file with the full details) out.

The bot calls :class:`Renderer`; it reads no clock (``now`` is passed in) and sends
nothing. Every card fits Telegram's limits whatever the input: values are cut to fit and
the full text travels as an :class:`Attachment`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from bot import hidden
from bot.core.status import CardStatus, Tap
from bot.errors import RenderError
from bot.protocol.payloads import Approval, Clarification
from bot.render.edits import EditShown, change_views
from bot.render.environment import build_environment, in_zone
from bot.render.fit import (
    LIMIT_BYTES,
    LIMIT_UNITS,
    Fitted,
    RenderCard,
    cut_view,
    fit_views,
    measure,
)
from bot.render.hosts import honest_hosts
from bot.render.markdown import escape
from bot.render.masking import NO_SECRETS, Masker, clean, masker
from bot.render.values import (
    BlockView,
    SecretsMode,
    arguments_view,
    block_view,
    for_attachment,
    hide_credentials,
    options_view,
    question_view,
    secret_values,
)

log = logging.getLogger(__name__)

ALERT_CHARS = 200
"""The longest text Telegram shows in a callback-query alert."""

# Room for the parts of a card that are never cut (units, entities): longer ones are
# shortened with "…" so the blocks always keep some room.
_NAME_ROOM = (64, 3)
_TITLE_ROOM = (300, 16)
_REASON_ROOM = (300, 8)
_TAP_NAME_ROOM = (32, 2)
_MAX_TAPS_SHOWN = 10
_FILENAME_PART = re.compile(r"[^A-Za-z0-9._-]+")
_SPOILER = re.compile(r"<tg-spoiler>.*?</tg-spoiler>", re.DOTALL)
SPOILER_MASK = "••••••"
_BOT_COMMAND = re.compile(r"(?<![\w/<>])/(?=\w)")
"""Where Telegram would start a tappable bot command (``./build``, ``(/deploy``)."""
_WORD_JOINER = "\u2060"


@dataclass(frozen=True)
class Attachment:
    """A file to send with a card: the full details that did not fit."""

    filename: str
    content: bytes


@dataclass(frozen=True)
class RenderedCard:
    """A card ready to send: ``html`` for parse mode HTML, ``plain`` its visible text (the
    fallback when Telegram refuses the HTML), and the file to attach, if any."""

    html: str
    plain: str
    attach: Callable[[], Attachment] | None = field(default=None, repr=False, compare=False)
    """Builds :attr:`attachment`: the file is only built when asked for (a card is drawn
    again on every change, its file sent once)."""
    hidden: bool = False
    """Whether the card warns of invisible or direction-changing characters: no grant may
    be given on it (what a person saw is not all that would run)."""

    @functools.cached_property
    def attachment(self) -> Attachment | None:
        return self.attach() if self.attach is not None else None


@dataclass(frozen=True)
class Expiry:
    """When an item expires, as the templates show it."""

    at: datetime
    minutes: int
    expired: bool
    other_day: bool


class Renderer:
    """Renders cards and messages from Jinja templates.

    ``template_dir`` is an operator's folder of templates that take precedence over the
    built-in ones, file by file (see :func:`bot.render.environment.build_environment`).
    """

    def __init__(self, template_dir: Path | None = None) -> None:
        self._env = build_environment(template_dir)
        self._approval = self._template("approval.html.j2")
        self._question = self._template("question.html.j2")
        self._attachment = self._template("attachment.txt.j2")
        try:
            self._macros: Any = self._template("macros.html.j2").module
        except (jinja2.TemplateError, TypeError, ValueError, AttributeError) as exc:
            raise RenderError(f"template macros.html.j2 is broken: {exc}") from exc

    def title(self, item: Approval | Clarification) -> str:
        """An item's one-line title (summary or question) with every secret masked and
        hidden characters marked, for lists such as /pending and /history; a title of
        several lines ends with "(+N more lines)"."""
        if isinstance(item, Approval):
            mask = masker(secret_values(item.blocks))
            text = item.summary
        else:
            mask, text = NO_SECRETS, item.question
        return hidden.one_line(hidden.strip(honest_hosts(_title_text(text, mask))[0]))

    def approval_card(
        self,
        approval: Approval,
        *,
        agent_name: str,
        secrets: SecretsMode,
        now: datetime,
        status: CardStatus | None = None,
        zone: str | None = None,
        edited: EditShown | None = None,
    ) -> RenderedCard:
        """The card for one approval; ``secrets`` is ``"spoiler"`` (shown behind a
        spoiler in its own block), ``"masked"`` (never shown) or ``"details"`` (never
        shown; its name and "reveal in Details" instead); times in the IANA time zone
        ``zone`` (UTC by default). An ``edited`` card shows the edited call instead of the
        agent's description of its own: the change, then every argument."""
        secret_texts = secret_values(approval.blocks)
        arguments = None
        shown_arguments = edited.arguments if edited is not None else approval.arguments
        if (edited is not None or not approval.blocks) and shown_arguments is not None:
            arguments, credentials = hide_credentials(shown_arguments)
            secret_texts += credentials
        mask = masker(secret_texts)
        views = [block_view(block, mask=mask, secrets=secrets) for block in approval.blocks]
        if arguments is not None:
            views = [arguments_view(arguments, mask=mask)]
        if edited is not None and isinstance(approval.arguments, dict):
            views = [*change_views(approval.arguments, edited.arguments, mask=mask), *views]
        summary = approval.summary if edited is None else ""
        title, title_punycode = honest_hosts(_title_text(summary, mask))
        context = self._header_context(agent_name, approval.expires_at, now, status, mask,
                                       zone)
        tool, tool_punycode = honest_hosts(hidden.one_line(mask(clean(approval.tool))))
        context["tool"] = _capped(hidden.reveal(tool), _NAME_ROOM)
        context["hidden"] = (context["hidden"] or hidden.has_hidden(title)
                             or hidden.has_hidden(tool))
        context["punycode"] = context["punycode"] or title_punycode or tool_punycode
        context["edited_by"] = _capped(hidden.strip(hidden.one_line(mask(clean(
            edited.by)))), _NAME_ROOM) if edited is not None else None
        # A secret can sit in the tool name or the item id too: the file name, like
        # everything else a chat sees, is built from masked text.
        stem = _filename_part(mask(clean(approval.tool))) + "-" + _filename_part(
            mask(clean(approval.id)))
        return self._card(self._approval, views, title, context, stem)

    def question_card(
        self,
        clarification: Clarification,
        *,
        agent_name: str,
        now: datetime,
        status: CardStatus | None = None,
        zone: str | None = None,
    ) -> RenderedCard:
        """The card for one question, with its options (if any) and an invitation to reply."""
        mask = NO_SECRETS
        views = [question_view(clarification.question, mask=mask)]
        if clarification.options:
            views.append(options_view(clarification.options, mask=mask))
        context = self._header_context(agent_name, clarification.expires_at, now, status, mask,
                                       zone)
        context["has_options"] = bool(clarification.options)
        stem = "question-" + _filename_part(clarification.id)
        return self._card(self._question, views, None, context, stem)

    def message(self, name: str, /, **context: object) -> str:
        """Render ``messages/<name>.html.j2`` (the bot's other messages) with ``context``.

        Raises :class:`RenderError` when the template is missing or broken, or when the
        result is empty or longer than Telegram accepts.
        """
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise RenderError(f"invalid message template name {name!r}")
        html = self._render(self._template("messages/" + name + ".html.j2"), context)
        rendered = measure(html)
        if not 0 < rendered.units <= LIMIT_UNITS or rendered.size > LIMIT_BYTES:
            raise RenderError(
                f"message {name!r} renders to {rendered.units} characters and "
                f"{rendered.size} bytes; Telegram needs 1-{LIMIT_UNITS} and at most "
                f"{LIMIT_BYTES}"
            )
        return html

    def text(self, name: str, /, **context: object) -> str:
        """Render ``messages/<name>.txt.j2`` as plain text (not escaped), such as a
        callback-query alert; longer than :data:`ALERT_CHARS` it is shortened with "…".

        Raises :class:`RenderError` when the template is missing or broken.
        """
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise RenderError(f"invalid message template name {name!r}")
        text = hidden.strip(clean(self._render(self._template("messages/" + name + ".txt.j2"),
                                               context)))
        if len(text) > ALERT_CHARS:
            text = text[: ALERT_CHARS - 1].rstrip() + "…"
        return text

    # ------------------------------------------------------------------------------

    def _card(
        self,
        template: jinja2.Template,
        views: Sequence[BlockView],
        title: str | None,
        context: dict[str, object],
        stem: str,
    ) -> RenderedCard:
        """``title`` is the summary with its secrets masked but its hidden characters and
        line breaks still in: the card shows its first line, the file all of it."""
        title_cut = False
        if title is not None:
            line, more = hidden.first_line(title)
            line = " ".join(hidden.strip(line).split())
            capped = _capped(line, _TITLE_ROOM)
            context["summary"] = _no_commands(capped) + hidden.more_lines(more)
            title_cut = bool(more) or capped != line
            title = hidden.strip(title).strip()
        context["hidden"] = context.get("hidden") or any(view.hidden for view in views)
        context["punycode"] = context.get("punycode") or any(view.punycode for view in views)

        def render_card(shown: Sequence[BlockView], omitted: int, attachment: bool) -> str:
            return self._render(
                template,
                dict(context, blocks=shown, omitted=omitted, attachment=attachment or title_cut),
            )

        fitted = fit_views(views, render_card, self._render_block)
        if fitted is None:
            fitted = self._minimal_card(views, render_card)
        attach = None
        if fitted.cut or title_cut:
            attached = list(views) if title_cut else [views[i] for i in fitted.cut]
            attach = functools.partial(self._attach, stem, title, attached,
                                       verbatim=not title_cut)
        return RenderedCard(html=fitted.html, plain=_plain_fallback(fitted.html),
                            attach=attach, hidden=bool(context["hidden"]))

    def _minimal_card(self, views: Sequence[BlockView], render_card: RenderCard) -> Fitted:
        log.warning("card details do not fit; sending header and summary only")
        html = render_card((), len(views), True)
        card = measure(html)
        if not card.fits():
            raise RenderError("the card does not fit Telegram's limits even without details")
        return Fitted(html, card, tuple(range(len(views))))

    def _attach(
        self, stem: str, title: str | None, views: Sequence[BlockView], *, verbatim: bool
    ) -> Attachment:
        views = [for_attachment(view) for view in views]
        if verbatim and len(views) == 1:
            view = views[0]
            return Attachment(stem + _extension(view), view.text.encode("utf-8"))
        text = self._render(self._attachment, {"title": title or "", "blocks": views})
        return Attachment(stem + ".txt", text.encode("utf-8"))

    def _header_context(
        self,
        agent_name: str,
        expires_at: datetime | None,
        now: datetime,
        status: CardStatus | None,
        mask: Masker,
        zone: str | None,
    ) -> dict[str, object]:
        shown_status = _shown_status(status, mask, zone) if status is not None else None
        name, punycode = honest_hosts(hidden.one_line(mask(clean(agent_name))))
        return {
            "agent_name": _capped(hidden.strip(name), _NAME_ROOM),
            "hidden": hidden.has_hidden(name),
            "punycode": punycode,
            "expiry": _expiry(expires_at, now, zone),
            "status": shown_status,
            "taps_total": len(status.approvals) if status is not None else 0,
        }

    def _render_block(self, view: BlockView) -> str:
        try:
            return str(self._macros.render_block(view))
        except (jinja2.TemplateError, TypeError, ValueError, AttributeError) as exc:
            raise RenderError(f"template macro render_block failed: {exc}") from exc

    def _template(self, name: str) -> jinja2.Template:
        try:
            return self._env.get_template(name)
        except jinja2.TemplateNotFound as exc:
            raise RenderError(f"template {name} not found") from exc
        except jinja2.TemplateSyntaxError as exc:
            raise RenderError(f"template {name} line {exc.lineno}: {exc.message}") from exc

    def _render(self, template: jinja2.Template, context: dict[str, object]) -> str:
        try:
            return template.render(context).strip(" \n")
        except (jinja2.TemplateError, TypeError, ValueError, AttributeError) as exc:
            raise RenderError(f"template {template.name} failed: {exc}") from exc


def _capped(text: str, room: tuple[int, int]) -> str:
    """``text`` shortened with "…" to the given (units, entities) room, at a space when
    one is near the end."""
    view = cut_view(BlockView("row", "string", "", text), *room)
    if not view.cut:
        return text
    kept = view.text
    space = kept.rfind(" ")
    if space > len(kept) * 3 // 4:
        kept = kept[:space]
    return kept.rstrip() + "…"


def _shown_status(status: CardStatus, mask: Masker, zone: str | None) -> CardStatus:
    def shown(text: str | None, room: tuple[int, int] = _NAME_ROOM) -> str | None:
        shown_text = hidden.strip(mask(clean(text))).strip() if text else ""
        return _capped(shown_text, room) if shown_text else None

    taps = tuple(
        Tap(shown(tap.name, _TAP_NAME_ROOM) or "?", in_zone(tap.at, zone))
        for tap in status.approvals[:_MAX_TAPS_SHOWN]
    )
    grant = status.grant
    if grant is not None:
        grant = replace(grant, label=shown(grant.label, _REASON_ROOM) or "?",
                        by=shown(grant.by) or "?", until=in_zone(grant.until, zone))
    return replace(
        status,
        grant=grant,
        at=in_zone(status.at, zone) if status.at is not None else None,
        by=shown(status.by),
        reason=shown(status.reason, _REASON_ROOM),
        answer=shown(status.answer, _REASON_ROOM),
        elsewhere=shown(status.elsewhere),
        reported_by=shown(status.reported_by),
        approvals=taps,
    )


def _no_commands(title: str) -> Markup:
    """``title`` escaped, with a word joiner after each ``/`` Telegram would make a bot
    command of (so that a tap on a title's ``./build`` sends nothing to the bot); markup,
    so that the joiner is not shown as a hidden character.

    ``title`` is plain text whose hidden characters are already marked."""
    return Markup(_BOT_COMMAND.sub("/" + _WORD_JOINER, str(escape(honest_hosts(title)[0]))))


def _title_text(text: str, mask: Masker) -> str:
    """A summary or question for a title: line breaks of every kind as ``\n`` (so that
    the title can say how many lines it leaves out), cleaned, secrets masked."""
    return mask(clean(hidden.BREAKS.sub("\n", text))).strip()


def _expiry(expires_at: datetime | None, now: datetime, zone: str | None) -> Expiry | None:
    if expires_at is None:
        return None
    at, now = in_zone(expires_at, zone), in_zone(now, zone)
    seconds = (at - now).total_seconds()
    return Expiry(
        at=at,
        minutes=max(int(seconds // 60), 0),
        expired=seconds <= 0,
        other_day=at.date() != now.date(),
    )


def _extension(view: BlockView) -> str:
    if view.kind == "diff":
        return ".diff"
    if view.kind == "json" and view.language == "json":
        return ".json"
    return ".txt"


def _plain_fallback(card_html: str) -> str:
    """The card's visible text for the plain-text fallback, spoilered secrets masked: plain
    text has no spoiler to hide them behind."""
    return measure(_SPOILER.sub(SPOILER_MASK, card_html)).plain


def _filename_part(text: str) -> str:
    return _FILENAME_PART.sub("_", text)[:40].strip("._") or "item"
