"""Webhook mode end to end: the real bot serves its webhook on loopback, the Telegram
stand-in posts updates to it over HTTP with the secret, as Telegram does (reaching it as a
TLS-terminating reverse proxy would)."""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import telegram
from conftest import eventually
from test_bot_kill import bot_process
from test_store_faults import fill, free
from test_update_inbox import taps_recorded
from world import ADA, TOKEN, World, approval, make_world, running_bot

from bot.app import ALLOWED_UPDATES, Running
from bot.config import Config, ConfigError, parse_config
from bot.doctor import diagnose, format_checks
from bot.errors import BotApiError, StoreError
from bot.playground.stub import TelegramStub
from bot.store import Store
from bot.store.updates import KEEP_HANDLED
from bot.tg.webhook import MAX_BODY_BYTES, REFUSALS_LOGGED_EVERY_S, _Refusals

SECRET = "s3cret_webhook-Token"
PUBLIC_URL = "https://bot.example.test/telegram/hook"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def webhook_config(world: World, port: int, **telegram: Any) -> Config:
    return parse_config({
        "telegram": {"token": TOKEN, "api_url": world.tg.api_url, "admins": [ADA],
                     "chat_pace_seconds": 0, "mode": "webhook", "webhook_url": PUBLIC_URL,
                     "webhook_secret": SECRET, **telegram},
        "state": {"dir": str(world.tmp / "state")},
        "http": {"listen": f"127.0.0.1:{port}"},
    }, base=world.tmp)


@contextlib.asynccontextmanager
async def webhook_bot(world: World) -> AsyncIterator[tuple[Running, str]]:
    """The bot in webhook mode, and the local address of its endpoint."""
    port = free_port()
    world.tg.api.webhook.forward_to = f"http://127.0.0.1:{port}"
    async with running_bot(world, webhook_config(world, port)) as running:
        yield running, f"http://127.0.0.1:{port}/telegram/hook"


def held(world: World) -> list[int]:
    with sqlite3.connect(world.tmp / "state" / "skald-telegram.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT update_id FROM updates")]


def statuses(world: World, update_id: int) -> list[int]:
    return [d.status for d in world.tg.api.webhook.deliveries if d.update_id == update_id]


async def test_a_tap_arrives_by_webhook_and_decides(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webhook_bot(world):
        [call] = world.tg.calls("setWebhook")
        assert call.params["url"] == PUBLIC_URL
        assert call.params["secret_token"] == SECRET
        assert call.params["allowed_updates"] == ALLOWED_UPDATES
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_hook"))
        card = await world.wait_card(ADA, "apr_hook")
        world.tap(ADA, card, ADA, "Approve")
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        await world.wait_card(ADA, "apr_hook", lambda m: "Approved by" in m.text)
        assert world.tg.calls("getUpdates") == []
        assert {d.status for d in world.tg.api.webhook.deliveries} == {200}
    assert world.agent.decisions[0].approval_id == "apr_hook"


async def test_a_post_without_the_secret_or_not_an_update_is_refused_and_not_stored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    update = {"update_id": 900, "message": {"message_id": 1, "date": 0, "text": "/help",
                                            "chat": {"id": ADA, "type": "private"}}}
    async with make_world(tmp_path) as world, webhook_bot(world) as (_, endpoint):
        async with httpx.AsyncClient() as client:
            missing = await client.post(endpoint, json=update)
            for _ in range(20):  # logged once: whoever reaches the endpoint cannot fill the log
                await client.post(endpoint, json=update)
            wrong = await client.post(endpoint, json=update,
                                      headers={"X-Telegram-Bot-Api-Secret-Token": SECRET[:-1]})
            good = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
            not_json = await client.post(endpoint, content=b"{not json", headers=good)
            no_id = await client.post(endpoint, json={"message": {}}, headers=good)
            too_large = await client.post(endpoint, headers=good,
                                          content=b" " * (MAX_BODY_BYTES + 1))
        assert (missing.status_code, wrong.status_code) == (403, 403)
        assert (not_json.status_code, no_id.status_code, too_large.status_code) == \
            (400, 400, 413)
        assert held(world) == []
    dropped = [r for r in caplog.records if "not a Telegram update" in r.getMessage()]
    assert len(dropped) == 1
    refused = [r for r in caplog.records if "wrong or missing secret" in r.getMessage()]
    assert len(refused) == 1
    assert not [r for r in caplog.records if r.exc_info]
    assert SECRET not in caplog.text


async def test_the_same_update_posted_twice_is_handled_once(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webhook_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_twice"))
        card = await world.wait_card(ADA, "apr_twice")
        world.tap(ADA, card, ADA, "Approve")
        tap = dict(world.tg.world.updates[-1])
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        world.tg.inject(tap)  # Telegram posts it again (its 200 was lost, say)
        await world.tg.wait_for(lambda tg: statuses(world, tap["update_id"]) == [200, 200])
        help_update = world.tg.send_text(ADA, ADA, "/help")  # handled after the copy
        await world.tg.wait_for(lambda tg: any(
            "How this works" in m.text for m in tg.bot_messages(ADA)))
        assert help_update["update_id"] > tap["update_id"]
    assert taps_recorded(tmp_path / "state" / "skald-telegram.sqlite3", "apr_twice") == 1
    assert len(world.agent.decisions) == 1


def fill_updates(store: Store, after: int) -> None:
    """A full database (:func:`fill`) whose ``updates`` pages take no more row either:
    ballast rows, marked handled, numbered from ``after`` on."""
    fill(store)
    update_id = after
    for size in (1024, 128, 16, 0):
        with contextlib.suppress(StoreError):
            while True:
                update_id += 1
                store.db.run("INSERT INTO updates (update_id, body, done) VALUES (?, ?, 1)",
                             (update_id, "x" * size))


async def test_a_store_that_cannot_write_answers_503_and_the_update_comes_again(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webhook_bot(world) as (running, _):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_full"))
        card = await world.wait_card(ADA, "apr_full")
        await eventually(lambda: [c.message_id for _, c in
                                  running.store.items.open_in_chat(ADA)] == [card.message_id])
        fill_updates(running.store, after=card.message_id + 1000)
        query = world.tap(ADA, card, ADA, "Approve")
        tap_id = world.tg.world.updates[-1]["update_id"]
        await world.tg.wait_for(lambda tg: statuses(world, tap_id).count(503) >= 3)
        assert 200 not in statuses(world, tap_id)
        assert world.agent.decisions == []
        free(running.store)
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        await world.answer_of(query)
        assert statuses(world, tap_id)[-1] == 200
    assert taps_recorded(tmp_path / "state" / "skald-telegram.sqlite3", "apr_full") == 1


async def test_switching_back_to_polling_deletes_the_webhook(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        async with webhook_bot(world):
            await world.pair(ADA)
        assert world.tg.api.webhook.url == PUBLIC_URL  # Telegram keeps it
        async with running_bot(world):
            world.tg.send_text(ADA, ADA, "/help")
            await world.tg.wait_for(lambda tg: any(
                "How this works" in m.text for m in tg.bot_messages(ADA)))
        assert world.tg.calls("deleteWebhook")
        assert world.tg.api.webhook.url == ""


async def test_an_address_already_taken_stops_the_start_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with make_world(tmp_path) as world:
            with pytest.raises(BotApiError, match=f"http.listen: cannot listen on "
                                                  f"127.0.0.1:{port}"):
                async with running_bot(world, webhook_config(world, port)):
                    pass
            assert world.tg.calls("setWebhook") == []


async def test_telegram_refusing_the_webhook_stops_the_start(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.fail_next("setWebhook", error_code=400,
                           description="Bad Request: bad webhook: Failed to resolve host")
        with pytest.raises(BotApiError, match="refused the webhook"):
            async with running_bot(world, webhook_config(world, free_port())):
                pass


@pytest.mark.parametrize(("telegram", "http", "error"), [
    ({"mode": "hook"}, {}, 'telegram.mode: must be "polling" or "webhook"'),
    ({"mode": "webhook", "webhook_secret": SECRET}, {}, "telegram.webhook_url: required"),
    ({"mode": "webhook", "webhook_url": PUBLIC_URL}, {}, "telegram.webhook_secret: required"),
    ({"webhook_url": "http://bot.example.test/"}, {}, "telegram.webhook_url: must be an "
                                                      "https:// URL"),
    ({"webhook_url": PUBLIC_URL + "?token=1"}, {}, "telegram.webhook_url: must have no query"),
    ({"webhook_secret": "has space"}, {}, "telegram.webhook_secret: must be 1 to 256"),
    ({"webhook_secret": ""}, {}, "telegram.webhook_secret: must be 1 to 256"),
    ({"webhook_secret": "x" * 257}, {}, "telegram.webhook_secret: must be 1 to 256"),
    ({"webhook_secret": SECRET, "webhook_secret_file": "s"}, {}, "not both"),
    ({"webhook_secret_file": "missing"}, {}, "telegram.webhook_secret_file: cannot read"),
    ({}, {"listen": "8443"}, "http.listen: must be host:port"),
    ({}, {"listen": "127.0.0.1:99999"}, "http.listen: must be host:port"),
    ({}, {"listen": "127.0.0.1:"}, "http.listen: must be host:port"),
])
def test_webhook_settings_are_checked_with_one_line_errors(
        tmp_path: Path, telegram: dict[str, Any], http: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config({"telegram": telegram, "http": http}, base=tmp_path)
    assert error in str(refused.value)
    assert "\n" not in str(refused.value)
    assert "has space" not in str(refused.value)


def test_the_secret_may_come_from_a_file_and_ipv6_listens(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text(SECRET + "\n")
    config = parse_config({
        "telegram": {"mode": "webhook", "webhook_url": PUBLIC_URL,
                     "webhook_secret_file": "secret"},
        "http": {"listen": "[::1]:9443"}}, base=tmp_path)
    assert config.webhook is not None
    assert (config.webhook.secret, config.webhook.host, config.webhook.port,
            config.webhook.path) == (SECRET, "::1", 9443, "/telegram/hook")
    assert SECRET not in repr(config)
    assert parse_config({"telegram": {"webhook_url": PUBLIC_URL}}, base=tmp_path).webhook \
        is None  # polling stays the default


async def test_doctor_checks_the_webhook_and_that_its_address_can_be_listened_on(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        def config_file(port: int) -> str:
            path = tmp_path / "skald-telegram.toml"
            path.write_text(
                f'[telegram]\ntoken = "{TOKEN}"\napi_url = "{world.tg.api_url}"\n'
                f'mode = "webhook"\nwebhook_url = "{PUBLIC_URL}"\n'
                f'webhook_secret = "{SECRET}"\n[http]\nlisten = "127.0.0.1:{port}"\n'
                f'[state]\ndir = "{tmp_path / "state"}"\n')
            return str(path)

        free_one = free_port()
        [ok] = [c for c in await diagnose(config_file(free_one), environ={})
                if c.name == "webhook"]
        assert ok.ok, ok
        assert f"127.0.0.1:{free_one}/telegram/hook" in ok.detail
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            checks = await diagnose(config_file(port), environ={})
        [failed] = [c for c in checks if c.name == "webhook"]
        assert not failed.ok
        assert f"cannot listen on 127.0.0.1:{port}" in failed.detail
        assert SECRET not in format_checks(checks)


async def test_the_bot_process_in_webhook_mode_decides_a_tap_posted_to_it(
        tmp_path: Path) -> None:
    port = free_port()
    async with make_world(tmp_path) as world:
        world.tg.api.webhook.forward_to = f"http://127.0.0.1:{port}"
        settings = (f'mode = "webhook"\nwebhook_url = "{PUBLIC_URL}"\n'
                    f'webhook_secret = "{SECRET}"\n[http]\nlisten = "127.0.0.1:{port}"\n')
        async with bot_process(world, settings=settings):
            await world.tg.wait_for(lambda tg: bool(tg.calls("setWebhook")), timeout=20)
            await world.pair(ADA)
            world.agent.submit_approval(approval("apr_process"))
            card = await world.wait_card(ADA, "apr_process", timeout=20)
            query = world.tap(ADA, card, ADA, "Approve")
            await world.agent.wait_for(lambda a: len(a.decisions) == 1, timeout=20)
            await world.tg.wait_for(lambda tg: query in tg.callback_answers)
        assert world.tg.calls("getUpdates") == []
        assert SECRET not in (tmp_path / "bot.log").read_text()


def test_pruning_keeps_recent_handled_ids_so_a_late_copy_is_still_ignored(
        tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    for update_id in range(1, KEEP_HANDLED + 501):
        store.updates.add(update_id, "{}")
        store.updates.done(update_id)
    store.updates.prune()
    oldest_kept = 501
    store.updates.add(oldest_kept, '{"update_id": 501}')  # posted again
    store.updates.add(oldest_kept - 1, '{"update_id": 500}')  # too old to be known
    assert store.updates.pending() == [(oldest_kept - 1, '{"update_id": 500}')]
    assert store.updates.next_offset() == KEEP_HANDLED + 501
    store.close()


async def test_the_stand_in_refuses_what_telegram_refuses_about_webhooks() -> None:
    async with TelegramStub(token=TOKEN) as tg:
        bot = telegram.Bot(TOKEN, base_url=f"{tg.api_url}/bot")
        async with bot:
            with pytest.raises(telegram.error.BadRequest, match="must be provided for webhook"):
                await bot.set_webhook("http://bot.example.test/hook")
            with pytest.raises(telegram.error.BadRequest, match="unallowed characters"):
                await bot.set_webhook(PUBLIC_URL, secret_token="no spaces")
            await bot.set_webhook(PUBLIC_URL, secret_token=SECRET, allowed_updates=["message"])
            info = await bot.get_webhook_info()
            assert (info.url, info.allowed_updates) == (PUBLIC_URL, ("message",))
            with pytest.raises(telegram.error.Conflict, match="while webhook is active"):
                await bot.get_updates()
            await bot.delete_webhook()
            assert (await bot.get_webhook_info()).url == ""
            assert await bot.get_updates() == ()


def test_refusals_are_logged_once_a_minute_each_with_how_many_were_not(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    refusals = _Refusals(lambda: now[0])
    for _ in range(5):
        refusals.log("refused a webhook request", "the last from 10.0.0.9")
    refusals.log("refused a webhook body", "over 1 byte")
    now[0] += REFUSALS_LOGGED_EVERY_S
    refusals.log("refused a webhook request", "the last from 10.0.0.9")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a webhook request: the last from 10.0.0.9",
        "refused a webhook body: over 1 byte",
        "refused a webhook request: the last from 10.0.0.9 (4 more since the last such line)",
    ]
