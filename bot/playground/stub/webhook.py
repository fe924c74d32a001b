"""The stand-in's webhook: once ``setWebhook`` names a URL, the world's updates are posted
there one by one, as Telegram does, instead of waiting for ``getUpdates``.

Each post carries the secret in ``X-Telegram-Bot-Api-Secret-Token``; an update leaves the
queue only when the answer is a 2XX, and is posted again after :attr:`retry_s` otherwise.
Telegram posts only to https; a test reaches a bot on loopback the way a TLS-terminating
reverse proxy would: :attr:`forward_to` replaces the URL's scheme and host.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from bot.playground.stub.errors import ApiError, bad_request
from bot.playground.stub.world import World

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")
_ACTIVE = ("Conflict: can't use getUpdates method while webhook is active; use "
           "deleteWebhook to delete the webhook first")
_IDLE_WAIT_S = 3600.0


class Delivery(NamedTuple):
    """One post of an update and the webhook's answer (0: no answer at all)."""

    update_id: int
    status: int


class Webhook:
    """The webhook Telegram keeps for the bot, and the task that posts to it."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.url = ""
        self.secret: str | None = None
        self.allowed: frozenset[str] | None = None
        self.forward_to: str | None = None
        """``http://host:port`` that stands for the URL's ``https://host`` (the proxy)."""
        self.spread_to: list[str] = []
        """Like :attr:`forward_to`, several: posts go to each in turn, as a load balancer
        in front of replicas sends them (one left unanswered goes to the next)."""
        self._turn = 0
        self.retry_s = 0.1
        self.deliveries: list[Delivery] = []
        self._task: asyncio.Task[None] | None = None

    def set(self, params: dict[str, Any], default_types: frozenset[str]) -> None:
        """``setWebhook``: check what Telegram checks, then post from now on."""
        url = params.get("url") or ""
        if not url:
            self.delete(drop_pending=bool(params.get("drop_pending_updates")))
            return
        if urlsplit(str(url)).scheme != "https":
            raise bad_request("bad webhook: An HTTPS URL must be provided for webhook")
        secret = params.get("secret_token")
        if secret is not None and not _SECRET.fullmatch(str(secret)):
            raise bad_request("secret token contains unallowed characters")
        allowed = params.get("allowed_updates")
        if params.get("drop_pending_updates"):
            self.world.updates.clear()
        self.url, self.secret = str(url), secret
        if isinstance(allowed, list):
            self.allowed = frozenset(allowed) or default_types
        elif self.allowed is None:
            self.allowed = default_types
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._post_forever())

    def delete(self, *, drop_pending: bool = False) -> None:
        """``deleteWebhook``: updates wait for ``getUpdates`` again."""
        self.url, self.secret = "", None
        if drop_pending:
            self.world.updates.clear()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def refuse_polling(self) -> None:
        """``getUpdates`` is refused while a webhook is set."""
        if self.url:
            raise ApiError(409, _ACTIVE)

    def info(self) -> dict[str, Any]:
        """``getWebhookInfo``."""
        info: dict[str, Any] = {"url": self.url, "has_custom_certificate": False,
                                "pending_update_count": len(self.world.updates)}
        if self.url and self.allowed is not None:
            info["allowed_updates"] = sorted(self.allowed)
        return info

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _post_forever(self) -> None:
        world = self.world
        async with httpx.AsyncClient(timeout=10) as client:
            while not world.closing:
                update = self._next()
                if update is None:
                    await world.changed.wait_until(
                        lambda: world.closing or self._next() is not None, _IDLE_WAIT_S)
                    continue
                status = await self._post(client, update)
                self.deliveries.append(Delivery(update["update_id"], status))
                world.changed.fire()
                if 200 <= status < 300:
                    if update in world.updates:
                        world.updates.remove(update)
                else:
                    await asyncio.sleep(self.retry_s)

    def _next(self) -> dict[str, Any] | None:
        """The oldest update to post; those of types not asked for are dropped."""
        allowed = self.allowed or frozenset()
        while self.world.updates:
            update = self.world.updates[0]
            if next((k for k in update if k != "update_id"), "") in allowed:
                return update
            self.world.updates.pop(0)
        return None

    async def _post(self, client: httpx.AsyncClient, update: dict[str, Any]) -> int:
        parts = urlsplit(self.url)
        target = self.url
        if self.spread_to:
            self._turn += 1
            base = self.spread_to[self._turn % len(self.spread_to)]
            target = base.rstrip("/") + (parts.path or "/")
        elif self.forward_to:
            target = self.forward_to.rstrip("/") + (parts.path or "/")
        headers = {SECRET_HEADER: self.secret} if self.secret is not None else {}
        try:
            response = await client.post(target, json=update, headers=headers)
        except httpx.HTTPError:
            return 0
        return response.status_code
