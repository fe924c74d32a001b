"""Reading an ``inbox_update`` against the sender's previous one (pure).

An agent sends its complete inbox on every change (§3.1). An inbox that grows one item at a
time to 1,000 sends half a million items in all, nearly every one the same, byte for byte,
as in the snapshot before. :func:`read_payload` walks the two outer levels of the payload
itself and checks each item's text against the item at that place in the sender's previous
snapshot, by length and hash: an unchanged item costs that comparison, not a parse. A list
that starts as the previous one did costs a comparison for each of the few spans it was
remembered in, and only what follows them is hashed to remember the new list. New and
changed items are decoded and parsed as usual.

What is accepted, and how a refusal reads, stays :func:`parse_payload`'s: a payload this
walk does not follow (another kind, a shape it does not expect, anything refused) is parsed
in full by it instead.

Snapshots that queued up behind each other need not each be read: :func:`snapshot_rev`
tells the revision of one without reading its items, so that one a later snapshot
supersedes can be left unread.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import re
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from json import decoder as json_decoder
from typing import Any, Generic, TypeVar

from bot.errors import PayloadError
from bot.protocol.encoding import JSON, decode_at, is_int
from bot.protocol.payloads import (
    MAX_INT,
    MAX_PAYLOAD_BYTES,
    PAYLOAD_VERSION,
    Approval,
    Clarification,
    Payload,
    check_item_count,
    inbox_update_around,
    parse_approval,
    parse_clarification,
    parse_payload,
)

WALKED_BYTES = 16 * 1024
"""Smaller payloads are parsed in full: that is cheaper than walking them."""
MAX_SPANS = 8
"""A list is remembered in at most this many spans: one more, and the next snapshot's list
is hashed whole again (for an inbox growing one item at a time, once in eight)."""
MAX_DEPTH = 64
"""The nesting :func:`bot.protocol.encoding.loads_limited` allows a whole payload."""

_Item = TypeVar("_Item", Approval, Clarification)
_scan_string: Callable[[str, int], tuple[str, int]] = json_decoder.scanstring  # type: ignore[attr-defined]  # the json module's own, untyped
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_BLANK = frozenset(" \t\n\r")
_LISTS = frozenset({"approvals", "clarifications"})
_REV = re.compile(rb'"rev"[ \t\n\r]*:[ \t\n\r]*([0-9]{1,19})')


def _numbers() -> array[int]:
    return array("q")


@dataclass(frozen=True)
class SeenList:
    """One list of a snapshot's items (its approvals or its clarifications), in order: each
    item's id, the length and hash of its JSON text, and where it ends from the first item's
    start; and the text from the first item's start to the last one's end as consecutive
    spans (the length and hash of each), so that a list the next snapshot starts with
    unchanged costs a comparison for each span. Never changed once made."""

    ids: tuple[str, ...] = ()
    lengths: array[int] = field(default_factory=_numbers)
    digests: array[int] = field(default_factory=_numbers)
    spans: tuple[tuple[int, int], ...] = ()
    ends: array[int] = field(default_factory=_numbers)


@dataclass(frozen=True)
class SeenSnapshot:
    """What is remembered of a sender's snapshot to read its next one.

    The hashes are Python's own, keyed afresh in every process, so a snapshot is only
    remembered in memory, never stored.
    """

    approvals: SeenList = field(default_factory=SeenList)
    clarifications: SeenList = field(default_factory=SeenList)

    def item_ids(self) -> tuple[str, ...]:
        """The ids of every item of the snapshot."""
        return self.approvals.ids + self.clarifications.ids


@dataclass(frozen=True)
class Layout:
    """Where the item lists of a snapshot that was walked lie in its text: for each list
    that holds items, where its first item starts and where each item ends from there."""

    text: str = field(repr=False)
    lists: Mapping[str, tuple[int, array[int]]]


@dataclass(frozen=True)
class Read:
    """A payload read with :func:`read_payload`."""

    payload: Payload = field(repr=False)
    seen: SeenSnapshot | None = field(default=None, repr=False)
    """What to remember of it to read the sender's next one; None when it was parsed in
    full (not an ``inbox_update``, or one the walk did not follow)."""
    texts: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The JSON text of each item parsed anew, by id (to store it without encoding it)."""
    layout: Layout | None = field(default=None, repr=False)
    """Where its items lie, when it was walked (for :func:`snapshot_rev`)."""


class _NotFollowed(Exception):
    """The walk leaves this payload to :func:`parse_payload`."""


@dataclass(frozen=True)
class _New(Generic[_Item]):
    """An item not in the previous snapshot, parsed as soon as it is found (its decoded
    JSON is let go at once: a first snapshot holds a thousand of them)."""

    item: _Item
    text: str
    digest: int


@dataclass
class _Walked(Generic[_Item]):
    """One item list as walked against the previous one (``before``): whether it starts
    with all of it unchanged (``same``), then each later item, new or the same as the
    item of ``before`` at an index, and where each of those ends from ``first``, where
    the list's first item starts; and the spans of its text."""

    before: SeenList
    same: bool
    rest: list[int | _New[_Item]]
    spans: tuple[tuple[int, int], ...]
    first: int = 0
    ends: array[int] = field(default_factory=_numbers)

    def count(self) -> int:
        return (len(self.before.ids) if self.same else 0) + len(self.rest)

    def unchanged(self) -> list[str]:
        ids = self.before.ids
        found = list(ids) if self.same else []
        found.extend(ids[entry] for entry in self.rest if isinstance(entry, int))
        return found


def read_payload(plaintext: bytes, previous: SeenSnapshot | None) -> Read:
    """Parse a decrypted payload as :func:`parse_payload` does; for an ``inbox_update``,
    skip the items ``previous`` (the sender's last snapshot) already holds unchanged.

    Raises :class:`PayloadError` exactly when :func:`parse_payload` would.
    """
    # Searched from the end: canonical JSON writes "kind" after "body".
    if len(plaintext) >= WALKED_BYTES and plaintext.rfind(b'"inbox_update"') >= 0:
        try:
            return _read_inbox_update(plaintext, previous or SeenSnapshot())
        except (_NotFollowed, PayloadError):
            pass
    return Read(parse_payload(plaintext))


def _read_inbox_update(plaintext: bytes, previous: SeenSnapshot) -> Read:
    if len(plaintext) > MAX_PAYLOAD_BYTES:
        raise _NotFollowed
    try:
        text = plaintext.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _NotFollowed from exc
    walk = _Walk(text, previous)
    pos = _skip(text, 0)
    payload, pos = walk.object(pos, 1, walk.top_member)
    if _skip(text, pos) != len(text):
        raise _NotFollowed
    version = payload.get("v")
    if payload.get("kind") != "inbox_update" or not is_int(version) \
            or version != PAYLOAD_VERSION or not walk.body_found:
        raise _NotFollowed
    body = payload["body"]
    approvals, clarifications = walk.approvals, walk.clarifications
    if (body.get("approvals") is not None and approvals is None) \
            or (body.get("clarifications") is not None and clarifications is None):
        raise _NotFollowed  # not a list: refused in full
    approvals = approvals or _Walked(SeenList(), False, [], ())
    clarifications = clarifications or _Walked(SeenList(), False, [], ())
    check_item_count(approvals.count() + clarifications.count())
    new_approvals, seen_approvals = _items(approvals)
    new_clarifications, seen_clarifications = _items(clarifications)
    unchanged = approvals.unchanged() + clarifications.unchanged()
    update = inbox_update_around(
        body,
        approvals=tuple(item for item, _ in new_approvals),
        clarifications=tuple(item for item, _ in new_clarifications),
        unchanged=tuple(unchanged),
    )
    texts = {item.id: text for item, text in new_approvals}
    texts.update((item.id, text) for item, text in new_clarifications)
    layout = Layout(text, {name: (walked.first, seen.ends) for name, walked, seen
                           in (("approvals", approvals, seen_approvals),
                               ("clarifications", clarifications, seen_clarifications))
                           if seen.ids})
    return Read(update, SeenSnapshot(seen_approvals, seen_clarifications), texts, layout)


def rev_hint(plaintext: bytes) -> int | None:
    """What looks like the ``rev`` of an ``inbox_update`` payload, found from its end (where
    canonical JSON writes it), or None. A guess for ordering, never to be relied on:
    :func:`snapshot_rev` tells."""
    if plaintext.rfind(b'"inbox_update"') < 0:
        return None
    at = plaintext.rfind(b'"rev"')
    found = _REV.match(plaintext, at) if at >= 0 else None
    return int(found[1]) if found else None


def snapshot_rev(plaintext: bytes, like: Layout | None = None) -> int | None:
    """The ``rev`` of a payload that reads as an ``inbox_update``, its kind, version and
    rev as :func:`parse_payload` reads them (a duplicate key: the last counts); None for
    any other payload, or one refused on those three. The rest of the payload is only
    checked to be JSON, not decoded, and whatever it holds besides may still be refused:
    this only tells a snapshot that a later one supersedes.

    ``like``, the layout of a snapshot whose items this one may start its lists with,
    saves most of even that: the payload's outer levels are walked, and where a list
    starts with the same text as that one's, item for item, that text is passed over
    unread. Items that are complete JSON values there are so here, so for a payload that
    can be parsed at all the answer is the same; for one that cannot, it does not matter.
    """
    if len(plaintext) > MAX_PAYLOAD_BYTES or plaintext.rfind(b'"inbox_update"') < 0:
        return None
    if like is not None:
        try:
            return _walked_rev(plaintext.decode("utf-8"), like)
        except (_NotFollowed, PayloadError, UnicodeDecodeError):
            pass  # a duplicate key, say: told by the decoder below
    decode, refusal = _probe_decoder()
    try:
        probe = decode(plaintext)
    except (refusal, RecursionError):
        return None
    return _rev_of(probe.kind, probe.v, None if probe.body is None else probe.body.rev)


def _walked_rev(text: str, like: Layout) -> int | None:
    walk = _SharedItems(text, like)
    payload, end = walk.object(_skip(text, 0), 1, walk.top_member)
    if _skip(text, end) != len(text):
        raise _NotFollowed
    body = payload.get("body")
    return _rev_of(payload.get("kind"), payload.get("v"),
                   body.get("rev") if isinstance(body, dict) else None)


def _rev_of(kind: object, version: object, rev: object) -> int | None:
    if kind != "inbox_update" or not is_int(version) or version != PAYLOAD_VERSION \
            or not is_int(rev) or not 0 <= rev <= MAX_INT:
        return None
    return rev


@functools.cache
def _probe_decoder() -> tuple[Callable[[bytes], Any], type[Exception]]:
    """A decoder of a payload's ``kind``, ``v`` and ``body.rev`` alone (every other member
    is skipped; a struct takes the last of duplicate keys, as a full parse does), and the
    error it raises: msgspec is loaded with the first snapshot to probe."""
    import msgspec.json

    body = msgspec.defstruct("Body", [("rev", object, None)])
    probe = msgspec.defstruct(
        "Probe", [("kind", object, None), ("v", object, None), ("body", body | None, None)])
    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(probe)
    return decoder.decode, msgspec.MsgspecError


def _items(walked: _Walked[_Item]) -> tuple[list[tuple[_Item, str]], SeenList]:
    """The new items (each with its text), and the list as it is remembered."""
    before = walked.before
    new: list[tuple[_Item, str]] = []
    if walked.same:
        ids, lengths, digests, ends = list(before.ids), array("q", before.lengths), \
            array("q", before.digests), array("q", before.ends)
    else:
        ids, lengths, digests, ends = [], array("q"), array("q"), array("q")
    ends.extend(walked.ends)
    for entry in walked.rest:
        if isinstance(entry, int):
            ids.append(before.ids[entry])
            lengths.append(before.lengths[entry])
            digests.append(before.digests[entry])
            continue
        item = entry.item
        new.append((item, entry.text))
        ids.append(item.id)
        lengths.append(len(entry.text))
        digests.append(entry.digest)
    return new, SeenList(tuple(ids), lengths, digests, walked.spans, ends)


class _Walk:
    """The walk over one payload's text: its object, its body, and the body's item lists."""

    def __init__(self, text: str, previous: SeenSnapshot) -> None:
        self.text = text
        self.previous = previous
        self.body_found = False
        self.approvals: _Walked[Approval] | None = None
        self.clarifications: _Walked[Clarification] | None = None
        """The body's item lists, once found."""

    def object(
        self, pos: int, depth: int, member: Callable[[str, int, int], tuple[JSON, int]]
    ) -> tuple[dict[str, JSON], int]:
        """The object at ``pos`` (at nesting ``depth``), each value read by ``member``."""
        text = self.text
        if not text.startswith("{", pos):
            raise _NotFollowed
        members: dict[str, JSON] = {}
        pos = _skip(text, pos + 1)
        if text.startswith("}", pos):
            return members, pos + 1
        while True:
            key, pos = _key_at(text, pos)
            if key in members:
                raise _NotFollowed  # a duplicate key: the last one counts, as parsed in full
            pos = _skip(text, pos)
            if not text.startswith(":", pos):
                raise _NotFollowed
            members[key], pos = member(key, _skip(text, pos + 1), depth)
            pos = _skip(text, pos)
            if text.startswith("}", pos):
                return members, pos + 1
            if not text.startswith(",", pos):
                raise _NotFollowed
            pos = _skip(text, pos + 1)

    def top_member(self, key: str, pos: int, depth: int) -> tuple[JSON, int]:
        if key != "body" or not self.text.startswith("{", pos):
            return self.value(key, pos, depth)
        self.body_found = True
        return self.object(pos, depth + 1, self.body_member)

    def body_member(self, name: str, pos: int, depth: int) -> tuple[JSON, int]:
        if name not in _LISTS or not self.text.startswith("[", pos):
            return self.value(name, pos, depth)
        return self.item_list(name, pos, depth + 1)

    def item_list(self, name: str, pos: int, depth: int) -> tuple[JSON, int]:
        """The list ``name`` of the body, walked; an empty list in its place."""
        if name == "approvals":
            self.approvals, end = self.items(pos, depth, self.previous.approvals,
                                             parse_approval)
        else:
            self.clarifications, end = self.items(pos, depth, self.previous.clarifications,
                                                  parse_clarification)
        return [], end

    def value(self, key: str, pos: int, depth: int) -> tuple[JSON, int]:
        return decode_at(self.text, pos, max_depth=MAX_DEPTH - depth)

    def items(
        self, pos: int, depth: int, before: SeenList, parse: Callable[[JSON], _Item]
    ) -> tuple[_Walked[_Item], int]:
        """The list of items at ``pos``: the whole of ``before`` if it starts unchanged,
        then each item the same text as an item of ``before`` (tried first at its place,
        after the item matched last) or new (parsed with ``parse``)."""
        text = self.text
        first = pos = _skip(text, pos + 1)
        last = first
        rest: list[int | _New[_Item]] = []
        ends = array("q")
        if text.startswith("]", pos):
            return _Walked(before, False, rest, ()), pos + 1
        count = len(before.ids)
        expected, same = 0, False
        if count and (past := _past_spans(text, pos, before.spans)) is not None:
            expected, same = count, True
            pos = last = past
            if not text.startswith(",", pos):
                pos = _skip(text, pos)
            if text.startswith("]", pos):
                return _Walked(before, True, rest, before.spans, first), pos + 1
            if not text.startswith(",", pos):
                raise _NotFollowed
            pos = _skip(text, pos + 1)
        lengths, digests = before.lengths, before.digests
        by_text: dict[tuple[int, int], int] | None = None
        while True:
            entry: int | _New[_Item] | None = None
            if expected < count:
                end = pos + lengths[expected]
                if end <= len(text) and hash(text[pos:end]) == digests[expected]:
                    entry = expected
            if entry is None:
                value, end = decode_at(text, pos, max_depth=MAX_DEPTH - depth)
                piece = text[pos:end]
                digest = hash(piece)
                if expected < count:
                    if by_text is None:
                        by_text = {key: i for i, key
                                   in enumerate(zip(lengths, digests, strict=True))}
                    entry = by_text.get((end - pos, digest))
                if entry is None:
                    entry = _New(parse(value), piece, digest)
            if isinstance(entry, int):
                expected = entry + 1
            rest.append(entry)
            ends.append(end - first)
            last = end
            after = text[end:end + 1]
            if after in _BLANK:
                end = _skip(text, end)
                after = text[end:end + 1]
            if after == "]":
                spans = _spans(text, first, last, before, same)
                return _Walked(before, same, rest, spans, first, ends), end + 1
            if after != ",":
                raise _NotFollowed
            pos = end + 1
            if text[pos:pos + 1] in _BLANK:
                pos = _skip(text, pos)


class _SharedItems(_Walk):
    """The walk of a payload's outer levels that passes over the items each list shares
    with the snapshot of a layout, text for text from its start, and checks the others to
    be JSON."""

    def __init__(self, text: str, like: Layout) -> None:
        super().__init__(text, SeenSnapshot())
        self.like = like

    def item_list(self, name: str, pos: int, depth: int) -> tuple[JSON, int]:
        text = self.text
        pos = _skip(text, pos + 1)
        if (shared := self.like.lists.get(name)) is not None \
                and (count := _shared_items(text, pos, self.like.text, *shared)):
            pos = _skip(text, pos + shared[1][count - 1])
            if not text.startswith(",", pos):
                return self._list_end(pos)
            pos = _skip(text, pos + 1)
        elif text.startswith("]", pos):
            return [], pos + 1
        while True:
            _, pos = decode_at(text, pos, max_depth=MAX_DEPTH - depth)
            pos = _skip(text, pos)
            if not text.startswith(",", pos):
                return self._list_end(pos)
            pos = _skip(text, pos + 1)

    def _list_end(self, pos: int) -> tuple[JSON, int]:
        if not self.text.startswith("]", pos):
            raise _NotFollowed
        return [], pos + 1


def _shared_items(text: str, at: int, other: str, first: int, ends: array[int]) -> int:
    """How many items of the list whose items start at ``first`` in ``other`` (and end at
    each of ``ends`` from there) the text at ``at`` starts with, as far as a guess and then
    a binary search find: the guess is that both texts end alike after the list."""
    tail = len(other) - first - ends[-1]
    low, high = 0, bisect.bisect_right(ends, len(text) - at - tail)
    count = high
    while low < high:
        if text.startswith(other[first:first + ends[count - 1]], at):
            low = count
        else:
            high = count - 1
        count = (low + high + 1) // 2
    return low


def _past_spans(text: str, pos: int, spans: tuple[tuple[int, int], ...]) -> int | None:
    """Where the text at ``pos`` ends if it continues as ``spans``; None if it does not."""
    for length, digest in spans:
        end = pos + length
        if hash(text[pos:end]) != digest:
            return None
        pos = end
    return pos


def _spans(
    text: str, first: int, last: int, before: SeenList, same: bool
) -> tuple[tuple[int, int], ...]:
    """The spans of a list's text ``text[first:last]``: those of ``before``, which it starts
    with when ``same``, and one for the rest; or else (or when that would be too many) one
    for the whole."""
    if same and len(before.spans) < MAX_SPANS:
        start = first + sum(length for length, _ in before.spans)
        return (*before.spans, (last - start, hash(text[start:last])))
    return ((last - first, hash(text[first:last])),)


def _key_at(text: str, pos: int) -> tuple[str, int]:
    """The member name at ``pos``, and where it ends. Names that are not plain ASCII are
    left to the full parse (which refuses lone surrogates in them)."""
    if not text.startswith('"', pos):
        raise _NotFollowed
    try:
        key, end = _scan_string(text, pos + 1)
    except ValueError as exc:
        raise _NotFollowed from exc
    if not key.isascii():
        raise _NotFollowed
    return key, end


def _skip(text: str, pos: int) -> int:
    """Past the JSON whitespace at ``pos``."""
    if text[pos:pos + 1] not in _BLANK:
        return pos
    match = _WHITESPACE.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def held_bytes(seen: SeenSnapshot | None) -> int:
    """How much of a snapshot's text its items took."""
    if seen is None:
        return 0
    return sum(length for part in (seen.approvals, seen.clarifications)
               for length, _ in part.spans)


def rehashed(read: Read) -> Read:
    """``read``, made in another process, remembered with this process's hashes (a str's
    hash is keyed afresh in every process): read in full next time when nothing says where
    its items lie."""
    seen, layout = read.seen, read.layout
    if seen is None:
        return read
    lists = (("approvals", seen.approvals), ("clarifications", seen.clarifications))
    if layout is None or any(part.ids and name not in layout.lists for name, part in lists):
        return dataclasses.replace(read, seen=None)
    return dataclasses.replace(read, seen=SeenSnapshot(
        *(_rehashed(layout, name, part) for name, part in lists)))


def _rehashed(layout: Layout, name: str, seen: SeenList) -> SeenList:
    if not seen.ids:
        return seen
    first, text = layout.lists[name][0], layout.text
    digests = array("q", (hash(text[first + end - length:first + end])
                          for length, end in zip(seen.lengths, seen.ends, strict=True)))
    spans, pos = [], first
    for length, _ in seen.spans:
        spans.append((length, hash(text[pos:pos + length])))
        pos += length
    return SeenList(seen.ids, seen.lengths, digests, tuple(spans), seen.ends)
