"""The Telegram stand-in, driven by a real python-telegram-bot over loopback HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from telegram import (
    Bot,
    BotCommand,
    BotCommandScopeAllGroupChats,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    Message,
    ReplyParameters,
    Update,
)
from telegram.constants import ParseMode
from telegram.error import BadRequest, ChatMigrated, Forbidden, InvalidToken, RetryAfter
from telegram.ext import ApplicationBuilder, CallbackQueryHandler, ContextTypes

from bot.playground.stub import BOT_USERNAME, TelegramStub
from bot.playground.tg_html import Entity

TOKEN = "123:ABC"
ALICE = 1001
BOB = 1002
GROUP = -1001234567890


@pytest.fixture
async def tg() -> AsyncIterator[TelegramStub]:
    async with TelegramStub(token=TOKEN) as stub:
        stub.add_user(ALICE, "Alice", username="alice")
        stub.add_user(BOB, "Bob", last_name="Builder")
        stub.add_private_chat(ALICE)
        stub.add_group(GROUP, "Ops", admins=[ALICE], members=[BOB])
        yield stub


@pytest.fixture
async def bot(tg: TelegramStub) -> AsyncIterator[Bot]:
    async with Bot(TOKEN, base_url=f"{tg.api_url}/bot") as bot:
        yield bot


def keyboard(*data: str) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup([[InlineKeyboardButton(d.title(), callback_data=d) for d in data]])


async def test_get_me_describes_the_test_bot(bot: Bot, tg: TelegramStub) -> None:
    me = await bot.get_me()
    assert me.username == BOT_USERNAME
    assert me.id == tg.bot_id != 777000
    assert me.can_join_groups and not me.can_read_all_group_messages


async def test_commands_are_kept_per_scope(bot: Bot) -> None:
    assert await bot.set_my_commands([BotCommand("pending", "List pending approvals")])
    assert [c.command for c in await bot.get_my_commands()] == ["pending"]
    assert await bot.get_my_commands(scope=BotCommandScopeAllGroupChats()) == ()


async def test_a_wrong_token_is_unauthorized(tg: TelegramStub) -> None:
    with pytest.raises(InvalidToken):
        async with Bot("999:WRONG", base_url=f"{tg.api_url}/bot"):
            pass


async def test_unknown_methods_are_not_found(tg: TelegramStub) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{tg.api_url}/bot{TOKEN}/sendTelepathy", json={})
    assert response.status_code == 404
    assert response.json() == {
        "ok": False,
        "error_code": 404,
        "description": "Not Found: method not found",
    }


async def test_json_bodies_are_understood_like_form_bodies(tg: TelegramStub) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{tg.api_url}/bot{TOKEN}/sendMessage",
            json={"chat_id": ALICE, "text": "<b>hi</b>", "parse_mode": "HTML"},
        )
    result = response.json()["result"]
    assert result["text"] == "hi"
    assert result["entities"] == [{"type": "bold", "offset": 0, "length": 2}]
    assert result["chat"] == {"id": ALICE, "type": "private", "first_name": "Alice",
                              "username": "alice"}  # fmt: skip


async def test_multipart_and_url_encoded_forms_carry_the_same_parameters(
        tg: TelegramStub) -> None:
    url = f"{tg.api_url}/bot{TOKEN}/sendMessage"
    fields = {"chat_id": str(ALICE), "text": "a&b <i>c</i>", "parse_mode": "HTML",
              "disable_notification": "true"}
    async with httpx.AsyncClient() as client:
        encoded = await client.post(url, data=fields)
        multipart = await client.post(url, data=fields, files={"unused": ("x.txt", b"x")})
    for response in (encoded, multipart):
        assert response.json()["result"]["text"] == "a&b c"
    assert [call.params["disable_notification"] for call in tg.calls("sendMessage")] == [True,
                                                                                         True]


async def test_a_body_that_cannot_be_parsed_is_a_bad_request(tg: TelegramStub) -> None:
    broken = "multipart/form-data; boundary=XYZ"
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{tg.api_url}/bot{TOKEN}/sendMessage", content=b"--XYZ\r\nno disposition\r\n",
            headers={"Content-Type": broken},
        )
    assert response.status_code == 400
    assert response.json()["description"].startswith("Bad Request: can't parse request body")
    assert tg.bot_messages(ALICE) == []


async def test_send_message_stores_text_entities_and_keyboard(bot: Bot, tg: TelegramStub) -> None:
    sent = await bot.send_message(
        ALICE,
        "<b>Run</b> <code>ls</code>?",
        parse_mode=ParseMode.HTML,
        reply_markup=keyboard("yes"),
    )
    assert sent.text == "Run ls?"
    assert sent.reply_markup == keyboard("yes")
    [stored] = tg.messages(ALICE)
    assert stored.message_id == sent.message_id == 1
    assert stored.html == "<b>Run</b> <code>ls</code>?"
    assert stored.entities == [Entity("bold", 0, 3), Entity("code", 4, 2)]
    assert stored.reply_markup == {"inline_keyboard": [[{"text": "Yes", "callback_data": "yes"}]]}
    second = await bot.send_message(
        ALICE, "again", link_preview_options=LinkPreviewOptions(is_disabled=True)
    )
    assert second.message_id == 2


async def test_html_telegram_refuses_raises_bad_request(bot: Bot, tg: TelegramStub) -> None:
    with pytest.raises(BadRequest) as refused:
        await bot.send_message(ALICE, "Line<br>next", parse_mode=ParseMode.HTML)
    assert refused.value.message.lower() == (
        'can\'t parse entities: unsupported start tag "br" at byte offset 4'
    )
    with pytest.raises(BadRequest, match=r"(?i)message is too long"):
        await bot.send_message(ALICE, "x" * 4097)
    assert tg.messages(ALICE) == []


async def test_plain_text_is_not_parsed(bot: Bot) -> None:
    sent = await bot.send_message(ALICE, "a < b & <b>c</b>")
    assert sent.text == "a < b & <b>c</b>"
    assert sent.entities == ()


async def test_edits_replace_content_and_identical_edits_are_refused(
    bot: Bot, tg: TelegramStub
) -> None:
    sent = await bot.send_message(ALICE, "pending", reply_markup=keyboard("yes", "no"))
    await bot.edit_message_text(
        "<i>approved</i>", ALICE, sent.message_id, parse_mode="HTML", reply_markup=keyboard("undo")
    )
    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_text(
            "<i>approved</i>", ALICE, sent.message_id, parse_mode="HTML",
            reply_markup=keyboard("undo"),
        )  # fmt: skip
    [stored] = tg.messages(ALICE)
    assert (stored.text, stored.entities) == ("approved", [Entity("italic", 0, 8)])
    assert [version.text for version in stored.edits] == ["pending"]
    assert stored.edits[0].reply_markup is not None


async def test_an_edit_without_markup_drops_the_keyboard(bot: Bot, tg: TelegramStub) -> None:
    sent = await bot.send_message(ALICE, "pending", reply_markup=keyboard("yes"))
    edited = await bot.edit_message_text("done", ALICE, sent.message_id)
    assert isinstance(edited, Message) and edited.reply_markup is None
    assert tg.messages(ALICE)[0].reply_markup is None
    await bot.edit_message_reply_markup(ALICE, sent.message_id, reply_markup=keyboard("again"))
    assert tg.messages(ALICE)[0].buttons() == [{"text": "Again", "callback_data": "again"}]
    await bot.edit_message_reply_markup(ALICE, sent.message_id)
    assert tg.messages(ALICE)[0].reply_markup is None


async def test_callback_data_is_limited_to_64_bytes(bot: Bot) -> None:
    await bot.send_message(ALICE, "fits", reply_markup=keyboard("é" * 32))
    with pytest.raises(BadRequest, match=r"(?i)button_data_invalid"):
        await bot.send_message(ALICE, "too long", reply_markup=keyboard("é" * 33))


async def test_keyboards_are_limited_to_8_per_row(bot: Bot) -> None:
    row = [InlineKeyboardButton(str(n), callback_data=str(n)) for n in range(9)]
    with pytest.raises(BadRequest, match=r"(?i)reply markup is too long"):
        await bot.send_message(ALICE, "wide", reply_markup=InlineKeyboardMarkup([row]))


async def test_force_reply_and_replies_are_accepted(bot: Bot, tg: TelegramStub) -> None:
    question = await bot.send_message(ALICE, "Why?", reply_markup=ForceReply(selective=True))
    update = tg.send_text(ALICE, ALICE, "because", reply_to=question.message_id)
    assert update["message"]["reply_to_message"]["message_id"] == question.message_id
    answer = await bot.send_message(
        ALICE, "noted", reply_parameters=ReplyParameters(message_id=update["message"]["message_id"])
    )
    assert answer.reply_to_message is not None
    assert answer.reply_to_message.text == "because"
    with pytest.raises(BadRequest, match=r"(?i)message to be replied not found"):
        await bot.send_message(ALICE, "x", reply_parameters=ReplyParameters(message_id=99))


async def test_topic_messages_carry_their_thread(bot: Bot, tg: TelegramStub) -> None:
    forum = -1009
    tg.add_group(forum, "Forum", admins=[ALICE], members=[], forum=True)
    sent = await bot.send_message(forum, "in topic", message_thread_id=42)
    assert sent.message_thread_id == 42 and sent.is_topic_message
    assert tg.messages(forum)[0].thread_id == 42


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_rate_limits_raise_retry_after(bot: Bot, tg: TelegramStub) -> None:
    tg.rate_limit_storm(times=2, retry_after=1)
    for _ in range(2):
        with pytest.raises(RetryAfter, match="Retry in"):
            await bot.send_message(ALICE, "hi")
    await bot.send_message(ALICE, "hi")
    assert [r.method for r in tg.calls("sendMessage")] == ["sendMessage"] * 3


async def test_fail_next_answers_any_method_with_the_given_error(
    bot: Bot, tg: TelegramStub
) -> None:
    tg.fail_next("getChat", error_code=400, description="Bad Request: chat not found")
    with pytest.raises(BadRequest, match=r"(?i)chat not found"):
        await bot.get_chat(GROUP)
    assert (await bot.get_chat(GROUP)).title == "Ops"


async def test_a_migrated_group_raises_chat_migrated(bot: Bot, tg: TelegramStub) -> None:
    old = -4242
    tg.add_group(old, "Small", admins=[ALICE], members=[BOB], supergroup=False)
    to_old, from_new = tg.migrate_group(old, -1004242)
    assert to_old["message"]["migrate_to_chat_id"] == -1004242
    assert from_new["message"]["migrate_from_chat_id"] == old
    with pytest.raises(ChatMigrated) as migrated:
        await bot.send_message(old, "hello?")
    assert migrated.value.new_chat_id == -1004242
    await bot.send_message(-1004242, "hello")
    updates = await bot.get_updates()
    assert updates[0].message is not None and updates[0].message.migrate_to_chat_id == -1004242


async def test_a_blocked_bot_is_forbidden(bot: Bot, tg: TelegramStub) -> None:
    tg.block_bot(ALICE)
    with pytest.raises(Forbidden, match=r"(?i)bot was blocked by the user"):
        await bot.send_message(ALICE, "hi")


async def test_send_document_stores_the_file_and_caption(bot: Bot, tg: TelegramStub) -> None:
    sent = await bot.send_document(
        GROUP, b"line 1\n", filename="diff.txt", caption="<b>Full diff</b>", parse_mode="HTML"
    )
    assert sent.document is not None and sent.document.file_name == "diff.txt"
    assert sent.caption == "Full diff"
    [stored] = tg.messages(GROUP)
    assert stored.document is not None
    assert (stored.document.filename, stored.document.data) == ("diff.txt", b"line 1\n")
    with pytest.raises(BadRequest, match=r"(?i)caption is too long"):
        await bot.send_document(GROUP, b"x", filename="x.txt", caption="y" * 1025)


async def test_callback_answers_are_recorded_once(bot: Bot, tg: TelegramStub) -> None:
    sent = await bot.send_message(ALICE, "ok?", reply_markup=keyboard("yes"))
    query_id = tg.tap(ALICE, sent.message_id, ALICE, "yes")
    with pytest.raises(AssertionError, match="no button"):
        tg.tap(ALICE, sent.message_id, ALICE, "no")
    await bot.answer_callback_query(query_id, text="Approved", show_alert=True)
    assert tg.callback_answers[query_id]["text"] == "Approved"
    assert tg.callback_answers[query_id]["show_alert"] is True
    with pytest.raises(BadRequest, match=r"(?i)query is too old"):
        await bot.answer_callback_query(query_id)


async def test_members_and_admins_are_reported(bot: Bot) -> None:
    assert (await bot.get_chat_member(GROUP, ALICE)).status == "creator"
    assert (await bot.get_chat_member(GROUP, BOB)).status == "member"
    admins = await bot.get_chat_administrators(GROUP)
    assert [a.user.id for a in admins] == [ALICE]


async def test_deleted_messages_are_flagged(bot: Bot, tg: TelegramStub) -> None:
    sent = await bot.send_message(ALICE, "bye")
    assert await bot.delete_message(ALICE, sent.message_id)
    assert tg.messages(ALICE)[0].deleted
    with pytest.raises(BadRequest, match=r"(?i)message to delete not found"):
        await bot.delete_message(ALICE, sent.message_id)


async def test_a_long_poll_returns_as_soon_as_an_update_arrives(bot: Bot, tg: TelegramStub) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=30))
    await tg.wait_for(lambda t: bool(t.calls("getUpdates")))
    tg.send_text(GROUP, BOB, f"/approve@{BOT_USERNAME} now")
    [update] = await poll
    assert update.message is not None
    assert update.message.text == f"/approve@{BOT_USERNAME} now"
    [command] = update.message.entities
    assert (command.type, command.offset, command.length) == ("bot_command", 0, 23)
    assert await bot.get_updates(offset=update.update_id + 1, timeout=0) == ()


async def test_a_running_application_receives_taps(tg: TelegramStub) -> None:
    async def on_tap(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None and query.message is not None
        await query.answer("Done")
        await context.bot.edit_message_text(
            f"chose {query.data}", query.message.chat.id, query.message.message_id
        )

    application = ApplicationBuilder().token(TOKEN).base_url(f"{tg.api_url}/bot").build()
    application.add_handler(CallbackQueryHandler(on_tap))
    async with application:
        await application.start()
        assert application.updater is not None
        await application.updater.start_polling(poll_interval=0, timeout=10)
        sent = await application.bot.send_message(ALICE, "pick", reply_markup=keyboard("a", "b"))
        query_id = tg.tap(ALICE, sent.message_id, ALICE, "b")
        await tg.wait_for(lambda t: t.messages(ALICE)[0].text == "chose b")
        await application.updater.stop()
        await application.stop()
    assert tg.callback_answers[query_id]["text"] == "Done"
    assert tg.messages(ALICE)[0].reply_markup is None


async def test_max_rate_counts_sends_per_chat_and_overall(bot: Bot, tg: TelegramStub) -> None:
    for _ in range(3):
        await bot.send_message(ALICE, "a")
    await bot.send_message(GROUP, "g")
    assert tg.max_rate(ALICE) == 3
    assert tg.max_rate(GROUP) == 1
    assert tg.max_rate() == 4


async def test_wait_for_explains_a_timeout(bot: Bot, tg: TelegramStub) -> None:
    await bot.send_message(ALICE, "something else")
    with pytest.raises(AssertionError, match="sendMessage chat_id=1001"):
        await tg.wait_for(lambda t: len(t.messages(ALICE)) > 1, timeout=0.05)


async def test_rate_limits_are_telegrams_when_asked_for() -> None:
    now = [1000.0]
    async with TelegramStub(token=TOKEN, rate_limits=True, clock=lambda: now[0]) as stub:
        stub.add_user(ALICE, "Alice")
        stub.add_group(GROUP, "Ops", admins=[ALICE], members=[])
        for n in range(1, 31):
            stub.add_user(ALICE + n, f"User {n}")
            stub.add_private_chat(ALICE + n)
        async with Bot(TOKEN, base_url=f"{stub.api_url}/bot") as bot, httpx.AsyncClient() as raw:
            for n in range(20):
                now[0] += 0.5
                await bot.send_message(GROUP, f"group {n}")
            now[0] += 10
            refused = await raw.post(f"{stub.api_url}/bot{TOKEN}/sendMessage",
                                     json={"chat_id": GROUP, "text": "one too many"})
            assert refused.status_code == 429
            assert refused.json()["description"] == "Too Many Requests: retry after 41"
            assert refused.json()["parameters"] == {"retry_after": 41}
            now[0] += 41
            await bot.send_message(GROUP, "the first has left the minute")

            for n in range(1, 30):
                await bot.send_message(ALICE + n, "private")
            with pytest.raises(RetryAfter, match="Retry in"):
                await bot.send_message(ALICE + 30, "the 31st this second")
            now[0] += 1
            await bot.send_message(ALICE + 30, "a second later")
        assert len(stub.bot_messages(GROUP)) == 21
        assert stub.throttled == 2


async def test_a_caller_that_leaves_mid_request_is_no_error(
    tg: TelegramStub, caplog: pytest.LogCaptureFixture
) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", tg.port)
    writer.write(f"POST /bot{TOKEN}/sendMessage HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n"
                 f"\r\nchat_id={ALICE}".encode())
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    async with httpx.AsyncClient() as client:  # served on, once the gone caller is noticed
        answer = await client.post(f"http://127.0.0.1:{tg.port}/bot{TOKEN}/getMe")
    await asyncio.sleep(0.05)
    assert answer.json()["ok"] is True
    assert tg.calls("sendMessage") == []
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
