"""Property tests: whatever blocks, values and statuses arrive, every card is HTML that
Telegram accepts in full, within its limits, and no secret shows where it must not."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.status import CardStatus, Tap
from bot.playground.tg_html import Entity, checked_link, parse_html, problems, utf16_length
from bot.protocol.payloads import Approval, Block, Clarification
from bot.render import RenderedCard, Renderer, SecretsMode
from bot.render.markdown import http_link

NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)
RENDERER = Renderer()

TRICKY = [
    "<", ">", "&", "&amp;", "&lt;", '"', "'", "</pre>", "<pre>", "<b>", "</code>", "\n", "\n\n",
    "\r\n", "\t", " ", "\x00", "\x1b", "\ud800", "\udfff", "\ud83d", "😀", "👩‍👩‍👧", "\u200f",
    "\u202e", "\u2028", "\u0333", "مرحبا", "שלום", "http://x.example/a?b=1&c=2",
    "javascript:alert(1)", "mailto:a@b.co", "a@b.example", "@someone", "#tag", "/start",
    "$USD", "4111 1111 1111 1111", "1.2.3.4", "**", "__", "~~", "`", "```", "```py\n", "# ",
    "> ", "- ", "1. ", "[a](https://b.example)", "![i](http://c.example/i.png)", "| a | b |",
    "= same", "+ new", "- old", "@@ -1 +1 @@", "{", "}", '{"a": [1, 2]}', "2025-11-29T22:00:00Z",
    "true", "•", "…", "&#32;", "&#x2028;", "&#x202e;", "&#95;", "&amp;", "\\_", "\\", "** **",
    "` `", "[ ](https://a.example)", "```\n \n```", "> &#32;", "# &#32;", "http://a..b/",
    "http://ex.coma<b>😀/", "https://bücher.example/x",
]  # fmt: skip
LAYOUTS = ["key_value", "field", "block", "carousel", ""]
VALUE_TYPES = [
    "string", "text", "markdown", "code", "diff", "command", "email", "url", "path", "json",
    "number", "boolean", "datetime", "secret", "hologram", "",
]  # fmt: skip
SECRET_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
MARKDOWN_MARKS = "_*`\\~[]&#;!<>"
SHORT_ALPHABET = "QXZJ"
"""Letters no card text of its own uses as a word: a short secret is only masked where it
stands alone, so the property checks it between spaces."""

piece = st.one_of(
    st.sampled_from(TRICKY),
    st.text(max_size=20),
    st.integers(0, 6000).map(lambda n: "x" * n),
    st.integers(0, 400).map(lambda n: "line\n" * n),
)
texts = st.lists(piece, max_size=8).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
plain_secrets = st.text(SECRET_ALPHABET, min_size=8, max_size=24).map(lambda s: "sk" + s)
marked_secrets = st.text(SECRET_ALPHABET + MARKDOWN_MARKS, min_size=6, max_size=16).map(
    lambda s: "sk" + s
)
secret_tokens = plain_secrets | marked_secrets
short_secrets = st.text(SHORT_ALPHABET, min_size=1, max_size=3)


def markdown_escaped(secret: str) -> str:
    """``secret`` as Markdown that reads as it: the first letter a character reference,
    each ASCII punctuation mark backslash-escaped."""
    rest = "".join("\\" + c if c.isascii() and not c.isalnum() else c for c in secret[1:])
    return f"&#{ord(secret[0])};" + rest


@dataclass(frozen=True)
class Secrets:
    """The secrets of an approval: ``long`` ones, ``short`` ones, and how ``joined`` reads:
    the first long one run together with the one that overlaps it (``tail`` is what the
    second adds: it must never show either)."""

    long: list[str]
    short: list[str]
    joined: str = ""
    tail: str = ""


@st.composite
def secret_sets(draw: st.DrawFn) -> Secrets:
    """Long secrets (sometimes two overlapping: the end of one starts the other) and
    short ones."""
    secrets = draw(st.lists(secret_tokens, max_size=3, unique=True))
    short = draw(st.lists(short_secrets, max_size=2, unique=True))
    overlap: bool = draw(st.booleans())
    if not secrets or not overlap:
        return Secrets(secrets, short)
    first, tail = secrets[0], draw(plain_secrets)
    second = first[len(first) // 2 :] + tail
    if second in secrets:
        return Secrets(secrets, short)
    return Secrets([*secrets, second], short, first + tail, tail)


@st.composite
def approvals(draw: st.DrawFn) -> tuple[Approval, Secrets]:
    """An approval with random blocks, plus the secrets it holds sprinkled elsewhere too:
    as they are, spelled with Markdown escapes, run together where they overlap, inside
    JSON values. Each is followed by " ." so that a short one stands alone."""
    secrets = draw(secret_sets())
    everything = secrets.long + secrets.short

    def sprinkled(text: str) -> str:
        how = draw(st.sampled_from(["none", "plain", "plain", "escaped", "joined"]))
        if not everything or how == "none":
            return text
        secret = draw(st.sampled_from(everything))
        derived = bool(secrets.tail) and secret.endswith(secrets.tail)
        if how == "escaped" and secret in secrets.long and not derived:
            secret = markdown_escaped(secret)  # (escaped, a tail would show outside it)
        elif how == "joined" and secrets.joined:
            secret = secrets.joined
        return text + " " + secret + " ."

    def value(raw: object) -> object:
        if not isinstance(raw, str):
            return raw
        nested: bool = draw(st.booleans())
        return {"nested": [sprinkled(raw)]} if nested else sprinkled(raw)

    blocks = [
        Block(
            type=draw(st.sampled_from(LAYOUTS)),
            label=sprinkled(draw(texts)),
            value=draw(json_values.map(value)),
            value_type=draw(st.sampled_from([*VALUE_TYPES, "markdown", "markdown", "markdown"])),
            truncated_chars=draw(st.sampled_from([0, 0, 0, 12345])),
        )
        for _ in range(draw(st.integers(0, 12)))
    ]
    for secret in everything:
        where = draw(st.integers(0, len(blocks)))
        blocks.insert(where, Block(draw(st.sampled_from(LAYOUTS)), "Key", secret, "secret"))
    arguments = draw(json_values)
    hide_in_arguments: bool = draw(st.booleans())
    if everything and hide_in_arguments:
        arguments = {"key": everything[0], "other": arguments}
    item = Approval(
        id=draw(texts),
        tool=draw(texts),
        summary=sprinkled(draw(texts)),
        blocks=tuple(blocks),
        arguments=arguments,
        expires_at=draw(st.none() | st.just(NOW + timedelta(minutes=14))),
    )
    return item, secrets


statuses = st.none() | st.builds(
    CardStatus,
    state=st.sampled_from(["pending", "approved", "denied", "answered", "expired", "cancelled"]),
    by=st.none() | texts,
    at=st.none() | st.just(NOW),
    reason=st.none() | texts,
    answer=st.none() | texts,
    elsewhere=st.none() | texts,
    approvals=st.lists(st.builds(Tap, name=texts, at=st.just(NOW)), max_size=12).map(tuple),
    required=st.integers(1, 15),
)

SPOILER = re.compile(r"<tg-spoiler>.*?</tg-spoiler>", re.DOTALL)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_sendable(rendered: RenderedCard) -> tuple[str, list[Entity]]:
    assert problems(rendered.html) == []
    text, entities = parse_html(rendered.html)
    assert 0 < utf16_length(text) <= 4096
    assert len(rendered.html.encode()) <= 32768
    # The plain-text fallback is the visible text with what a spoiler hides masked.
    assert rendered.plain == parse_html(SPOILER.sub("••••••", rendered.html))[0]
    return text, entities


@SETTINGS
@given(case=approvals(), secrets_mode=st.sampled_from(["spoiler", "masked", "details"]),
       status=statuses)
def test_any_approval_renders_to_html_telegram_keeps_whole(
    case: tuple[Approval, Secrets], secrets_mode: SecretsMode, status: CardStatus | None
) -> None:
    item, secrets = case
    rendered = RENDERER.approval_card(
        item, agent_name="build-bot", secrets=secrets_mode, now=NOW, status=status
    )
    text, entities = assert_sendable(rendered)
    attachment = rendered.attachment.content.decode() if rendered.attachment else ""
    spoilers = [e for e in entities if e.type == "spoiler"]

    def only_in_spoilers(pattern: str) -> None:
        """Every match shows only in a spoiler, and only when secrets may be shown."""
        assert re.search(pattern, attachment) is None
        for match in re.finditer(pattern, text):
            start, size = utf16_length(text[: match.start()]), utf16_length(match.group())
            assert secrets_mode == "spoiler"
            assert any(s.offset <= start and start + size <= s.end for s in spoilers)

    for secret in [*secrets.long, secrets.tail] if secrets.tail else secrets.long:
        only_in_spoilers(re.escape(secret))
    for secret in secrets.short:
        only_in_spoilers(r"(?<!\S)" + re.escape(secret) + r"(?= )")


@SETTINGS
@given(
    question=texts,
    options=st.lists(texts, max_size=30),
    status=statuses,
    agent_name=texts,
)
def test_any_question_renders_to_html_telegram_keeps_whole(
    question: str, options: list[str], status: CardStatus | None, agent_name: str
) -> None:
    item = Clarification("clr", question, tuple(options), expires_at=NOW + timedelta(days=3))
    rendered = RENDERER.question_card(item, agent_name=agent_name, now=NOW, status=status)
    assert_sendable(rendered)


@settings(max_examples=100, deadline=None)
@given(value=json_values, value_type=st.sampled_from(VALUE_TYPES))
def test_attachment_holds_the_whole_value(value: object, value_type: str) -> None:
    block = Block("block", "Value", value, value_type)
    rendered = RENDERER.approval_card(
        Approval("apr", "t", "s", (block,), None), agent_name="a", secrets="masked", now=NOW
    )
    assert_sendable(rendered)
    if rendered.attachment is not None and value_type not in ("secret", "json"):
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        assert len(rendered.attachment.content.decode()) >= len(shown.strip()) // 2


@settings(max_examples=300, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTPS", "ftp"]),
    labels=st.lists(st.text("ab1é-_ßК😀<\u3002\u00ad", max_size=5), min_size=1, max_size=4),
    tail=st.sampled_from(["", "/", "/a?b=1&c#d", ":8080/x", ":0/", ":x/"]),
)
def test_every_link_written_is_one_telegram_keeps(
    scheme: str, labels: list[str], tail: str
) -> None:
    url = scheme + "://" + ".".join(labels) + tail
    if http_link(url):
        assert checked_link(url) is not None
