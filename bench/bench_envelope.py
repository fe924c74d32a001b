"""Envelope seal/open throughput against the raw cryptography floor.

For a typical ~2 KiB ``inbox_update`` and a 256 KiB one, prints envelopes per second for
:func:`seal` and :func:`open_envelope` (including payload encoding, parsing and every
acceptance check), beside the bare HPKE encrypt + Ed25519 sign (and base64url decoding of
``ct`` with the fastest decoder we know + verify + decrypt, what any reader of the wire
form must do; and that plus ``json.loads`` of the plaintext) of the same bytes,
and the ratio between them. Rates are per second of CPU time, the best of ten short
rounds in which the measured code and its floor take turns, so that a busy machine
slows both alike. The C heap is set up as in the bot's, relay's and agent host's
processes (:func:`bot.heap.keep_large_buffers`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pybase64
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from bot.heap import keep_large_buffers
from bot.protocol.envelope import build_info, open_envelope, seal
from bot.protocol.identity import Identity
from bot.protocol.payloads import Approval, Block, InboxUpdate, encode_payload
from bot.testing.replay import MemoryReplayGuard

AGENT = Identity.from_seeds(b"\x01" * 32, b"\x02" * 32, "build-bot")
DEVICE = Identity.from_seeds(b"\x03" * 32, b"\x04" * 32, "Telegram @bench_bot")
SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.CHACHA20_POLY1305)
NOW_MS = 1_800_000_000_000
CREATED = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _update(diff_chars: int, approvals: int) -> bytes:
    items = tuple(
        Approval(
            id=f"apr_{n}",
            tool="write_file",
            summary=f"Write /srv/app/module_{n}.py",
            blocks=(
                Block("key_value", "File", f"/srv/app/module_{n}.py", "path"),
                Block("block", "Diff", "+ new line of code\n" * (diff_chars // 19), "diff"),
            ),
            arguments={"path": f"/srv/app/module_{n}.py", "content": "x = 1\n"},
            created_at=CREATED,
        )
        for n in range(approvals)
    )
    return encode_payload(InboxUpdate(rev=1, agent_name="build-bot", approvals=items))


def _rates(actions: list[Callable[[], object]], seconds: float) -> list[float]:
    """Calls per CPU second of each action: the best of several short rounds, the actions
    taking turns, so that other processes on a busy machine slow each of them alike."""
    best = [0.0] * len(actions)
    rounds = 10
    for _ in range(rounds):
        for index, action in enumerate(actions):
            action()  # warm up
            count = 0
            started = time.process_time()
            while True:
                action()
                count += 1
                elapsed = time.process_time() - started
                if elapsed >= seconds / rounds and count >= 3:
                    break
            best[index] = max(best[index], count / elapsed)
    return best


def _measure(label: str, plaintext: bytes, seconds: float) -> None:
    card = DEVICE.card
    kx_pub = DEVICE.kx_key.public_key()
    envelope = seal(plaintext, sender=AGENT, recipient=card, ts_ms=NOW_MS)
    wire = envelope.to_json()
    info = build_info(envelope.id, AGENT.id, DEVICE.id, NOW_MS)
    peers = {AGENT.id: AGENT.card}
    replay = MemoryReplayGuard()
    sign_pub = AGENT.sign_key.public_key()

    def raw_seal() -> None:
        sealed = SUITE.encrypt(plaintext, kx_pub, info=info)
        AGENT.sign(info + b"\x00" + sealed)

    ct_text = str(wire["ct"])
    padded = ct_text + "=" * (-len(ct_text) % 4)

    def raw_open() -> bytes:
        raw_ct = pybase64.b64decode(padded, altchars=b"-_", validate=True)
        sign_pub.verify(envelope.sig, info + b"\x00" + raw_ct)
        return SUITE.decrypt(raw_ct, DEVICE.kx_key, info=info)

    def raw_open_and_decode() -> None:
        json.loads(raw_open())

    seal_rate, raw_seal_rate = _rates(
        [lambda: seal(plaintext, sender=AGENT, recipient=card, ts_ms=NOW_MS), raw_seal], seconds
    )
    open_rate, raw_open_rate, decoded_rate = _rates(
        [
            lambda: open_envelope(wire, me=DEVICE, peers=peers, now_ms=NOW_MS, replay=replay),
            raw_open,
            raw_open_and_decode,
        ],
        seconds,
    )
    print(f"   {label} ({len(plaintext) / 1024:.1f} KiB plaintext)")
    print(
        f"     seal {seal_rate:9.0f} env/s   floor {raw_seal_rate:9.0f} env/s   "
        f"ratio {raw_seal_rate / seal_rate:.2f}x"
    )
    print(
        f"     open {open_rate:9.0f} env/s   floor {raw_open_rate:9.0f} env/s   "
        f"ratio {raw_open_rate / open_rate:.2f}x   (goal <= 1.5x)"
    )
    print(
        f"     open {open_rate:9.0f} env/s   floor {decoded_rate:9.0f} env/s   "
        f"ratio {decoded_rate / open_rate:.2f}x   (floor with json.loads of the plaintext)"
    )


def main(quick: bool) -> None:
    keep_large_buffers()
    seconds = 0.2 if quick else 2.0
    _measure("typical inbox_update", _update(diff_chars=400, approvals=3), seconds)
    _measure("large inbox_update", _update(diff_chars=256 * 1024, approvals=1), seconds)


if __name__ == "__main__":
    main(quick=False)
