"""Snapshots read against the sender's previous one: unchanged items are not parsed again,
and what is accepted, refused or applied is exactly what a full parse gives."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.bridge import Bridge
from bot.clock import SYSTEM_CLOCK
from bot.core.model import parse_item
from bot.errors import PayloadError
from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import (
    MAX_ITEMS,
    InboxUpdate,
    parse_payload,
    raw_payload,
)
from bot.protocol.snapshot import (
    MAX_SPANS,
    WALKED_BYTES,
    Layout,
    Read,
    SeenSnapshot,
    _NotFollowed,
    _shared_items,
    _walked_rev,
    read_payload,
    rev_hint,
    snapshot_rev,
)
from bot.store import Store

PAD = "p" * 400
"""Padding that makes a few items a payload large enough to be walked."""


def _approval(item_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": item_id, "tool": "send_email", "summary": f"Send ({item_id})",
            "arguments": {"to": "mario@acme.com", "pad": PAD}, **fields}


def _question(item_id: str) -> dict[str, Any]:
    return {"id": item_id, "question": f"Which one? {PAD}", "options": ["a", "b"]}


def _payload(rev: int, approvals: list[Any], clarifications: list[Any] | None = None,
             *, indent: int | None = None, **extra: Any) -> bytes:
    body = {"rev": rev, "approvals": approvals, "clarifications": clarifications or [],
            "resolved": [], **extra}
    text = json.dumps({"kind": "inbox_update", "v": 1, "body": body}, indent=indent,
                      ensure_ascii=False)
    if len(text) < WALKED_BYTES:
        text = text[:-1] + ', "padding": "' + "x" * WALKED_BYTES + '"}'
    return text.encode()


def _ids(update: InboxUpdate) -> set[str]:
    return {*(a.id for a in update.approvals), *(c.id for c in update.clarifications),
            *update.unchanged}


def _read(plaintext: bytes, previous: SeenSnapshot | None) -> tuple[InboxUpdate, Read]:
    read = read_payload(plaintext, previous)
    assert isinstance(read.payload, InboxUpdate)
    return read.payload, read


def test_an_inbox_growing_by_one_item_parses_only_that_item() -> None:
    items = [_approval(f"g{i}") for i in range(40)]
    first, read = _read(_payload(1, items[:39]), None)
    assert len(first.approvals) == 39 and not first.unchanged
    second, _ = _read(_payload(2, items), read.seen)
    assert [a.id for a in second.approvals] == ["g39"]
    assert second.unchanged == tuple(f"g{i}" for i in range(39))


def _covers(seen: SeenSnapshot, approvals: list[Any]) -> tuple[tuple[int, int], ...]:
    """The spans the approvals list is remembered in, checked to cover its text exactly."""
    text, pos = json.dumps(approvals, ensure_ascii=False)[1:-1], 0
    for length, digest in seen.approvals.spans:
        assert hash(text[pos:pos + length]) == digest
        pos += length
    assert pos == len(text)
    return seen.approvals.spans


def test_a_list_that_keeps_growing_is_hashed_only_where_it_grew() -> None:
    """Each snapshot's list is remembered as the spans of the one before plus one for what
    is new, up to MAX_SPANS; one more, and it is hashed whole again. Every item read as
    before stays unparsed, the spans rolling over or not."""
    items = [_approval(f"s{i}") for i in range(3 * MAX_SPANS)]
    update, read = _read(_payload(1, items[:1]), None)
    spans = _covers(read.seen, items[:1])
    for count in range(2, len(items) + 1):
        update, read = _read(_payload(count, items[:count]), read.seen)
        assert [a.id for a in update.approvals] == [f"s{count - 1}"]
        assert update.unchanged == tuple(f"s{i}" for i in range(count - 1))
        before, spans = spans, _covers(read.seen, items[:count])
        assert spans[:-1] == before if len(before) < MAX_SPANS else len(spans) == 1
    # A changed first item leaves the rest unchanged; a shorter list is read item by item.
    changed = [_approval("s0", summary="Changed"), *items[1:]]
    update, read = _read(_payload(100, changed), read.seen)
    assert [a.summary for a in update.approvals] == ["Changed"]
    update, read = _read(_payload(101, changed[:-1]), read.seen)
    assert not update.approvals and len(update.unchanged) == len(items) - 1
    _covers(read.seen, changed[:-1])


def test_an_item_resolved_in_the_middle_leaves_the_others_unchanged() -> None:
    items = [_approval(f"m{i}") for i in range(30)]
    _, read = _read(_payload(1, items), None)
    update, _ = _read(_payload(2, items[:10] + items[11:]), read.seen)
    assert not update.approvals
    assert set(update.unchanged) == {f"m{i}" for i in range(30)} - {"m10"}


def test_an_item_changed_under_the_same_id_is_parsed_again() -> None:
    items = [_approval("a1"), _approval("a2")]
    _, read = _read(_payload(1, items), None)
    update, _ = _read(_payload(2, [_approval("a1", summary="Changed"), items[1]]), read.seen)
    assert [(a.id, a.summary) for a in update.approvals] == [("a1", "Changed")]
    assert update.unchanged == ("a2",)


def test_the_same_text_in_the_other_list_is_not_taken_for_unchanged() -> None:
    question = _question("q1")
    _, read = _read(_payload(1, [], [question]), None)
    plaintext = _payload(2, [question], [])
    with pytest.raises(PayloadError) as refused:
        read_payload(plaintext, read.seen)
    with pytest.raises(PayloadError) as in_full:
        parse_payload(plaintext)
    assert str(refused.value) == str(in_full.value)


def test_a_remembered_item_does_not_excuse_a_broken_one_with_its_id() -> None:
    _, read = _read(_payload(1, [_approval("b1")]), None)
    broken = _approval("b1")
    del broken["tool"]
    with pytest.raises(PayloadError, match=r"approvals\[0\]"):
        read_payload(_payload(2, [broken]), read.seen)


def test_the_text_of_each_new_item_reads_back_as_the_item() -> None:
    update, read = _read(_payload(1, [_approval("t1", arguments={"n": 1.0, "s": "é\u2028"})],
                                  [_question("t2")]), None)
    assert set(read.texts) == {"t1", "t2"}
    assert parse_payload(raw_payload("inbox_update", {
        "rev": 1, "approvals": [json.loads(read.texts["t1"])],
        "clarifications": [json.loads(read.texts["t2"])]})) == update


REFUSED_AFTER_A_SNAPSHOT = {
    "a duplicate of an unchanged id": lambda items: _payload(2, [*items, _approval("r0",
                                                                                   summary="x")]),
    "an unchanged item twice": lambda items: _payload(2, [*items, items[0]]),
    "a new item with NaN": lambda items: _payload(2, items).replace(
        b'"approvals": [', b'"approvals": [{"id": "n", "tool": "t", "summary": NaN}, '),
    "a new item nested too deep": lambda items: _payload(
        2, [*items, _approval("d", arguments=json.loads("[" * 70 + "]" * 70))]),
    "a lone surrogate in a new item": lambda items: _payload(2, items).replace(
        b'"approvals": [', b'"approvals": [{"id": "\\ud800", "tool": "t", "summary": "s"}, '),
    "text after the payload": lambda items: _payload(2, items) + b" {}",
    "approvals that are not a list": lambda items: _payload(2, []).replace(
        b'"approvals": []', b'"approvals": {"a": 1}'),
    "too many items": lambda items: _payload(2, [*items, *(
        {"id": f"x{i}", "tool": "t", "summary": "s"} for i in range(MAX_ITEMS))]),
    "a missing comma": lambda items: _payload(2, items).replace(b"}, {", b"} {", 1),
    "another version": lambda items: _payload(2, items).replace(b'"v": 1', b'"v": 2'),
    "invalid UTF-8": lambda items: _payload(2, items).replace(b"Send", b"\xff\xfe", 1),
}


@pytest.mark.parametrize("name", sorted(REFUSED_AFTER_A_SNAPSHOT))
def test_what_a_full_parse_refuses_is_refused_with_the_same_words(name: str) -> None:
    items = [_approval(f"r{i}") for i in range(5)]
    _, read = _read(_payload(1, items), None)
    plaintext = REFUSED_AFTER_A_SNAPSHOT[name](items)
    with pytest.raises(PayloadError) as in_full:
        parse_payload(plaintext)
    with pytest.raises(PayloadError) as refused:
        read_payload(plaintext, read.seen)
    assert str(refused.value) == str(in_full.value)


def test_a_duplicate_key_counts_as_in_a_full_parse() -> None:
    items = [_approval(f"k{i}") for i in range(5)]
    _, read = _read(_payload(1, items), None)
    plaintext = _payload(2, items).replace(b'"rev": 2', b'"rev": 2, "rev": 3')
    update, again = _read(plaintext, read.seen)
    assert update == parse_payload(plaintext) and update.rev == 3
    assert again.seen is None  # read in full: nothing to remember


def _formats() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"indent": st.sampled_from([None, 1]),
                                  "extra": st.booleans()})


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.tuples(st.lists(st.integers(0, 14), max_size=15),
                             st.lists(st.integers(0, 4), max_size=5),
                             st.integers(0, 3), _formats()),
                   min_size=1, max_size=6),
)
def test_any_sequence_of_snapshots_reads_as_parsed_in_full(
    steps: list[tuple[list[int], list[int], int, dict[str, Any]]],
) -> None:
    """Items come and go, move, change and repeat; the layout changes: every snapshot read
    against the one before holds the same items as parsed in full, and each item read as
    unchanged is one the previous snapshot held, with the same text."""
    seen: SeenSnapshot | None = None
    previous_ids: set[str] = set()
    for rev, (approval_picks, question_picks, version, layout) in enumerate(steps, 1):
        approvals = [_approval(f"a{i}", summary=f"v{version}" if i % 3 == 0 else "same")
                     for i in approval_picks]
        questions = [_question(f"q{i}") for i in question_picks]
        extra = {"grants": []} if layout["extra"] else {}
        plaintext = _payload(rev, approvals, questions, indent=layout["indent"], **extra)
        try:
            in_full = parse_payload(plaintext)
        except PayloadError as exc:
            with pytest.raises(PayloadError) as refused:
                read_payload(plaintext, seen)
            assert str(refused.value) == str(exc)
            continue
        assert isinstance(in_full, InboxUpdate)
        update, read = _read(plaintext, seen)
        assert _ids(update) == _ids(in_full)
        assert set(update.unchanged) <= previous_ids
        full_items = {item.id: item for item in (*in_full.approvals, *in_full.clarifications)}
        for item in (*update.approvals, *update.clarifications):
            assert full_items[item.id] == item
        assert (update.rev, update.resolved, update.grants) == \
            (in_full.rev, in_full.resolved, in_full.grants)
        seen, previous_ids = read.seen, _ids(update)


def _members(pairs: list[tuple[str, Any]]) -> str:
    """A JSON object of ``pairs`` in their order, duplicates and all."""
    return "{" + ", ".join(
        f"{json.dumps(key)}: {value if isinstance(value, _Raw) else json.dumps(value)}"
        for key, value in pairs) + "}"


class _Raw(str):
    """JSON text to write as it is."""


_TOP_EXTRAS = {
    "none": [],
    "another kind after": [("kind", "notification")],
    "a later body": [("body", {"rev": 99, "approvals": []})],
    "another version after": [("v", 2)],
    "an object with a rev after the body": [("zzz", {"rev": 7})],
}
_BODY_EXTRAS = {
    "none": [],
    "a later rev": [("rev", 42)],
    "an object with a rev last": [("zzz", {"rev": 9})],
    "a rev that is not a number": [("rev", "7")],
}


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(st.tuples(st.lists(st.integers(0, 14), max_size=15, unique=True),
                             st.lists(st.integers(0, 4), max_size=5, unique=True),
                             st.sampled_from(sorted(_TOP_EXTRAS)),
                             st.sampled_from(sorted(_BODY_EXTRAS)),
                             st.booleans()),
                   min_size=2, max_size=5),
)
def test_a_snapshot_rev_is_the_rev_a_full_parse_reads(
    steps: list[tuple[list[int], list[int], str, str, bool]],
) -> None:
    """Snapshots that share items and differ in what follows them (keys repeated, members
    that hold a rev of their own, another kind or version), told against the layout of each
    other one: the revision is the full parse's, and None for any other payload (what a
    full parse refuses is dropped however it is told)."""
    plaintexts = []
    for rev, (approval_picks, question_picks, top, extra, kind_first) in enumerate(steps, 1):
        body = [("rev", rev), ("approvals", [_approval(f"a{i}") for i in approval_picks]),
                ("clarifications", [_question(f"q{i}") for i in question_picks]),
                *_BODY_EXTRAS[extra], ("padding", "x" * WALKED_BYTES)]
        head = [("kind", "inbox_update"), ("v", 1)]
        members = [("body", _Raw(_members(body)))]
        members = head + members if kind_first else members + head
        plaintexts.append(_members(members + _TOP_EXTRAS[top]).encode())
    layouts: list[Layout | None] = [None]
    for plaintext in plaintexts:
        with contextlib.suppress(PayloadError):
            if (layout := read_payload(plaintext, None).layout) is not None:
                layouts.append(layout)
    for plaintext in plaintexts:
        try:
            parsed = parse_payload(plaintext)
        except PayloadError:
            continue  # refused whatever the probe says: a snapshot superseded or not
        expected = parsed.rev if isinstance(parsed, InboxUpdate) else None
        assert all(snapshot_rev(plaintext, layout) == expected for layout in layouts)
        for like in layouts[1:]:  # the walk alone, where it tells at all
            assert like is not None
            with contextlib.suppress(_NotFollowed):
                assert _walked_rev(plaintext.decode(), like) == expected


def test_a_snapshot_rev_is_none_for_anything_else() -> None:
    assert snapshot_rev(raw_payload("notification", {"item_id": "inbox_update"})) is None
    assert snapshot_rev(b'{"kind": "inbox_update", "v": 1, "body": {"rev": -1}}') is None
    assert snapshot_rev(b'{"kind": "inbox_update", "v": true, "body": {"rev": 1}}') is None
    assert snapshot_rev(b'{"kind": "inbox_update", "v": 1, "body": {"rev": 1}} x') is None
    assert snapshot_rev(b'{"kind": "inbox_update", "v": 1, "body": {"rev": 2e0}}') is None
    assert snapshot_rev(b'{"kind": "inbox_update", "v": 1, "body": {"rev": 3}}') == 3


def test_a_growing_snapshot_is_told_from_its_last_items_only() -> None:
    """Told against the layout of a later snapshot whose items it starts with (its rev in
    front, of other digits), a snapshot passes over every one of them unread."""
    items = [_approval(f"g{i}") for i in range(40)]
    later = read_payload(_payload(41, items), None)
    assert later.layout is not None
    earlier = _payload(38, items[:37])
    text = earlier.decode()
    first, ends = later.layout.lists["approvals"]
    at = text.index('"approvals": [') + len('"approvals": [')
    assert _shared_items(text, at, later.layout.text, first, ends) == 37
    changed = text.replace('"g0"', '"G0"', 1)
    assert _shared_items(changed, at, later.layout.text, first, ends) == 0
    assert snapshot_rev(earlier, later.layout) == 38
    assert rev_hint(earlier) == 38 and rev_hint(raw_payload("activity", {"rev": 1})) is None


# -- the bridge: what it holds is what full parses would give ----------------------------


def _send(bridge: Bridge, agent: Identity, plaintext: bytes) -> None:
    envelope = seal(plaintext, sender=agent, recipient=bridge.identity.card,
                    ts_ms=int(time.time() * 1000)).to_json()
    bridge.handle_envelopes([envelope])


def _open_ids(store: Store, agent: Identity) -> set[str]:
    return store.items.open_ids(agent.id)


def test_the_bot_holds_each_snapshot_of_a_changing_inbox(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    items = [_approval(f"h{i}") for i in range(30)]
    for n in range(1, 31):
        _send(bridge, agent, _payload(n, items[:n]))
    assert _open_ids(store, agent) == {f"h{i}" for i in range(30)}
    assert len(store.view().cards.dirty(5)) == 30
    _send(bridge, agent, _payload(31, items[:5] + items[6:]))  # h5 resolved elsewhere
    assert "h5" not in _open_ids(store, agent)
    assert store.items.get(agent.id, "h5").state == "cancelled"  # type: ignore[union-attr]
    held = store.items.get(agent.id, "h29")
    assert held is not None and parse_item(held).id == "h29"


def test_a_stale_snapshot_is_not_remembered_for_the_next(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    items = [_approval(f"s{i}") for i in range(30)]
    _send(bridge, agent, _payload(5, items[:20]))
    _send(bridge, agent, _payload(4, items))  # older: ignored, s20… never held
    _send(bridge, agent, _payload(6, items))  # s20… unchanged since rev 4, yet new here
    assert _open_ids(store, agent) == {f"s{i}" for i in range(30)}


def test_a_snapshot_read_in_full_leaves_no_memory_behind(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    items = [_approval(f"f{i}") for i in range(30)]
    _send(bridge, agent, _payload(1, items[:20]))
    # A duplicate key: read in full, holding other items than those remembered.
    _send(bridge, agent, _payload(2, items[20:]).replace(b'"rev": 2', b'"rev": 1, "rev": 2'))
    assert _open_ids(store, agent) == {f"f{i}" for i in range(20, 30)}
    _send(bridge, agent, _payload(3, items[25:]))
    assert _open_ids(store, agent) == {f"f{i}" for i in range(25, 30)}


def test_a_restarted_bot_reads_the_next_snapshot_in_full(
    bridge_and_agent: tuple[Bridge, Identity, Store], tmp_path: Path,
) -> None:
    bridge, agent, store = bridge_and_agent
    items = [_approval(f"r{i}") for i in range(30)]
    _send(bridge, agent, _payload(1, items))
    again = Bridge(identity=bridge.identity, store=store, config=bridge.config,
                   clock=SYSTEM_CLOCK)
    _send(again, agent, _payload(2, items[10:]))
    assert _open_ids(store, agent) == {f"r{i}" for i in range(10, 30)}
