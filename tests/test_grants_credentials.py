"""Credentials written into commands and text: found in one place, then never granted and
masked on the card (title, blocks, attachment), in the summary activity lines and the
audit trail are built from, and in what the host keeps."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.agenthost.describe import credential_blocks
from bot.agenthost.grants import script_offer
from bot.agenthost.service import AgentHost
from bot.agenthost.store import AgentStore
from bot.integrations.describe import ToolCall, describe, secrets_in
from bot.integrations.grants import Programs, hook_scope
from bot.integrations.hook import command_table
from bot.protocol.identity import Identity
from bot.protocol.payloads import parse_approval
from bot.render import Renderer
from bot.render.credentials import credentials_in, holds_credential, mask_credentials
from bot.render.masking import MASK

CASES = [
    # (text, the credential's value, the text masked)
    ("curl -u ada:hunter2 https://example.com", "hunter2",
     f"curl -u ada:{MASK} https://example.com"),
    ("curl -sSu ada:hunter2 https://example.com", "hunter2",
     f"curl -sSu ada:{MASK} https://example.com"),
    ("curl -uada:hunter2 https://example.com", "hunter2", f"curl -uada:{MASK} https://example.com"),
    ("curl --user 'ada:pass word' x", "pass word", f"curl --user 'ada:{MASK} x"),
    ("curl --user=ada:s3cret x", "s3cret", f"curl --user=ada:{MASK} x"),
    ("curl --proxy-user ada:s3cret x", "s3cret", f"curl --proxy-user ada:{MASK} x"),
    ("curl -b 'session=abc123' https://x", "session=abc123", f"curl -b {MASK} https://x"),
    ("git clone https://ada:s3cr3t@github.com/o/r", "s3cr3t",
     f"git clone https://ada:{MASK}@github.com/o/r"),
    ("git push https://x-access-token:tok123@github.com/o/r", "tok123",
     f"git push https://x-access-token:{MASK}@github.com/o/r"),
    ("pip install -i https://user:p%40ss@pypi.example/simple x", "p%40ss",
     f"pip install -i https://user:{MASK}@pypi.example/simple x"),
    ("git clone https://sometoken@github.com/o/r", "sometoken",
     f"git clone https://{MASK}@github.com/o/r"),
    ("psql postgres://app:pw-42@db:5432/x", "pw-42", f"psql postgres://app:{MASK}@db:5432/x"),
    ("curl -H 'Authorization: Bearer abc.def' x", "Bearer abc.def",
     f"curl -H 'Authorization: {MASK}' x"),
    ("curl -H \"Cookie: sid=1; k=2\" x", "sid=1; k=2", f"curl -H \"Cookie: {MASK}\" x"),
    ("curl -H 'PRIVATE-TOKEN: glx' x", "glx", f"curl -H 'PRIVATE-TOKEN: {MASK}' x"),
    ("tool --password=hunter2 x", "hunter2", f"tool --password={MASK} x"),
    ("tool --api-key abc123 x", "abc123", f"tool --api-key {MASK} x"),
    ("gh --oauth2-bearer tok x", "tok", f"gh --oauth2-bearer {MASK} x"),
    ("GITHUB_TOKEN=ghs1 gh pr list", "ghs1", f"GITHUB_TOKEN={MASK} gh pr list"),
    ("AWS_SECRET_ACCESS_KEY='a b' aws s3 ls", "a b", f"AWS_SECRET_ACCESS_KEY={MASK} aws s3 ls"),
    ("SSHPASS=pw sshpass -e ssh h", "pw", f"SSHPASS={MASK} sshpass -e ssh h"),
    ("sshpass -p pw ssh h", "pw", f"sshpass -p {MASK} ssh h"),
    ("mysql -u root -psecret db", "secret", f"mysql -u root -p{MASK} db"),
    ("echo ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123",
     f"echo {MASK}"),
    ("x AKIAABCDEFGHIJKLMNOP y", "AKIAABCDEFGHIJKLMNOP", f"x {MASK} y"),
    ("slack xoxb-123456-abcdef", "xoxb-123456-abcdef", f"slack {MASK}"),
]
NOT_CREDENTIALS = [
    "git status -s", "curl https://example.com/a@b", "ssh git@github.com", "git log -u HEAD:src",
    "docker login --password-stdin -u ada", "tool --token-file ~/.tok x", "curl -b jar.txt x",
    "bypass=1", "see https://example.com/user:pass", "ls -la", "grep -r password src",
]


@pytest.mark.parametrize(("text", "value", "masked"), CASES)
def test_a_credential_is_found_and_masked(text: str, value: str, masked: str) -> None:
    assert value in [c.value for c in credentials_in(text)]
    assert mask_credentials(text) == masked
    assert holds_credential({"command": [text]})


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_ordinary_commands_hold_none(text: str) -> None:
    assert credentials_in(text) == [] and mask_credentials(text) == text


def test_a_private_key_block_is_one_credential() -> None:
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\nNzaC1\n-----END OPENSSH PRIVATE KEY-----"
    assert mask_credentials(f"echo '{key}' > k") == f"echo '{MASK}' > k"


PROGRAMS = Programs(command_table(), lambda name: f"/usr/bin/{name}")


@pytest.mark.parametrize(("text", "value", "_masked"), CASES)
def test_describe_makes_each_a_secret_masks_the_summary_and_offers_no_grant(
        text: str, value: str, _masked: str) -> None:
    call = ToolCall("Claude Code", "Bash", {"command": text}, cwd="/work/project")
    described = describe(call, lambda path: None)
    # A header's ``<scheme> <token>`` is one secret row, its token's.
    scheme, _, token = value.partition(" ")
    row = token if token and scheme.lower() in {"bearer", "basic", "token"} else value
    assert [b["value"] for b in described.blocks if b["value_type"] == "secret"].count(row) == 1
    assert value not in described.summary and MASK in described.summary
    assert hook_scope(call, "s1", PROGRAMS) is None
    assert value in [found for _key, found in secrets_in(call.arguments)]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[AgentHost]:
    store = AgentStore(tmp_path / "agent")
    yield AgentHost(store, Identity.generate("laptop"), "ws://127.0.0.1:9/v1/connect")
    store.close()


def test_the_host_masks_what_a_script_sends_and_offers_no_grant(host: AgentHost) -> None:
    command = "curl -u ada:hunter2 -H 'Authorization: Bearer tok-987' https://example.com"
    item = host.submit_approval(
        tool="Bash", summary=f"run: {command}", arguments={"command": command},
        blocks=[{"type": "block", "label": "Command", "value": command,
                 "value_type": "command"}],
        timeout_s=600, grant=script_offer("curl", "curl"))
    assert "grant_offer" not in item.wire
    assert "hunter2" not in item.summary and "tok-987" not in item.summary
    secrets = [b["value"] for b in item.wire["blocks"]["blocks"] if b["value_type"] == "secret"]
    assert {"hunter2", "tok-987"} <= set(secrets)

    card = Renderer().approval_card(parse_approval(item.wire), agent_name="laptop",
                                    secrets="masked", now=datetime.now(UTC))
    shown = [card.html, card.plain, Renderer().title(parse_approval(item.wire))]
    if card.attachment is not None:
        shown.append(card.attachment.content.decode())
    for text in shown:
        assert "hunter2" not in text and "tok-987" not in text


def test_credential_blocks_add_only_what_no_secret_block_holds() -> None:
    blocks = [{"type": "key_value", "key": "password", "value": "hunter2",
               "value_type": "secret"}]
    assert credential_blocks("curl -u ada:hunter2 x", blocks, {}) == []
    rows = credential_blocks("run", [], {"env": {"url": "https://a:b-c@h"}})
    assert rows == [{"type": "key_value", "key": "URL password", "value": "b-c",
                     "value_type": "secret"}]
    assert credential_blocks(f"curl -u ada:{MASK} https://a:{MASK}@h", [], {}) == []
