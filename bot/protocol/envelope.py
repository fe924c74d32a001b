"""Envelopes (protocol §2): sealing a payload for one recipient, and the acceptance rules a
recipient applies before it trusts a single byte of what it opened."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.hpke import AEAD, KDF, KEM, Suite

from bot.errors import EnvelopeRefused, PayloadError, ProtocolError, RefusalReason
from bot.protocol.encoding import (
    b64u_decode,
    b64u_encode,
    canonical_json,
    is_int,
    loads_limited,
)
from bot.protocol.identity import (
    SIGNATURE_BYTES,
    Identity,
    PublicCard,
    is_id,
    verify_signature,
)
from bot.protocol.pairing import device_public_card
from bot.protocol.payloads import PairRequest, Payload, parse_payload
from bot.protocol.replay import MAX_AGE_MS, ReplayGuard
from bot.protocol.snapshot import Read, SeenSnapshot, read_payload

VERSION = 1
MAX_ENVELOPE_BYTES = 1 << 20
MAX_FUTURE_SKEW_MS = 5 * 60 * 1000
MAX_PUSH_CHARS = 3500
MIN_CT_BYTES = 32 + 16
"""The HPKE ``enc`` (32 bytes) plus the Poly1305 tag: an empty plaintext."""
MAX_TS = (1 << 63) - 1
"""Larger timestamps are refused as malformed: they would not fit a SQLite integer."""

_INFO_PREFIX = b"skald-e2e-v1"
_BASE64_FIELDS = ("ct", "sig", "push")
_SUITE = Suite(KEM.X25519, KDF.HKDF_SHA256, AEAD.CHACHA20_POLY1305)


@dataclass(frozen=True)
class Envelope:
    """What the relay sees: routing headers, the sealed payload and its signature."""

    id: str
    sender: str
    recipient: str
    ts: int
    ct: bytes
    sig: bytes
    push: str | None = None
    v: int = VERSION

    def to_json(self) -> dict[str, object]:
        """The wire object: ``v, id, from, to, ts, ct, sig`` and ``push`` when present."""
        obj: dict[str, object] = {
            "v": self.v,
            "id": self.id,
            "from": self.sender,
            "to": self.recipient,
            "ts": self.ts,
            "ct": b64u_encode(self.ct),
            "sig": b64u_encode(self.sig),
        }
        if self.push is not None:
            obj["push"] = self.push
        return obj


@dataclass(frozen=True)
class Opened:
    """An envelope that passed every acceptance rule, with its payload and who sent it."""

    envelope: Envelope
    payload: Payload = field(repr=False)
    """The decrypted content: never logged, so not in the repr either."""
    sender: PublicCard
    plaintext: bytes = field(default=b"", repr=False, compare=False)
    """The decrypted payload bytes, for callers that need the raw body: never log them."""
    read: Read | None = field(default=None, repr=False, compare=False)
    """How the payload was read against the sender's previous snapshot, when
    :func:`open_envelope` was given the snapshots seen."""


class DecodedEnvelope(dict[str, object]):
    """A wire envelope whose ``ct`` a relay client already decoded (it had to, to know the
    frame reads as JSON would read it): :func:`parse_envelope` takes those bytes rather
    than decoding up to a megabyte again. Any copy is a plain envelope."""

    __slots__ = ("ct_bytes", "ct_text")

    def __init__(self, fields: Mapping[str, object], ct_text: str, ct_bytes: bytes) -> None:
        super().__init__(fields)
        self.ct_text = ct_text
        self.ct_bytes = ct_bytes


def build_info(envelope_id: str, sender: str, recipient: str, ts: int) -> bytes:
    """``"skald-e2e-v1" 0x00 id 0x00 from 0x00 to 0x00 decimal(ts)``: binds the headers."""
    fields = (envelope_id, sender, recipient, str(ts))
    return b"\x00".join((_INFO_PREFIX, *(f.encode("ascii") for f in fields)))


def _signed_bytes(info: bytes, ct: bytes) -> bytes:
    return info + b"\x00" + ct


def seal(
    payload: bytes,
    *,
    sender: Identity,
    recipient: PublicCard,
    ts_ms: int,
    envelope_id: str | None = None,
    push: bytes | None = None,
) -> Envelope:
    """Seal ``payload`` (UTF-8 JSON) to ``recipient`` and sign it as ``sender``.

    ``push``, when given, is a ``notification`` payload sealed the same way under the
    ``<id>.push`` info, for relays that forward pushes to offline recipients.
    """
    envelope_id = envelope_id if envelope_id is not None else os.urandom(16).hex()
    if not is_id(envelope_id):
        raise ProtocolError("an envelope id must be 32 lowercase hex characters")
    try:
        kx_pub = X25519PublicKey.from_public_bytes(recipient.kx_pub)
        info = build_info(envelope_id, sender.id, recipient.id, ts_ms)
        ct = _SUITE.encrypt(payload, kx_pub, info=info)
        push_text = None
        if push is not None:
            push_info = build_info(f"{envelope_id}.push", sender.id, recipient.id, ts_ms)
            push_text = b64u_encode(_SUITE.encrypt(push, kx_pub, info=push_info))
    except ValueError as exc:
        raise ProtocolError(f"cannot seal to {recipient.id}: {exc}") from exc
    if push_text is not None and len(push_text) > MAX_PUSH_CHARS:
        raise ProtocolError(f"push payload too large ({len(push_text)} > {MAX_PUSH_CHARS})")
    sig = sender.sign(_signed_bytes(info, ct))
    return Envelope(
        id=envelope_id,
        sender=sender.id,
        recipient=recipient.id,
        ts=ts_ms,
        ct=ct,
        sig=sig,
        push=push_text,
    )


def parse_envelope(raw: object) -> Envelope:
    """Check rule 1 of §2 (version, shape, size) on a dict, JSON text or JSON bytes."""
    obj = _as_object(raw)
    version = obj.get("v")
    if not is_int(version):
        raise EnvelopeRefused(RefusalReason.MALFORMED, "v must be an integer")
    if version != VERSION:
        raise EnvelopeRefused(RefusalReason.BAD_VERSION, f"unsupported version {version}")
    envelope_id = _id_field(obj, "id")
    sender = _id_field(obj, "from")
    recipient = _id_field(obj, "to")
    ts = obj.get("ts")
    if not is_int(ts) or not 0 <= ts <= MAX_TS:
        raise EnvelopeRefused(RefusalReason.MALFORMED, "ts must be a non-negative integer")
    ct = _ct_field(obj)
    if len(ct) < MIN_CT_BYTES:
        raise EnvelopeRefused(RefusalReason.MALFORMED, f"ct too short ({len(ct)} bytes)")
    sig = _bytes_field(obj, "sig")
    if len(sig) != SIGNATURE_BYTES:
        raise EnvelopeRefused(RefusalReason.MALFORMED, f"sig must be {SIGNATURE_BYTES} bytes")
    return Envelope(
        id=envelope_id,
        sender=sender,
        recipient=recipient,
        ts=ts,
        ct=ct,
        sig=sig,
        push=_push_field(obj),
    )


def _as_object(raw: object) -> dict[str, object]:
    if isinstance(raw, str | bytes):
        size = len(raw.encode("utf-8", "surrogatepass")) if isinstance(raw, str) else len(raw)
        if size > MAX_ENVELOPE_BYTES:
            raise EnvelopeRefused(RefusalReason.TOO_LARGE, f"{size} bytes")
        try:
            raw = loads_limited(raw, max_bytes=MAX_ENVELOPE_BYTES)
        except PayloadError as exc:
            raise EnvelopeRefused(RefusalReason.MALFORMED, str(exc)) from exc
    if not isinstance(raw, dict):
        raise EnvelopeRefused(RefusalReason.MALFORMED, "an envelope must be a JSON object")
    verbatim = {key: value for key in _BASE64_FIELDS if isinstance(value := raw.get(key), str)}
    verbatim_size = sum(len(value) for value in verbatim.values())
    if verbatim_size + _SMALL_HEADERS_BYTES <= MAX_ENVELOPE_BYTES and _small_headers(raw):
        return raw  # fits whatever the headers hold: no need to serialise them
    try:
        size = _canonical_size(raw, verbatim)
    except (TypeError, ValueError, RecursionError) as exc:
        raise EnvelopeRefused(RefusalReason.MALFORMED, "not serialisable as JSON") from exc
    if size > MAX_ENVELOPE_BYTES:
        raise EnvelopeRefused(RefusalReason.TOO_LARGE, f"{size} bytes")
    return raw


def _canonical_size(obj: dict[str, object], verbatim: dict[str, str]) -> int:
    """The canonical serialisation's size, without copying the long base64url fields:
    JSON writes them verbatim (quotes aside), and they are checked to be base64url
    later, so the count is exact for any envelope that can be accepted."""
    rest = {key: "" if key in verbatim else value for key, value in obj.items()}
    return len(canonical_json(rest)) + sum(len(value) for value in verbatim.values())


_HEADERS = frozenset({"v", "id", "from", "to", "ts", *_BASE64_FIELDS})
_SHORT = 64
"""Headers of at most this many characters, or integers below 2**63, are "small"."""
_SMALL_HEADERS_BYTES = 4096
"""More than the canonical JSON of any set of small headers (about 2,000 bytes at most:
five fields of 64 characters written as \\uXXXX escapes, keys and quotes included)."""


def _small_headers(obj: dict[str, object]) -> bool:
    """Whether ``obj`` holds only known fields and every one that is not base64url is a
    short string or a 64-bit integer, so its serialisation is surely small."""
    if not obj.keys() <= _HEADERS:
        return False
    for key, value in obj.items():
        if key in _BASE64_FIELDS and isinstance(value, str):
            continue
        if isinstance(value, str):
            if len(value) > _SHORT:
                return False
        elif type(value) is not int or not -MAX_TS <= value <= MAX_TS:
            return False
    return True


def _id_field(obj: dict[str, object], name: str) -> str:
    value = obj.get(name)
    if not is_id(value):
        raise EnvelopeRefused(
            RefusalReason.MALFORMED, f"{name} must be 32 lowercase hex characters"
        )
    return str(value)


def _bytes_field(obj: dict[str, object], name: str) -> bytes:
    value = obj.get(name)
    if value is None:
        raise EnvelopeRefused(RefusalReason.MALFORMED, f"{name} is missing")
    try:
        return b64u_decode(value)  # type: ignore[arg-type]  # non-strings are refused inside
    except ProtocolError as exc:
        raise EnvelopeRefused(RefusalReason.MALFORMED, f"{name}: {exc}") from exc


def _ct_field(obj: dict[str, object]) -> bytes:
    if isinstance(obj, DecodedEnvelope) and obj.get("ct") is obj.ct_text:
        return obj.ct_bytes
    return _bytes_field(obj, "ct")


def _push_field(obj: dict[str, object]) -> str | None:
    push = obj.get("push")
    if push is None:
        return None
    if not isinstance(push, str) or len(push) > MAX_PUSH_CHARS:
        raise EnvelopeRefused(
            RefusalReason.MALFORMED, f"push must be at most {MAX_PUSH_CHARS} characters"
        )
    _bytes_field(obj, "push")
    return push


@dataclass(frozen=True)
class Unsealed:
    """An envelope from a peer, addressed to this party and decrypted, but not yet checked
    any further (:func:`accept` does): nothing in it may be trusted, not even that the
    peer sent it. Its plaintext is never logged."""

    envelope: Envelope
    info: bytes
    peer: PublicCard
    plaintext: bytes | None = field(repr=False)
    """None: the ciphertext does not open."""


def unseal(raw: object, *, me: Identity, peers: Mapping[str, PublicCard]) -> Unsealed:
    """Check rules 1 and 2 of §2 on an envelope from a peer, and decrypt it (rule 4 is
    :func:`accept`'s to judge, after the signature)."""
    envelope, info = _addressed(raw, me)
    peer = _peer(envelope, peers)
    return Unsealed(envelope, info, peer, _decrypt(envelope, info, me))


@dataclass(frozen=True)
class Checked:
    """The costly part of :func:`accept`, which may be done ahead and elsewhere (another
    process): an unsealed envelope's signature checked and its payload read in full, or
    the refusal met on the way."""

    outcome: Read | tuple[RefusalReason, str] = field(repr=False)
    """The payload read, or why the envelope is refused (a pair: it crosses processes)."""


def check(unsealed: Unsealed) -> Checked:
    """Rules 3 to 5 of §2 on an unsealed envelope (its signature, its ciphertext, its
    payload), as :func:`accept` applies them, reading the payload in full."""
    envelope = unsealed.envelope
    try:
        _check_signature(envelope, unsealed.info, unsealed.peer.sign_pub)
        return Checked(_read(envelope, _opened(envelope, unsealed.plaintext), {}))
    except EnvelopeRefused as refusal:
        return Checked((refusal.reason, refusal.detail))


def accept(
    unsealed: Unsealed,
    *,
    now_ms: int,
    replay: ReplayGuard,
    seen: Mapping[str, SeenSnapshot] | None = None,
    checked: Checked | None = None,
) -> Opened:
    """Apply the rest of §2's rules to an unsealed envelope, in order, and return what was
    opened (see :func:`open_envelope`).

    ``checked``: :func:`check` of this envelope done ahead (a payload read in full holds
    whatever ``seen`` would have spared reading); used only with ``seen``."""
    envelope = unsealed.envelope
    if checked is None or seen is None:
        _check_signature(envelope, unsealed.info, unsealed.peer.sign_pub)
        plaintext = _opened(envelope, unsealed.plaintext)
        read = _read(envelope, plaintext, seen)
    elif isinstance(checked.outcome, tuple):
        raise EnvelopeRefused(*checked.outcome)
    else:
        plaintext, read = _opened(envelope, unsealed.plaintext), checked.outcome
    return _checked(envelope, read, unsealed.peer, plaintext, now_ms, replay, seen)


def open_envelope(
    raw: object,
    *,
    me: Identity,
    peers: Mapping[str, PublicCard],
    now_ms: int,
    replay: ReplayGuard,
    accept_pair_requests: bool = False,
    seen: Mapping[str, SeenSnapshot] | None = None,
) -> Opened:
    """Apply every acceptance rule of §2, in order, and return what was opened.

    ``accept_pair_requests`` is the agent side of §5: a sender that is not a peer may
    still be accepted when its payload is a ``pair_request`` for its own id whose
    ``device.sign_pub`` verifies the signature. The replay set is only checked: the caller
    records the id in the same transaction that processes the payload.

    Rule 6 also refuses an envelope older than :data:`bot.protocol.replay.MAX_AGE_MS`
    (:attr:`RefusalReason.STALE`): the replay set forgets ids after 30 days, so an older
    envelope could otherwise be accepted a second time.
    """
    envelope, info = _addressed(raw, me)
    if envelope.sender in peers or not accept_pair_requests:
        # Checked before it is decrypted: a forged envelope costs no decryption.
        peer = _peer(envelope, peers)
        _check_signature(envelope, info, peer.sign_pub)
        plaintext = _opened(envelope, _decrypt(envelope, info, me))
        return _checked(envelope, _read(envelope, plaintext, seen), peer, plaintext, now_ms,
                        replay, seen)
    plaintext = _opened(envelope, _decrypt(envelope, info, me))
    read = _read(envelope, plaintext, seen)
    sender = _pairing_sender(envelope, info, read.payload)
    return _checked(envelope, read, sender, plaintext, now_ms, replay, seen)


def _addressed(raw: object, me: Identity) -> tuple[Envelope, bytes]:
    """Rule 1, and the recipient of rule 2: the envelope and its ``info``."""
    envelope = parse_envelope(raw)
    if envelope.recipient != me.id:
        raise EnvelopeRefused(RefusalReason.NOT_FOR_ME, f"addressed to {envelope.recipient}")
    return envelope, build_info(envelope.id, envelope.sender, envelope.recipient, envelope.ts)


def _peer(envelope: Envelope, peers: Mapping[str, PublicCard]) -> PublicCard:
    """Rule 2's sender."""
    peer = peers.get(envelope.sender)
    if peer is None:
        raise EnvelopeRefused(RefusalReason.UNKNOWN_SENDER, f"{envelope.sender} is not a peer")
    return peer


def _checked(
    envelope: Envelope,
    read: Read,
    sender: PublicCard,
    plaintext: bytes,
    now_ms: int,
    replay: ReplayGuard,
    seen: Mapping[str, SeenSnapshot] | None,
) -> Opened:
    """Rule 6 on an envelope whose payload was read."""
    if replay.seen(envelope.id):
        raise EnvelopeRefused(RefusalReason.REPLAY, f"envelope {envelope.id} already accepted")
    if envelope.ts > now_ms + MAX_FUTURE_SKEW_MS:
        raise EnvelopeRefused(
            RefusalReason.FROM_FUTURE, f"ts is {envelope.ts - now_ms} ms in the future"
        )
    if envelope.ts < now_ms - MAX_AGE_MS:
        raise EnvelopeRefused(RefusalReason.STALE, f"ts is {now_ms - envelope.ts} ms in the past")
    return Opened(envelope=envelope, payload=read.payload, sender=sender, plaintext=plaintext,
                  read=None if seen is None else read)


def _check_signature(envelope: Envelope, info: bytes, sign_pub: bytes) -> None:
    if not verify_signature(sign_pub, envelope.sig, _signed_bytes(info, envelope.ct)):
        raise EnvelopeRefused(
            RefusalReason.BAD_SIGNATURE, f"signature does not verify for {envelope.sender}"
        )


def _decrypt(envelope: Envelope, info: bytes, me: Identity) -> bytes | None:
    try:
        return _SUITE.decrypt(envelope.ct, me.kx_key, info=info)
    except (InvalidTag, ValueError):
        return None


def _opened(envelope: Envelope, plaintext: bytes | None) -> bytes:
    if plaintext is None:
        raise EnvelopeRefused(
            RefusalReason.DECRYPT_FAILED, f"ciphertext of {envelope.id} does not open"
        )
    return plaintext


def _read(
    envelope: Envelope, plaintext: bytes, seen: Mapping[str, SeenSnapshot] | None
) -> Read:
    try:
        if seen is None:
            return Read(parse_payload(plaintext))
        return read_payload(plaintext, seen.get(envelope.sender))
    except PayloadError as exc:
        # PayloadError messages describe shape and limits, never the plaintext itself.
        raise EnvelopeRefused(RefusalReason.BAD_PAYLOAD, str(exc)) from exc


def _pairing_sender(envelope: Envelope, info: bytes, payload: Payload) -> PublicCard:
    if not isinstance(payload, PairRequest):
        raise EnvelopeRefused(RefusalReason.UNKNOWN_SENDER, f"{envelope.sender} is not a peer")
    if payload.device.id != envelope.sender:
        raise EnvelopeRefused(
            RefusalReason.UNKNOWN_SENDER, "pair_request device.id differs from the sender"
        )
    try:
        card = device_public_card(payload.device)
    except ProtocolError as exc:
        raise EnvelopeRefused(RefusalReason.BAD_PAYLOAD, f"pair_request device: {exc}") from exc
    _check_signature(envelope, info, card.sign_pub)
    return card
