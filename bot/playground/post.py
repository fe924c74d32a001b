"""``skald-telegram render FILE.json --playground``: post a payload's cards into the page.

The cards go through the stand-in's Bot API exactly as the bot sends them (HTML parse mode,
the attachment as a document), so a card that Telegram would refuse is refused here with
Telegram's own error text, before it reaches production. The playground's key comes from
``$SKALD_PLAYGROUND_KEY`` or the address (``?key=…``), as the playground prints them; the
bot's token is never needed.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx

from bot.errors import BotApiError, RenderError
from bot.playground import KEY_VARIABLE
from bot.playground.page import KEY_HEADER, KEY_PARAMETER
from bot.preview import load_items
from bot.protocol.payloads import InboxUpdate
from bot.render import RenderedCard, Renderer
from bot.render.values import SecretsMode

TIMEOUT_S: Final = 10.0


def post_command(args: argparse.Namespace) -> int:
    """Post the cards of ``args.file`` into the playground at ``args.playground``; exit 1 if
    the stand-in refused any of them (each refusal is printed)."""
    update = load_items(Path(args.file))
    renderer = Renderer(Path(args.templates) if args.templates else None)
    group = args.chat_type == "group"
    base, key = _base_and_key(str(args.playground))
    with httpx.Client(timeout=TIMEOUT_S, headers={KEY_HEADER: key}) as client:
        target = _get(client, f"{base}/playground/bot")
        chat_id = target["group" if group else "private"]
        root = f"{base}/playground/bot"
        refused = 0
        for title, card in _cards(update, renderer, "masked" if group else "spoiler"):
            error = _send(client, root, chat_id, card)
            if error is None:
                print(f"✓ posted {title}")
            else:
                refused += 1
                print(f"✗ {title}: {error}")
    print(f"Open {base}/ to see them.")
    return 1 if refused else 0


def _base_and_key(url: str) -> tuple[str, str]:
    """The playground's root and its key: from the address it printed, else from
    ``$SKALD_PLAYGROUND_KEY`` (which, unlike a command line, other users cannot read)."""
    parts = urllib.parse.urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
    keys = urllib.parse.parse_qs(parts.query).get(KEY_PARAMETER)
    key = keys[0] if keys else os.environ.get(KEY_VARIABLE, "").strip()
    if not key:
        raise RenderError(f"--playground: no key for {base}/: set {KEY_VARIABLE} as "
                          "skald-telegram demo printed it (or pass its whole address)")
    return base, key


def _cards(update: InboxUpdate, renderer: Renderer,
           secrets: SecretsMode) -> Iterator[tuple[str, RenderedCard]]:
    now = datetime.now(UTC)
    for approval in update.approvals:
        yield f"approval {approval.id}", renderer.approval_card(
            approval, agent_name=update.agent_name, secrets=secrets, now=now)
    for question in update.clarifications:
        yield f"question {question.id}", renderer.question_card(
            question, agent_name=update.agent_name, now=now)


def _send(client: httpx.Client, root: str, chat_id: int, card: RenderedCard) -> str | None:
    """Send one card (and its attachment); Telegram's description when refused."""
    answer = _post(client, f"{root}/sendMessage", data={
        "chat_id": str(chat_id), "text": card.html, "parse_mode": "HTML",
        "link_preview_options": json.dumps({"is_disabled": True}),
    })
    if not answer.get("ok"):
        return str(answer.get("description", "refused"))
    if card.attachment is not None:
        answer = _post(
            client, f"{root}/sendDocument",
            data={"chat_id": str(chat_id), "reply_to_message_id": str(answer["result"]
                                                                       ["message_id"])},
            files={"document": (card.attachment.filename, card.attachment.content,
                                "text/plain")},
        )  # fmt: skip
        if not answer.get("ok"):
            return f"attachment: {answer.get('description', 'refused')}"
    return None


def _get(client: httpx.Client, url: str) -> dict[str, Any]:
    try:
        response = client.get(url)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise RenderError(
            f"no playground answers at {url}: start one with skald-telegram demo ({exc})"
        ) from exc
    if response.status_code == 403:
        raise RenderError(f"the playground at {url} refused its key: pass the address it "
                          "printed this run")
    if not isinstance(body, dict) or "private" not in body:
        raise RenderError(f"{url} is not a skald-telegram playground")
    return body


def _post(client: httpx.Client, url: str, **request: Any) -> dict[str, Any]:
    try:
        body = client.post(url, **request).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise BotApiError(f"the playground stopped answering: {exc}") from exc
    if not isinstance(body, dict):
        raise BotApiError("the playground answered something that is not a Bot API reply")
    return body
