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

import functools
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


@functools.lru_cache(maxsize=4096)  # a pure function of its arguments, asked on every counted request
def limit_key(address: str, ipv6_prefix: int) -> str:
    """What per-address limits count for a client address (D12): an IPv4 address as it is (an
    IPv4-mapped IPv6 address as its IPv4 address), an IPv6 address as the network of its first
    ``ipv6_prefix`` bits (``2001:db8:1:2::/64``): one IPv6 client usually owns a whole /64 and may
    use every address in it. Anything that is not an IP address is its own key."""
    found = _address(address)
    if found is None:
        return address
    if isinstance(found, ipaddress.IPv6Address) and ipv6_prefix < 128:
        return str(ipaddress.IPv6Network((found, ipv6_prefix), strict=False))
    return str(found)


def shared_address_warning(peer: str, proxy_headers: bool) -> str | None:
    """With no ``server.trusted_proxies``: the warning to log (once per process) when a request's
    peer suggests that many clients reach grantd through one address — a reverse proxy or a NAT —
    so they share every per-address limit; None when it does not. Decided on:

    - a private (RFC 1918, unique-local, link-local, ...) peer that is not loopback: a proxy or NAT
      on the network, or clients on a LAN (worth one line either way);
    - a loopback peer only when the request carries a proxy's header (``X-Forwarded-For``,
      ``Forwarded``, ``X-Real-IP``): a reverse proxy on this host. Plain loopback requests are
      local use (development, tests, a CLI on the server) and warn nothing;
    - a public peer: nothing (each client is its own address)."""
    address = _address(peer)
    if address is None or not address.is_private:
        return None
    if address.is_loopback and not proxy_headers:
        return None
    return (
        f"requests come from the private address {address} and server.trusted_proxies is empty: if a reverse "
        "proxy or NAT is in front of grantd, all its clients share that address's limits (and its failed-bearer "
        "budget); list the proxy in server.trusted_proxies"
    )


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
