"""Host names that could pass for others are shown as ``xn--`` with a warning, in url
blocks, links and text Telegram would turn into links; names that read as what they are
stay in Unicode. Checked through the real renderer and Telegram's parser (TDLib)."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tdlib_oracle import telegram_detect, telegram_parse
from test_render import assert_golden

from bot.protocol.payloads import Approval, Block, Clarification
from bot.render import Renderer
from bot.render.hosts import ascii_label, deceptive_label, honest_hosts

NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)
RENDERER = Renderer()
WARNING = "⚠️ a web address is shown in its xn-- form: its name mixes scripts or imitates another"

DECEPTIVE = [
    "аpple.com",  # one Cyrillic letter among Latin ones
    "аррӏе.com",  # all Cyrillic, every letter a Latin lookalike
    "ѕсоре.net",
    "рayрal.com",
    "gооgle.com",  # Cyrillic o's
    "αpple.com",  # Greek alpha
    "οκ.com",  # all Greek lookalikes
    "օսօ.com",  # Armenian lookalikes
    "ꮳꮃꭼ.com",  # Cherokee
    "ıntel.com",  # dotless i
    "ɡithub.com",  # script g
    "ᴍicrosoft.com",  # small capital
    "gi\u0307thub.com",  # combining dot on a Latin letter
    "faß.de",  # deviation: ß
    "google一.com",  # Han one passing for a dash
    "amazonー.com",  # prolonged sound mark
    "ex٣.com",  # Arabic-Indic digit among Latin letters
    "a1٣.com",
    "bank⁄login.com",  # fraction slash
    "apple\u2215com.evil.com",  # division slash
    "www.аpple.com",
    "login.microsoft.соm",  # Cyrillic in the top-level domain
]
SAFE = [
    "apple.com", "bücher.de", "münchen.de", "tésla.com", "пример.рф", "сайт.com",
    "рос.ru", "例え.jp", "日本語.jp", "한국.kr", "مثال.com", "xn--pple-43d.com",
    "ｇｏｏｇｌｅ.com", "ελληνικά.gr", "οκ.gr", "россия.рф", "中国.cn",
]


@pytest.mark.parametrize("host", DECEPTIVE)
def test_deceptive_host_is_shown_as_xn(host: str) -> None:
    shown, found = honest_hosts("https://" + host + "/login")
    assert found
    shown_host = urlsplit(shown).hostname or ""
    assert shown_host.isascii() and "xn--" in shown_host, shown


@pytest.mark.parametrize("host", SAFE)
def test_host_that_reads_as_it_is_stays(host: str) -> None:
    assert honest_hosts("see https://" + host + "/a and " + host) == (
        "see https://" + host + "/a and " + host, False)


@pytest.mark.parametrize("label", ["аpple", "bücher", "пример", "例え", "рayрal", "ελληνικά"])
def test_xn_form_is_the_idna_one(label: str) -> None:
    assert ascii_label(label) == label.encode("idna").decode("ascii")


def test_deviation_label_uses_the_nontransitional_form() -> None:
    assert ascii_label("faß") == "xn--fa-hia"  # not "fass", where older resolvers go
    assert deceptive_label("faß", "de")


def test_only_the_deceptive_labels_change() -> None:
    shown, _ = honest_hosts("mail.аpple.com:8080/x?q=bücher.de")
    assert shown == "mail.xn--pple-43d.com:8080/x?q=bücher.de"


def card_for(block: Block, summary: str = "Open it") -> tuple[str, str]:
    item = Approval("apr_u", "fetch", summary, (block,), None)
    rendered = RENDERER.approval_card(item, agent_name="bot", secrets="spoiler", now=NOW)
    return rendered.html, telegram_parse(rendered.html)[0]


def links_in(html: str) -> list[str]:
    """Every address Telegram would open from the card: text links and links it finds."""
    text, entities = telegram_parse(html)
    found = [e.url or "" for e in entities if e.type == "text_link"]
    units = text.encode("utf-16-le")
    for entity in telegram_detect(text):
        if entity.type == "url":
            found.append(units[entity.offset * 2:(entity.offset + entity.length) * 2]
                         .decode("utf-16-le"))
    return found


@pytest.mark.parametrize("host", DECEPTIVE)
@pytest.mark.parametrize("kind", ["url", "text", "string", "markdown", "command", "json"])
def test_cards_never_show_or_link_a_deceptive_host(host: str, kind: str) -> None:
    url = "https://" + host + "/login"
    value = {"markdown": f"[{url}]({url}) and <{url}>", "json": {"u": url}}.get(kind, url)
    html, shown = card_for(Block("block", "Address", value, kind))
    assert host not in shown
    assert WARNING in shown
    for link in links_in(html):
        assert (urlsplit(link if "://" in link else "http://" + link).hostname or "").isascii()


def test_url_block_links_to_the_xn_form() -> None:
    html, _ = card_for(Block("key_value", "URL", "https://аpple.com/login", "url"))
    assert '<a href="https://xn--pple-43d.com/login">https://xn--pple-43d.com/login</a>' in html
    assert set(links_in(html)) == {"https://xn--pple-43d.com/login"}


def test_a_safe_idn_keeps_its_link_and_no_warning() -> None:
    html, shown = card_for(Block("key_value", "URL", "https://bücher.de/x", "url"))
    assert '<a href="https://bücher.de/x">https://bücher.de/x</a>' in html
    assert "⚠️" not in shown


def test_title_question_options_and_messages_show_the_xn_form() -> None:
    _, shown = card_for(Block("key_value", "K", "v", "string"),
                        summary="fetch https://аpple.com/x")
    assert "fetch https://xn--pple-43d.com/x" in shown and WARNING in shown
    item = Clarification("clr_u", "Use аpple.com?", ("yes, gооgle.com", "no"))
    rendered = RENDERER.question_card(item, agent_name="bot", now=NOW)
    text, _ = telegram_parse(rendered.html)
    assert "xn--pple-43d.com" in text and "xn--ggle-55da.com" in text and WARNING in text
    html = RENDERER.message("activity", lines=[{"summary": "curl https://аpple.com",
                                                "tool": "Bash", "by": "Ada", "agent": "b"}],
                            earlier=0, grants=[], agents=["b"])
    assert "аpple" not in html and "xn--pple-43d.com" in html


LATIN = "aceopxy"
CYRILLIC = "асеорху"


@settings(max_examples=200, deadline=None)
@given(
    letters=st.lists(st.sampled_from(LATIN + CYRILLIC + "-1"), min_size=1, max_size=12),
    tld=st.sampled_from(["com", "org", "ru", "рф"]),
)
def test_a_name_mixing_latin_and_cyrillic_never_shows_in_unicode(
    letters: list[str], tld: str
) -> None:
    label = "".join(letters).strip("-") or "a"
    host = label + "." + tld
    shown, found = honest_hosts("https://" + host + "/")
    mixed = any(c in LATIN for c in label) and any(c in CYRILLIC for c in label)
    if mixed:
        assert found and label not in shown
    if any(c in CYRILLIC for c in label) and tld in ("com", "org"):
        assert found  # all-Cyrillic lookalikes under a Latin domain: xn-- as well
    html, _ = card_for(Block("key_value", "URL", "https://" + host + "/", "url"))
    for link in links_in(html):
        link_host = urlsplit(link).hostname or ""
        assert link_host.isascii() or not deceptive_label(link_host.split(".")[0], None)


def test_look_alike_card_matches_its_golden_file() -> None:
    item = Approval(
        "apr_idn_7", "fetch", "fetch https://аpple.com/login",
        (Block("key_value", "URL", "https://аpple.com/login", "url"),
         Block("key_value", "Mirror", "https://bücher.de/x", "url"),
         Block("block", "Notes", "Sign in at [аpple.com](https://аpple.com) or <https://gооgle.com>",
               "markdown")),
        None)
    rendered = RENDERER.approval_card(item, agent_name="build-bot", secrets="spoiler", now=NOW)
    assert_golden("apr_idn_7.html", rendered.html)
