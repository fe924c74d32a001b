"""Grant payloads (protocol §3.1 grant_offer and grants, §3.3 grant, §3.6, §3.7): parsed,
encoded back unchanged, and refused whole when malformed or oversized."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.errors import PayloadError
from bot.protocol.payloads import (
    MAX_ACTIVITY_ENTRIES,
    MAX_GRANT_KEY_CHARS,
    MAX_GRANTS,
    Activity,
    ActivityEntry,
    ApprovalDecision,
    Grant,
    GrantOffer,
    GrantRequest,
    GrantRevoke,
    InboxUpdate,
    Person,
    encode_payload,
    item_to_wire,
    parse_approval,
    parse_payload,
    raw_payload,
)

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
ADA = {"name": "Ada Lovelace", "telegram_user_id": 4242}


def _offer(**fields: Any) -> dict[str, Any]:
    return {"key": "claude:s1:Bash:git status", "label": "`git status` in this session",
            "max_minutes": 120, **fields}


def _approval(**fields: Any) -> dict[str, Any]:
    return {"id": "apr_1", "tool": "Bash", "summary": "git status -s", **fields}


def _grant(**fields: Any) -> dict[str, Any]:
    return {"id": "gr_1", "key": "k", "label": "git status", "granted_by": ADA,
            "granted_at": "2026-11-29T10:00:00Z", "expires_at": "2026-11-29T10:30:00Z",
            "uses": 3, **fields}


def _entry(index: int = 9, **fields: Any) -> dict[str, Any]:
    return {"id": f"act_{index}", "tool": "Bash", "summary": "git status --porcelain",
            "grant_id": "gr_1", "at": "2026-11-29T10:03:00Z", **fields}


def _decision(**fields: Any) -> dict[str, Any]:
    return {"decision_id": "d1", "approval_id": "apr_1", "decision": "approve", "reason": None,
            "decided_by": ADA, "decided_at": "2026-11-29T10:03:12Z", "args_sha256": "x",
            **fields}


def test_grant_offer_is_parsed_and_kept_through_storage() -> None:
    approval = parse_approval(_approval(grant_offer=_offer()))
    assert approval.grant_offer == GrantOffer("claude:s1:Bash:git status",
                                              "`git status` in this session", 120)
    assert parse_approval(item_to_wire(approval)) == approval
    assert parse_approval(_approval()).grant_offer is None
    assert parse_approval(_approval(grant_offer=None)).grant_offer is None


@pytest.mark.parametrize("offer", [
    "yes",
    _offer(key=None),
    _offer(key="k" * (MAX_GRANT_KEY_CHARS + 1)),
    _offer(label=7),
    _offer(max_minutes=0),
    _offer(max_minutes=True),
    _offer(max_minutes=10**9),
])
def test_a_malformed_grant_offer_refuses_the_approval(offer: object) -> None:
    with pytest.raises(PayloadError, match="grant_offer"):
        parse_approval(_approval(grant_offer=offer))


def test_inbox_update_grants_round_trip() -> None:
    body = {"rev": 5, "agent": {"name": "build-bot"}, "grants": [_grant()]}
    update = parse_payload(raw_payload("inbox_update", body))
    assert isinstance(update, InboxUpdate)
    assert update.grants == (Grant("gr_1", "k", "git status", Person("Ada Lovelace", 4242),
                                   T0, T0.replace(minute=30), 3),)
    assert parse_payload(encode_payload(update)) == update
    no_grants = parse_payload(raw_payload("inbox_update", {"rev": 6}))
    assert isinstance(no_grants, InboxUpdate) and no_grants.grants == ()


@pytest.mark.parametrize("grants", [
    "gr_1",
    [_grant(id=None)],
    [_grant(granted_by="Ada")],
    [_grant(uses=-1)],
    [_grant(), _grant()],
    [_grant(id=f"gr_{i}") for i in range(MAX_GRANTS + 1)],
])
def test_a_malformed_or_oversized_grants_list_refuses_the_update(grants: object) -> None:
    with pytest.raises(PayloadError, match="grants"):
        parse_payload(raw_payload("inbox_update", {"rev": 5, "grants": grants}))


def test_decision_with_grant_round_trip_and_a_deny_never_carries_one() -> None:
    decision = parse_payload(raw_payload("approval_decision",
                                         _decision(grant={"key": "k", "minutes": 30})))
    assert isinstance(decision, ApprovalDecision)
    assert decision.grant == GrantRequest("k", 30)
    assert parse_payload(encode_payload(decision)) == decision
    assert b'"grant"' not in encode_payload(
        parse_payload(raw_payload("approval_decision", _decision())))  # type: ignore[arg-type]
    for bad in ({"key": "k", "minutes": 0}, {"key": 1, "minutes": 5}, "k"):
        with pytest.raises(PayloadError, match="grant"):
            parse_payload(raw_payload("approval_decision", _decision(grant=bad)))
    with pytest.raises(PayloadError, match="deny never carries a grant"):
        parse_payload(raw_payload("approval_decision",
                                  _decision(decision="deny", grant={"key": "k", "minutes": 5})))


def test_grant_revoke_round_trip() -> None:
    revoke = GrantRevoke("gr_1", Person("Ada Lovelace", 4242, "ada"), "2026-11-29T10:05:00Z")
    assert parse_payload(encode_payload(revoke)) == revoke
    with pytest.raises(PayloadError, match="revoked_by"):
        parse_payload(raw_payload("grant_revoke", {"grant_id": "gr_1", "revoked_at": "x"}))


def test_activity_round_trip_and_an_entry_without_grant() -> None:
    activity = parse_payload(raw_payload("activity", {"entries": [
        _entry(), _entry(10, grant_id=None, at="not a time")]}))
    assert activity == Activity((
        ActivityEntry("act_9", "Bash", "git status --porcelain", "gr_1", T0.replace(minute=3)),
        ActivityEntry("act_10", "Bash", "git status --porcelain", None, None),
    ))
    assert parse_payload(encode_payload(activity)) == activity


@pytest.mark.parametrize("body", [
    {"entries": "act_1"},
    {"entries": [_entry(summary=None)]},
    {"entries": [_entry(summary="x" * 5000)]},
    {"entries": [_entry(grant_id=4)]},
    {"entries": [_entry(), _entry()]},
    {"entries": [_entry(i) for i in range(MAX_ACTIVITY_ENTRIES + 1)]},
])
def test_a_malformed_or_oversized_activity_batch_is_refused(body: object) -> None:
    with pytest.raises(PayloadError, match="activity"):
        parse_payload(raw_payload("activity", body))


def test_encoded_payloads_are_plain_json() -> None:
    activity = Activity((ActivityEntry("act_1", "Bash", "ls", "gr_1", T0),))
    assert json.loads(encode_payload(activity))["body"]["entries"][0]["at"] == \
        "2026-11-29T10:00:00Z"
