"""The stand-in's HTML parser against Telegram's own (TDLib's ``parseTextEntities``, run
offline): the same text and entities, or the same refusal, on every golden card, on the
demo's cards and on generated markup; and the links, addresses and mentions Telegram finds
by itself (``getTextEntities``) on the cards."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tdlib_oracle import TdError, tdlib_version, telegram_detect, telegram_parse

from bot.demo_agent import demo_items
from bot.playground.tg_html import (
    Entity,
    HtmlRefused,
    find_auto_entities,
    parse_entities,
    parse_html,
)
from bot.protocol.payloads import parse_approval, parse_clarification
from bot.render import Renderer

GOLDEN = sorted((Path(__file__).parent / "golden").glob("*.html"))
_OURS_PREFIX = "Bad Request: can't parse entities: "
_TDLIB_PREFIX = "Can't parse entities: "


def _normal(entities: list[Entity]) -> list[Entity]:
    """Our entities in TDLib's terms: inline code has no language, mentions a user id."""
    result = []
    for entity in entities:
        url = entity.url
        if entity.type == "text_mention" and url:
            url = "tg://user?id=" + re.sub(r"\D", "", url.rpartition("=")[2])
        language = entity.language if entity.type == "pre" else None
        result.append(Entity(entity.type, entity.offset, entity.length, url, language))
    return sorted(result, key=lambda e: (e.offset, -e.length, e.type))


def ours(html: str) -> tuple[str, list[Entity]] | str:
    try:
        text, entities = parse_entities(html)
    except HtmlRefused as refused:
        assert refused.description.startswith(_OURS_PREFIX), refused.description
        return refused.description.removeprefix(_OURS_PREFIX)
    return text, _normal(entities)


def telegrams(html: str) -> tuple[str, list[Entity]] | str:
    try:
        text, entities = telegram_parse(html)
    except TdError as error:
        assert str(error).startswith(_TDLIB_PREFIX), str(error)
        return str(error).removeprefix(_TDLIB_PREFIX)
    return text, _normal(entities)


def test_the_oracle_is_telegrams_parser() -> None:
    assert tdlib_version().startswith("1.")
    assert telegram_parse("<b>hi</b>") == ("hi", [Entity("bold", 0, 2)])
    with pytest.raises(TdError, match="Unsupported start tag \"br\""):
        telegram_parse("a<br>b")


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_cards_parse_as_telegram_parses_them(path: Path) -> None:
    html = path.read_text(encoding="utf-8")
    expected = telegrams(html)
    assert not isinstance(expected, str), f"Telegram refuses {path.name}: {expected}"
    assert ours(html) == expected


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_cards_links_are_found_as_telegram_finds_them(path: Path) -> None:
    text, _ = parse_html(path.read_text(encoding="utf-8"))
    assert find_auto_entities(text) == telegram_detect(text)


@pytest.mark.parametrize("secrets", ["spoiler", "masked"])
def test_the_demo_cards_parse_as_telegram_parses_them(secrets: str) -> None:
    renderer = Renderer(None)
    now = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
    for kind, item in demo_items("t0", now):
        if kind == "approval":
            card = renderer.approval_card(parse_approval(item), agent_name="Skald demo agent",
                                          secrets=secrets, now=now)  # type: ignore[arg-type]
        else:
            card = renderer.question_card(parse_clarification(item),
                                          agent_name="Skald demo agent", now=now)
        expected = telegrams(card.html)
        assert not isinstance(expected, str), expected
        assert ours(card.html) == expected
        text, _ = parse_html(card.html)
        assert find_auto_entities(text) == telegram_detect(text)


# --- generated markup -----------------------------------------------------------------------

_PIECES = [
    "a", "b", "Z", "0", "7", " ", "  ", "\n", "\t", ".", ",", "-", "_", "/", ":", "=", "\"", "'",
    "é", "ж", "中", "😀", "👍🏽", "𝔘", "&amp;", "&lt;", "&gt;", "&quot;", "&#65;", "&#x1F600;",
    "&#128512;", "&nbsp;", "&apos;", "&bogus;", "&", ">", "&#0;", "&#xD800;", "&#1114111;",
    "https://example.com/a?b=1", "@name_x", "#tag",
]  # fmt: skip
_TAGS = [
    ("<b>", "</b>"), ("<strong>", "</strong>"), ("<i>", "</i>"), ("<em>", "</em>"),
    ("<u>", "</u>"), ("<ins>", "</ins>"), ("<s>", "</s>"), ("<strike>", "</strike>"),
    ("<del>", "</del>"), ("<tg-spoiler>", "</tg-spoiler>"),
    ('<span class="tg-spoiler">', "</span>"), ("<code>", "</code>"),
    ('<code class="language-python">', "</code>"), ("<pre>", "</pre>"),
    ('<pre><code class="language-diff">', "</code></pre>"), ("<blockquote>", "</blockquote>"),
    ("<blockquote expandable>", "</blockquote>"), ('<a href="https://example.com/x?a=1&amp;b=2">',
                                                     "</a>"),
    ('<a href="tg://user?id=42">', "</a>"), ('<a href="tg://user/?a=1&amp;id=042">', "</a>"),
    ('<a href="tg:user?id=7#x">', "</a>"), ('<a href="tg://resolve?domain=a b ">', "</a>"),
    ('<a href="http://[::1]:8080/x y">', "</a>"), ('<a href="a(b).c:080/">', "</a>"),
    ("<a>", "</a>"), ('<a href="not a url">', "</a>"),
    ("<a href=example.org>", "</a>"), ('<a href="mailto:ada@example.com">', "</a>"),
    ('<tg-emoji emoji-id="5368324170671202286">', "</tg-emoji>"),
    ("<B>", "</b>"),
    ("<I >", "</ i>"), ("<b>", "</>"), ("<u>", "</U >"),
]  # fmt: skip
# No <tg-time>: the oracle's TDLib (1.8.46) predates it, the Bot API (and the stand-in) has it.
_NOISE = [
    "<br>", "<p>", "<div>", "</b>", "<", "<b", "<a href=", "<span>", "<tg-emoji emoji-id=x>",
    "<b x=>", "<b =1>", "<code class=language-py>", "<blockquote><blockquote>", "</",
    "&#x110000;", "<a href='unterminated>", '<b x="1"/>', "<b/>", '<i"x>', "</>", "\r",
    "\u2028", "\x01", "<b ", '<b x="1" ', "<b x ",
]  # fmt: skip

_text = st.lists(st.sampled_from(_PIECES), max_size=6).map("".join)
_markup = st.recursive(
    _text,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(_TAGS), inner).map(lambda t: t[0][0] + t[1] + t[0][1]),
        st.lists(inner, min_size=1, max_size=4).map("".join),
    ),
    max_leaves=16,
)


def _with_noise(markup: str, noise: str, at: int) -> str:
    position = at % (len(markup) + 1)
    return markup[:position] + noise + markup[position:]


_noisy = st.builds(_with_noise, _markup, st.sampled_from(_NOISE), st.integers(0, 10_000))


@settings(max_examples=400, deadline=None)
@given(st.one_of(_markup, _noisy))
def test_generated_markup_parses_as_telegram_parses_it(html: str) -> None:
    assert ours(html) == telegrams(html)
