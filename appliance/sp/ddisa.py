"""DDISA discovery for service-provider login: which IdP logs in users of an e-mail domain.

A plain library for the SP login that arrives later (it will call `discover_idp` with its
`[sp]` settings); no hook, no config of its own yet.

TXT record at ``_ddisa.<domain>``: ``v=ddisa1`` then ``key=value`` pairs separated by ``;``
and/or whitespace (both the peer's ``v=ddisa1 idp=...; mode=...`` and the spec repo's
``v=ddisa1; idp=...`` forms). The lowest ``priority`` wins; ``idp`` must be an https URL
without credentials (http only when the operator allows it, for tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

MODES = ("open", "allowlist-admin", "allowlist-user", "deny")
_PAIR_SPLIT = re.compile(r"[;\s]+")


@dataclass(frozen=True)
class DdisaRecord:
    idp: str
    mode: str | None
    priority: int


def valid_idp_url(url: str, *, allow_http: bool = False) -> bool:
    if not url or any(ord(c) < 0x21 or ord(c) > 0x7E for c in url):
        return False  # printable ASCII only: no homographs, no spaces
    parts = urlsplit(url)
    if parts.scheme != "https" and not (allow_http and parts.scheme == "http"):
        return False
    return bool(parts.hostname) and parts.username is None and parts.password is None and not parts.fragment


def parse_record(text: str, *, allow_http: bool = False) -> DdisaRecord | None:
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
    mode = values.get("mode")
    try:
        priority = int(values.get("priority", "10"))
    except ValueError:
        priority = 10
    return DdisaRecord(idp=idp, mode=mode if mode in MODES else None, priority=priority)


def choose(records: list[DdisaRecord]) -> DdisaRecord | None:
    return min(records, key=lambda r: r.priority) if records else None


def lookup(domain: str, *, nameservers: list[str] | None = None, allow_http: bool = False, timeout: float = 3.0) -> DdisaRecord | None:
    import dns.exception
    import dns.resolver

    resolver = dns.resolver.Resolver(configure=not nameservers)
    if nameservers:
        hosts, port = [], 53
        for ns in nameservers:
            host, _, maybe_port = ns.rpartition(":") if ns.count(":") == 1 else (ns, "", "")
            hosts.append(host or ns)
            if maybe_port.isdigit():
                port = int(maybe_port)
        resolver.nameservers = hosts
        resolver.port = port
    resolver.lifetime = timeout
    try:
        answer = resolver.resolve(f"_ddisa.{domain}", "TXT")
    except (dns.exception.DNSException, OSError):
        return None
    records = []
    for rdata in answer:
        text = b"".join(rdata.strings).decode("utf-8", "replace")
        record = parse_record(text, allow_http=allow_http)
        if record:
            records.append(record)
    return choose(records)


def discover_idp(
    email: str,
    *,
    nameservers: list[str] | None = None,
    allow_http: bool = False,
    fallback_idp: str | None = None,
    timeout: float = 3.0,
) -> str | None:
    """The IdP base URL that logs in users with this e-mail: the domain's DDISA record (unless its
    mode is "deny"), else the fallback IdP, else None."""
    domain = email.rpartition("@")[2].lower()
    if not domain:
        return None
    record = lookup(domain, nameservers=nameservers, allow_http=allow_http, timeout=timeout)
    if record and record.mode != "deny":
        return record.idp
    return fallback_idp or None
