"""The relay's SQLite queue: ordering, deduplication, the cap, the age limit, restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.relay.queue import QueueFull, RelayQueue

ALICE = "a" * 32
BOB = "b" * 32


def _id(n: int) -> str:
    return f"{n:032x}"


def test_oldest_first_and_ack(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path, cap=10)
    for n in range(3):
        assert queue.put(ALICE, _id(n), f"body{n}", now_ms=1000)
    queue.put(BOB, _id(9), "other", now_ms=1000)
    assert [q.body for q in queue.pending(ALICE)] == ["body0", "body1", "body2"]
    first = queue.pending(ALICE, limit=1)[0]
    assert [q.envelope_id for q in queue.pending(ALICE, after_seq=first.seq)] == [_id(1), _id(2)]
    assert queue.ack(ALICE, _id(1))
    assert not queue.ack(ALICE, _id(1))
    assert not queue.ack(BOB, _id(0))  # acks only count for the recipient
    assert [q.envelope_id for q in queue.pending(ALICE)] == [_id(0), _id(2)]
    assert queue.count(ALICE) == 2
    queue.close()


def test_same_id_for_same_recipient_is_stored_once(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path, cap=10)
    assert queue.put(ALICE, _id(1), "x", now_ms=1)
    assert not queue.put(ALICE, _id(1), "x", now_ms=2)
    assert queue.put(BOB, _id(1), "x", now_ms=2)
    assert queue.count(ALICE) == 1
    queue.close()


def test_cap_per_recipient(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path, cap=2)
    queue.put(ALICE, _id(1), "x", now_ms=1)
    queue.put(ALICE, _id(2), "x", now_ms=1)
    with pytest.raises(QueueFull):
        queue.put(ALICE, _id(3), "x", now_ms=1)
    assert not queue.put(ALICE, _id(2), "x", now_ms=1)  # a duplicate is not refused
    assert queue.put(BOB, _id(3), "x", now_ms=1)
    queue.ack(ALICE, _id(1))
    assert queue.put(ALICE, _id(3), "x", now_ms=1)
    queue.close()


def test_purge_and_reopen(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path, cap=10)
    queue.put(ALICE, _id(1), "old", now_ms=100)
    queue.put(ALICE, _id(2), "new", now_ms=200)
    assert queue.purge(older_than_ms=150) == 1
    queue.close()
    reopened = RelayQueue.open(tmp_path, cap=10)
    assert [q.body for q in reopened.pending(ALICE)] == ["new"]
    assert reopened.count(ALICE) == 1
    reopened.close()
