"""Property tests: whatever blocks, values and statuses arrive, every card is HTML that
Telegram accepts in full, within its limits, and no secret shows where it must not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tg_html import Entity, parse_html, problems, utf16_length

from bot.protocol.payloads import Approval, Block, Clarification
from bot.render import CardStatus, RenderedCard, Renderer, SecretsMode, Tap

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
    "true", "•", "…",
]  # fmt: skip
LAYOUTS = ["key_value", "field", "block", "carousel", ""]
VALUE_TYPES = [
    "string", "text", "markdown", "code", "diff", "command", "email", "url", "path", "json",
    "number", "boolean", "datetime", "secret", "hologram", "",
]  # fmt: skip
SECRET_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

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
secret_tokens = st.text(SECRET_ALPHABET, min_size=8, max_size=24).map(lambda s: "sk" + s)


@st.composite
def approvals(draw: st.DrawFn) -> tuple[Approval, list[str]]:
    """An approval with random blocks, plus the secrets it holds sprinkled elsewhere too."""
    secrets = draw(st.lists(secret_tokens, max_size=3, unique=True))

    def sprinkled(text: str) -> str:
        sprinkle: bool = draw(st.booleans())
        if secrets and sprinkle:
            return text + " " + draw(st.sampled_from(secrets)) + " "
        return text

    blocks = [
        Block(
            type=draw(st.sampled_from(LAYOUTS)),
            label=sprinkled(draw(texts)),
            value=draw(json_values.map(lambda v: sprinkled(v) if isinstance(v, str) else v)),
            value_type=draw(st.sampled_from(VALUE_TYPES)),
            truncated_chars=draw(st.sampled_from([0, 0, 0, 12345])),
        )
        for _ in range(draw(st.integers(0, 12)))
    ]
    for secret in secrets:
        where = draw(st.integers(0, len(blocks)))
        blocks.insert(where, Block(draw(st.sampled_from(LAYOUTS)), "Key", secret, "secret"))
    arguments = draw(json_values)
    hide_in_arguments: bool = draw(st.booleans())
    if secrets and hide_in_arguments:
        arguments = {"key": secrets[0], "other": arguments}
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

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_sendable(rendered: RenderedCard) -> tuple[str, list[Entity]]:
    assert problems(rendered.html) == []
    text, entities = parse_html(rendered.html)
    assert 0 < utf16_length(text) <= 4096
    assert len(rendered.html.encode()) <= 32768
    assert rendered.plain == text
    return text, entities


def utf16_offsets(text: str, needle: str) -> list[int]:
    offsets, start = [], text.find(needle)
    while start >= 0:
        offsets.append(utf16_length(text[:start]))
        start = text.find(needle, start + 1)
    return offsets


@SETTINGS
@given(case=approvals(), secrets_mode=st.sampled_from(["spoiler", "masked"]), status=statuses)
def test_any_approval_renders_to_html_telegram_keeps_whole(
    case: tuple[Approval, list[str]], secrets_mode: SecretsMode, status: CardStatus | None
) -> None:
    item, secrets = case
    rendered = RENDERER.approval_card(
        item, agent_name="build-bot", secrets=secrets_mode, now=NOW, status=status
    )
    text, entities = assert_sendable(rendered)
    attachment = rendered.attachment.content.decode() if rendered.attachment else ""
    spoilers = [e for e in entities if e.type == "spoiler"]
    for secret in secrets:
        assert secret not in attachment
        if secrets_mode == "masked":
            assert secret not in rendered.html
            continue
        size = utf16_length(secret)
        for offset in utf16_offsets(text, secret):
            assert any(s.offset <= offset and offset + size <= s.end for s in spoilers)


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
