"""The agent host's TCP API answers only requests addressed to it by a loopback name or its
``--listen`` address, with the port: a page whose name an attacker points at 127.0.0.1
(DNS rebinding) is refused before its token is even looked at. Real ``agent serve``
processes, real HTTP requests written byte by byte."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from agenthost_world import TcpHost, serve_tcp

from skald_telegram.client import SOCKET_NAME


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TcpHost]:
    yield from serve_tcp(tmp_path_factory.mktemp("host-loopback"), "127.0.0.1:0")


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TcpHost]:
    """Listening on another loopback address, as a configured ``--listen`` would."""
    yield from serve_tcp(tmp_path_factory.mktemp("host-configured"), "127.0.0.2:0")


def _get(host: TcpHost, headers: list[tuple[str, str]], *,
         unix: bool = False) -> tuple[int, dict[str, Any]]:
    lines = ["GET /v1/status HTTP/1.1", *(f"{name}: {value}" for name, value in headers),
             "Connection: close", "", ""]
    family = socket.AF_UNIX if unix else socket.AF_INET
    target = str(host.state / SOCKET_NAME) if unix else (host.address, host.port)
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(target)
        client.sendall("\r\n".join(lines).encode("latin-1"))
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    json_body = b"content-type: application/json" in head.lower()
    return int(head.split()[1]), json.loads(body) if json_body else {"text": body.decode()}


def _refused_hosts(port: int) -> list[str]:
    return [
        f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}",
        "127.0.0.1", "localhost", "[::1]", f"127.0.0.1:{port + 1}", f"localhost:{port}0",
        f"127.1:{port}", f"2130706433:{port}", f"0.0.0.0:{port}", f"localhost.:{port}",
        f"127.0.0.1:{port}@evil.example", f"evil.example#127.0.0.1:{port}",
        f"[::ffff:127.0.0.1]:{port}", f" 127.0.0.1:{port}x", f"127.0.0.2:{port}",
        f"sub.localhost:{port}", f"127.0.0.1:0{port}",
    ]


def test_a_loopback_name_with_the_port_is_answered(loopback: TcpHost) -> None:
    bearer = ("Authorization", f"Bearer {loopback.token}")
    for name in ("127.0.0.1", "localhost", "LocalHost", "[::1]"):
        status, _ = _get(loopback, [("Host", f"{name}:{loopback.port}"), bearer])
        assert status == 200, name


def test_any_other_host_is_refused_before_the_token(loopback: TcpHost) -> None:
    bearer = ("Authorization", f"Bearer {loopback.token}")
    for name in _refused_hosts(loopback.port):
        for headers in ([("Host", name), bearer], [("Host", name)]):
            status, body = _get(loopback, headers)
            assert status == 421, name
            assert body["field"] == "Host" and "must name this listener" in body["error"]
            assert "agent" not in body and loopback.token not in json.dumps(body)


def test_no_host_or_two_hosts_are_refused(loopback: TcpHost) -> None:
    bearer = ("Authorization", f"Bearer {loopback.token}")
    good = ("Host", f"127.0.0.1:{loopback.port}")
    for headers in ([good, ("Host", "evil.example"), bearer],
                    [("Host", "evil.example"), good, bearer],
                    [good, good, bearer]):
        status, _ = _get(loopback, headers)
        assert status in (400, 421), headers


def test_the_right_host_still_needs_the_token(loopback: TcpHost) -> None:
    good = ("Host", f"localhost:{loopback.port}")
    for headers in ([good], [good, ("Authorization", "Bearer nope")],
                    [good, ("Authorization", loopback.token)]):
        status, body = _get(loopback, headers)
        assert status == 401 and body["field"] == "Authorization"


def test_the_configured_address_is_answered_too(configured: TcpHost) -> None:
    assert configured.address == "127.0.0.2"
    bearer = ("Authorization", f"Bearer {configured.token}")
    for name in ("127.0.0.2", "127.0.0.1", "localhost"):
        status, _ = _get(configured, [("Host", f"{name}:{configured.port}"), bearer])
        assert status == 200, name
    status, _ = _get(configured, [("Host", f"127.0.0.3:{configured.port}"), bearer])
    assert status == 421


def test_the_unix_socket_asks_for_neither(loopback: TcpHost) -> None:
    for headers in ([("Host", "evil.example")], [("Host", "localhost")]):
        status, body = _get(loopback, headers, unix=True)
        assert status == 200 and body, headers
    assert os.stat(loopback.state / SOCKET_NAME).st_mode & 0o777 == 0o600
