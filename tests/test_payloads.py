"""Payload parsing and encoding (protocol §3, §5, §6) and the JSON/time encodings under it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.errors import PayloadError
from bot.protocol.encoding import (
    FAST_JSON_BYTES,
    _loads_strict,
    args_sha256,
    canonical_json,
    format_rfc3339,
    loads_limited,
    parse_rfc3339,
)
from bot.protocol.payloads import (
    MAX_ITEMS,
    MAX_VALUE_CHARS,
    Approval,
    ApprovalDecision,
    Block,
    Clarification,
    ClarificationAnswer,
    DeviceCard,
    InboxRequest,
    InboxUpdate,
    Notification,
    PairAccept,
    PairRequest,
    Payload,
    Person,
    ResolvedItem,
    UnknownPayload,
    encode_payload,
    item_to_wire,
    parse_approval,
    parse_clarification,
    parse_inbox_update,
    parse_payload,
    raw_payload,
)

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "vectors.json").read_text(encoding="utf-8")
)
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _approval(**fields: Any) -> dict[str, Any]:
    return {"id": "apr_1", "tool": "send_email", "summary": "Send it", **fields}


def _update(**fields: Any) -> dict[str, Any]:
    return {"rev": 1, "agent": {"name": "build-bot"}, **fields}


def _payload(kind: str, body: Any) -> bytes:
    return json.dumps({"kind": kind, "v": 1, "body": body}).encode()


# -- JSON and time encodings ------------------------------------------------------------


def test_canonical_json_sorts_keys_and_keeps_utf8() -> None:
    assert canonical_json({"b": [1, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'.encode()
    assert args_sha256(None) == args_sha256(json.loads("null"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"x" * 101, "larger than 100 bytes"),
        ("é" * 51, "larger than 100 bytes"),
        (b"\xff", "not valid UTF-8"),
        (b'"\xed\xa0\x80"', "not valid UTF-8"),
        ("[" * 45 + "]" * 45, "nested deeper than 40"),
        (b"NaN", "NaN is not allowed"),
        (b"[-Infinity]", "-Infinity is not allowed"),
        (b"1e999", "overflows"),
        (b"{", "invalid JSON"),
        (b"", "invalid JSON"),
        (b"\xef\xbb\xbf{}", "invalid JSON"),
        ("\ud800", "surrogates"),
    ],
)
def test_loads_limited_refuses_hostile_json(data: bytes | str, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        loads_limited(data, max_bytes=100, max_depth=40)


@pytest.mark.parametrize(
    "text",
    [
        r'"\ud800"',
        r'["ok", "x\udfff"]',
        r'{"\uD83D": 1}',
        r'"\ude00\ud83d"',
        r'{"a": {"b": ["\udbff"]}}',
    ],
)
def test_loads_limited_refuses_lone_surrogate_escapes(text: str) -> None:
    # json.loads accepts them, but no UTF-8 can carry them: the digest, the store and
    # Telegram would all fail later, and the envelope would be redelivered forever.
    for data in (text, text.encode()):
        with pytest.raises(PayloadError, match="lone surrogate in JSON string"):
            loads_limited(data, max_bytes=100)


def test_loads_limited_keeps_surrogate_pairs_and_escaped_backslashes() -> None:
    assert loads_limited(r'"\ud83d\ude00"', max_bytes=100) == "😀"
    assert loads_limited(r'"\\ud800"', max_bytes=100) == "\\ud800"


def test_payload_with_a_lone_surrogate_is_refused_whole() -> None:
    body = json.dumps(_update(approvals=[_approval(arguments={"to": "\ud800"})]))
    assert "\\ud800" in body
    with pytest.raises(PayloadError, match="lone surrogate"):
        parse_payload(('{"kind": "inbox_update", "v": 1, "body": ' + body + "}").encode())


def test_loads_limited_ignores_brackets_inside_strings() -> None:
    text = json.dumps({"a": "[" * 500, "b": ['\\"{{{{' * 50]})
    assert loads_limited(text, max_bytes=10_000)["a"] == "[" * 500


def test_loads_limited_allows_exactly_max_depth() -> None:
    for text in ("[" * 64 + "]" * 64, '{"a":' * 64 + "1" + "}" * 64):
        for padding in ("", " " * FAST_JSON_BYTES):  # both decoders
            assert loads_limited(text + padding, max_bytes=100_000) == json.loads(text)


@pytest.mark.parametrize("depth", [65, 999, 1000, 5000])
def test_loads_limited_refuses_deep_nesting_at_any_depth(depth: int) -> None:
    # The fast decoder takes up to 999 levels and refuses more itself: refused alike.
    for text in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
        for padding in ("", " " * FAST_JSON_BYTES):  # both decoders
            with pytest.raises(PayloadError, match="nested deeper than 64 levels"):
                loads_limited(text + padding, max_bytes=100_000)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**18)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)
_JSON_TEXTS = st.one_of(
    st.builds(lambda value, indent, ascii_only: json.dumps(value, indent=indent,
                                                          ensure_ascii=ascii_only),
              _JSON_VALUES, st.none() | st.integers(0, 2), st.booleans()),
    # Near-JSON: escapes, surrogates, numbers, control characters, BOMs, stray commas.
    st.text(alphabet=' \t\n\r\x0c[]{}":,-+.0123456789eEuUdD\\/tfalsenrN\ufeffé\x01\ud83d',
            max_size=40),
)


@settings(max_examples=400, deadline=None)
@given(text=_JSON_TEXTS, as_bytes=st.booleans())
def test_loads_limited_takes_and_refuses_what_the_standard_library_path_does(
    text: str, as_bytes: bool,
) -> None:
    # The fast decoder (for large texts: trailing blanks make these large) must change
    # nothing but the speed: the same values, and every refusal with the message of the
    # standard library path.
    text += " " * FAST_JSON_BYTES
    data: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    try:
        expected: Any = _loads_strict(text.encode("utf-8", "surrogatepass"), 64)
    except PayloadError as exc:
        expected = exc
    try:
        got: Any = loads_limited(data, max_bytes=100_000)
    except PayloadError as exc:
        got = exc
    if isinstance(expected, PayloadError):
        if not as_bytes and isinstance(got, PayloadError) and "surrogates" in str(got):
            return  # text that UTF-8 cannot carry is refused before any decoding
        assert isinstance(got, PayloadError) and str(got) == str(expected)
    else:
        assert not isinstance(got, PayloadError)
        assert json.dumps(got, sort_keys=True) == json.dumps(expected, sort_keys=True)


def test_loads_limited_refuses_huge_integers() -> None:
    with pytest.raises(PayloadError):
        loads_limited("9" * 5000, max_bytes=10_000)


def test_rfc3339_format_and_parse() -> None:
    assert format_rfc3339(datetime(2026, 11, 29, 10, 3, 12, tzinfo=UTC)) == "2026-11-29T10:03:12Z"
    cet = timezone(timedelta(hours=1))
    assert format_rfc3339(datetime(2026, 11, 29, 11, 3, 12, 500000, tzinfo=cet)) == (
        "2026-11-29T10:03:12.5Z"
    )
    assert parse_rfc3339("2025-11-29T22:00:00+01:00") == datetime(2025, 11, 29, 21, tzinfo=UTC)
    assert parse_rfc3339("2025-11-29T10:00:00Z") == datetime(2025, 11, 29, 10, tzinfo=UTC)
    for bad in (None, 5, "", "yesterday", "2025-11-29", "2025-11-29T10:00:00", "9" * 100):
        assert parse_rfc3339(bad) is None
    with pytest.raises(ValueError):
        format_rfc3339(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "text",
    [
        "9999-12-31T23:59:59-05:00",
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59Z",
        "9001-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "1970-01-01T00:00:00+00:01",
    ],
)
def test_rfc3339_out_of_range_is_absent(text: str) -> None:
    # Such times overflow in astimezone(), timestamp() or a few days' arithmetic.
    assert parse_rfc3339(text) is None


def test_rfc3339_is_returned_in_utc_and_safe_to_shift() -> None:
    for text in ("9000-12-31T18:59:59-05:00", "1970-01-01T00:00:00Z", "2025-11-29T22:00+14:00"):
        parsed = parse_rfc3339(text)
        assert parsed is not None and parsed.utcoffset() == timedelta(0)
        assert parsed.tzinfo is UTC
        for moment in (parsed + timedelta(days=30), parsed - timedelta(days=30)):
            assert moment.timestamp() == parsed.timestamp() + (moment - parsed).total_seconds()


def test_out_of_range_times_leave_an_item_that_encodes_and_renders() -> None:
    item = parse_approval(
        _approval(created_at="0001-01-01T00:00:00+05:00", expires_at="9999-12-31T23:59:59-05:00")
    )
    assert item.created_at is None and item.expires_at is None
    wire = item_to_wire(item)
    assert "created_at" not in wire and "expires_at" not in wire


# -- inbox_update: leniency ---------------------------------------------------------------


def test_blocks_object_bare_list_absent_null_and_empty() -> None:
    block = {"type": "key_value", "key": "To", "value": "a@b.c", "value_type": "email"}
    expected = (Block(type="key_value", label="To", value="a@b.c", value_type="email"),)
    assert parse_approval(_approval(blocks={"v": 1, "blocks": [block]})).blocks == expected
    assert parse_approval(_approval(blocks=[block])).blocks == expected
    empties: list[Any] = [{}, {"blocks": None}, {"blocks": []}, [], None]
    for empty in empties:
        assert parse_approval(_approval(blocks=empty)).blocks == ()
    assert parse_approval(_approval()).blocks == ()


def test_block_values_types_labels_are_kept_leniently() -> None:
    blocks = [
        {"type": "carousel", "label": "Future", "value": {"x": [1]}, "value_type": "hologram"},
        {"type": "field", "value": 3, "value_type": "number"},
        {"type": "key_value", "label": "only a label", "value": True},
        {"value": None, "extra": "ignored"},
        {"type": 5, "label": 7, "value_type": ["x"]},
    ]
    parsed = parse_approval(_approval(blocks=blocks)).blocks
    assert parsed == (
        Block("carousel", "Future", {"x": [1]}, "hologram"),
        Block("field", "", 3, "number"),
        Block("key_value", "only a label", True, ""),
        Block("", "", None, ""),
        Block("", "", None, ""),
    )


def test_long_text_value_is_cut_on_a_code_point_boundary() -> None:
    value = "a" + "😀" * (MAX_VALUE_CHARS + 9)
    (block,) = parse_approval(_approval(blocks=[{"type": "block", "value": value}])).blocks
    assert len(block.value) == MAX_VALUE_CHARS
    assert block.value == value[:MAX_VALUE_CHARS]
    assert block.truncated_chars == 10
    block.value.encode("utf-8")  # no half a character anywhere


def test_long_json_value_becomes_cut_text() -> None:
    value = {"items": ["x" * 1000] * 300}
    (block,) = parse_approval(_approval(blocks=[{"type": "block", "value": value}])).blocks
    assert isinstance(block.value, str) and len(block.value) == MAX_VALUE_CHARS
    assert block.truncated_chars == len(json.dumps(value)) - MAX_VALUE_CHARS


def test_value_at_the_limit_is_untouched() -> None:
    value = "x" * MAX_VALUE_CHARS
    (block,) = parse_approval(_approval(blocks=[{"type": "block", "value": value}])).blocks
    assert (block.value, block.truncated_chars) == (value, 0)


def test_times_unknown_fields_and_arguments() -> None:
    approval = parse_approval(
        _approval(
            created_at="2026-11-29T10:00:00Z",
            expires_at="soon",
            future_field={"a": 1},
        )
    )
    assert approval.created_at == T0 and approval.expires_at is None
    assert approval.arguments is None
    assert parse_approval(_approval(arguments=[1, 2])).arguments == [1, 2]


def test_clarification_options() -> None:
    assert parse_clarification({"id": "c", "question": "Q?"}).options == ()
    assert parse_clarification({"id": "c", "question": "Q?", "options": None}).options == ()
    assert parse_clarification({"id": "c", "question": "Q?", "options": ["a", "b"]}) == (
        Clarification(id="c", question="Q?", options=("a", "b"))
    )


def test_the_largest_sqlite_integer_is_a_valid_rev() -> None:
    assert parse_inbox_update({"rev": 2**63 - 1}).rev == 2**63 - 1


def test_update_defaults_and_resolved() -> None:
    update = parse_inbox_update(
        {
            "rev": 0,
            "resolved": [
                {"id": "a", "outcome": "approved", "by": "iPhone", "at": "2026-11-29T10:00:00Z"},
                {"id": "b", "outcome": "vanished", "by": 5},
            ],
        }
    )
    assert update == InboxUpdate(
        rev=0,
        agent_name="",
        resolved=(
            ResolvedItem("a", "approved", "iPhone", T0),
            ResolvedItem("b", "vanished", None, None),
        ),
    )


# -- inbox_update: strictness -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "inbox_update must be a JSON object"),
        ({}, "rev must be an integer from 0 to 2"),
        (_update(rev=-1), "rev must be"),
        # Beyond SQLite's signed 64 bits: refused here, not an OverflowError in the store.
        (_update(rev=2**63), "rev must be"),
        (_update(rev=2**64), "rev must be"),
        (_update(rev="1"), "rev must be"),
        (_update(rev=True), "rev must be"),
        (_update(agent="bot"), "agent must be a JSON object"),
        (_update(agent={"name": 1}), "agent.name must be a string"),
        (_update(approvals={}), "approvals must be a list"),
        (_update(approvals=[_approval(), 5]), r"approvals\[1\]: approval must be"),
        (_update(approvals=[_approval(id=None)]), r"approvals\[0\]: approval: id must be"),
        (_update(approvals=[_approval(tool=1)]), "tool must be a string"),
        (_update(approvals=[_approval(summary=[])]), "summary must be a string"),
        (_update(approvals=[_approval(blocks="text")]), "blocks must be a list"),
        (_update(approvals=[_approval(blocks=[1])]), r"blocks\[0\] must be a JSON object"),
        (_update(clarifications=[{"id": "c"}]), r"clarifications\[0\]: .*question"),
        (_update(clarifications=[{"id": "c", "question": "q", "options": "a"}]), "options"),
        (_update(clarifications=[{"id": "c", "question": "q", "options": [1]}]), "options"),
        (_update(resolved=[{"id": "x"}]), r"resolved\[0\]: .*outcome"),
        (_update(approvals=[_approval(), _approval()]), r"approvals\[1\]: duplicate item id"),
        (
            _update(approvals=[_approval(id="x")], clarifications=[{"id": "x", "question": "q"}]),
            r"clarifications\[0\]: duplicate",
        ),
    ],
)
def test_malformed_update_is_rejected_naming_the_problem(body: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        parse_inbox_update(body)


def test_item_limit_counts_approvals_and_clarifications() -> None:
    approvals = [_approval(id=f"a{i}") for i in range(MAX_ITEMS - 1)]
    clarification = {"id": "c", "question": "q"}
    ok = parse_inbox_update(_update(approvals=approvals, clarifications=[clarification]))
    assert len(ok.approvals) + len(ok.clarifications) == MAX_ITEMS
    with pytest.raises(PayloadError, match="at most 1000"):
        parse_inbox_update(_update(approvals=approvals, clarifications=[clarification] * 2))


def test_ten_thousand_approvals_are_rejected() -> None:
    body = _update(approvals=[_approval(id=f"a{i}") for i in range(10_000)])
    with pytest.raises(PayloadError, match="10000 approvals"):
        parse_payload(_payload("inbox_update", body))


# -- parse_payload --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[]", "must be a JSON object"),
        (b'{"v": 1, "body": {}}', "kind must be a string"),
        (b'{"kind": "notification", "body": {}}', "unsupported payload version"),
        (b'{"kind": "notification", "v": 2, "body": {}}', "unsupported payload version"),
        (b'{"kind": "notification", "v": 1}', "notification must be a JSON object"),
        (b'{"kind": "notification", "v": 1, "body": {"item_id": "x"}}', "category"),
        (b"\xc3\x28", "not valid UTF-8"),
        (b"[" * 100_000, "nested deeper"),
        (b'{"kind": "inbox_update", "v": 1, "body": ' + b"[" * 100_000 + b"}", "nested deeper"),
        (b"x" * (2 << 20), "larger than"),
    ],
)
def test_parse_payload_refuses_bad_input(data: bytes, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        parse_payload(data)


def test_unknown_kind_is_returned_not_refused() -> None:
    assert parse_payload(b'{"kind": "hologram_sync", "v": 7}') == UnknownPayload("hologram_sync")


@pytest.mark.parametrize(
    ("kind", "body", "message"),
    [
        ("approval_decision", {"decision": "maybe"}, "decision must be approve or deny"),
        (
            "approval_decision",
            {
                "decision": "approve",
                "decision_id": "d",
                "approval_id": "a",
                "decided_by": {"name": "A", "telegram_user_id": True},
                "decided_at": "t",
                "args_sha256": "x",
            },
            "telegram_user_id",
        ),
        ("clarification_answer", {"answer_id": "a"}, "clarification_id"),
        ("inbox_request", {"since_rev": "4"}, "since_rev"),
        ("inbox_request", {"since_rev": 2**63}, "since_rev"),
        ("pair_request", {"device": {"id": "x"}, "proof": "p"}, "sign_pub"),
        ("pair_accept", {"agent": {"id": "x"}, "device_id": "d"}, "name"),
    ],
)
def test_other_kinds_check_required_fields(kind: str, body: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        parse_payload(_payload(kind, body))


# -- encoding -------------------------------------------------------------------------------


PERSON = Person(name="Ada Lovelace", telegram_user_id=4242, username="ada")
EVERY_KIND: list[Payload] = [
    InboxUpdate(
        rev=7,
        agent_name="build-bot",
        approvals=(
            Approval(
                id="a",
                tool="t",
                summary="s",
                blocks=(
                    Block("key_value", "K", "v", "string"),
                    Block("block", "Diff", "-a\n+b", "diff"),
                ),
                arguments={"x": 1},
                created_at=T0,
                expires_at=T0 + timedelta(minutes=5),
            ),
            Approval(id="b", tool="t", summary="s", blocks=(), arguments=None),
        ),
        clarifications=(Clarification(id="c", question="q?", options=("x",), created_at=T0),),
        resolved=(ResolvedItem("z", "expired", None, T0),),
    ),
    Notification(item_id="a", category="approval", title="build-bot", body="s"),
    ApprovalDecision(
        decision_id="d",
        approval_id="a",
        decision="deny",
        reason=None,
        decided_by=PERSON,
        decided_at="2026-11-29T10:03:12Z",
        args_sha256="h",
    ),
    ClarificationAnswer(
        answer_id="n",
        clarification_id="c",
        answer="x",
        answered_by=Person(name="Ada"),
        answered_at="2026-11-29T10:03:12Z",
    ),
    InboxRequest(since_rev=None),
    InboxRequest(since_rev=41),
    PairRequest(device=DeviceCard(id="i", sign_pub="s", kx_pub="k", name="n"), proof="p"),
    PairAccept(agent_id="a", agent_name="n", device_id="d"),
    UnknownPayload(kind="hologram_sync"),
]


@pytest.mark.parametrize("payload", EVERY_KIND, ids=lambda p: type(p).__name__)
def test_every_kind_round_trips(payload: Payload) -> None:
    data = encode_payload(payload)
    assert json.loads(data)["v"] == 1
    assert parse_payload(data) == payload


def test_round_trip_keeps_arguments() -> None:
    update = EVERY_KIND[0]
    assert isinstance(update, InboxUpdate)
    parsed = parse_payload(encode_payload(update))
    assert isinstance(parsed, InboxUpdate)
    assert [a.arguments for a in parsed.approvals] == [{"x": 1}, None]


def test_wire_field_names_follow_the_spec() -> None:
    decision = json.loads(encode_payload(EVERY_KIND[2]))
    assert decision == {
        "kind": "approval_decision",
        "v": 1,
        "body": {
            "decision_id": "d",
            "approval_id": "a",
            "decision": "deny",
            "reason": None,
            "decided_by": {"name": "Ada Lovelace", "telegram_user_id": 4242, "username": "ada"},
            "decided_at": "2026-11-29T10:03:12Z",
            "args_sha256": "h",
        },
    }
    answer = json.loads(encode_payload(EVERY_KIND[3]))
    assert answer["body"]["answered_by"] == {"name": "Ada"}
    update = json.loads(encode_payload(EVERY_KIND[0]))["body"]
    first = update["approvals"][0]
    assert first["blocks"]["blocks"][0] == {
        "type": "key_value",
        "key": "K",
        "value": "v",
        "value_type": "string",
    }
    assert first["blocks"]["blocks"][1]["label"] == "Diff"
    assert first["expires_at"] == "2026-11-29T10:05:00Z"
    assert "blocks" not in update["approvals"][1]


@pytest.mark.parametrize(
    "vector",
    [v for v in VECTORS["open"] if v["payload"]["kind"] != "inbox_update"],
    ids=lambda v: v["note"],
)
def test_simple_vector_payloads_encode_back_exactly(vector: dict[str, Any]) -> None:
    payload = parse_payload(canonical_json(vector["payload"]))
    if isinstance(payload, UnknownPayload):
        return  # an unknown body is not kept, by design
    assert json.loads(encode_payload(payload)) == vector["payload"]


def test_raw_payload_sends_any_body() -> None:
    data = raw_payload("inbox_update", _update(approvals=[_approval(blocks=[{"value": 1}])]))
    parsed = parse_payload(data)
    assert isinstance(parsed, InboxUpdate)
    assert parsed.approvals[0].blocks == (Block("", "", 1, ""),)


def test_items_round_trip_through_their_wire_form() -> None:
    long_value = "x" * (MAX_VALUE_CHARS + 5)
    approval = parse_approval(
        _approval(
            blocks=[{"type": "block", "label": "Body", "value": long_value}],
            arguments={"a": [1]},
            created_at="2026-11-29T10:00:00Z",
        )
    )
    assert approval.blocks[0].truncated_chars == 5
    again = parse_approval(json.loads(json.dumps(item_to_wire(approval))))
    assert again == approval and again.arguments == {"a": [1]}
    question = parse_clarification({"id": "c", "question": "q", "options": ["a"]})
    assert parse_clarification(item_to_wire(question)) == question


# -- the spec's edit fields (§3.1 editable, §3.3 edited arguments) ---------------------------


def test_an_approval_lists_the_keys_a_person_may_edit() -> None:
    approval = parse_approval(_approval(arguments={"command": "ls", "timeout": 5},
                                        editable=["command"]))
    assert approval.editable == ("command",)
    assert item_to_wire(approval)["editable"] == ["command"]
    assert "editable" not in item_to_wire(parse_approval(_approval()))


@pytest.mark.parametrize(("editable", "arguments", "message"), [
    (["command"] * 2, {"command": "ls"}, "duplicate"),
    ([f"k{i}" for i in range(17)], {f"k{i}": 1 for i in range(17)}, "at most 16"),
    (["other"], {"command": "ls"}, "editable lists a key"),
    (["command"], None, "editable lists a key"),
    ([1], {"command": "ls"}, "editable must be strings"),
    ("command", {"command": "ls"}, "editable must be a list"),
])
def test_a_bad_editable_list_refuses_the_approval(
        editable: Any, arguments: Any, message: str) -> None:
    with pytest.raises(PayloadError, match=message) as refused:
        parse_approval(_approval(arguments=arguments, editable=editable))
    assert "secret" not in str(refused.value)


def _edited(**fields: Any) -> bytes:
    body = {"decision_id": "d", "approval_id": "a", "decision": "approve", "reason": None,
            "decided_by": {"name": "Ada"}, "decided_at": "2026-11-29T10:03:12Z",
            "args_sha256": "h", **fields}
    return _payload("approval_decision", body)


def test_an_edited_decision_carries_the_arguments_and_their_digest() -> None:
    edited = {"command": "ls -la"}
    decision = parse_payload(_edited(arguments=edited, edited_sha256=args_sha256(edited)))
    assert isinstance(decision, ApprovalDecision)
    assert decision.arguments == edited and decision.edited_sha256 == args_sha256(edited)
    assert parse_payload(encode_payload(decision)) == decision
    assert json.loads(encode_payload(decision))["body"]["arguments"] == edited
    assert "arguments" not in json.loads(encode_payload(EVERY_KIND[2]))["body"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"arguments": {"command": "secret"}}, "edited_sha256"),
    ({"edited_sha256": "x"}, "edited_sha256"),
    ({"arguments": ["secret"], "edited_sha256": args_sha256(["secret"])}, "JSON object"),
    ({"arguments": {"command": "secret"}, "edited_sha256": args_sha256({})}, "not the digest"),
    ({"decision": "deny", "arguments": {"c": "secret"},
      "edited_sha256": args_sha256({"c": "secret"})}, "a deny never carries arguments"),
    ({"grant": {"key": "k", "minutes": 5}, "arguments": {"c": "secret"},
      "edited_sha256": args_sha256({"c": "secret"})}, "never carries a grant"),
])
def test_an_edit_that_breaks_the_rules_is_refused_without_its_values(
        fields: dict[str, Any], message: str) -> None:
    with pytest.raises(PayloadError, match=message) as refused:
        parse_payload(_edited(**fields))
    assert "secret" not in str(refused.value)
