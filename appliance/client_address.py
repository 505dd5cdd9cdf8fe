"""Which address a request comes from, behind trusted reverse proxies (`server.trusted_proxies`).

The client address is the TCP peer, unless the peer is a trusted proxy: then it is read from
``X-Forwarded-For``, walking from the right (the hop the trusted peer itself added) and skipping
every address that is itself a trusted proxy. The first untrusted address is the client; a
proxy chain made only of trusted hops yields the leftmost one. Anything malformed in the part
of the header that is read (an entry that is not an IP address) makes the answer the peer: a
header we cannot read is never better evidence than the connection itself. Entries left of the
first untrusted one are never read, as a client may have written them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(values: Iterable[str]) -> tuple[tuple[Network, ...], list[str]]:
    """Parse IP addresses and CIDR networks ("10.0.0.1", "10.0.0.0/8", "::1", "fd00::/8").

    Returns the networks and a list of problems, one per value that is neither (a network with
    host bits set, such as "10.0.0.1/8", is one of them: it is most likely a typo).
    """
    networks: list[Network] = []
    problems: list[str] = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=True))
        except ValueError as exc:
            problems.append(f"{value!r} is not an IP address or CIDR network ({exc})")
    return tuple(networks), problems


def _address(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # "[2001:db8::1]" or "[2001:db8::1]:443"
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:  # "192.0.2.1:443"
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, trusted: Sequence[Network]) -> bool:
    return any(address.version == net.version and address in net for net in trusted)


def client_address(peer: str, forwarded_for: str | None, trusted: Sequence[Network]) -> str:
    """The client's address: ``peer`` unless it is trusted and ``X-Forwarded-For`` says otherwise."""
    peer_address = _address(peer)
    if peer_address is None or not trusted or not forwarded_for or not _trusted(peer_address, trusted):
        return peer
    hops = forwarded_for.split(",")
    if len(hops) > 64:  # more hops than any real proxy chain: not worth reading
        return peer
    found: Address | None = None
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            return peer
        found = address
        if not _trusted(address, trusted):
            break
    return str(found) if found is not None else peer


def parse_nameserver(value: str) -> tuple[str, int] | None:
    """``"10.0.0.1"``, ``"10.0.0.1:5353"``, ``"::1"`` or ``"[::1]:5353"`` -> (address, port)."""
    value = value.strip()
    host, port = value, 53
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        if rest:
            if not rest[1:].isdigit():
                return None
            port = int(rest[1:])
    elif value.count(":") == 1:
        host, _, raw = value.partition(":")
        if not raw.isdigit():
            return None
        port = int(raw)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return (host, port) if 0 < port < 65536 else None
