"""The pure core of the bot: inbox diffing, tap policy and quorum, callback data, config."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.config import parse_config
from bot.core.inbox import plan_update, remind_at
from bot.core.policy import (
    ANONYMOUS_ADMIN_ID,
    SERVICE_CHAT_ID,
    Action,
    Answered,
    AskReason,
    Decided,
    ItemView,
    Refusal,
    Refused,
    Tallied,
    Voter,
    evaluate_tap,
)
from bot.errors import ConfigError, StoreError
from bot.protocol.payloads import Approval, InboxUpdate, ResolvedItem
from bot.store import Store
from bot.tg.keyboards import ButtonPress, callback_data, parse_callback_data

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _approval(item_id: str) -> Approval:
    return Approval(id=item_id, tool="t", summary="s", blocks=(), arguments=None)


def test_plan_update_new_gone_and_stale() -> None:
    update = InboxUpdate(
        rev=5, agent_name="a", approvals=(_approval("a1"), _approval("a2")),
        resolved=(ResolvedItem("old", "denied", by="iPhone"),),
    )
    plan = plan_update(update, last_rev=4, known={"a1"}, open_now={"a1", "old", "vanished"})
    assert not plan.stale
    assert [item.id for item in plan.new_items] == ["a2"]
    assert [(g.item_id, g.state, g.by) for g in plan.gone] == [
        ("old", "denied", "iPhone"), ("vanished", "cancelled", None)]
    assert plan_update(update, last_rev=5, known=set(), open_now=set()).stale
    assert plan_update(update, last_rev=9, known=set(), open_now=set()).stale
    assert not plan_update(update, last_rev=None, known=set(), open_now=set()).stale


def test_reminder_at_eighty_percent() -> None:
    assert remind_at(T0, T0 + timedelta(minutes=10)) == T0 + timedelta(minutes=8)
    assert remind_at(T0, None) is None
    assert remind_at(T0, T0 - timedelta(minutes=1)) is None


def _tap(action: Action, user: int, voters: tuple[Voter, ...] = (), *, required: int = 1,
         approvers: frozenset[int] = frozenset({1, 2, 3}), kind: str = "approval",
         open_: bool = True, expired: bool = False, bound: bool = True,
         option: int | None = None, text: str | None = None) -> object:
    item = ItemView(kind=kind, open=open_, expired=expired, bound=bound,
                    options=("staging", "production"))
    return evaluate_tap(action, tapper=Voter(user, f"u{user}", 0), item=item,
                        approvers=approvers, required=required, voters=voters,
                        option=option, text=text)


def test_quorum_veto_double_tap_and_withdraw() -> None:
    first = _tap(Action.APPROVE, 1, required=2)
    assert isinstance(first, Tallied) and [v.user_id for v in first.voters] == [1]
    assert _tap(Action.APPROVE, 1, first.voters, required=2) == Refused(
        Refusal.ALREADY_APPROVED)
    done = _tap(Action.APPROVE, 2, first.voters, required=2)
    assert isinstance(done, Decided) and done.decision == "approve"
    assert done.decider.user_id == 2 and [v.user_id for v in done.voters] == [1, 2]
    veto = _tap(Action.DENY, 3, first.voters, required=2)
    assert isinstance(veto, Decided) and veto.decision == "deny" and veto.reason is None
    withdrawn = _tap(Action.WITHDRAW, 1, first.voters, required=2)
    assert isinstance(withdrawn, Tallied) and withdrawn.voters == ()
    assert _tap(Action.WITHDRAW, 2, first.voters, required=2) == Refused(
        Refusal.NOTHING_TO_WITHDRAW)
    assert _tap(Action.DENY_WITH_REASON, 1) == AskReason()
    reasoned = _tap(Action.DENY_WITH_REASON, 1, text="not today")
    assert isinstance(reasoned, Decided) and reasoned.reason == "not today"


def test_approvals_of_former_approvers_no_longer_count() -> None:
    former = (Voter(9, "gone", 0),)
    result = _tap(Action.APPROVE, 1, former, required=2)
    assert isinstance(result, Tallied) and [v.user_id for v in result.voters] == [1]


def test_questions_take_answers_only() -> None:
    assert _tap(Action.ANSWER, 1, kind="clarification", option=1) == Answered("production")
    assert _tap(Action.ANSWER, 1, kind="clarification", text="canary") == Answered("canary")
    for bad in ({"option": 2}, {"option": -1}, {}):
        assert _tap(Action.ANSWER, 1, kind="clarification", **bad) == Refused(  # type: ignore[arg-type]
            Refusal.WRONG_BUTTON)
    assert _tap(Action.APPROVE, 1, kind="clarification") == Refused(Refusal.WRONG_BUTTON)
    assert _tap(Action.ANSWER, 1, option=0) == Refused(Refusal.WRONG_BUTTON)


def test_observers_service_ids_closed_expired_and_unbound_are_refused() -> None:
    assert _tap(Action.APPROVE, 9) == Refused(Refusal.NOT_APPROVER)
    service = frozenset({ANONYMOUS_ADMIN_ID, SERVICE_CHAT_ID})
    assert _tap(Action.APPROVE, ANONYMOUS_ADMIN_ID, approvers=service) == Refused(
        Refusal.NOT_APPROVER)
    assert _tap(Action.APPROVE, 1, open_=False) == Refused(Refusal.CLOSED)
    assert _tap(Action.APPROVE, 1, expired=True) == Refused(Refusal.EXPIRED)
    assert _tap(Action.APPROVE, 1, bound=False) == Refused(Refusal.UNBOUND)


def test_callback_data_round_trip_and_refusals() -> None:
    data = callback_data("tok3n", Action.ANSWER, 7)
    assert parse_callback_data(data) == ButtonPress("tok3n", Action.ANSWER, 7)
    assert parse_callback_data(callback_data("tok3n", Action.APPROVE)) == ButtonPress(
        "tok3n", Action.APPROVE)
    for bad in (None, "", "approve:apr_1", "2:tok:a", "1:tok:z", "1:tok:a:1", "1:tok:o",
                "1::a", "1:tok:o:x", "1:" + "x" * 70 + ":a"):
        assert parse_callback_data(bad) is None, bad


def test_config_defaults_and_errors(tmp_path: Path) -> None:
    config = parse_config({"chats": [{"id": -100, "approvers": [1, 2], "required_approvals": 2,
                                      "topic": 5}]}, base=tmp_path)
    group = config.policy(-100, private=False)
    assert (group.approvers, group.required_approvals, group.secrets, group.topic) == (
        frozenset({1, 2}), 2, "masked", 5)
    private = config.policy(42, private=True)
    assert (private.approvers, private.secrets) == (frozenset({42}), "spoiler")
    assert config.policy(-7, private=False).approvers == "admins"
    assert config.state_dir == tmp_path / "state"
    for data, key in [
        ({"telegram": {"admins": ["x"]}}, "telegram.admins"),
        ({"chats": [{"id": "x"}]}, "chats[0].id"),
        ({"chats": [{"id": 1, "required_approvals": 3, "approvers": [1]}]},
         "chats[0].required_approvals"),
        ({"chats": [{"id": 1, "secrets": "visible"}]}, "chats[0].secrets"),
        ({"chats": [{"id": 1}, {"id": 1}]}, "chats[1].id"),
        ({"telegram": {"tokn": "x"}}, "telegram.tokn"),
        ({"telegram": {"api_url": "ftp://x"}}, "telegram.api_url"),
    ]:
        with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
            parse_config(data, base=tmp_path)


def test_audit_trail_is_append_only(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "db.sqlite3")
    store.audit.append("tap", at=1, chat_id=5, user_id=7, allowed=False)
    with pytest.raises(StoreError, match="append-only"):
        store.db.run("UPDATE audit SET event = 'x'")
    with pytest.raises(StoreError, match="append-only"):
        store.db.run("DELETE FROM audit")
    store.close()
    reopened = Store.open(tmp_path / "db.sqlite3")
    assert [(r.event, r.detail) for r in reopened.audit.rows()] == [("tap", {"allowed": False})]
    reopened.close()
    raw = sqlite3.connect(tmp_path / "db.sqlite3")
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="newer"):
        Store.open(tmp_path / "db.sqlite3")
