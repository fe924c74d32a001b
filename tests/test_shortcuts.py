"""The bot's shortcuts give the answers of the long way: remembered parses and maskers,
the nesting check, commits that skip the disk, envelopes opened in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.bridge import OFF_LOOP_BYTES, Bridge
from bot.core.model import ItemRow, NewItem, parse_item
from bot.core.policy import Action, Decided
from bot.errors import PayloadError
from bot.protocol.encoding import loads_limited
from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import (
    Approval,
    Block,
    Person,
    parse_approval,
    parse_inbox_update,
    raw_payload,
)
from bot.render import Renderer
from bot.render.masking import MASK, masker
from bot.render.renderer import RenderedCard
from bot.store import Store


def _approval(item_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": item_id, "tool": "send_email", "summary": f"Send ({item_id})",
            "arguments": {"to": "mario@acme.com"}, **fields}


def _inbox(rev: int, approvals: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rev": rev, "approvals": approvals, "clarifications": [], "resolved": []}


# -- items parsed, and parsed again from the store -------------------------------------------


def test_values_that_print_alike_in_python_stay_apart() -> None:
    one = parse_inbox_update(_inbox(1, [_approval("c1", arguments={"n": 1})]))
    real = parse_inbox_update(_inbox(2, [_approval("c1", arguments={"n": 1.0})]))
    flag = parse_inbox_update(_inbox(3, [_approval("c1", arguments={"n": True})]))
    assert [type(u.approvals[0].arguments["n"]) for u in (one, real, flag)] == [int, float, bool]


def test_a_stored_item_whose_text_changed_is_parsed_again() -> None:
    def row(body: dict[str, Any]) -> ItemRow:
        return ItemRow("agent", "d1", "approval", json.dumps(body), "open", None, None, None,
                       None, None, None, 0)

    assert parse_item(row(_approval("d1"))).summary == "Send (d1)"
    assert parse_item(row(_approval("d1", summary="Other"))).summary == "Other"


# -- maskers, one per set of secrets ------------------------------------------------------


def test_a_masker_is_built_once_per_set_of_secrets_and_masks_only_its_own() -> None:
    first = masker(["abcd1234"])
    assert masker(["abcd1234"]) is first
    assert first("key abcd1234 here") == f"key {MASK} here"
    other = masker(["wxyz9876"])
    assert other("key abcd1234 here") == "key abcd1234 here"
    assert other("key wxyz9876") == f"key {MASK}"
    assert masker([])("abcd1234") == "abcd1234"


# -- nesting depth ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[" * 8 + "]" * 8, None),
        ("[" * 9 + "]" * 9, "nested deeper than 8 levels"),
        ('["' + "[" * 20 + '"]', None),  # brackets inside a string are text
        ('[["\\"[[[[[[[[[[[[", 1]]', None),  # an escaped quote does not end the string
        ('[["\\\\", [[[[[[[[[[]]]]]]]]]]]]', "nested deeper"),  # an escaped backslash does
        ('[{"a": [{"b": [[[[[[]]]]]]}]}]', "nested deeper"),
        ('{"a": "' + "[" * 30, "invalid JSON"),  # unterminated: json.loads reports it
        ("[" * 100_000, "nested deeper"),
    ],
)
def test_nesting_is_counted_outside_strings(text: str, error: str | None) -> None:
    if error is None:
        loads_limited(text, max_bytes=1 << 20, max_depth=8)
    else:
        with pytest.raises(PayloadError, match=error):
            loads_limited(text, max_bytes=1 << 20, max_depth=8)


# -- commits that do not wait for the disk ----------------------------------------------


def test_a_commit_that_skips_the_disk_still_commits_and_leaves_the_next_one_durable(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    db = store.db

    def synchronous() -> int:
        row = db.one("PRAGMA synchronous")
        assert row is not None
        return int(row[0])

    assert synchronous() == 2  # FULL
    with store.transaction(durable=False):
        assert synchronous() == 1  # NORMAL
        store.chats.note(1, "One", "private")
    assert synchronous() == 2
    with pytest.raises(RuntimeError), store.transaction(durable=False):
        store.chats.note(2, "Two", "private")
        raise RuntimeError("rolled back")
    assert synchronous() == 2
    store.close()
    reopened = Store.open(tmp_path / "state.sqlite3")
    assert reopened.chats.title(1) == "One"
    assert reopened.chats.title(2) == ""
    reopened.close()


def test_a_write_outside_a_transaction_counts_as_a_durable_commit(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    before = store.db.durable_commits
    store.chats.note(1, "One", "private")  # commits by itself, waiting for the disk
    assert store.db.durable_commits == before + 1
    assert store.chats.title(1) == "One"  # a read commits nothing
    with store.transaction():
        store.chats.note(2, "Two", "private")
        store.chats.note(3, "Three", "private")
    assert store.db.durable_commits == before + 2
    with store.transaction(durable=False):
        store.chats.note(4, "Four", "private")
    assert store.db.durable_commits == before + 2
    store.close()


def test_commits_leave_the_log_to_the_checkpoint(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "state.sqlite3")
    path = store.path
    empty = path.stat().st_size
    for batch in range(20):
        with store.transaction():
            store.items.add_many("agent", [NewItem(f"c{batch}-{i}", "approval", "x" * 400,
                                                   None, None) for i in range(100)], now_ms=1)
    assert path.stat().st_size == empty  # all of it still in the write-ahead log
    store.checkpoint()
    assert path.stat().st_size > empty + 800_000
    assert store.items.open_count() == 2000
    store.close()


def test_a_tap_waits_for_the_disk_once_from_its_update_to_its_decision(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    bridge.handle_envelopes([_sealed(bridge, agent, _inbox(1, [_approval("t1")]))])
    card = store.view().cards.dirty(5)[0]
    before = store.db.durable_commits
    bridge.hold_updates([(1, "{}")])
    report = bridge.tap(card.token, Action.APPROVE, chat_id=5, tapper=Person("Ada", 5),
                        approvers=frozenset({5}))
    assert isinstance(report.result, Decided)
    assert store.db.durable_commits - before == 1
    assert store.outbox.depth() == 1  # the decision, committed with the tap


# -- large envelopes opened and applied in a thread ---------------------------------------


def _sealed(bridge: Bridge, agent: Identity, body: dict[str, Any]) -> dict[str, object]:
    return seal(raw_payload("inbox_update", body), sender=agent,
                recipient=bridge.identity.card, ts_ms=int(time.time() * 1000)).to_json()


async def test_a_large_envelope_opened_in_a_thread_is_applied_once(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    items = [_approval(f"e{i:04d}", summary="x" * 200) for i in range(400)]
    envelope = _sealed(bridge, agent, _inbox(1, items))
    assert len(str(envelope["ct"])) >= OFF_LOOP_BYTES
    assert (await bridge.receive([envelope])).cards
    assert store.items.open_count() == 400
    assert not (await bridge.receive([envelope])).cards  # a replay: dropped
    assert store.items.open_count() == 400


async def test_the_loop_serves_others_while_a_large_envelope_is_applied(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    items = [_approval(f"l{i:04d}", summary="x" * 200) for i in range(400)]
    envelope = _sealed(bridge, agent, _inbox(1, items))
    seen: list[str] = []

    async def other_chat() -> None:
        while not seen or seen[-1] != "applied":
            seen.append(f"tick {store.items.open_count()}")
            await asyncio.sleep(0)

    ticking = asyncio.create_task(other_chat())
    await bridge.receive([envelope])
    seen.append("applied")
    await ticking
    # The other chat ran before the envelope was done; which state it read depends on
    # how far the thread had come, so only its wholeness is checked.
    assert seen[0].startswith("tick")
    # What the loop read meanwhile was the state before the envelope or after it, whole.
    assert {line for line in seen if line.startswith("tick")} <= {"tick 0", "tick 400"}


async def test_small_envelopes_delivered_in_a_row_let_other_work_in_between(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, _ = bridge_and_agent
    envelopes = [_sealed(bridge, agent, _inbox(rev, [_approval(f"s{rev}")]))
                 for rev in range(1, 4)]
    seen: list[str] = []

    async def other_chat() -> None:
        for _ in range(3):
            seen.append("other")
            await asyncio.sleep(0)

    others = asyncio.create_task(other_chat())
    for envelope in envelopes:
        await bridge.receive([envelope])
        seen.append("applied")
    await others
    assert seen[:4] == ["other", "applied", "other", "applied"]


def test_a_statement_from_another_thread_waits_for_a_transaction_to_end(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    _, agent, store = bridge_and_agent
    began, read, end = threading.Event(), threading.Event(), threading.Event()
    found: list[set[str]] = []

    def writer() -> None:
        with contextlib.suppress(RuntimeError), store.transaction():
            store.items.add_many(agent.id, [NewItem("w1", "approval", "{}", None, None)],
                                 now_ms=1)
            began.set()
            end.wait()
            raise RuntimeError("rolled back")

    def reader() -> None:
        found.append(store.items.held_among(agent.id, ["w1"]))
        read.set()

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    threads[0].start()
    began.wait()
    threads[1].start()
    assert not read.wait(0.5)  # it waits: it would have seen w1, not yet committed
    end.set()
    for thread in threads:
        thread.join()
    assert found == [set()]


async def test_a_snapshot_does_not_bring_back_an_item_closed_before(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    bridge.handle_envelopes([_sealed(bridge, agent, _inbox(1, [_approval("f1")]))])
    with store.transaction():
        store.items.close(agent.id, "f1", state="approved", by="Ada", at=1)
    bridge.handle_envelopes([_sealed(bridge, agent, _inbox(2, [_approval("f1"),
                                                               _approval("f2")]))])
    f1 = store.items.get(agent.id, "f1")
    assert f1 is not None and f1.state == "approved"
    assert store.items.open_ids(agent.id) == {"f2"}


# -- skeleton costs remembered across redraws ---------------------------------------------


def test_an_overflowing_card_draws_the_same_with_remembered_skeletons() -> None:
    blocks = tuple(Block("key_value", f"Key {i}", f"value {i} " * 40, "string")
                   for i in range(300))
    approval = Approval("g1", "configure", "Many rows", blocks, None)
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

    def draw(renderer: Renderer) -> RenderedCard:
        return renderer.approval_card(approval, agent_name="agent", secrets="masked", now=now)

    renderer = Renderer()
    first = draw(renderer)
    again = draw(renderer)  # every skeleton's cost remembered
    fresh = draw(Renderer())  # none
    assert first.attachment is not None
    for other in (again, fresh):
        assert (other.html, other.plain, other.attachment) == \
            (first.html, first.plain, first.attachment)


def test_an_item_no_json_decoder_makes_is_still_judged_by_the_parser() -> None:
    with pytest.raises(PayloadError, match=r"approvals\[0\]"):
        parse_inbox_update(_inbox(1, [{"id": "h1", "tool": object(), "summary": "s"}]))


async def test_a_large_item_read_in_the_thread_is_stored_as_it_reads(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    blocks = [{"type": "field", "label": f"L{i}", "value": f"value {i} " * 5}
              for i in range(2000)]
    raw = _approval("k1", blocks={"v": 1, "blocks": blocks})
    envelope = _sealed(bridge, agent, _inbox(1, [raw]))
    assert len(str(envelope["ct"])) >= OFF_LOOP_BYTES
    await bridge.receive([envelope])
    stored = store.items.get(agent.id, "k1")
    assert stored is not None
    held, sent = parse_item(stored), parse_approval(raw)
    assert held == sent
    assert isinstance(held, Approval) and held.arguments == sent.arguments
