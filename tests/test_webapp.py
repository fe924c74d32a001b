"""The Mini App (``[webapp]``): its settings, the real bot serving its page on loopback
beside (or without) the webhook, and ``doctor``'s check of it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_webhook import free_port
from world import World, bot_config, make_world, running_bot

from bot.app import Running
from bot.config import Config, ConfigError, parse_config
from bot.doctor import check_webapp

APP_URL = "https://bot.example.test/app"


def webapp_config(world: World, port: int, **webapp: Any) -> Config:
    data = bot_config(world.tmp, world.tg.api_url)
    data["webapp"] = {"url": APP_URL, "short_name": "details", **webapp}
    data["http"] = {"listen": f"127.0.0.1:{port}"}
    return parse_config(data, base=world.tmp)


@contextlib.asynccontextmanager
async def webapp_bot(world: World, **webapp: Any) -> AsyncIterator[tuple[Running, str]]:
    """The bot (polling) serving the Mini App, and the app's local address."""
    port = free_port()
    config = webapp_config(world, port, **webapp)
    async with running_bot(world, config) as running:
        yield running, f"http://127.0.0.1:{port}/app"


@pytest.mark.parametrize(("webapp", "error"), [
    ({"url": "http://bot.example.test/app"}, "webapp.url: must be an https:// URL"),
    ({"url": "https:///app"}, "webapp.url: must be an https:// URL"),
    ({"url": "https://bot.example.test/app?x=1"}, "webapp.url: must have no query"),
    ({"url": APP_URL, "short_name": "no spaces"}, "webapp.short_name: must be"),
    ({"url": APP_URL, "short_name": "ab"}, "webapp.short_name: must be"),
    ({"short_name": "details"}, "webapp.short_name: set webapp.url too"),
    ({"url": APP_URL, "colour": "blue"}, "webapp.colour: unknown setting"),
    ({"url": 5}, "webapp.url: must be a string"),
])
def test_a_bad_webapp_setting_is_one_clear_error(tmp_path: Path, webapp: dict[str, Any],
                                                 error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"webapp": webapp}, base=tmp_path)
    assert str(raised.value).startswith(error), raised.value


def test_without_a_url_there_is_no_webapp(tmp_path: Path) -> None:
    assert parse_config({}, base=tmp_path).webapp is None
    assert parse_config({"webapp": {}}, base=tmp_path).webapp is None


def test_the_webapp_settings(tmp_path: Path) -> None:
    config = parse_config({"webapp": {"url": APP_URL + "/", "short_name": "details"},
                           "http": {"listen": "127.0.0.1:9000"}}, base=tmp_path)
    assert config.webapp is not None
    assert (config.webapp.url, config.webapp.path, config.webapp.short_name) == \
        (APP_URL, "/app", "details")
    assert (config.webapp.host, config.webapp.port) == ("127.0.0.1", 9000)


async def test_the_bot_serves_the_page_in_polling_mode(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (_, app), \
            httpx.AsyncClient() as client:
        for address in (app, app + "/"):
            page = await client.get(address)
            assert page.status_code == 200
            assert '<meta name="skald-base" content="/app">' in page.text
            assert 'src="/app/static/app.js"' in page.text
        script = await client.get(app + "/static/app.js")
        assert script.status_code == 200
        assert "Telegram" in script.text
        assert (await client.get(app + "/static/style.css")).status_code == 200
        assert (await client.get(app + "/static/index.html")).status_code == 404
        assert (await client.get(app + "/static/..%2Fwebapp.py")).status_code == 404
        # Polling all along: the server is no webhook.
        assert world.tg.calls("setWebhook") == []


async def test_without_webapp_url_nothing_listens(tmp_path: Path) -> None:
    port = free_port()
    async with make_world(tmp_path) as world, running_bot(world), httpx.AsyncClient() as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/app")


async def test_doctor_checks_that_the_running_bot_serves_the_app(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        port = free_port()
        config = webapp_config(world, port)
        assert config.webapp is not None
        down = await check_webapp(config.webapp)
        assert not down.ok
        assert f"nothing answers at http://127.0.0.1:{port}/app/" in down.detail
        assert down.fix is not None and "start the bot" in down.fix
        async with running_bot(world, config):
            up = await check_webapp(config.webapp)
        assert up.ok, up.detail
        assert APP_URL in up.detail
