"""The agent host's items and how they end (pure: no I/O).

An item is an approval or a question. It starts ``pending`` and ends once: ``approved`` or
``denied`` by a decision whose ``args_sha256`` matches its arguments, ``answered``,
``expired`` when its time runs out, or ``withdrawn`` by the program that asked. An
approval may be approved with an edit of the keys it lists as ``editable``; it then keeps
the edited arguments, which are what runs. The functions here decide each step and build
the ``inbox_update`` every paired device gets; the service applies their results to the
store.
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from bot.agenthost.edits import edit_refusal
from bot.protocol.encoding import args_sha256, format_rfc3339
from bot.protocol.payloads import ApprovalDecision, ClarificationAnswer, Person

MAX_RESOLVED: Final = 100
"""How many of the items that ended an ``inbox_update`` lists at most (the latest)."""


class Kind(enum.StrEnum):
    APPROVAL = "approval"
    QUESTION = "question"


class State(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    ANSWERED = "answered"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"


WIRE_OUTCOME: Final = {
    State.APPROVED: "approved",
    State.DENIED: "denied",
    State.ANSWERED: "answered",
    State.EXPIRED: "expired",
    State.WITHDRAWN: "cancelled",
}
"""The protocol's ``resolved[].outcome`` for each final state."""


def new_item_id(kind: Kind) -> str:
    prefix = "apr" if kind is Kind.APPROVAL else "clr"
    return f"{prefix}_{secrets.token_urlsafe(12)}"


def iso_ms(ms: int) -> str:
    return format_rfc3339(datetime.fromtimestamp(ms / 1000, UTC))


@dataclass(frozen=True)
class Item:
    """One approval or question as the host keeps it."""

    item_id: str
    kind: Kind
    wire: Mapping[str, Any]
    """The item exactly as devices are shown it (protocol §3.1 Approval / Clarification)."""
    args_sha256: str | None
    created_ms: int
    expires_ms: int
    state: State = State.PENDING
    reason: str | None = None
    decided_by: Mapping[str, Any] | None = None
    answer: str | None = None
    resolved_ms: int | None = None
    edited: Mapping[str, Any] | None = None
    """The arguments a person approved after editing; ``None`` when not edited."""

    @property
    def pending(self) -> bool:
        return self.state is State.PENDING

    @property
    def summary(self) -> str:
        text = self.wire.get("summary") if self.kind is Kind.APPROVAL else self.wire.get(
            "question")
        return str(text or "")

    def outcome_json(self) -> dict[str, Any]:
        """The local API's outcome object."""
        return {
            "item_id": self.item_id,
            "state": self.state.value,
            "reason": self.reason,
            "decided_by": None if self.decided_by is None else dict(self.decided_by),
            "answer": self.answer,
            "edited": self.edited is not None,
            **({} if self.edited is None else {"arguments": dict(self.edited)}),
        }

    def listing_json(self) -> dict[str, Any]:
        """The local API's entry for an open item."""
        return {
            "item_id": self.item_id,
            "kind": self.kind.value,
            "summary": self.summary,
            "state": self.state.value,
            "created_at": iso_ms(self.created_ms),
            "expires_at": iso_ms(self.expires_ms),
        }


def approval_wire(
    item_id: str,
    *,
    tool: str,
    summary: str,
    blocks: list[dict[str, Any]],
    arguments: Mapping[str, Any],
    created_ms: int,
    expires_ms: int,
    editable: tuple[str, ...] = (),
) -> dict[str, Any]:
    wire = {
        "id": item_id,
        "tool": tool,
        "summary": summary,
        "blocks": {"v": 1, "summary": summary, "blocks": blocks},
        "arguments": dict(arguments),
        "created_at": iso_ms(created_ms),
        "expires_at": iso_ms(expires_ms),
    }
    if editable:
        wire["editable"] = list(editable)
    return wire


def question_wire(
    item_id: str, *, question: str, options: list[str], created_ms: int, expires_ms: int
) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "id": item_id,
        "question": question,
        "created_at": iso_ms(created_ms),
        "expires_at": iso_ms(expires_ms),
    }
    if options:
        wire["options"] = options
    return wire


def person_json(person: Person) -> dict[str, Any]:
    return {
        "name": person.name,
        "username": person.username,
        "telegram_user_id": person.telegram_user_id,
    }


@dataclass(frozen=True)
class Refused:
    """A decision or answer the item does not take, and why (for the log)."""

    why: str


def decide(item: Item, decision: ApprovalDecision, now_ms: int) -> Item | Refused:
    """Apply a device's decision: the item approved or denied, or why not."""
    if item.kind is not Kind.APPROVAL:
        return Refused("not an approval")
    if not item.pending:
        return Refused(f"already {item.state.value}")
    if decision.args_sha256 != item.args_sha256:
        return Refused("args_sha256 does not match the arguments shown")
    if decision.decision not in ("approve", "deny"):
        return Refused(f"unknown decision {decision.decision!r}")
    edited = None
    if decision.arguments is not None:
        why = _edit_refusal(item, decision)
        if why is not None:
            return Refused(why)
        if decision.edited_sha256 != item.args_sha256:
            edited = dict(decision.arguments)
    state = State.APPROVED if decision.decision == "approve" else State.DENIED
    return replace(
        item,
        state=state,
        reason=decision.reason or None,
        decided_by=person_json(decision.decided_by),
        resolved_ms=now_ms,
        edited=edited,
    )


def _edit_refusal(item: Item, decision: ApprovalDecision) -> str | None:
    """Why the edit a decision carries is refused (§3.3), or ``None``."""
    edited = decision.arguments
    if decision.decision != "approve" or decision.grant is not None:
        return "an edit comes only with a plain approve"
    if not isinstance(edited, Mapping) or decision.edited_sha256 != args_sha256(dict(edited)):
        return "edited_sha256 does not match the edited arguments"
    editable = item.wire.get("editable") or ()
    if not editable:
        return "edited arguments, and the approval lists no editable keys"
    why = edit_refusal(item.wire.get("arguments") or {}, editable, edited)
    return None if why is None else f"a bad edit: {why}"


def answer(item: Item, reply: ClarificationAnswer, now_ms: int) -> Item | Refused:
    """Apply a device's answer to a question."""
    if item.kind is not Kind.QUESTION:
        return Refused("not a question")
    if not item.pending:
        return Refused(f"already {item.state.value}")
    return replace(
        item,
        state=State.ANSWERED,
        answer=reply.answer,
        decided_by=person_json(reply.answered_by),
        resolved_ms=now_ms,
    )


def end(item: Item, state: State, now_ms: int) -> Item | None:
    """Expire or withdraw a pending item; ``None`` when it already ended."""
    if not item.pending:
        return None
    return replace(item, state=state, resolved_ms=now_ms)


def due(items: Iterable[Item], now_ms: int) -> list[Item]:
    """The pending items whose time has run out."""
    return [item for item in items if item.pending and item.expires_ms <= now_ms]


@dataclass(frozen=True)
class Ended:
    """What an ``inbox_update`` lists of an item that ended (protocol §3.1 ``resolved``),
    without the item's arguments."""

    item_id: str
    state: State
    by: str | None
    resolved_ms: int | None
    edited: bool

    @classmethod
    def of(cls, item: Item) -> Ended:
        by = item.decided_by.get("name") if item.decided_by else None
        return cls(item.item_id, item.state, by, item.resolved_ms, item.edited is not None)


def inbox_body(
    rev: int, agent_name: str, open_items: Iterable[Item], resolved: Iterable[Ended]
) -> dict[str, Any]:
    """A complete ``inbox_update`` body (protocol §3.1)."""
    approvals: list[dict[str, Any]] = []
    clarifications: list[dict[str, Any]] = []
    for item in open_items:
        (approvals if item.kind is Kind.APPROVAL else clarifications).append(dict(item.wire))
    return {
        "rev": rev,
        "agent": {"name": agent_name},
        "approvals": approvals,
        "clarifications": clarifications,
        "resolved": [_resolved_entry(ended) for ended in resolved],
    }


def _resolved_entry(ended: Ended) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": ended.item_id,
        "outcome": WIRE_OUTCOME.get(ended.state, ended.state.value),
        "by": ended.by,
        "at": None if ended.resolved_ms is None else iso_ms(ended.resolved_ms),
    }
    if ended.edited:
        entry["edited"] = True
    return entry


def notification_body(item: Item, agent_name: str) -> dict[str, Any]:
    """The push-sized twin of a new item (protocol §3.2): no blocks, no arguments."""
    return {
        "item_id": item.item_id,
        "category": "approval" if item.kind is Kind.APPROVAL else "clarification",
        "title": agent_name,
        "body": item.summary,
    }
