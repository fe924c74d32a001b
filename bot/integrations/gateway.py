"""``skald-telegram mcp gateway``: any stdio MCP server behind an approval.

The gateway starts the upstream server as its child, offers exactly its tools (the
upstream's own listing, passed through), and decides each call by the policy: ``allow``
forwards it, ``deny`` refuses it, ``ask`` puts a card in front of a person first: the card
names the MCP client (the name its ``initialize`` request gave in ``clientInfo``) and the
server (as the client's configuration calls it, ``--name``, else the upstream's own name). A
forwarded call returns the upstream result unchanged (a call a person edited before
approving, which the policy allows, is forwarded with the edited arguments, its result
after a line saying what changed); a refused one returns an error
result naming who refused and why, and the upstream tool is never called. The gateway
ends when its client closes stdin, and the upstream server with it.

With ``filesystem`` (``--filesystem``: the upstream is the reference filesystem MCP server,
or one with its tools, running on this machine), the card of a ``write_file`` or
``edit_file`` call shows the change as a diff against the file on disk, the path resolved
against the directories the server's ``list_allowed_directories`` reports, as it resolves it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from bot.errors import SkaldError
from bot.integrations.approval import Connect, ask_person, one_line
from bot.integrations.describe import ToolCall, describe
from bot.integrations.fspaths import locate
from bot.integrations.fsrules import ROOTS_TOOL, ServerFile, allowed_directories, file_tool
from bot.integrations.grants import gateway_scope
from bot.integrations.policy import Policy

log = logging.getLogger(__name__)

UPSTREAM_START_SECONDS = 30.0
ROOTS_SECONDS = 10.0
"""How long a filesystem server may take to list its allowed directories for a card."""
UNNAMED_CLIENT = "An MCP client"
CLIENT_NAME_LIMIT = 40
"""Characters of a client's self-given name shown on a card: a name, not a message."""


class UpstreamError(SkaldError):
    """The upstream MCP server did not start or did not answer."""


class Gateway:
    """Decides and forwards the calls of one client session."""

    def __init__(
        self, upstream: ClientSession, command: Sequence[str], server_name: str,
        policy: Policy, connect: Connect, timeout: float, filesystem: bool = False,
    ) -> None:
        self.upstream = upstream
        self.server_name = server_name
        self.command = tuple(command)
        """The upstream's command line: what its grants are keyed on."""
        self.policy = policy
        self.connect = connect
        self.timeout = timeout
        self.filesystem = filesystem
        self.descriptions: dict[str, str | None] = {}
        self.schemas: dict[str, dict[str, Any]] = {}
        self.upstream_gone: str | None = None

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if self.upstream_gone is not None:
            raise MCPError(types.INTERNAL_ERROR, self.upstream_gone)
        # Only the cursor goes upstream: the client's request metadata belongs to its own
        # connection (a newer protocol era than the upstream's, say).
        cursor = params.cursor if params is not None else None
        try:
            listing = await self.upstream.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        except Exception as exc:
            raise MCPError(types.INTERNAL_ERROR, self._lost(exc)) from exc
        self._learn(listing.tools)
        return listing

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, arguments = params.name, params.arguments or {}
        if name not in self.descriptions and await self.listed() \
                and name not in self.descriptions:
            raise MCPError(types.INVALID_PARAMS,
                           f"unknown tool {name!r}: the upstream MCP server "
                           f"{self.server_name!r} has no such tool; it was not called")
        rule = self.policy.rule_for(name)
        if rule == "deny":
            source = self.policy.source_for(name)
            return _error(f"denied by the gateway policy ({source} = \"deny\"): "
                          f"{name} was not called")
        if rule == "ask":
            call = ToolCall(client_name(ctx), name, arguments, mcp_server=self.server_name,
                            mcp_tool=name, tool_description=await self.description(name))
            if self.filesystem and file_tool(name, self.schemas.get(name)) is not None:
                call = replace(call, server_file=await self.server_file(arguments))
            description = describe(call, lambda _: None)
            scope = gateway_scope(self.command, name)
            verdict = await ask_person(
                self.connect, tool=name, summary=description.summary, arguments=arguments,
                blocks=description.blocks, timeout=self.timeout, grant_key=scope.key,
                grant_label=scope.label, grant_kind="gateway",
                editable=[key for key in self.policy.editable_for(name) if key in arguments],
            )
            if verdict.decision != "allow":
                return _error(f"{verdict.reason}; {name} was not called")
            if verdict.edited is not None:
                return _told(verdict.reason, await self.forward(name, dict(verdict.edited)))
        return await self.forward(name, arguments)

    async def description(self, name: str) -> str | None:
        """The upstream's description of tool ``name``, read from its listing."""
        if name not in self.descriptions:
            await self.listed()
        return self.descriptions.get(name)

    async def listed(self) -> bool:
        """Read the upstream's whole tool listing into :attr:`descriptions`; whether it
        could be read."""
        if self.upstream_gone is not None:
            return False
        cursor: str | None = None
        try:
            while True:
                page = await self.upstream.list_tools(
                    params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
                self._learn(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return True
        except Exception as exc:  # the card goes without it; the call decides the rest
            log.warning("could not list the upstream tools: %s", one_line(exc))
            return False

    def _learn(self, tools: Iterable[types.Tool]) -> None:
        for tool in tools:
            self.descriptions[tool.name] = tool.description
            self.schemas[tool.name] = tool.input_schema

    async def server_file(self, arguments: Mapping[str, Any]) -> ServerFile | None:
        """The file a filesystem server's write or edit names, as the server sees it;
        None for a call that names no path (its card shows the arguments)."""
        requested = arguments.get("path")
        if not isinstance(requested, str):
            return None
        roots = await self.allowed_directories()
        if roots is None:
            return ServerFile(requested, problem="the server's allowed directories could not "
                                                 f"be read ({ROOTS_TOOL})")
        try:
            return await anyio.to_thread.run_sync(locate, requested, roots)
        except (OSError, ValueError) as exc:  # e.g. no working directory any more
            return ServerFile(requested, problem=f"{requested} cannot be resolved: "
                                                 f"{one_line(exc)}")

    async def allowed_directories(self) -> list[str] | None:
        """The directories the filesystem server may touch, as it lists them itself."""
        if ROOTS_TOOL not in self.descriptions or self.upstream_gone is not None:
            return None
        try:
            with anyio.fail_after(ROOTS_SECONDS):
                result = await self.upstream.call_tool(ROOTS_TOOL, {})
        except Exception as exc:  # the card says so; the call decides the rest
            log.warning("could not list the upstream's allowed directories: %s", one_line(exc))
            return None
        answer = "".join(part.text for part in result.content
                         if isinstance(part, types.TextContent))
        return None if result.is_error else allowed_directories(answer)

    async def forward(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if self.upstream_gone is not None:
            return _error(self.upstream_gone)
        try:
            return await self.upstream.call_tool(name, arguments)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                return _error(self._lost(exc))
            raise  # the upstream's own protocol error, passed on as it is
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream,
                OSError) as exc:
            return _error(self._lost(exc))
        except Exception as exc:  # e.g. a result that breaks the tool's own output schema
            return _error(f"the upstream MCP server's answer to {name} could not be passed "
                          f"on: {one_line(exc)}")

    def _lost(self, exc: BaseException) -> str:
        self.upstream_gone = (
            f"the upstream MCP server {self.server_name!r} is not running any more "
            f"({one_line(exc)}); restart the MCP client to start it again"
        )
        log.error("%s", self.upstream_gone)
        return self.upstream_gone


def client_name(ctx: ServerRequestContext[Any]) -> str:
    """The MCP client's name from its ``initialize`` request, as a card shows it."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    return shown_client_name(info.name if info is not None else None)


def shown_client_name(given: str | None) -> str:
    """A client's self-given name on one short line; none, or one with invisible or
    control characters, is shown as an unnamed client."""
    name = " ".join((given or "").split())
    if not name or not name.isprintable():
        return UNNAMED_CLIENT
    return name if len(name) <= CLIENT_NAME_LIMIT else name[:CLIENT_NAME_LIMIT - 1] + "…"


async def run_gateway(
    command: Sequence[str], policy: Policy, connect: Connect, *, timeout: float,
    server_name: str | None = None, filesystem: bool = False,
) -> None:
    """Serve on stdin/stdout until the client goes, with ``command`` as the upstream;
    ``server_name`` is what the cards call it (default: the name the upstream gives);
    ``filesystem`` says the upstream is a filesystem server on this machine."""
    params = StdioServerParameters(
        command=command[0], args=list(command[1:]), env=dict(os.environ)
    )
    async with AsyncExitStack() as stack:
        try:
            read, write = await stack.enter_async_context(stdio_client(params))
            upstream = await stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(UPSTREAM_START_SECONDS):
                initialized = await upstream.initialize()
        except Exception as exc:
            raise UpstreamError(
                f"the upstream MCP server ({' '.join(command)}) did not start: {one_line(exc)}"
            ) from exc
        name = initialized.server_info.name if initialized.server_info else command[0]
        gateway = Gateway(upstream, command, server_name or name, policy, connect, timeout,
                          filesystem)
        server: Server[Any] = Server(
            f"skald-telegram gateway for {name}",
            version=initialized.server_info.version if initialized.server_info else "",
            instructions=initialized.instructions,
            on_list_tools=gateway.list_tools,
            on_call_tool=gateway.call_tool,
        )
        async with stdio_server() as (client_read, client_write):
            await server.run(client_read, client_write, server.create_initialization_options())


def _told(note: str, result: types.CallToolResult) -> types.CallToolResult:
    """The upstream's result of an edited call, after a line saying what the person
    changed (the client otherwise sees its own call with the result of the edited one)."""
    content = [types.TextContent(type="text", text=note), *result.content]
    return result.model_copy(update={"content": content})


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                is_error=True)
