"""The bot's pure grant rules: what a card offers, grants reported against grants held,
a grant's status, and the "Approve + …" and Revoke taps."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.core.grants import (
    GrantRow,
    grant_status,
    may_be_granted,
    minutes_left,
    offered_minutes,
    plan_grants,
)
from bot.core.policy import (
    Action,
    Decided,
    ItemView,
    Refusal,
    Refused,
    Voter,
    evaluate_revoke,
    evaluate_tap,
)
from bot.protocol.payloads import Grant, GrantOffer, Person, parse_approval

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
ADA = Voter(4242, "Ada", T0_MS)


def _row(grant_id: str = "gr_1", **fields: object) -> GrantRow:
    values: dict[str, object] = dict(
        agent_id="a", grant_id=grant_id, key="k", label="git status", granted_by="Ada",
        granted_at=T0_MS, expires_at=T0_MS + 30 * 60_000, uses=0, token="t", state="active",
        revoke_by=None, revoke_at=None, ended_at=None)
    values.update(fields)
    return GrantRow(**values)  # type: ignore[arg-type]


def _grant(grant_id: str = "gr_1", uses: int = 0) -> Grant:
    return Grant(grant_id, "k", "git status", Person("Ada"), T0,
                 T0.replace(minute=30), uses)


def test_offered_minutes_is_the_chat_setting_capped_by_the_offer() -> None:
    offer = GrantOffer("k", "git status", 20)
    assert offered_minutes(offer, allowed=True, minutes=30) == 20
    assert offered_minutes(offer, allowed=True, minutes=10) == 10
    assert offered_minutes(offer, allowed=False, minutes=30) == 0
    assert offered_minutes(None, allowed=True, minutes=30) == 0


def test_no_grant_may_cover_an_approval_or_agent_name_holding_hidden_characters() -> None:
    def approval(command: str, label: str = "git status") -> dict[str, object]:
        return {"id": "apr_1", "tool": "Bash", "summary": "run it",
                "arguments": {"command": command},
                "grant_offer": {"key": "k", "label": label, "max_minutes": 20}}

    assert may_be_granted(parse_approval(approval("git status")), "Build bot")
    assert not may_be_granted(parse_approval(approval("git status \u2067;rm -rf ~")), "Build bot")
    assert not may_be_granted(parse_approval(approval("git status", "git\u200b status")), "Bot")
    assert not may_be_granted(parse_approval(approval("git status")), "Build\u202e bot")


def test_plan_grants_new_changed_and_gone() -> None:
    held = {"gr_1": _row("gr_1"), "gr_2": _row("gr_2"), "gr_3": _row("gr_3", state="ended")}
    plan = plan_grants([_grant("gr_1", uses=2), _grant("gr_4")], held)
    assert [g.id for g in plan.new] == ["gr_4"]
    assert [g.id for g in plan.changed] == ["gr_1"]
    assert [r.grant_id for r in plan.gone] == ["gr_2"]
    assert plan_grants([_grant("gr_1")], {"gr_1": _row()}).changed == ()


def test_grant_status_and_minutes_left() -> None:
    assert grant_status(None, T0_MS) == "unknown"
    assert grant_status(_row(), T0_MS) == "active"
    assert grant_status(_row(revoke_at=T0_MS, revoke_by="Bob"), T0_MS) == "revoking"
    assert grant_status(_row(state="revoked"), T0_MS) == "revoked"
    assert grant_status(_row(), T0_MS + 31 * 60_000) == "expired"
    assert minutes_left(_row(), T0_MS + 60_001) == 29
    assert minutes_left(_row(expires_at=None), T0_MS) is None


def _view(grant_minutes: int) -> ItemView:
    return ItemView(kind="approval", open=True, expired=False, bound=True,
                    grant_minutes=grant_minutes)


def test_approve_with_grant_only_where_offered_and_never_with_a_quorum() -> None:
    approvers = frozenset({ADA.user_id})
    result = evaluate_tap(Action.APPROVE_GRANT, tapper=ADA, item=_view(30),
                          approvers=approvers, required=1, voters=())
    assert isinstance(result, Decided) and result.grant_minutes == 30
    assert evaluate_tap(Action.APPROVE_GRANT, tapper=ADA, item=_view(0), approvers=approvers,
                        required=1, voters=()) == Refused(Refusal.WRONG_BUTTON)
    assert evaluate_tap(Action.APPROVE_GRANT, tapper=ADA, item=_view(30), approvers=approvers,
                        required=2, voters=()) == Refused(Refusal.WRONG_BUTTON)
    plain = evaluate_tap(Action.APPROVE, tapper=ADA, item=_view(30), approvers=approvers,
                         required=1, voters=())
    assert isinstance(plain, Decided) and plain.grant_minutes == 0


def test_revoke_by_the_chats_approvers_of_a_grant_in_force() -> None:
    approvers = frozenset({4242})
    assert evaluate_revoke(user_id=4242, approvers=approvers, bound=True,
                           status="active") is None
    assert evaluate_revoke(user_id=4343, approvers=approvers, bound=True,
                           status="active") is Refusal.NOT_APPROVER
    assert evaluate_revoke(user_id=4242, approvers=approvers, bound=False,
                           status="active") is Refusal.UNBOUND
    for status in ("revoking", "revoked", "ended", "expired"):
        assert evaluate_revoke(user_id=4242, approvers=approvers, bound=True,
                               status=status) is Refusal.CLOSED
