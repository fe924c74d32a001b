"""The Telegram HTML validator: what Telegram stores, refuses, and silently repairs."""

from __future__ import annotations

import html

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.playground.tg_html import (
    ENTITY_LIMIT,
    Entity,
    HtmlRefused,
    parse_caption,
    parse_html,
    problems,
    utf16_length,
)

CARD = (
    "<b>Approve tool call?</b>\n"
    "<code>rm -rf /tmp/build</code> in <i>~/work</i>\n"
    '<pre><code class="language-json">{"force": true}</code></pre>\n'
    "<blockquote expandable>Reason: cleaning &lt;old&gt; builds &amp; caches</blockquote>\n"
    '<a href="https://example.com/runs/7">Details</a> <tg-spoiler>secret</tg-spoiler>'
)


def refusal(text: str) -> str:
    with pytest.raises(HtmlRefused) as refused:
        parse_html(text)
    return refused.value.description


def test_a_well_formed_card_is_kept_exactly() -> None:
    assert problems(CARD) == []
    text, entities = parse_html(CARD)
    assert text.startswith("Approve tool call?\nrm -rf /tmp/build in ~/work\n")
    assert "cleaning <old> builds & caches" in text
    types = [e.type for e in entities]
    for kind in ("bold", "code", "italic", "pre", "expandable_blockquote", "text_link", "spoiler"):
        assert kind in types
    [pre] = [e for e in entities if e.type == "pre"]
    assert pre.language == "json"
    [link] = [e for e in entities if e.type == "text_link"]
    assert link.url == "https://example.com/runs/7"


def test_tags_are_case_insensitive_and_aliases_map_to_one_type() -> None:
    text, entities = parse_html(
        "<B>b</B> <strong>s</strong> <EM>e</EM> <ins>u</ins> <del>d</del> <strike>k</strike> "
        '<span class="tg-spoiler">x</span>'
    )
    assert text == "b s e u d k x"
    assert [e.type for e in entities] == [
        "bold", "bold", "italic", "underline", "strikethrough", "strikethrough", "spoiler",
    ]  # fmt: skip


def test_touching_entities_of_one_type_merge() -> None:
    assert parse_html("<b>a</b><strong>b</strong>") == ("ab", [Entity("bold", 0, 2)])
    assert problems("<b>a</b><strong>b</strong>") == []


def test_offsets_count_utf16_code_units() -> None:
    text, entities = parse_html("😀 <b>ü😀</b>")
    assert text == "😀 ü😀"
    assert entities == [Entity("bold", 3, 3)]
    assert utf16_length(text) == 6


def test_only_four_named_entities_and_numeric_ones_are_decoded() -> None:
    text, _ = parse_html("&lt;&gt;&amp;&quot; &nbsp;&apos; &#65;&#x42; a & b > c")
    assert text == '<>&" &nbsp;&apos; AB a & b > c'


def test_links_are_normalised_and_user_links_become_mentions() -> None:
    _, entities = parse_html('<a href="example.org">x</a> <a href="tg://user?id=42">y</a>')
    assert entities == [
        Entity("text_link", 0, 1, url="http://example.org/"),
        Entity("text_mention", 2, 1, url="tg://user?id=42"),
    ]


@pytest.mark.parametrize(
    ("text", "description"),
    [
        ("Hello<br>", 'Unsupported start tag "br" at byte offset 5'),
        ("é<p>x</p>", 'Unsupported start tag "p" at byte offset 2'),
        ("a < b", 'Unsupported start tag "" at byte offset 2'),
        ("x <b", "Unclosed start tag at byte offset 2"),
        ("<b>bold", 'Can\'t find end tag corresponding to start tag "b"'),
        ("<b>x</i>", 'Unmatched end tag at byte offset 4, expected "</b>", found "</i>"'),
        ("x</b>", "Unexpected end tag at byte offset 1"),
        ('<span class="bold">x</span>', 'Tag "span" must have class "tg-spoiler" at byte offset 0'),
        ("&#xD800;", "Text contains invalid Unicode characters after decoding HTML entities"),
    ],
)
def test_malformed_html_is_refused_with_telegrams_words(text: str, description: str) -> None:
    assert refusal(text).startswith(f"Bad Request: can't parse entities: {description}")
    assert problems(text) == [refusal(text)]


def test_empty_and_blank_texts_are_refused() -> None:
    assert refusal("") == "Bad Request: message text is empty"
    assert refusal(" \n <b> </b> ") == "Bad Request: message must be non-empty"
    assert parse_caption("  ") == ("", [])


def test_the_limit_counts_utf16_units_after_trimming() -> None:
    assert parse_html("  \n" + "x" * 4096 + "\n ")[0] == "x" * 4096
    assert refusal("x" * 4097) == "Bad Request: message is too long"
    assert parse_html("😀" * 2048)[0] == "😀" * 2048
    assert refusal("😀" * 2049) == "Bad Request: message is too long"
    with pytest.raises(HtmlRefused, match="message caption is too long"):
        parse_caption("y" * 1025)


def test_lone_surrogates_in_the_text_are_refused() -> None:
    assert "UTF-8" in refusal("broken \ud800 text")


def test_trimming_moves_entities() -> None:
    assert parse_html("\n\n  <b>bold</b>  \n") == ("bold", [Entity("bold", 0, 4)])


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("<code>a<b>b</b></code>", 'bold "b" overlaps code'),
        ("<b>a<code>b</code>c</b>", "splits it around them"),
        ("<pre>x<code>y</code></pre>", 'code "y" sits inside pre'),
        ("<blockquote>a<blockquote>b</blockquote></blockquote>", "blockquotes can't nest"),
        ('<a href="https://a.org">x<code>y</code></a>', 'code "y" sits inside text_link'),
        ('<code><a href="https://a.org">y</a></code>', "sits inside code"),
        ('<a href="javascript:alert(1)">x</a>', "not a valid URL"),
        ('<a href="mailto:me@example.org">mail</a>', '"mailto:" is silently mangled'),
        ('<a href="intranet/run">x</a>', "not a valid URL"),
        ("<b> </b>x", "holds only whitespace"),
    ],
)
def test_silent_repairs_are_reported(text: str, complaint: str) -> None:
    parse_html(text)  # Telegram accepts it ...
    found = problems(text)  # ... but does not keep what it asks for
    assert any(complaint in problem for problem in found), found


def test_pre_wrapping_code_without_language_is_fine() -> None:
    assert problems("<pre><code>x = 1</code></pre>") == []
    assert parse_html("<pre><code>x = 1</code></pre>")[1] == [Entity("pre", 0, 5)]


def test_more_than_100_entities_are_reported_and_capped() -> None:
    text = " ".join(f"<b>{n}</b> @user{n:04d}" for n in range(60))
    [complaint] = problems(text)
    assert "120 entities" in complaint
    _, entities = parse_html(text)
    assert len(entities) == ENTITY_LIMIT
    assert sum(e.type == "mention" for e in entities) == 60  # bold gets the last slots


def test_auto_detected_entities_are_listed() -> None:
    text, entities = parse_html(
        "see https://example.com/a?b=1, mail ops@example.org, ping @alice_ops, "
        "tag #deploy, run /approve@skald_test_bot"
    )
    found = {(e.type, text[e.offset : e.offset + e.length]) for e in entities}
    assert found == {
        ("url", "https://example.com/a?b=1"),
        ("email", "ops@example.org"),
        ("mention", "@alice_ops"),
        ("hashtag", "#deploy"),
        ("bot_command", "/approve@skald_test_bot"),
    }


def test_nothing_is_auto_detected_inside_code_or_links() -> None:
    _, entities = parse_html(
        '<code>https://example.com</code> <a href="https://x.org">@someone</a>'
    )
    assert [e.type for e in entities] == ["code", "text_link"]


_SAFE_TEXT = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc"),
        blacklist_characters="\u0333\u033f\u030a" + "".join(map(chr, range(0x2028, 0x202F))),
    )
    | st.just("\n"),
    max_size=200,
)


@given(_SAFE_TEXT)
def test_escaped_text_comes_back_trimmed(text: str) -> None:
    if not text.strip(" \n"):
        with pytest.raises(HtmlRefused):
            parse_html(html.escape(text))
        return
    stored, entities = parse_html(html.escape(text))
    assert stored == text.strip(" \n")
    for entity in entities:
        assert 0 <= entity.offset < entity.offset + entity.length <= utf16_length(stored)


@given(_SAFE_TEXT)
def test_bold_wrapping_covers_the_visible_text(text: str) -> None:
    if not text.strip(" \n"):
        return
    stored, entities = parse_html(f"<b>{html.escape(text)}</b>")
    bold = [e for e in entities if e.type == "bold"]
    assert bold == [Entity("bold", 0, utf16_length(stored))]
