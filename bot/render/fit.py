"""Make a card fit Telegram's limits by cutting the values, never the rendered HTML.

:func:`measure` reads a rendered card the way Telegram would count it (visible UTF-16
units after trimming, entities including the links Telegram finds by itself, raw bytes).
:func:`fit_views` shares the room left by the fixed parts fairly between the blocks, cuts
each value at a line boundary (inside a line only when not one line fits), re-renders and
measures again, shrinking until the card fits.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from bot.render.masking import Masker
from bot.render.values import MONOSPACE_KINDS, BlockView

LIMIT_UNITS = 4000
"""Visible text, in UTF-16 code units (Telegram allows 4096 after trimming)."""
LIMIT_ENTITIES = 96
"""Entities as :func:`measure` counts them (Telegram keeps 100 and drops the rest)."""
LIMIT_BYTES = 30000
"""Raw HTML in UTF-8 bytes (the Bot API refuses more than 32768)."""

MAX_ROUNDS = 8
SKELETONS_KEPT = 4096
"""Skeleton costs remembered (a card shows at most a hundred or so blocks)."""
"""Render-measure-shrink rounds before giving up on a detailed card."""

_TAG = re.compile(r"(<[^>]*>)")
_TAG_NAME = re.compile(r"</?([a-z-]+)")
_NO_AUTOLINKS = frozenset(("pre", "code", "a"))
"""Telegram finds no links inside these (a found link crossing them is dropped)."""
_TRIMMED = " \n"
# Everything Telegram may turn into an entity by itself, each counted on its own so
# overlapping candidates are all counted (an over-estimate is the safe side). Each comes
# with characters any of which a match must hold: without them the pattern is not run.
_AUTOLINKS = (
    (re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+"), "@"),  # e-mail
    (re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://\S"), ":"),  # any scheme
    (re.compile(r"(?<![\w.-])(?:[\w-]+\.)+[^\W\d_]{2,}"), "."),  # a dotted host name
    (re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}"), "."),  # an IPv4 address
    (re.compile(r"@\w"), "@"),  # mention
    (re.compile(r"[#$][\w\u200c\u00b7\u0d80-\u0dff]"), "#$"),  # hashtag, cashtag
    (re.compile(r"(?<![\w/])/\w"), "/"),  # bot command
    (re.compile(r"(?<!\d)\d[\d -]{11,}\d"), ""),  # bank card number
)
"""Each pattern only starts where a candidate can start, so counting stays linear."""
_MARKDOWN_MARKS = "*_~`"


@dataclass(frozen=True)
class Measure:
    """A rendered card as Telegram counts it; ``plain`` is its visible text."""

    units: int
    entities: int
    size: int
    plain: str

    def fits(self) -> bool:
        return (
            0 < self.units <= LIMIT_UNITS
            and self.entities <= LIMIT_ENTITIES
            and self.size <= LIMIT_BYTES
        )


@dataclass(frozen=True)
class Fitted:
    """A card that fits: its HTML, its measure, and which input views were cut or left
    out (their full text belongs in the attachment)."""

    html: str
    measure: Measure
    cut: tuple[int, ...]


RenderCard = Callable[[Sequence[BlockView], int, bool], str]
"""Renders the whole card from the views shown, the number left out, and whether a file
is attached."""
RenderBlock = Callable[[BlockView], str]


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def autolink_count(text: str) -> int:
    """How many entities Telegram might find in ``text`` by itself (an upper bound)."""
    return sum(
        len(pattern.findall(text))
        for pattern, needs in _AUTOLINKS
        if not needs or any(mark in text for mark in needs)
    )


def measure(card_html: str) -> Measure:
    """Measure HTML this package rendered (its text never holds a bare ``<``).

    Every start tag counts as an entity (``<pre><code>`` as two), plus every link
    Telegram might find in the text outside ``<pre>``, ``<code>`` and ``<a>``.
    """
    visible: list[str] = []
    linkable: list[str] = []
    tags = 0
    shielded = 0  # how many pre/code/a are open
    for index, part in enumerate(_TAG.split(card_html)):
        if index % 2:
            name_match = _TAG_NAME.match(part)
            name = name_match.group(1) if name_match else ""
            closing = part.startswith("</")
            tags += not closing
            if name in _NO_AUTOLINKS:
                shielded += -1 if closing else 1
        elif part:
            text = html.unescape(part)
            visible.append(text)
            if not shielded:
                linkable.append(text)
    plain = "".join(visible).strip(_TRIMMED)
    return Measure(
        units=utf16_units(plain),
        entities=tags + autolink_count("\n".join(linkable)),
        size=len(card_html.encode("utf-8", "surrogatepass")),
        plain=plain,
    )


def fit_views(
    views: Sequence[BlockView], render_card: RenderCard, render_block: RenderBlock
) -> Fitted | None:
    """Render ``views`` into a card within Telegram's limits, cutting values as needed;
    ``None`` when not even the fixed parts fit (the caller falls back to a minimal card)."""
    if sum(len(v.text) for v in views) <= LIMIT_UNITS:
        card_html = render_card(views, 0, False)
        whole = measure(card_html)
        if whole.fits():
            return Fitted(card_html, whole, ())
    base = measure(render_card((), len(views), True))
    overheads = _skeletons_with_room(base, views, render_block)
    kept = len(overheads)
    omitted = tuple(range(kept, len(views)))
    room_units = LIMIT_UNITS - base.units - sum(units for units, _ in overheads)
    room_entities = LIMIT_ENTITIES - base.entities - sum(e for _, e in overheads)
    unit_demands = [_unit_demand(view) for view in views[:kept]]
    entity_demands = [_entity_demand(view) for view in views[:kept]]
    for _ in range(MAX_ROUNDS):
        if room_units < 0 or room_entities < 0:
            return None
        unit_shares = fair_shares(unit_demands, room_units)
        entity_shares = fair_shares(entity_demands, room_entities)
        shown = [
            cut_view(view, units, entities)
            for view, units, entities in zip(views[:kept], unit_shares, entity_shares, strict=True)
        ]
        cut = tuple(i for i, view in enumerate(shown) if view.cut) + omitted
        card_html = render_card(shown, len(omitted), bool(cut))
        card = measure(card_html)
        if card.fits():
            return Fitted(card_html, card, cut)
        room_units -= max(card.units - LIMIT_UNITS, 0) + max(card.size - LIMIT_BYTES, 0)
        room_units -= 16
        room_entities -= max(card.entities - LIMIT_ENTITIES, 0)
    return None


def fair_shares(demands: Sequence[int], room: int) -> list[int]:
    """Max-min fair split of ``room``: small demands are met in full, the rest share
    what remains equally."""
    shares = [0] * len(demands)
    left = len(demands)
    for index in sorted(range(len(demands)), key=demands.__getitem__):
        share = min(demands[index], max(room, 0) // left)
        shares[index] = share
        room -= share
        left -= 1
    return shares


def cut_view(view: BlockView, max_units: int, max_entities: int) -> BlockView:
    """``view`` with its text cut to ``max_units`` and ``max_entities``.

    The cut falls at a line boundary; the next line is shown in part only when the room
    left would otherwise go mostly unused (a single long line). A cut view loses what only
    a whole value supports (link, parsed time, yes/no).
    """
    text = view.text
    if not text:
        return view
    extra = 1 + _extra_units_per_line(view)
    total_lines = text.count("\n") + 1
    units_left, entities_left = max_units, max_entities
    kept_lines = 0
    start = 0
    while kept_lines < total_lines:
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        units = end - start + extra
        if units > units_left:
            break
        units = utf16_units(text[start:end]) + extra
        entities = _line_entities(text[start:end], view.kind)
        if units > units_left or entities > entities_left:
            break
        units_left -= units
        entities_left -= entities
        kept_lines += 1
        start = end + 1
    if kept_lines == total_lines:
        return view
    kept = text[: max(start - 1, 0)]
    more_chars = 0
    if units_left * 2 > max_units and units_left > extra:
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        part = _cut_line(line, units_left - extra, entities_left, view.kind)
        if part:
            kept = kept + "\n" + part if kept_lines else part
            kept_lines += 1
            more_chars = len(line) - len(part)
    return replace(
        view,
        text=kept if kept.strip() else "",
        more_lines=total_lines - kept_lines,
        more_chars=more_chars,
        link=False,
        when=None,
        flag=None,
    )


def _cut_line(line: str, max_units: int, max_entities: int, kind: str) -> str:
    if max_units <= 0:
        return ""
    prefix = line[:max_units]
    excess = utf16_units(prefix) - max_units
    while excess > 0:  # astral characters take two units each
        prefix = prefix[: len(prefix) - (excess + 1) // 2]
        excess = utf16_units(prefix) - max_units
    if _line_entities(prefix, kind) <= max_entities:
        return prefix
    low, high = 0, len(prefix)
    while low < high:  # the longest prefix within the entity budget
        middle = (low + high + 1) // 2
        if _line_entities(prefix[:middle], kind) <= max_entities:
            low = middle
        else:
            high = middle - 1
    return prefix[:low]


def _line_entities(line: str, kind: str) -> int:
    if kind in MONOSPACE_KINDS:  # inside <pre> or <code> no link is found
        return 0
    count = autolink_count(line)
    if kind == "markdown":
        count += (sum(line.count(mark) for mark in _MARKDOWN_MARKS) + 1) // 2
        count += line.count("](") + line.lstrip().startswith(("#", ">"))
    return count


def _extra_units_per_line(view: BlockView) -> int:
    return 5 if view.layout == "options" else 0  # "12. " before each option


def _unit_demand(view: BlockView) -> int:
    lines = view.text.count("\n") + 1
    return utf16_units(view.text) + lines * (1 + _extra_units_per_line(view))


def _entity_demand(view: BlockView) -> int:
    # No view can show more than LIMIT_UNITS characters, so only that prefix matters.
    prefix = view.text[:LIMIT_UNITS]
    return sum(_line_entities(line, view.kind) for line in prefix.split("\n"))


def _measure_skeleton(view: BlockView, render_block: RenderBlock) -> tuple[int, int]:
    """What a block costs with its value emptied but a worst-case cut note: its label,
    tags and note. Two more units pay for the line break(s) around it."""
    skeleton = view
    if view.text:
        skeleton = replace(view, text="", more_lines=999_999, link=False, when=None, flag=None)
    return _skeleton_cost(skeleton, skeleton.mask, render_block)


@functools.lru_cache(maxsize=SKELETONS_KEPT)
def _skeleton_cost(
    skeleton: BlockView, mask: Masker, render_block: RenderBlock
) -> tuple[int, int]:
    """Remembered: a card is drawn again on every change, with the same skeletons. The
    masker is part of the key (a view's equality leaves it out)."""
    rendered = measure(render_block(skeleton))
    return rendered.units + 2, rendered.entities


def forget_skeletons() -> None:
    """Forget the remembered skeleton costs (for measuring a first render)."""
    _skeleton_cost.cache_clear()


def _skeletons_with_room(
    base: Measure, views: Sequence[BlockView], render_block: RenderBlock
) -> list[tuple[int, int]]:
    """The skeleton cost of each leading view that fits with nothing but its skeleton.

    Measuring stops at the first view that does not fit: only a few dozen blocks can
    ever be shown, however many there are.
    """
    units, entities = base.units, base.entities
    overheads: list[tuple[int, int]] = []
    for view in views:
        view_units, view_entities = _measure_skeleton(view, render_block)
        units += view_units
        entities += view_entities
        if units > LIMIT_UNITS or entities > LIMIT_ENTITIES:
            break
        overheads.append((view_units, view_entities))
    return overheads
