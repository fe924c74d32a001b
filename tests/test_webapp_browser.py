"""The Mini App's page in a real browser: Playwright driving Debian's Chromium against the
real bot's HTTP server on loopback, opened as Telegram opens it (``initData`` in the
address's ``#tgWebAppData``, signed with the bot's token).

The diff test takes the picture docs/miniapp.md shows, ``docs/miniapp.png``; it writes it
there when ``SKALD_UPDATE_SCREENSHOT=1`` is set."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect
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


TWO_FILES = (
    "diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n@@ -10,3 +10,3 @@\n"
    " keep = 1\n-old = 2\n+new = 2\n tail = 3\n"
    "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n"
    "-Old title\n+New title"
)


async def test_a_diff_has_line_numbers_and_one_collapsible_part_per_file(
        tmp_path: Path, browser: Browser) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app):
        ref = await posted(world, running, approval("apr_files", summary="Two files", blocks=[
            {"type": "block", "label": "Changes", "value": TWO_FILES, "value_type": "diff"}]),
            "Two files")
        page = await open_app(browser, world, app, ref, ADA)
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
