"""The key file: private to its owner (0600) from creation, refused when it is not."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.errors import IdentityError
from bot.keyfile import load_identity, load_or_create_identity, save_identity
from bot.protocol.identity import Identity


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def test_save_writes_0600_in_a_0700_folder(tmp_path: Path, permissive_umask: None) -> None:
    path = tmp_path / "state" / "keys" / "device.json"
    identity = Identity.generate("bot")
    save_identity(path, identity)
    assert _mode(path) == 0o600
    assert _mode(path.parent) == 0o700
    assert load_identity(path) == identity
    assert [p.name for p in path.parent.iterdir()] == ["device.json"]  # no temp file left


def test_saved_file_holds_the_private_json(tmp_path: Path) -> None:
    path = tmp_path / "device.json"
    identity = Identity.generate("bot")
    save_identity(path, identity)
    assert json.loads(path.read_text()) == identity.to_private_json()


def test_save_replaces_an_existing_file_and_keeps_it_private(tmp_path: Path) -> None:
    path = tmp_path / "device.json"
    path.write_text("old")
    path.chmod(0o644)
    identity = Identity.generate("bot")
    save_identity(path, identity)
    assert _mode(path) == 0o600
    assert load_identity(path).id == identity.id


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_load_refuses_a_readable_file_and_says_how_to_fix_it(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "device.json"
    save_identity(path, Identity.generate("bot"))
    path.chmod(mode)
    with pytest.raises(IdentityError) as refused:
        load_identity(path)
    assert str(path) in str(refused.value)
    assert f"chmod 600 {path}" in str(refused.value)


def test_load_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(IdentityError, match="no key file"):
        load_identity(tmp_path / "absent.json")


@pytest.mark.parametrize(
    "content",
    [b"", b"not json", b"\xff\xfe", b"[]", b'{"name": "x"}', b"{" * 100_000],
)
def test_load_refuses_malformed_content(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "device.json"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(IdentityError, match="malformed"):
        load_identity(path)


def test_load_refuses_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "device.json"
    folder.mkdir(mode=0o700)
    with pytest.raises(IdentityError):
        load_identity(folder)


def test_load_or_create_creates_once_then_loads(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "device.json"
    first = load_or_create_identity(path, "bot")
    assert _mode(path) == 0o600
    second = load_or_create_identity(path, "bot")
    assert second == first and second.name == "bot"


def test_load_or_create_follows_a_new_name(tmp_path: Path) -> None:
    path = tmp_path / "device.json"
    first = load_or_create_identity(path, "old")
    renamed = load_or_create_identity(path, "new")
    assert renamed.id == first.id and renamed.name == "new"
    assert load_identity(path).name == "new"


def test_load_or_create_does_not_overwrite_a_readable_file(tmp_path: Path) -> None:
    path = tmp_path / "device.json"
    identity = load_or_create_identity(path, "bot")
    path.chmod(0o644)
    with pytest.raises(IdentityError, match="chmod 600"):
        load_or_create_identity(path, "bot")
    path.chmod(0o600)
    assert load_identity(path).id == identity.id
