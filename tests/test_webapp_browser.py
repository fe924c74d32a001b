"""The Mini App's page in a real browser: Playwright driving Debian's Chromium against the
real bot's HTTP server on loopback, opened as Telegram opens it (``initData`` in the
address's ``#tgWebAppData``, signed with the bot's token).

The diff test takes the picture docs/miniapp.md shows, ``docs/miniapp.png``; it writes it
there when ``SKALD_UPDATE_SCREENSHOT=1`` is set."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect
from test_edits_bot import bash, edit
from test_playground_browser import CHROMIUM, CHROMIUM_ARGS
from test_webapp import SECRET, init_data, ref_of, secret_approval, webapp_bot
from world import ADA, World, approval, make_world

from bot.app import Running

TIMEOUT_MS = 30_000
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "miniapp.png"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM,
                                                    args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


async def open_app(browser: Browser, world: World, app: str, ref: str, user: int,
                   data: str | None = None) -> Page:
    """The app as Telegram opens it for ``user`` (or with the ``initData`` in ``data``)."""
    page = await browser.new_page(viewport={"width": 420, "height": 760})
    # Telegram's script would come from telegram.org: the page works without it.
    await page.route("https://telegram.org/**", lambda route: route.abort())
    data = data if data is not None else init_data(world, user)
    await page.goto(f"{app}?ref={ref}#tgWebAppData={quote(data)}&tgWebAppVersion=8.0")
    return page


async def posted(world: World, running: Running, item: dict[str, Any], needle: str) -> str:
    """Pair with Ada's chat, have the agent ask ``item``, and the reference of its card."""
    await world.pair(ADA)
    world.agent.submit_approval(item)
    return await ref_of(running, ADA, await world.wait_card(ADA, needle))


async def test_the_details_show_everything_reveal_and_approve(tmp_path: Path,
                                                              browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        ref = await posted(world, running, secret_approval("apr_page"), "Deploy web")
        page = await open_app(browser, world, app, ref, ADA)
        await expect(page.locator("#title")).to_have_text("Deploy web", timeout=TIMEOUT_MS)
        rows = page.locator(".diff-add")
        await expect(rows).to_have_count(3001)
        await expect(page.locator(".diff-add").last).to_contain_text("+key = ••••••")
        assert SECRET not in await page.content()
        await page.click("#reveal")
        await expect(page.locator(".diff-add").last).to_contain_text(f"+key = {SECRET}")
        assert [e.user_id for e in running.store.audit.rows(events=("reveal",))] == [ADA]
        await expect(page.locator("#arguments")).to_contain_text('"web"')
        await page.click("#approve")
        await expect(page.locator("#message")).to_contain_text("Sent: decided",
                                                               timeout=TIMEOUT_MS)
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].decision == "approve"
        card = await world.wait_card(ADA, "Deploy web", lambda m: "Approved by" in m.text)
        assert card.buttons() == []


async def test_a_page_opened_with_forged_init_data_shows_nothing(tmp_path: Path,
                                                                 browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        ref = await posted(world, running, secret_approval("apr_forged"), "Deploy web")
        forged = init_data(world, ADA).replace("hash=", "hash=0")
        page = await open_app(browser, world, app, ref, ADA, forged)
        await expect(page.locator("#message")).to_contain_text("Cannot show this card",
                                                               timeout=TIMEOUT_MS)
        assert "Deploy web" not in await page.content()


async def test_an_edit_in_the_app_turns_the_chat_card_and_is_approved_from_the_app(
        tmp_path: Path, browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        ref = await posted(world, running, bash("apr_edit"), "apr_edit")
        page = await open_app(browser, world, app, ref, ADA)
        area = page.locator('.edit-value[data-key="command"]')
        await expect(area).to_have_value("rm -rf build", timeout=TIMEOUT_MS)
        await area.fill("rm -rf build/cache")
        await page.click('.save-edit[data-key="command"]')
        await expect(page.locator("#notice")).to_contain_text("Edit saved")
        await expect(page.locator("#title")).to_have_text(f"Edited by user{ADA}")
        await expect(page.locator(".edited .diff-del")).to_have_text(["- rm -rf build"])
        await expect(page.locator(".edited .diff-add")).to_have_text(["+ rm -rf build/cache"])
        await expect(page.locator("#arguments")).to_contain_text("rm -rf build/cache")
        await expect(page.locator("#approve")).to_have_text("✅ Approve edited")
        card = await world.wait_card(ADA, f"Edited by user{ADA}",
                                     lambda m: "Approve edited" in str(m.buttons()))
        assert "- rm -rf build\n+ rm -rf build/cache" in card.text
        assert world.agent.decisions == []

        # Edited again in the chat: the app's approval of the version it shows is refused.
        await edit(world, ADA, card, ADA, "rm -rf build/tmp", label="Edit again")
        await world.wait_card(ADA, "+ rm -rf build/tmp", lambda m: bool(m.buttons()))
        await page.click("#approve")
        await expect(page.locator("#notice")).to_have_text(
            "This card was edited since you saw it: look at it again; nothing was sent.",
            timeout=TIMEOUT_MS)
        await expect(page.locator("#arguments")).to_contain_text("rm -rf build/tmp")
        assert world.agent.decisions == []
        await page.click("#approve")
        await expect(page.locator("#message")).to_contain_text("Sent: decided",
                                                               timeout=TIMEOUT_MS)
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].arguments == {"command": "rm -rf build/tmp",
                                                      "timeout": 30}
        await world.wait_card(ADA, "+ rm -rf build/tmp", lambda m: "Approved by" in m.text
                              and not m.buttons())


TWO_FILES = (
    "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -10,3 +10,3 @@\n"
    " def greet(name):\n-    return 'hi ' + name\n+    return f\"hello {name}\"  # kinder\n"
    " greet(None)\n"
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n"
    "-Old title\n+New title"
)


async def open_diff(browser: Browser, world: World, running: Running, app: str,
                    summary: str, diff: str) -> Page:
    """The app on an approval whose one block is ``diff``, as Ada opens it."""
    item = approval("apr_diff", summary=summary, blocks=[
        {"type": "block", "label": "Changes", "value": diff, "value_type": "diff"}])
    return await open_app(browser, world, app, await posted(world, running, item, summary), ADA)


async def test_a_diff_has_line_numbers_and_one_collapsible_part_per_file(
        tmp_path: Path, browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        page = await open_diff(browser, world, running, app, "Two files", TWO_FILES)
        files = page.locator(".diff-file")
        await expect(files).to_have_count(2, timeout=TIMEOUT_MS)
        await expect(files.nth(0).locator("summary")).to_contain_text("app.py")
        await expect(files.nth(1).locator("summary")).to_contain_text("README.md")
        added = files.nth(0).locator(".diff-add td")
        await expect(added.nth(1)).to_have_text("11")
        await expect(files.nth(0).locator(".diff-del td").nth(0)).to_have_text("11")
        await expect(files.nth(1).locator(".diff-add td").nth(1)).to_have_text("1")
        picture = await page.screenshot()
        assert picture.startswith(b"\x89PNG")
        if os.environ.get("SKALD_UPDATE_SCREENSHOT") == "1":
            SCREENSHOT.write_bytes(picture)
        await files.nth(0).locator("summary").click()
        await expect(added.nth(2)).to_be_hidden()


COLOURED = (
    "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n"
    '-def old(): return "<b>x</b>"\n'
    '+def new(): return "<img src=x onerror=window.pwned=1>"  # <b>not bold</b>\n'
    "diff --git a/notes.txt b/notes.txt\n--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n"
    "-def plain\n+<script>window.pwned=2</script> return 1"
)


async def test_a_diff_is_coloured_by_file_type_and_its_html_stays_text(
        tmp_path: Path, browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        page = await open_diff(browser, world, running, app, "Coloured", COLOURED)
        python, plain = page.locator(".diff-file").nth(0), page.locator(".diff-file").nth(1)
        await expect(python).to_have_attribute("data-language", "python", timeout=TIMEOUT_MS)
        added = python.locator(".diff-add .code")
        await expect(added).to_have_text(
            '+def new(): return "<img src=x onerror=window.pwned=1>"  # <b>not bold</b>')
        await expect(added.locator(".tok-kw")).to_have_text(["def", "return"])
        await expect(added.locator(".tok-str")).to_have_text(
            '"<img src=x onerror=window.pwned=1>"')
        await expect(added.locator(".tok-com")).to_have_text("# <b>not bold</b>")
        await expect(plain).to_have_attribute("data-language", "")
        await expect(plain.locator(".diff-add .code")).to_have_text(
            "+<script>window.pwned=2</script> return 1")
        assert await plain.locator("[class^=tok-]").count() == 0
        assert await page.locator("#card img, #card b, #card script").count() == 0
        assert await page.evaluate("window.pwned") is None


# One line per language: the tokens the page colours it with ("" is plain text).
TOKENIZED: list[tuple[str, str, list[list[str]]]] = [
    ("python", "x = f'a#b' # note", [["", "x = "], ["str", "f'a#b'"], ["", " "],
                                       ["com", "# note"]]),
    ("python", "if n is None: return 0x1F", [["kw", "if"], ["", " n "], ["kw", "is"], ["", " "],
                                            ["const", "None"], ["", ": "], ["kw", "return"],
                                            ["", " "], ["num", "0x1F"]]),
    ("js", 'const s = `a${b}` /* c */ // d', [["kw", "const"], ["", " s = "],
                                                ["str", "`a${b}`"], ["", " "],
                                                ["com", "/* c */"], ["", " "],
                                                ["com", "// d"]]),
    ("json", '{"key": "va\\"l", "n": -1.5e3, "ok": true}',
     [["", "{"], ["key", '"key"'], ["", ": "], ["str", '"va\\"l"'], ["", ", "], ["key", '"n"'],
      ["", ": -"], ["num", "1.5e3"], ["", ", "], ["key", '"ok"'], ["", ": "],
      ["const", "true"], ["", "}"]]),
    ("yaml", "- name: 'web' # main", [["", "- "], ["key", "name"], ["", ": "], ["str", "'web'"],
                                      ["", " "], ["com", "# main"]]),
    ("shell", 'echo "$HOME" ${#x} $1 a#b # c', [["", "echo "], ["str", '"$HOME"'], ["", " "],
                                                ["var", "${#x}"], ["", " "], ["var", "$1"],
                                                ["", " a#b "], ["com", "# c"]]),
    ("go", "func main() { s := `raw` }", [["kw", "func"], ["", " main() { s := "],
                                            ["str", "`raw`"], ["", " }"]]),
    ("rust", 'let mut v: u8 = 7; // x', [["kw", "let"], ["", " "], ["kw", "mut"],
                                         ["", " v: u8 = "], ["num", "7"], ["", "; "],
                                         ["com", "// x"]]),
    ("", "def f(): pass", [["", "def f(): pass"]]),
    ("python", "def " * 600, [["", "def " * 600]]),  # too long to colour
]


async def test_the_tokenizer_of_each_file_type(tmp_path: Path, browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        ref = await posted(world, running, approval("apr_tokens"), "apr_tokens")
        page = await open_app(browser, world, app, ref, ADA)
        await expect(page.locator("#title")).to_contain_text("apr_tokens", timeout=TIMEOUT_MS)
        for language, line, expected in TOKENIZED:
            got = await page.evaluate("([line, language]) => tokens(line, language)",
                                      [line, language])
            assert got == expected, (language, line)
        names = {"a/b/main.PY": "python", "web.tsx": "js", "ci.yml": "yaml", "run.sh": "shell",
                 "x.go": "go", "lib.rs": "rust", "data.json": "json", "Makefile": "",
                 "notes.txt": ""}
        for name, language in names.items():
            assert await page.evaluate("(name) => languageOf(name)", name) == language, name


async def test_the_page_follows_telegram_s_light_or_dark_mode(tmp_path: Path,
                                                                browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        ref = await posted(world, running, approval("apr_theme"), "apr_theme")
        page = await browser.new_page(color_scheme="light")
        await page.route("https://telegram.org/**", lambda route: route.abort())
        # Telegram's script as the app gives it: its theme, and its "themeChanged" event.
        await page.add_init_script(f"""
            window.themeHandlers = [];
            window.Telegram = {{ WebApp: {{
                initData: {json.dumps(init_data(world, ADA))}, colorScheme: "dark",
                onEvent: (name, handler) => name === "themeChanged"
                    && window.themeHandlers.push(handler),
                ready() {{}}, expand() {{}}, close() {{}} }} }};""")
        await page.goto(f"{app}?ref={ref}")
        await expect(page.locator("#title")).to_contain_text("apr_theme", timeout=TIMEOUT_MS)
        html = page.locator("html")
        await expect(html).to_have_attribute("data-scheme", "dark")
        await page.evaluate("""() => { Telegram.WebApp.colorScheme = "light";
                                       themeHandlers.forEach((handler) => handler()); }""")
        await expect(html).to_have_attribute("data-scheme", "light")
        plain = await browser.new_page(color_scheme="dark")
        await plain.route("https://telegram.org/**", lambda route: route.abort())
        await plain.goto(f"{app}?ref={ref}#tgWebAppData={quote(init_data(world, ADA))}")
        await expect(plain.locator("html")).to_have_attribute("data-scheme", "dark",
                                                              timeout=TIMEOUT_MS)
