"""The local API against its OpenAPI document: the document lists exactly the app's
routes, and schemathesis fuzzes a real host process over TCP from the document (nothing a
client sends may produce a 5xx or an answer the document does not describe)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
import yaml
from agenthost_world import serve_tcp
from hypothesis import HealthCheck, settings
from starlette.routing import Route

from bot.agenthost.api import create_app
from bot.agenthost.serve import _tcp_socket, _unix_socket

OPENAPI = Path(__file__).resolve().parent.parent / "docs" / "api" / "openapi.yaml"
schema = schemathesis.openapi.from_path(OPENAPI)


def test_the_document_lists_exactly_the_apps_routes() -> None:
    document = yaml.safe_load(OPENAPI.read_text(encoding="utf-8"))
    documented = {
        (path, method.upper())
        for path, operations in document["paths"].items()
        for method in operations
    }
    app = create_app(None)  # type: ignore[arg-type]  # routes only: no request is served
    served = {
        (route.path, method)
        for route in app.app.routes  # type: ignore[attr-defined]
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert documented == served


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A host over TCP (and its token). No relay listens: the API works all the same."""
    state = tmp_path_factory.mktemp("fuzzed-host")
    for host in serve_tcp(state, "127.0.0.1:0"):
        assert oct((state / "api-token").stat().st_mode & 0o777) == "0o600"
        yield f"http://127.0.0.1:{host.port}", {"Authorization": f"Bearer {host.token}"}


def test_the_sockets_take_connections_before_the_banner(tmp_path: Path) -> None:
    """The banner is printed before the server accepts: a client that connects as soon as
    it reads it must wait in the backlog, not be refused."""
    for sock, family, address in (
        (_tcp_socket("127.0.0.1:0"), socket.AF_INET, None),
        (_unix_socket(tmp_path / "agent.sock"), socket.AF_UNIX, str(tmp_path / "agent.sock")),
    ):
        with sock, socket.socket(family, socket.SOCK_STREAM) as client:
            client.connect(address or sock.getsockname())


def test_tcp_needs_the_token(host: tuple[str, dict[str, str]]) -> None:
    url, headers = host
    refused = httpx.get(f"{url}/v1/status")
    assert refused.status_code == 401
    assert refused.json() == {"error": "missing or wrong bearer token", "field": "Authorization"}
    wrong = httpx.get(f"{url}/v1/status", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert httpx.get(f"{url}/v1/status", headers=headers).status_code == 200


@pytest.mark.parametrize(("body", "field"), [
    (b"{not json", "body"),
    (b"[]", "body"),
    (b'{"arguments": {}}', "tool"),
    (b'{"tool": "   "}', "tool"),
    (b'{"tool": "x", "arguments": [1]}', "arguments"),
    (b'{"tool": "x", "timeout": 0}', "timeout"),
    (b'{"tool": "x", "timeout": "5"}', "timeout"),
    (b'{"tool": "x", "timeout": 1e9}', "timeout"),
    (b'{"tool": "x", "blocks": "row"}', "blocks"),
    (b'{"tool": "x", "summary": 3}', "summary"),
])
def test_bad_approvals_name_the_field(
    host: tuple[str, dict[str, str]], body: bytes, field: str
) -> None:
    url, headers = host
    response = httpx.post(f"{url}/v1/approvals", content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["field"] == field


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_fuzzed_from_the_document(case: schemathesis.Case,
                                  host: tuple[str, dict[str, str]]) -> None:
    url, headers = host
    if case.query and isinstance(case.query.get("wait"), int | float):
        case.query["wait"] = min(case.query["wait"], 0.2)  # a long poll would only wait
    case.call_and_validate(base_url=url, headers=headers)
