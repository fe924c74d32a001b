"""Envelope seal/open throughput against the raw cryptography floor.

For a typical ~2 KiB ``inbox_update`` and a 256 KiB one, prints envelopes per second for
:func:`seal` and :func:`open_envelope` (including payload encoding, parsing and every
acceptance check), beside the bare HPKE encrypt + Ed25519 sign (and verify + decrypt) of
the same bytes measured in the same run, and the ratio between them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from bot.protocol.encoding import b64u_decode
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


def _rate(action: Callable[[], object], seconds: float) -> float:
    """Calls per second of ``action``, run for about ``seconds`` (at least 5 calls)."""
    action()  # warm up
    count = 0
    started = time.perf_counter()
    while True:
        action()
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and count >= 5:
            return count / elapsed


def _measure(label: str, plaintext: bytes, seconds: float) -> None:
    card = DEVICE.card
    kx_pub = DEVICE.kx_key.public_key()
    envelope = seal(plaintext, sender=AGENT, recipient=card, ts_ms=NOW_MS)
    wire = envelope.to_json()
    info = build_info(envelope.id, AGENT.id, DEVICE.id, NOW_MS)
    ct = b64u_decode(str(wire["ct"]))
    peers = {AGENT.id: AGENT.card}
    replay = MemoryReplayGuard()
    sign_pub = AGENT.sign_key.public_key()

    def raw_seal() -> None:
        sealed = SUITE.encrypt(plaintext, kx_pub, info=info)
        AGENT.sign(info + b"\x00" + sealed)

    def raw_open() -> None:
        sign_pub.verify(envelope.sig, info + b"\x00" + ct)
        SUITE.decrypt(ct, DEVICE.kx_key, info=info)

    seal_rate = _rate(lambda: seal(plaintext, sender=AGENT, recipient=card, ts_ms=NOW_MS), seconds)
    raw_seal_rate = _rate(raw_seal, seconds)
    open_rate = _rate(
        lambda: open_envelope(wire, me=DEVICE, peers=peers, now_ms=NOW_MS, replay=replay),
        seconds,
    )
    raw_open_rate = _rate(raw_open, seconds)
    print(f"   {label} ({len(plaintext) / 1024:.1f} KiB plaintext)")
    print(
        f"     seal {seal_rate:9.0f} env/s   floor {raw_seal_rate:9.0f} env/s   "
        f"ratio {raw_seal_rate / seal_rate:.2f}x"
    )
    print(
        f"     open {open_rate:9.0f} env/s   floor {raw_open_rate:9.0f} env/s   "
        f"ratio {raw_open_rate / open_rate:.2f}x"
    )


def main(quick: bool) -> None:
    seconds = 0.3 if quick else 2.0
    _measure("typical inbox_update", _update(diff_chars=400, approvals=3), seconds)
    _measure("large inbox_update", _update(diff_chars=256 * 1024, approvals=1), seconds)


if __name__ == "__main__":
    main(quick=False)
