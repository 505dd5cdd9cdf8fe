"""Delivering CIBA pings (D16), a built-in channel of the outbox (grantd.services.notify writes a
``ciba-ping`` row with the decision of a grant a live ping-mode request made;
grantd.services.notify_delivery leases it to one process at a time and calls ``deliver``).

One ping: ``POST <notification_endpoint>`` with ``Authorization: Bearer <client_notification_token>``
and only ``{"auth_req_id": ...}``, through the SSRF guard: the host is resolved once and every
address must be public (unless ``[ciba] notification_allow`` covers the URL), the request goes to
that checked address with the host as ``Host`` and TLS server name, no redirects, 5 s. A failed
ping is a retryable failure (the outbox tries again with backoff); the client may always poll.
A ping-mode request keeps its ``auth_req_id`` with the client's token (the notification must carry
it); it is useless without the agent's private key (every /token call is ``private_key_jwt``).
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx

from grantd.hookspecs import DeliveryResult
from grantd.logs import LOGGER
from grantd.services.clients import MetadataError, public_address, resolve

if TYPE_CHECKING:
    from grantd.services.context import Services
    from grantd.store.ciba import CibaRequest

log = logging.getLogger(LOGGER)

PING_TIMEOUT = 5.0
PING_CHANNEL = "ciba-ping"  # the outbox channel of CIBA pings (built in; no [[notify.channels]] entry)


def notification_allowed(url: str, host: str, allow: Sequence[str]) -> bool:
    """Under `[ciba] notification_allow`: a CIDR holding the (literal) address, or a URL prefix of
    the same scheme, host and port whose path the URL's path continues at a "/"."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    parts = urlsplit(url)
    for entry in allow:
        if "://" not in entry:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue
            if address is not None and address.version == network.version and address in network:
                return True
            continue
        prefix = urlsplit(entry)
        if (prefix.scheme.lower(), (prefix.hostname or "").lower(), prefix.port) != (
            parts.scheme.lower(),
            host,
            parts.port,
        ):
            continue
        base = prefix.path.rstrip("/")
        if parts.path == base or parts.path.startswith(base + "/"):
            return True
    return False


def ping_token(record: CibaRequest) -> tuple[str, str] | None:
    """(auth_req_id, client_notification_token) of a ping-mode request, None for a poll one."""
    raw = record.get("notification_token")
    if not raw:
        return None
    try:
        kept = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(kept, dict) or not all(isinstance(kept.get(k), str) for k in ("auth_req_id", "token")):
        return None
    return kept["auth_req_id"], kept["token"]


def kept_for_ping(auth_req_id: str, token: str | None) -> str | None:
    return None if token is None else json.dumps({"auth_req_id": auth_req_id, "token": token})


async def deliver(services: Services, grant_id: str) -> DeliveryResult:
    """Ping every live ping-mode request of this decided grant (one outbox row of channel
    ``PING_CHANNEL``, leased to one process at a time: grantd.services.notify_delivery). A failed
    POST is a retryable failure: the outbox tries again with backoff; the client may poll meanwhile."""
    now = services.clock.now_ms()
    errors = []
    for record in await services.store.ciba.for_grant(grant_id):
        kept = ping_token(record)
        if kept is None or record["redeemed_at"] is not None or record["expires_at"] <= now:
            continue
        client = await services.store.ciba.get_client(record["agent_id"])
        if client is None:
            continue  # the agent went back to poll mode
        auth_req_id, token = kept
        try:
            await post_ping(services, client["notification_endpoint"], auth_req_id, token)
        except (MetadataError, httpx.HTTPError, OSError, ValueError) as exc:
            log.warning("CIBA ping to agent %s failed (%s); it may still poll", record["agent_id"], exc)
            errors.append(str(exc) or type(exc).__name__)
    if errors:
        return DeliveryResult.failed("the ping failed: " + errors[0], retryable=True)
    return DeliveryResult.sent()


async def post_ping(services: Services, url: str, auth_req_id: str, token: str) -> None:
    """One guarded POST of ``{auth_req_id}`` (module docstring)."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    allowed = notification_allowed(url, host, services.config.ciba.notification_allow)
    addresses = await resolve(host, port)
    if not allowed and not all(public_address(a) for a in addresses):
        raise ValueError(f"{host} resolves to a non-public address (not under [ciba] notification_allow)")
    address = addresses[0]
    literal = f"[{address}]" if ":" in address else address
    target = f"{scheme}://{literal}:{port}{parts.path or '/'}{'?' + parts.query if parts.query else ''}"
    headers = {
        "Host": parts.netloc.rpartition("@")[2],
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "User-Agent": "grantd (CIBA ping)",
    }
    extensions = {"sni_hostname": host} if scheme == "https" else {}
    async with httpx.AsyncClient(timeout=PING_TIMEOUT, follow_redirects=False, trust_env=False) as http:
        request = http.build_request(
            "POST",
            target,
            headers=headers,
            content=json.dumps({"auth_req_id": auth_req_id}),
            extensions=extensions,
        )
        response = await http.send(request)
    if response.status_code >= 300:
        raise ValueError(f"the endpoint answered {response.status_code}")


__all__ = ["PING_CHANNEL", "deliver", "kept_for_ping", "notification_allowed", "ping_token", "post_ping"]
