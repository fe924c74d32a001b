"""Raw arguments shown without blocks: a value under a credential-named key is masked in
every chat type (card, plain fallback, attached file and the ``render`` command), and
wherever else the approval repeats it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.cli import main
from bot.protocol.payloads import Approval
from bot.render import Renderer, SecretsMode
from bot.render.credentials import is_credential_key
from bot.render.values import hide_credentials

NOW = datetime(2025, 11, 29, 10, 1, tzinfo=UTC)
RENDERER = Renderer()
TOKEN = "ghp_Q7mZ2xV9kL4pR8sT1wY6"

CASES = [
    {"api_key": TOKEN},
    {"apiKey": TOKEN},
    {"GITHUB_TOKEN": TOKEN},
    {"password": TOKEN},
    {"X-Authorization": "Bearer " + TOKEN},
    {"headers": {"Authorization": TOKEN}},
    {"servers": [{"name": "a", "client_secret": TOKEN}]},
    {"private_key": {"pem": TOKEN, "kind": "rsa"}},
    {"credentials": [TOKEN, "other-value-123"]},
    {"session_id": TOKEN},
    {"cookie": "sid=" + TOKEN},
    {"db": {"passwd": TOKEN}, "note": "the pass is " + TOKEN},
]


@pytest.mark.parametrize("secrets", ["spoiler", "masked"])
@pytest.mark.parametrize("arguments", CASES, ids=lambda a: next(iter(a)))
def test_credential_named_arguments_are_masked_in_every_chat_type(
    arguments: dict[str, object], secrets: SecretsMode
) -> None:
    item = Approval("apr_c", "deploy", "deploy with " + TOKEN, (), arguments)
    rendered = RENDERER.approval_card(item, agent_name="bot", secrets=secrets, now=NOW)
    assert TOKEN not in rendered.html and TOKEN not in rendered.plain
    assert "••••••" in rendered.html
    assert "deploy with ••••••" in rendered.plain  # the title repeats it: masked too


def test_attachment_of_long_arguments_masks_them_too() -> None:
    arguments = {"token": TOKEN, "log": ("line " + TOKEN + "\n") * 3000}
    item = Approval("apr_c", "deploy", "go", (), arguments)
    rendered = RENDERER.approval_card(item, agent_name="bot", secrets="spoiler", now=NOW)
    assert rendered.attachment is not None
    assert TOKEN not in rendered.attachment.content.decode()


def test_other_arguments_and_empty_credentials_stay_as_they_are() -> None:
    shown, hidden = hide_credentials({"name": "a", "password": "", "token": None,
                                      "list": [{"pin": 1234}], "tokenizer": "bpe"})
    assert shown == {"name": "a", "password": "", "token": None, "list": [{"pin": "••••••"}],
                     "tokenizer": "bpe"}
    assert hidden == ["1234"]


def test_blocks_given_leave_the_arguments_unshown_and_unchanged() -> None:
    item = Approval("apr_c", "t", "s", (), None)
    rendered = RENDERER.approval_card(item, agent_name="bot", secrets="spoiler", now=NOW)
    assert "Arguments" not in rendered.html


def test_one_definition_of_credential_named() -> None:
    from bot.agenthost import describe as host_describe
    from bot.integrations import describe as hook_describe

    assert host_describe.is_credential_key is is_credential_key
    assert hook_describe.is_credential_key is is_credential_key


@pytest.mark.parametrize("chat_type", ["private", "group"])
def test_render_command_masks_credential_named_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], chat_type: str
) -> None:
    file = tmp_path / "a.json"
    file.write_text(json.dumps({"id": "apr_c", "tool": "deploy", "summary": "deploy",
                                "arguments": {"env": "prod", "api_key": TOKEN}}), "utf-8")
    assert main(["render", str(file), "--chat-type", chat_type]) == 0
    out = capsys.readouterr().out
    assert TOKEN not in out and "&quot;api_key&quot;: &quot;••••••&quot;" in out
