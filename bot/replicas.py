"""Several ``skald-telegram run`` processes on one PostgreSQL database: every replica
handles Telegram's updates, one of them (the leader) holds the relay sessions and the
workers that post and edit cards.

Leading is a lease in the database (:mod:`bot.store.leases`) that runs out
:attr:`Replica.lease_s` seconds after its last renewal; its holder renews it three times
as often, and another replica takes it over once it ran out. A leader that finds another
replica holding the lease (it could not reach the database for longer than the lease)
exits, and its service manager starts it again as a follower: while it could not reach
the database it could not change the state either. Each replica also renews a lease of
its own, which keeps its claims on held updates standing.

With the SQLite file there is one process: it leads, and nothing is written for it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Final

from bot.clock import Clock
from bot.errors import StoreError, StoreUnavailable
from bot.store import Store
from bot.store.leases import LEADER, replica_lease

log = logging.getLogger(__name__)

LEASE_S: Final = 3.0
"""How long a lease lasts after its last renewal, unless ``[replica] lease_seconds`` says."""
RENEWALS: Final = 3
"""Renewals within one lease's time."""


def default_name() -> str:
    """``host:pid``: unique among the replicas of one database."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Replica:
    """This process among the replicas sharing its database."""

    def __init__(self, store: Store, name: str, *, lease_s: float = LEASE_S,
                 clock: Clock) -> None:
        self.name = name
        self.lease_s = lease_s
        self._store = store
        self._clock = clock
        self._shared = store.db.shared
        self.leader: str | None = name if not self._shared else None
        """Who led at the last look (this replica's own name with SQLite)."""
        self.others = 0
        """How many other replicas were alive at the last renewal."""

    @property
    def shared(self) -> bool:
        """Whether other replicas may share the database."""
        return self._shared

    @property
    def leads(self) -> bool:
        return self.leader == self.name

    @property
    def every_s(self) -> float:
        """How often the leases are renewed."""
        return self.lease_s / RENEWALS

    def renew(self) -> bool:
        """Renew this replica's lease, and take or renew the leader's: whether it leads.
        :class:`StoreUnavailable` when the database cannot say."""
        if not self._shared:
            return True
        now, ttl = self._clock.now_ms(), int(self.lease_s * 1000)
        with self._store.transaction(durable=False):
            self._store.leases.renew(replica_lease(self.name), self.name, now, ttl)
            self.leader = self._store.leases.take(LEADER, self.name, now, ttl)
            self.others = max(self._store.leases.alive(now) - 1, 0)
        return self.leads

    async def keep(self, *, on_lead: Callable[[], None], on_lost: Callable[[str], None],
                   tick: Callable[[], None]) -> None:
        """Renew the leases forever: ``on_lead`` once this replica takes the lead,
        ``on_lost`` (with why) when it cannot keep it, ``tick`` after each renewal."""
        while True:
            led = self.leads
            try:
                leads = self.renew()
            except StoreUnavailable as exc:
                # Waited out: a leader that cannot reach the database cannot change it
                # either, and finds out whether it still leads once it reaches it again.
                log.debug("cannot renew the leases (%s)", exc)
            else:
                if leads and not led:
                    log.info("replica %s leads", self.name)
                    on_lead()
                elif led and not leads:
                    on_lost(f"replica {self.leader} took the leader's lease")
                    return
                tick()
            await self._clock.sleep(self.every_s)

    def release(self) -> None:
        """Stopping: let another replica lead at once, and its claims be taken over."""
        if not self._shared:
            return
        try:
            with self._store.transaction(durable=False):
                self._store.leases.release(LEADER, self.name)
                self._store.leases.release(replica_lease(self.name), self.name)
        except StoreUnavailable as exc:
            log.warning("could not give up the leases (%s): another replica takes over once "
                        "they run out", exc)


def only_process(path: Path) -> int:
    """Hold the SQLite file ``path`` for this process (an exclusive ``flock`` on it, kept
    until the returned descriptor is closed): a second ``run`` on the same file is refused,
    in one line, since replicas need PostgreSQL."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"another skald-telegram run uses {path}; several replicas need "
                         "PostgreSQL ([storage] url)") from exc
    return fd
