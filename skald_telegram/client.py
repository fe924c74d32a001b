"""Sync and async clients of the agent host's local HTTP API (``docs/api/openapi.yaml``).

Both speak to the host through its Unix socket ``<state dir>/agent.sock`` (or, given
``url``, over TCP with the bearer token from ``<state dir>/api-token``). Requests and
answers are built and read by :class:`_Api`, which does no I/O, so the two clients differ
only in how they send.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import httpx

SOCKET_NAME: Final = "agent.sock"
TOKEN_NAME: Final = "api-token"
DEFAULT_TIMEOUT_S: Final = 600.0
POLL_CHUNK_S: Final = 30.0
"""The longest single long poll; :meth:`AgentClient.wait` repeats it."""
EXPIRY_GRACE_S: Final = 5.0
"""How long past an item's timeout a waiting client gives the host to report it expired."""
RECONNECT_S: Final = 0.25
"""Pause between two attempts to reach a host that went away while a client waits."""
_BASE_URL: Final = "http://agent-host"


def default_state_dir() -> Path:
    """``$SKALD_AGENT_STATE``, else ``$XDG_STATE_HOME/skald-telegram/agent`` (XDG's
    default: ``~/.local/state/skald-telegram/agent``)."""
    explicit = os.environ.get("SKALD_AGENT_STATE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "skald-telegram" / "agent"


class ClientError(Exception):
    """Root of the errors this client raises."""


class HostUnavailable(ClientError):
    """The agent host is not running, or went away (the message says how to start it)."""


class ApiError(ClientError):
    """The host refused a request (4xx): ``message`` says why, ``field`` names what."""

    def __init__(self, status: int, message: str, field: str | None) -> None:
        super().__init__(message if field is None else f"{message} (field {field})")
        self.status = status
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Outcome:
    """Where an item stands: ``state`` is ``pending``, ``approved``, ``denied``,
    ``answered``, ``expired`` or ``withdrawn``."""

    item_id: str
    state: str
    reason: str | None = None
    decided_by: Mapping[str, Any] | None = None
    """Who decided: ``{"name", "username", "telegram_user_id"}`` as far as known."""
    answer: str | None = None
    edited: bool = False
    """Approved with an edit: ``arguments`` are then what the person approved."""
    arguments: Mapping[str, Any] | None = None
    """The edited arguments to run instead of those submitted (only when ``edited``)."""
    picked_up: bool | None = None
    """Whether a paired device is known to hold the item (``None``: not said)."""

    @property
    def approved(self) -> bool:
        return self.state == "approved"

    @property
    def pending(self) -> bool:
        return self.state == "pending"

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Outcome:
        decided_by = obj.get("decided_by")
        return cls(
            item_id=str(obj["item_id"]),
            state=str(obj["state"]),
            reason=obj.get("reason"),
            decided_by=decided_by if isinstance(decided_by, dict) else None,
            answer=obj.get("answer"),
            edited=obj.get("edited") is True and isinstance(obj.get("arguments"), dict),
            arguments=obj.get("arguments") if isinstance(obj.get("arguments"), dict) else None,
            picked_up=obj["picked_up"] if isinstance(obj.get("picked_up"), bool) else None,
        )


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    read_timeout: float | None = None


class _Api:
    """Builds the API's requests and reads its answers; no I/O."""

    def __init__(
        self, state_dir: str | os.PathLike[str] | None, url: str | None, token: str | None
    ) -> None:
        self.explicit_state = state_dir is not None
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        self.socket = self.state_dir / SOCKET_NAME
        self.url = url
        self.token = token if token is not None or url is None else self._read_token()

    def _read_token(self) -> str | None:
        try:
            return (self.state_dir / TOKEN_NAME).read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def client_options(self) -> dict[str, Any]:
        headers = {} if self.token is None else {"Authorization": f"Bearer {self.token}"}
        return {"base_url": self.url or _BASE_URL, "headers": headers}

    def unavailable(self, exc: Exception) -> HostUnavailable:
        state = f" --state {self.state_dir}" if self.explicit_state else ""
        where = self.url or f"no answer on {self.socket}"
        return HostUnavailable(
            f"the agent host is not running ({where}); start it with: "
            f"skald-telegram agent serve{state}"
        )

    @staticmethod
    def approval(
        tool: str,
        summary: str | None,
        arguments: Mapping[str, Any] | None,
        blocks: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None,
        timeout: float,
        grant_key: str | None,
        grant_label: str | None,
        grant_scope: Mapping[str, str] | None = None,
        editable: Sequence[str] | None = None,
    ) -> _Request:
        body: dict[str, Any] = {
            "tool": tool, "arguments": dict(arguments or {}), "timeout": timeout,
        }
        for name, value in (
            ("summary", summary),
            ("blocks", blocks),
            ("grant_key", grant_key),
            ("grant_label", grant_label),
            ("grant_scope", None if grant_scope is None else dict(grant_scope)),
            ("editable", list(editable) if editable else None),
        ):
            if value is not None:
                body[name] = value
        return _Request("POST", "/v1/approvals", json=body)

    @staticmethod
    def question(question: str, options: Sequence[str] | None, timeout: float) -> _Request:
        body: dict[str, Any] = {"question": question, "timeout": timeout}
        if options:
            body["options"] = list(options)
        return _Request("POST", "/v1/questions", json=body)

    @staticmethod
    def outcome(item_id: str, wait: float) -> _Request:
        wait = max(0.0, min(wait, POLL_CHUNK_S))
        return _Request(
            "GET",
            f"/v1/items/{quote(item_id, safe='')}/outcome",
            params={"wait": round(wait, 3)},
            read_timeout=wait + 10.0,
        )

    @staticmethod
    def withdraw(item_id: str) -> _Request:
        return _Request("DELETE", f"/v1/items/{quote(item_id, safe='')}")

    @staticmethod
    def pairing(pairing_id: str, wait: float) -> _Request:
        poll = _Api.outcome(pairing_id, wait)
        return _Request("GET", f"/v1/pairings/{quote(pairing_id, safe='')}",
                        params=poll.params, read_timeout=poll.read_timeout)

    @staticmethod
    def unpair(device: str) -> _Request:
        return _Request("DELETE", f"/v1/devices/{quote(device, safe='')}")

    @staticmethod
    def read(response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success:
            return body
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            field = body.get("field")
            raise ApiError(response.status_code, body["error"], field if isinstance(field, str)
                           else None)
        raise ApiError(response.status_code, f"HTTP {response.status_code}", None)


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _remaining(deadline: float | None) -> float:
    return POLL_CHUNK_S if deadline is None else deadline - time.monotonic()


class AgentClient:
    """Blocking client of the agent host. Use it as a context manager, or call
    :meth:`close` when done."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
    ) -> None:
        self._api = _Api(state_dir, url, token)
        transport = None if url else httpx.HTTPTransport(uds=str(self._api.socket))
        self._http = httpx.Client(transport=transport, timeout=30.0,
                                  **self._api.client_options())

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, request: _Request) -> Any:
        timeout = httpx.Timeout(30.0, read=request.read_timeout or 30.0)
        try:
            response = self._http.request(
                request.method, request.path, json=request.json, params=request.params,
                timeout=timeout,
            )
        except (httpx.TransportError, OSError) as exc:
            raise self._api.unavailable(exc) from exc
        return _Api.read(response)

    def submit_approval(
        self,
        tool: str,
        *,
        summary: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        blocks: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        grant_key: str | None = None,
        grant_label: str | None = None,
        grant_scope: Mapping[str, str] | None = None,
        editable: Sequence[str] | None = None,
    ) -> str:
        """Put an approval in front of the paired devices; its item id. ``grant_key``
        offers a script's grant; ``grant_scope`` (``kind``, ``key``, ``label``) is what the
        hooks and the MCP gateway offer instead. ``editable`` names the keys of
        ``arguments`` a person may change before approving: only for a caller that then
        runs the outcome's ``arguments``."""
        request = _Api.approval(tool, summary, arguments, blocks, timeout, grant_key,
                                grant_label, grant_scope, editable)
        return str(self._send(request)["item_id"])

    def submit_question(
        self, question: str, options: Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> str:
        """Ask the paired devices a question; its item id."""
        return str(self._send(_Api.question(question, options, timeout))["item_id"])

    def outcome(self, item_id: str, wait: float = 0.0) -> Outcome:
        """The item's outcome now, or within ``wait`` seconds (at most 30) once decided."""
        return Outcome.from_json(self._send(_Api.outcome(item_id, wait)))

    def wait(self, item_id: str, timeout: float | None = None, *,
             since: Outcome | None = None) -> Outcome:
        """Wait until the item is decided, answered, expired or withdrawn (or ``timeout``
        seconds pass: then the outcome is still ``pending``). A host that restarts
        meanwhile is waited for; one that is not running at first raises
        :class:`HostUnavailable`, unless ``since`` is an outcome the caller already had
        from it (waiting on after a first wait)."""
        deadline = _deadline(timeout)
        outcome = since or self.outcome(item_id)  # fails fast when no host is running
        while outcome.pending and _remaining(deadline) > 0:
            try:
                outcome = self.outcome(item_id, _remaining(deadline))
            except HostUnavailable:
                time.sleep(max(0.0, min(RECONNECT_S, _remaining(deadline))))
        return outcome

    def request_approval(
        self,
        tool: str,
        *,
        summary: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        blocks: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        grant_key: str | None = None,
        grant_label: str | None = None,
        editable: Sequence[str] | None = None,
    ) -> Outcome:
        """Submit an approval and wait for its outcome (``expired`` after ``timeout``)."""
        item_id = self.submit_approval(
            tool, summary=summary, arguments=arguments, blocks=blocks, timeout=timeout,
            grant_key=grant_key, grant_label=grant_label, editable=editable,
        )
        return self._finish(item_id, timeout)

    def ask_question(
        self, question: str, options: Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> Outcome:
        """Ask a question and wait for the answer (``expired`` after ``timeout``)."""
        return self._finish(self.submit_question(question, options, timeout), timeout)

    def _finish(self, item_id: str, timeout: float) -> Outcome:
        outcome = self.wait(item_id, timeout + EXPIRY_GRACE_S)
        return self.withdraw(item_id) if outcome.pending else outcome

    def withdraw(self, item_id: str) -> Outcome:
        """Take a pending item back (every card says so); harmless once it is decided."""
        return Outcome.from_json(self._send(_Api.withdraw(item_id)))

    def items(self) -> list[dict[str, Any]]:
        """The open items."""
        return list(self._send(_Request("GET", "/v1/items"))["items"])

    def status(self) -> dict[str, Any]:
        """The host's identity, relay connection, paired devices and open items."""
        return dict(self._send(_Request("GET", "/v1/status")))

    def new_pairing(self) -> dict[str, Any]:
        """A one-time pairing link: ``{"pairing_id", "link", "expires_at"}``."""
        return dict(self._send(_Request("POST", "/v1/pairings")))

    def pairing(self, pairing_id: str, wait: float = 0.0) -> dict[str, Any]:
        """Whether a device has paired with that link (``state``: waiting, paired, expired)."""
        return dict(self._send(_Api.pairing(pairing_id, wait)))

    def unpair(self, device: str) -> dict[str, Any]:
        """Forget a paired device (by id or name)."""
        return dict(self._send(_Api.unpair(device)))

    def grants(self) -> list[dict[str, Any]]:
        """The grants in force: ``grant_id``, ``label``, ``granted_by``, ``expires_at``,
        ``uses``, ``key``."""
        return list(self._send(_Request("GET", "/v1/grants"))["grants"])

    def revoke_grant(self, grant_id: str) -> dict[str, Any]:
        """End a grant in force (the paired devices are told)."""
        return dict(self._send(_Request("DELETE", f"/v1/grants/{grant_id}")))


class AsyncAgentClient:
    """The asyncio twin of :class:`AgentClient` (same methods, awaited)."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str] | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
    ) -> None:
        self._api = _Api(state_dir, url, token)
        transport = None if url else httpx.AsyncHTTPTransport(uds=str(self._api.socket))
        self._http = httpx.AsyncClient(transport=transport, timeout=30.0,
                                       **self._api.client_options())

    async def __aenter__(self) -> AsyncAgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, request: _Request) -> Any:
        timeout = httpx.Timeout(30.0, read=request.read_timeout or 30.0)
        try:
            response = await self._http.request(
                request.method, request.path, json=request.json, params=request.params,
                timeout=timeout,
            )
        except (httpx.TransportError, OSError) as exc:
            raise self._api.unavailable(exc) from exc
        return _Api.read(response)

    async def submit_approval(
        self,
        tool: str,
        *,
        summary: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        blocks: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        grant_key: str | None = None,
        grant_label: str | None = None,
        grant_scope: Mapping[str, str] | None = None,
        editable: Sequence[str] | None = None,
    ) -> str:
        request = _Api.approval(tool, summary, arguments, blocks, timeout, grant_key,
                                grant_label, grant_scope, editable)
        return str((await self._send(request))["item_id"])

    async def submit_question(
        self, question: str, options: Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> str:
        return str((await self._send(_Api.question(question, options, timeout)))["item_id"])

    async def outcome(self, item_id: str, wait: float = 0.0) -> Outcome:
        return Outcome.from_json(await self._send(_Api.outcome(item_id, wait)))

    async def wait(self, item_id: str, timeout: float | None = None, *,
                   since: Outcome | None = None) -> Outcome:
        deadline = _deadline(timeout)
        outcome = since or await self.outcome(item_id)  # fails fast when no host runs
        while outcome.pending and _remaining(deadline) > 0:
            try:
                outcome = await self.outcome(item_id, _remaining(deadline))
            except HostUnavailable:
                await asyncio.sleep(max(0.0, min(RECONNECT_S, _remaining(deadline))))
        return outcome

    async def request_approval(
        self,
        tool: str,
        *,
        summary: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        blocks: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        grant_key: str | None = None,
        grant_label: str | None = None,
        editable: Sequence[str] | None = None,
    ) -> Outcome:
        item_id = await self.submit_approval(
            tool, summary=summary, arguments=arguments, blocks=blocks, timeout=timeout,
            grant_key=grant_key, grant_label=grant_label, editable=editable,
        )
        return await self._finish(item_id, timeout)

    async def ask_question(
        self, question: str, options: Sequence[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> Outcome:
        return await self._finish(await self.submit_question(question, options, timeout), timeout)

    async def _finish(self, item_id: str, timeout: float) -> Outcome:
        outcome = await self.wait(item_id, timeout + EXPIRY_GRACE_S)
        return await self.withdraw(item_id) if outcome.pending else outcome

    async def withdraw(self, item_id: str) -> Outcome:
        return Outcome.from_json(await self._send(_Api.withdraw(item_id)))

    async def items(self) -> list[dict[str, Any]]:
        return list((await self._send(_Request("GET", "/v1/items")))["items"])

    async def status(self) -> dict[str, Any]:
        return dict(await self._send(_Request("GET", "/v1/status")))

    async def new_pairing(self) -> dict[str, Any]:
        return dict(await self._send(_Request("POST", "/v1/pairings")))

    async def pairing(self, pairing_id: str, wait: float = 0.0) -> dict[str, Any]:
        return dict(await self._send(_Api.pairing(pairing_id, wait)))

    async def unpair(self, device: str) -> dict[str, Any]:
        return dict(await self._send(_Api.unpair(device)))

    async def grants(self) -> list[dict[str, Any]]:
        return list((await self._send(_Request("GET", "/v1/grants")))["grants"])

    async def revoke_grant(self, grant_id: str) -> dict[str, Any]:
        return dict(await self._send(_Request("DELETE", f"/v1/grants/{grant_id}")))
