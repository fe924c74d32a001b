"""The Mini App (``[webapp]``): its settings, the real bot serving its page and API on
loopback, the API's checks of ``initData`` and chat membership, what it shows (masked, and
revealed for approvers with an audit entry), and ``doctor``'s check of it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import eventually
from test_webhook import free_port
from world import (
    ADA,
    BOB,
    CAROL,
    DAVE,
    TOKEN,
    World,
    approval,
    bot_config,
    make_world,
    question,
    running_bot,
)

from bot import durable
from bot.app import Running
from bot.config import Config, ConfigError, parse_config
from bot.doctor import check_webapp
from bot.playground.stub import StoredMessage
from bot.playground.stub.decoding import Upload
from bot.protocol.encoding import args_sha256
from bot.store import Store
from bot.store.db import MIGRATIONS, PLACE
from bot.tg.initdata import sign_init_data

APP_URL = "https://bot.example.test/app"
OPS_GROUP = -1001234
SECRET = "sk-live-51H8xQ2eZvKYlo2C"


def webapp_config(world: World, port: int, chats: list[dict[str, Any]] | None = None,
                  **webapp: Any) -> Config:
    data = bot_config(world.tmp, world.tg.api_url)
    if chats:
        data["chats"] = chats
    data["webapp"] = {"url": APP_URL, "short_name": "details", **webapp}
    data["http"] = {"listen": f"127.0.0.1:{port}"}
    return parse_config(data, base=world.tmp)


@contextlib.asynccontextmanager
async def webapp_bot(world: World, chats: list[dict[str, Any]] | None = None,
                     **webapp: Any) -> AsyncIterator[tuple[Running, str]]:
    """The bot (polling) serving the Mini App, and the app's local address."""
    port = free_port()
    config = webapp_config(world, port, chats, **webapp)
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
        assert 'src="/app/static/highlight.js"' in page.text
        assert "function tokens" in (await client.get(app + "/static/highlight.js")).text
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


def init_data(world: World, user: int, *, token: str = TOKEN, age_s: float = 60) -> str:
    """``initData`` as Telegram signs it for ``user``, ``age_s`` old on the bot's clock."""
    fields = {"query_id": "AAHdF6IQAAAAAN0XohDhrOrc",
              "user": json.dumps({"id": user, "first_name": f"user{user}"}),
              "auth_date": str(int(world.clock.time() - age_s))}
    return sign_init_data(fields, token)


async def ref_of(running: Running, chat_id: int, card: StoredMessage) -> str:
    """The reference of the card behind a posted message (once the bot noted the post)."""
    await eventually(lambda: running.store.cards.by_message(chat_id, card.message_id)
                     is not None)
    row = running.store.cards.by_message(chat_id, card.message_id)
    assert row is not None and row.ref is not None
    return row.ref


def secret_approval(item_id: str) -> dict[str, Any]:
    diff = "\n".join(f"+line {n}" for n in range(3000)) + f"\n+key = {SECRET}"
    return approval(item_id, summary="Deploy web", blocks=[
        {"type": "key_value", "key": "API key", "value": SECRET, "value_type": "secret"},
        {"type": "block", "label": "Diff", "value": diff, "value_type": "diff"},
    ], arguments={"api_key": SECRET, "service": "web", "diff": diff})


async def get(client: httpx.AsyncClient, url: str, data: str | None) -> httpx.Response:
    headers = {"Authorization": f"tma {data}"} if data is not None else {}
    return await client.get(url, headers=headers)


async def test_a_card_gets_a_random_reference_apart_from_its_button_token(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, _):
        await world.pair(ADA)
        for n in range(2):
            world.agent.submit_approval(approval(f"apr_ref{n}"))
        refs = []
        for n in range(2):
            card = await world.wait_card(ADA, f"apr_ref{n}")
            ref = await ref_of(running, ADA, card)
            row = running.store.cards.by_ref(ref)
            assert row is not None and row.item_id == f"apr_ref{n}"
            assert len(ref) >= 22 and ref != row.token and "apr_" not in ref
            refs.append(ref)
        assert refs[0] != refs[1]


def test_cards_stored_before_references_get_one(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    old = durable.open_sqlite(path, PLACE, MIGRATIONS[:1])
    old.execute("INSERT INTO cards (agent_id, item_id, chat_id, token) VALUES"
                " ('ag', 'apr_1', 1, 'tok1'), ('ag', 'apr_2', 1, 'tok2')")
    old.commit()
    old.close()
    store = Store.open(path)
    try:
        refs = [card.ref for card in (store.cards.by_token("tok1"), store.cards.by_token("tok2"))
                if card is not None]
    finally:
        store.close()
    assert len(refs) == 2 and len(set(refs)) == 2 and all(len(r or "") == 32 for r in refs)


async def test_the_api_refuses_forged_stale_foreign_and_missing_init_data(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app), \
            httpx.AsyncClient() as client:
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_auth"))
        url = f"{app}/api/card/{await ref_of(running, ADA, await world.wait_card(ADA, 'apr_auth'))}"
        good = init_data(world, ADA)
        assert (await get(client, url, good)).status_code == 200
        forged = good.replace(f"%22id%22%3A+{ADA}", f"%22id%22%3A+{BOB}")
        assert forged != good
        for data in (None, forged, init_data(world, ADA, age_s=3601),
                     init_data(world, ADA, token="654321:OTHER-bot"), "garbage"):
            response = await get(client, url, data)
            assert response.status_code == 401, (data, response.text)
            assert "apr_auth" not in response.text
        unknown = await get(client, f"{app}/api/card/{'A' * 22}", good)
        assert unknown.status_code == 404
        assert (await get(client, f"{app}/api/card/apr_auth", good)).status_code == 404


async def test_who_may_see_a_group_card_and_what_they_see(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        chats = [{"id": OPS_GROUP, "approvers": [ADA], "secrets": "spoiler"}]
        async with webapp_bot(world, chats) as (running, app), httpx.AsyncClient() as client:
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(secret_approval("apr_group"))
            card = await world.wait_card(OPS_GROUP, "Deploy web")
            url = f"{app}/api/card/{await ref_of(running, OPS_GROUP, card)}"
            outsider = await get(client, url, init_data(world, DAVE))
            assert outsider.status_code == 403
            assert SECRET not in outsider.text and "Deploy" not in outsider.text
            observer = await get(client, url, init_data(world, BOB))
            assert observer.status_code == 200
            shown = observer.json()
            assert SECRET not in observer.text
            assert (shown["approver"], shown["masked"], shown["kind"]) == (False, True, "approval")
            assert shown["blocks"][0]["value"] == "••••••"
            diff = shown["blocks"][1]["value"]
            assert diff.count("\n") == 3000 and "+line 2999" in diff  # all of it, unabridged
            assert shown["arguments"]["api_key"] == "••••••"
            assert shown["arguments"]["service"] == "web"
            assert (await client.post(url + "/reveal", headers={
                "Authorization": f"tma {init_data(world, BOB)}"})).status_code == 403
            assert (await client.post(url + "/reveal", headers={
                "Authorization": f"tma {init_data(world, DAVE)}"})).status_code == 403
            assert running.store.audit.rows(events=("reveal",)) == []
            approver = await get(client, url, init_data(world, ADA))
            assert approver.json()["approver"] is True and SECRET not in approver.text
            revealed = await client.post(url + "/reveal", headers={
                "Authorization": f"tma {init_data(world, ADA)}"})
            assert revealed.status_code == 200
            assert revealed.json()["blocks"][0]["value"] == SECRET
            assert revealed.json()["arguments"]["api_key"] == SECRET
            [entry] = running.store.audit.rows(events=("reveal",))
            assert (entry.user_id, entry.chat_id, entry.item_id) == (ADA, OPS_GROUP, "apr_group")


def everything_sent(world: World) -> list[str]:
    """The text of every request the bot made to Telegram: messages, edits, buttons,
    alerts, and the names and contents of the files it sent."""
    texts: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Upload):
            texts.extend((value.filename, value.data.decode("utf-8", "replace")))
        elif isinstance(value, dict):
            texts.extend(str(key) for key in value)
            for inner in value.values():
                walk(inner)
        elif isinstance(value, list | tuple):
            for inner in value:
                walk(inner)
        else:
            texts.append(str(value))

    for request in world.tg.requests:
        if request.method != "getUpdates":
            walk(request.params)
    return texts


async def test_with_the_app_no_secret_goes_into_a_telegram_message(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app), \
            httpx.AsyncClient() as client:
        await world.pair(ADA)
        for n in range(2):
            item = secret_approval(f"apr_sec{n}")
            item["summary"] = f"Deploy web {n} with {SECRET}"
            world.agent.submit_approval(item)
        card = await world.wait_card(ADA, "Deploy web 0")
        await world.wait_card(ADA, "Deploy web 1")
        assert "API key: 🔒 reveal in Details" in card.text
        assert "tg-spoiler" not in (card.html or "")
        await world.tg.wait_for(lambda tg: len(tg.calls("sendDocument")) == 2)
        await world.tg.wait_for(lambda tg: any("2 requests" in m.text
                                               for m in tg.bot_messages(ADA)))
        world.tap(ADA, card, ADA, "Approve")
        await world.wait_card(ADA, "Deploy web 0", lambda m: "Approved by" in m.text)
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        # The app still reveals it to the approver (audited).
        url = f"{app}/api/card/{await ref_of(running, ADA, card)}"
        shown = (await get(client, url, init_data(world, ADA))).json()
        assert (shown["masked"], shown["revealable"]) == (True, True)
        revealed = await client.post(url + "/reveal", headers={
            "Authorization": f"tma {init_data(world, ADA)}"})
        assert revealed.json()["blocks"][0]["value"] == SECRET
        assert len(running.store.audit.rows(events=("reveal",))) == 1
        sent = everything_sent(world)
        assert any("reveal in Details" in text for text in sent)
        assert [text for text in sent if SECRET in text] == []


async def test_without_the_app_a_private_card_still_spoilers_its_secret(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(secret_approval("apr_spoiler"))
        card = await world.wait_card(ADA, "Deploy web")
        assert f"<tg-spoiler>{SECRET}</tg-spoiler>" in (card.html or "")
        assert "reveal in Details" not in card.text


@pytest.mark.parametrize(("settings", "webapp", "shown"), [
    ({}, {}, "API key: •••••• (24 chars)"),
    ({"secrets": "spoiler"}, {}, "API key: 🔒 reveal in Details"),
    # No Details button in the group to reveal it with: masked as without the app.
    ({"secrets": "spoiler"}, {"short_name": ""}, "API key: •••••• (24 chars)"),
])
async def test_a_group_reveals_secrets_only_where_it_shows_them(
        tmp_path: Path, settings: dict[str, Any], webapp: dict[str, Any], shown: str) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        chats = [{"id": OPS_GROUP, "approvers": [ADA], **settings}]
        async with webapp_bot(world, chats, **webapp) as (running, app), \
                httpx.AsyncClient() as client:
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(secret_approval("apr_group"))
            card = await world.wait_card(OPS_GROUP, "Deploy web")
            assert shown in card.text
            url = f"{app}/api/card/{await ref_of(running, OPS_GROUP, card)}"
            revealable = bool(settings)
            details = (await get(client, url, init_data(world, ADA))).json()
            assert (details["approver"], details["revealable"]) == (True, revealable)
            revealed = await client.post(url + "/reveal", headers={
                "Authorization": f"tma {init_data(world, ADA)}"})
            assert revealed.status_code == (200 if revealable else 403)
            assert (SECRET in revealed.text) is revealable
            assert len(running.store.audit.rows(events=("reveal",))) == int(revealable)
            assert [text for text in everything_sent(world) if SECRET in text] == []


async def test_a_private_card_is_only_for_its_user(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app), \
            httpx.AsyncClient() as client:
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_private"))
        card = await world.wait_card(ADA, "apr_private")
        url = f"{app}/api/card/{await ref_of(running, ADA, card)}"
        assert (await get(client, url, init_data(world, CAROL))).status_code == 403
        mine = (await get(client, url, init_data(world, ADA))).json()
        assert mine["id"] == "apr_private" and mine["votes"] == [] and mine["required"] == 1
        assert mine["state"] == "open" and mine["expires_at"] is None


def details_of(card: StoredMessage) -> dict[str, Any] | None:
    found = [b for b in card.buttons() if b["text"] == "🔍 Details"]
    assert len(found) <= 1
    return found[0] if found else None


async def test_a_private_card_opens_the_app_with_a_web_app_button(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, _):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_button"))
        card = await world.wait_card(ADA, "apr_button")
        ref = await ref_of(running, ADA, card)
        assert details_of(card) == {"text": "🔍 Details",
                                    "web_app": {"url": f"{APP_URL}?ref={ref}"}}
        assert card.buttons()[-1]["text"] == "🔍 Details"
        assert "Approve" in card.buttons()[0]["text"]


async def test_a_group_card_links_to_the_direct_link_app(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        async with webapp_bot(world) as (running, _):
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_link"))
            card = await world.wait_card(OPS_GROUP, "apr_link")
            ref = await ref_of(running, OPS_GROUP, card)
            username = running.application.bot.username
            assert details_of(card) == {
                "text": "🔍 Details", "url": f"https://t.me/{username}/details?startapp={ref}"}


async def test_no_details_button_in_a_group_without_short_name_or_without_the_app(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        async with webapp_bot(world, short_name="") as _:
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_none"))
            card = await world.wait_card(OPS_GROUP, "apr_none")
            assert details_of(card) is None and card.buttons() != []
    async with make_world(tmp_path / "plain") as world, running_bot(world):
        await world.pair(ADA)
        world.agent.submit_approval(approval("apr_plain"))
        card = await world.wait_card(ADA, "apr_plain")
        assert details_of(card) is None and card.buttons() != []


async def test_the_stand_in_refuses_web_app_buttons_where_telegram_does(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, httpx.AsyncClient() as client:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB])
        world.tg.send_text(ADA, ADA, "/start")

        async def send(chat_id: int, button: dict[str, Any]) -> dict[str, Any]:
            response = await client.post(f"{world.tg.api_url}/bot{TOKEN}/sendMessage", json={
                "chat_id": chat_id, "text": "hi",
                "reply_markup": {"inline_keyboard": [[{"text": "Open", **button}]]}})
            return dict(response.json())

        web_app = {"web_app": {"url": APP_URL}}
        assert (await send(ADA, web_app))["ok"] is True
        refused = await send(OPS_GROUP, web_app)
        assert (refused["ok"], refused["description"]) == \
            (False, "Bad Request: BUTTON_TYPE_INVALID")
        plain = await send(ADA, {"web_app": {"url": "http://bot.example.test/app"}})
        assert plain["description"] == "Bad Request: BUTTON_URL_INVALID"
        link = await send(OPS_GROUP, {"url": "https://t.me/bot/details?startapp=abc"})
        assert link["ok"] is True


async def decide(client: httpx.AsyncClient, url: str, data: str,
                 **body: Any) -> httpx.Response:
    return await client.post(url + "/decide", json=body,
                             headers={"Authorization": f"tma {data}"})


async def test_an_approval_from_the_app_is_a_signed_decision_and_edits_the_card(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app), \
            httpx.AsyncClient() as client:
        await world.pair(ADA)
        item = approval("apr_app")
        world.agent.submit_approval(item)
        card = await world.wait_card(ADA, "apr_app")
        url = f"{app}/api/card/{await ref_of(running, ADA, card)}"
        for bad in ({"action": "approve", "text": "x"}, {"action": "deny_with_reason"},
                    {"action": "grant"}, {"action": "answer", "option": True}):
            response = await decide(client, url, init_data(world, ADA), **bad)
            assert response.status_code == 400, bad
        assert world.agent.decisions == []
        response = await decide(client, url, init_data(world, ADA), action="approve")
        assert response.json() == {"outcome": "decided", "state": "approved"}
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        [decision] = world.agent.decisions
        assert (decision.approval_id, decision.decision) == ("apr_app", "approve")
        assert decision.decided_by.telegram_user_id == ADA
        assert decision.args_sha256 == args_sha256(item["arguments"])
        assert world.agent.refused == []
        card = await world.wait_card(ADA, "apr_app", lambda m: "Approved by" in m.text)
        assert card.buttons() == []
        again = await decide(client, url, init_data(world, ADA), action="deny")
        assert (again.status_code, again.json()["outcome"]) == (409, "refused:closed")
        taps = running.store.audit.rows(events=("tap",))
        assert [(t.user_id, t.detail["action"], t.detail["allowed"]) for t in taps] == [
            (ADA, "approve", True), (ADA, "deny", False)]


async def test_the_app_counts_towards_a_quorum_and_denies_with_a_reason(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, CAROL, DAVE])
        chats = [{"id": OPS_GROUP, "approvers": [ADA, BOB, CAROL], "required_approvals": 2}]
        async with webapp_bot(world, chats) as (running, app), httpx.AsyncClient() as client:
            await world.pair(OPS_GROUP)
            world.agent.submit_approval(approval("apr_quorum"))
            card = await world.wait_card(OPS_GROUP, "apr_quorum")
            url = f"{app}/api/card/{await ref_of(running, OPS_GROUP, card)}"
            observer = await decide(client, url, init_data(world, DAVE), action="approve")
            assert (observer.status_code, observer.json()["outcome"]) == \
                (409, "refused:not_approver")
            first = await decide(client, url, init_data(world, ADA), action="approve")
            assert first.json() == {"outcome": "tallied", "state": "open"}
            card = await world.wait_card(OPS_GROUP, "apr_quorum", lambda m: "1 of 2" in m.text)
            details = (await get(client, url, init_data(world, BOB))).json()
            assert [v["user_id"] for v in details["votes"]] == [ADA]
            assert details["required"] == 2
            assert world.agent.decisions == []
            denied = await decide(client, url, init_data(world, BOB), action="deny_with_reason",
                                  text="  not during the freeze ")
            assert denied.json() == {"outcome": "decided", "state": "denied"}
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            decision = world.agent.decisions[0]
            assert (decision.decision, decision.reason, decision.decided_by.telegram_user_id) \
                == ("deny", "not during the freeze", BOB)
            await world.wait_card(OPS_GROUP, "apr_quorum",
                                  lambda m: "not during the freeze" in m.text
                                  and m.buttons() == [])


async def test_a_question_is_answered_from_the_app(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app), \
            httpx.AsyncClient() as client:
        await world.pair(ADA)
        world.agent.submit_clarification(question("clr_app", ["staging", "production"]))
        card = await world.wait_card(ADA, "Which environment")
        url = f"{app}/api/card/{await ref_of(running, ADA, card)}"
        shown = (await get(client, url, init_data(world, ADA))).json()
        assert (shown["kind"], shown["options"]) == ("clarification", ["staging", "production"])
        wrong = await decide(client, url, init_data(world, ADA), action="answer", option=5)
        assert wrong.json()["outcome"] == "refused:wrong_button"
        answered = await decide(client, url, init_data(world, ADA), action="answer", option=1)
        assert answered.json()["outcome"] == "answered"
        await world.agent.wait_for(lambda a: len(a.answers) == 1)
        assert world.agent.answers[0].answer == "production"
        await world.tg.wait_for(lambda tg: world.card(ADA, "Which environment").buttons() == [])
