"""Edits in the Mini App: a card edited in the chat shows there as the edited call (who
edited, the change, the arguments as they will run) and is approved as the revision shown;
an approver edits in the app as by a reply to the chat's edit prompt — with the real bot,
relay and test agent against the Bot API stand-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from test_batch_digest import digest_showing
from test_edits_bot import bash, edit
from test_webapp import OPS_GROUP, SECRET, decide, get, ref_of, webapp_bot
from world import ADA, BOB, CAROL, DAVE, TOKEN, World, approval, make_world

from bot.app import Running
from bot.playground.stub import StoredMessage
from bot.protocol.encoding import args_sha256
from bot.tg.initdata import sign_init_data

NAMES = {ADA: "Ada", BOB: "Bob", CAROL: "Carol", DAVE: "Dave"}


def signed(world: World, user: int) -> str:
    """``initData`` for ``user`` by first name, as Telegram signs it."""
    fields = {"query_id": "AAHdF6IQAAAAAN0XohDhrOrc",
              "user": json.dumps({"id": user, "first_name": NAMES[user]}),
              "auth_date": str(int(world.clock.time() - 60))}
    return sign_init_data(fields, TOKEN)


async def app_edit(client: httpx.AsyncClient, url: str, data: str,
                   **body: Any) -> httpx.Response:
    return await client.post(url + "/edit", json=body, headers={"Authorization": f"tma {data}"})


async def posted(world: World, running: Running, app: str, chat_id: int,
                 item: dict[str, Any]) -> tuple[StoredMessage, str]:
    """Pair with the chat, have the agent ask ``item``, and its card and API address."""
    await world.pair(chat_id)
    world.agent.submit_approval(item)
    card = await world.wait_card(chat_id, item["id"])
    return card, f"{app}/api/card/{await ref_of(running, chat_id, card)}"


def group(world: World, **chat: Any) -> list[dict[str, Any]]:
    """The Ops group: Ada and Bob approve, Carol watches, Dave is not in it."""
    world.tg.add_group(OPS_GROUP, "Ops", admins=[ADA], members=[BOB, CAROL])
    return [{"id": OPS_GROUP, "approvers": [ADA, BOB], **chat}]


async def test_a_card_edited_in_the_chat_shows_and_is_approved_edited_in_the_app(
        tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app), \
            httpx.AsyncClient() as client:
        item = bash("apr_ce")
        card, url = await posted(world, running, app, ADA, item)
        before = (await get(client, url, signed(world, ADA))).json()
        assert (before["revision"], before["edit"], before["editable"]) == (0, None, ["command"])
        assert before["edit_values"] == {"command": "rm -rf build"}

        await edit(world, ADA, card, ADA, "rm -rf build/cache")
        await world.wait_card(ADA, "Edited by Ada", lambda m: "Approve edited" in str(
            m.buttons()))
        shown = (await get(client, url, signed(world, ADA))).json()
        assert shown["revision"] == 1
        assert (shown["edit"]["by"], shown["edit"]["user_id"]) == ("Ada Lovelace", ADA)
        [change] = shown["edit"]["changes"]
        assert (change["key"], change["before"], change["after"]) == \
            ("command", "rm -rf build", "rm -rf build/cache")
        assert change["diff"] == "- rm -rf build\n+ rm -rf build/cache"
        assert shown["arguments"] == {"command": "rm -rf build/cache", "timeout": 30}
        assert shown["edit_values"] == {"command": "rm -rf build/cache"}
        # The agent's description of its own call is not what runs: not shown.
        assert (shown["summary"], shown["blocks"]) == ("", [])

        original = await decide(client, url, signed(world, ADA), action="approve")
        assert (original.status_code, original.json()["outcome"]) == (409, "refused:outdated")
        for bad in ({"action": "approve_edited"}, {"action": "approve_edited", "revision": "1"},
                    {"action": "approve_edited", "revision": 0},
                    {"action": "approve", "revision": 1},
                    {"action": "approve_edited", "revision": 1, "text": "x"}):
            assert (await decide(client, url, signed(world, ADA), **bad)).status_code == 400
        approved = await decide(client, url, signed(world, ADA), action="approve_edited",
                                revision=1)
        assert approved.json() == {"outcome": "decided", "state": "approved"}
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        [decision] = world.agent.decisions
        edited = {"command": "rm -rf build/cache", "timeout": 30}
        assert (decision.decision, decision.arguments) == ("approve", edited)
        assert decision.edited_sha256 == args_sha256(edited)
        assert decision.args_sha256 == args_sha256(item["arguments"])
        await world.wait_card(ADA, "Edited by Ada", lambda m: "Approved by" in m.text
                              and not m.buttons())


async def test_an_approver_edits_in_the_app_as_by_a_reply_in_the_chat(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world:
        chats = group(world, required_approvals=2)
        async with webapp_bot(world, chats) as (running, app), httpx.AsyncClient() as client:
            _, url = await posted(world, running, app, OPS_GROUP,
                                  bash("apr_ae", editable=["command", "timeout"]))
            world.agent.submit_approval(bash("apr_other"))
            await digest_showing(world, OPS_GROUP, "2 requests")
            assert (await decide(client, url, signed(world, BOB), action="approve")).json() \
                == {"outcome": "tallied", "state": "open"}

            forged = await app_edit(client, url, signed(world, ADA) + "x", key="command",
                                    text="ls", revision=0)
            assert forged.status_code == 401
            outsider = await app_edit(client, url, signed(world, DAVE), key="command",
                                      text="ls", revision=0)
            assert outsider.status_code == 403
            for bad in ({"key": "command", "text": "ls"}, {"key": "command", "revision": 0},
                        {"key": 1, "text": "ls", "revision": 0},
                        {"key": "command", "text": "ls", "revision": True}):
                assert (await app_edit(client, url, signed(world, ADA), **bad)).status_code \
                    == 400
            problems = [
                ("timeout", "a minute", "the new value must be a number"),
                ("command", "rm -rf build\u200b", "invisible or control character"),
                ("command", "curl -H 'Authorization: Bearer abcdef0123456789' x",
                 "password, token or key"),
            ]
            for key, text, problem in problems:
                refused = await app_edit(client, url, signed(world, ADA), key=key, text=text,
                                         revision=0)
                assert refused.status_code == 422 and problem in refused.json()["error"], \
                    refused.text
            for text in ("ls", problems[2][1]):
                observer = await app_edit(client, url, signed(world, CAROL), key="command",
                                          text=text, revision=0)
                assert (observer.status_code, observer.json()) == \
                    (409, {"outcome": "refused:not_approver"})
            assert running.store.audit.rows(events=("edit",)) == []

            saved = await app_edit(client, url, signed(world, ADA), key="command",
                                   text="rm -rf build/tmp", revision=0)
            assert saved.status_code == 200, saved.text
            shown = saved.json()
            assert (shown["revision"], shown["votes"]) == (1, [])  # the count restarts
            assert shown["arguments"] == {"command": "rm -rf build/tmp", "timeout": 30}
            assert shown["edit"]["by"] == "Ada"
            # The chat's card is the edited version, and the digest leaves it out.
            edited = await world.wait_card(OPS_GROUP, "Edited by Ada",
                                           lambda m: "Approve edited" in str(m.buttons()))
            assert "- rm -rf build\n+ rm -rf build/tmp" in edited.text
            assert "1 of 2" not in edited.text
            await digest_showing(world, OPS_GROUP, "an edit is in progress")
            [made] = running.store.audit.rows(events=("edit",))
            assert (made.user_id, made.detail["key"], made.detail["before"],
                    made.detail["after"], made.detail["revision"]) == \
                (ADA, "command", "rm -rf build", "rm -rf build/tmp", 1)
            assert made.detail["votes_dropped"] == [{"user_id": BOB, "name": "Bob"}]

            # Everyone approves the edited version: Bob from the chat, Ada from the app.
            world.tap(OPS_GROUP, edited, BOB, "Approve edited")
            await world.wait_card(OPS_GROUP, "Edited by Ada", lambda m: "1 of 2" in m.text)
            assert world.agent.decisions == []
            approved = await decide(client, url, signed(world, ADA), action="approve_edited",
                                    revision=1)
            assert approved.json() == {"outcome": "decided", "state": "approved"}
            await world.agent.wait_for(lambda a: len(a.decisions) == 1)
            assert world.agent.decisions[0].arguments == {"command": "rm -rf build/tmp",
                                                          "timeout": 30}


async def test_a_stale_revision_is_refused(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world, group(world)) as (running, app), \
            httpx.AsyncClient() as client:
        _, url = await posted(world, running, app, OPS_GROUP, bash("apr_st"))
        first = await app_edit(client, url, signed(world, ADA), key="command",
                               text="rm -rf build/a", revision=0)
        assert first.json()["revision"] == 1
        # Bob edits again in the chat while Ada looks at revision 1 in the app.
        edited = await world.wait_card(OPS_GROUP, "Edited by Ada",
                                       lambda m: bool(m.buttons()))
        await edit(world, OPS_GROUP, edited, BOB, "rm -rf build/b", label="Edit again")
        await world.wait_card(OPS_GROUP, "Edited by Bob", lambda m: bool(m.buttons()))

        stale = await decide(client, url, signed(world, ADA), action="approve_edited",
                             revision=1)
        assert (stale.status_code, stale.json()["outcome"]) == (409, "refused:outdated")
        again = await app_edit(client, url, signed(world, ADA), key="command",
                               text="rm -rf build/c", revision=1)
        assert (again.status_code, again.json()) == (409, {"outcome": "refused:outdated"})
        assert world.agent.decisions == []
        refused = [(r.user_id, r.detail["action"], r.detail["refusal"])
                   for r in running.store.audit.rows(events=("tap",))
                   if not r.detail["allowed"]]
        assert refused == [(ADA, "approve_edited", "outdated"), (ADA, "edit", "outdated")]
        shown = (await get(client, url, signed(world, ADA))).json()
        assert (shown["revision"], shown["arguments"]["command"]) == (2, "rm -rf build/b")
        denied = await decide(client, url, signed(world, ADA), action="deny")
        assert denied.json() == {"outcome": "decided", "state": "denied"}
        await world.agent.wait_for(lambda a: len(a.decisions) == 1)
        assert world.agent.decisions[0].decision == "deny"


async def test_a_secret_is_never_offered_for_editing_in_the_app(tmp_path: Path) -> None:
    async with make_world(tmp_path) as world, webapp_bot(world) as (running, app), \
            httpx.AsyncClient() as client:
        _, url = await posted(world, running, app, ADA, approval(
            "apr_sk", tool="Bash", arguments={"command": "deploy web", "api_key": SECRET},
            editable=["command", "api_key"]))
        shown = await get(client, url, signed(world, ADA))
        assert shown.json()["editable"] == ["command"]
        assert shown.json()["edit_values"] == {"command": "deploy web"}
        assert SECRET not in shown.text
        refused = await app_edit(client, url, signed(world, ADA), key="api_key",
                                 text="sk-other", revision=0)
        assert (refused.status_code, refused.json()) == (409, {"outcome": "refused:wrong_button"})
        assert SECRET not in refused.text
        assert running.store.audit.rows(events=("edit",)) == []
