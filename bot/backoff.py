"""Exponential backoff, the one rule of every loop that tries again after a failure.

The first wait is ``initial_s``; each failure in a row doubles it, up to ``max_s``. With
``jitter``, each wait is drawn between half and all of that, so that clients that failed
together do not come back together. Pure: the loop sleeps (on its clock) and says when it
went well again (:meth:`Retries.reset`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

_MAX_DOUBLINGS: Final = 64
"""Beyond this many doublings any delay is past its cap (and 2.0 ** n still a float)."""


@dataclass(frozen=True)
class Backoff:
    """How long to wait after failures in a row."""

    initial_s: float
    max_s: float
    jitter: bool = False

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row (at least one), before jitter."""
        doublings = min(max(failures, 1) - 1, _MAX_DOUBLINGS)
        return min(self.initial_s * 2.0**doublings, self.max_s)


class Retries:
    """One loop's failures in a row, and the wait each one calls for."""

    def __init__(
        self, backoff: Backoff, *, draw: Callable[[float, float], float] = random.uniform
    ) -> None:
        self.backoff = backoff
        self.failures = 0
        self._draw = draw

    def next_delay(self) -> float:
        """Count a failure; the wait before the next try."""
        self.failures += 1
        delay = self.backoff.delay(self.failures)
        return self._draw(delay / 2, delay) if self.backoff.jitter else delay

    def reset(self) -> None:
        """It went well: the next failure waits ``initial_s`` again."""
        self.failures = 0
