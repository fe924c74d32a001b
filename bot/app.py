"""The bot process: python-telegram-bot, the relay sessions, the card worker and the timers,
all in one asyncio loop, stopped cleanly by SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.routing import BaseRoute
from telegram import Chat, LinkPreviewOptions, User
from telegram import error as tg_error
from telegram.ext import Application, ApplicationBuilder, Defaults

from bot.bridge import PAIRING_TIMEOUT_S, Bridge, Changes, wait_until_paired
from bot.clock import SYSTEM_CLOCK, Clock
from bot.config import Config
from bot.errors import BotApiError, BotFailed, StoreError
from bot.health import HEARTBEAT_S, remove_status, write_status
from bot.heap import keep_large_buffers
from bot.keyfile import load_or_create_identity
from bot.logsafety import redact_value
from bot.relay_pool import RelayPool
from bot.render import Renderer
from bot.replicas import Replica, default_name, only_process
from bot.signals import until_signalled
from bot.statedir import ensure_state_dir
from bot.store import SCHEMA_VERSION, Store
from bot.supervisor import Supervisor
from bot.tg.approvers import ApproverLookup
from bot.tg.digests import DigestWorker
from bot.tg.gateway import Gateway
from bot.tg.handlers import Handlers
from bot.tg.notes import NoteWorker
from bot.tg.ratelimit import BotRateLimiter
from bot.tg.timers import Timers
from bot.tg.update_inbox import UpdateInbox
from bot.tg.webapp import WebAppContext, webapp_routes
from bot.tg.webhook import HttpServer, webhook_routes
from bot.tg.worker import CardWorker

log = logging.getLogger(__name__)

CHECKPOINT_S = 5.0
"""How often the write-ahead log is copied into the database file."""
ALLOWED_UPDATES = ["message", "callback_query", "my_chat_member", "chat_member"]
PICK_UP_S = 0.2
"""How often the leading replica looks for what the others changed (cards to draw,
envelopes to send) while there are others."""
OnStart = Callable[[Chat, User], Awaitable[None]]


def build_application(
    config: Config, limiter: BotRateLimiter
) -> Application:  # type: ignore[type-arg]
    """A PTB application for ``config``: HTML by default, link previews off, rate-limited."""
    return (
        ApplicationBuilder()
        .token(config.token)
        .base_url(f"{config.api_url}/bot")
        .base_file_url(f"{config.api_url}/file/bot")
        .rate_limiter(limiter)
        .defaults(Defaults(link_preview_options=LinkPreviewOptions(is_disabled=True)))
        .build()
    )


@dataclass(frozen=True)
class Redraw:
    """Acts on a committed change to what cards show or when something is due: wakes the
    card worker, the timers and whoever waits for a pairing."""

    worker: CardWorker
    timers: Timers
    changed: asyncio.Event
    notes: NoteWorker
    digests: DigestWorker

    def __call__(self, changes: Changes) -> None:
        if changes.cards:
            self.worker.wake()
            self.timers.wake()
            self.notes.wake()
            self.digests.wake()
            self.changed.set()


@dataclass
class Running:
    """The parts of a running bot, for the demo and tests to reach."""

    application: Application  # type: ignore[type-arg]
    bridge: Bridge
    store: Store
    relays: RelayPool
    worker: CardWorker
    timers: Timers
    handlers: Handlers
    changed: asyncio.Event
    supervisor: Supervisor = field(default_factory=Supervisor)
    replica: Replica | None = None

    def act_on(self, changes: Changes) -> None:
        """Act on what a use case of :attr:`bridge` changed (after its commit)."""
        self.relays.act_on(changes)

    async def wait_until_paired(self, agent_id: str, timeout: float = PAIRING_TIMEOUT_S) -> None:
        """Return once the agent accepted the pairing; TimeoutError after ``timeout``."""
        await wait_until_paired(self.bridge.view, agent_id, self.changed, timeout)


class Bot:
    """Start, run and stop the whole bot; usable as ``async with Bot(config) as running``."""

    def __init__(
        self,
        config: Config,
        *,
        clock: Clock = SYSTEM_CLOCK,
        on_start: OnStart | None = None,
        relay_options: dict[str, float] | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._on_start = on_start
        self._relay_options = relay_options or {}
        self._supervisor = supervisor
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> Running:
        stack = contextlib.AsyncExitStack()
        try:
            running = await self._start(stack)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return running

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
            log.info("bot stopped")

    async def _start(self, stack: contextlib.AsyncExitStack) -> Running:
        """Start every part, registering its shutdown on ``stack`` (undone in reverse)."""
        config = self._config
        redact_value(config.token)
        ensure_state_dir(config.state_dir)
        limiter = BotRateLimiter(clock=self._clock)
        application = build_application(config, limiter)
        try:
            await application.initialize()
        except tg_error.InvalidToken as exc:
            raise BotApiError("Telegram refused the bot token (check TELEGRAM_BOT_TOKEN)") \
                from exc
        except tg_error.TelegramError as exc:
            raise BotApiError(f"cannot reach the Bot API at {config.api_url}: {exc}") from exc
        stack.push_async_callback(application.shutdown)
        username = application.bot.username
        identity = load_or_create_identity(
            config.identity_path, config.device_name or f"Telegram @{username}"
        )
        store = Store.open(config.database)
        stack.callback(store.close)
        if not store.db.shared:
            stack.callback(os.close, only_process(store.path))
        replica = Replica(store, config.replica_name or default_name(), lease_s=config.lease_s,
                          clock=self._clock)
        stack.callback(replica.release)
        leads = replica.renew()
        renderer = Renderer(config.templates_dir)
        gateway = Gateway(application.bot)
        bridge = Bridge(identity=identity, store=store, config=config, clock=self._clock)
        stack.callback(bridge.close)
        approvers = ApproverLookup(bot=application.bot, bridge=bridge)
        worker = CardWorker(bridge=bridge, gateway=gateway, renderer=renderer, config=config,
                            clock=self._clock, bot_username=username or "")
        timers = Timers(bridge=bridge, gateway=gateway, renderer=renderer,
                        approvers=approvers.of, redraw=worker.wake, turns=worker.turns,
                        clock=self._clock)
        notes = NoteWorker(bridge=bridge, gateway=gateway, renderer=renderer, config=config,
                           clock=self._clock)
        digests = DigestWorker(bridge=bridge, gateway=gateway, renderer=renderer,
                               turns=worker.turns, clock=self._clock)
        changed = asyncio.Event()
        redraw = Redraw(worker, timers, changed, notes, digests)
        pool = RelayPool(bridge, after=redraw, leads=leads, **self._relay_options)
        handlers = Handlers(
            bridge=bridge, renderer=renderer, gateway=gateway, config=config,
            act_on=pool.act_on, changed=changed, approvers=approvers,
            relay_views=pool.statuses, on_start=self._on_start,
        )
        handlers.register(application)
        application.add_error_handler(_log_error)
        stack.push_async_callback(approvers.stop)
        # Started in this order and stopped in reverse: Telegram updates stop first (an
        # update whose handler is cut short is handled again at the next start), then the
        # worker and timers, then the relays.
        stack.push_async_callback(pool.stop)
        running = Running(application, bridge, store, pool, worker, timers, handlers, changed,
                          self._supervisor or Supervisor(), replica)
        supervisor = running.supervisor
        _watch_store(store, supervisor, self._clock)
        stack.callback(remove_status, config.status_path)

        def lead() -> None:
            """The relay sessions and the workers run on the leading replica only."""
            pool.lead()
            supervisor.start("card worker", worker.run)
            supervisor.start("timers", timers.run)
            supervisor.start("note worker", notes.run)
            supervisor.start("digest worker", digests.run)
            supervisor.changed.set()

        if leads:
            lead()
        if replica.shared:
            supervisor.start("replica lease", lambda: replica.keep(
                on_lead=lead, on_lost=supervisor.give_up, tick=supervisor.changed.set))
            supervisor.start("pick-up", lambda: _pick_up(replica, bridge, pool))
        supervisor.start("heartbeat", lambda: _heartbeat(config, running))
        running.supervisor.start("checkpoints", lambda: _checkpoints(store))
        # The supervised tasks stop before the card worker lets its chats finish: its own
        # task would otherwise end by itself and be restarted.
        stack.push_async_callback(worker.stop)
        stack.push_async_callback(running.supervisor.stop)
        await application.start()
        stack.push_async_callback(application.stop)
        # Instead of python-telegram-bot's polling, which confirms updates before they are
        # handled: each update is stored before it is confirmed (see bot.tg.update_inbox).
        inbox = UpdateInbox(application, bridge, allowed_updates=ALLOWED_UPDATES,
                            replica=replica.name,
                            look_again_s=replica.every_s if replica.shared else None)
        running.supervisor.start("update handler", inbox.handle)
        if config.webhook is None:
            running.supervisor.start("update fetcher", inbox.fetch)
            # Stopped first: no update is taken on while the rest shuts down.
            stack.push_async_callback(running.supervisor.stop, "update fetcher",
                                      "update handler")
        else:
            stack.push_async_callback(running.supervisor.stop, "update handler")
        await _serve_http(config, inbox, stack,
                          WebAppContext(config.token, bridge, approvers, application.bot,
                                        pool.act_on))
        if config.webhook is not None:
            await inbox.set_webhook(config.webhook.url, config.webhook.secret)
        log.info("bot @%s is running as device %s; %d relay session(s)", username,
                 identity.id, len(pool.statuses()))
        return running


async def _serve_http(config: Config, inbox: UpdateInbox, stack: contextlib.AsyncExitStack,
                      webapp: WebAppContext) -> None:
    """Serve the webhook (in webhook mode) and the Mini App (with ``webapp.url``) on
    ``http.listen``; stopped before the update handler, so that no update is taken on
    while the rest shuts down. Nothing listens when neither is on."""
    routes: list[BaseRoute] = []
    listen = None
    if config.webhook is not None:
        redact_value(config.webhook.secret)
        routes += webhook_routes(config.webhook, inbox)
        listen = config.webhook.host, config.webhook.port
    if config.webapp is not None:
        routes += webapp_routes(config.webapp, webapp)
        listen = config.webapp.host, config.webapp.port
    if listen is None:
        return
    server = HttpServer(*listen, routes)
    await server.start()
    stack.push_async_callback(server.stop)


def _watch_store(store: Store, supervisor: Supervisor, clock: Clock) -> None:
    """Time the store's failures on the bot's clock, and rewrite the status file at once
    when the store starts failing or is back (a write may fail in a worker thread)."""
    loop = asyncio.get_running_loop()

    def changed() -> None:
        loop.call_soon_threadsafe(supervisor.changed.set)

    store.db.health.clock = clock
    store.db.health.on_change = changed


async def _pick_up(replica: Replica, bridge: Bridge, pool: RelayPool) -> None:
    """On the leading replica, while others run: every :data:`PICK_UP_S`, draw the cards
    and send the envelopes they changed and queued (they wake nothing here)."""
    while True:
        await asyncio.sleep(PICK_UP_S)
        if replica.leads and replica.others:
            pool.act_on(Changes(cards=True, relays=frozenset(bridge.relay_urls())))


async def _checkpoints(store: Store) -> None:
    """Copy the database's write-ahead log into its file every :data:`CHECKPOINT_S`, in a
    thread, so that no commit on the event loop does it."""
    while True:
        await asyncio.sleep(CHECKPOINT_S)
        try:
            await asyncio.to_thread(store.checkpoint)
        except StoreError as exc:  # logged by the store's health, once a minute at most
            store.db.health.failed(exc)


async def _heartbeat(config: Config, running: Running) -> None:
    """Rewrite the status file every :data:`HEARTBEAT_S` seconds, and at once when a
    task fails or the store starts failing or is back: the process, its tasks' liveness,
    each relay session's state and the store's."""
    while True:
        try:
            counts = {"open_items": running.store.items.open_count(),
                      "outbox": running.store.outbox.depth()}
        except StoreError:  # said by the store's health, in the status too
            counts = {}
        try:
            write_status(config.status_path, {
                "pid": os.getpid(),
                "tasks": running.supervisor.liveness(),
                "relays": [
                    {"url": s.url, "connected": s.connected, "alive": running.relays.alive(s.url),
                     "since": s.since.timestamp() if s.since else None}
                    for s in running.relays.statuses()
                ],
                "store": {**running.store.db.health.status(),
                          "database": running.store.location, "schema": SCHEMA_VERSION},
                **_replica_status(running.replica),
                **counts,
            })
        except OSError as exc:
            log.warning("could not write the status file %s: %s", config.status_path, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(running.supervisor.changed.wait(), HEARTBEAT_S)
        running.supervisor.changed.clear()


def _replica_status(replica: Replica | None) -> dict[str, object]:
    """Which replica this is and which one leads, as the status file says it (nothing
    with SQLite, where the one process leads)."""
    if replica is None or not replica.shared:
        return {}
    return {"replica": {"name": replica.name, "leader": replica.leader}}


async def _log_error(update: object, context: object) -> None:
    error = getattr(context, "error", None)
    log.error("error while handling an update: %s", type(error).__name__,
              exc_info=error if isinstance(error, BaseException) else None)


def settle_memory() -> None:
    """Once the bot runs: what the process holds by then (modules, templates, the
    libraries' state) lives as long as it does, so the garbage collector stops walking it
    in every full collection (a pause of tens of milliseconds that any tap could wait
    for); and large envelopes' buffers are reused, not mapped afresh (:mod:`bot.heap`)."""
    gc.collect()
    gc.freeze()
    keep_large_buffers()


async def run_until_signalled(
    config: Config, *, on_start: OnStart | None = None, supervisor: Supervisor | None = None
) -> None:
    """Run the bot until SIGTERM or SIGINT; :class:`BotFailed` (exit 1) when a task is
    given up on."""
    async with Bot(config, on_start=on_start, supervisor=supervisor) as running:
        settle_memory()
        failed = asyncio.ensure_future(running.supervisor.failed.wait())
        stopped = asyncio.ensure_future(until_signalled())
        await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        failed.cancel()
        stopped.cancel()
        if running.supervisor.reason is not None:
            raise BotFailed(f"stopping: {running.supervisor.reason}")
        log.info("stopping")

