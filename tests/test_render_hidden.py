"""Cards cannot hide part of what runs: invisible, format and direction characters are
spelled out in monospace values and marked in prose, the card warns, no grant covers
such a call, and titles of several lines say how many lines they leave out. Checked
through the real renderer and Telegram's own parser (TDLib, offline)."""

from __future__ import annotations

import sys
import unicodedata
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tdlib_oracle import telegram_detect, telegram_parse
from test_grants_agenthost import KEY, OFFER, paired_host
from test_grants_agenthost import Clock as GrantClock
from test_render import assert_golden

from bot.agenthost.grants import Offer, offer_for
from bot.core.model import CardRow, ItemRow
from bot.core.status import CardStatus, GrantGiven, Tap
from bot.hidden import (
    BREAKS,
    MARK,
    first_line,
    has_hidden,
    holds_hidden,
    one_line,
    reveal,
    strip,
)
from bot.integrations.describe import ToolCall, describe
from bot.integrations.grants import Programs, hook_scope
from bot.integrations.hook import command_table
from bot.playground.tg_html import parse_html, problems
from bot.protocol.payloads import Approval, Block, Clarification, GrantRequest
from bot.render import RenderedCard, Renderer, SecretsMode
from bot.tg.keyboards import keyboard, revoke_keyboard

NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)
RENDERER = Renderer()
WARNING = "⚠️ contains invisible or direction-changing characters"

BIDI = [
    "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c",
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
]  # fmt: skip
INVISIBLE = [
    "\u200b", "\u200c", "\u200d", "\u2060", "\u2061", "\u2062", "\u2063", "\u2064", "\ufeff",
    "\u00ad", "\u180e", "\u034f", "\u115f", "\u1160", "\u3164", "\uffa0", "\u206a", "\u206f",
    "\ufff9", "\ufffb", "\U000e0001", "\U000e0041", "\U000e007f", "\U0001d173", "\ufe0f",
    "\U000e0100", "\u17b4", "\u0600", "\u2065",
]  # fmt: skip
SEPARATORS = ["\u2028", "\u2029", "\x85", "\x80", "\x9f"]
HIDDEN = BIDI + INVISIBLE + SEPARATORS
LINE_BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
               "\u2029"]


def code(char: str) -> str:
    return f"⟦U+{ord(char):04X}⟧"


def approval_card(item: Approval, status: CardStatus | None = None) -> RenderedCard:
    rendered = RENDERER.approval_card(item, agent_name="build-bot", secrets="spoiler",
                                      now=NOW, status=status)
    assert problems(rendered.html) == []
    return rendered


def shown_by_telegram(html: str) -> str:
    """The text Telegram shows for ``html``, as TDLib parses it."""
    text, _ = telegram_parse(html)
    return text


def command(value: str, summary: str = "Run a command") -> Approval:
    return Approval("apr_h", "Bash", summary,
                    (Block("block", "Command", value, "command"),), None)


# --- the module's character set -------------------------------------------------------


def test_every_format_separator_and_c1_character_is_marked() -> None:
    missed = [
        hex(point) for point in range(sys.maxunicode + 1)
        if (unicodedata.category(chr(point)) in ("Cf", "Zl", "Zp") or 0x80 <= point <= 0x9f)
        and chr(point) not in ("\u200c", "\u200d")
        and not has_hidden("a" + chr(point) + "a")
    ]
    assert missed == []


@pytest.mark.parametrize("char", HIDDEN, ids=code)
def test_each_listed_character_is_spelled_out_or_marked(char: str) -> None:
    text = "echo done " + char + ";rm -rf ~/work #" + char
    assert has_hidden(text)
    assert reveal(text) == "echo done " + code(char) + ";rm -rf ~/work #" + code(char)
    assert strip(text) == "echo done " + MARK + ";rm -rf ~/work #" + MARK
    assert strip("a" + char * 3 + "b") == "a" + MARK + "b"


@pytest.mark.parametrize(("text", "kept"), [
    ("👩\u200d👩\u200d👧", True),  # a family: ZWJ between emoji
    ("👩🏽\u200d💻", True),  # a skin tone before the joiner
    ("🏳\ufe0f\u200d🌈", True),  # VS16 before the joiner
    ("❤\ufe0f", True),
    ("1\ufe0f\u20e3", True),  # a keycap
    ("क\u094d\u200dष", True),  # ZWJ after a virama
    ("می\u200cخواهم", True),  # ZWNJ between Arabic letters
    ("漢\U000e0100", True),  # an ideographic variation
    ("r\u200dm", False),  # a joiner between Latin letters hides nothing but a byte
    ("r\u200cm", False),
    ("r\ufe0fm", False),
    ("❤\ufe0f\ufe0f", False),  # a second selector carries data
    ("😀\U000e0100\U000e0101", False),
    ("👩\u200d", False),
    ("\u200d👩", False),
    ("a\u200d👩", False),
    ("<\u200d👩", False),  # "<" is a math symbol, not a picture
    ("=\ufe0f", False),
    ("1\ufe0f", False),
])
def test_joiners_and_selectors_are_left_only_where_they_shape_a_glyph(
    text: str, kept: bool
) -> None:
    assert has_hidden(text) is not kept
    assert (reveal(text) == text) is kept


# --- cards ------------------------------------------------------------------------------


@pytest.mark.parametrize("char", HIDDEN, ids=code)
def test_command_card_spells_out_the_character_and_warns(char: str) -> None:
    attack = "echo done " + char + ";rm -rf ~/work #" + char
    rendered = approval_card(command(attack))
    shown = shown_by_telegram(rendered.html)
    assert char not in rendered.html.replace(WARNING, "")
    assert char not in shown.replace(WARNING, "")
    assert "echo done " + code(char) + ";rm -rf ~/work #" + code(char) in shown
    assert WARNING in shown
    assert rendered.plain == parse_html(rendered.html)[0]


@pytest.mark.parametrize("char", HIDDEN, ids=code)
@pytest.mark.parametrize("where", ["summary", "label", "text", "markdown", "url", "tool",
                                   "agent", "secret", "arguments", "json", "diff", "path"])
def test_every_place_of_an_approval_card_marks_it(char: str, where: str) -> None:
    value = "a" + char + "b"
    summary = value if where == "summary" else "Do it"
    label = value if where == "label" else "Value"
    kinds = {"text": "text", "markdown": "markdown", "url": "url", "secret": "secret",
             "json": "json", "diff": "diff", "path": "path"}
    blocks: tuple[Block, ...] = (Block("block", label, value if where in kinds else "x",
                                       kinds.get(where, "string")),)
    arguments: object = None
    if where == "arguments":
        blocks, arguments = (), {"x": value}
    item = Approval("apr_h", value if where == "tool" else "tool", summary, blocks, arguments)
    rendered = RENDERER.approval_card(
        item, agent_name=value if where == "agent" else "bot", secrets="spoiler", now=NOW)
    shown = shown_by_telegram(rendered.html)
    assert char not in shown.replace(WARNING, "")
    if where in ("summary", "tool", "agent") and char in LINE_BREAKS:
        assert "a (+1 more line)" in shown  # a title's line break: the title says so
        return
    assert ("a" + MARK + "b" in shown) or ("a" + code(char) + "b" in shown)
    assert WARNING in shown
    attachment = rendered.attachment
    assert attachment is None or char not in attachment.content.decode()


@pytest.mark.parametrize("char", HIDDEN, ids=code)
def test_question_card_marks_question_and_options_and_warns(char: str) -> None:
    item = Clarification("clr_h", "Deploy " + char + "where?", ("prod" + char, "staging"))
    rendered = RENDERER.question_card(item, agent_name="bot", now=NOW)
    shown = shown_by_telegram(rendered.html)
    assert char not in shown.replace(WARNING, "").replace("✍️", "")  # the card's own emoji
    assert "Deploy " + MARK + "where?" in shown and "prod" + MARK in shown
    assert WARNING in shown


def test_markdown_cannot_bring_a_direction_control_back_with_a_reference() -> None:
    for source in ("a&#x2067;b", "a&rlm;b", "a&#8207;b", "*a&zwnj;b*", "[a&lrm;](https://x.example)",
                   "# a&#x202E;b", "> a&#x2069;b"):
        item = Approval("apr_h", "t", "s", (Block("block", "Notes", source, "markdown"),), None)
        shown = shown_by_telegram(approval_card(item).html)
        assert MARK in shown and WARNING in shown, source
        assert not any(unicodedata.category(c) == "Cf" for c in shown), source


def test_clean_cards_have_no_warning_and_keep_emoji_and_persian() -> None:
    item = Approval("apr_h", "t", "Send 👩‍👩‍👧 a note",
                    (Block("block", "Body", "می‌خواهم ❤️ 1️⃣", "text"),), None)
    shown = shown_by_telegram(approval_card(item).html)
    assert "⚠️" not in shown and MARK not in shown
    assert "👩‍👩‍👧" in shown and "می‌خواهم" in shown


def test_status_lines_mark_names_reasons_and_grant_labels() -> None:
    char = "\u202e"
    status = CardStatus(
        "approved", by="Ada" + char, at=NOW, approvals=(Tap("Bo" + char, NOW),), required=2,
        grant=GrantGiven("`git status`" + char, "Ada" + char, 30, NOW))
    shown = shown_by_telegram(approval_card(command("ls"), status=status).html)
    assert char not in shown and "Ada" + MARK in shown and "Bo" + MARK in shown
    denied = CardStatus("denied", by="Ada", at=NOW, reason="no" + char + "pe")
    assert "no" + MARK + "pe" in shown_by_telegram(approval_card(command("ls"),
                                                                 status=denied).html)


# --- lines a title leaves out --------------------------------------------------------------


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=repr)
def test_title_of_several_lines_says_how_many_it_leaves_out(brk: str) -> None:
    summary = "run: echo done" + brk * 80 + "rm -rf ~/work"
    rendered = approval_card(command("x", summary=summary))
    shown = shown_by_telegram(rendered.html)
    assert "run: echo done (+80 more lines)" in shown
    assert rendered.attachment is not None
    assert "rm -rf ~/work" in rendered.attachment.content.decode()
    title = RENDERER.title(command("x", summary=summary))
    assert title == "run: echo done (+80 more lines)"


@pytest.mark.parametrize(("text", "line", "more"), [
    ("one", "one", 0),
    ("one\ntwo", "one", 1),
    ("\n\n  \none\n\n", "one", 0),
    ("one\n\n\n", "one", 0),
    ("one\r\ntwo\rthree\u2028four", "one", 3),
    ("  \n\t", "", 0),
])
def test_first_line(text: str, line: str, more: int) -> None:
    assert first_line(text) == (line, more)


def test_one_line_never_cuts_its_note() -> None:
    assert one_line("x" * 100 + "\n\ny", 30) == "x" * 13 + "… (+2 more lines)"
    assert one_line("x" * 100 + " (+5 more lines)", 30) == "x" * 13 + "… (+5 more lines)"
    assert one_line("a  b\tc") == "a b c"
    assert one_line("a\nb") == "a (+1 more line)"


def test_hook_summary_of_a_multi_line_command_counts_its_lines() -> None:
    call = ToolCall("Claude Code", "Bash", {"command": "echo done" + "\n" * 80 + "rm -rf ~"})
    assert describe(call, lambda path: None).summary == \
        "Claude Code wants to run: echo done (+80 more lines)"


# --- messages, buttons ------------------------------------------------------------------


def test_messages_mark_every_value_and_put_lists_on_one_line() -> None:
    char = "\u2067"
    html = RENDERER.message(
        "activity",
        lines=[{"summary": "git status" + char + "\n" * 5 + "rm -rf ~", "tool": "Bash",
                "by": "Ada" + char, "agent": "bot"}],
        earlier=0, grants=[], agents=["bot" + char])
    shown = shown_by_telegram(html)
    assert char not in shown
    assert "git status" + MARK + " (+5 more lines)" in shown
    assert "Ada" + MARK in shown and "bot" + MARK in shown
    alert = RENDERER.text("alert_revoke", label="`git status`" + char, reason=None,
                          confirmed=True)
    assert "git status" in alert
    assert char not in alert


def test_buttons_mark_option_and_grant_labels() -> None:
    char = "\u202e"
    body = '{"id": "clr_1", "question": "q", "options": ["yes' + char + '", "no"]}'
    item = ItemRow("a", "clr_1", "clarification", body, "open", None, None, None, None,
                   None, None, 0)
    card = CardRow(1, "a", "clr_1", 1, None, "t", 1, 0, False, "none", None)
    labels = [button.label for row in keyboard(item, card, votes=[], required=1)
              for button in row]
    assert labels == ["yes" + MARK, "no"]
    (row,) = revoke_keyboard([("t", "`git status`" + char)])
    assert row[0].label == "⛔ Revoke git status" + MARK
    (row,) = revoke_keyboard([("t", "fetch аpple.com")])
    assert row[0].label == "⛔ Revoke fetch xn--pple-43d.com"


# --- no grant covers such a call --------------------------------------------------------


ATTACKS = [
    "git status\u2067", "git\u200b status", "git status \u202e-s", "ls\u00ad", "ls\u2028",
    "ls \x85", "git status\r", "ls\x1b[2K", "ls \U000e0041", "git st\u200datus",
]


@pytest.mark.parametrize("command_line", ATTACKS, ids=repr)
def test_no_hook_grant_for_a_call_holding_hidden_characters(command_line: str) -> None:
    programs = Programs(command_table(), {"git": "/usr/bin/git"}.get)
    call = ToolCall("Claude Code", "Bash", {"command": command_line}, cwd="/w")
    assert hook_scope(call, "s1", programs) is None
    clean = ToolCall("Claude Code", "Bash", {"command": "git status"}, cwd="/w")
    assert hook_scope(clean, "s1", programs) is not None
    edit = ToolCall("Claude Code", "Write", {"file_path": "/w/a.txt", "content": "x"},
                    real_path="/w/a.txt")
    assert hook_scope(edit, "s1") is not None
    dirty = replace(edit, arguments={"file_path": "/w/a.txt", "content": "x " + command_line})
    assert hook_scope(dirty, "s1") is None


@pytest.mark.parametrize("char", HIDDEN, ids=code)
def test_host_offers_no_grant_for_blocks_holding_hidden_characters(char: str) -> None:
    blocks = [{"type": "block", "label": "Command", "value": "git status", "value_type":
               "command"}]
    assert offer_for(Offer("k", "`git status`"), blocks) is not None
    bad = [{**blocks[0], "value": "git status" + char}]
    assert offer_for(Offer("k", "`git status`"), bad) is None
    assert offer_for(Offer("k", "`git status`" + char), blocks) is None
    assert offer_for(Offer("k" + char, "`git status`"), blocks) is None
    assert offer_for(Offer("k", "`git status`"), blocks, ("run: git status" + char,)) is None
    assert offer_for(Offer("k", "`git status`"), blocks, {"command": "a" + char}) is None


def test_holds_hidden_walks_keys_and_nested_values_and_allows_crlf() -> None:
    assert holds_hidden({"a": [{"b\u2066": 1}]})
    assert holds_hidden(("x", ["y", {"z": "\x00"}]))
    assert not holds_hidden({"content": "a\r\nb\n\tc 👩‍👩‍👧"})


# --- property: nothing hidden ever reaches what Telegram shows ------------------------------

BIDI_CLASSES = frozenset({"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"})
ALPHABET = [*HIDDEN, "a", "r", "m", " ", "\n", ";", "#", "👩", "🏽", "❤", "\ufe0f", "\u20e3",
            "1", "क", "\u094d", "ی", "خ", "漢", "<", "&", "`", "*", "\x1b"]
hidden_texts = st.lists(st.sampled_from(ALPHABET), max_size=30).map("".join)
KINDS = ["string", "text", "markdown", "code", "diff", "command", "email", "url", "path",
         "json", "number", "boolean", "datetime", "secret", "hologram"]


def assert_nothing_hidden(shown: str) -> None:
    for index, char in enumerate(shown):
        if unicodedata.bidirectional(char) in BIDI_CLASSES or char in "\u200e\u200f\u061c":
            raise AssertionError(f"direction control {code(char)} at {index}")
        if unicodedata.category(char) in ("Cf", "Zl", "Zp") or "\x80" <= char <= "\x9f":
            neighbours = shown[max(index - 1, 0):index] + shown[index + 1:index + 2]
            assert char in "\u200c\u200d", f"{code(char)} at {index}"
            assert not any(c.isascii() for c in neighbours), f"{code(char)} at {index}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    summary=hidden_texts, tool=hidden_texts, agent=hidden_texts,
    blocks=st.lists(st.tuples(hidden_texts, hidden_texts, st.sampled_from(KINDS)),
                    max_size=4),
    arguments=st.dictionaries(hidden_texts, hidden_texts, max_size=3),
    secrets=st.sampled_from(["spoiler", "masked", "details"]),
)
def test_no_hidden_character_reaches_an_approval_card(
    summary: str, tool: str, agent: str, blocks: list[tuple[str, str, str]],
    arguments: dict[str, str], secrets: SecretsMode,
) -> None:
    item = Approval("apr_p", tool, summary,
                    tuple(Block("block", label, value, kind) for label, value, kind in blocks),
                    arguments)
    rendered = RENDERER.approval_card(item, agent_name=agent, secrets=secrets, now=NOW)
    shown = shown_by_telegram(rendered.html)
    assert_nothing_hidden(shown.replace(WARNING, ""))
    if rendered.attachment is not None:
        assert_nothing_hidden(rendered.attachment.content.decode())
    # Line breaks in a title are no longer hidden: the title counts the lines.
    shown_values = [BREAKS.sub("\n", summary), one_line(tool), one_line(agent),
                    *(label for label, _, _ in blocks)]
    shown_values += [value for _, value, kind in blocks if kind not in ("secret",)]
    if not blocks:
        shown_values += [*arguments, *arguments.values()]
    if any(has_hidden(value) for value in shown_values):
        assert WARNING in shown


@settings(max_examples=100, deadline=None)
@given(question=hidden_texts, options=st.lists(hidden_texts, max_size=5), agent=hidden_texts)
def test_no_hidden_character_reaches_a_question_card(
    question: str, options: list[str], agent: str
) -> None:
    item = Clarification("clr_p", question, tuple(options))
    rendered = RENDERER.question_card(item, agent_name=agent, now=NOW)
    assert_nothing_hidden(shown_by_telegram(rendered.html).replace(WARNING, ""))
    assert (WARNING in shown_by_telegram(rendered.html)) is any(
        has_hidden(text) for text in (question, *options, one_line(agent)))


def test_attack_card_matches_its_golden_file() -> None:
    item = Approval(
        "apr_bidi_6", "Bash", "run: echo done \u2067;rm -rf ~/work #\u2069" + "\n" * 80 + "ls",
        (Block("block", "Command", "echo done \u2067;rm -rf ~/work #\u2069", "command"),
         Block("key_value", "Directory", "/home/ada/\u202eslp.exe", "path"),
         Block("field", "Description", "Say\u200b done", "string")),
        None)
    assert_golden("apr_bidi_6.html", approval_card(item).html)


async def test_host_neither_offers_nor_applies_a_grant_to_such_a_call(tmp_path: Path) -> None:
    with paired_host(tmp_path, GrantClock()) as (host, phone):
        def submit(command_line: str) -> Any:
            return host.submit_approval(
                tool="Bash", summary="run", arguments={"command": command_line}, blocks=None,
                timeout_s=600, grant=OFFER)

        first = submit("git status")
        await phone.decide(first.item_id, grant=GrantRequest(KEY, 30))
        assert [g.key for g in host.grants()] == [KEY]
        assert submit("git status -s").state.value == "approved"
        for attack in ("git status \u2067;rm -rf ~ #\u2069", "git status\u200b", "git\x85"):
            asked = submit(attack)
            assert asked.pending and "grant_offer" not in asked.wire


@settings(max_examples=100, deadline=None)
@given(summaries=st.lists(hidden_texts, min_size=1, max_size=4), name=hidden_texts)
def test_no_hidden_character_reaches_a_message(summaries: list[str], name: str) -> None:
    lines = [{"summary": s, "tool": "Bash", "by": name, "agent": name} for s in summaries]
    grants = [{"id": "gr_1", "status": "active", "label": name, "by": name, "agent": name,
               "until": None, "minutes_left": 3, "uses": 1, "revoke_by": None}]
    for html in (
        RENDERER.message("activity", lines=lines, earlier=0, grants=grants, agents=[name, "b"]),
        RENDERER.message("grants", grants=grants),
        RENDERER.message("pending", items=[{"summary": s, "agent": name, "link": None,
                                            "expires_at": None} for s in summaries],
                         total=len(summaries)),
    ):
        assert_nothing_hidden(shown_by_telegram(html))


def test_a_slash_word_in_a_title_is_no_bot_command() -> None:
    item = command("./build && /usr/bin/deploy", summary="Run ./build then (/deploy) /start")
    assert [e.type for e in telegram_detect(item.summary)].count("bot_command") == 3
    title = shown_by_telegram(approval_card(item).html).splitlines()[1]
    assert title == "Run ./\u2060build then (/\u2060deploy) /\u2060start"
    assert not [e for e in telegram_detect(title) if e.type == "bot_command"]
