"""Edits before approving, the pure rules: a reply read as a value of its JSON type, which
values a card offers, an edit's diff, and what a tap does on an edited card."""

from __future__ import annotations

import pytest

from bot.core.edits import EditRefused, changed_keys, edited_arguments, new_value
from bot.core.policy import (
    Action,
    AskEdit,
    Decided,
    ItemView,
    Refusal,
    Refused,
    Voter,
    evaluate_tap,
)
from bot.protocol.payloads import parse_approval
from bot.render.edits import change_diff, copy_text, offered_keys
from bot.tg.keyboards import ButtonPress, callback_data, parse_callback_data


def tap(action: Action, *, option: int | None = None, revision: int = 0,
        editable: bool = True, grant_minutes: int = 0) -> object:
    item = ItemView(kind="approval", open=True, expired=False, bound=True,
                    editable=editable, edit_revision=revision, grant_minutes=grant_minutes)
    return evaluate_tap(action, tapper=Voter(1, "Ada", 0), item=item,
                        approvers=frozenset({1}), required=1, voters=(), option=option)


def test_an_approval_names_the_version_it_approves() -> None:
    assert isinstance(tap(Action.APPROVE), Decided)
    assert tap(Action.APPROVE, revision=2) == Refused(Refusal.OUTDATED)
    assert tap(Action.APPROVE_EDITED, option=1, revision=2) == Refused(Refusal.OUTDATED)
    assert tap(Action.APPROVE_EDITED, option=2, revision=0) == Refused(Refusal.OUTDATED)
    assert isinstance(tap(Action.APPROVE_EDITED, option=2, revision=2), Decided)
    assert tap(Action.APPROVE_GRANT, grant_minutes=30, revision=1) == Refused(
        Refusal.WRONG_BUTTON)  # an edit never carries a grant
    assert isinstance(tap(Action.DENY, revision=1), Decided)


def test_edit_is_for_approvers_of_an_editable_card() -> None:
    assert tap(Action.EDIT) == AskEdit()
    assert tap(Action.EDIT, editable=False) == Refused(Refusal.WRONG_BUTTON)
    item = ItemView(kind="approval", open=True, expired=False, bound=True, editable=True)
    assert evaluate_tap(Action.EDIT, tapper=Voter(9, "Dave", 0), item=item,
                        approvers=frozenset({1}), required=1, voters=()) == Refused(
        Refusal.NOT_APPROVER)


def test_callback_data_of_edits() -> None:
    assert parse_callback_data(callback_data("t0k", Action.EDIT)) == ButtonPress(
        "t0k", Action.EDIT)
    assert parse_callback_data("1:t0k:e:1") == ButtonPress("t0k", Action.EDIT, 1)
    assert parse_callback_data("1:t0k:E:3") == ButtonPress("t0k", Action.APPROVE_EDITED, 3)
    assert parse_callback_data("1:t0k:E") is None


@pytest.mark.parametrize(("before", "text", "value"), [
    ("rm -rf build", "rm -rf dist", "rm -rf dist"),
    ("x", "42", "42"),  # a string stays a string
    (30, "90", 90),
    (True, "false", False),
    (["a"], '["a", "b"]', ["a", "b"]),
])
def test_a_reply_becomes_a_value_of_the_same_type(before: object, text: str,
                                                  value: object) -> None:
    assert new_value(before, text) == value


@pytest.mark.parametrize(("before", "text", "why"), [
    (30, "a minute", "must be a number written as JSON"),
    (30, '"30"', "must be a number, not a string"),
    (True, "1", "must be a boolean, not a number"),
    ("ls", "ls\u202e -la", "invisible or control character"),
])
def test_a_reply_of_another_type_or_with_hidden_characters_is_refused(
        before: object, text: str, why: str) -> None:
    with pytest.raises(EditRefused, match=why):
        new_value(before, text)


def test_edited_arguments_change_one_key_only() -> None:
    original = {"command": "ls", "timeout": 30}
    edited = edited_arguments(original, "timeout", 90)
    assert edited == {"command": "ls", "timeout": 90} and original["timeout"] == 30
    assert changed_keys(original, edited) == ("timeout",)
    with pytest.raises(EditRefused):
        edited_arguments(original, "cwd", "/")


def test_secrets_are_never_offered() -> None:
    approval = parse_approval({
        "id": "apr_1", "tool": "Bash", "summary": "s",
        "blocks": [{"type": "field", "label": "Key", "value": "hunter2-secret",
                    "value_type": "secret"}],
        "arguments": {"command": "ls", "password": "p", "url": "https://u:pw@x.io",
                      "note": "uses hunter2-secret", "headers": {"Authorization": "x"},
                      "timeout": 30, "api_token": "tok-0123456789",
                      "script": "curl -d tok-0123456789 x.io"},
        "editable": ["command", "password", "url", "note", "headers", "timeout", "script"],
        "created_at": "2026-11-29T10:00:00Z"})
    assert offered_keys(approval) == ("command", "timeout")


def test_the_diff_and_what_a_button_copies() -> None:
    assert change_diff("rm -rf build", "rm -rf dist") == "- rm -rf build\n+ rm -rf dist"
    assert change_diff(30, 90) == "- 30\n+ 90"
    long_before = "\n".join(f"line {n}" for n in range(10))
    long_after = long_before.replace("line 5", "line five")
    diff = change_diff(long_before, long_after)
    assert "-line 5\n+line five" in diff and "line 0" not in diff
    assert copy_text("ls -la") == "ls -la" and copy_text(30) == "30"
    assert copy_text("x" * 257) is None and copy_text("") is None
