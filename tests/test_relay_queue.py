"""The relay's queue: ordering, deduplication, the limits, paging, the age limit and
restarts, in SQLite and in PostgreSQL; the SQLite file's schema upgrades."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bot.errors import StoreError
from bot.relay.limits import QueueLimits
from bot.relay.queue import (
    DB_NAME,
    SCHEMA_VERSION,
    Acknowledged,
    Batch,
    Incoming,
    PutResult,
    RelayQueue,
)
from bot.relay.store import QueueStore, open_store

ALICE = "a" * 32
BOB = "b" * 32
CAROL = "c" * 32
MALLORY = "d" * 32
QUEUED = PutResult.QUEUED


def _id(n: int) -> str:
    return f"{n:032x}"


def item(
    recipient: str, n: int, body: str = "x", sender: str = CAROL, address: str = ""
) -> Incoming:
    return Incoming(recipient, sender, _id(n), body, address)


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a queue lives: a data folder (SQLite) or a database's URL (PostgreSQL)."""
    if request.param == "sqlite":
        return tmp_path
    url = request.getfixturevalue("postgres_url")
    assert isinstance(url, str)
    return url


def reopen(where: Path | str, limits: QueueLimits | None = None) -> QueueStore:
    if isinstance(where, Path):
        return open_store(where, None, limits or QueueLimits())
    return open_store(Path("unused"), where, limits or QueueLimits())


def open_queue(
    where: Path | str, limits: QueueLimits | None = None, *, seen: str = ALICE + BOB
) -> QueueStore:
    """A queue in which the recipients in ``seen`` have connected once."""
    queue = reopen(where, limits)
    queue.apply(Batch(connected=[seen[i : i + 32] for i in range(0, len(seen), 32)]), now_ms=0)
    return queue


def put(queue: QueueStore, *items: Incoming, now_ms: int = 1) -> list[PutResult]:
    return queue.apply(Batch(puts=list(items)), now_ms).results


def ack(queue: QueueStore, recipient: str, n: int) -> bool:
    return queue.apply(Batch(acks=[Acknowledged(recipient, _id(n))]), now_ms=1).removed == 1


def waiting(queue: QueueStore, recipient: str) -> tuple[int, int]:
    """Envelopes and bytes waiting for ``recipient``."""
    rows = queue.pending(recipient, limit=1_000_000, max_bytes=1 << 40)
    return len(rows), sum(row.size for row in rows)


def test_oldest_first_and_ack(where: Path | str) -> None:
    queue = open_queue(where)
    assert put(queue, *(item(ALICE, n, f"body{n}") for n in range(3)), now_ms=1000) == [QUEUED] * 3
    put(queue, item(BOB, 9, "other"), now_ms=1000)
    assert [q.body for q in queue.pending(ALICE)] == ["body0", "body1", "body2"]
    first = queue.pending(ALICE, limit=1)[0]
    assert [q.envelope_id for q in queue.pending(ALICE, after_seq=first.seq)] == [_id(1), _id(2)]
    assert ack(queue, ALICE, 1)
    assert not ack(queue, ALICE, 1)
    assert not ack(queue, BOB, 0)  # acks only count for the recipient
    assert [q.envelope_id for q in queue.pending(ALICE)] == [_id(0), _id(2)]
    assert waiting(queue, ALICE) == (2, len("body0") + len("body2"))
    queue.close()


def test_acks_make_room_for_puts_in_the_same_batch(where: Path | str) -> None:
    queue = open_queue(where, QueueLimits(recipient_count=1))
    assert put(queue, item(ALICE, 1)) == [QUEUED]
    batch = Batch(acks=[Acknowledged(ALICE, _id(1))], puts=[item(ALICE, 2)])
    applied = queue.apply(batch, now_ms=2)
    assert (applied.removed, applied.results) == (1, [QUEUED])
    queue.close()


def test_a_batch_holding_envelopes_already_waiting(where: Path | str) -> None:
    # Queued together, then again one by one when one of them was already waiting: the
    # results, positions and limits are those of one envelope at a time.
    queue = open_queue(where, QueueLimits(recipient_count=3))
    assert put(queue, item(ALICE, 1)) == [QUEUED]
    batch = [item(ALICE, 1), item(ALICE, 2), item(ALICE, 3), item(ALICE, 2), item(ALICE, 4)]
    applied = queue.apply(Batch(puts=batch), now_ms=2)
    duplicate, full = PutResult.DUPLICATE, PutResult.FULL
    assert applied.results == [duplicate, QUEUED, QUEUED, duplicate, full]
    waiting_now = queue.pending(ALICE)
    assert [q.envelope_id for q in waiting_now] == [_id(1), _id(2), _id(3)]
    assert applied.seqs[1:3] == [q.seq for q in waiting_now[1:]]
    fresh = queue.apply(Batch(puts=[item(BOB, 5), item(BOB, 6), item(BOB, 5)]), now_ms=3)
    assert fresh.results == [QUEUED, QUEUED, duplicate]
    assert fresh.seqs[:2] == [q.seq for q in queue.pending(BOB)]
    queue.close()
    reopened = reopen(where, QueueLimits(recipient_count=3))
    assert put(reopened, item(ALICE, 4)) == [full]  # counted alike from the file
    reopened.close()


def test_acks_for_several_recipients_in_one_batch(where: Path | str) -> None:
    queue = open_queue(where, seen=ALICE + BOB + MALLORY)
    put(queue, item(ALICE, 1), item(ALICE, 2), item(BOB, 1), item(BOB, 3, sender=MALLORY))
    newer = queue.apply(Batch(puts=[item(BOB, 3, sender=ALICE)]), now_ms=1).seqs[0]
    acks = [(ALICE, 2), (BOB, 1), (ALICE, 9), (BOB, 3)]
    batch = Batch(acks=[Acknowledged(recipient, _id(n)) for recipient, n in acks])
    assert queue.apply(batch, now_ms=2).removed == 3
    assert [q.envelope_id for q in queue.pending(ALICE)] == [_id(1)]
    assert [q.seq for q in queue.pending(BOB)] == [newer]  # the same id from another sender
    again = Batch(acks=[Acknowledged(BOB, _id(3)), Acknowledged(BOB, _id(3))])
    assert queue.apply(again, now_ms=3).removed == 1
    assert waiting(queue, BOB) == (0, 0)
    assert waiting(queue, ALICE) == (1, 1)
    queue.close()


def test_same_id_from_the_same_sender_is_stored_once(where: Path | str) -> None:
    queue = open_queue(where)
    assert put(queue, item(ALICE, 1)) == [QUEUED]
    assert put(queue, item(ALICE, 1), now_ms=2) == [PutResult.DUPLICATE]
    assert put(queue, item(BOB, 1), now_ms=2) == [QUEUED]
    assert waiting(queue, ALICE)[0] == 1
    queue.close()


def test_same_id_from_another_sender_is_another_envelope(where: Path | str) -> None:
    queue = open_queue(where)
    assert put(queue, item(ALICE, 1, "from carol", sender=CAROL)) == [QUEUED]
    assert put(queue, item(ALICE, 1, "from mallory", sender=MALLORY), now_ms=2) == [QUEUED]
    assert [q.body for q in queue.pending(ALICE)] == ["from carol", "from mallory"]
    assert ack(queue, ALICE, 1)  # the oldest: delivered, so acknowledged, first
    assert [q.body for q in queue.pending(ALICE)] == ["from mallory"]
    assert ack(queue, ALICE, 1)
    assert waiting(queue, ALICE) == (0, 0)
    queue.close()


def test_envelope_cap_per_recipient(where: Path | str) -> None:
    queue = open_queue(where, QueueLimits(recipient_count=2))
    assert put(queue, item(ALICE, 1), item(ALICE, 2, sender=MALLORY)) == [QUEUED, QUEUED]
    assert put(queue, item(ALICE, 3)) == [PutResult.FULL]
    # A duplicate is not refused:
    assert put(queue, item(ALICE, 2, sender=MALLORY)) == [PutResult.DUPLICATE]
    assert put(queue, item(BOB, 3)) == [QUEUED]
    assert ack(queue, ALICE, 1)
    assert put(queue, item(ALICE, 3)) == [QUEUED]
    queue.close()


def test_byte_caps(where: Path | str) -> None:
    limits = QueueLimits(recipient_bytes=100, sender_bytes=60, total_bytes=150)
    queue = open_queue(where, limits)
    results = put(
        queue,
        item(ALICE, 1, "m" * 50, sender=MALLORY),
        item(ALICE, 2, "m" * 20, sender=MALLORY),  # over mallory's share of alice's queue
        item(ALICE, 3, "c" * 50, sender=CAROL),
        item(ALICE, 4, "c" * 10, sender=CAROL),  # over alice's 100 bytes
        item(BOB, 5, "c" * 50, sender=CAROL),
        item(BOB, 6, "m" * 10, sender=MALLORY),  # over the relay's 150 bytes
    )
    assert results == [
        PutResult.QUEUED,
        PutResult.SENDER_FULL,
        PutResult.QUEUED,
        PutResult.FULL,
        PutResult.QUEUED,
        PutResult.RELAY_FULL,
    ]
    assert (waiting(queue, ALICE)[1], waiting(queue, BOB)[1]) == (100, 50)
    assert ack(queue, ALICE, 1)
    assert put(queue, item(ALICE, 2, "m" * 20, sender=MALLORY)) == [QUEUED]
    queue.close()


def test_envelope_cap_per_sender(where: Path | str) -> None:
    queue = open_queue(where, QueueLimits(sender_count=1))
    assert put(queue, item(ALICE, 1), item(ALICE, 2)) == [QUEUED, PutResult.SENDER_FULL]
    assert put(queue, item(ALICE, 2, sender=MALLORY)) == [QUEUED]
    queue.close()


def test_strangers_share_a_small_part_of_a_queue(where: Path | str) -> None:
    queue = open_queue(where, QueueLimits(recipient_count=10, stranger_count=3))
    assert put(queue, item(ALICE, 0, sender=CAROL)) == [QUEUED]
    assert ack(queue, ALICE, 0)  # carol is now alice's contact
    # Any number of throwaway identities share three places in alice's queue ...
    fakes = [f"{n:x}" * 32 for n in range(5, 10)]
    results = put(queue, *(item(ALICE, 10 + n, sender=fake) for n, fake in enumerate(fakes)))
    assert results == [QUEUED] * 3 + [PutResult.STRANGERS_FULL] * 2
    # ... and her contact still has the rest.
    assert put(queue, *(item(ALICE, 20 + n) for n in range(7))) == [QUEUED] * 7
    assert put(queue, item(ALICE, 30)) == [PutResult.FULL]
    # A stranger whose envelope alice acknowledges becomes a contact: it leaves the share.
    assert ack(queue, ALICE, 10)
    assert ack(queue, ALICE, 20)
    assert put(queue, item(ALICE, 31, sender=fakes[3])) == [QUEUED]
    queue.close()
    reopened = reopen(where, QueueLimits(recipient_count=10, stranger_count=3))
    assert put(reopened, item(ALICE, 32, sender=fakes[4])) == [PutResult.STRANGERS_FULL]
    assert put(reopened, item(ALICE, 33, sender=fakes[0])) == [QUEUED]  # a contact
    reopened.close()


def test_recipients_that_never_connected_get_a_small_short_lived_queue(where: Path | str) -> None:
    queue = open_queue(where, QueueLimits(unseen_count=2), seen=ALICE)
    assert put(queue, *(item(BOB, n) for n in range(3)), now_ms=100) == [
        QUEUED,
        QUEUED,
        PutResult.UNSEEN_FULL,
    ]
    assert put(queue, *(item(ALICE, 10 + n) for n in range(3)), now_ms=100) == [QUEUED] * 3
    # Purging: seven days for alice, one for bob, who never connected.
    assert queue.purge(older_than_ms=50, unseen_older_than_ms=150) == 2
    assert (waiting(queue, ALICE)[0], waiting(queue, BOB)[0]) == (3, 0)
    queue.apply(Batch(connected=[BOB]), now_ms=200)
    assert put(queue, *(item(BOB, 20 + n) for n in range(3)), now_ms=200) == [QUEUED] * 3
    assert queue.purge(older_than_ms=50, unseen_older_than_ms=250) == 0
    queue.close()


def test_envelope_and_byte_caps_per_address(where: Path | str) -> None:
    queue = open_queue(where, QueueLimits(address_count=3, address_bytes=100))
    results = put(
        queue,
        item(ALICE, 1, sender=CAROL, address="192.0.2.7"),
        item(BOB, 2, sender=MALLORY, address="192.0.2.7"),
        item(ALICE, 3, "m" * 99, sender=MALLORY, address="192.0.2.7"),  # over 100 bytes
        item(BOB, 4, sender=CAROL, address="192.0.2.7"),
        item(BOB, 5, sender=CAROL, address="192.0.2.7"),  # a fourth envelope
        item(BOB, 6, sender=CAROL, address="198.51.100.1"),
    )
    assert results == [
        QUEUED,
        QUEUED,
        PutResult.ADDRESS_FULL,
        QUEUED,
        PutResult.ADDRESS_FULL,
        QUEUED,
    ]
    queue.close()


def test_pending_is_paged_by_bytes(where: Path | str) -> None:
    queue = open_queue(where)
    put(queue, *(item(ALICE, n, "x" * size) for n, size in enumerate([40, 40, 40, 200, 10])))
    pages: list[list[int]] = []
    after = 0
    while page := queue.pending(ALICE, after_seq=after, max_bytes=100):
        pages.append([len(q.body) for q in page])
        after = page[-1].seq
    # An envelope larger than the page comes alone rather than never.
    assert pages == [[40, 40], [40], [200], [10]]
    queue.close()


def test_purge_and_reopen(where: Path | str) -> None:
    queue = open_queue(where)
    put(queue, item(ALICE, 1, "old"), now_ms=100)
    put(queue, item(ALICE, 2, "new"), now_ms=200)
    assert queue.purge(older_than_ms=150) == 1
    assert waiting(queue, ALICE) == (1, 3)
    queue.close()
    reopened = reopen(where, QueueLimits(recipient_bytes=5))
    assert [q.body for q in reopened.pending(ALICE)] == ["new"]
    assert put(reopened, item(ALICE, 3, "abc"), now_ms=300) == [PutResult.FULL]
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
    assert waiting(queue, ALICE) == (1, len(body.encode("utf-8")))
    assert put(queue, item(ALICE, 1, body, sender=CAROL)) == [PutResult.DUPLICATE]
    assert put(queue, item(ALICE, 1, body, sender=MALLORY)) == [QUEUED]  # the sender counts
    queue.close()
    # What was queued keeps the limits it came under: alice counts as connected, and
    # carol as her contact.
    strict = QueueLimits(unseen_count=0, stranger_count=0)
    queue = RelayQueue.open(tmp_path, limits=strict)
    assert put(queue, item(ALICE, 2, sender=CAROL), item(BOB, 3, sender=CAROL)) == [
        QUEUED,
        PutResult.UNSEEN_FULL,
    ]
    queue.close()
    version = sqlite3.connect(tmp_path / DB_NAME).execute("PRAGMA user_version").fetchone()
    assert version == (SCHEMA_VERSION,)


def test_the_third_schema_is_upgraded(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.executescript(
        """
        CREATE TABLE queue (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            recipient TEXT NOT NULL,
            sender TEXT NOT NULL,
            address TEXT NOT NULL,
            envelope_id TEXT NOT NULL,
            size INTEGER NOT NULL,
            queued_ms INTEGER NOT NULL,
            body TEXT NOT NULL,
            UNIQUE (recipient, sender, envelope_id)
        );
        CREATE TABLE recipients (id TEXT PRIMARY KEY, first_ms INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE contacts (
            recipient TEXT NOT NULL,
            sender TEXT NOT NULL,
            PRIMARY KEY (recipient, sender)
        ) WITHOUT ROWID;
        CREATE INDEX queue_by_recipient ON queue (recipient, seq, size);
        CREATE INDEX queue_by_envelope ON queue (recipient, envelope_id);
        CREATE INDEX queue_by_age ON queue (queued_ms);
        PRAGMA user_version = 3;
        """
    )
    db.execute("INSERT INTO recipients VALUES (?, 0)", (ALICE,))
    for n, sender in ((1, CAROL), (1, MALLORY), (2, CAROL)):
        db.execute(
            "INSERT INTO queue (recipient, sender, address, envelope_id, size, queued_ms, body)"
            " VALUES (?, ?, '10.0.0.1', ?, 4, 1, ?)",
            (ALICE, sender, _id(n), f"b{n}{sender[0]}"),
        )
    db.commit()
    db.close()
    queue = RelayQueue.open(tmp_path)
    assert [q.body for q in queue.pending(ALICE)] == ["b1c", "b1d", "b2c"]
    assert put(queue, item(ALICE, 2, sender=CAROL)) == [PutResult.DUPLICATE]
    assert ack(queue, ALICE, 1)  # the oldest of the two with that id
    assert [q.body for q in queue.pending(ALICE)] == ["b1d", "b2c"]
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
