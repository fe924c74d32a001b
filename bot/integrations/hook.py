"""One hook run: read the agent's event, describe the call, ask for an approval through the
agent host, and turn the verdict into that agent's answer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from bot.integrations import claude_code, codex, cursor, gemini
from bot.integrations.approval import Connect, OnError, ask_person, failure
from bot.integrations.contract import HookAnswer, HookContract, HookInputError
from bot.integrations.describe import FileReader, describe
from bot.integrations.grants import hook_scope

CONTRACTS: Final[Mapping[str, HookContract]] = {
    "claude-code": claude_code.CONTRACT,
    "codex": codex.CONTRACT,
    "gemini": gemini.CONTRACT,
    "cursor": cursor.CONTRACT,
}
"""The agents ``skald-telegram hook AGENT`` answers, by the name on the command line."""

MAX_FILE_BYTES: Final = 4 * 1024 * 1024
"""A larger file is not diffed: the card says so instead."""
STOPPED: Final = "stopped before a decision"
"""Why a hook stopped by a signal denies (an unanswered hook lets the call run)."""


async def run_hook(
    contract: HookContract,
    raw: str,
    connect: Connect,
    *,
    timeout: float,
    on_error: OnError = "deny",
    read: FileReader | None = None,
) -> HookAnswer:
    """The answer to one hook event ``raw`` (the JSON the agent wrote on stdin)."""
    event_name: str | None = None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise HookInputError("the input is not a JSON object")
        if isinstance(data.get("hook_event_name"), str):
            event_name = data["hook_event_name"]
        event = contract.parse(data)
    except (ValueError, HookInputError) as exc:
        return contract.answer(event_name, failure(f"unreadable hook input: {exc}", on_error))
    description = describe(event.call, read or read_text_file)
    scope = hook_scope(event.call, event.session)
    verdict = await ask_person(
        connect,
        tool=event.call.tool,
        summary=description.summary,
        arguments=event.call.arguments,
        blocks=description.blocks,
        timeout=timeout,
        on_error=on_error,
        grant_key=scope.key if scope else None,
        grant_label=scope.label if scope else None,
    )
    return contract.answer(event.name, verdict)


def stopped_answer(contract: HookContract, raw: str) -> HookAnswer:
    """The answer of a hook stopped before a decision: always that agent's deny (whatever
    ``--on-error`` says), for the event ``raw`` names if it can be read that far."""
    return contract.answer(_event_name(raw, contract), failure(STOPPED, "deny"))


def _event_name(raw: str, contract: HookContract) -> str | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    name = data.get("hook_event_name") if isinstance(data, dict) else None
    return name if name in contract.events else None


def read_text_file(path: str) -> str | None:
    """A file's text for a diff, or ``None`` when it does not exist. A file that cannot be
    shown as text gives a line saying why, so that the diff never pretends it is new."""
    file = Path(path)
    try:
        if not file.exists():
            return None
        if not file.is_file():
            return f"({path} is not a regular file)\n"
        if file.stat().st_size > MAX_FILE_BYTES:
            return f"({path} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB)\n"
        return file.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return f"({path} is not UTF-8 text)\n"
    except OSError as exc:
        return f"({path} cannot be read: {exc.strerror})\n"
