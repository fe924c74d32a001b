"""Running the agent host: the state folder, the identity, the sockets, uvicorn.

One host per state folder (an exclusive lock on ``agent.lock``). The API listens on
``agent.sock`` (0600) and, with ``--listen``, on a TCP address guarded by the bearer token
in ``api-token`` (0600) and by the ``Host`` header (loopback names or the listen address).
SIGTERM and SIGINT stop it cleanly; SIGKILL loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import getpass
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

import uvicorn

from bot.agenthost.api import allowed_hosts, create_app
from bot.agenthost.service import AgentHost
from bot.agenthost.store import AgentStore, private_folder, unusable_folder
from bot.errors import RelayError, SkaldError, StoreError
from bot.heap import keep_large_buffers
from bot.protocol.identity import Identity
from skald_telegram.client import SOCKET_NAME, TOKEN_NAME

log = logging.getLogger(__name__)

LOCK_NAME: Final = "agent.lock"
GRACEFUL_SHUTDOWN_S: Final = 2


class HostError(SkaldError):
    """The host cannot start: the message says why and what to do."""


@dataclass(frozen=True)
class ServeOptions:
    state: Path
    relay: str | None = None
    name: str | None = None
    listen: str | None = None
    notifications: bool = False
    relay_options: Mapping[str, Any] | None = None


def default_name() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "agent"
    return f"{user}@{socket.gethostname()}"


@contextlib.contextmanager
def _exclusive(state: Path) -> Iterator[None]:
    try:
        fd = os.open(state / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise HostError(unusable_folder(state, exc)) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise HostError(f"an agent host already runs with the state folder {state}") from exc
        yield
    finally:
        os.close(fd)


def open_host(store: AgentStore, options: ServeOptions) -> AgentHost:
    """The identity, relay and name from the store, updated by ``options``."""
    relay = options.relay or store.get_meta("relay_url")
    if relay is None:
        raise HostError("the first start needs the relay: skald-telegram agent serve "
                        "--relay ws://HOST:PORT/v1/connect")
    identity = store.load_identity()
    name = options.name or (identity.name if identity else default_name())
    if identity is None:
        identity = Identity.generate(name)
        log.info("created the agent identity %s", identity.id)
    elif identity.name != name:
        identity = identity.with_name(name)
    try:
        host = AgentHost(store, identity, relay, notifications=options.notifications,
                         relay_options=options.relay_options)
    except RelayError as exc:
        raise HostError(str(exc)) from exc
    with store.transaction():
        store.save_identity(identity)
        store.set_meta("relay_url", relay)
    return host


def api_token(state: Path) -> str:
    """The bearer token of the TCP listener, created (0600) on first use."""
    path = state / TOKEN_NAME
    with contextlib.suppress(FileNotFoundError):
        token = path.read_text(encoding="utf-8").strip()
        if token:
            os.chmod(path, 0o600)
            return token
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    return token


def _unix_socket(path: Path) -> socket.socket:
    path.unlink(missing_ok=True)  # left by a host that was killed: we hold the lock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen()  # from now on (the banner says so) connections wait to be accepted
    return sock


def _tcp_socket(listen: str) -> socket.socket:
    host, colon, port = listen.rpartition(":")
    if not colon or not port.isdigit() or not host:
        raise HostError(f"--listen must be HOST:PORT, such as 127.0.0.1:8766 (got {listen!r})")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen()
    except OSError as exc:
        raise HostError(f"cannot listen on {listen}: {exc.strerror or exc}") from exc
    return sock


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the host handles SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def serve(options: ServeOptions, out: TextIO = sys.stdout) -> int:
    """Run the host until SIGTERM or SIGINT."""
    state = private_folder(options.state)
    with _exclusive(state):
        store = AgentStore(state)
        try:
            host = open_host(store, options)
            try:
                token = api_token(state) if options.listen else None
                sockets = [_unix_socket(state / SOCKET_NAME)]
            except OSError as exc:
                if exc.errno is None:  # not the folder: a socket path too long, say
                    raise HostError(f"cannot listen on {state / SOCKET_NAME}: {exc}") from exc
                raise HostError(unusable_folder(state, exc)) from exc
            if options.listen:
                sockets.append(_tcp_socket(options.listen))
            keep_large_buffers()  # envelopes of up to a megabyte, opened and sealed
            asyncio.run(_run(host, token, sockets, out, options.listen))
        finally:
            (state / SOCKET_NAME).unlink(missing_ok=True)
            store.close()
    return 0


async def _run(host: AgentHost, token: str | None, sockets: list[socket.socket],
               out: TextIO, listen: str | None) -> None:
    hosts = frozenset[str]()
    if listen is not None:
        hosts = allowed_hosts(listen.rpartition(":")[0], sockets[1].getsockname()[1])
    config = uvicorn.Config(
        create_app(host, token, hosts), lifespan="off", log_level="warning", access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S, log_config=None,
    )
    server = _Server(config)
    loop = asyncio.get_running_loop()

    def stop() -> None:
        server.should_exit = True
        host.release_waiters()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop)
    service = asyncio.create_task(host.run())
    where = [str(sockets[0].getsockname())]
    if len(sockets) > 1:
        address = sockets[1].getsockname()
        where.append(f"http://{address[0]}:{address[1]}")
    print(f"agent {host.identity.id} ({host.name}) serving on {' and '.join(where)}",
          file=out, flush=True)
    try:
        await server.serve(sockets=sockets)
    finally:
        service.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await service
        await host.relay.stop()
    if service.done() and not service.cancelled() and service.exception() is not None:
        raise StoreError(f"the host stopped: {service.exception()}")
