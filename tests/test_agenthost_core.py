"""The agent host's pure parts (describing arguments, items, judging pairings), the
client's errors and ``ask``'s command line, without a running host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agenthost_world import run_cli
from hypothesis import given
from hypothesis import strategies as st

from bot.agenthost import items as it
from bot.agenthost.describe import default_summary, describe_arguments
from bot.agenthost.pairing import Accept, PairingSecret, Reject, judge, reject_allowed
from bot.protocol.encoding import args_sha256
from bot.protocol.identity import Identity
from bot.protocol.pairing import PairingUri, build_pair_request
from bot.protocol.payloads import ApprovalDecision, Person, parse_approval
from bot.render.credentials import is_credential_key
from skald_telegram import AgentClient, HostUnavailable, Outcome, default_state_dir


def test_arguments_become_seed_blocks_by_shape_and_type() -> None:
    blocks = describe_arguments({
        "to": "mario@acme.com",
        "site": "https://acme.com/q3",
        "file": "/etc/hosts",
        "count": "3",
        "dry_run": True,
        "when": "2026-11-29T10:00:00Z",
        "body": "line one\nline two",
        "headers": {"X-Api-Key": "abc123", "accept": "json"},
        "GITHUB_TOKEN": "ghp_secret",
        "note": "hello",
    })
    kinds = {b.get("key") or b.get("label"): (b["type"], b["value_type"]) for b in blocks}
    assert kinds == {
        "to": ("key_value", "email"),
        "site": ("key_value", "url"),
        "file": ("key_value", "path"),
        "count": ("key_value", "number"),
        "dry_run": ("key_value", "boolean"),
        "when": ("key_value", "datetime"),
        "body": ("block", "text"),
        "headers": ("block", "json"),
        "headers.X-Api-Key": ("key_value", "secret"),
        "GITHUB_TOKEN": ("key_value", "secret"),
        "note": ("key_value", "string"),
    }


@pytest.mark.parametrize(("key", "credential"), [
    ("password", True), ("apiKey", True), ("api_key", True), ("Authorization", True),
    ("private_key", True), ("client_secret", True), ("session_id", True),
    ("author", False), ("path", False), ("subject", False), ("keyboard", False),
])
def test_credential_names(key: str, credential: bool) -> None:
    assert is_credential_key(key) is credential


def test_default_summary_names_the_first_argument_and_hides_credentials() -> None:
    assert default_summary("deploy", {"env": "production", "x": 1}) == "deploy(production)"
    assert default_summary("login", {"password": "hunter2"}) == "login(•••)"
    assert default_summary("noop", {}) == "noop()"
    assert len(default_summary("echo", {"text": "x" * 500})) < 80


@given(st.dictionaries(st.text(max_size=20), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=200), lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=10), inner, max_size=3), max_leaves=8), max_size=6))
def test_any_arguments_describe_into_a_valid_approval(arguments: dict[str, object]) -> None:
    blocks = describe_arguments(arguments)
    wire = it.approval_wire("apr_x", tool="t", summary=default_summary("t", arguments),
                            blocks=blocks, arguments=arguments, created_ms=0, expires_ms=1)
    assert parse_approval(wire).arguments == arguments


def _item() -> it.Item:
    arguments = {"a": 1}
    return it.Item(item_id="apr_1", kind=it.Kind.APPROVAL, wire={"id": "apr_1"},
                   args_sha256=args_sha256(arguments), created_ms=0, expires_ms=1000)


def _decision(decision: str = "approve", arguments: object = None) -> ApprovalDecision:
    return ApprovalDecision(
        decision_id="d1", approval_id="apr_1", decision=decision, reason=None,
        decided_by=Person(name="Ada"), decided_at="2026-11-29T10:03:12Z",
        args_sha256=args_sha256({"a": 1} if arguments is None else arguments))


def test_an_item_ends_once() -> None:
    item = _item()
    assert isinstance(it.decide(item, _decision(arguments={"a": 2}), 5), it.Refused)
    approved = it.decide(item, _decision(), 5)
    assert isinstance(approved, it.Item) and approved.state is it.State.APPROVED
    assert it.decide(approved, _decision("deny"), 6) == it.Refused("already approved")
    assert it.end(approved, it.State.WITHDRAWN, 7) is None
    assert it.due([item], 999) == [] and it.due([item], 1000) == [item]
    withdrawn = it.end(item, it.State.WITHDRAWN, 7)
    assert withdrawn is not None
    body = it.inbox_body(3, "host", [], [it.Ended.of(withdrawn)])
    assert body["resolved"] == [{"id": "apr_1", "outcome": "cancelled", "by": None,
                                 "at": "1970-01-01T00:00:00.007Z"}]


def test_judging_pairings() -> None:
    agent = Identity.generate("agent")
    device = Identity.generate("device")
    secret = os.urandom(16)
    uri = PairingUri(relay="ws://r", agent=agent.card, secret=secret)
    request = build_pair_request(device, uri, device_name="d")
    fresh = PairingSecret("p1", secret, created_ms=0, expires_ms=100)
    assert judge(request, agent.id, [fresh], 50) == Accept(fresh)
    assert judge(request, agent.id, [fresh], 100) == Reject("expired")
    used_by_other = PairingSecret("p1", secret, 0, 100, used_ms=10, device_id="other")
    assert judge(request, agent.id, [used_by_other], 50) == Reject("used")
    used_by_it = PairingSecret("p1", secret, 0, 100, used_ms=10, device_id=device.id)
    assert judge(request, agent.id, [used_by_it], 50) == Accept(used_by_it)
    other = PairingSecret("p2", os.urandom(16), 0, 100)
    assert judge(request, agent.id, [other], 50) == Reject("bad_proof")
    assert judge(request, agent.id, [], 50) == Reject("unknown")
    assert reject_allowed(None, 0) and not reject_allowed(1000, 1999) and reject_allowed(0, 1000)


def test_outcome_and_default_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Outcome("apr_1", "approved").approved
    assert not Outcome("apr_1", "denied").approved
    monkeypatch.setenv("SKALD_AGENT_STATE", str(tmp_path))
    assert default_state_dir() == tmp_path
    monkeypatch.delenv("SKALD_AGENT_STATE")
    monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
    assert default_state_dir() == Path("/xdg/skald-telegram/agent")


def test_no_host_is_one_line_saying_how_to_start_it(tmp_path: Path) -> None:
    with AgentClient(tmp_path) as client, pytest.raises(HostUnavailable) as caught:
        client.status()
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith(f"start it with: skald-telegram agent serve --state {tmp_path}")


@pytest.mark.parametrize("args", [
    ["ask"],
    ["ask", "--bogus"],
    ["ask", "--tool"],
    ["ask", "--tool", "x", "--timeout", "soon"],
    ["ask", "--tool", "x", "--timeout", "-1"],
    ["ask", "--tool", "x", "--arg", "novalue"],
    ["ask", "--tool", "x", "--args-json", "[1]"],
    ["ask", "--tool", "x", "--args-json", "{bad"],
    ["ask", "--tool", "x", "--blocks-json", "@/nonexistent/file.json"],
    ["ask", "--tool", "x", "--question", "both?"],
    ["ask", "--question", "q?", "--arg", "a=b"],
    ["ask", "--tool", "x"],  # no host running
])
async def test_ask_bad_input_exits_3_with_one_line(args: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "SKALD_AGENT_STATE": str(tmp_path / "none")}
    result = await run_cli(*args, env=env)
    assert result.code == 3, result
    assert result.out == ""
    assert len(result.err.strip().splitlines()) == 1, result.err
    assert result.err.startswith("skald-telegram ask: ")


async def test_serve_refuses_what_it_cannot_run_with_one_line(tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o755)
    open_folder.chmod(0o755)
    cases = [
        (["--state", str(open_folder), "--relay", "ws://127.0.0.1:9/v1/connect"],
         "fix it with: chmod 700"),
        (["--state", str(tmp_path / "new")], "the first start needs the relay"),
        (["--state", str(tmp_path / "new"), "--relay", "http://relay"], "not a relay URL"),
        (["--state", str(tmp_path / "new"), "--relay", "ws://127.0.0.1:9/v1/connect",
          "--listen", "nowhere"], "--listen must be HOST:PORT"),
    ]
    for args, message in cases:
        result = await run_cli("agent", "serve", *args)
        assert result.code == 1, result
        last = result.err.strip().splitlines()[-1]
        assert last.startswith("skald-telegram: ") and message in last, result.err
    assert oct((tmp_path / "new").stat().st_mode & 0o777) == "0o700"
