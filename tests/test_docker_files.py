"""The Docker files keep secrets out of images and off the network by default."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_build_context_holds_only_what_the_image_copies() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "an allow-list: nothing enters the context unless named"
    allowed = {line[1:] for line in lines if line.startswith("!")}
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = {part for args in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile, re.M)
              for part in args.split()}
    assert allowed == copied
    assert not allowed & {"skald-telegram.toml", ".env", ".venv", "state", "secrets"}


def test_compose_publishes_the_relay_on_loopback_and_reads_the_token_from_a_file() -> None:
    compose = (ROOT / "compose.yaml").read_text()
    ports = re.findall(r'^\s+- "([^"]*:\d+)"$', compose, re.M)
    assert ports and all(port.startswith("127.0.0.1:") for port in ports), ports
    assert "TLS" in compose
    assert "TELEGRAM_BOT_TOKEN_FILE: /run/secrets/" in compose
    assert "TELEGRAM_BOT_TOKEN:" not in compose
