"""Ask a person through the agent host and say what came of it, failing closed.

Every adapter (hooks, the MCP server, the gateway) asks through :func:`ask_person`: a host
that is not running, an error on the way, a request nobody decided in time each become a
deny with a one-line reason (or, with ``on_error="ask"``, a hand-back to the agent's own
prompt). A person's deny is always a deny.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio

from bot.integrations.waiting import Watch
from skald_telegram import AsyncAgentClient, HostUnavailable, Outcome

log = logging.getLogger(__name__)

WITHDRAW_SECONDS: Final = 5.0
"""How long an interrupted wait may spend taking its card back."""
MAX_SHOWN_EDIT_CHARS: Final = 2000
"""How much of an edited value the agent is told (what ran is the whole of it)."""

Decision = Literal["allow", "deny", "ask"]
OnError = Literal["deny", "ask"]


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str
    edited: Mapping[str, Any] | None = None
    """An allow with an edit: the complete arguments to run instead of the call's own."""


Connect = Callable[[], AsyncAgentClient]


def host_connector(state_dir: str | None) -> Connect:
    """Opens a client of the agent host whose state folder is ``state_dir`` (default: the
    host's own default)."""
    return lambda: AsyncAgentClient(state_dir=state_dir)


async def ask_person(
    connect: Connect,
    *,
    tool: str,
    summary: str,
    arguments: Mapping[str, Any],
    blocks: Sequence[Mapping[str, Any]],
    timeout: float,
    on_error: OnError = "deny",
    grant_key: str | None = None,
    grant_label: str | None = None,
    grant_kind: Literal["hook", "gateway"] = "hook",
    editable: Sequence[str] = (),
    watch: Watch | None = None,
) -> Verdict:
    """Submit an approval, wait up to ``timeout`` seconds, and judge the outcome. With a
    ``grant_key`` (and its ``grant_label``) the approval offers a grant of a hook or of
    the gateway (``grant_kind``), and a call a grant in force covers is approved at once
    (the verdict's reason names the grant). The ``editable`` keys of ``arguments`` may
    be edited before approving: the verdict then carries the edited arguments, and the
    caller must run those."""
    scope = None if grant_key is None else {
        "kind": grant_kind, "key": grant_key, "label": grant_label or grant_key}
    try:
        client = connect()
    except Exception as exc:  # fail closed: whatever went wrong, the answer is not an allow
        return failure(one_line(exc), on_error)
    try:
        item_id = await _submitted(client, client.submit_approval(
            tool, summary=summary, arguments=arguments, blocks=blocks, timeout=timeout,
            grant_scope=scope, editable=editable,
        ))
        if watch is not None:
            watch.waiting(item_id, summary)
        outcome = await _wait_or_withdraw(client, item_id, timeout, watch)
    except Exception as exc:  # fail closed, as above
        log.warning("approval for %s failed: %s", tool, one_line(exc))
        return failure(one_line(exc), on_error)
    finally:
        await _close(client)
    if outcome.edited:
        return edited_verdict(outcome, arguments, editable)
    return verdict_of(outcome, timeout, on_error)


def edited_verdict(outcome: Outcome, arguments: Mapping[str, Any],
                   editable: Sequence[str]) -> Verdict:
    """The allow for an approval edited before approving, whose reason says what changed
    ("approved with an edit by Ada: command is now `ls -l`"). An edit outside ``editable``
    (which the host never takes) is a deny: the caller could not run what was approved."""
    edited = dict(outcome.arguments or {})
    changed = [key for key in edited if _json(edited[key]) != _json(arguments.get(key))]
    if set(edited) != set(arguments) or any(key not in editable for key in changed):
        return Verdict("deny", "denied by skald-telegram: the approval came back with an "
                               "edit this call cannot take")
    changes = "; ".join(f"{key} is now {_shown(edited[key])}" for key in changed)
    return Verdict("allow", f"approved with an edit{who_decided(outcome)}: {changes}",
                   edited=edited)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > MAX_SHOWN_EDIT_CHARS:
        text = f"{text[:MAX_SHOWN_EDIT_CHARS]}… ({len(text) - MAX_SHOWN_EDIT_CHARS} more " \
               "characters)"
    return f"`{text}`" if "\n" not in text else f"\n{text}\n"


async def ask_question(
    connect: Connect, question: str, options: Sequence[str] | None, timeout: float
) -> Outcome:
    """Ask a question and wait for its answer (or the end of ``timeout``: then the
    question is withdrawn and the outcome says so)."""
    client = connect()
    try:
        item_id = await _submitted(client, client.submit_question(question, options, timeout))
        return await _wait_or_withdraw(client, item_id, timeout)
    finally:
        await _close(client)


def verdict_of(outcome: Outcome, timeout: float, on_error: OnError) -> Verdict:
    who = who_decided(outcome)
    if outcome.state == "approved" and outcome.reason:
        return Verdict("allow", outcome.reason)  # approved by Ada's grant (…, 12 min left)
    if outcome.state == "approved":
        return Verdict("allow", f"approved{who} in Telegram")
    if outcome.state == "denied":
        because = f": {outcome.reason}" if outcome.reason else ""
        return Verdict("deny", f"denied{who} in Telegram{because}")
    if outcome.state in ("pending", "expired"):
        return failure(f"no decision in Telegram within {timeout:g} s", on_error)
    if outcome.state == "withdrawn":
        return failure("the request was withdrawn before anyone decided", on_error)
    return failure(f"the request ended without a decision ({outcome.state})", on_error)


def who_decided(outcome: Outcome) -> str:
    """`` by Ada (@ada)``, as far as the outcome says, or nothing."""
    person = outcome.decided_by or {}
    name, username = person.get("name"), person.get("username")
    if name and username:
        return f" by {name} (@{username})"
    if name or username:
        return f" by {name or '@' + str(username)}"
    return ""


def failure(reason: str, on_error: OnError) -> Verdict:
    """The verdict for an error: a deny, or the agent's own prompt with ``on_error="ask"``."""
    if on_error == "ask":
        return Verdict("ask", f"skald-telegram could not get a decision ({reason}); "
                       "asking here instead")
    return Verdict("deny", f"denied by skald-telegram: {reason}")


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


async def _submitted(client: AsyncAgentClient, submit: Awaitable[str]) -> str:
    """The id of the item ``submit`` asks the host for. Interrupted before the host has
    answered, the request may have made an item all the same: its answer is awaited a
    few seconds more (shielded), and that item withdrawn, so that no card waits for
    nobody until its timeout."""
    submitting = asyncio.ensure_future(submit)
    try:
        return await asyncio.shield(submitting)
    except asyncio.CancelledError:
        with anyio.CancelScope(shield=True), anyio.move_on_after(WITHDRAW_SECONDS):
            try:
                item_id = await submitting
            except Exception:  # no item was made: nothing to take back
                item_id = None
            if item_id is not None:
                await _withdraw(client, item_id)
        submitting.cancel()
        raise


async def _wait_or_withdraw(
    client: AsyncAgentClient, item_id: str, timeout: float, watch: Watch | None = None
) -> Outcome:
    """The outcome within ``timeout``; an item still open then (or when the wait is
    interrupted) is withdrawn, so that no card stays waiting for nobody."""
    try:
        outcome = await _watched_wait(client, item_id, timeout, watch)
    except BaseException:
        # Shielded: a cancelled caller (an MCP client that went away) still takes its card
        # back, within a few seconds.
        with anyio.CancelScope(shield=True), anyio.move_on_after(WITHDRAW_SECONDS):
            await _withdraw(client, item_id)
        raise
    if outcome.state == "pending":
        await _withdraw(client, item_id)
    return outcome


async def _watched_wait(
    client: AsyncAgentClient, item_id: str, timeout: float, watch: Watch | None
) -> Outcome:
    """:meth:`AsyncAgentClient.wait`; with a ``watch``, saying after its time whether no
    device picked the request up, then waiting on. The request was just submitted: a host
    that goes away meanwhile is waited for."""
    submitted = Outcome(item_id, "pending")
    if watch is None:
        return await client.wait(item_id, timeout, since=submitted)
    first = watch.first_wait(timeout)
    outcome = await client.wait(item_id, first, since=submitted)
    if watch.unseen(outcome):
        # A host restarting cannot say; the request may well have been picked up: wait on.
        with contextlib.suppress(HostUnavailable):
            watch.not_picked_up((await client.status())["devices"])
    if not outcome.pending:
        return outcome
    return await client.wait(item_id, timeout - first, since=outcome)


async def _withdraw(client: AsyncAgentClient, item_id: str) -> None:
    try:
        await client.withdraw(item_id)
    except Exception as exc:  # the deny stands either way
        log.warning("could not withdraw %s: %s", item_id, one_line(exc))


async def _close(client: AsyncAgentClient) -> None:
    try:
        await client.aclose()
    except Exception as exc:  # closing a connection must not change the verdict
        log.debug("closing the host client: %s", one_line(exc))
