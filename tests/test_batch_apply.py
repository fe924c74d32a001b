"""Envelopes that queued up on a relay session are applied together: one durable commit
for all of them, one agent's snapshots folded into its last, and an envelope whose payload
the store refuses refused alone."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from test_snapshot import _approval, _payload

from bot.agenthost.store import AgentStore
from bot.bridge import Bridge
from bot.core.model import Peer
from bot.protocol.envelope import seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import raw_payload
from bot.relay.queue import RelayQueue
from bot.store import Store
from bot.store.postgres import PostgresDatabase


def _said(bridge: Bridge, batch: list[dict[str, Any]], caplog: pytest.LogCaptureFixture,
          level: int = logging.INFO) -> list[str]:
    """What the bridge logged handling ``batch``."""
    caplog.clear()
    with caplog.at_level(level, logger="bot.bridge"):
        bridge.handle_envelopes(batch)
    return [record.getMessage() for record in caplog.records]


def _sealed(bridge: Bridge, agent: Identity, plaintext: bytes) -> dict[str, Any]:
    return seal(plaintext, sender=agent, recipient=bridge.identity.card,
                ts_ms=int(time.time() * 1000)).to_json()


def test_a_growing_inbox_queued_up_costs_one_durable_commit(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    items = [_approval(f"g{i}") for i in range(30)]
    batch = [_sealed(bridge, agent, _payload(n, items[:n])) for n in range(1, 31)]
    commits = store.db.durable_commits
    assert bridge.handle_envelopes(batch).cards
    assert store.db.durable_commits == commits + 1
    assert store.items.open_ids(agent.id) == {f"g{i}" for i in range(30)}
    assert len(store.view().cards.dirty(5)) == 30  # a card each for chat 5
    # The next snapshot is read against the last of the batch: g4 resolved elsewhere.
    bridge.handle_envelopes([_sealed(bridge, agent, _payload(31, items[:4] + items[5:]))])
    assert store.items.open_ids(agent.id) == {f"g{i}" for i in range(30)} - {"g4"}


def test_a_copy_in_the_same_batch_is_applied_once(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    bridge, agent, store = bridge_and_agent
    envelope = _sealed(bridge, agent, _payload(1, [_approval("c1")]))
    said = _said(bridge, [envelope, dict(envelope)], caplog)
    assert store.items.open_ids(agent.id) == {"c1"}
    assert said == [
        f"applied InboxUpdate from agent {agent.id[:8]}, the newest of 2 of its snapshots in "
        "the same delivery"]
    # Delivered again beside a newer one, it is superseded; alone, the replay set drops it.
    later = _sealed(bridge, agent, _payload(2, [_approval("c1"), _approval("c2")]))
    bridge.handle_envelopes([dict(envelope), later])
    assert store.items.open_ids(agent.id) == {"c1", "c2"}
    assert _said(bridge, [dict(envelope)], caplog) == [
        f"dropped envelope {str(envelope['id'])[:12]} from {agent.id[:12]}: replay: "
        f"envelope {envelope['id']} already accepted"]


def test_snapshots_queued_up_are_applied_as_the_last(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    """Each snapshot is the agent's complete inbox: of those that queued up, only the last
    is applied, with the items it shares with the ones before it. x1 came and went before
    anyone could see it: it gets no card."""
    bridge, agent, store = bridge_and_agent
    a, b, c, x = (_approval(i) for i in ("a1", "b1", "c1", "x1"))
    batch = [_sealed(bridge, agent, _payload(1, [a, x])),
             _sealed(bridge, agent, _payload(2, [a, x, b])),
             _sealed(bridge, agent, _payload(3, [a, b, c]))]
    said = _said(bridge, batch, caplog)
    assert store.items.open_ids(agent.id) == {"a1", "b1", "c1"}
    assert store.items.get(agent.id, "x1") is None
    assert [card.item_id for card in store.view().cards.dirty(5)] == ["a1", "b1", "c1"]
    assert store.agents.last_rev(agent.id) == 3
    # Only the newest was checked and accepted: the replay set holds it alone.
    ids = {str(envelope["id"]) for envelope in batch}
    assert store.outbox.seen_among(ids) == {str(batch[2]["id"])}
    assert said == [
        f"applied InboxUpdate from agent {agent.id[:8]}, the newest of 3 of its snapshots in "
        "the same delivery"
    ]
    # The next snapshot is read against the last: a1 resolved elsewhere.
    bridge.handle_envelopes([_sealed(bridge, agent, _payload(4, [b, c]))])
    assert store.items.open_ids(agent.id) == {"b1", "c1"}
    # One of the older ones delivered again is opened, and ignored as not newer.
    bridge.handle_envelopes([batch[1]])
    assert store.items.open_ids(agent.id) == {"b1", "c1"}
    assert store.agents.last_rev(agent.id) == 4


def _forged(bridge: Bridge, agent: Identity, plaintext: bytes) -> dict[str, Any]:
    """An envelope that claims to come from ``agent`` (a relay could write one): signed by
    another key."""
    envelope = _sealed(bridge, agent, plaintext)
    other = _sealed(bridge, Identity.generate("other"), plaintext)
    return {**envelope, "sig": other["sig"]}


def test_a_superseded_snapshot_is_not_checked(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    """Whatever an older snapshot says, the newer one leaves nothing of it: its signature is
    not verified, and one that would not verify is left as silently as a genuine one."""
    bridge, agent, store = bridge_and_agent
    batch = [_forged(bridge, agent, _payload(1, [_approval("x1")])),
             _sealed(bridge, agent, _payload(2, [_approval("a1")]))]
    said = _said(bridge, batch, caplog)
    assert store.items.open_ids(agent.id) == {"a1"}
    assert store.items.get(agent.id, "x1") is None
    assert not [line for line in said if "dropped" in line]


def test_a_forged_newest_snapshot_gives_way_to_the_one_before_it(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    bridge, agent, store = bridge_and_agent
    batch = [_sealed(bridge, agent, _payload(1, [_approval("a1")])),
             _forged(bridge, agent, _payload(9, [_approval("x1")]))]
    said = _said(bridge, batch, caplog)
    assert store.items.open_ids(agent.id) == {"a1"}
    assert store.agents.last_rev(agent.id) == 1
    assert said == [
        f"dropped envelope {str(batch[1]['id'])[:12]} from {agent.id[:12]}: bad_signature: "
        f"signature does not verify for {agent.id}",
        f"applied InboxUpdate from agent {agent.id[:8]}",
    ]


def test_two_agents_snapshots_interleaved_each_leave_their_newest(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    bridge, agent, store = bridge_and_agent
    other = Identity.generate("other agent")
    store.agents.add_peer(Peer(other.id, "ws://relay", json.dumps(other.card.to_json()),
                               "other agent"), 0)
    store.agents.bind(other.id, 5, None, 0)
    batch = [_sealed(bridge, agent, _payload(1, [_approval("a1")])),
             _sealed(bridge, other, _payload(1, [_approval("o1")])),
             _sealed(bridge, agent, _payload(2, [_approval("a1"), _approval("a2")])),
             _sealed(bridge, other, _payload(2, [_approval("o2")]))]
    said = _said(bridge, batch, caplog)
    assert store.items.open_ids(agent.id) == {"a1", "a2"}
    assert store.items.open_ids(other.id) == {"o2"}
    assert store.items.get(other.id, "o1") is None
    assert sorted(said) == sorted(
        f"applied InboxUpdate from agent {sender.id[:8]}, the newest of 2 of its snapshots "
        "in the same delivery" for sender in (agent, other))


def test_snapshots_out_of_order_leave_the_newest(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    bridge, agent, store = bridge_and_agent
    batch = [_sealed(bridge, agent, _payload(2, [_approval("a1")])),
             _sealed(bridge, agent, _payload(1, [_approval("x1")]))]
    bridge.handle_envelopes(batch)
    assert store.items.open_ids(agent.id) == {"a1"}
    assert store.items.get(agent.id, "x1") is None
    assert store.agents.last_rev(agent.id) == 2


def test_snapshots_whose_revisions_mislead_are_opened_in_turn(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    """The first snapshot's last "rev" is not its own: it looks older than the second, and
    is newer. Each is opened in turn, and the second is ignored as not newer."""
    bridge, agent, store = bridge_and_agent
    batch = [_sealed(bridge, agent, _payload(10, [_approval("a1")], extra={"rev": 1})),
             _sealed(bridge, agent, _payload(5, [_approval("x1")]))]
    said = _said(bridge, batch, caplog)
    assert store.items.open_ids(agent.id) == {"a1"}
    assert store.agents.last_rev(agent.id) == 10
    assert f"snapshots from {agent.id[:8]} not told apart: opening 2 one by one" in said


def _refusing(store: Store, item_id: str) -> None:
    """The database refuses to hold ``item_id`` (a trigger stands for any constraint)."""
    if isinstance(store.db, PostgresDatabase):
        store.db.run(f"CREATE FUNCTION refuse_{item_id}() RETURNS trigger LANGUAGE plpgsql"
                     f" AS $$ BEGIN IF NEW.item_id = '{item_id}' THEN RAISE EXCEPTION 'no';"
                     " END IF; RETURN NEW; END $$")
        store.db.run(f"CREATE TRIGGER refuse_{item_id} BEFORE INSERT ON items FOR EACH ROW"
                     f" EXECUTE FUNCTION refuse_{item_id}()")
        return
    with sqlite3.connect(store.path) as db:
        db.execute(f"CREATE TRIGGER refuse_{item_id} BEFORE INSERT ON items"
                   f" WHEN NEW.item_id = '{item_id}' BEGIN SELECT RAISE(ABORT, 'no'); END")


def test_a_snapshot_that_fails_to_apply_gives_way_to_those_it_superseded(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    bridge, agent, store = bridge_and_agent
    _refusing(store, "bad")
    a, b, bad = (_approval(i) for i in ("a1", "b1", "bad"))
    batch = [_sealed(bridge, agent, _payload(1, [a])),
             _sealed(bridge, agent, _payload(2, [a, b])),
             _sealed(bridge, agent, _payload(3, [a, b, bad]))]
    commits = store.db.durable_commits
    said = _said(bridge, batch, caplog)
    assert store.db.durable_commits == commits + 1
    assert store.items.open_ids(agent.id) == {"a1", "b1"}
    assert store.agents.last_rev(agent.id) == 2
    assert said[0].startswith(f"refused envelope {str(batch[2]['id'])[:12]} from "
                              f"{agent.id[:8]}: applying its InboxUpdate failed with")
    assert said[1:] == [
        f"opening the 2 snapshots of {agent.id[:8]} it superseded instead",
        f"applied InboxUpdate from agent {agent.id[:8]}, the newest of 2 of its snapshots in "
        "the same delivery",
    ]
    ids = [str(envelope["id"]) for envelope in batch]
    assert store.outbox.seen_among(set(ids)) == {ids[1], ids[2]}
    # The next snapshot is read against the last applied, the second.
    bridge.handle_envelopes([_sealed(bridge, agent, _payload(4, [b]))])
    assert store.items.open_ids(agent.id) == {"b1"}


def test_a_snapshot_read_against_a_refused_one_is_read_in_full(
    bridge_and_agent: tuple[Bridge, Identity, Store],
) -> None:
    """The second snapshot is refused; a notification between it and the third keeps the
    third apart. The third was read against the refused one, in which b1 first appeared:
    b1 is new to the bot all the same."""
    bridge, agent, store = bridge_and_agent
    _refusing(store, "bad")
    a, b, bad, c = (_approval(i) for i in ("a1", "b1", "bad", "c1"))
    notification = raw_payload("notification", {"item_id": "a1", "category": "approval",
                                                "title": "agent", "body": "a1"})
    batch = [_sealed(bridge, agent, _payload(1, [a])),
             _sealed(bridge, agent, _payload(2, [a, b, bad])),
             _sealed(bridge, agent, notification),
             _sealed(bridge, agent, _payload(3, [a, b, c]))]
    bridge.handle_envelopes(batch)
    assert store.items.open_ids(agent.id) == {"a1", "b1", "c1"}
    assert store.agents.last_rev(agent.id) == 3
    bridge.handle_envelopes([_sealed(bridge, agent, _payload(4, [a, c]))])
    assert store.items.open_ids(agent.id) == {"a1", "c1"}


def test_every_store_keeps_what_it_may_undo_in_memory(tmp_path: Path) -> None:
    """A savepoint (one an envelope of a batch) or a statement of many rows keeps the pages
    it may have to undo; in a temporary file, that is a write for each page changed."""
    memory = 2  # PRAGMA temp_store
    store = Store.open(tmp_path / "bot.sqlite3")
    queue = RelayQueue.open(tmp_path / "relay")
    host = AgentStore(tmp_path / "agent")
    try:
        for connection in (store.db._connection, queue._db, host._db):
            assert connection.execute("PRAGMA temp_store").fetchone()[0] == memory
    finally:
        store.close()
        queue.close()
        host.close()
