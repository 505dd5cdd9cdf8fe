"""The rules of every fetch grantd makes for a caller (D12): a domain client's metadata
(``grantd.services.clients``) and an IdP's discovery document, JWKS and token endpoint during SP login
(``grantd.sp.fetch``). An unauthenticated caller names what is fetched, so the fetch must never
hold a request (or a connection slot) for longer than grantd decides:

- **one overall deadline** (``DEADLINE_S``, 5 s) for the whole fetch — resolution, connection,
  headers and every byte of the body. Per-read timeouts alone let a server that drips one byte
  every few seconds hold a request for days.
- **a bound on how many run at once** in one process (``limits.outbound_fetches``): one more is
  refused at once with ``Busy`` (a clear error for the caller), never queued.
- **failures remembered per registrable domain** (``FetchGuard.failed``): a domain whose fetch
  failed is not asked again for ``oauth.metadata_failure_ttl`` seconds, under any of its names
  (wildcard DNS makes endless client_ids of one domain). IP literals and ``localhost`` count per
  ``host:port``.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grantd.core.clock import Clock

DEADLINE_S = 5.0
MAX_REMEMBERED = 2000
# Second-level labels under which, in a two-letter country domain, names are registered one level
# deeper (example.co.uk, example.com.au): a small, conservative stand-in for the public suffix list,
# erring towards the longer (more specific) domain.
_SECOND_LEVEL = frozenset(
    {
        "ac",
        "co",
        "com",
        "edu",
        "gov",
        "govt",
        "ltd",
        "me",
        "mil",
        "ne",
        "net",
        "nic",
        "or",
        "org",
        "plc",
        "sch",
    }
)


class Busy(Exception):
    """Too many fetches are running in this process: this one is refused, not queued."""


def registrable_domain(host: str, port: int | None = None) -> str:
    """The name a fetch failure is remembered under: the registrable domain of a DNS name
    (``a.b.example.com`` -> ``example.com``; ``x.example.co.uk`` -> ``example.co.uk``); an IP
    literal or ``localhost`` with its port (tests run many servers on one address)."""
    name = host.strip("[]").rstrip(".").lower()
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
        return f"{name}:{port}" if port else name
    except ValueError:
        pass
    labels = [label for label in name.split(".") if label]
    if len(labels) <= 1:
        return f"{name}:{port}" if port else name
    keep = 3 if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in _SECOND_LEVEL else 2
    return ".".join(labels[-keep:])


class FetchGuard:
    """One per server process, shared by every fetch made for a caller (module docstring)."""

    def __init__(self, clock: Clock, *, at_once: int, failure_ttl_s: int, deadline_s: float = DEADLINE_S):
        self.clock = clock
        self.at_once = at_once
        self.failure_ttl_ms = failure_ttl_s * 1000
        self.deadline_s = deadline_s
        self.running = 0
        self._failed: OrderedDict[str, tuple[int, str]] = OrderedDict()  # domain -> (until ms, why)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Run the body as one fetch: ``Busy`` when ``at_once`` fetches run already, ``TimeoutError``
        when the body is not done within the deadline (it is cancelled)."""
        if self.running >= self.at_once:
            raise Busy(f"too many fetches at once ({self.at_once}); try again in a moment")
        self.running += 1
        try:
            async with asyncio.timeout(self.deadline_s):
                yield
        finally:
            self.running -= 1

    def failed(self, domain: str) -> str | None:
        """Why ``domain``'s last fetch failed, while that is remembered; else None."""
        entry = self._failed.get(domain)
        if entry is None:
            return None
        if entry[0] <= self.clock.now_ms():
            del self._failed[domain]
            return None
        return entry[1]

    def remember_failure(self, domain: str, why: str) -> None:
        if self.failure_ttl_ms <= 0:
            return
        self._failed[domain] = (self.clock.now_ms() + self.failure_ttl_ms, why)
        self._failed.move_to_end(domain)
        while len(self._failed) > MAX_REMEMBERED:
            self._failed.popitem(last=False)

    def forget_failure(self, domain: str) -> None:
        self._failed.pop(domain, None)


__all__ = ["DEADLINE_S", "Busy", "FetchGuard", "registrable_domain"]
