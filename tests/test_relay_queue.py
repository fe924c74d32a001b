"""The relay's SQLite queue: ordering, deduplication, the limits, paging, the age limit,
restarts and schema upgrades."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bot.errors import StoreError
from bot.relay.queue import (
    DB_NAME,
    SCHEMA_VERSION,
    Incoming,
    PutResult,
    QueueFull,
    QueueLimits,
    RelayQueue,
)

ALICE = "a" * 32
BOB = "b" * 32
CAROL = "c" * 32
MALLORY = "d" * 32


def _id(n: int) -> str:
    return f"{n:032x}"


def item(recipient: str, n: int, body: str = "x", sender: str = CAROL) -> Incoming:
    return Incoming(recipient, sender, _id(n), body)


def test_oldest_first_and_ack(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path)
    for n in range(3):
        assert queue.put(item(ALICE, n, f"body{n}"), now_ms=1000)
    queue.put(item(BOB, 9, "other"), now_ms=1000)
    assert [q.body for q in queue.pending(ALICE)] == ["body0", "body1", "body2"]
    first = queue.pending(ALICE, limit=1)[0]
    assert [q.envelope_id for q in queue.pending(ALICE, after_seq=first.seq)] == [_id(1), _id(2)]
    assert queue.ack(ALICE, _id(1))
    assert not queue.ack(ALICE, _id(1))
    assert not queue.ack(BOB, _id(0))  # acks only count for the recipient
    assert [q.envelope_id for q in queue.pending(ALICE)] == [_id(0), _id(2)]
    assert queue.count(ALICE) == 2
    assert queue.bytes_for(ALICE) == len("body0") + len("body2")
    queue.close()


def test_same_id_from_the_same_sender_is_stored_once(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path)
    assert queue.put(item(ALICE, 1), now_ms=1)
    assert not queue.put(item(ALICE, 1), now_ms=2)
    assert queue.put(item(BOB, 1), now_ms=2)
    assert queue.count(ALICE) == 1
    queue.close()


def test_same_id_from_another_sender_is_another_envelope(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path)
    assert queue.put(item(ALICE, 1, "from carol", sender=CAROL), now_ms=1)
    assert queue.put(item(ALICE, 1, "from mallory", sender=MALLORY), now_ms=2)
    assert [q.body for q in queue.pending(ALICE)] == ["from carol", "from mallory"]
    assert queue.ack(ALICE, _id(1))  # the oldest: delivered, so acknowledged, first
    assert [q.body for q in queue.pending(ALICE)] == ["from mallory"]
    assert queue.ack(ALICE, _id(1))
    assert queue.count(ALICE) == 0 and queue.total_bytes == 0
    queue.close()


def test_envelope_cap_per_recipient(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path, limits=QueueLimits(recipient_count=2))
    queue.put(item(ALICE, 1), now_ms=1)
    queue.put(item(ALICE, 2, sender=MALLORY), now_ms=1)
    with pytest.raises(QueueFull):
        queue.put(item(ALICE, 3), now_ms=1)
    assert not queue.put(item(ALICE, 2, sender=MALLORY), now_ms=1)  # a duplicate is not refused
    assert queue.put(item(BOB, 3), now_ms=1)
    queue.ack(ALICE, _id(1))
    assert queue.put(item(ALICE, 3), now_ms=1)
    queue.close()


def test_byte_caps(tmp_path: Path) -> None:
    limits = QueueLimits(recipient_bytes=100, sender_bytes=60, total_bytes=150)
    queue = RelayQueue.open(tmp_path, limits=limits)
    results = queue.put_many(
        [
            item(ALICE, 1, "m" * 50, sender=MALLORY),
            item(ALICE, 2, "m" * 20, sender=MALLORY),  # over mallory's share of alice's queue
            item(ALICE, 3, "c" * 50, sender=CAROL),
            item(ALICE, 4, "c" * 10, sender=CAROL),  # over alice's 100 bytes
            item(BOB, 5, "c" * 50, sender=CAROL),
            item(BOB, 6, "m" * 10, sender=MALLORY),  # over the relay's 150 bytes
        ],
        now_ms=1,
    )
    assert results == [
        PutResult.QUEUED,
        PutResult.SENDER_FULL,
        PutResult.QUEUED,
        PutResult.FULL,
        PutResult.QUEUED,
        PutResult.RELAY_FULL,
    ]
    assert (queue.bytes_for(ALICE), queue.bytes_for(BOB), queue.total_bytes) == (100, 50, 150)
    assert queue.ack(ALICE, _id(1))
    assert queue.put(item(ALICE, 2, "m" * 20, sender=MALLORY), now_ms=1)
    queue.close()


def test_envelope_cap_per_sender(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path, limits=QueueLimits(sender_count=1))
    assert queue.put_many([item(ALICE, 1), item(ALICE, 2)], now_ms=1) == [
        PutResult.QUEUED,
        PutResult.SENDER_FULL,
    ]
    assert queue.put(item(ALICE, 2, sender=MALLORY), now_ms=1)
    queue.close()


def test_pending_is_paged_by_bytes(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path)
    for n, size in enumerate([40, 40, 40, 200, 10]):
        queue.put(item(ALICE, n, "x" * size), now_ms=1)
    pages: list[list[int]] = []
    after = 0
    while page := queue.pending(ALICE, after_seq=after, max_bytes=100):
        pages.append([len(q.body) for q in page])
        after = page[-1].seq
    # An envelope larger than the page comes alone rather than never.
    assert pages == [[40, 40], [40], [200], [10]]
    queue.close()


def test_purge_and_reopen(tmp_path: Path) -> None:
    queue = RelayQueue.open(tmp_path)
    queue.put(item(ALICE, 1, "old"), now_ms=100)
    queue.put(item(ALICE, 2, "new"), now_ms=200)
    assert queue.purge(older_than_ms=150) == 1
    assert queue.bytes_for(ALICE) == 3
    queue.close()
    reopened = RelayQueue.open(tmp_path, limits=QueueLimits(recipient_bytes=5))
    assert [q.body for q in reopened.pending(ALICE)] == ["new"]
    assert reopened.count(ALICE) == 1
    assert reopened.put_many([item(ALICE, 3, "abc")], now_ms=300) == [PutResult.FULL]
    reopened.close()


def test_the_first_schema_is_upgraded(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.executescript(
        """
        CREATE TABLE queue (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            recipient TEXT NOT NULL,
            envelope_id TEXT NOT NULL,
            body TEXT NOT NULL,
            queued_ms INTEGER NOT NULL,
            UNIQUE (recipient, envelope_id)
        );
        CREATE INDEX queue_by_recipient ON queue (recipient, seq);
        CREATE INDEX queue_by_age ON queue (queued_ms);
        """
    )
    body = json.dumps({"id": _id(1), "from": CAROL, "to": ALICE, "note": "é"})
    db.execute(
        "INSERT INTO queue (recipient, envelope_id, body, queued_ms) VALUES (?, ?, ?, 1)",
        (ALICE, _id(1), body),
    )
    db.commit()
    db.close()
    queue = RelayQueue.open(tmp_path)
    assert [q.body for q in queue.pending(ALICE)] == [body]
    assert queue.bytes_for(ALICE) == len(body.encode("utf-8"))
    assert not queue.put(item(ALICE, 1, body, sender=CAROL), now_ms=2)  # the same envelope
    assert queue.put(item(ALICE, 1, body, sender=MALLORY), now_ms=2)  # the sender now counts
    queue.close()
    version = sqlite3.connect(tmp_path / DB_NAME).execute("PRAGMA user_version").fetchone()
    assert version == (SCHEMA_VERSION,)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    RelayQueue.open(tmp_path).close()
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="schema version"):
        RelayQueue.open(tmp_path)
