"""The Jinja environment every card and message is rendered with.

Templates are looked up in an operator's folder first (when given), then in the built-in
``templates/`` folder, so an operator overrides a single file by dropping a file with the
same name into their folder. HTML templates (``*.html.j2``) are autoescaped for Telegram's
HTML parse mode: only ``&``, ``<``, ``>`` and ``"`` are escaped, and invisible or
direction-changing characters are marked (see :mod:`bot.hidden`) and host names
that could pass for others shown as ``xn--`` (:mod:`bot.render.hosts`), so no value can
reorder or hide the text around it whatever the template; plain-text templates
(``*.txt.j2``) are not escaped at all. ``truncate`` puts a value on one line first and
keeps its "(+N more lines)".
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, tzinfo
from importlib import resources
from pathlib import Path
from zoneinfo import ZoneInfo

import jinja2
from jinja2.nodes import EvalContext
from markupsafe import Markup

from bot import hidden
from bot.errors import RenderError
from bot.render.hosts import honest_hosts
from bot.render.markdown import escape, markdown_to_html
from bot.render.masking import NO_SECRETS, Masker

log = logging.getLogger(__name__)


def builtin_template_dir() -> Path:
    """The built-in templates, package data of ``bot`` (``bot/templates``: in a source
    checkout a link to the top-level ``templates/`` folder, in a wheel a copy of it)."""
    folder = resources.files("bot").joinpath("templates")
    if not folder.is_dir():
        raise RenderError(f"the built-in templates are missing from the package ({folder})")
    return Path(str(folder))


def build_environment(template_dir: Path | None = None) -> jinja2.Environment:
    """A Jinja environment over ``template_dir`` (optional, searched first) and the
    built-in templates, with Telegram-safe autoescaping and ``StrictUndefined``.

    ``template_dir`` is the operator's knob for restyling cards and messages: a folder
    holding any of ``approval.html.j2``, ``question.html.j2``, ``macros.html.j2``,
    ``attachment.txt.j2`` or ``messages/<name>.html.j2``; files it lacks fall back to the
    built-in ones. Templates are read once and cached (changes need a restart).
    """
    loaders: list[jinja2.BaseLoader] = []
    if template_dir is not None:
        if not template_dir.is_dir():
            raise RenderError(f"template folder {template_dir} does not exist")
        loaders.append(jinja2.FileSystemLoader(template_dir))
    loaders.append(jinja2.FileSystemLoader(builtin_template_dir()))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=_autoescape,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        auto_reload=False,
    )
    env.filters.update(
        hhmm=hhmm,
        day=day,
        zone=zone_name,
        offset=utc_offset,
        thousands=thousands,
        markdown=_markdown_filter,
        truncate=truncate_line,
    )
    return env


def _autoescape(name: str | None) -> bool:
    return name is None or not name.endswith(".txt.j2")


@jinja2.pass_eval_context
def _finalize(context: EvalContext, value: object) -> object:
    """Escape every interpolated value ourselves (Jinja's default turns ``'`` into
    ``&#39;``), mark its hidden characters and show deceptive host names as ``xn--``;
    values that are already markup pass through (this package renders them so)."""
    if value is None:
        return ""
    if not context.autoescape or hasattr(value, "__html__"):
        return value
    return Markup(escape(hidden.strip(honest_hosts(str(value))[0])))


def truncate_line(text: object, length: int = 255, killwords: bool = False, end: str = "…",
                  leeway: int = 0) -> str:
    """``{{ value|truncate(80) }}`` for the one-line values of lists and notes: the first
    line of ``value``, with "(+N more lines)" when it has more, shortened to ``length``
    characters with "…" (the note about more lines is never cut). ``killwords``,
    ``end`` and ``leeway`` are accepted for Jinja's filter of the same name."""
    return hidden.one_line(str(text), length)


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive time is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def in_zone(moment: datetime, zone: str | tzinfo | None) -> datetime:
    """``moment`` in the time zone ``zone`` (an IANA name); UTC when ``zone`` is None."""
    if zone is None:
        return as_utc(moment)
    return as_utc(moment).astimezone(ZoneInfo(zone) if isinstance(zone, str) else zone)


def hhmm(moment: datetime) -> str:
    """``10:03``: the time of day in the moment's own zone (UTC for a naive time); the
    caller puts it in the chat's zone with :func:`in_zone`."""
    return _aware(moment).strftime("%H:%M")


def day(moment: datetime | date) -> str:
    """``Sat 29 Nov``: the day, in the moment's own zone."""
    if isinstance(moment, datetime):
        moment = _aware(moment)
    return moment.strftime("%a ") + str(moment.day) + moment.strftime(" %b")


def zone_name(moment: datetime) -> str:
    """``UTC``, ``CET``, ``+04``: the moment's zone as people read it after a time."""
    return _aware(moment).strftime("%Z") or "UTC"


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def utc_offset(moment: datetime) -> str:
    """``+01:00`` for a time with a non-zero offset, ``""`` for UTC or a naive time."""
    offset = moment.utcoffset()
    if not offset:
        return ""
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, minutes = divmod(abs(minutes), 60)
    return sign + str(hours).zfill(2) + ":" + str(minutes).zfill(2)


def thousands(number: int) -> str:
    """``1,240``."""
    return format(number, ",")


def _markdown_filter(text: str, quotes: bool = True, mask: Masker = NO_SECRETS) -> Markup:
    """``{{ v.text|markdown(mask=v.mask) }}``: pass the view's masker, so a secret spelled
    with Markdown escapes is hidden too."""
    return Markup(markdown_to_html(text, quotes=quotes, mask=mask))
