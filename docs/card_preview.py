"""Regenerate the README picture of an approval card (docs/card.png).

The card is the renderer's real output: a sample ``deploy`` approval goes through the same
code the bot runs (:func:`bot.core.status.card_status`,
:func:`bot.core.status.render_card`, :func:`bot.tg.keyboards.keyboard`). Its Telegram HTML
is turned into a page styled like a Telegram chat on a phone, which headless Chromium
screenshots::

    python docs/card_preview.py                                   # docs/card.png
    python docs/card_preview.py --chat-type group --out docs/card-group.png

Chromium is not a dependency of the project; on Debian, ``apt-get install chromium
fonts-noto-color-emoji`` provides it and the emoji font.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Literal

from bot.core.model import CardRow, ItemRow, Vote
from bot.core.status import card_status, render_card
from bot.errors import RenderError
from bot.protocol.payloads import parse_approval
from bot.render import Renderer
from bot.tg.keyboards import Keyboard, keyboard

ChatType = Literal["private", "group"]

REPO = Path(__file__).resolve().parent.parent
VECTORS = REPO / "tests" / "data" / "vectors.json"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WIDTH = 460
POSTED = datetime(2025, 11, 29, 10, 12, tzinfo=UTC)
NOW = POSTED + timedelta(minutes=3)
BOT_NAME = "Skald"
GROUP_TITLE = "Ops team"
AGENT_NAME = "build-bot"


def sample_approval() -> dict[str, object]:
    """A realistic deploy request that shows most value types on one card."""
    return {
        "id": "apr_deploy_142",
        "tool": "deploy",
        "summary": "Deploy web 1.4.2 to production",
        "created_at": _rfc3339(POSTED),
        "expires_at": _rfc3339(POSTED + timedelta(minutes=33)),
        "blocks": {
            "v": 1,
            "summary": "Deploy web 1.4.2 to production",
            "blocks": [
                {"type": "key_value", "key": "Service", "value": "web (eu-west-1)",
                 "value_type": "string"},
                {"type": "block", "label": "Plan", "value_type": "markdown",
                 "value": "Roll out **web 1.4.2** to 10% of pods first, then the rest. "
                          "See the [release notes](https://github.com/acme/web/releases)."},
                {"type": "block", "label": "Change", "value_type": "diff",
                 "value": "--- a/deploy/web.yaml\n+++ b/deploy/web.yaml\n@@ -12,3 +12,3 @@\n"
                          "-  image: web:1.4.1\n+  image: web:1.4.2\n   replicas: 3"},
                {"type": "field", "label": "Command", "value_type": "command",
                 "value": "kubectl -n prod rollout restart deploy/web"},
                {"type": "key_value", "key": "Manifest", "value": "/srv/deploy/web.yaml",
                 "value_type": "path"},
                {"type": "block", "label": "Payload", "value_type": "json",
                 "value": {"replicas": 3, "image": "web:1.4.2", "canary": "10%"}},
                {"type": "field", "label": "Canary", "value": True, "value_type": "boolean"},
                {"type": "field", "label": "Window", "value": "2025-11-29T22:00:00+01:00",
                 "value_type": "datetime"},
                {"type": "key_value", "key": "Dashboard", "value_type": "url",
                 "value": "https://grafana.example.com/d/web"},
                {"type": "key_value", "key": "Owner", "value": "ops@example.com",
                 "value_type": "email"},
                {"type": "key_value", "key": "API key", "value": "sk-live-51H8xQ2eZvKYlo2C",
                 "value_type": "secret"},
            ],
        },
    }


def vector_approval() -> dict[str, object]:
    """The test vectors' deploy approval with every value type (``apr_all_3``)."""
    vectors = json.loads(VECTORS.read_text(encoding="utf-8"))
    for approval in vectors["open"][0]["payload"]["body"]["approvals"]:
        if approval["id"] == "apr_all_3":
            return dict(approval)
    raise RenderError(f"apr_all_3 not found in {VECTORS}")


@dataclass(frozen=True)
class Preview:
    """What the screenshot shows: the card's Telegram HTML, its keyboard and the chat."""

    card_html: str
    keyboard: Keyboard
    chat_type: ChatType
    edited_at: datetime | None


def build_preview(body: dict[str, object], chat_type: ChatType) -> Preview:
    """Render ``body`` as the bot would post it in a private chat, or in a group that needs
    two approvers where one has approved already."""
    approval = parse_approval(body)
    created = _ms(approval.created_at or POSTED)
    item = ItemRow(
        agent_id="agt_build", item_id=approval.id, kind="approval", body_json=json.dumps(body),
        state="open", outcome_by=None, outcome_at=None, outcome_chat_id=None,
        outcome_reason=None, expires_at=_ms(approval.expires_at) if approval.expires_at else None,
        remind_at=None, created_at=created,
    )
    chat_id = -1001234567890 if chat_type == "group" else 4242
    card = CardRow(
        card_id=1, agent_id=item.agent_id, item_id=item.item_id, chat_id=chat_id,
        topic_id=None, token="q7Rk2xVd9LmW", message_id=17, dirty=0, attachment_sent=False,
        reminder="none", posted_at=created,
    )
    required = 2 if chat_type == "group" else 1
    voted = NOW - timedelta(minutes=1)
    votes = [Vote(7, "Alice", _ms(voted))] if chat_type == "group" else []
    status = card_status(item, card, votes=votes, required=required, chat_title=GROUP_TITLE,
                         outcome_private=chat_type == "private")
    rendered = render_card(
        Renderer(), item, status, agent_name=AGENT_NAME, secrets="spoiler", now=NOW
    )
    buttons = keyboard(item, card, votes=votes, required=required)
    return Preview(rendered.html, buttons, chat_type, edited_at=voted if votes else None)


# ----------------------------------------------------------------------------------------
# Telegram HTML → page HTML


INLINE_TAGS = {"b": "b", "strong": "b", "i": "i", "em": "i", "u": "u", "ins": "u",
               "s": "s", "strike": "s", "del": "s"}
"""Telegram's inline formatting tags and the page tag each becomes."""


class _TelegramToPage(HTMLParser):
    """Rewrites a card's Telegram HTML as page HTML; refuses any tag Telegram would refuse.

    Blocks (``pre``, ``blockquote``) absorb the line break on either side of them, as they do
    in Telegram's clients.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._out: list[str] = []
        self._closers: list[str] = []
        self._pre: list[str] | None = None
        self._language = ""
        self._after_block = False

    def convert(self, telegram_html: str) -> str:
        self.feed(telegram_html)
        self.close()
        if self._closers or self._pre is not None:
            raise RenderError("card HTML has unclosed tags")
        return "".join(self._out)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if self._pre is not None:
            if tag != "code":
                raise RenderError(f"<{tag}> inside <pre>")
            self._language = (attributes.get("class") or "").removeprefix("language-")
            return
        if tag in INLINE_TAGS:
            self._open(f"<{INLINE_TAGS[tag]}>", f"</{INLINE_TAGS[tag]}>")
        elif tag == "code":
            self._open('<code class="inline">', "</code>")
        elif tag == "a":
            href = html.escape(attributes.get("href") or "", quote=True)
            self._open(f'<a href="{href}">', "</a>")
        elif tag == "tg-spoiler" or (tag == "span" and attributes.get("class") == "tg-spoiler"):
            self._open('<span class="spoiler">', "</span>")
        elif tag == "blockquote":
            self._block_start()
            css = "quote expandable" if "expandable" in attributes else "quote"
            self._open(f'<blockquote class="{css}">', "</blockquote>")
        elif tag == "pre":
            self._block_start()
            self._pre, self._language = [], ""
        else:
            raise RenderError(f"Telegram does not allow <{tag}>")

    def handle_endtag(self, tag: str) -> None:
        if self._pre is not None:
            if tag == "pre":
                self._out.append(_pre_block("".join(self._pre), self._language))
                self._pre = None
                self._after_block = True
            return
        if not self._closers:
            raise RenderError(f"stray </{tag}>")
        closer = self._closers.pop()
        self._out.append(closer)
        self._after_block = closer == "</blockquote>"

    def handle_data(self, data: str) -> None:
        if self._pre is not None:
            self._pre.append(data)
            return
        if self._after_block:
            data = data.removeprefix("\n")
            self._after_block = False
        self._out.append(html.escape(data, quote=False))

    def _open(self, start: str, end: str) -> None:
        self._out.append(start)
        self._closers.append(end)
        self._after_block = False

    def _block_start(self) -> None:
        if self._out and self._out[-1].endswith("\n"):
            self._out[-1] = self._out[-1][:-1]


def _pre_block(code: str, language: str) -> str:
    lines = [_code_line(line, language) for line in code.split("\n")]
    label = f'<div class="lang">{html.escape(language)}</div>' if language else ""
    return f'<div class="pre">{label}<pre>{"<br>".join(lines)}</pre></div>'


def _code_line(line: str, language: str) -> str:
    text = html.escape(line, quote=False)
    if language != "diff" or line.startswith(("+++", "---")):
        return text
    for prefix, css in (("+", "add"), ("-", "del"), ("@@", "hunk")):
        if line.startswith(prefix):
            return f'<span class="{css}">{text}</span>'
    return text


def telegram_to_page(telegram_html: str) -> str:
    """The page HTML that shows ``telegram_html`` (Telegram's HTML parse mode) as a bubble."""
    return _TelegramToPage().convert(telegram_html)


# ----------------------------------------------------------------------------------------
# The page

STYLE = """
* { box-sizing: border-box; }
html, body { margin: 0; }
body {
  width: 460px; font-family: Roboto, "Liberation Sans", "DejaVu Sans", sans-serif,
  "Noto Color Emoji"; -webkit-font-smoothing: antialiased;
  background: linear-gradient(165deg, #dbe8c4 0%, #b9dab9 45%, #a7d0d3 100%);
}
.bar { display: flex; align-items: center; gap: 12px; height: 56px; padding: 0 14px;
  background: #517da2; color: #fff; }
.avatar { width: 38px; height: 38px; border-radius: 50%; flex: none; display: flex;
  align-items: center; justify-content: center; font-weight: 500; font-size: 17px;
  color: #fff; background: linear-gradient(#72d5fd, #2a9ef1); }
.bar .title { font-size: 17px; font-weight: 500; }
.bar .sub { font-size: 13.5px; color: #d5e5f3; margin-top: 1px; }
.chat { padding: 10px 10px 12px; }
.day { text-align: center; margin: 0 0 10px; }
.day span { display: inline-block; padding: 3px 10px; border-radius: 12px; font-size: 13px;
  font-weight: 500; color: #fff; background: rgba(40, 80, 60, .28); }
.column { width: 404px; }
.group .column { width: 420px; }
.row { display: flex; align-items: flex-end; gap: 6px; }
.row .avatar { width: 34px; height: 34px; font-size: 15px; }
.row .bubble { flex: 1; }
.group .keys { margin-left: 40px; }
.bubble { position: relative; background: #fff; border-radius: 14px 14px 14px 4px;
  padding: 7px 10px 7px 11px; font-size: 15px; line-height: 1.38; color: #000;
  white-space: pre-wrap; overflow-wrap: anywhere; box-shadow: 0 1px 1px rgba(0,0,0,.13); }
.bubble::before { content: ""; position: absolute; left: -8px; bottom: 0; width: 14px;
  height: 16px; background: #fff; clip-path: polygon(100% 0, 100% 100%, 0 100%);
  border-bottom-left-radius: 2px; }
.sender { display: block; color: #3a8fd6; font-weight: 500; font-size: 14.5px;
  margin-bottom: 1px; }
.meta { float: right; margin: 6px 0 -3px 12px; font-size: 12px; color: #9aa8b4;
  white-space: nowrap; }
a { color: #2481cc; text-decoration: none; }
code, pre { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; }
code.inline { font-size: 13.5px; color: #1b5f99; background: rgba(36, 129, 204, .08);
  padding: 1px 3px; border-radius: 4px; }
.pre { margin: 3px 0 2px; padding: 5px 9px 6px; border-left: 3px solid #2481cc;
  border-radius: 6px; background: rgba(36, 129, 204, .08); }
.pre .lang { font-size: 13px; font-weight: 700; color: #2481cc; margin-bottom: 2px; }
.pre pre { margin: 0; font-size: 13px; line-height: 1.4; white-space: pre-wrap;
  color: #1f2d3a; }
.add { color: #1d8a3a; }
.del { color: #c93b36; }
.hunk { color: #8a63b8; }
blockquote.quote { margin: 4px 0; padding: 3px 24px 3px 9px; border-left: 3px solid #2481cc;
  border-radius: 6px; background: rgba(36, 129, 204, .08); position: relative; }
blockquote.quote::after { content: "\\201D"; position: absolute; top: -2px; right: 7px;
  color: #2481cc; font-size: 22px; font-weight: 700; }
.spoiler { color: transparent; border-radius: 4px; padding: 0 2px;
  text-shadow: 0 0 7px rgba(60, 70, 80, .55);
  background-color: rgba(150, 160, 170, .18);
  background-image:
    radial-gradient(circle, rgba(60, 70, 80, .55) .7px, transparent 1.1px),
    radial-gradient(circle, rgba(60, 70, 80, .35) .6px, transparent 1px);
  background-size: 4px 4px, 5px 3px; background-position: 0 0, 2px 1px; }
.keys { margin-top: 4px; }
.keys .line { display: flex; gap: 4px; margin-top: 4px; }
.key { flex: 1; height: 40px; display: flex; align-items: center; justify-content: center;
  border-radius: 8px; color: #fff; font-size: 14.5px; font-weight: 500;
  background: rgba(45, 85, 70, .34); text-shadow: 0 1px 1px rgba(0,0,0,.12); }
.keys .line:last-child .key:first-child { border-bottom-left-radius: 14px; }
.keys .line:last-child .key:last-child { border-bottom-right-radius: 14px; }
.key.success { background: #3fa45b; }
.key.danger { background: #e0534a; }
.key.primary { background: #3a8fd6; }
"""

MEASURE_SCRIPT = """
<script>
window.addEventListener("load", () => {
  const height = Math.ceil(document.body.getBoundingClientRect().height);
  document.body.setAttribute("data-height", String(height));
});
</script>
"""


def page(preview: Preview) -> str:
    """A complete HTML page: a chat header, then the card as an incoming message with its
    inline keyboard."""
    group = preview.chat_type == "group"
    title, subtitle = (GROUP_TITLE, "5 members") if group else (BOT_NAME, "bot")
    edited = preview.edited_at
    meta = "edited " + edited.strftime("%H:%M") if edited else POSTED.strftime("%H:%M")
    sender = f'<span class="sender">{html.escape(BOT_NAME)}</span>' if group else ""
    bubble = (
        f'<div class="bubble">{sender}{telegram_to_page(preview.card_html)}'
        f'<span class="meta">{meta}</span></div>'
    )
    keys = _keyboard_html(preview.keyboard)
    avatar = f'<div class="avatar">{BOT_NAME[0]}</div>' if group else ""
    day = POSTED.strftime("%-d %B")
    return (
        '<!doctype html><html><head><meta charset="utf-8">'
        f"<style>{STYLE}</style></head>"
        f'<body class="{preview.chat_type}">'
        f'<div class="bar"><div class="avatar">{html.escape(title[0])}</div>'
        f'<div><div class="title">{html.escape(title)}</div>'
        f'<div class="sub">{subtitle}</div></div></div>'
        f'<div class="chat"><div class="day"><span>{day}</span></div>'
        f'<div class="column"><div class="row">{avatar}{bubble}</div>{keys}</div></div>'
        f"{MEASURE_SCRIPT}</body></html>"
    )


def _keyboard_html(rows: Keyboard) -> str:
    lines = []
    for row in rows:
        keys = "".join(
            f'<div class="key {button.style or ""}">{html.escape(button.label)}</div>'
            for button in row
        )
        lines.append(f'<div class="line">{keys}</div>')
    return f'<div class="keys">{"".join(lines)}</div>' if lines else ""


# ----------------------------------------------------------------------------------------
# Screenshot


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _chromium(browser: str, profile: Path, *args: str) -> str:
    command = [
        browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
        "--no-first-run", "--virtual-time-budget=3000", f"--user-data-dir={profile}", *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RenderError(f"{browser} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def page_height(browser: str, profile: Path, url: str) -> int:
    """The height the page lays out to at :data:`WIDTH` pixels, as Chromium measures it."""
    dom = _chromium(browser, profile, f"--window-size={WIDTH},2000", "--dump-dom", url)
    match = re.search(r'data-height="(\d+)"', dom)
    if match is None:
        raise RenderError("could not measure the page height")
    return int(match.group(1))


def screenshot(browser: str, page_html: str, out: Path) -> int:
    """Write ``page_html`` as a PNG at ``out`` cropped to its content; return its height."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source = work / "card.html"
        source.write_text(page_html, encoding="utf-8")
        profile = work / "profile"
        height = page_height(browser, profile, source.as_uri())
        _chromium(
            browser, profile, f"--window-size={WIDTH},{height}",
            f"--screenshot={out.resolve()}", source.as_uri(),
        )
    return height


# ----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "card.png")
    parser.add_argument("--chat-type", choices=("private", "group"), default="private")
    parser.add_argument("--vectors", action="store_true",
                        help="show the test vectors' apr_all_3 instead of the sample deploy")
    parser.add_argument("--html", type=Path, help="also save the page HTML here")
    args = parser.parse_args(argv)
    browser = find_browser()
    if browser is None:
        print(
            "card_preview: Chromium is needed to take the screenshot and none of "
            + ", ".join(BROWSERS) + " is on PATH. On Debian: apt-get install chromium "
            "fonts-noto-color-emoji",
            file=sys.stderr,
        )
        return 2
    body = vector_approval() if args.vectors else sample_approval()
    preview = build_preview(body, args.chat_type)
    page_html = page(preview)
    if args.html:
        args.html.write_text(page_html, encoding="utf-8")
    height = screenshot(browser, page_html, args.out)
    print(f"wrote {args.out} ({WIDTH}x{height}, {args.out.stat().st_size} bytes)")
    return 0


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


if __name__ == "__main__":
    sys.exit(main())
