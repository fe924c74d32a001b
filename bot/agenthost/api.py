"""The agent host's local HTTP API (``docs/api/openapi.yaml``) as a Starlette app.

Requests are checked field by field; anything wrong gets a 4xx with
``{"error": "...", "field": "..."}``. Over TCP every request needs the bearer token and a
``Host`` header naming the listener; over the Unix socket, whose file only its owner can
open, neither is asked for.
"""

from __future__ import annotations

import hmac
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bot.agenthost import grants as gr
from bot.agenthost.service import MAX_TIMEOUT_S, AgentHost, Refusal
from bot.errors import PayloadError, SkaldError
from bot.protocol.encoding import loads_limited
from bot.protocol.payloads import MAX_EDITABLE_KEYS

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 512 * 1024
MAX_WAIT_S: Final = 300.0
MAX_TOOL_CHARS: Final = 200
MAX_SUMMARY_CHARS: Final = 2000
MAX_QUESTION_CHARS: Final = 4000
MAX_OPTIONS: Final = 20
MAX_OPTION_CHARS: Final = 64
MAX_GRANT_CHARS: Final = 200
"""The longest key or label a caller may name for a grant."""
DEFAULT_TIMEOUT_S: Final = 600.0

Handler = Callable[[Request], Awaitable[Response]]


def error(status: int, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "field": field}, status_code=status)


def _guarded(handler: Handler) -> Handler:
    """Turn refusals into 4xx answers and store failures into 503."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except Refusal as exc:
            return error(exc.status, str(exc), exc.field)
        except SkaldError as exc:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
            return error(503, f"the host cannot do that now: {exc}")

    return guarded


async def _body(request: Request) -> dict[str, Any]:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise Refusal(413, f"the request body must be at most {MAX_BODY_BYTES} bytes", "body")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > MAX_BODY_BYTES:
            raise Refusal(413, f"the request body must be at most {MAX_BODY_BYTES} bytes",
                          "body")
    try:
        body = loads_limited(bytes(data), max_bytes=MAX_BODY_BYTES)
    except PayloadError as exc:
        raise Refusal(400, f"the request body is not valid JSON: {exc}", "body") from exc
    if not isinstance(body, dict):
        raise Refusal(400, "the request body must be a JSON object", "body")
    return body


def _text(body: dict[str, Any], name: str, limit: int, *, required: bool) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise Refusal(400, f"{name} must be a non-empty string", name)
    if len(value) > limit:
        raise Refusal(400, f"{name} must be at most {limit} characters", name)
    return value


def _number(raw: Any, name: str, default: float, low: float, high: float) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise Refusal(400, f"{name} must be a number of seconds", name)
    if not low <= raw <= high:
        raise Refusal(400, f"{name} must be between {low:g} and {high:g} seconds", name)
    return float(raw)


def _timeout(body: dict[str, Any]) -> float:
    timeout = _number(body.get("timeout"), "timeout", DEFAULT_TIMEOUT_S, 0, MAX_TIMEOUT_S)
    if timeout <= 0:
        raise Refusal(400, "timeout must be more than 0 seconds", "timeout")
    return timeout


def _blocks(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):
        raw = raw.get("blocks")
    if not isinstance(raw, list) or not all(isinstance(b, dict) for b in raw):
        raise Refusal(400, "blocks must be a list of block objects", "blocks")
    for index, block in enumerate(raw):
        for name in ("type", "key", "label", "value_type"):
            if name in block and not isinstance(block[name], str):
                raise Refusal(400, f"blocks[{index}].{name} must be a string", "blocks")
    return raw


async def create_approval(request: Request) -> Response:
    body = await _body(request)
    tool = _text(body, "tool", MAX_TOOL_CHARS, required=True)
    arguments = body.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise Refusal(400, "arguments must be a JSON object", "arguments")
    host = _host(request)
    item = host.submit_approval(
        tool=str(tool),
        summary=_text(body, "summary", MAX_SUMMARY_CHARS, required=False),
        arguments=arguments,
        blocks=_blocks(body.get("blocks")),
        timeout_s=_timeout(body),
        grant=_grant_offer(body),
        editable=_editable(body.get("editable"), arguments),
    )
    return JSONResponse({"item_id": item.item_id}, status_code=201)


def _editable(raw: Any, arguments: dict[str, Any]) -> tuple[str, ...]:
    """The keys of ``arguments`` the caller can run edited (protocol §3.1 ``editable``);
    a name ``arguments`` lack is left out (nothing could be edited there)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(key, str) for key in raw):
        raise Refusal(400, "editable must be a list of argument names", "editable")
    if len(raw) > MAX_EDITABLE_KEYS or len(set(raw)) != len(raw):
        raise Refusal(400, f"editable must name at most {MAX_EDITABLE_KEYS} different keys",
                      "editable")
    return tuple(key for key in raw if key in arguments)


def _grant_offer(body: dict[str, Any]) -> gr.Offer | None:
    """The grant an approval offers, in the namespace of the field it came in: a script's
    ``grant_key`` (and ``grant_label``), or the ``grant_scope`` of a hook or the gateway."""
    key = _text(body, "grant_key", MAX_GRANT_CHARS, required=False)
    label = _text(body, "grant_label", MAX_GRANT_CHARS, required=False)
    scope = body.get("grant_scope")
    if scope is None:
        return None if key is None else gr.script_offer(key, label)
    if key is not None or label is not None:
        raise Refusal(400, "grant_scope goes without grant_key and grant_label", "grant_scope")
    if not isinstance(scope, dict) or scope.get("kind") not in gr.SCOPE_KINDS:
        raise Refusal(400, "grant_scope must be an object with kind (hook or gateway), key "
                           "and label", "grant_scope")
    return gr.scope_offer(
        scope["kind"],
        str(_text(scope, "key", MAX_GRANT_CHARS, required=True)),
        str(_text(scope, "label", MAX_GRANT_CHARS, required=True)),
    )


async def create_question(request: Request) -> Response:
    body = await _body(request)
    question = _text(body, "question", MAX_QUESTION_CHARS, required=True)
    options = body.get("options")
    if options is None:
        options = []
    if not isinstance(options, list) or len(options) > MAX_OPTIONS or not all(
        isinstance(o, str) and o.strip() and len(o) <= MAX_OPTION_CHARS for o in options
    ):
        raise Refusal(400, f"options must be at most {MAX_OPTIONS} non-empty strings of at "
                           f"most {MAX_OPTION_CHARS} characters", "options")
    if len(set(options)) != len(options):
        raise Refusal(400, "options must differ from each other", "options")
    item = _host(request).submit_question(
        question=str(question), options=options, timeout_s=_timeout(body)
    )
    return JSONResponse({"item_id": item.item_id}, status_code=201)


def _wait(request: Request) -> float:
    raw = request.query_params.get("wait")
    try:
        seconds = None if raw is None else float(raw)
    except ValueError as exc:
        raise Refusal(400, "wait must be a number of seconds", "wait") from exc
    return _number(seconds, "wait", 0.0, 0.0, MAX_WAIT_S)


async def item_outcome(request: Request) -> Response:
    wait = _wait(request)
    host = _host(request)
    item = await host.wait(request.path_params["item_id"], wait)
    return JSONResponse(host.outcome_json(item))


async def withdraw_item(request: Request) -> Response:
    item = _host(request).withdraw(request.path_params["item_id"])
    return JSONResponse(item.outcome_json())


async def list_items(request: Request) -> Response:
    return JSONResponse({"items": [i.listing_json() for i in _host(request).open_items()]})


async def status(request: Request) -> Response:
    return JSONResponse(_host(request).status())


async def create_pairing(request: Request) -> Response:
    secret, link = _host(request).new_pairing()
    return JSONResponse(
        {"pairing_id": secret.pairing_id, "link": link,
         **_host(request).pairing_json(secret.pairing_id)},
        status_code=201,
    )


async def pairing(request: Request) -> Response:
    found = await _host(request).wait_pairing(request.path_params["pairing_id"], _wait(request))
    return JSONResponse(found)


async def unpair(request: Request) -> Response:
    card = _host(request).unpair(request.path_params["device"])
    return JSONResponse({"id": card.id, "name": card.name})


async def list_grants(request: Request) -> Response:
    return JSONResponse({"grants": [g.listing_json() for g in _host(request).grants()]})


async def revoke_grant(request: Request) -> Response:
    grant = _host(request).revoke_grant(request.path_params["grant_id"])
    return JSONResponse(grant.listing_json())


def _host(request: Request) -> AgentHost:
    host: AgentHost = request.app.state.host
    return host


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    messages = {404: "no such endpoint", 405: "method not allowed here"}
    response = error(exc.status_code, messages.get(exc.status_code, str(exc.detail)))
    response.headers.update(exc.headers or {})  # a 405's Allow
    return response


LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")


def allowed_hosts(listen_host: str, port: int) -> frozenset[str]:
    """The ``Host`` values a TCP request may carry: a loopback name or the configured
    address, each with the port."""
    configured = listen_host.strip("[]").lower()
    if ":" in configured:
        configured = f"[{configured}]"
    return frozenset(f"{name}:{port}" for name in (*LOOPBACK_NAMES, configured))


class TokenGuard:
    """Asks TCP clients for ``Authorization: Bearer <token>`` and a ``Host`` header naming
    this listener (``hosts``): a web page whose own name an attacker points at 127.0.0.1
    (DNS rebinding) sends its own name and is refused before the token is even looked at.
    The Unix socket (whose server address has no port) needs neither. Without a token, TCP
    is refused."""

    def __init__(self, app: ASGIApp, token: str | None,
                 hosts: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not _over_unix_socket(scope):
            refusal = self._refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        headers = dict(scope.get("headers", []))
        named = [value.decode("latin-1").lower() for name, value in scope.get("headers", [])
                 if name == b"host"]
        if len(named) != 1 or named[0] not in self.hosts:
            log.info("refused a TCP request addressed to another host name")
            return error(421, "the Host header must name this listener (127.0.0.1, localhost "
                              "or [::1] with its port, or its --listen address)", "Host")
        if self.token is None:
            return error(401, "missing or wrong bearer token", "Authorization")
        expected = f"Bearer {self.token}".encode()
        if not hmac.compare_digest(headers.get(b"authorization", b""), expected):
            return error(401, "missing or wrong bearer token", "Authorization")
        return None


def _over_unix_socket(scope: Scope) -> bool:
    server = scope.get("server")
    return isinstance(server, tuple | list) and len(server) == 2 and server[1] is None


def create_app(host: AgentHost, token: str | None = None,
               hosts: frozenset[str] = frozenset()) -> ASGIApp:
    """The API for ``host``; ``token`` and ``hosts`` (:func:`allowed_hosts`) guard TCP
    connections."""
    routes = [
        Route("/v1/approvals", _guarded(create_approval), methods=["POST"]),
        Route("/v1/questions", _guarded(create_question), methods=["POST"]),
        Route("/v1/items", _guarded(list_items), methods=["GET"]),
        Route("/v1/items/{item_id}/outcome", _guarded(item_outcome), methods=["GET"]),
        Route("/v1/items/{item_id}", _guarded(withdraw_item), methods=["DELETE"]),
        Route("/v1/status", _guarded(status), methods=["GET"]),
        Route("/v1/pairings", _guarded(create_pairing), methods=["POST"]),
        Route("/v1/pairings/{pairing_id}", _guarded(pairing), methods=["GET"]),
        Route("/v1/devices/{device}", _guarded(unpair), methods=["DELETE"]),
        Route("/v1/grants", _guarded(list_grants), methods=["GET"]),
        Route("/v1/grants/{grant_id}", _guarded(revoke_grant), methods=["DELETE"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.host = host
    return TokenGuard(app, token, hosts)
