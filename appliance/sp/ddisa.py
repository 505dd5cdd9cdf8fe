"""DDISA discovery for service-provider login: which IdP logs in users of an e-mail domain (D9).

TXT record at ``_ddisa.<domain>``: ``v=ddisa1`` then ``key=value`` pairs separated by ``;`` and/or
whitespace — both the peer's ``v=ddisa1 idp=...; mode=...`` and the spec repo's ``v=ddisa1;
idp=...`` forms. Keys are case-insensitive, the first occurrence of a key counts; ``mode`` outside
``open|allowlist-admin|allowlist-user|deny`` is dropped; ``priority`` defaults to 10 and the lowest
wins (ties: the first record in the answer). ``idp`` must be an https URL of printable ASCII without
credentials, query or fragment (peer bug 8); http only when the operator allows it (tests). A
record that breaks any rule is ignored, as if absent.

``Discovery`` asks DNS with dnspython's async resolver (nameservers configurable, ``host`` or
``host:port``) and remembers answers: a record for at most ``dns_cache_ttl`` seconds (less when its
TTL is shorter), no record — NXDOMAIN, no TXT, no valid record, or a failed lookup — for
``dns_negative_cache_ttl`` seconds (peer bug 15: a domain without DDISA must not cost a DNS query
per login). The cache holds at most ``MAX_CACHE`` domains (oldest dropped first) and runs on the
injected clock.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from grantd.client_address import parse_nameserver
from grantd.core.clock import SYSTEM_CLOCK, Clock

MODES = ("open", "allowlist-admin", "allowlist-user", "deny")
DEFAULT_PRIORITY = 10
LAST_PRIORITY = 10**18
MAX_CACHE = 4096
_PAIR_SPLIT = re.compile(r"[;\s]+")
_DOMAIN = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


@dataclass(frozen=True)
class DdisaRecord:
    idp: str
    mode: str | None
    priority: int


def valid_idp_url(url: str, *, allow_http: bool = False) -> bool:
    """An IdP (issuer) URL we may send people to: https (http only if allowed), a host, printable
    ASCII only (no homographs, spaces or controls), no user:password@, no query, no fragment."""
    if not url or len(url) > 2048 or any(ord(c) < 0x21 or ord(c) > 0x7E for c in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return False
    if parts.scheme != "https" and not (allow_http and parts.scheme == "http"):
        return False
    if "@" in parts.netloc or parts.query or parts.fragment or "?" in url or "#" in url:
        return False
    return bool(parts.hostname)


def parse_record(text: str, *, allow_http: bool = False) -> DdisaRecord | None:
    """One TXT string as a record, or None when it is not a valid ``v=ddisa1`` record."""
    tokens = [t for t in _PAIR_SPLIT.split(text.strip()) if t]
    if not tokens or tokens[0].lower() != "v=ddisa1":
        return None
    values: dict[str, str] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if sep and key.lower() not in values:
            values[key.lower()] = value
    idp = values.get("idp", "").rstrip("/")
    if not valid_idp_url(idp, allow_http=allow_http):
        return None
    mode = values.get("mode", "").lower() or None
    raw_priority = values.get("priority", "")
    if raw_priority.isascii() and raw_priority.isdigit():
        priority = (
            int(raw_priority) if len(raw_priority) <= 18 else LAST_PRIORITY
        )  # huge: still after the others
    else:
        priority = DEFAULT_PRIORITY  # absent, negative or not a number
    return DdisaRecord(idp=idp, mode=mode if mode in MODES else None, priority=priority)


def choose(records: Sequence[DdisaRecord]) -> DdisaRecord | None:
    """The lowest priority wins; among equals the first."""
    return min(records, key=lambda r: r.priority) if records else None


def email_domain(email: str) -> str | None:
    """The e-mail's domain, lowercased, as a DNS name we may query (IDNA for non-ASCII), or None."""
    domain = email.rpartition("@")[2].strip().rstrip(".").lower()
    if not domain:
        return None
    try:
        domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        return None
    return domain if _DOMAIN.match(domain) else None


class Discovery:
    """DDISA lookups with a bounded TTL cache (positive and negative answers)."""

    def __init__(
        self,
        nameservers: Sequence[str] = (),
        *,
        allow_http: bool = False,
        cache_ttl: int = 300,
        negative_ttl: int = 60,
        timeout: float = 3.0,
        clock: Clock = SYSTEM_CLOCK,
        max_entries: int = MAX_CACHE,
    ):
        self.nameservers = [ns for ns in (parse_nameserver(n) for n in nameservers) if ns is not None]
        self.allow_http = allow_http
        self.cache_ttl = cache_ttl
        self.negative_ttl = negative_ttl
        self.timeout = timeout
        self.clock = clock
        self.max_entries = max_entries
        self._cache: OrderedDict[str, tuple[int, DdisaRecord | None]] = OrderedDict()
        self._resolver: object | None = None
        self.queries = 0  # DNS queries sent (tests and metrics)

    def _make_resolver(self) -> object:
        import dns.asyncresolver
        import dns.nameserver

        resolver = dns.asyncresolver.Resolver(configure=not self.nameservers)
        if self.nameservers:
            resolver.nameservers = [
                dns.nameserver.Do53Nameserver(host, port) for host, port in self.nameservers
            ]
        resolver.lifetime = self.timeout
        resolver.timeout = self.timeout
        resolver.cache = None  # our own cache decides (it knows negative answers and the injected clock)
        return resolver

    def cached(self, domain: str) -> tuple[bool, DdisaRecord | None]:
        """(found in the cache and still fresh, the record)."""
        entry = self._cache.get(domain)
        if entry is None:
            return False, None
        if entry[0] <= self.clock.now_ms():
            del self._cache[domain]
            return False, None
        return True, entry[1]

    def _remember(self, domain: str, record: DdisaRecord | None, ttl: int) -> None:
        if ttl <= 0:
            return
        self._cache[domain] = (self.clock.now_ms() + ttl * 1000, record)
        self._cache.move_to_end(domain)
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)

    async def lookup(self, domain: str) -> DdisaRecord | None:
        """The chosen record of ``domain`` (already an ``email_domain``), or None."""
        hit, record = self.cached(domain)
        if hit:
            return record
        import dns.exception
        import dns.resolver

        self.queries += 1
        try:
            if self._resolver is None:  # (no nameservers configured and no resolv.conf: a failed lookup)
                self._resolver = self._make_resolver()
            answer = await self._resolver.resolve(f"_ddisa.{domain}.", "TXT")  # type: ignore[attr-defined]
        except (dns.exception.DNSException, OSError, ValueError):
            self._remember(domain, None, self.negative_ttl)  # NXDOMAIN, no TXT, timeout, refused
            return None
        records = []
        for rdata in answer:
            text = b"".join(rdata.strings).decode("utf-8", "replace")
            parsed = parse_record(text, allow_http=self.allow_http)
            if parsed is not None:
                records.append(parsed)
        record = choose(records)
        if record is None:
            self._remember(domain, None, self.negative_ttl)
        else:
            ttl = answer.rrset.ttl if answer.rrset is not None else self.cache_ttl
            self._remember(domain, record, min(self.cache_ttl, max(int(ttl), 0)))
        return record

    async def discover(self, email: str) -> DdisaRecord | None:
        domain = email_domain(email)
        return await self.lookup(domain) if domain else None
