"""Large envelopes are checked in a process apart (the event loop's interpreter lock stays
free): with the same result and the same refusals as in the bot's own process, and a process
that stopped is replaced without losing the envelope."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import time
from typing import Any

import pytest
from test_batch_apply import _forged, _said, _sealed
from test_snapshot import _approval, _payload

from bot.bridge import Bridge
from bot.bridge.apart import APART_BYTES, Apart
from bot.errors import EnvelopeRefused, RefusalReason
from bot.protocol.envelope import Opened, Unsealed, accept, check, seal, unseal
from bot.protocol.identity import Identity
from bot.protocol.replay import ReplayGuard
from bot.protocol.snapshot import read_payload
from bot.store import Store


def _big(item_id: str) -> dict[str, Any]:
    """An approval large enough to be checked apart."""
    rows = [f"{n:05d} " + "lorem ipsum " * 8 for n in range(APART_BYTES // 90)]
    return _approval(item_id, arguments={"rows": rows})


class _Nothing(ReplayGuard):
    def seen(self, envelope_id: str) -> bool:
        return False


def _unsealed(me: Identity, agent: Identity, plaintext: bytes, *, forged: bool = False
              ) -> Unsealed:
    envelope = seal(plaintext, sender=agent, recipient=me.card,
                    ts_ms=int(time.time() * 1000)).to_json()
    if forged:
        other = seal(plaintext, sender=Identity.generate("other"), recipient=me.card,
                     ts_ms=int(time.time() * 1000)).to_json()
        envelope = {**envelope, "sig": other["sig"]}
    return unseal(envelope, me=me, peers={agent.id: agent.card})


def _outcome(unsealed: Unsealed, **given: Any) -> Opened | tuple[RefusalReason, str]:
    try:
        return accept(unsealed, now_ms=int(time.time() * 1000), replay=_Nothing(),
                      seen={}, **given)
    except EnvelopeRefused as refusal:
        return refusal.reason, refusal.detail


def test_checked_apart_is_opened_as_here() -> None:
    me, agent = Identity.generate("bot"), Identity.generate("agent")
    big = _payload(1, [_big("b1"), _approval("a1")])
    cases = [_unsealed(me, agent, big), _unsealed(me, agent, big, forged=True),
             _unsealed(me, agent, big[:-1]),
             _unsealed(me, agent, b'{"kind": "inbox_update", "v": 1, "body": [' + b"1," * 70_000
                       + b"1]}")]
    apart = Apart()
    try:
        checked = apart.check_all(cases)
        assert multiprocessing.active_children()
    finally:
        apart.close()
    outcomes = [_outcome(item, checked=done) for item, done in zip(cases, checked, strict=True)]
    assert outcomes == [_outcome(item) for item in cases]
    opened = outcomes[0]
    assert isinstance(opened, Opened) and opened.read is not None
    assert opened.read.seen == read_payload(big, None).seen
    assert [outcome[0] for outcome in outcomes[1:] if isinstance(outcome, tuple)] == [
        RefusalReason.BAD_SIGNATURE, RefusalReason.BAD_PAYLOAD, RefusalReason.BAD_PAYLOAD]
    assert check(cases[1]) == checked[1]


def test_a_large_snapshot_is_checked_apart_and_applied(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    bridge, agent, store = bridge_and_agent
    before = set(multiprocessing.active_children())
    first = _sealed(bridge, agent, _payload(1, [_big("b1"), _approval("a1")]))
    assert len(str(first["ct"])) > APART_BYTES
    bridge.handle_envelopes([first])
    assert store.items.open_ids(agent.id) == {"b1", "a1"}
    assert set(multiprocessing.active_children()) - before
    # The next one is read against it, the one after a forged one too.
    forged = _forged(bridge, agent, _payload(2, [_big("b1"), _big("b2")]))
    said = _said(bridge, [forged], caplog)
    assert said == [f"dropped envelope {str(forged['id'])[:12]} from {agent.id[:12]}: "
                    f"bad_signature: signature does not verify for {agent.id}"]
    bridge.handle_envelopes([_sealed(bridge, agent, _payload(3, [_big("b1")]))])
    assert store.items.open_ids(agent.id) == {"b1"}
    # The same copy again: a replay, dropped.
    assert _said(bridge, [dict(first)], caplog) == [
        f"dropped envelope {str(first['id'])[:12]} from {agent.id[:12]}: replay: "
        f"envelope {first['id']} already accepted"]


def test_a_process_apart_that_stopped_is_replaced_and_nothing_is_lost(
    bridge_and_agent: tuple[Bridge, Identity, Store], caplog: pytest.LogCaptureFixture,
) -> None:
    bridge, agent, store = bridge_and_agent
    before = set(multiprocessing.active_children())
    bridge.handle_envelopes([_sealed(bridge, agent, _payload(1, [_big("b1")]))])
    (stopped,) = set(multiprocessing.active_children()) - before
    assert stopped.pid is not None
    os.kill(stopped.pid, signal.SIGKILL)
    stopped.join(10)
    said = _said(bridge, [_sealed(bridge, agent, _payload(2, [_big("b1"), _big("b2")]))],
                 caplog, logging.WARNING)
    assert said == ["the process checking large envelopes stopped: 1 checked here, another "
                    "started for the next"]
    assert store.items.open_ids(agent.id) == {"b1", "b2"}
    bigger = _payload(3, [_big(i) for i in ("b2", "b3", "b4")])
    bridge.handle_envelopes([_sealed(bridge, agent, bigger)])
    assert store.items.open_ids(agent.id) == {"b2", "b3", "b4"}
    started = set(multiprocessing.active_children()) - before - {stopped}
    assert started
