"""The bot's state on PostgreSQL: ``[storage] url`` (or ``url_file``, or
``SKALD_TELEGRAM_DATABASE_URL``), ``skald-telegram migrate``, a schema ``run`` refuses
(older: migrate first; newer: a newer version wrote it), and ``doctor`` and ``health``
saying where the state is and at which schema, never with the password."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import world
from conftest import eventually
from world import ADA, TOKEN, make_world, running_bot

from bot.cli import main as cli_main
from bot.config import load_config, parse_config
from bot.errors import ConfigError, StoreError
from bot.health import check_status
from bot.replicas import default_name
from bot.store import SCHEMA_VERSION, Store

PASSWORD = "hunter2-not-shown"


def with_password(url: str) -> str:
    """The URL with a password (the test server trusts loopback, so any will do)."""
    return url.replace("postgresql://skald@", f"postgresql://skald:{PASSWORD}@", 1)


def config_file(tmp: Path, url: str, api_url: str = "http://127.0.0.1:9") -> Path:
    path = tmp / "skald-telegram.toml"
    path.write_text(f'[telegram]\ntoken = "{TOKEN}"\napi_url = "{api_url}"\n'
                    f'admins = [{ADA}]\n[state]\ndir = "{tmp / "state"}"\n'
                    f'[storage]\nurl = "{url}"\n')
    return path


def test_migrate_says_what_it_did_and_run_needs_it(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    url = with_password(postgres_url)
    with pytest.raises(StoreError, match="schema version 0, this skald-telegram needs "
                                         f"{SCHEMA_VERSION}: run skald-telegram migrate"):
        Store.open(url)
    config = config_file(tmp_path, url)
    assert cli_main(["migrate", "--config", str(config)]) == 0
    assert cli_main(["migrate", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    shown = url.replace(PASSWORD, "•••")
    assert out.splitlines() == [
        f"{shown} migrated from schema 0 to {SCHEMA_VERSION}",
        f"{shown} is at schema {SCHEMA_VERSION} already: nothing to do",
    ]
    store = Store.open(url)
    assert store.db.schema_version() == SCHEMA_VERSION and store.location == shown
    store.close()


def test_a_newer_schema_is_refused_by_run_and_by_migrate(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    Store.migrate(postgres_url)
    store = Store.open(postgres_url)
    store.db.run("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    store.close()
    with pytest.raises(StoreError, match="written by a newer skald-telegram"):
        Store.open(postgres_url)
    assert cli_main(["migrate", "--config", str(config_file(tmp_path, postgres_url))]) == 1
    err = capsys.readouterr().err
    assert err.startswith("skald-telegram: ") and "newer" in err and len(err.splitlines()) == 1


def test_migrate_on_the_sqlite_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "skald-telegram.toml"
    path.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
    assert cli_main(["migrate", "--config", str(path)]) == 0
    assert cli_main(["migrate", "--config", str(path)]) == 0
    database = tmp_path / "state" / "skald-telegram.sqlite3"
    assert capsys.readouterr().out.splitlines() == [
        f"{database} migrated from schema 0 to {SCHEMA_VERSION}",
        f"{database} is at schema {SCHEMA_VERSION} already: nothing to do",
    ]


def test_the_url_from_the_file_the_table_or_the_environment(tmp_path: Path) -> None:
    url = "postgresql://bot:secret@db.internal/skald"
    (tmp_path / "db-url").write_text(url + "\n")
    assert parse_config({"storage": {"url_file": "db-url"}}, base=tmp_path).database == url
    assert parse_config({}, base=tmp_path).database == tmp_path / "state" \
        / "skald-telegram.sqlite3"
    config = load_config(None, environ={"SKALD_TELEGRAM_DATABASE_URL": url},
                         require_token=False)
    assert config.database == url
    assert "secret" not in repr(config)
    for storage, message in (({"url": "mysql://x"}, "storage.url: must be a postgresql://"),
                             ({"url": url, "url_file": "db-url"}, "not both"),
                             ({"path": "x"}, "storage.path")):
        with pytest.raises(ConfigError, match=message) as refused:
            parse_config({"storage": storage}, base=tmp_path)
        assert "secret" not in str(refused.value)


async def test_doctor_and_health_say_where_the_state_is(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    url = with_password(postgres_url)
    async with make_world(tmp_path) as w:
        config = config_file(tmp_path, url, w.tg.api_url)
        code = await asyncio.to_thread(cli_main, ["doctor", "--config", str(config)])
        out = capsys.readouterr().out
        assert code == 1 and "run skald-telegram migrate" in out
        Store.migrate(url)
        world.STORAGE_URL = url
        try:
            async with running_bot(w, parse_config(world.bot_config(tmp_path, w.tg.api_url),
                                                   base=tmp_path)):
                await w.pair(ADA)
                status = w.config.status_path
                await eventually(lambda: status.exists())
                healthy, detail = check_status(status)
        finally:
            world.STORAGE_URL = None
        code = await asyncio.to_thread(cli_main, ["doctor", "--config", str(config)])
        out = capsys.readouterr().out
        relay_url = w.relay.url
    shown = url.replace(PASSWORD, "•••")
    assert healthy and detail.endswith(f"; state database {shown} (schema {SCHEMA_VERSION})"
                                       f"; replica {default_name()} leads (this one)")
    assert f"✓ database: {shown} (schema {SCHEMA_VERSION})" in out
    assert code == 0 and f"✓ relay {relay_url}: reachable" in out
    assert PASSWORD not in out + detail


def test_the_dialect_keeps_what_sqlite_means(postgres_url: str) -> None:
    """64-bit ids, a JSON list read with ``json_each``, a ``%`` and a ``?`` inside a
    literal, the hidden row number left out of ``SELECT *``, and the audit trail
    append-only."""
    Store.migrate(postgres_url)
    store = Store.open(postgres_url)
    try:
        big = -1001234567890123
        store.chats.set_forbidden(big, True)
        store.db.run("UPDATE chats SET title = '100% sure?' WHERE chat_id = ?", (big,))
        row = store.db.one("SELECT * FROM chats WHERE chat_id = ?", (big,))
        assert row is not None and dict(row) == {"chat_id": big, "title": "100% sure?",
                                                 "kind": "private", "forbidden": 1}
        found = store.db.all("SELECT chat_id FROM chats WHERE chat_id IN"
                             " (SELECT value::bigint FROM json_each(?))", (f"[{big}, 7]",))
        assert [r["chat_id"] for r in found] == [big]
        store.db.run("INSERT INTO audit (at, event) VALUES (1, 'x')")
        for change in ("UPDATE audit SET event = 'y'", "DELETE FROM audit", "TRUNCATE audit"):
            with pytest.raises(StoreError, match="append-only"):
                store.db.run(change)
    finally:
        store.close()


def test_without_the_extra_a_url_says_what_to_install(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "bot.store.postgres", raising=False)
    with pytest.raises(StoreError, match=r"pip install 'skald-telegram\[postgresql\]'"):
        Store.open(postgres_url)


async def test_run_refuses_a_database_not_migrated_in_one_line(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    async with make_world(tmp_path) as w:
        config = config_file(tmp_path, with_password(postgres_url), w.tg.api_url)
        code = await asyncio.to_thread(cli_main, ["run", "--config", str(config)])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1, err
    assert err.endswith(f"needs {SCHEMA_VERSION}: run skald-telegram migrate")
    assert PASSWORD not in err
