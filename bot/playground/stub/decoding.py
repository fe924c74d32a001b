"""Request decoding: a Bot API call's parameters, from the query string and the body.

The Bot API takes its parameters as a query string, JSON, a url-encoded form or a multipart
form (the one a file travels in); whichever way they come, a few are typed (numbers, booleans,
JSON objects) as Telegram reads them.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request

from bot.playground.stub.errors import bad_request

_INT_PARAMS = frozenset(
    {
        "chat_id", "message_id", "offset", "limit", "timeout", "user_id", "message_thread_id",
        "reply_to_message_id", "cache_time", "from_chat_id",
    }
)  # fmt: skip
_BOOL_PARAMS = frozenset(
    {
        "show_alert", "disable_notification", "protect_content", "drop_pending_updates",
        "disable_web_page_preview", "allow_sending_without_reply",
        "disable_content_type_detection",
    }
)  # fmt: skip
_JSON_PARAMS = frozenset(
    {
        "reply_markup", "reply_parameters", "link_preview_options", "allowed_updates",
        "commands", "scope", "entities", "caption_entities",
    }
)  # fmt: skip
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


@dataclass(frozen=True)
class Upload:
    """A file part of a multipart request."""

    filename: str
    data: bytes
    content_type: str


async def request_params(request: Request) -> dict[str, Any]:
    """The call's parameters, typed; a 400 answer for a body that cannot be read."""
    raw: dict[str, Any] = dict(urllib.parse.parse_qsl(request.url.query, keep_blank_values=True))
    content_type = request.headers.get("content-type", "")
    try:
        if content_type.startswith("application/json"):
            decoded = json.loads(await request.body() or b"{}")
            if not isinstance(decoded, dict):
                raise ValueError("expected a JSON object")
            raw.update(decoded)
        elif content_type.startswith(_FORMS):
            raw.update(await _form_fields(request))
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(f"can't parse request body: {error}") from None
    return {name: _typed(name, value) for name, value in raw.items()}


async def _form_fields(request: Request) -> dict[str, Any]:
    try:
        form = await request.form()
    except HTTPException as error:  # Starlette's answer to a form it cannot parse
        raise ValueError(error.detail) from None
    fields: dict[str, Any] = {}
    try:
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                fields[name] = Upload(value.filename or "", await value.read(),
                                      value.content_type or "application/octet-stream")
            else:
                fields[name] = value
    finally:
        await form.close()
    return fields


def _typed(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if name in _INT_PARAMS and value.lstrip("-").isdigit():
        return int(value)
    if name in _BOOL_PARAMS:
        return value.lower() == "true"
    if name in _JSON_PARAMS:
        try:
            return json.loads(value)
        except ValueError:
            raise bad_request(f"can't parse {name} JSON object") from None
    return value
