"""What ``ask`` and the hooks say on stderr while a request waits for a person: the line
that it waits (only when stderr is a terminal, since an agent may show a hook's stderr),
and, when no paired device has picked the request up after a while, which devices there
are and when each was last seen.

The wait itself stays with each caller (``ask`` waits with the blocking client, the hooks
with the asynchronous one); this module decides what to say and when.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, TextIO

from bot.render.credentials import mask_credentials

if TYPE_CHECKING:
    from skald_telegram import Outcome

NOTICE_AFTER_S: Final = 15.0
"""Seconds a request may wait unseen by every device before the caller is told."""
NOTICE_SETTING: Final = "SKALD_PICKUP_NOTICE_S"
"""The environment variable that changes :data:`NOTICE_AFTER_S`."""


def ago(when: str, now: datetime) -> str:
    """``when`` (RFC 3339) relative to ``now``, in the largest unit that fits."""
    seconds = max(0, int((now - datetime.fromisoformat(when)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def last_seen(device: Mapping[str, Any], now: datetime) -> str:
    """One device's name and when it was last seen."""
    when = device.get("last_seen")
    seen = f"last seen {ago(when, now)}" if isinstance(when, str) else "not seen since pairing"
    return f"{device.get('name')} {seen}"


def not_picked_up(devices: list[Mapping[str, Any]], now: datetime) -> str:
    """The line for a request no paired device has picked up yet."""
    if not devices:
        return "not picked up by any device yet; no device is paired"
    return "not picked up by any device yet; " + ", ".join(
        last_seen(device, now) for device in devices
    )


def notice_after() -> float:
    """:data:`NOTICE_AFTER_S`, or the number of seconds in ``$SKALD_PICKUP_NOTICE_S``."""
    raw = os.environ.get(NOTICE_SETTING, "")
    try:
        seconds = float(raw) if raw else NOTICE_AFTER_S
    except ValueError:
        return NOTICE_AFTER_S
    return seconds if 0 < seconds < float("inf") else NOTICE_AFTER_S


@dataclass
class Watch:
    """What one waiting request says on ``stream``, each line once."""

    stream: TextIO
    prefix: str
    """What each line starts with (``skald-telegram ask``)."""
    stop_when_unseen: bool = False
    """Stop waiting once it is said (``ask --require-device``)."""
    after: float = field(default_factory=notice_after)
    told: bool = False

    def waiting(self, item_id: str, summary: str, *, question: bool = False) -> None:
        """Say that the request waits, when a person reads ``stream`` (a terminal); the
        summary's credentials masked, as its card shows them."""
        if not _is_terminal(self.stream):
            return
        what = "an answer" if question else "approval"
        self._say(f"waiting for {what} in Telegram: {mask_credentials(summary)} ({item_id}); "
                  "Ctrl-C withdraws it")

    def first_wait(self, timeout: float) -> float:
        """How long to wait before looking whether a device picked the request up."""
        return min(self.after, timeout)

    def unseen(self, outcome: Outcome) -> bool:
        """Whether the request still waits and no paired device is known to hold it."""
        return outcome.pending and outcome.picked_up is False and not self.told

    def not_picked_up(self, devices: list[Mapping[str, Any]]) -> None:
        self.told = True
        self._say(not_picked_up(devices, datetime.now(UTC)))

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed stderr changes no answer
            print(f"{self.prefix}: {line}", file=self.stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):
        return False
