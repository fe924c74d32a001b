"""One hook run: read the agent's event, describe the call, ask for an approval through the
agent host, and turn the verdict into that agent's answer."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import replace
from importlib.resources import files
from pathlib import Path
from typing import Final

from bot.integrations.approval import Connect, OnError, ask_person, failure
from bot.integrations.commands import CommandTable, parse_table
from bot.integrations.contract import HookAnswer, HookContract, HookInputError
from bot.integrations.describe import FileReader, ToolCall, call_target, describe
from bot.integrations.grants import Programs, hook_scope
from bot.integrations.waiting import Watch

MAX_FILE_BYTES: Final = 4 * 1024 * 1024
"""A larger file is not diffed: the card says so instead."""
STOPPED: Final = "stopped before a decision"
"""Why a hook stopped by a signal denies (an unanswered hook lets the call run)."""

PathResolver = Callable[[str], "str | None"]
"""Where an absolute path really leads on this machine, or None when that cannot be told."""


async def run_hook(
    contract: HookContract,
    raw: str,
    connect: Connect,
    *,
    timeout: float,
    on_error: OnError = "deny",
    read: FileReader | None = None,
    resolve: PathResolver | None = None,
    programs: Programs | None = None,
    watch: Watch | None = None,
) -> HookAnswer:
    """The answer to one hook event ``raw`` (the JSON the agent wrote on stdin). Shell
    commands are judged by ``programs`` (default: the command table, and program names
    looked up on this process's ``PATH``, which is the agent's); ``watch`` says on
    stderr that the request waits, and when no device picked it up."""
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
    call = with_real_path(event.call, resolve or real_path)
    description = describe(call, read or read_text_file)
    scope = hook_scope(call, event.session, programs or agent_programs())
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
        editable=[key for key in contract.editable.get(call.tool, ())
                  if isinstance(call.arguments.get(key), str)],
        watch=watch,
    )
    return contract.answer(event.name, verdict)


def with_real_path(call: ToolCall, resolve: PathResolver) -> ToolCall:
    """``call`` with :attr:`~ToolCall.real_path` set for a write or an edit whose path is
    absolute once joined to the agent's working directory (a relative one is left
    unresolved: this process's own directory says nothing of the agent's)."""
    target = call_target(call)
    if target is None or target[0] != "edit" or not target[1].startswith("/"):
        return call
    return replace(call, real_path=resolve(target[1]))


def real_path(path: str) -> str | None:
    """Where ``path`` leads: symlinks followed, ``..`` taken after each as the kernel does;
    None for a symlink loop, a path the system cannot take, or a file with more than one
    hard link (its other names may be anywhere)."""
    try:
        real = os.path.realpath(path)
        probe = real
        while probe != "/":
            if os.path.islink(probe):
                return None  # a loop stopped the resolution half way
            probe = os.path.dirname(probe)
        if os.path.isfile(real) and os.stat(real).st_nlink > 1:
            return None
    except (OSError, ValueError):
        return None
    return real


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
    text, problem = file_text(path)
    return f"({path} {problem})\n" if problem is not None else text


def file_text(path: str) -> tuple[str | None, str | None]:
    """A file's text, or None and why it cannot be shown as text (both None when there is
    no such file)."""
    file = Path(path)
    try:
        if not file.exists():
            return None, None
        if not file.is_file():
            return None, "is not a regular file"
        if file.stat().st_size > MAX_FILE_BYTES:
            return None, f"is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB"
        return file.read_bytes().decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "is not UTF-8 text"
    except OSError as exc:
        return None, f"cannot be read: {exc.strerror}"


@functools.cache
def command_table() -> CommandTable:
    """The command table shipped in the package (read once)."""
    text = files("bot.integrations").joinpath("command_table.toml").read_text(encoding="utf-8")
    return parse_table(text)


def agent_programs() -> Programs:
    return Programs(command_table(), functools.partial(locate_program, os.environ.get("PATH")))


def locate_program(search_path: str | None, name: str) -> str | None:
    """Where the shell finds ``name`` on ``search_path``: the first executable file, its
    links resolved. None when there is none, or when a relative or empty entry (searched
    from whatever directory the command runs in) comes before it."""
    for entry in (search_path if search_path is not None else os.defpath).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            return None
        candidate = os.path.join(entry, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return None
