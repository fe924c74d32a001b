"""The playground in a real browser: Playwright driving Debian's Chromium against
``skald-telegram demo`` started without a token, as a new user would start it.

The same test takes the picture the README shows, ``docs/playground.png``; it writes it
there when ``SKALD_UPDATE_SCREENSHOT=1`` is set (the page shows the time of day, so every
run's picture differs a little).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT = ROOT / "docs" / "playground.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--disable-dev-shm-usage",
]  # fmt: skip
TIMEOUT_S = 30.0
SECRET = "sk_live_demo_51Hq7c2e9Fa04b3d"
RICH = (
    "Formatting: <b>bold</b> <i>italic</i> <u>under</u> <s>struck</s> <code>code</code>\n"
    '<pre><code class="language-python">print(1)</code></pre>\n'
    "<blockquote>a quote</blockquote>\n"
    "<blockquote expandable>a long quote\nwith\nmany\nlines\nmore\nstill</blockquote>\n"
    '<a href="https://example.com/runs/7">the run</a> '
    '<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji> '
    "<tg-spoiler>hidden words</tg-spoiler>"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for every browser test, all in this module (it takes a second to start).

    Module scope, not session scope: Playwright's synchronous API keeps an event loop
    running in this thread until it exits, and the asynchronous tests need the thread back.
    """
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Terminal:
    """The playground's terminal: a subprocess whose output lines tests can wait for."""

    def __init__(self, tmp_path: Path) -> None:
        env = {k: v for k, v in os.environ.items()
               if k not in {"TELEGRAM_BOT_TOKEN", "SKALD_TELEGRAM_CONFIG"}}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bot", "demo", "--no-browser", "--port", "0",
             "--state", str(tmp_path / "state")],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True, encoding="utf-8",
        )  # fmt: skip
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + TIMEOUT_S
        with self._changed:
            while True:
                for line in self.lines:
                    found = re.search(pattern, line)
                    if found:
                        return found
                left = deadline - time.monotonic()
                assert left > 0 and self.process.poll() is None, (
                    f"no line matching {pattern!r}; the terminal shows:\n" + "\n".join(self.lines)
                )
                self._changed.wait(left)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(TIMEOUT_S)
        self._reader.join(TIMEOUT_S)
        return code


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    running = Terminal(tmp_path)
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.stop()


def test_a_new_user_tries_the_playground(browser: Browser, terminal: Terminal) -> None:
    found = terminal.wait_for(r"Open ((http://127\.0\.0\.1:\d+/)\?key=([\w-]+))")
    address, url, key = found.group(1), found.group(2), found.group(3)
    assert "127.0.0.1 only" in terminal.lines[1]
    context = browser.new_context(viewport={"width": 1180, "height": 860}, accept_downloads=True)
    context.set_default_timeout(TIMEOUT_S * 1000)
    expect.set_options(timeout=TIMEOUT_S * 1000)
    page = context.new_page()
    try:
        assert page.goto(url).status == 403  # without the key
        page.goto(address)
        expect(page).to_have_url(url)  # the key leaves the address bar; the cookie keeps it
        expect(page.locator("#chat-title")).to_have_text("Skald Playground")
        cards = page.locator(".message", has_text="Skald demo agent asks")
        expect(cards).to_have_count(5)

        # Approve: the card is edited in place and the agent prints the decision.
        email = cards.filter(has_text="Send the Q3 estimate").first
        email.get_by_role("button", name="Approve").click()
        expect(email).to_contain_text("✅ Approved by Ada Lovelace")
        expect(email.locator(".inline-button")).to_have_count(0)
        terminal.wait_for(r"✅ approved send_email by Ada Lovelace \(@ada\)")
        # The digest of waiting requests lets the decided one go.
        expect(page.locator(".message", has_text="3 requests from Skald demo agent are "
                                                  "waiting")).to_be_visible()

        # With the Mini App on, the secret stays out of the chat: the card names it.
        deploy = cards.filter(has_text="Deploy billing-api 2.14.0").first
        expect(deploy).to_contain_text("API key: 🔒 reveal in Details")
        deploy.evaluate("element => element.scrollIntoView({block: 'end'})")
        picture = page.screenshot()
        assert picture.startswith(b"\x89PNG")
        if os.environ.get("SKALD_UPDATE_SCREENSHOT") == "1":
            SCREENSHOT.write_bytes(picture)
        assert SECRET not in page.locator("body").inner_text()

        # Deny with a reason: the bot's ForceReply focuses the reply bar.
        write = cards.filter(has_text="Write deploy/billing-api.yaml").first
        write.get_by_role("button", name="Deny with reason").click()
        expect(page.locator("#replying")).to_be_visible()
        expect(page.locator("#input")).to_be_focused()
        page.locator("#input").fill("wait for the load test")
        page.locator("#input").press("Enter")
        terminal.wait_for(r"❌ denied write_file by Ada Lovelace \(@ada\): wait for the load test")
        expect(write).to_contain_text("Denied by Ada Lovelace")

        # Answer the question by tapping an option.
        question = cards.filter(has_text="Where should").first
        question.get_by_role("button", name="canary (5% of traffic)").click()
        terminal.wait_for(r"💬 answered .* with “canary \(5% of traffic\)” by Ada Lovelace")

        # In the group, an observer's tap is refused with an alert naming the approvers.
        page.locator("#who").select_option(label="Dave Reed")
        page.locator(".chat-item", has_text="Ops team").click()
        expect(page.locator("#chat-members")).to_contain_text("Dave Reed (observer)")
        shell = cards.filter(has_text="Rotate the logs").first
        shell.get_by_role("button", name="Approve").click()
        expect(page.locator("#alert")).to_be_visible()
        expect(page.locator("#alert-text")).to_contain_text("You can watch but not decide here")
        expect(page.locator("#alert-text")).to_contain_text("Ada Lovelace")
        page.locator("#alert-ok").click()

        # Anything posted through the Bot API shows up, drawn from its text and entities.
        page.locator("#who").select_option(label="Ada Lovelace")
        page.locator(".chat-item", has_text="Skald Playground").click()
        tool = httpx.Client(headers={"X-Playground-Key": key})
        bot = tool.get(f"{url}playground/bot").json()
        api_root = f"{url}playground/bot"
        sent = tool.post(f"{api_root}/sendMessage", json={
            "chat_id": bot["private"], "text": RICH, "parse_mode": "HTML",
            "reply_markup": {"inline_keyboard": [[
                {"text": "Docs", "url": "https://example.com/docs"},
                {"text": "Copy id", "copy_text": {"text": "apr_42"}}]]},
        })  # fmt: skip
        assert sent.json()["ok"] is True, sent.text
        rich = page.locator(".message", has_text="Formatting").first
        for selector in ("b", "i", "u", "s", "code.inline", "blockquote:not(.expandable)",
                         "a[href='https://example.com/runs/7']", ".custom-emoji", ".spoiler"):
            expect(rich.locator(selector)).to_have_count(1)
        expect(rich.locator("pre code[data-language='python']")).to_have_text("print(1)")
        quote = rich.locator("blockquote.expandable")
        expect(quote).to_have_class(re.compile("collapsed"))
        quote.click()
        expect(quote).not_to_have_class(re.compile("collapsed"))
        expect(rich.locator(".custom-emoji")).to_have_text("👍")
        assert "hidden words" not in rich.inner_text()
        expect(rich.get_by_role("button", name="Docs")).to_be_visible()
        rich.get_by_role("button", name="Copy id").click()
        expect(page.locator("#toast")).to_have_text("Copied to clipboard")

        refused = tool.post(f"{api_root}/sendMessage", json={
            "chat_id": bot["private"], "text": "<b>unclosed", "parse_mode": "HTML"})
        assert refused.status_code == 400
        assert refused.json()["description"].startswith("Bad Request: can't parse entities")

        document = tool.post(f"{api_root}/sendDocument",
                              data={"chat_id": str(bot["private"]), "caption": "the log"},
                              files={"document": ("build.log", b"all green\n", "text/plain")})
        assert document.json()["ok"] is True, document.text
        link = page.locator(".message", has_text="the log").locator("a.document")
        expect(link).to_have_attribute("download", "build.log")
        with page.expect_download() as download:
            link.click()
        saved = Path(download.value.path())
        assert saved.read_bytes() == b"all green\n"

        # Reloaded, the page works from its cookie alone; a fresh browser without it does not.
        page.reload()
        expect(page.locator(".message", has_text="Formatting")).to_have_count(1)
        # ... in the order the messages came, decided cards where they were, and the reason
        # already sent is no reply in waiting.
        expect(page.locator("a.document")).to_have_count(1)
        ids = page.locator("#messages .message").evaluate_all(
            "rows => rows.map(row => Number(row.dataset.messageId))")
        assert len(ids) > 6 and ids == sorted(ids), ids
        expect(page.locator("#replying")).to_be_hidden()

        # Pairing an own agent host is one tap away, and says how.
        expect(page.locator(".hint")).to_contain_text("/pair <link>")
        page.locator("#who").select_option(label="Bob Builder")
        page.get_by_role("button", name="Pair an agent").click()
        expect(page.locator("#who")).to_have_value("1001")
        expect(page.locator("#chat-title")).to_have_text("Skald Playground")
        expect(page.locator("#input")).to_have_value("/pair ")
        stranger = browser.new_context()
        try:
            assert stranger.new_page().goto(url).status == 403
        finally:
            stranger.close()
        tool.close()
    finally:
        context.close()
    assert terminal.stop() == 0
    assert SECRET not in "\n".join(terminal.lines)


def test_details_open_the_mini_app_beside_the_chat(browser: Browser, terminal: Terminal) -> None:
    url = terminal.wait_for(r"Open (http://127\.0\.0\.1:\d+/\?key=[\w-]+)").group(1)
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    context.set_default_timeout(TIMEOUT_S * 1000)
    expect.set_options(timeout=TIMEOUT_S * 1000)
    # Telegram's script would come from telegram.org: the app works without it.
    context.route("https://telegram.org/**", lambda route: route.abort())
    page = context.new_page()
    try:
        page.goto(url)
        app = page.frame_locator("#miniapp-frame")
        # In the private chat, a web_app button; the app shows the whole card.
        email = page.locator(".message", has_text="Send the Q3 estimate").first
        email.get_by_role("button", name="Details").click()
        expect(page.locator("#miniapp")).to_be_visible()
        expect(app.locator("#title")).to_contain_text("Send the Q3 estimate")
        expect(app.locator("#arguments")).to_be_visible()
        # Approving in the app is a decision like a tap: the card is edited, the app closes.
        app.locator("#approve").click()
        expect(email).to_contain_text("✅ Approved by Ada Lovelace")
        expect(page.locator("#miniapp")).to_be_hidden()
        terminal.wait_for(r"✅ approved send_email by Ada Lovelace \(@ada\)")
        # The digest of waiting requests lets the decided one go.
        expect(page.locator(".message", has_text="3 requests from Skald demo agent are "
                                                  "waiting")).to_be_visible()

        # The secret the card leaves out is revealed there, to an approver.
        deploy = page.locator(".message", has_text="Deploy billing-api 2.14.0").first
        deploy.get_by_role("button", name="Details").click()
        expect(app.locator("#title")).to_contain_text("Deploy billing-api 2.14.0")
        assert SECRET not in app.locator("body").inner_text()
        app.locator("#reveal").click()
        expect(app.locator("body")).to_contain_text(SECRET)

        # In the group, a Direct Link; an observer sees the card but cannot decide.
        page.locator("#who").select_option(label="Dave Reed")
        page.locator(".chat-item", has_text="Ops team").click()
        shell = page.locator(".message", has_text="Rotate the logs").first
        shell.get_by_role("button", name="Details").click()
        expect(app.locator("#title")).to_contain_text("Rotate the logs")
        expect(app.locator("#approve")).to_have_count(0)
        expect(app.locator("#reveal")).to_have_count(0)
    finally:
        context.close()
