"""The playground answers only its own key: every page, API and control route refuses a
request without it or with a wrong one (another user of the machine reaches the port, not
the key), and no answer ever carries the bot's token."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from test_demo import Output
from test_playground import playground as playground_fixture  # noqa: F401

from bot.playground.page import KEY_HEADER, REFUSED, page_routes
from bot.playground.session import YOU
from bot.playground.stub import TelegramStub

TIMEOUT = 15.0
TOKEN = "777001:Pq7Yc2mWk9LdR3sX8vNbA4eF6hJtU1zA"
KEY = "Zq0sT1oUc8lVh4Gd2yKpXb7Nf3Jm9Wer"
ROUTES = (
    ("page", "GET", "", None),
    ("page", "GET", "static/app.js", None),
    ("page", "GET", "static/style.css", None),
    ("api", "GET", "playground/events", None),
    ("api", "GET", "playground/bot", None),
    ("api", "GET", "playground/files/nothing", None),
    ("control", "POST", "playground/send", {"chat_id": YOU, "user_id": YOU, "text": "/pending"}),
    ("control", "POST", "playground/tap", {"chat_id": YOU, "user_id": YOU, "message_id": 1,
                                           "data": "x"}),
    ("control", "POST", "playground/bot/sendMessage", {"chat_id": YOU, "text": "hello"}),
)
ROUTES_BY_PATH = {path: body for _, _, path, body in ROUTES}
POSTED = {path for _, method, path, _ in ROUTES if method == "POST"}


class Playground(NamedTuple):
    root: str
    key: str
    out: Output


@pytest.fixture
def started(request: pytest.FixtureRequest) -> Playground:
    """The running playground (``test_playground``'s fixture), by name."""
    return Playground(*request.getfixturevalue("playground_fixture"))


class Answer(NamedTuple):
    status: int
    text: str
    headers: httpx.Headers


async def _request(client: httpx.AsyncClient, method: str, url: str, body: object,
                   **extra: Any) -> Answer:
    async with client.stream(method, url, json=body if method == "POST" else None,
                             **extra) as response:
        # The live feed never ends: its first chunk is enough.
        async for chunk in response.aiter_bytes():
            return Answer(response.status_code, chunk.decode(errors="replace"), response.headers)
        return Answer(response.status_code, "", response.headers)


@pytest.mark.parametrize("kind,method,path,body", ROUTES)
async def test_a_request_without_the_key_is_refused(started: Playground, kind: str,
                                                    method: str, path: str,
                                                    body: object) -> None:
    wrong = started.key[:-1] + ("A" if started.key[-1] != "A" else "B")
    cookie = f"skald_playground_{started.root.rsplit(':', 1)[1].strip('/')}"
    attempts: list[dict[str, object]] = [
        {},
        {"params": {"key": wrong}},
        {"params": {"key": ""}},
        {"params": {"key": started.key[:-1]}},
        {"headers": {KEY_HEADER: wrong}},
        {"headers": {"Cookie": f"{cookie}={wrong}"}},
        {"headers": {"Cookie": f"skald_playground_1={started.key}"}},  # another port's
        {"params": {"key": started.key.upper()}},
    ]
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        for attempt in attempts:
            refused = await _request(client, method, f"{started.root}{path}", body, **attempt)
            assert refused.status == 403, (kind, path, attempt)
            text = refused.text
            assert REFUSED in text and text.strip().count("\n") == 0
            assert "set-cookie" not in refused.headers
    assert "hello" not in started.out.getvalue()


async def test_the_key_in_the_address_sets_a_strict_httponly_cookie(
        started: Playground) -> None:
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        page = await client.get(f"{started.root}?key={started.key}")
        assert page.status_code == 200 and "/static/app.js" in page.text
        cookie = page.headers["set-cookie"]
        assert f"={started.key};" in cookie
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
        for kind, method, path, body in ROUTES:
            answer = await _request(client, method, f"{started.root}{path}", body)
            assert answer.status != 403, (kind, path)
    async with httpx.AsyncClient(timeout=TIMEOUT, headers={KEY_HEADER: started.key}) as tool:
        chats = (await tool.get(f"{started.root}playground/bot")).json()
        sent = await tool.post(f"{started.root}playground/bot/sendMessage",
                               json={"chat_id": chats["private"], "text": "from a tool"})
        assert sent.json()["ok"] is True


async def test_no_answer_carries_the_bots_token() -> None:
    tg = TelegramStub(token=TOKEN)
    tg.add_user(YOU, "Ada")
    tg.add_private_chat(YOU)
    tg.add_group(-100123, "Ops team", admins=[YOU], members=[])
    tg.add_routes(page_routes(tg, key=KEY))
    secret = TOKEN.partition(":")[2]
    async with tg, httpx.AsyncClient(timeout=TIMEOUT) as client:
        sent = await client.post(f"{tg.api_url}/bot{TOKEN}/sendDocument",
                                 data={"chat_id": str(YOU), "caption": "log"},
                                 files={"document": ("a.log", b"green\n", "text/plain")})
        file_id = sent.json()["result"]["document"]["file_id"]
        root = f"{tg.api_url}/"
        seen = []
        for key in (KEY, None, "wrong"):
            params = {"key": key} if key else {}
            paths = [p for _, _, p, _ in ROUTES] + ["static/index.html",
                                                  f"playground/files/{file_id}"]
            for path in paths:
                body = dict(ROUTES_BY_PATH.get(path) or {}, chat_id=YOU)
                method = "POST" if path in POSTED else "GET"
                answer = await _request(client, method, f"{root}{path}", body, params=params)
                seen.append(answer.text + str(answer.headers))
        assert len(seen) == 3 * len(paths)
        assert any("green" in text for text in seen)  # the file, with the key
    assert not any(secret in text for text in seen)


async def test_the_bot_api_refuses_a_wrong_token() -> None:
    bot_id, _, secret = TOKEN.partition(":")
    async with TelegramStub(token=TOKEN) as tg, httpx.AsyncClient(timeout=TIMEOUT) as client:
        for token in (f"{bot_id}:{secret[:-1]}B", bot_id, f"{TOKEN}x", "", secret):
            answer = await client.post(f"{tg.api_url}/bot{token}/getMe")
            assert answer.status_code == 401, token
        assert (await client.post(f"{tg.api_url}/bot{TOKEN}/getMe")).json()["ok"] is True


async def test_the_browser_is_opened_without_the_key_on_its_command_line(
        tmp_path: Path) -> None:
    """Every user of the machine can read a command line (``ps``): the browser gets a file
    only its owner can read, which sends it on to the address with the key."""
    seen = tmp_path / "browser-argv"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\ncat "${{1#file://}}" >> {seen}\n')
    browser.chmod(0o700)
    env = {k: v for k, v in os.environ.items()
           if k not in {"TELEGRAM_BOT_TOKEN", "SKALD_TELEGRAM_CONFIG", "DISPLAY",
                        "WAYLAND_DISPLAY"}}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "demo", "--port", "0", "--state", str(tmp_path / "state"),
        env={**env, "BROWSER": f"{browser} %s"}, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        async with asyncio.timeout(4 * TIMEOUT):  # a process start on a busy machine
            while b"Open http" not in (line := await process.stdout.readline()):
                assert line
            while not seen.exists() or "refresh" not in seen.read_text():
                await asyncio.sleep(0.05)
        opener = tmp_path / "state" / "open-playground.html"
        assert opener.stat().st_mode & 0o777 == 0o600
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), 4 * TIMEOUT)
    key = re.search(rb"\?key=([\w-]+)", line)
    assert key is not None
    argument, page = seen.read_text().split("\n", 1)
    assert argument.startswith("file://") and key.group(1).decode() not in argument
    assert f"?key={key.group(1).decode()}" in page
    assert not (tmp_path / "state" / "open-playground.html").exists()  # removed at the end
