"""Payload kinds (protocol §3, §5) as frozen dataclasses, with lenient/strict parsing.

Parsing is lenient where the spec says so (blocks as object or bare list, any JSON value as a
block value, unknown fields ignored, unknown kinds returned as :class:`UnknownPayload`,
unknown block types kept for degradation) and strict where it says so (§6 limits, required
fields). Any bad input raises :class:`bot.errors.PayloadError`, never anything else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

from bot.errors import PayloadError
from bot.protocol.encoding import (
    canonical_json,
    format_rfc3339,
    is_int,
    loads_limited,
    parse_rfc3339,
)

JSON: TypeAlias = Any
"""A decoded JSON value: None, bool, int, float, str, list or dict."""

MAX_ITEMS = 1000
"""Approvals + clarifications allowed in one inbox_update (§6)."""

MAX_VALUE_CHARS = 256 * 1024
"""A block value longer than this (as text) is truncated with a note (§6)."""

MAX_PAYLOAD_BYTES = 1 << 20
"""No plaintext can be larger: the whole envelope is at most 1 MiB (§6)."""

PAYLOAD_VERSION = 1

MAX_GRANT_KEY_CHARS = 200
"""A grant key is opaque to the client and at most this long (§3.1)."""
MAX_GRANT_TEXT_CHARS = 500
"""A grant's label, an id, or an activity entry's tool: longer is refused."""
MAX_ACTIVITY_SUMMARY_CHARS = 2000
"""An activity entry's summary: longer is refused."""
MAX_GRANT_MINUTES = 7 * 24 * 60
"""The longest grant an offer may propose (a week); longer offers are refused."""
MAX_GRANTS = 100
"""Grants in force listed in one inbox_update: more refuse the update."""
MAX_ACTIVITY_ENTRIES = 100
"""Entries in one activity payload (§3.7): more refuse the payload."""
MAX_INT = 2**63 - 1
"""The largest integer a payload may carry: every one of them may reach SQLite, whose
integers are signed 64-bit."""


@dataclass(frozen=True)
class Block:
    """One typed block of an approval's description (seed §2).

    ``type`` and ``value_type`` are kept exactly as received, known or not: the renderer
    degrades unknown ones. ``label`` is the block's ``key`` (key_value) or ``label``.
    ``value`` is any JSON value; text over :data:`MAX_VALUE_CHARS` is cut and
    ``truncated_chars`` says how many characters were dropped.
    """

    type: str
    label: str
    value: JSON
    value_type: str
    truncated_chars: int = 0


@dataclass(frozen=True)
class GrantOffer:
    """An approval's offer (§3.1): with this call, the calls under ``key`` may be approved
    for up to ``max_minutes``. ``key`` is opaque to the client."""

    key: str
    label: str
    max_minutes: int


@dataclass(frozen=True)
class Approval:
    """A tool call waiting for a human's approve/deny (seed §1)."""

    id: str
    tool: str
    summary: str
    blocks: tuple[Block, ...]
    """Empty when ``blocks`` was absent, null or empty: render summary + raw arguments."""
    arguments: JSON = field(compare=False, hash=False)
    """The raw arguments as received; ``None`` when absent (digest of ``null``)."""
    created_at: datetime | None = None
    expires_at: datetime | None = None
    grant_offer: GrantOffer | None = None


@dataclass(frozen=True)
class Clarification:
    """A question the agent asks, with optional fixed options."""

    id: str
    question: str
    options: tuple[str, ...] = ()
    created_at: datetime | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True)
class ResolvedItem:
    """How an item that left the inbox ended: ``outcome`` is approved, denied, answered,
    expired or cancelled (an unknown outcome is kept as given)."""

    id: str
    outcome: str
    by: str | None = None
    at: datetime | None = None


@dataclass(frozen=True)
class InboxUpdate:
    """The complete set of items waiting for a human, at revision ``rev`` (§3.1)."""

    rev: int
    agent_name: str
    approvals: tuple[Approval, ...] = ()
    clarifications: tuple[Clarification, ...] = ()
    resolved: tuple[ResolvedItem, ...] = ()
    grants: tuple[Grant, ...] = ()
    """The grants now in force (§3.1); empty when absent."""
    unchanged: tuple[str, ...] = ()
    """Ids of items the same, byte for byte, as in the sender's previous snapshot, which
    :func:`bot.protocol.snapshot.read_payload` did not parse again: in the inbox, but in
    neither ``approvals`` nor ``clarifications``. Empty from :func:`parse_inbox_update`."""


@dataclass(frozen=True)
class Notification:
    """The push-sized twin of an inbox item (§3.2): summary only."""

    item_id: str
    category: str
    title: str
    body: str


@dataclass(frozen=True)
class Person:
    """Who decided or answered (``decided_by`` / ``answered_by``)."""

    name: str
    telegram_user_id: int | None = None
    username: str | None = None


@dataclass(frozen=True)
class Grant:
    """A grant in force as the agent lists it in ``inbox_update.grants`` (§3.1)."""

    id: str
    key: str
    label: str
    granted_by: Person
    granted_at: datetime | None
    expires_at: datetime | None
    uses: int = 0


@dataclass(frozen=True)
class GrantRequest:
    """An approve decision's ``grant`` (§3.3): also approve the calls under ``key`` for
    ``minutes``."""

    key: str
    minutes: int


@dataclass(frozen=True)
class ApprovalDecision:
    """A human's approve/deny of one approval (§3.3); ``decision_id`` is the idempotency key."""

    decision_id: str
    approval_id: str
    decision: str  # "approve" | "deny"
    reason: str | None
    decided_by: Person
    decided_at: str  # RFC 3339, e.g. "2026-11-29T10:03:12Z"
    args_sha256: str  # b64u SHA-256 of the canonical JSON arguments
    grant: GrantRequest | None = None
    """Only on an approve, and only for an approval that offered a grant."""


@dataclass(frozen=True)
class GrantRevoke:
    """End a grant at once (§3.6); revoking an unknown or ended grant is harmless."""

    grant_id: str
    revoked_by: Person
    revoked_at: str  # RFC 3339


@dataclass(frozen=True)
class ActivityEntry:
    """One call the agent ran without asking because a grant covered it (§3.7)."""

    id: str
    tool: str
    summary: str
    grant_id: str | None
    at: datetime | None


@dataclass(frozen=True)
class Activity:
    """Calls run under grants (§3.7); ``id`` of each entry is its dedup key."""

    entries: tuple[ActivityEntry, ...]


@dataclass(frozen=True)
class ClarificationAnswer:
    """A human's answer to a clarification (§3.4)."""

    answer_id: str
    clarification_id: str
    answer: str
    answered_by: Person
    answered_at: str  # RFC 3339


@dataclass(frozen=True)
class InboxRequest:
    """Ask the agent for a complete inbox_update (§3.5)."""

    since_rev: int | None = None


@dataclass(frozen=True)
class DeviceCard:
    """A public card as carried in ``pair_request.device`` (§1, §5); keys are b64u."""

    id: str
    sign_pub: str
    kx_pub: str
    name: str
    platform: str | None = None


@dataclass(frozen=True)
class PairRequest:
    """A device asks an agent to pair (§5)."""

    device: DeviceCard
    proof: str  # b64u HMAC-SHA256


@dataclass(frozen=True)
class PairAccept:
    """The agent accepted a pairing (§5)."""

    agent_id: str
    agent_name: str
    device_id: str


PAIR_REJECT_REASONS = ("used", "expired", "unknown", "bad_proof")
"""Why an agent refuses a pairing (§5)."""


@dataclass(frozen=True)
class PairReject:
    """The agent refused a pairing (§5): ``reason`` is one of :data:`PAIR_REJECT_REASONS`."""

    reason: str


@dataclass(frozen=True)
class UnknownPayload:
    """A payload of a kind this client does not know: opened, then ignored (§2 rule 5)."""

    kind: str


Payload: TypeAlias = (
    InboxUpdate
    | Notification
    | ApprovalDecision
    | ClarificationAnswer
    | InboxRequest
    | PairRequest
    | PairAccept
    | GrantRevoke
    | Activity
    | PairReject
    | UnknownPayload
)


# ---------------------------------------------------------------------------------------
# Parsing. Error messages name fields and item indexes, never the values: they end up in
# logs, and the values are decrypted plaintext.


def parse_payload(plaintext: bytes) -> Payload:
    """Parse a decrypted payload ``{"kind", "v", "body"}``.

    An unknown ``kind`` gives :class:`UnknownPayload` (to be ignored); anything malformed,
    oversize, too deeply nested or not UTF-8 raises :class:`PayloadError`.
    """
    obj = loads_limited(plaintext, max_bytes=MAX_PAYLOAD_BYTES)
    if not isinstance(obj, dict):
        raise PayloadError("payload must be a JSON object")
    kind = obj.get("kind")
    if not isinstance(kind, str):
        raise PayloadError("payload kind must be a string")
    parser = _PARSERS.get(kind)
    if parser is None:
        return UnknownPayload(kind)
    version = obj.get("v")
    if not is_int(version) or version != PAYLOAD_VERSION:
        raise PayloadError(f"{kind}: unsupported payload version (expected {PAYLOAD_VERSION})")
    return parser(obj.get("body"))


def parse_inbox_update(body: object) -> InboxUpdate:
    """Parse an ``inbox_update`` body (§3.1).

    Strict on the whole: more than :data:`MAX_ITEMS` approvals + clarifications, a
    malformed item, or two items with the same id reject the entire update (the error
    names the item), so a client never applies half a snapshot. Lenient inside an item
    as the spec asks (blocks shapes, block values, unknown fields, unparseable times).
    """
    obj = _object(body, "inbox_update")
    raw_approvals = _list(obj, "approvals", "inbox_update")
    raw_clarifications = _list(obj, "clarifications", "inbox_update")
    check_item_count(len(raw_approvals) + len(raw_clarifications))
    return inbox_update_around(
        obj,
        approvals=_parse_items(parse_approval, raw_approvals, "approvals"),
        clarifications=_parse_items(parse_clarification, raw_clarifications, "clarifications"),
    )


def check_item_count(count: int) -> None:
    """Refuse an ``inbox_update`` of more than :data:`MAX_ITEMS` items."""
    if count > MAX_ITEMS:
        raise PayloadError(
            f"inbox_update has {count} approvals + clarifications; at most {MAX_ITEMS} allowed"
        )


def inbox_update_around(
    obj: dict[str, JSON],
    *,
    approvals: tuple[Approval, ...],
    clarifications: tuple[Clarification, ...],
    unchanged: tuple[str, ...] = (),
) -> InboxUpdate:
    """The ``inbox_update`` of body ``obj`` around its items, already parsed (or, by id,
    known to be unchanged): everything but the items themselves is parsed and checked here."""
    rev = _int(obj, "rev", "inbox_update")
    agent_name = _agent_name(obj)
    _refuse_duplicate_ids(approvals, clarifications, unchanged)
    resolved = _parse_items(_parse_resolved, _list(obj, "resolved", "inbox_update"), "resolved")
    raw_grants = _list(obj, "grants", "inbox_update")
    if len(raw_grants) > MAX_GRANTS:
        raise PayloadError(
            f"inbox_update lists {len(raw_grants)} grants; at most {MAX_GRANTS} allowed")
    grants = _parse_items(_parse_grant, raw_grants, "grants")
    if len({grant.id for grant in grants}) != len(grants):
        raise PayloadError("inbox_update grants: duplicate grant id")
    return InboxUpdate(
        rev=rev,
        agent_name=agent_name,
        approvals=approvals,
        clarifications=clarifications,
        resolved=resolved,
        grants=grants,
        unchanged=unchanged,
    )


def parse_approval(obj: object) -> Approval:
    """Parse one approval (seed §1–§2): ``id``, ``tool`` and ``summary`` are required."""
    item = _object(obj, "approval")
    return Approval(
        id=_str(item, "id", "approval"),
        tool=_str(item, "tool", "approval"),
        summary=_str(item, "summary", "approval"),
        blocks=_parse_blocks(item.get("blocks")),
        arguments=item.get("arguments"),
        created_at=parse_rfc3339(item.get("created_at")),
        expires_at=parse_rfc3339(item.get("expires_at")),
        grant_offer=_parse_grant_offer(item.get("grant_offer")),
    )


def _parse_grant_offer(value: JSON) -> GrantOffer | None:
    """An approval's ``grant_offer``; absent or null is none, anything malformed refused."""
    if value is None:
        return None
    where = "approval grant_offer"
    offer = _object(value, where)
    max_minutes = _int(offer, "max_minutes", where)
    if not 1 <= max_minutes <= MAX_GRANT_MINUTES:
        raise PayloadError(f"{where}: max_minutes must be 1 to {MAX_GRANT_MINUTES}")
    return GrantOffer(
        key=_bounded_str(offer, "key", where, MAX_GRANT_KEY_CHARS),
        label=_bounded_str(offer, "label", where, MAX_GRANT_TEXT_CHARS),
        max_minutes=max_minutes,
    )


def _parse_grant(obj: object) -> Grant:
    where = "grant"
    grant = _object(obj, where)
    return Grant(
        id=_bounded_str(grant, "id", where, MAX_GRANT_TEXT_CHARS),
        key=_bounded_str(grant, "key", where, MAX_GRANT_KEY_CHARS),
        label=_bounded_str(grant, "label", where, MAX_GRANT_TEXT_CHARS),
        granted_by=_parse_person(grant, "granted_by", where),
        granted_at=parse_rfc3339(grant.get("granted_at")),
        expires_at=parse_rfc3339(grant.get("expires_at")),
        uses=_optional_int(grant, "uses", where) or 0,
    )


def parse_clarification(obj: object) -> Clarification:
    """Parse one clarification: ``id`` and ``question`` required, ``options`` strings."""
    item = _object(obj, "clarification")
    options = _list(item, "options", "clarification")
    if not all(isinstance(option, str) for option in options):
        raise PayloadError("clarification: options must be strings")
    return Clarification(
        id=_str(item, "id", "clarification"),
        question=_str(item, "question", "clarification"),
        options=tuple(options),
        created_at=parse_rfc3339(item.get("created_at")),
        expires_at=parse_rfc3339(item.get("expires_at")),
    )


def _parse_items(parse: Callable[[object], Any], raw: list[JSON], name: str) -> tuple[Any, ...]:
    items = []
    for index, value in enumerate(raw):
        try:
            items.append(parse(value))
        except PayloadError as exc:
            raise PayloadError(f"inbox_update {name}[{index}]: {exc}") from exc
    return tuple(items)


def _refuse_duplicate_ids(
    approvals: tuple[Approval, ...],
    clarifications: tuple[Clarification, ...],
    unchanged: tuple[str, ...],
) -> None:
    ids = [*(a.id for a in approvals), *(c.id for c in clarifications), *unchanged]
    if len(set(ids)) == len(ids):
        return
    seen: set[str] = set()
    for index, item_id in enumerate(ids):
        if item_id in seen:
            name, at = "approvals", index
            if at >= len(approvals):
                name, at = "clarifications", at - len(approvals)
                if at >= len(clarifications):
                    name, at = "unchanged items", at - len(clarifications)
            raise PayloadError(f"inbox_update {name}[{at}]: duplicate item id")
        seen.add(item_id)


def _agent_name(obj: dict[str, JSON]) -> str:
    agent = obj.get("agent")
    if agent is None:
        return ""
    name = _object(agent, "inbox_update agent").get("name")
    if name is None:
        return ""
    if not isinstance(name, str):
        raise PayloadError("inbox_update: agent.name must be a string")
    return name


def _parse_blocks(value: JSON) -> tuple[Block, ...]:
    if isinstance(value, dict):
        value = value.get("blocks")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PayloadError("approval: blocks must be a list or an object with a blocks list")
    blocks = []
    for index, raw in enumerate(value):
        if not isinstance(raw, dict):
            raise PayloadError(f"approval: blocks[{index}] must be a JSON object")
        blocks.append(_parse_block(raw))
    return tuple(blocks)


def _parse_block(raw: dict[str, JSON]) -> Block:
    block_type = _text_or_empty(raw.get("type"))
    first, second = ("key", "label") if block_type == "key_value" else ("label", "key")
    label = raw.get(first)
    if not isinstance(label, str):
        label = raw.get(second)
        if not isinstance(label, str):
            label = ""
    value, truncated = _truncated_value(raw.get("value"))
    earlier = raw.get("truncated_chars")
    return Block(
        type=block_type,
        label=label,
        value=value,
        value_type=_text_or_empty(raw.get("value_type")),
        truncated_chars=truncated if earlier is None else truncated + _earlier_truncation(earlier),
    )


def _earlier_truncation(value: JSON) -> int:
    """``truncated_chars`` as written by :func:`item_to_wire` (not a wire field of the
    spec), so a stored item reads back with its truncation note."""
    if is_int(value) and 0 < value <= MAX_PAYLOAD_BYTES:
        return value
    return 0


def _truncated_value(value: JSON) -> tuple[JSON, int]:
    """Cut a value whose text exceeds :data:`MAX_VALUE_CHARS` (a long object or array
    becomes its cut JSON text). Python slices on code points, never inside one."""
    if isinstance(value, str):
        if len(value) <= MAX_VALUE_CHARS:
            return value, 0
        text = value
    elif isinstance(value, dict | list):
        text = json.dumps(value, ensure_ascii=False)
        if len(text) <= MAX_VALUE_CHARS:
            return value, 0
    else:
        return value, 0
    return text[:MAX_VALUE_CHARS], len(text) - MAX_VALUE_CHARS


def _parse_resolved(obj: object) -> ResolvedItem:
    item = _object(obj, "resolved item")
    by = item.get("by")
    return ResolvedItem(
        id=_str(item, "id", "resolved item"),
        outcome=_str(item, "outcome", "resolved item"),
        by=by if isinstance(by, str) else None,
        at=parse_rfc3339(item.get("at")),
    )


def _parse_notification(body: object) -> Notification:
    obj = _object(body, "notification")
    return Notification(
        item_id=_str(obj, "item_id", "notification"),
        category=_str(obj, "category", "notification"),
        title=_str(obj, "title", "notification"),
        body=_str(obj, "body", "notification"),
    )


def _parse_person(obj: dict[str, JSON], name: str, where: str) -> Person:
    person = _object(obj.get(name), f"{where} {name}")
    context = f"{where} {name}"
    return Person(
        name=_str(person, "name", context),
        telegram_user_id=_optional_int(person, "telegram_user_id", context),
        username=_optional_str(person, "username", context),
    )


def _parse_approval_decision(body: object) -> ApprovalDecision:
    where = "approval_decision"
    obj = _object(body, where)
    decision = _str(obj, "decision", where)
    if decision not in ("approve", "deny"):
        raise PayloadError(f"{where}: decision must be approve or deny")
    return ApprovalDecision(
        decision_id=_str(obj, "decision_id", where),
        approval_id=_str(obj, "approval_id", where),
        decision=decision,
        reason=_optional_str(obj, "reason", where),
        decided_by=_parse_person(obj, "decided_by", where),
        decided_at=_str(obj, "decided_at", where),
        args_sha256=_str(obj, "args_sha256", where),
        grant=_parse_grant_request(obj.get("grant"), decision),
    )


def _parse_grant_request(value: JSON, decision: str) -> GrantRequest | None:
    if value is None:
        return None
    where = "approval_decision grant"
    if decision != "approve":
        raise PayloadError(f"{where}: a deny never carries a grant")
    grant = _object(value, where)
    minutes = _int(grant, "minutes", where)
    if not 1 <= minutes <= MAX_GRANT_MINUTES:
        raise PayloadError(f"{where}: minutes must be 1 to {MAX_GRANT_MINUTES}")
    return GrantRequest(key=_bounded_str(grant, "key", where, MAX_GRANT_KEY_CHARS),
                        minutes=minutes)


def _parse_grant_revoke(body: object) -> GrantRevoke:
    where = "grant_revoke"
    obj = _object(body, where)
    return GrantRevoke(
        grant_id=_bounded_str(obj, "grant_id", where, MAX_GRANT_TEXT_CHARS),
        revoked_by=_parse_person(obj, "revoked_by", where),
        revoked_at=_str(obj, "revoked_at", where),
    )


def _parse_activity(body: object) -> Activity:
    """An ``activity`` batch (§3.7): at most :data:`MAX_ACTIVITY_ENTRIES` well-formed
    entries with distinct ids, or the whole batch is refused."""
    obj = _object(body, "activity")
    raw = _list(obj, "entries", "activity")
    if len(raw) > MAX_ACTIVITY_ENTRIES:
        raise PayloadError(
            f"activity has {len(raw)} entries; at most {MAX_ACTIVITY_ENTRIES} allowed")
    entries: list[ActivityEntry] = []
    for index, value in enumerate(raw):
        where = f"activity entries[{index}]"
        entry = _object(value, where)
        grant_id = entry.get("grant_id")
        entries.append(ActivityEntry(
            id=_bounded_str(entry, "id", where, MAX_GRANT_TEXT_CHARS),
            tool=_bounded_str(entry, "tool", where, MAX_GRANT_TEXT_CHARS),
            summary=_bounded_str(entry, "summary", where, MAX_ACTIVITY_SUMMARY_CHARS),
            grant_id=None if grant_id is None
            else _bounded_str(entry, "grant_id", where, MAX_GRANT_TEXT_CHARS),
            at=parse_rfc3339(entry.get("at")),
        ))
    if len({entry.id for entry in entries}) != len(entries):
        raise PayloadError("activity: duplicate entry id")
    return Activity(tuple(entries))


def _parse_clarification_answer(body: object) -> ClarificationAnswer:
    where = "clarification_answer"
    obj = _object(body, where)
    return ClarificationAnswer(
        answer_id=_str(obj, "answer_id", where),
        clarification_id=_str(obj, "clarification_id", where),
        answer=_str(obj, "answer", where),
        answered_by=_parse_person(obj, "answered_by", where),
        answered_at=_str(obj, "answered_at", where),
    )


def _parse_inbox_request(body: object) -> InboxRequest:
    since_rev = _optional_int(_object(body, "inbox_request"), "since_rev", "inbox_request")
    return InboxRequest(since_rev=since_rev)


def _parse_pair_request(body: object) -> PairRequest:
    obj = _object(body, "pair_request")
    device = _object(obj.get("device"), "pair_request device")
    where = "pair_request device"
    return PairRequest(
        device=DeviceCard(
            id=_str(device, "id", where),
            sign_pub=_str(device, "sign_pub", where),
            kx_pub=_str(device, "kx_pub", where),
            name=_str(device, "name", where),
            platform=_optional_str(device, "platform", where),
        ),
        proof=_str(obj, "proof", "pair_request"),
    )


def _parse_pair_accept(body: object) -> PairAccept:
    obj = _object(body, "pair_accept")
    agent = _object(obj.get("agent"), "pair_accept agent")
    return PairAccept(
        agent_id=_str(agent, "id", "pair_accept agent"),
        agent_name=_str(agent, "name", "pair_accept agent"),
        device_id=_str(obj, "device_id", "pair_accept"),
    )


def _parse_pair_reject(body: object) -> PairReject:
    reason = _str(_object(body, "pair_reject"), "reason", "pair_reject")
    if reason not in PAIR_REJECT_REASONS:
        raise PayloadError(f"pair_reject: reason must be one of {', '.join(PAIR_REJECT_REASONS)}")
    return PairReject(reason=reason)


_PARSERS: dict[str, Callable[[object], Payload]] = {
    "inbox_update": parse_inbox_update,
    "notification": _parse_notification,
    "approval_decision": _parse_approval_decision,
    "clarification_answer": _parse_clarification_answer,
    "inbox_request": _parse_inbox_request,
    "pair_request": _parse_pair_request,
    "pair_accept": _parse_pair_accept,
    "grant_revoke": _parse_grant_revoke,
    "activity": _parse_activity,
    "pair_reject": _parse_pair_reject,
}


def _object(value: object, where: str) -> dict[str, JSON]:
    if not isinstance(value, dict):
        raise PayloadError(f"{where} must be a JSON object")
    return value


def _str(obj: dict[str, JSON], name: str, where: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise PayloadError(f"{where}: {name} must be a string")
    return value


def _bounded_str(obj: dict[str, JSON], name: str, where: str, limit: int) -> str:
    value = _str(obj, name, where)
    if len(value) > limit:
        raise PayloadError(f"{where}: {name} is longer than {limit} characters")
    return value


def _optional_str(obj: dict[str, JSON], name: str, where: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise PayloadError(f"{where}: {name} must be a string or null")
    return value


def _int(obj: dict[str, JSON], name: str, where: str) -> int:
    value = obj.get(name)
    if not is_int(value) or not 0 <= value <= MAX_INT:
        raise PayloadError(f"{where}: {name} must be an integer from 0 to 2^63-1")
    return value


def _optional_int(obj: dict[str, JSON], name: str, where: str) -> int | None:
    return None if obj.get(name) is None else _int(obj, name, where)


def _list(obj: dict[str, JSON], name: str, where: str) -> list[JSON]:
    value = obj.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PayloadError(f"{where}: {name} must be a list")
    return value


def _text_or_empty(value: JSON) -> str:
    return value if isinstance(value, str) else ""


# ---------------------------------------------------------------------------------------
# Encoding: the exact wire field names of §3 and §5.


def encode_payload(payload: Payload) -> bytes:
    """Serialise any payload as ``{"kind", "v": 1, "body"}`` canonical UTF-8 JSON."""
    kind, body = _encode_body(payload)
    return raw_payload(kind, body)


def raw_payload(kind: str, body: JSON) -> bytes:
    """Serialise an arbitrary body under ``kind`` (hand-made blocks, future kinds)."""
    return canonical_json({"kind": kind, "v": PAYLOAD_VERSION, "body": body})


def _encode_body(payload: Payload) -> tuple[str, JSON]:
    match payload:
        case InboxUpdate():
            return "inbox_update", {
                "rev": payload.rev,
                "agent": {"name": payload.agent_name},
                "approvals": [_encode_approval(a) for a in payload.approvals],
                "clarifications": [_encode_clarification(c) for c in payload.clarifications],
                "resolved": [_encode_resolved(r) for r in payload.resolved],
                **({"grants": [_encode_grant(g) for g in payload.grants]}
                   if payload.grants else {}),
            }
        case Notification():
            return "notification", {
                "item_id": payload.item_id,
                "category": payload.category,
                "title": payload.title,
                "body": payload.body,
            }
        case ApprovalDecision():
            decision: dict[str, JSON] = {
                "decision_id": payload.decision_id,
                "approval_id": payload.approval_id,
                "decision": payload.decision,
                "reason": payload.reason,
                "decided_by": _encode_person(payload.decided_by),
                "decided_at": payload.decided_at,
                "args_sha256": payload.args_sha256,
            }
            if payload.grant is not None:
                decision["grant"] = {"key": payload.grant.key, "minutes": payload.grant.minutes}
            return "approval_decision", decision
        case GrantRevoke():
            return "grant_revoke", {
                "grant_id": payload.grant_id,
                "revoked_by": _encode_person(payload.revoked_by),
                "revoked_at": payload.revoked_at,
            }
        case Activity():
            return "activity", {"entries": [_encode_activity_entry(e) for e in payload.entries]}
        case ClarificationAnswer():
            return "clarification_answer", {
                "answer_id": payload.answer_id,
                "clarification_id": payload.clarification_id,
                "answer": payload.answer,
                "answered_by": _encode_person(payload.answered_by),
                "answered_at": payload.answered_at,
            }
        case InboxRequest():
            return "inbox_request", {"since_rev": payload.since_rev}
        case PairRequest():
            device = payload.device
            card = {
                "id": device.id,
                "sign_pub": device.sign_pub,
                "kx_pub": device.kx_pub,
                "name": device.name,
            }
            if device.platform is not None:
                card["platform"] = device.platform
            return "pair_request", {"device": card, "proof": payload.proof}
        case PairAccept():
            return "pair_accept", {
                "agent": {"id": payload.agent_id, "name": payload.agent_name},
                "device_id": payload.device_id,
            }
        case PairReject():
            return "pair_reject", {"reason": payload.reason}
        case UnknownPayload():
            return payload.kind, {}
    raise TypeError(f"not a payload: {type(payload).__name__}")


def item_to_wire(item: Approval | Clarification) -> dict[str, JSON]:
    """One inbox item as its wire object, to store it and read it back later with
    :func:`parse_approval` / :func:`parse_clarification` (equal, truncation note kept)."""
    if isinstance(item, Approval):
        return _encode_approval(item)
    return _encode_clarification(item)


def _encode_approval(approval: Approval) -> dict[str, JSON]:
    obj: dict[str, JSON] = {
        "id": approval.id,
        "tool": approval.tool,
        "summary": approval.summary,
        "arguments": approval.arguments,
    }
    if approval.blocks:
        obj["blocks"] = {
            "v": 1,
            "summary": approval.summary,
            "blocks": [_encode_block(b) for b in approval.blocks],
        }
    _put_time(obj, "created_at", approval.created_at)
    _put_time(obj, "expires_at", approval.expires_at)
    if approval.grant_offer is not None:
        offer = approval.grant_offer
        obj["grant_offer"] = {"key": offer.key, "label": offer.label,
                              "max_minutes": offer.max_minutes}
    return obj


def _encode_grant(grant: Grant) -> dict[str, JSON]:
    obj: dict[str, JSON] = {"id": grant.id, "key": grant.key, "label": grant.label,
                            "granted_by": _encode_person(grant.granted_by), "uses": grant.uses}
    _put_time(obj, "granted_at", grant.granted_at)
    _put_time(obj, "expires_at", grant.expires_at)
    return obj


def _encode_activity_entry(entry: ActivityEntry) -> dict[str, JSON]:
    obj: dict[str, JSON] = {"id": entry.id, "tool": entry.tool, "summary": entry.summary,
                            "grant_id": entry.grant_id}
    _put_time(obj, "at", entry.at)
    return obj


def _encode_block(block: Block) -> dict[str, JSON]:
    label_field = "key" if block.type == "key_value" else "label"
    obj: dict[str, JSON] = {
        "type": block.type,
        label_field: block.label,
        "value": block.value,
        "value_type": block.value_type,
    }
    if block.truncated_chars:
        obj["truncated_chars"] = block.truncated_chars
    return obj


def _encode_clarification(clarification: Clarification) -> dict[str, JSON]:
    obj: dict[str, JSON] = {
        "id": clarification.id,
        "question": clarification.question,
        "options": list(clarification.options),
    }
    _put_time(obj, "created_at", clarification.created_at)
    _put_time(obj, "expires_at", clarification.expires_at)
    return obj


def _encode_resolved(item: ResolvedItem) -> dict[str, JSON]:
    return {
        "id": item.id,
        "outcome": item.outcome,
        "by": item.by,
        "at": None if item.at is None else format_rfc3339(item.at),
    }


def _encode_person(person: Person) -> dict[str, JSON]:
    # Absent optional fields are omitted, as in the protocol's answered_by example.
    obj: dict[str, JSON] = {"name": person.name}
    if person.telegram_user_id is not None:
        obj["telegram_user_id"] = person.telegram_user_id
    if person.username is not None:
        obj["username"] = person.username
    return obj


def _put_time(obj: dict[str, JSON], name: str, value: datetime | None) -> None:
    if value is not None:
        obj[name] = format_rfc3339(value)
