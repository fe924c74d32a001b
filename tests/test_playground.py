"""The playground without a browser: ``skald-telegram demo`` with no token, its sockets, its
page's live feed and actions over real HTTP, and ``render --playground``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_demo import Output

from bot.cli import main as cli_main
from bot.playground.page import page_routes
from bot.playground.session import OPS_TEAM, YOU, PlaygroundOptions, run_playground
from bot.playground.stub import TelegramStub

TIMEOUT = 15.0
KEY = "Zq0sT1oUc8lVh4Gd2yKpXb7Nf3Jm9Wer"
ROOT = Path(__file__).resolve().parent.parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"TELEGRAM_BOT_TOKEN", "SKALD_TELEGRAM_CONFIG"}}
    return {**env, **extra}


async def _start(tmp_path: Path, *flags: str, env: dict[str, str],
                 state: bool = True) -> tuple[Any, list[str]]:
    where = ["--state", str(tmp_path / "state")] if state else []
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "demo", "--no-browser", "--port", "0", *where, *flags,
        env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    lines: list[str] = []
    async with asyncio.timeout(TIMEOUT):
        while not lines or "Open http" not in lines[-1]:
            line = await process.stdout.readline()
            assert line, f"the playground ended early: {lines}"
            lines.append(line.decode())
    return process, lines


def _listening(pid: int) -> list[str]:
    """The local addresses of every TCP socket the process listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        found = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
        if found:
            inodes.add(found.group(1))
    addresses = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addresses.append(fields[1])
    return addresses


async def test_demo_without_a_token_is_the_playground_on_loopback_only(tmp_path: Path) -> None:
    process, lines = await _start(tmp_path, env=_env())
    try:
        assert "PLAYGROUND" in lines[0]
        assert "127.0.0.1 only" in lines[1]
        url = re.search(r"Open (http://127\.0\.0\.1:\d+/\?key=[\w-]{32})  ", lines[-1])
        assert url is not None
        listening = _listening(process.pid)
        assert len(listening) >= 2  # the page with the Bot API, and the relay
        assert all(address.startswith("0100007F:") for address in listening), listening
        async with httpx.AsyncClient() as client:
            page = await client.get(url.group(1))
        assert page.status_code == 200 and "/static/app.js" in page.text
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert process.returncode == 0
    assert b"Stopping the playground" in rest


async def test_playground_flag_wins_over_a_token(tmp_path: Path) -> None:
    process, lines = await _start(tmp_path, "--playground",
                                  env=_env(TELEGRAM_BOT_TOKEN="123456:REAL-token"))
    process.send_signal(signal.SIGINT)
    await asyncio.wait_for(process.communicate(), TIMEOUT)
    assert "PLAYGROUND" in lines[0]
    assert "REAL-token" not in "".join(lines)


async def _run_once(tmp_path: Path, *flags: str) -> tuple[str, str, bytes]:
    """Start the playground with its default state folder under ``tmp_path``, stop it:
    its relay URL, the bot's token file's text and the bot's identity file's bytes."""
    process, lines = await _start(tmp_path, *flags, state=False,
                                  env=_env(XDG_STATE_HOME=str(tmp_path / "xdg")))
    try:
        return _kept_identity("".join(lines))
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), TIMEOUT)


def _kept_identity(text: str) -> tuple[str, str, bytes]:
    relay = re.search(r"Relay: (ws://127\.0\.0\.1:\d+\S*)\. ", text)
    token_file = re.search(r"in (/\S+/bot-token) \(readable by you only\)", text)
    state = re.search(r"State: (/\S+) \(", text)
    assert relay and token_file and state, text
    assert f"agent serve --relay {relay.group(1)} --state" in text
    assert "agent pair --state" in text and "/pair <link>" in text
    token = Path(token_file.group(1))
    assert token.stat().st_mode & 0o777 == 0o600
    assert token.read_text().strip() not in text  # the token itself is never printed
    return relay.group(1), token.read_text(), (Path(state.group(1)) / "bot" /
                                               "identity.json").read_bytes()


async def test_a_restart_keeps_the_bot_and_the_relay_and_fresh_does_not(tmp_path: Path) -> None:
    first = await _run_once(tmp_path)
    assert first == await _run_once(tmp_path)
    assert (tmp_path / "xdg" / "skald-telegram" / "playground" / "bot-token").exists()
    fresh = await _run_once(tmp_path, "--fresh")
    assert fresh[1] != first[1] and fresh[2] != first[2]


class Feed:
    """The page's live feed, read as the page reads it."""

    def __init__(self) -> None:
        self.world: dict[str, Any] = {}
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.changed = asyncio.Event()

    async def follow(self, client: httpx.AsyncClient, url: str) -> None:
        async with client.stream("GET", f"{url}playground/events") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    data = json.loads(line.removeprefix("data: "))
                    if event == "world":
                        self.world = data
                    else:
                        self.messages[data["chat"]["id"], data["message_id"]] = data
                    self.changed.set()

    def cards(self, chat_id: int, needle: str = "") -> list[dict[str, Any]]:
        return [m for (chat, _), m in sorted(self.messages.items())
                if chat == chat_id and m.get("text", "").startswith(("🤖", "❓"))
                and needle in m["text"]]

    async def until(self, condition: Any) -> None:
        async with asyncio.timeout(TIMEOUT):
            while not condition():
                self.changed.clear()
                await self.changed.wait()


@pytest.fixture
async def playground(tmp_path: Path) -> AsyncIterator[tuple[str, str, Output]]:
    """The page's root, its key and the playground's terminal."""
    out, stop = Output(), asyncio.Event()
    options = PlaygroundOptions(state=tmp_path / "state", port=0, open_browser=False,
                                chat_pace_s=0)
    task = asyncio.create_task(run_playground(options, stop=stop, out=out))
    text = await out.wait_for("Open http", TIMEOUT)
    url = re.search(r"Open (http://\S+/)\?key=([\w-]+)", text)
    assert url is not None
    try:
        yield url.group(1), url.group(2), out
    finally:
        stop.set()
        assert await asyncio.wait_for(task, TIMEOUT) == 0


def _button(message: dict[str, Any], label: str) -> str:
    for row in message["reply_markup"]["inline_keyboard"]:
        for button in row:
            if label in button["text"]:
                return str(button["callback_data"])
    raise AssertionError(f"no {label!r} button")


async def test_the_page_feed_and_actions(playground: tuple[str, str, Output]) -> None:
    url, key, out = playground
    ada, dave = YOU, 1004
    feed = Feed()
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        assert (await client.get(f"{url}?key={key}")).status_code == 200  # sets the cookie
        follower = asyncio.create_task(feed.follow(client, url))
        try:
            await feed.until(lambda: len(feed.cards(ada)) == 5 and len(feed.cards(OPS_TEAM)) == 5)
            names = {u["first_name"] for u in feed.world["users"]}
            assert names == {"Ada", "Bob", "Carol", "Dave"}
            assert feed.world["roles"][str(OPS_TEAM)][str(dave)] == "observer"
            deploy = feed.cards(ada, "API key")[0]
            # The Mini App is on: the secret stays out of the chat.
            assert "API key: 🔒 reveal in Details" in deploy["text"]
            assert not any(e["type"] == "spoiler" for e in deploy["entities"])

            email = feed.cards(ada, "send_email")[0]
            tapped = await client.post(f"{url}playground/tap", json={
                "chat_id": ada, "message_id": email["message_id"], "user_id": ada,
                "data": _button(email, "Approve")})
            assert tapped.json()["ok"] is True
            await out.wait_for("✅ approved send_email by Ada Lovelace (@ada)", TIMEOUT)
            await feed.until(lambda: "reply_markup" not in feed.cards(ada, "send_email")[0])

            shell = feed.cards(OPS_TEAM, "run_shell")[0]
            refused = await client.post(f"{url}playground/tap", json={
                "chat_id": OPS_TEAM, "message_id": shell["message_id"], "user_id": dave,
                "data": _button(shell, "Approve")})
            answer = refused.json()["result"]
            assert answer["show_alert"] is True and "Ada" in answer["text"]

            outsider = await client.post(f"{url}playground/send", json={
                "chat_id": ada, "user_id": dave, "text": "hi"})
            assert outsider.status_code == 403
            assert outsider.json()["description"].startswith("Forbidden: ")
            plain = await client.post(f"{url}playground/send", content=b'{"chat_id": 1}',
                                      headers={"Content-Type": "text/plain"})
            assert plain.status_code == 400
            rebound = await client.get(f"{url}playground/bot", headers={"Host": "evil.example"})
            assert rebound.status_code == 400 and "private" not in rebound.text
            garbled = await client.post(f"{url}playground/send", content=b"{not json",
                                        headers={"Content-Type": "application/json"})
            assert garbled.json() == {"ok": False, "error_code": 400,
                                      "description": "Bad Request: can't parse request body "
                                                     "as JSON"}
            sent = await client.post(f"{url}playground/send", json={
                "chat_id": ada, "user_id": ada, "text": "/pending"})
            assert sent.json()["ok"] is True
            await feed.until(lambda: any(m.get("text", "").startswith("Waiting for a decision")
                                         for m in feed.messages.values()))
            missing = await client.get(f"{url}playground/files/nothing")
            assert missing.status_code == 404
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)


async def test_unparseable_bot_api_requests_get_telegrams_400() -> None:
    async with TelegramStub(token="123:ABC") as tg, httpx.AsyncClient() as client:
        for body in (b"{nope", b"[1, 2]"):
            response = await client.post(f"{tg.api_url}/bot123:ABC/sendMessage", content=body,
                                         headers={"Content-Type": "application/json"})
            assert response.status_code == 400
            answer = response.json()
            assert answer["ok"] is False and answer["error_code"] == 400
            assert answer["description"].startswith("Bad Request: can't parse request body")


async def test_render_posts_a_payloads_cards_into_the_playground(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tg = TelegramStub(token="777001:PLAY")
    tg.add_user(1001, "Ada")
    tg.add_private_chat(1001)
    tg.add_group(-100123, "Ops team", admins=[1001], members=[])
    tg.add_routes(page_routes(tg, key=KEY))
    example = str(ROOT / "tests" / "data" / "render-example.json")
    async with tg:
        url = f"{tg.api_url}/?key={KEY}"
        code = await asyncio.to_thread(cli_main, ["render", example, "--playground", url])
        assert code == 0
        printed = capsys.readouterr().out
        assert "✓ posted approval apr_email_1" in printed
        cards = tg.bot_messages(1001)
        assert cards and "send_email" in cards[0].text
        assert any(e.type == "bold" for e in cards[0].entities)

        broken = tmp_path / "templates"
        broken.mkdir()
        (broken / "approval.html.j2").write_text("<b>{{ tool }}<br></b>\n")
        code = await asyncio.to_thread(cli_main, [
            "render", example, "--playground", url, "--chat-type", "group",
            "--templates", str(broken)])
        assert code == 1
        printed = capsys.readouterr().out
        assert "✗ approval apr_email_1: Bad Request: can't parse entities: " \
               'Unsupported start tag "br"' in printed
        assert not any("send_email" in m.text for m in tg.bot_messages(-100123))


def test_render_without_a_playground_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "tests" / "data" / "render-example.json")
    assert cli_main(["render", example, "--playground", f"http://127.0.0.1:9/?key={KEY}"]) == 1
    err = capsys.readouterr().err
    assert "no playground answers at http://127.0.0.1:9/playground/bot" in err
    assert KEY not in err


def test_render_needs_the_playgrounds_key(capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKALD_PLAYGROUND_KEY", raising=False)
    example = str(ROOT / "tests" / "data" / "render-example.json")
    assert cli_main(["render", example, "--playground"]) == 1
    err = capsys.readouterr().err
    assert "no key for http://127.0.0.1:8780/: set SKALD_PLAYGROUND_KEY" in err
    assert err.count("\n") == 1


def test_render_help_says_how_to_pass_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main(["render", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "run the line it prints (the key in $SKALD_PLAYGROUND_KEY)" in help_text
    assert "(the key in ?key=…)" in help_text


async def test_render_takes_the_key_from_the_environment(playground: tuple[str, str, Output],
                                                        tmp_path: Path) -> None:
    url, key, out = playground
    text = await out.wait_for("Try a payload", TIMEOUT)
    printed = re.search(r"Try a payload: SKALD_PLAYGROUND_KEY=(\S+) skald-telegram render "
                        r"FILE\.json --playground (\S+)", text)
    assert printed is not None and printed.groups() == (key, url)
    example = str(ROOT / "tests" / "data" / "render-example.json")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "render", example, "--playground", url,
        env=_env(SKALD_PLAYGROUND_KEY=key), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    posted, _ = await asyncio.wait_for(process.communicate(), 4 * TIMEOUT)
    assert process.returncode == 0 and b"\xe2\x9c\x93 posted approval apr_email_1" in posted


async def test_render_with_a_wrong_key_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    tg = TelegramStub(token="777001:PLAY")
    tg.add_user(1001, "Ada")
    tg.add_private_chat(1001)
    tg.add_routes(page_routes(tg, key=KEY))
    example = str(ROOT / "tests" / "data" / "render-example.json")
    async with tg:
        url = f"{tg.api_url}/?key={KEY[:-1]}x"
        assert await asyncio.to_thread(cli_main, ["render", example, "--playground", url]) == 1
    assert "refused its key" in capsys.readouterr().err
    assert not tg.bot_messages(1001)



async def test_the_page_shows_the_digest_and_its_batch(playground: tuple[str, str, Output]
                                                       ) -> None:
    url, key, _out = playground
    feed = Feed()

    def digest() -> list[dict[str, Any]]:
        return [m for (chat, _), m in sorted(feed.messages.items()) if chat == YOU
                and "are waiting" in m.get("text", "") and "reply_markup" in m]

    def confirmation() -> list[dict[str, Any]]:
        return [m for (chat, _), m in sorted(feed.messages.items()) if chat == YOU
                and " these " in m.get("text", "") and "reply_markup" in m]

    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        assert (await client.get(f"{url}?key={key}")).status_code == 200
        follower = asyncio.create_task(feed.follow(client, url))
        try:
            await feed.until(lambda: bool(digest()))
            shown = digest()[-1]
            assert "holds a secret" in shown["text"]
            tapped = await client.post(f"{url}playground/tap", json={
                "chat_id": YOU, "message_id": shown["message_id"], "user_id": YOU,
                "data": _button(shown, "Deny all")})
            assert tapped.json()["ok"] is True
            await feed.until(lambda: bool(confirmation()))
            question = confirmation()[-1]
            await client.post(f"{url}playground/tap", json={
                "chat_id": YOU, "message_id": question["message_id"], "user_id": YOU,
                "data": _button(question, "Yes")})
            await feed.until(lambda: any("denied" in m.get("text", "")
                                         for m in feed.messages.values()))
            await feed.until(lambda: any("Denied by" in c["text"] for c in feed.cards(YOU)))
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
