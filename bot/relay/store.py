"""The seam between the relay and where its queue lives: SQLite in the data folder (the
default, :class:`bot.relay.queue.RelayQueue`) or a PostgreSQL database that several relay
nodes share (:class:`bot.relay.pgqueue.PostgresQueue`).

Both keep the same meaning (per-recipient queues oldest first, acknowledgement deletes,
the limits of :class:`bot.relay.limits.QueueLimits`); the writer and the sessions only
use what :class:`QueueStore` names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Protocol

from bot.errors import RelayError
from bot.relay.limits import QueueLimits
from bot.relay.queue import Applied, Batch, Queued, RelayQueue

POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
MISSING_EXTRA: Final = ("a relay on PostgreSQL needs the PostgreSQL extra: "
                        "pip install 'skald-telegram[postgresql]'")


class QueueStore(Protocol):
    """What the relay asks of its queue. ``apply`` and ``purge`` run in a worker thread,
    one at a time; ``load`` runs on the event loop; ``pending`` anywhere."""

    def apply(self, batch: Batch, now_ms: int) -> Applied: ...

    def pending(
        self, recipient: str, *, after_seq: int = 0, limit: int = 100, max_bytes: int = ...
    ) -> list[Queued]: ...

    async def load(
        self, recipient: str, *, after_seq: int, limit: int, max_bytes: int
    ) -> list[Queued]: ...

    def purge(self, older_than_ms: int, *, unseen_older_than_ms: int | None = None) -> int: ...

    def close(self) -> None: ...


def is_postgres(store: str | None) -> bool:
    """Whether ``--store`` names a PostgreSQL database."""
    return store is not None and store.startswith(POSTGRES_SCHEMES)


def check_store(store: str | None) -> None:
    """Refuse a ``--store`` that is neither empty nor a PostgreSQL URL, in one line."""
    if store is not None and not is_postgres(store):
        raise RelayError(f"--store must be a postgresql:// URL (got {store.split(':', 1)[0]}:…)")


def open_store(data_dir: Path, store: str | None, limits: QueueLimits) -> QueueStore:
    """The queue in PostgreSQL when ``store`` is its URL, else in SQLite in ``data_dir``."""
    if not is_postgres(store):
        return RelayQueue.open(data_dir, limits=limits)
    assert store is not None
    try:
        from bot.relay.pgqueue import PostgresQueue
    except ImportError as exc:
        raise RelayError(MISSING_EXTRA) from exc
    return PostgresQueue.open(store, limits=limits)
