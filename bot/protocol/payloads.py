"""Payload kinds (protocol §3, §5), each declared once as a frozen dataclass whose
annotations say its wire form; parsing and encoding are derived from them
(:mod:`bot.protocol.wire`).

Parsing is lenient where the spec says so (blocks as object or bare list, any JSON value as a
block value, unknown fields ignored, unknown kinds returned as :class:`UnknownPayload`,
unknown block types kept for degradation) and strict where it says so (§6 limits, required
fields). Any bad input raises :class:`bot.errors.PayloadError`, never anything else, and its
message names fields and item indexes, never values: they are decrypted plaintext.

A new kind is one declaration here (``@declared("kind_name", kind=True)``) plus a handler in
each application that takes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, TypeAlias

from bot.errors import PayloadError
from bot.protocol.encoding import args_sha256, canonical_json, is_int, loads_limited
from bot.protocol.wire import (
    ABSENT,
    FIRST,
    KINDS,
    LENIENT,
    LOCAL,
    NULL,
    OMIT_EMPTY,
    At,
    Custom,
    IfAbsent,
    Items,
    MaxChars,
    OneOf,
    Range,
    declared,
    read,
    write,
)
from bot.protocol.wire import (
    JSON as JSON,
)
from bot.protocol.wire import (
    MAX_INT as MAX_INT,
)

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


MAX_EDITABLE_KEYS = 16
"""Keys of an approval's arguments it may list as editable (§3.1)."""

PAIR_REJECT_REASONS = ("used", "expired", "unknown", "bad_proof")
"""Why an agent refuses a pairing (§5)."""

GrantKey: TypeAlias = Annotated[str, MaxChars(MAX_GRANT_KEY_CHARS)]
GrantText: TypeAlias = Annotated[str, MaxChars(MAX_GRANT_TEXT_CHARS)]
Minutes: TypeAlias = Annotated[int, Range(1, MAX_GRANT_MINUTES)]


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


def _write_blocks(approval: Approval) -> JSON:
    if not approval.blocks:
        return ABSENT
    return {"v": 1, "summary": approval.summary,
            "blocks": [_encode_block(block) for block in approval.blocks]}


def _read_blocks(value: JSON, where: str) -> tuple[Block, ...]:
    return _parse_blocks(value)


@declared("approval grant_offer")
@dataclass(frozen=True)
class GrantOffer:
    """An approval's offer (§3.1): with this call, the calls under ``key`` may be approved
    for up to ``max_minutes``. ``key`` is opaque to the client."""

    key: GrantKey
    label: GrantText
    max_minutes: Minutes


def _check_editable(approval: Approval, where: str) -> None:
    """Every key an approval lets a person edit is a top-level key of its arguments."""
    if approval.editable and not (isinstance(approval.arguments, dict)
                                  and all(k in approval.arguments for k in approval.editable)):
        raise PayloadError(f"{where}: editable lists a key its arguments do not have")


@declared("approval", check=_check_editable)
@dataclass(frozen=True)
class Approval:
    """A tool call waiting for a human's approve/deny (seed §1)."""

    id: str
    tool: str
    summary: str
    blocks: Annotated[tuple[Block, ...], Custom(_read_blocks, _write_blocks)]
    """Empty when ``blocks`` was absent, null or empty: render summary + raw arguments."""
    arguments: Annotated[JSON, NULL] = field(compare=False, hash=False)
    """The raw arguments as received; ``None`` when absent (digest of ``null``)."""
    created_at: datetime | None = None
    expires_at: datetime | None = None
    grant_offer: GrantOffer | None = None
    editable: Annotated[tuple[str, ...], Items(MAX_EDITABLE_KEYS, unique="."), OMIT_EMPTY] = ()
    """The top-level keys of ``arguments`` a person may edit before approving (§3.1)."""


@declared("clarification")
@dataclass(frozen=True)
class Clarification:
    """A question the agent asks, with optional fixed options."""

    id: str
    question: str
    options: tuple[str, ...] = ()
    created_at: datetime | None = None
    expires_at: datetime | None = None


@declared("resolved item")
@dataclass(frozen=True)
class ResolvedItem:
    """How an item that left the inbox ended: ``outcome`` is approved, denied, answered,
    expired or cancelled (an unknown outcome is kept as given)."""

    id: str
    outcome: str
    by: Annotated[str | None, LENIENT, NULL] = None
    at: Annotated[datetime | None, NULL] = None


@declared("inbox_update", kind=True)
@dataclass(frozen=True)
class InboxUpdate:
    """The complete set of items waiting for a human, at revision ``rev`` (§3.1)."""

    rev: int
    agent_name: Annotated[str, At(("agent", "name")), IfAbsent("")]
    approvals: Annotated[tuple[Approval, ...], FIRST] = ()
    clarifications: Annotated[tuple[Clarification, ...], FIRST] = ()
    resolved: tuple[ResolvedItem, ...] = ()
    grants: Annotated[tuple[Grant, ...], Items(MAX_GRANTS, unique="id"), OMIT_EMPTY] = ()
    """The grants now in force (§3.1); empty when absent."""
    unchanged: Annotated[tuple[str, ...], LOCAL] = ()
    """Ids of items the same, byte for byte, as in the sender's previous snapshot, which
    :func:`bot.protocol.snapshot.read_payload` did not parse again: in the inbox, but in
    neither ``approvals`` nor ``clarifications``. Empty from :func:`parse_inbox_update`."""


@declared("notification", kind=True)
@dataclass(frozen=True)
class Notification:
    """The push-sized twin of an inbox item (§3.2): summary only."""

    item_id: str
    category: str
    title: str
    body: str


@declared("person")
@dataclass(frozen=True)
class Person:
    """Who decided or answered (``decided_by`` / ``answered_by``)."""

    name: str
    telegram_user_id: int | None = None
    username: str | None = None


@declared("grant")
@dataclass(frozen=True)
class Grant:
    """A grant in force as the agent lists it in ``inbox_update.grants`` (§3.1)."""

    id: GrantText
    key: GrantKey
    label: GrantText
    granted_by: Person
    granted_at: datetime | None
    expires_at: datetime | None
    uses: int = 0


@declared("approval_decision grant")
@dataclass(frozen=True)
class GrantRequest:
    """An approve decision's ``grant`` (§3.3): also approve the calls under ``key`` for
    ``minutes``."""

    key: GrantKey
    minutes: Minutes


def _check_decision(decision: ApprovalDecision, where: str) -> None:
    """What §3.3 asks across fields: a grant and edited arguments only on an approve,
    never both, and edited arguments with the digest that binds them."""
    if decision.grant is not None and decision.decision != "approve":
        raise PayloadError(f"{where} grant: a deny never carries a grant")
    if decision.arguments is None and decision.edited_sha256 is None:
        return
    if decision.decision != "approve":
        raise PayloadError(f"{where}: a deny never carries arguments")
    if decision.grant is not None:
        raise PayloadError(f"{where}: an edited approval never carries a grant")
    if not isinstance(decision.arguments, dict) or decision.edited_sha256 is None:
        raise PayloadError(
            f"{where}: edited arguments are a JSON object, sent with edited_sha256")
    if args_sha256(decision.arguments) != decision.edited_sha256:
        raise PayloadError(f"{where}: edited_sha256 is not the digest of the arguments")


@declared("approval_decision", kind=True, check=_check_decision)
@dataclass(frozen=True)
class ApprovalDecision:
    """A human's approve/deny of one approval (§3.3); ``decision_id`` is the idempotency key."""

    decision_id: str
    approval_id: str
    decision: Annotated[str, OneOf(("approve", "deny"))]
    reason: Annotated[str | None, NULL]
    decided_by: Person
    decided_at: str  # RFC 3339, e.g. "2026-11-29T10:03:12Z"
    args_sha256: str  # b64u SHA-256 of the canonical JSON arguments
    grant: GrantRequest | None = None
    """Only on an approve, and only for an approval that offered a grant."""
    arguments: JSON = field(default=None, compare=False, hash=False)
    """The complete arguments a person approved after editing (§3.3); ``None`` unedited."""
    edited_sha256: str | None = None
    """b64u SHA-256 of the canonical JSON of the edited ``arguments``."""


@declared("grant_revoke", kind=True)
@dataclass(frozen=True)
class GrantRevoke:
    """End a grant at once (§3.6); revoking an unknown or ended grant is harmless."""

    grant_id: GrantText
    revoked_by: Person
    revoked_at: str  # RFC 3339


@declared("activity entry")
@dataclass(frozen=True)
class ActivityEntry:
    """One call the agent ran without asking because a grant covered it (§3.7)."""

    id: GrantText
    tool: GrantText
    summary: Annotated[str, MaxChars(MAX_ACTIVITY_SUMMARY_CHARS)]
    grant_id: Annotated[str | None, MaxChars(MAX_GRANT_TEXT_CHARS), NULL]
    at: datetime | None


@declared("activity", kind=True)
@dataclass(frozen=True)
class Activity:
    """Calls run under grants (§3.7); ``id`` of each entry is its dedup key."""

    entries: Annotated[tuple[ActivityEntry, ...], Items(MAX_ACTIVITY_ENTRIES, unique="id")]


@declared("clarification_answer", kind=True)
@dataclass(frozen=True)
class ClarificationAnswer:
    """A human's answer to a clarification (§3.4)."""

    answer_id: str
    clarification_id: str
    answer: str
    answered_by: Person
    answered_at: str  # RFC 3339


@declared("inbox_request", kind=True)
@dataclass(frozen=True)
class InboxRequest:
    """Ask the agent for a complete inbox_update (§3.5)."""

    since_rev: Annotated[int | None, NULL] = None


@declared("pair_request device")
@dataclass(frozen=True)
class DeviceCard:
    """A public card as carried in ``pair_request.device`` (§1, §5); keys are b64u."""

    id: str
    sign_pub: str
    kx_pub: str
    name: str
    platform: str | None = None


@declared("pair_request", kind=True)
@dataclass(frozen=True)
class PairRequest:
    """A device asks an agent to pair (§5)."""

    device: DeviceCard
    proof: str  # b64u HMAC-SHA256


@declared("pair_accept", kind=True)
@dataclass(frozen=True)
class PairAccept:
    """The agent accepted a pairing (§5)."""

    agent_id: Annotated[str, At(("agent", "id"))]
    agent_name: Annotated[str, At(("agent", "name"))]
    device_id: str


@declared("pair_reject", kind=True)
@dataclass(frozen=True)
class PairReject:
    """The agent refused a pairing (§5): ``reason`` is one of :data:`PAIR_REJECT_REASONS`."""

    reason: Annotated[str, OneOf(PAIR_REJECT_REASONS)]


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

KIND_OF: dict[type, str] = {cls: kind for kind, cls in KINDS.items()}
"""The wire name of every payload class."""


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
    cls = KINDS.get(kind)
    if cls is None:
        return UnknownPayload(kind)
    version = obj.get("v")
    if not is_int(version) or version != PAYLOAD_VERSION:
        raise PayloadError(f"{kind}: unsupported payload version (expected {PAYLOAD_VERSION})")
    if cls is InboxUpdate:
        return parse_inbox_update(obj.get("body"))
    parsed: Payload = read(cls, obj.get("body"))
    return parsed


def parse_inbox_update(body: object) -> InboxUpdate:
    """Parse an ``inbox_update`` body (§3.1).

    Strict on the whole: more than :data:`MAX_ITEMS` approvals + clarifications, a
    malformed item, or two items with the same id reject the entire update (the error
    names the item), so a client never applies half a snapshot. Lenient inside an item
    as the spec asks (blocks shapes, block values, unknown fields, unparseable times).
    """
    if not isinstance(body, dict):
        raise PayloadError("inbox_update must be a JSON object")
    counted = [body.get(name) for name in ("approvals", "clarifications")]
    check_item_count(sum(len(items) for items in counted if isinstance(items, list)))
    update = read(InboxUpdate, body)
    _refuse_duplicate_ids(update.approvals, update.clarifications, ())
    return update


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
    update = read(InboxUpdate, obj, approvals=approvals, clarifications=clarifications,
                  unchanged=unchanged)
    _refuse_duplicate_ids(approvals, clarifications, unchanged)
    return update


def parse_approval(obj: object) -> Approval:
    """Parse one approval (seed §1–§2): ``id``, ``tool`` and ``summary`` are required."""
    return read(Approval, obj)


def parse_clarification(obj: object) -> Clarification:
    """Parse one clarification: ``id`` and ``question`` required, ``options`` strings."""
    return read(Clarification, obj)


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


def _text_or_empty(value: JSON) -> str:
    return value if isinstance(value, str) else ""


def encode_payload(payload: Payload) -> bytes:
    """Serialise any payload as ``{"kind", "v": 1, "body"}`` canonical UTF-8 JSON."""
    if isinstance(payload, UnknownPayload):
        return raw_payload(payload.kind, {})
    kind = KIND_OF.get(type(payload))
    if kind is None:
        raise TypeError(f"not a payload: {type(payload).__name__}")
    return raw_payload(kind, write(payload))


def raw_payload(kind: str, body: JSON) -> bytes:
    """Serialise an arbitrary body under ``kind`` (hand-made blocks, future kinds)."""
    return canonical_json({"kind": kind, "v": PAYLOAD_VERSION, "body": body})


def item_to_wire(item: Approval | Clarification) -> dict[str, JSON]:
    """One inbox item as its wire object, to store it and read it back later with
    :func:`parse_approval` / :func:`parse_clarification` (equal, truncation note kept)."""
    return write(item)
