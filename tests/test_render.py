"""Cards as Telegram HTML: golden files for the test vectors, one check per value type,
secrets, statuses, huge inputs, operator templates and the ``render`` command."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.cli import main
from bot.core.status import CardStatus, Tap
from bot.errors import RenderError
from bot.playground.tg_html import checked_link, parse_html, problems, utf16_length
from bot.protocol.payloads import Approval, Block, Clarification, InboxUpdate, parse_inbox_update
from bot.render import Attachment, RenderedCard, Renderer, SecretsMode
from bot.render.environment import build_environment, builtin_template_dir
from bot.render.markdown import http_link, markdown_to_html
from bot.render.masking import Masker

DATA = Path(__file__).parent / "data" / "vectors.json"
GOLDEN = Path(__file__).parent / "golden"
UPDATE_GOLDEN = os.environ.get("UPDATE_GOLDEN") == "1"
NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)
AT = datetime(2025, 11, 29, 10, 3, 12, tzinfo=UTC)
API_KEY = "sk-live-51H8xQ2eZvKYlo2C"


def vector_payload() -> dict[str, object]:
    payload = json.loads(DATA.read_text("utf-8"))["open"][0]["payload"]
    assert isinstance(payload, dict)
    return payload


@pytest.fixture(scope="module")
def inbox() -> InboxUpdate:
    return parse_inbox_update(vector_payload()["body"])


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer()


def approval(inbox: InboxUpdate, approval_id: str) -> Approval:
    return next(a for a in inbox.approvals if a.id == approval_id)


def card(
    renderer: Renderer,
    item: Approval,
    secrets: SecretsMode = "masked",
    status: CardStatus | None = None,
    now: datetime = NOW,
) -> RenderedCard:
    rendered = renderer.approval_card(
        item, agent_name="build-bot", secrets=secrets, now=now, status=status
    )
    assert_sendable(rendered)
    return rendered


def one_block(block: Block, *, summary: str = "Do it", arguments: object = None) -> Approval:
    return Approval(id="apr_t", tool="tool", summary=summary, blocks=(block,), arguments=arguments)


SPOILER = re.compile(r"<tg-spoiler>.*?</tg-spoiler>", re.DOTALL)


def assert_sendable(rendered: RenderedCard) -> None:
    """Telegram accepts the HTML and keeps every entity; plain is its visible text, with
    what a spoiler hides masked."""
    assert problems(rendered.html) == []
    text, _ = parse_html(rendered.html)
    assert utf16_length(text) <= 4096
    assert rendered.plain == parse_html(SPOILER.sub("••••••", rendered.html))[0]


def assert_golden(name: str, html: str) -> None:
    path = GOLDEN / name
    if UPDATE_GOLDEN:
        path.write_text(html + "\n", "utf-8")
    assert path.exists(), f"missing golden file {path.name}; run with UPDATE_GOLDEN=1"
    assert html + "\n" == path.read_text("utf-8")


# --- golden files ---------------------------------------------------------------------

APPROVAL_IDS = ["apr_email_1", "apr_write_2", "apr_all_3", "apr_raw_4", "apr_list_5"]


@pytest.mark.parametrize("secrets", ["spoiler", "masked"])
@pytest.mark.parametrize("approval_id", APPROVAL_IDS)
def test_vector_approvals_match_golden_files(
    renderer: Renderer, inbox: InboxUpdate, approval_id: str, secrets: SecretsMode
) -> None:
    rendered = card(renderer, approval(inbox, approval_id), secrets)
    assert rendered.attachment is None
    assert_golden(f"{approval_id}.{secrets}.html", rendered.html)


def test_vector_question_matches_golden_file(renderer: Renderer, inbox: InboxUpdate) -> None:
    rendered = renderer.question_card(inbox.clarifications[0], agent_name="build-bot", now=NOW)
    assert_sendable(rendered)
    assert_golden("clr_env_1.html", rendered.html)


STATUSES = {
    "approved": CardStatus("approved", by="Ada Lovelace", at=AT),
    "denied": CardStatus("denied", by="Ada Lovelace", at=AT, reason="not before the release"),
    "expired": CardStatus("expired"),
    "cancelled": CardStatus("cancelled", at=AT),
    "elsewhere": CardStatus("approved", at=AT, elsewhere="on iPhone of Ada"),
    "tally": CardStatus("pending", approvals=(Tap("Ada", AT),), required=2),
    "sending": CardStatus("approved", by="Ada Lovelace", at=AT, sending=True),
    "expired_late": CardStatus("approved", by="Ada Lovelace", at=AT, reported="expired"),
    "denied_first": CardStatus("approved", by="Ada Lovelace", at=AT, reported="denied",
                               reported_by="iPhone of Bob"),
}


@pytest.mark.parametrize("name", sorted(STATUSES))
def test_status_lines_match_golden_files(renderer: Renderer, inbox: InboxUpdate, name: str) -> None:
    rendered = card(renderer, approval(inbox, "apr_email_1"), status=STATUSES[name])
    assert_golden(f"apr_email_1.{name}.html", rendered.html)


def test_answered_question_matches_golden_file(renderer: Renderer, inbox: InboxUpdate) -> None:
    status = CardStatus("answered", by="Ada Lovelace", at=AT, answer="staging")
    rendered = renderer.question_card(
        inbox.clarifications[0], agent_name="build-bot", now=NOW, status=status
    )
    assert_sendable(rendered)
    assert_golden("clr_env_1.answered.html", rendered.html)


# --- the card around the blocks -------------------------------------------------------


def test_header_names_agent_tool_and_summary(renderer: Renderer, inbox: InboxUpdate) -> None:
    plain = card(renderer, approval(inbox, "apr_email_1")).plain
    assert plain.startswith("🤖 build-bot asks to run send_email\nSend an email to to@mail.com")


def test_expiry_counts_down_then_says_expired(renderer: Renderer, inbox: InboxUpdate) -> None:
    item = approval(inbox, "apr_email_1")
    assert "expires 10:15 UTC, in 14 min" in card(renderer, item).plain
    assert "in 2 h 18 min" in card(renderer, item, now=NOW - timedelta(hours=2, minutes=4)).plain
    other_day = card(renderer, item, now=NOW - timedelta(days=2)).plain
    assert "expires Sat 29 Nov, 10:15 UTC, in 2 days" in other_day
    assert "⌛ expired 10:15 UTC" in card(renderer, item, now=NOW + timedelta(hours=1)).plain


def test_decided_card_keeps_its_body_and_drops_the_countdown(
    renderer: Renderer, inbox: InboxUpdate
) -> None:
    pending = card(renderer, approval(inbox, "apr_email_1")).plain
    decided = card(renderer, approval(inbox, "apr_email_1"), status=STATUSES["denied"])
    assert "expires" not in decided.plain
    assert pending.split("expires")[1].split("\n", 1)[1].strip() in decided.plain
    assert decided.html.endswith(
        "<b>❌ Denied by Ada Lovelace · 10:03 UTC — reason: not before the release</b>"
    )


def test_quorum_tally_lists_who_approved(renderer: Renderer, inbox: InboxUpdate) -> None:
    status = CardStatus(
        "pending", approvals=(Tap("Ada", AT), Tap("Bob", AT + timedelta(minutes=1))), required=3
    )
    plain = card(renderer, approval(inbox, "apr_email_1"), status=status).plain
    assert plain.endswith("👥 Approvals 2 of 3: Ada 10:03, Bob 10:04")


def test_status_texts_are_escaped_and_bounded(renderer: Renderer, inbox: InboxUpdate) -> None:
    status = CardStatus("denied", by="<b>Eve</b>", at=AT, reason="x & y " * 1000)
    rendered = card(renderer, approval(inbox, "apr_email_1"), status=status)
    assert "by &lt;b&gt;Eve&lt;/b&gt;" in rendered.html
    assert rendered.plain.endswith("…")


# --- value types ----------------------------------------------------------------------


def rendered_block(renderer: Renderer, block: Block, secrets: SecretsMode = "masked") -> str:
    return card(renderer, one_block(block), secrets).html.split("\n\n", 1)[1]


def test_key_value_field_and_block_layouts(renderer: Renderer) -> None:
    assert rendered_block(renderer, Block("key_value", "To", "a b", "string")) == "<b>To:</b> a b"
    assert rendered_block(renderer, Block("field", "Subject", "Q3", "string")) == (
        "<b>Subject:</b> Q3"
    )
    assert rendered_block(renderer, Block("block", "Body", "one\ntwo", "text")) == (
        "<b>Body</b>\none\ntwo"
    )


def test_long_text_goes_into_an_expandable_quote(renderer: Renderer) -> None:
    html = rendered_block(renderer, Block("block", "Body", "line\n" * 10, "text"))
    assert html.startswith("<b>Body</b>\n<blockquote expandable>line\nline")


def test_html_in_values_is_escaped(renderer: Renderer) -> None:
    html = rendered_block(
        renderer, Block("key_value", "A<b>", "</pre> & &amp; \"q\" 'x'", "string")
    )
    assert html == "<b>A&lt;b&gt;:</b> &lt;/pre&gt; &amp; &amp;amp; &quot;q&quot; 'x'"


def test_diff_keeps_its_lines_in_a_diff_pre(renderer: Renderer) -> None:
    html = rendered_block(renderer, Block("block", "Diff", "= same\n- old\n+ new", "diff"))
    assert '<pre><code class="language-diff">= same\n- old\n+ new</code></pre>' in html


def test_code_gets_a_language_only_from_a_shebang(renderer: Renderer) -> None:
    plain = rendered_block(renderer, Block("block", "Code", "x = 1", "code"))
    assert plain.endswith("<pre>x = 1</pre>")
    script = "#!/usr/bin/env python3\nprint(1)"
    html = rendered_block(renderer, Block("block", "Code", script, "code"))
    assert '<pre><code class="language-python">#!/usr/bin/env python3' in html


def test_command_is_inline_code_for_one_line_and_pre_for_several(renderer: Renderer) -> None:
    one = rendered_block(renderer, Block("field", "Run", "ls -l", "command"))
    assert one == "<b>Run:</b> <code>ls -l</code>"
    several = rendered_block(renderer, Block("field", "Run", "cd /\nls", "command"))
    assert several == "<b>Run:</b>\n<pre>cd /\nls</pre>"


def test_path_is_code(renderer: Renderer) -> None:
    html = rendered_block(renderer, Block("key_value", "File", "/a/b.rs", "path"))
    assert html == "<b>File:</b> <code>/a/b.rs</code>"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ({"b": [1, 2]}, "{\n  &quot;b&quot;: [\n    1,\n    2\n  ]\n}"),
        ([1], "[\n  1\n]"),
        ('{"a":1}', "{\n  &quot;a&quot;: 1\n}"),
    ],
)
def test_json_is_pretty_printed(renderer: Renderer, value: object, shown: str) -> None:
    html = rendered_block(renderer, Block("block", "Payload", value, "json"))
    assert html == '<b>Payload</b>\n<pre><code class="language-json">' + shown + "</code></pre>"


def test_json_string_that_is_not_json_is_shown_as_is(renderer: Renderer) -> None:
    html = rendered_block(renderer, Block("block", "Payload", "{not json", "json"))
    assert html == "<b>Payload</b>\n<pre>{not json</pre>"


def test_markdown_becomes_telegram_html(renderer: Renderer) -> None:
    source = (
        "# Plan\n\n**bold** _it_ ~~gone~~ `x<y` [ok](https://a.example/?q=1&r=2) "
        "[bad](javascript:alert(1)) ![alt text](https://a.example/i.png) <b>raw</b>\n\n"
        "- one\n- two\n\n1. first\n2. second\n\n> quoted\n\n```sh\necho hi\n```"
    )
    html = rendered_block(renderer, Block("block", "Plan", source, "markdown"))
    assert "<b>Plan</b>" in html
    assert "<b>bold</b> <i>it</i> <s>gone</s> <code>x&lt;y</code>" in html
    assert '<a href="https://a.example/?q=1&amp;r=2">ok</a>' in html
    assert "javascript" not in html.split("[bad]")[0] and '<a href="javascript' not in html
    assert "alt text" in html and "i.png" not in html
    assert "&lt;b&gt;raw&lt;/b&gt;" in html
    assert "• one\n• two\n1. first\n2. second" in html
    assert '<pre><code class="language-sh">echo hi</code></pre>' in html
    assert "<blockquote expandable>" in html  # long: inside an expandable quote, quote flattened


def test_short_markdown_keeps_its_quote(renderer: Renderer) -> None:
    html = rendered_block(renderer, Block("block", "Note", "> careful", "markdown"))
    assert html == "<b>Note</b>\n<blockquote>careful</blockquote>"


def test_url_is_a_link_only_for_http_with_a_dotted_host(renderer: Renderer) -> None:
    good = rendered_block(renderer, Block("key_value", "U", "https://x.example/a?b&c", "url"))
    assert good == '<b>U:</b> <a href="https://x.example/a?b&amp;c">https://x.example/a?b&amp;c</a>'
    for bad in ("javascript:alert(1)", "http://localhost/x", "ftp://x.example", "x.example"):
        html = rendered_block(renderer, Block("key_value", "U", bad, "url"))
        assert "<a" not in html
        assert bad in html


@pytest.mark.parametrize(
    "url",
    [
        "http://ex.coma<b>😀/",
        "http://.bc/",
        "http://a..b/",
        "http://a.example./",
        "http://-a.example/",
        "http://a-.example/",
        "http://a_b.example/",
        "http://[::1]/",
        "http://a.example:99999/",
        "http://a.example:x/",
        "http://" + "a" * 64 + ".example/",
        "http://a\u3002example/",
        "http://a\u00adb.example/",
    ],
)
def test_url_with_a_malformed_host_is_text(url: str) -> None:
    assert not http_link(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://bücher.example/",
        "https://a-b.example:8443/x?y",
        "http://1.2.3.4/",
        "https://A.Example",
    ],
)
def test_url_with_a_proper_host_is_a_link_telegram_keeps(url: str) -> None:
    assert http_link(url)
    assert checked_link(url) is not None


@pytest.mark.parametrize(
    "source",
    ["**&#32;**", "_&#32;_", "~~&#32;~~", "` `", "[ ](https://a.example)", "# &#32;", "> &#32;",
     "```\n\n```", "```\n   \n```", "    \n    \n"],
)  # fmt: skip
def test_markdown_never_wraps_only_whitespace(source: str) -> None:
    html = markdown_to_html("x\n\n" + source + "\n\ny")
    assert re.search(r"<(b|i|s|code|pre|a|blockquote)\b", html) is None
    assert problems(html) == []


def test_markdown_character_references_are_cleaned() -> None:
    assert markdown_to_html("a&#x2028;b&#x202e;c&#0;d&#x1b;e") == "a⟦?⟧b⟦?⟧c\ufffdd\ufffde"
    assert markdown_to_html("```\na&#x202e;b\n```") == "<pre>a&amp;#x202e;b</pre>"


def test_email_is_the_bare_address(renderer: Renderer) -> None:
    html = rendered_block(renderer, Block("key_value", "To", "a@b.example", "email"))
    assert html == "<b>To:</b> a@b.example"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "✅ yes"), (False, "❌ no"), ("yes", "✅ yes"), ("maybe", "maybe")],
)
def test_boolean_is_a_clear_yes_or_no(renderer: Renderer, value: object, shown: str) -> None:
    assert rendered_block(renderer, Block("field", "Canary", value, "boolean")) == (
        "<b>Canary:</b> " + shown
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("2025-11-29T22:00:00+01:00", "Sat 29 Nov 2025, 22:00 (UTC+01:00)"),
        ("2025-11-29T22:00:30Z", "Sat 29 Nov 2025, 22:00:30 (UTC)"),
        ("2025-11-29T22:00:00-05:30", "Sat 29 Nov 2025, 22:00 (UTC-05:30)"),
        ("2025-11-29T22:00:00", "Sat 29 Nov 2025, 22:00"),
        ("2025-12-01", "Mon 1 Dec 2025"),
        ("next tuesday", "next tuesday"),
        (1764410400, "1764410400"),
    ],
)
def test_datetime_is_readable_with_its_offset(
    renderer: Renderer, value: object, shown: str
) -> None:
    html = rendered_block(renderer, Block("field", "Window", value, "datetime"))
    assert html == "<b>Window:</b> " + shown


def test_number_is_shown_as_is(renderer: Renderer) -> None:
    assert rendered_block(renderer, Block("field", "N", 2.5, "number")) == "<b>N:</b> 2.5"


@pytest.mark.parametrize(("block_type", "value_type"), [("carousel", "string"), ("field", "x")])
def test_unknown_type_or_value_type_degrades_to_a_plain_row(
    renderer: Renderer, block_type: str, value_type: str
) -> None:
    html = rendered_block(renderer, Block(block_type, "Future", "<v>", value_type))
    assert html == "<b>Future:</b> &lt;v&gt;"


def test_no_blocks_shows_summary_and_raw_arguments(renderer: Renderer) -> None:
    item = Approval("apr_x", "t", "Run it", (), {"flag": True})
    html = card(renderer, item).html
    assert html.endswith(
        '<b>Arguments</b>\n<pre><code class="language-json">{\n  &quot;flag&quot;: true\n}'
        "</code></pre>"
    )
    bare = card(renderer, Approval("apr_y", "t", "Run it", (), None)).html
    assert "Arguments" not in bare


def test_lone_surrogates_and_control_characters_are_replaced(renderer: Renderer) -> None:
    html = rendered_block(renderer, Block("key_value", "K\ud800", "a\udfffb\x00c\r\nd", "string"))
    assert html == "<b>K\ufffd:</b> a\ufffdb\ufffdc\nd"


def test_empty_values_say_so(renderer: Renderer) -> None:
    assert rendered_block(renderer, Block("field", "Path", "  ", "path")) == (
        "<b>Path:</b> <i>(empty)</i>"
    )


# --- secrets --------------------------------------------------------------------------


def secret_approval() -> Approval:
    return Approval(
        id="apr_s",
        tool="deploy",
        summary="Deploy with " + API_KEY,
        blocks=(
            Block("key_value", "API key", API_KEY, "secret"),
            Block("block", "Notes", "the key " + API_KEY + " is old", "text"),
            Block("block", "Payload", {"key": API_KEY, "n": 1}, "json"),
            Block("key_value", "Pin", "123", "secret"),
        ),
        arguments={"api_key": API_KEY},
    )


def test_masked_secret_never_appears(renderer: Renderer) -> None:
    rendered = card(renderer, secret_approval(), "masked")
    assert API_KEY not in rendered.html
    assert "<b>API key:</b> •••••• (24 chars)" in rendered.html
    assert "Deploy with ••••••" in rendered.plain
    assert "<b>Pin:</b> •••••• (3 chars)" in rendered.html


def test_spoiler_secret_shows_only_in_its_own_spoiler(renderer: Renderer) -> None:
    rendered = card(renderer, secret_approval(), "spoiler")
    assert rendered.html.count(API_KEY) == 1
    assert "<b>API key:</b> <tg-spoiler>" + API_KEY + "</tg-spoiler>" in rendered.html
    assert "Deploy with ••••••" in rendered.plain
    assert "the key •••••• is old" in rendered.plain
    assert "&quot;key&quot;: &quot;••••••&quot;" in rendered.html


def test_secret_is_masked_in_raw_arguments_and_attachments(renderer: Renderer) -> None:
    item = replace(
        secret_approval(),
        blocks=(
            Block("key_value", "API key", API_KEY, "secret"),
            Block("block", "Log", ("line " + API_KEY + "\n") * 5000, "text"),
        ),
    )
    modes: tuple[SecretsMode, ...] = ("masked", "spoiler")
    for secrets in modes:
        rendered = card(renderer, item, secrets)
        assert rendered.attachment is not None
        content = rendered.attachment.content.decode()
        assert API_KEY not in content and "line ••••••" in content


def test_plain_text_fallback_keeps_a_spoilered_secret_masked(renderer: Renderer) -> None:
    rendered = card(renderer, secret_approval(), "spoiler")
    assert API_KEY in rendered.html
    assert API_KEY not in rendered.plain
    assert "API key: ••••••" in rendered.plain


def test_attachment_name_is_built_from_masked_text(renderer: Renderer) -> None:
    item = Approval(
        id="apr_" + API_KEY,
        tool="deploy_" + API_KEY,
        summary="Deploy",
        blocks=(
            Block("key_value", "API key", API_KEY, "secret"),
            Block("block", "Log", "line\n" * 5000, "text"),
        ),
        arguments=None,
    )
    modes: tuple[SecretsMode, ...] = ("masked", "spoiler")
    for secrets in modes:
        rendered = card(renderer, item, secrets)
        assert rendered.attachment is not None
        assert API_KEY not in rendered.attachment.filename
        assert "51H8" not in rendered.attachment.filename


@pytest.mark.parametrize(
    "value",
    [
        {"user": "deploy-bot", "password": "hunter2-correct-horse"},
        ["deploy-bot", {"password": "hunter2-correct-horse"}],
    ],
)
def test_secret_object_or_list_masks_every_string_leaf(renderer: Renderer, value: object) -> None:
    item = Approval(
        id="apr_o",
        tool="login",
        summary="Log in as deploy-bot with hunter2-correct-horse",
        blocks=(
            Block("key_value", "Credentials", value, "secret"),
            Block("block", "Notes", "password hunter2-correct-horse, user deploy-bot", "text"),
        ),
        arguments={"password": "hunter2-correct-horse", "user": "deploy-bot"},
    )
    masked = card(renderer, item, "masked")
    assert "hunter2" not in masked.html and "deploy-bot" not in masked.html
    spoilered = card(renderer, item, "spoiler")
    outside = SPOILER.sub("", spoilered.html)
    assert "hunter2" not in outside and "deploy-bot" not in outside
    assert "hunter2" not in spoilered.plain


STRIPE_KEY = "sk_live_abc123"


def with_secret(*blocks: Block, secret: str = STRIPE_KEY) -> Approval:
    return Approval(
        "apr_m", "pay", "Pay", (Block("key_value", "Key", secret, "secret"), *blocks), None
    )


def visible(rendered: RenderedCard) -> str:
    return parse_html(rendered.html)[0]


@pytest.mark.parametrize(
    "body",
    [
        r"key sk\_live\_abc123 here",
        "key sk&#95;live&#95;abc123 here",
        "key &#115;k_live_abc&#x31;23 here",
        "key sk_li**ve**_abc123 here",
        "key sk_live_*abc123* here",
        r"[sk\_live\_abc123](https://docs.example/keys)",
        "![sk&#95;live&#95;abc123](https://docs.example/i.png)",
        "- a\n- sk\\_live\\_abc123",
    ],
)
def test_markdown_cannot_spell_out_a_secret(renderer: Renderer, body: str) -> None:
    item = with_secret(Block("block", "Notes", body, "markdown"))
    masked = card(renderer, item, "masked")
    assert STRIPE_KEY not in visible(masked)
    assert "••••••" in visible(masked).split("Notes", 1)[1]
    spoiler = card(renderer, item, "spoiler")
    assert visible(spoiler).count(STRIPE_KEY) == 1  # in its own spoiler only


def test_markdown_link_to_a_secret_is_shown_as_text(renderer: Renderer) -> None:
    body = "see [the docs](https://docs.example/k/sk%5Flive%5Fabc123) now"
    html = rendered_block(renderer, Block("block", "Notes", body, "markdown"))
    assert "<a" in html  # without the secret, the link stays
    item = with_secret(Block("block", "Notes", body, "markdown"))
    rendered = card(renderer, item)
    assert "<a" not in rendered.html and "abc123" not in rendered.html
    assert "see the docs now" in rendered.plain


def test_markdown_secret_is_masked_in_the_attachment_too(renderer: Renderer) -> None:
    body = "line sk\\_live\\_abc123 end\n\n" * 2000
    rendered = card(renderer, with_secret(Block("block", "Notes", body, "markdown")))
    assert rendered.attachment is not None
    content = rendered.attachment.content.decode()
    assert STRIPE_KEY not in content and "sk\\_live\\_abc123" not in content
    assert "line •••••• end" in content


def test_markdown_to_html_masks_decoded_tokens() -> None:
    mask = Masker([STRIPE_KEY])
    assert markdown_to_html(r"a sk\_live\_abc123 b", mask=mask) == "a •••••• b"
    assert markdown_to_html("`sk&#95;live&#95;abc123`", mask=mask) == (
        "<code>sk&amp;#95;live&amp;#95;abc123</code>"  # code spans decode nothing
    )
    assert markdown_to_html("sk_li**ve**_abc123 x", mask=mask) == "•••••• x"
    assert markdown_to_html("```sk_live_abc123\ncode\n```", mask=mask) == "<pre>code</pre>"
    assert markdown_to_html(r"[sk\_live\_abc123](https://a.example)", mask=mask) == (
        '<a href="https://a.example">••••••</a>'
    )
    across = Masker(["abc1\ndef2"])  # a secret that reads across two paragraphs
    assert markdown_to_html("**abc1**\n\ndef2 x", mask=across) == "•••••• x"


def test_short_secrets_are_masked_where_they_stand_alone(renderer: Renderer) -> None:
    item = with_secret(
        Block("block", "Notes", "PIN 482, not 14820 or x482; (482)", "text"), secret="482"
    )
    notes = card(renderer, item).plain.split("Notes", 1)[1]
    assert notes == "\nPIN ••••••, not 14820 or x482; (••••••)"


def test_overlapping_secrets_leave_no_part_visible(renderer: Renderer) -> None:
    item = Approval(
        "apr_o",
        "t",
        "s",
        (
            Block("key_value", "A", "abcd1234", "secret"),
            Block("key_value", "B", "1234wxyz", "secret"),
            Block("block", "Notes", "x abcd1234wxyz y 1234wxyzabcd1234 z", "text"),
        ),
        None,
    )
    notes = card(renderer, item).plain.split("Notes", 1)[1]
    assert notes == "\nx •••••• y •••••• z"


def test_whitespace_secret_does_not_mangle_other_values(renderer: Renderer) -> None:
    item = with_secret(Block("block", "Payload", {"a": {"b": 1}}, "json"), secret="\t")
    assert '{\n  "a": {\n    "b": 1\n  }\n}' in card(renderer, item).plain


def test_many_secrets_and_blocks_still_render_every_block_to_the_file(renderer: Renderer) -> None:
    blocks = []
    for index in range(2000):
        secret = f"tok_{index:06d}_{'x' * 10}"
        blocks.append(Block("key_value", f"Key {index}", secret, "secret"))
        blocks.append(Block("key_value", f"Row {index}", f"uses {secret} here", "string"))
    rendered = card(renderer, Approval("apr_n", "t", "s", tuple(blocks), None), "masked")
    assert rendered.attachment is not None
    content = rendered.attachment.content.decode()
    assert "Row 1999:\nuses •••••• here" in content and "tok_" not in content
    assert "tok_" not in rendered.html


# --- Telegram's limits ----------------------------------------------------------------


def test_huge_diff_is_cut_at_line_boundaries_with_the_full_diff_attached(
    renderer: Renderer,
) -> None:
    diff = "\n".join(("+", "-", " ")[i % 3] + " line " + str(i) for i in range(50_000))
    item = one_block(Block("block", "Diff", diff, "diff"))
    rendered = card(renderer, item)
    shown = re.search(r'class="language-diff">(.*)</code></pre>', rendered.html, re.DOTALL)
    assert shown is not None and diff.startswith(shown.group(1) + "\n")
    more = re.search(r"… ([\d,]+) more lines", rendered.plain)
    assert more is not None
    assert int(more.group(1).replace(",", "")) + shown.group(1).count("\n") + 1 == 50_000
    assert rendered.plain.endswith("Full details are in the attached file.")
    assert rendered.attachment == Attachment("tool-apr_t.diff", diff.encode())


@pytest.mark.parametrize(
    "value_type", ["string", "text", "markdown", "code", "json", "url", "command", "datetime"]
)
def test_256_kib_values_fit_and_travel_as_a_file(renderer: Renderer, value_type: str) -> None:
    value = ("word <&> @user #tag a.example " * 9000)[: 256 * 1024]
    blocks = tuple(Block(t, "L", value, value_type) for t in ("key_value", "block"))
    item = Approval("apr_big", "tool", "Big", blocks, None)
    modes: tuple[SecretsMode, ...] = ("masked", "spoiler")
    for secrets in modes:
        rendered = card(renderer, item, secrets)
        assert rendered.attachment is not None
        assert rendered.attachment.filename == "tool-apr_big.txt"
        assert rendered.attachment.content.count(b"word") == 2 * value.count("word")
        assert "more character" in rendered.plain


def test_room_is_shared_fairly_between_blocks(renderer: Renderer) -> None:
    blocks = (
        Block("block", "A", "a\n" * 3000, "code"),
        Block("block", "B", "b\n" * 3000, "code"),
        Block("key_value", "C", "short", "string"),
    )
    rendered = card(renderer, Approval("apr_f", "t", "s", blocks, None))
    assert "<b>C:</b> short" in rendered.html
    a_lines, b_lines = rendered.plain.count("a\n"), rendered.plain.count("b\n")
    assert a_lines > 500 and abs(a_lines - b_lines) <= 1


def test_too_many_blocks_leave_the_rest_to_the_attachment(renderer: Renderer) -> None:
    blocks = tuple(Block("key_value", "Key " + str(i), "v" + str(i), "string") for i in range(400))
    rendered = card(renderer, Approval("apr_m", "t", "s", blocks, None))
    more = re.search(r"… (\d+) more fields in the attached file", rendered.plain)
    assert more is not None
    shown = rendered.plain.count("Key ")
    assert shown + int(more.group(1)) == 400
    assert rendered.attachment is not None
    assert rendered.attachment.content.decode().count("Key ") == int(more.group(1))


def test_long_summary_is_shortened_and_attached_whole(renderer: Renderer) -> None:
    summary = "Deploy " + "very " * 2000 + "late"
    rendered = card(renderer, one_block(Block("key_value", "K", "v", "string"), summary=summary))
    assert "very very…\n" in rendered.plain
    assert rendered.attachment is not None
    assert rendered.attachment.content.decode().startswith(summary + "\n")


def test_entity_budget_counts_links_telegram_finds(renderer: Renderer) -> None:
    value = " ".join("@user" + str(i) + " #t" + str(i) for i in range(3000))
    rendered = card(renderer, one_block(Block("block", "Mentions", value, "text")))
    assert rendered.attachment is not None


# --- questions ------------------------------------------------------------------------


def test_question_without_options_invites_a_typed_reply(renderer: Renderer) -> None:
    item = Clarification("clr_1", "What should the <title> be?")
    rendered = renderer.question_card(item, agent_name="build-bot", now=NOW)
    assert_sendable(rendered)
    assert rendered.html == (
        "❓ <b>build-bot</b> asks:\n<b>What should the &lt;title&gt; be?</b>\n\n"
        "✍️ Reply to this message to answer."
    )


def test_question_with_many_long_options_fits(renderer: Renderer) -> None:
    options = tuple("option " + str(i) + " " + "x" * 300 for i in range(200))
    item = Clarification("clr_2", "Pick one\n" * 100, options, expires_at=NOW + timedelta(hours=1))
    rendered = renderer.question_card(item, agent_name="build-bot", now=NOW)
    assert_sendable(rendered)
    assert "more options" in rendered.plain
    assert rendered.attachment is not None
    assert rendered.attachment.filename == "question-clr_2.txt"


def test_expired_question_says_no_answer_was_sent(renderer: Renderer, inbox: InboxUpdate) -> None:
    rendered = renderer.question_card(
        inbox.clarifications[0], agent_name="b", now=NOW, status=CardStatus("expired")
    )
    assert rendered.plain.endswith("⌛ Expired · no answer was sent")
    assert "Reply" not in rendered.plain


# --- templates ------------------------------------------------------------------------


def test_operator_templates_override_built_in_ones(tmp_path: Path, inbox: InboxUpdate) -> None:
    (tmp_path / "messages").mkdir()
    (tmp_path / "messages" / "hello.html.j2").write_text("Hi <b>{{ name }}</b> & {{ n }}\n")
    (tmp_path / "macros.html.j2").write_text(
        (Path(__file__).parent.parent / "templates" / "macros.html.j2")
        .read_text()
        .replace("<b>{{ v.label }}:</b>", "<u>{{ v.label }}</u>:")
    )
    renderer = Renderer(tmp_path)
    assert renderer.message("hello", name="<Ada>", n=3) == "Hi <b>&lt;Ada&gt;</b> & 3"
    rendered = card(renderer, approval(inbox, "apr_email_1"))
    assert "<u>Email-To</u>: to@mail.com" in rendered.html


def test_text_messages_are_plain_and_alert_sized(tmp_path: Path) -> None:
    (tmp_path / "messages").mkdir()
    (tmp_path / "messages" / "alert.txt.j2").write_text("{{ who }} & <co> {{ 'x' * n }}\n")
    renderer = Renderer(tmp_path)
    assert renderer.text("alert", who="Ada", n=3) == "Ada & <co> xxx"
    long = renderer.text("alert", who="Ada", n=500)
    assert len(long) == 200 and long.endswith("…")
    with pytest.raises(RenderError):
        renderer.text("missing")


def test_built_in_messages_compile_with_the_card_environment() -> None:
    environment = build_environment()
    folder = Path(__file__).parent.parent / "templates" / "messages"
    names = sorted(path.name for path in folder.glob("*.j2"))
    assert len(names) >= 20, names
    for name in names:
        environment.get_template("messages/" + name)


def test_the_package_ships_the_top_level_templates() -> None:
    top = Path(__file__).parent.parent / "templates"
    shipped = builtin_template_dir()
    assert shipped.is_dir()
    expected = sorted(p.relative_to(top).as_posix() for p in top.rglob("*.j2"))
    assert expected and sorted(
        p.relative_to(shipped).as_posix() for p in shipped.rglob("*.j2")) == expected


def test_message_errors_are_render_errors(tmp_path: Path) -> None:
    (tmp_path / "messages").mkdir()
    (tmp_path / "messages" / "long.html.j2").write_text("{{ 'x' * 5000 }}")
    (tmp_path / "messages" / "undefined.html.j2").write_text("{{ nope }}")
    (tmp_path / "messages" / "broken.html.j2").write_text("{% if %}")
    renderer = Renderer(tmp_path)
    for name in ("long", "undefined", "broken", "missing", "../approval"):
        with pytest.raises(RenderError):
            renderer.message(name)


def test_card_falls_back_to_header_and_summary_when_details_never_fit(tmp_path: Path) -> None:
    built_in = (Path(__file__).parent.parent / "templates" / "approval.html.j2").read_text()
    (tmp_path / "approval.html.j2").write_text(
        built_in.replace("{{ m.render_block(v) }}", "{{ m.render_block(v) }} {{ 'y' * 5000 }}")
    )
    item = one_block(Block("block", "Diff", "+a\n-b", "diff"))
    rendered = card(Renderer(tmp_path), item)
    assert "yyy" not in rendered.html and "+a" not in rendered.html
    assert "… 1 more field in the attached file" in rendered.plain
    assert rendered.attachment == Attachment("tool-apr_t.diff", b"+a\n-b")


def test_card_that_cannot_fit_at_all_is_a_render_error(tmp_path: Path) -> None:
    (tmp_path / "approval.html.j2").write_text("{{ 'z' * 5000 }}")
    with pytest.raises(RenderError, match="does not fit"):
        Renderer(tmp_path).approval_card(
            one_block(Block("key_value", "K", "v", "string")),
            agent_name="a",
            secrets="masked",
            now=NOW,
        )


def test_missing_template_folder_is_a_render_error(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="does not exist"):
        Renderer(tmp_path / "nope")


# --- the render command ---------------------------------------------------------------


def write_json(path: Path, value: object) -> str:
    path.write_text(json.dumps(value), "utf-8")
    return str(path)


def test_render_command_prints_every_card_of_a_payload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write_json(tmp_path / "payload.json", vector_payload())
    assert main(["render", file]) == 0
    out = capsys.readouterr().out
    for item_id in [*APPROVAL_IDS, "clr_env_1"]:
        assert item_id + " ===" in out
    assert "<tg-spoiler>" + API_KEY + "</tg-spoiler>" in out


def test_render_command_masks_secrets_for_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write_json(tmp_path / "body.json", vector_payload()["body"])
    assert main(["render", file, "--chat-type", "group"]) == 0
    out = capsys.readouterr().out
    assert API_KEY not in out and "•••••• (24 chars)" in out


def test_render_command_takes_single_items_and_notes_attachments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = vector_payload()["body"]
    assert isinstance(body, dict)
    big = dict(body["approvals"][1])
    big["blocks"] = [
        {"type": "block", "label": "Diff", "value": "+x\n" * 5000, "value_type": "diff"}
    ]
    assert main(["render", write_json(tmp_path / "a.json", big)]) == 0
    out = capsys.readouterr().out
    assert "=== approval apr_write_2 ===" in out
    assert "--- attachment: write_file-apr_write_2.diff (15,000 bytes)" in out
    question = write_json(tmp_path / "q.json", body["clarifications"][0])
    assert main(["render", question]) == 0
    assert "Which environment should I deploy to?" in capsys.readouterr().out


def test_render_command_uses_operator_templates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "question.html.j2").write_text("Q: {{ blocks[0].text }}")
    file = write_json(tmp_path / "q.json", {"id": "c", "question": "Why?"})
    assert main(["render", file, "--templates", str(templates)]) == 0
    assert "Q: Why?" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"x": 1}', "not an approval"),
        ('{"kind": "notification", "v": 1, "body": {}}', ""),
        ('{"tool": "t"}', "id"),
    ],
)
def test_render_command_rejects_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, error: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, "utf-8")
    assert main(["render", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("skald-telegram: ")
    assert error in err


def test_render_command_reports_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", str(tmp_path / "none.json")]) == 1
    assert "cannot read" in capsys.readouterr().err


EXAMPLES = Path(__file__).parent.parent / "docs" / "examples"


@pytest.mark.parametrize("name", ["approval-diff", "question", "approval-secret"])
def test_render_command_renders_each_shipped_example(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", str(EXAMPLES / f"{name}.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("=== ") and "error" not in out.lower()
    if name == "approval-diff":
        assert "-DEBUG = True" in out and "+DEBUG = False" in out
    elif name == "approval-secret":
        assert "<tg-spoiler>sk-example-0123456789</tg-spoiler>" in out
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    assert f"docs/examples/{name}.json" in "".join(capsys.readouterr().out.split())
