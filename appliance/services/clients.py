"""OAuth clients (D9): who may ask grantd for a person's tokens, and where the answer may go.

Three sources, asked in this order by ``ClientRegistry.get``:

- **Built in**: ``apes-cli`` (the peer CLI; public; loopback redirects per RFC 8252: exactly
  ``http://localhost:9876/callback`` as apes sends it, or any port on ``127.0.0.1``, ``[::1]`` or
  ``localhost`` with the path ``/callback`` compared exactly) and ``grantd-cli`` (public, device
  grant only). Both may use grantd's API with their access tokens (``api_access``).
- **Config**: ``[[oauth.clients]]`` tables (``grantd.config.validation._oauth_clients`` checks them). A
  client with a ``client_secret`` is confidential: it authenticates at /token and /revoke with
  ``client_secret_basic`` or ``client_secret_post``, compared in constant time.
- **Domain clients**: any other ``client_id`` that is a host name (with an optional port) names an
  SP whose metadata is fetched from ``https://<client_id>/.well-known/oauth-client-metadata``.

The metadata fetch is guarded against SSRF: the host is resolved once, every address it resolves
to must be public (not loopback, private, link-local, multicast, reserved, unspecified, or an
IPv4-mapped/6to4 form of those) and the connection goes to the address that was checked (the URL
names the IP; ``Host`` and TLS SNI/certificate checks use the name), so a DNS answer that changes
between check and connect (rebinding) changes nothing. Short timeouts, a size cap, no redirects,
and the rules of every fetch made for a caller (``grantd.services.outbound``, D12): one overall
deadline of 5 s, a bound on fetches at once (``oauth.fetches_at_once``: one more is refused, not
queued), and a failed fetch keeps its whole registrable domain from being fetched again for
``oauth.metadata_failure_ttl`` seconds.
``oauth.allow_private_metadata_hosts`` (tests only) lifts the address rule and allows http.
The document is validated (its ``client_id`` must be the one asked for, redirect URIs absolute
http(s) without userinfo or fragment, text bounded: peer bugs 11, 12) and cached, successes and
failures alike, for ``oauth.metadata_cache_ttl`` seconds.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import re
import socket
import ssl
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from grantd.logs import LOGGER
from grantd.services.outbound import Busy, FetchGuard, registrable_domain

if TYPE_CHECKING:
    from grantd.config import Config
    from grantd.core.clock import Clock

log = logging.getLogger(LOGGER)

APES_CLI = "apes-cli"
GRANTD_CLI = "grantd-cli"
APES_REDIRECT = "http://localhost:9876/callback"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
CODE_GRANTS = ("authorization_code", "refresh_token")
ID_TOKEN_ALGS = ("EdDSA", "ES256", "RS256")

METADATA_PATH = "/.well-known/oauth-client-metadata"
METADATA_MAX_BYTES = 64 * 1024
METADATA_TIMEOUT = httpx.Timeout(3.0, connect=2.0)
MAX_REDIRECT_URIS = 20
MAX_URI = 2000
MAX_NAME = 200
CACHE_ENTRIES = 2000
# host[:port] of a domain client: DNS labels (at least one dot, or "localhost" for tests), optional port
_DOMAIN_ID = re.compile(
    r"^(?=.{1,253}(?::\d{1,5})?$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?::\d{1,5})?$"
    r"|^localhost(?::\d{1,5})?$"
)


class MetadataError(Exception):
    """Why a domain client's metadata could not be used (safe to show: no response bodies)."""


@dataclass(frozen=True)
class Client:
    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    public: bool = True
    api_access: bool = False
    id_token_alg: str = "EdDSA"  # noqa: S105 - an algorithm name, not a secret
    grant_types: tuple[str, ...] = CODE_GRANTS
    loopback: bool = False  # RFC 8252: any port on a loopback host, path compared exactly
    source: str = "domain"  # builtin | config | domain
    client_uri: str | None = None
    secret: str | None = field(default=None, repr=False)

    def redirect_allowed(self, uri: str) -> bool:
        """Exact match against the registered URIs (peer bug 11); for a loopback client also any port
        of a loopback host with the registered path and query."""
        if uri in self.redirect_uris:
            return True
        if not self.loopback or len(uri) > MAX_URI or not uri.isprintable() or " " in uri:
            return (
                False  # urlsplit drops tabs and newlines silently: a URI carrying them is not the one checked
            )
        try:
            parts = urlsplit(uri)
            port = parts.port
        except ValueError:
            return False
        if (
            parts.scheme != "http"
            or parts.hostname not in LOOPBACK_HOSTS
            or parts.fragment
            or "@" in parts.netloc
        ):
            return False
        if port is None or not parts.netloc.lower().endswith(f":{port}"):
            return False
        for registered in self.redirect_uris:
            known = urlsplit(registered)
            if known.path == parts.path and known.query == parts.query:
                return True
        return False

    def check_secret(self, presented: str | None) -> bool:
        """A confidential client's secret, compared in constant time (digests: length does not leak)."""
        if self.secret is None or presented is None:
            return False
        import hashlib

        return hmac.compare_digest(
            hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest(),
            hashlib.sha256(self.secret.encode()).digest(),
        )


def builtin_clients() -> dict[str, Client]:
    return {
        APES_CLI: Client(
            APES_CLI,
            "apes (OpenApe CLI)",
            (APES_REDIRECT,),
            public=True,
            api_access=True,
            loopback=True,
            source="builtin",
        ),
        GRANTD_CLI: Client(
            GRANTD_CLI,
            "grantd (terminal)",
            (),
            public=True,
            api_access=True,
            grant_types=(DEVICE_GRANT, "refresh_token"),
            source="builtin",
        ),
    }


def config_clients(config: Config) -> dict[str, Client]:
    found: dict[str, Client] = {}
    for table in config.oauth.clients:
        secret = table.get("client_secret")
        found[table["client_id"]] = Client(
            table["client_id"],
            table["name"],
            tuple(table["redirect_uris"]),
            public=secret is None,
            api_access=bool(table["api_access"]),
            id_token_alg=table["id_token_signed_response_alg"],
            source="config",
            secret=secret,
        )
    return found


def domain_of(client_id: str) -> str:
    """The registrable domain a domain client's fetch failures are remembered under."""
    if is_cimd_client_id(client_id):
        parts = urlsplit(client_id)
        return registrable_domain(str(parts.hostname), parts.port)
    host, _, port = client_id.partition(":")
    return registrable_domain(host, int(port) if port.isdigit() else None)


def is_domain_client_id(client_id: str) -> bool:
    return client_id == client_id.lower() and bool(_DOMAIN_ID.match(client_id))


MAX_CIMD_ID = 512


def is_cimd_client_id(client_id: str) -> bool:
    """A Client ID Metadata Document URL (D17): https, a host, a path other than "/", no
    userinfo, fragment or port 0; the host a DNS name (the document is fetched from it)."""
    if not client_id.startswith("https://") or len(client_id) > MAX_CIMD_ID or not client_id.isprintable():
        return False
    if " " in client_id or "#" in client_id or "\\" in client_id:
        return False
    try:
        parts = urlsplit(client_id)
        port = parts.port
    except ValueError:
        return False
    host = parts.hostname or ""
    netloc_host = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    return (
        "@" not in parts.netloc
        and port != 0
        and netloc_host == host  # lower-case, no brackets: a DNS name as written
        and bool(_DOMAIN_ID.match(host))
        and parts.path not in ("", "/")
    )


def cimd_allowed(client_id: str, allowed: tuple[str, ...]) -> bool:
    """``[mcp] cimd_allowed_domains``: empty allows any host; else the host or a parent domain listed."""
    if not allowed:
        return True
    host = urlsplit(client_id).hostname or ""
    return any(host == d or host.endswith("." + d) for d in allowed)


# -- the SSRF guard -------------------------------------------------------------------------------


def public_address(address: str) -> bool:
    """True only for a globally routable unicast address (IPv4-mapped and 6to4/Teredo forms are
    judged by the IPv4 address inside)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if inner is not None:
            return public_address(str(inner))
    return not (
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


async def resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout=3.0)
    except (OSError, TimeoutError, UnicodeError) as exc:  # UnicodeError: a label IDNA refuses (empty, > 63)
        raise MetadataError(f"cannot resolve {host}") from exc
    addresses = []
    for info in infos:
        address = str(info[4][0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise MetadataError(f"cannot resolve {host}")
    return addresses


async def fetch_metadata(
    client_id: str, *, allow_private: bool, resolver: Any = resolve, verify: Any = True
) -> dict[str, Any]:
    """GET the client's metadata document, guarded (module docstring). Returns the parsed JSON object.
    A Client ID Metadata Document (``client_id`` an https URL, D17) is fetched from that URL, always
    over https (``verify``: the TLS trust, ``[oauth] ca_file`` added)."""
    if is_cimd_client_id(client_id):
        parts = urlsplit(client_id)
        scheme, host, port = "https", str(parts.hostname), parts.port or 443
        netloc, target = parts.netloc, parts.path + (f"?{parts.query}" if parts.query else "")
    else:
        scheme = "http" if allow_private else "https"
        host, _, port_text = client_id.partition(":")
        port = int(port_text) if port_text else (443 if scheme == "https" else 80)
        netloc, target = client_id, METADATA_PATH
    if not 0 < port < 65536:
        raise MetadataError("bad port")
    addresses = await resolver(host, port)
    if not allow_private and not all(public_address(a) for a in addresses):
        raise MetadataError(f"{host} resolves to a non-public address")
    last: Exception | None = None
    for address in addresses[:4]:
        try:
            body = await _get(scheme, netloc, host, address, port, target, verify)
            break
        except httpx.ConnectError as exc:  # the next address of the checked ones
            last = exc
        except httpx.HTTPError as exc:
            raise MetadataError(f"cannot fetch metadata: {type(exc).__name__}") from None
    else:
        raise MetadataError(f"cannot fetch metadata: {type(last).__name__}") from None
    try:
        document = json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise MetadataError("metadata is not JSON") from None
    if not isinstance(document, dict):
        raise MetadataError("metadata is not a JSON object")
    return document


async def _get(
    scheme: str,
    netloc: str,
    host: str,
    address: str,
    port: int,
    target: str = METADATA_PATH,
    verify: Any = True,
) -> bytes:
    """One GET to the checked ``address`` (never a new resolution): the URL names the IP, ``Host``
    and the TLS server name (SNI and the certificate check) name the host."""
    literal = f"[{address}]" if ":" in address else address
    url = f"{scheme}://{literal}:{port}{target}"
    headers = {
        "Host": netloc,
        "Accept": "application/json",
        "Accept-Encoding": "identity",
        "User-Agent": "grantd (client metadata)",
    }
    extensions = {"sni_hostname": host} if scheme == "https" else {}
    async with httpx.AsyncClient(
        timeout=METADATA_TIMEOUT, follow_redirects=False, trust_env=False, verify=verify
    ) as http:
        request = http.build_request("GET", url, headers=headers, extensions=extensions)
        response = await http.send(request, stream=True)
        try:
            if response.status_code != 200:
                raise MetadataError(
                    f"metadata answered {response.status_code} (redirects are not followed)"
                    if 300 <= response.status_code < 400
                    else f"metadata answered {response.status_code}"
                )
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > METADATA_MAX_BYTES:
                raise MetadataError("metadata document too large")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > METADATA_MAX_BYTES:
                    raise MetadataError("metadata document too large")
            return bytes(body)
        finally:
            await response.aclose()


def _http_url(value: Any, what: str) -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_URI
        or not value.isprintable()
        or " " in value
    ):
        raise MetadataError(f"{what} must be a URL")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise MetadataError(f"{what} must be a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment or "@" in parts.netloc:
        raise MetadataError(f"{what} must be an absolute http(s) URL without userinfo or fragment")
    return value


def client_from_metadata(client_id: str, document: dict[str, Any]) -> Client:
    """Validate a metadata document (peer bugs 11, 12) into a public client."""
    if document.get("client_id") != client_id:
        raise MetadataError("metadata client_id differs from the client_id asked for")
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not uris or len(uris) > MAX_REDIRECT_URIS:
        raise MetadataError(f"metadata needs 1-{MAX_REDIRECT_URIS} redirect_uris")
    redirect_uris = tuple(_http_url(u, "redirect_uris") for u in uris)
    name = document.get("client_name")
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        name = client_id
    client_uri = document.get("client_uri")
    try:
        client_uri = _http_url(client_uri, "client_uri") if client_uri is not None else None
    except MetadataError:
        client_uri = None  # shown as a link on the consent page: only http(s), else not at all
    method = document.get("token_endpoint_auth_method", "none")
    if is_cimd_client_id(client_id) and method != "none":
        raise MetadataError("token_endpoint_auth_method must be none (a public client)")
    alg = document.get("id_token_signed_response_alg", "EdDSA")
    if alg not in ID_TOKEN_ALGS:
        raise MetadataError(f"id_token_signed_response_alg must be one of {', '.join(ID_TOKEN_ALGS)}")
    return Client(
        client_id,
        name.strip()[:MAX_NAME],
        redirect_uris,
        public=True,
        api_access=False,
        id_token_alg=alg,
        source="domain",
        client_uri=client_uri,
    )


class ClientRegistry:
    """``await registry.get(client_id)``: the client, or None (unknown, or metadata unusable)."""

    def __init__(
        self, config: Config, clock: Clock, *, resolver: Any = resolve, fetches: FetchGuard | None = None
    ):
        self.clock = clock
        self.fetches = fetches or FetchGuard(
            clock,
            at_once=int(config.oauth.fetches_at_once),
            failure_ttl_s=int(config.oauth.metadata_failure_ttl),
        )
        self.builtin = builtin_clients()
        self.configured = config_clients(config)
        self.allow_private = bool(config.oauth.allow_private_metadata_hosts)
        self.ttl_ms = int(config.oauth.metadata_cache_ttl) * 1000
        self.resolver = resolver
        self.cimd_domains = tuple(str(d).lower() for d in config.mcp.cimd_allowed_domains)
        self.verify: Any = True
        if config.oauth.ca_file:
            context = ssl.create_default_context()
            context.load_verify_locations(cafile=str(config.oauth.ca_file))
            self.verify = context
        self._cache: OrderedDict[str, tuple[int, Client | None]] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[Client | None]] = {}
        self.last_error: OrderedDict[str, str] = OrderedDict()

    def fetchable(self, client_id: str) -> bool:
        """A domain client_id, or a Client ID Metadata Document URL this deployment allows."""
        if is_cimd_client_id(client_id):
            return cimd_allowed(client_id, self.cimd_domains)
        return len(client_id) <= 260 and is_domain_client_id(client_id)

    async def get(self, client_id: str | None) -> Client | None:
        if not client_id or len(client_id) > MAX_CIMD_ID:
            return None
        found = self.builtin.get(client_id) or self.configured.get(client_id)
        if found is not None:
            return found
        if not self.fetchable(client_id):
            return None
        now = self.clock.now_ms()
        cached = self._cache.get(client_id)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(client_id)
            return cached[1]
        task = self._inflight.get(client_id)
        if task is None:  # one fetch per client at a time, however many requests ask; it finishes
            # even if the request that started it goes away
            task = asyncio.get_running_loop().create_task(
                self._load(client_id), name=f"client-metadata {client_id}"
            )
            self._inflight[client_id] = task
            task.add_done_callback(lambda _: self._inflight.pop(client_id, None))
        return await asyncio.shield(task)

    async def _load(self, client_id: str) -> Client | None:
        client: Client | None = None
        domain = domain_of(client_id)
        failed = self.fetches.failed(domain)
        if failed is not None:  # not fetched, and nothing cached for this client_id: the domain decides
            self._note_error(client_id, f"{domain} failed recently ({failed}); not asked again yet")
            return None
        try:
            try:
                async with self.fetches.slot():
                    document = await fetch_metadata(
                        client_id,
                        allow_private=self.allow_private,
                        resolver=self.resolver,
                        verify=self.verify,
                    )
            except Busy as exc:  # not the domain's fault: nothing is remembered
                self._note_error(client_id, str(exc))
                return None
            except Exception as exc:  # noqa: BLE001 - whatever the remote side does, the fetch failed
                reason = self._reason(exc)
                self.fetches.remember_failure(domain, reason)
                raise MetadataError(reason) from None
            client = client_from_metadata(client_id, document)
            self.last_error.pop(client_id, None)
        except Exception as exc:  # noqa: BLE001 - whatever the remote side does, the client is just unusable
            self._note_error(client_id, self._reason(exc))
        self._cache[client_id] = (self.clock.now_ms() + self.ttl_ms, client)
        self._cache.move_to_end(client_id)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return client

    def _reason(self, exc: BaseException) -> str:
        if isinstance(exc, MetadataError):
            return str(exc)
        if isinstance(exc, TimeoutError):
            return f"cannot fetch metadata: no complete answer within {self.fetches.deadline_s:g} s"
        return f"cannot fetch metadata: {type(exc).__name__}"

    def _note_error(self, client_id: str, reason: str) -> None:
        log.info("client metadata of %r refused: %s", client_id, reason)
        self.last_error[client_id] = reason
        self.last_error.move_to_end(client_id)
        while len(self.last_error) > CACHE_ENTRIES:
            self.last_error.popitem(last=False)

    def would_fetch(self, client_id: str | None) -> bool:
        """True when ``get(client_id)`` would start a metadata fetch (a domain client neither cached
        nor being fetched): the routes count that against the caller's address (D12)."""
        if (
            not client_id
            or len(client_id) > MAX_CIMD_ID
            or client_id in self.builtin
            or client_id in self.configured
        ):
            return False
        if not self.fetchable(client_id) or client_id in self._inflight:
            return False
        if self.fetches.failed(domain_of(client_id)) is not None:
            return False
        cached = self._cache.get(client_id)
        return cached is None or cached[0] <= self.clock.now_ms()

    def known(self, client_id: str) -> Client | None:
        """The client if it is known without a fetch (built in, configured, or in the metadata cache,
        however old): names for lists such as /account's, which must not fetch anything."""
        found = self.builtin.get(client_id) or self.configured.get(client_id)
        if found is None and client_id in self._cache:
            found = self._cache[client_id][1]
        return found

    def why_unknown(self, client_id: str) -> str:
        """A readable reason for the error page (never a response body of the client's server)."""
        reason = self.last_error.get(client_id)
        return f"unknown client (its metadata could not be used: {reason})" if reason else "unknown client"


__all__ = ["APES_CLI", "GRANTD_CLI", "Client", "ClientRegistry", "MetadataError", "public_address"]
