"""Which connections the relay holds: counted per network address before and after
authentication, and in all (:class:`bot.relay.limits.ConnectionLimits`).

An IPv6 address counts by its /64 (:func:`address_key`): one host usually has the whole
block, so counting single addresses would not bound it.
"""

from __future__ import annotations

import ipaddress
from collections import Counter

from bot.relay.limits import ConnectionLimits
from bot.relay.refusals import WarningBudget


class Admission:
    """Counts connections per address and decides which may stay."""

    def __init__(self, limits: ConnectionLimits, warnings: WarningBudget) -> None:
        self._limits = limits
        self._warnings = warnings
        self.total = 0
        self._unauthenticated: Counter[str] = Counter()
        self._authenticated: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        """Count a new connection, or refuse it (``False``) when a limit is reached."""
        if self.total >= self._limits.total:
            self._warnings.warn("refused a connection from %s: %d open", address, self.total)
            return False
        if self._unauthenticated[address] >= self._limits.unauthenticated_per_address:
            self._warnings.warn(
                "refused a connection from %s: %d unauthenticated connections from there",
                address,
                self._unauthenticated[address],
            )
            return False
        self.total += 1
        self._unauthenticated[address] += 1
        return True

    def authenticate(self, address: str, *, replacing: bool) -> bool:
        """Count a connection as a session; ``False`` when its address has too many.
        A session replacing one of the same id from the same address always may."""
        if not replacing and self._authenticated[address] >= self._limits.authenticated_per_address:
            self._warnings.warn(
                "refused a session from %s: %d sessions from there",
                address,
                self._authenticated[address],
            )
            return False
        self._drop(self._unauthenticated, address)
        self._authenticated[address] += 1
        return True

    def release(self, address: str, *, authenticated: bool) -> None:
        self.total -= 1
        self._drop(self._authenticated if authenticated else self._unauthenticated, address)

    @staticmethod
    def _drop(counter: Counter[str], address: str) -> None:
        counter[address] -= 1
        if counter[address] <= 0:
            del counter[address]


def address_key(peer: object) -> str:
    """The address a connection counts against: its IP, or the /64 of an IPv6 address."""
    host = peer[0] if isinstance(peer, tuple) and peer else peer
    try:
        address = ipaddress.ip_address(str(host))
    except ValueError:
        return str(host)
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
