"""A local stand-in for the Telegram Bot API, served over real HTTP on 127.0.0.1.

A bot reaches it through python-telegram-bot's ``base_url`` (or ``telegram.api_url``)::

    async with TelegramStub(token="123:ABC") as tg:
        bot = Bot("123:ABC", base_url=f"{tg.api_url}/bot")

It keeps a small world (users, chats, messages, pending updates) and answers the methods the
bot uses with the Bot API's JSON shapes. What Telegram refuses it refuses with Telegram's own
error descriptions (see `tg_html` for HTML parse mode), so PTB raises the exceptions it would
raise against Telegram. Tests inject user actions (`send_text`, `tap`, `inject`), inspect the
resulting state (`messages`, `requests`, `callback_answers`) and wait on it (`wait_for`).
The server runs in the test's own event loop.

:class:`TelegramStub` (:mod:`.front`) is the one class to use; behind it:

- :mod:`.server`: the server lifecycle (uvicorn on a loopback socket);
- :mod:`.world`: the world model (users, chats, messages, updates, files);
- :mod:`.shapes`: the world in the Bot API's JSON shapes;
- :mod:`.methods`: the Bot API methods;
- :mod:`.faults`: failure injection and Telegram's rate limits;
- :mod:`.webhook`: ``setWebhook`` and the posts of updates to the bot's endpoint;
- :mod:`.decoding`, :mod:`.validation`, :mod:`.errors`: a call's parameters, what Telegram
  refuses in them, and the error answers.
"""

from bot.playground.stub.errors import ApiError, bad_request
from bot.playground.stub.front import BOT_USERNAME, RecordedRequest, TelegramStub
from bot.playground.stub.server import LOOPBACK
from bot.playground.stub.world import StoredMessage

__all__ = [
    "BOT_USERNAME",
    "LOOPBACK",
    "ApiError",
    "RecordedRequest",
    "StoredMessage",
    "TelegramStub",
    "bad_request",
]
