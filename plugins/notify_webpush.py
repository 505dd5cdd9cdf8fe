"""The notification channel type "webpush": Web Push (RFC 8030) with VAPID (RFC 8292) and
aes128gcm message encryption (RFC 8291, RFC 8188).

The cryptography is a maintained library's, never ours: pywebpush's ``WebPusher.encode`` encrypts
the payload to the subscription's ``p256dh`` key and ``auth`` secret (http_ece underneath), and
py_vapid's ``Vapid02.sign`` makes ``Authorization: vapid t=<ES256 JWT>, k=<public key>`` with
``aud`` = the endpoint's origin, ``exp`` = now + 12 h (at most 24 h is allowed) and ``sub`` = the
configured ``subject`` (``mailto:`` or ``https:``). The request itself goes through grantd's SSRF
guard (grantd.sp.fetch.send: resolved once, connected to the checked address, no redirects).

An endpoint comes from a browser, so any signed-in person names it. It must be https, its host
must match ``allowed_push_hosts`` (exact names, or ``*.example.com`` for any name under it), and
every address it resolves to must be public (``check_endpoint``; the subscription route will use
it too). ``allow_private_push_hosts = true`` is for tests only: it lifts the address rule and also
allows http on a loopback host. The payload is small JSON (kind, title, body, url, tag); the
``Topic`` header (the same for every notice of a grant) lets a ``resolved`` notice replace a
pending one the device has not fetched yet. 404 or 410 from the push service: the subscription is
gone (``DeliveryResult.gone``; grantd removes it).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from grantd.hookspecs import ChannelContext, ChannelType, DeliveryResult, Notice, Recipient, hookimpl
from grantd.notify import EndpointRefused, TableReader
from grantd.plugins.federation_oidc import is_loopback_host

TYPE = "webpush"
KEYS = (
    "vapid_private_key",
    "subject",
    "allowed_push_hosts",
    "allow_private_push_hosts",
    "ttl",
    "include_command",
)
SECRETS = ("vapid_private_key",)
DEFAULT_PUSH_HOSTS = (
    "fcm.googleapis.com",
    "updates.push.services.mozilla.com",
    "*.push.apple.com",
    "*.notify.windows.com",
)
VAPID_LIFETIME_S = 12 * 3600  # RFC 8292 §2: exp at most 24 h ahead
MAX_PAYLOAD = 3993  # RFC 8291 §4: the largest plaintext that fits one 4096-octet record
MAX_ENDPOINT = 2048
DEFAULT_TTL_S = 1800  # as long as a review link lives (D15's link_ttl default)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """``host`` is one of ``patterns``: an exact name, or ``*.suffix`` for any name under suffix."""
    host = host.lower().rstrip(".")
    for pattern in patterns:
        pattern = pattern.lower().rstrip(".")
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def load_vapid_key(text: str) -> ec.EllipticCurvePrivateKey:
    """A P-256 private key from PEM (PKCS#8 or SEC 1) or from the raw 32 bytes, base64url (what
    ``vapid --gen`` and the web-push tools print). ValueError otherwise."""
    text = text.strip()
    try:
        if "-----BEGIN" in text:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        else:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            if len(raw) != 32:
                raise ValueError("not 32 bytes")
            key = ec.derive_private_key(int.from_bytes(raw, "big"), ec.SECP256R1())
    except (ValueError, TypeError):
        raise ValueError("vapid_private_key: not a P-256 private key (PEM, or 32 bytes base64url)") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("vapid_private_key: VAPID needs a P-256 (prime256v1) key")
    return key


@dataclass
class WebPushChannel:
    id: str
    subject: str
    private_key: ec.EllipticCurvePrivateKey = field(repr=False)
    allowed_push_hosts: tuple[str, ...] = DEFAULT_PUSH_HOSTS
    allow_private_push_hosts: bool = False
    ttl: int = DEFAULT_TTL_S
    options: dict[str, Any] = field(default_factory=dict)
    type: str = TYPE

    @property
    def public_key(self) -> str:
        """The application server key browsers subscribe with: base64url, uncompressed P-256."""
        return _b64url(
            self.private_key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
            )
        )

    def public_info(self) -> dict[str, Any]:
        return {"id": self.id, "type": TYPE, "publicKey": self.public_key}

    def check_endpoint_url(self, url: Any) -> str:
        """The endpoint's host, or EndpointRefused: the rules that need no DNS (module docstring)."""
        if (
            not isinstance(url, str)
            or not url
            or len(url) > MAX_ENDPOINT
            or not url.isprintable()
            or " " in url
        ):
            raise EndpointRefused("endpoint must be a URL")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise EndpointRefused("endpoint must be a URL") from None
        if parts.scheme not in ("https", "http"):
            raise EndpointRefused("endpoint must be https")
        host = (parts.hostname or "").lower()
        if not host or "@" in parts.netloc or parts.fragment:
            raise EndpointRefused("endpoint must be a URL without user information or fragment")
        loopback_http = parts.scheme == "http" and self.allow_private_push_hosts and is_loopback_host(host)
        if parts.scheme != "https" and not loopback_http:
            raise EndpointRefused("endpoint must be https")
        if not host_allowed(host, self.allowed_push_hosts):
            raise EndpointRefused(f"endpoint host {host} is not an allowed push service (allowed_push_hosts)")
        return host

    async def check_endpoint(self, url: Any) -> None:
        """EndpointRefused unless grantd may send to ``url``: the URL rules and, unless
        ``allow_private_push_hosts``, every address of its host public (the SSRF guard's rule)."""
        from grantd.services.clients import MetadataError, public_address, resolve

        host = self.check_endpoint_url(url)
        if self.allow_private_push_hosts:
            return
        parts = urlsplit(url)
        try:
            addresses = await resolve(host, parts.port or 443)
        except MetadataError:
            raise EndpointRefused(f"endpoint host {host} does not resolve") from None
        if not all(public_address(a) for a in addresses):
            raise EndpointRefused(f"endpoint host {host} resolves to a non-public address")

    def payload(self, notice: Notice) -> bytes:
        """The JSON the service worker shows (already escaped values; no markup), at most MAX_PAYLOAD bytes."""
        lines = [f"{label}: {value}" for label, value in notice.fields]
        while True:
            data = {
                "kind": notice.kind,
                "title": notice.title,
                "body": "\n".join(lines),
                "url": notice.link,
                "tag": notice.topic,
                "grants": list(notice.grant_ids),
            }
            encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
            if len(encoded) <= MAX_PAYLOAD or not lines:
                return encoded  # title and link alone are far below the limit (grantd.notify.message clips values)
            lines.pop()

    def headers(self, ctx: ChannelContext, endpoint: str, notice: Notice) -> dict[str, str]:
        from py_vapid import Vapid02

        parts = urlsplit(endpoint)
        claims = {
            "aud": f"{parts.scheme}://{parts.netloc}",
            "exp": ctx.now() + VAPID_LIFETIME_S,
            "sub": self.subject,
        }
        headers = {key: str(value) for key, value in Vapid02(self.private_key).sign(claims).items()}
        headers.update(
            {
                "TTL": str(self.ttl),
                "Urgency": notice.urgency,
                "Content-Encoding": "aes128gcm",
                "Content-Type": "application/octet-stream",
            }
        )
        if notice.topic:
            headers["Topic"] = notice.topic
        return headers

    async def send(self, ctx: ChannelContext, notice: Notice, recipient: Recipient) -> DeliveryResult:
        from pywebpush import WebPusher, WebPushException

        from grantd.sp.fetch import FetchError
        from grantd.sp.fetch import send as guarded_send

        subscription = recipient.subscription
        if not subscription or not isinstance(subscription.get("endpoint"), str):
            return DeliveryResult.failed("no push subscription for this person", retryable=False)
        endpoint = subscription["endpoint"]
        try:
            await self.check_endpoint(endpoint)
        except EndpointRefused as exc:
            return DeliveryResult.failed(f"push endpoint refused: {exc.reason}", retryable=False)
        try:
            keys = subscription.get("keys") or {}
            body = WebPusher(
                {"endpoint": endpoint, "keys": {"p256dh": keys.get("p256dh"), "auth": keys.get("auth")}}
            ).encode(self.payload(notice), "aes128gcm")["body"]
        except (WebPushException, ValueError, TypeError, AttributeError):
            return DeliveryResult.failed("the subscription's keys are not usable", retryable=False)
        try:
            status, _ = await guarded_send(
                "POST",
                endpoint,
                allow_private=self.allow_private_push_hosts,
                headers=self.headers(ctx, endpoint, notice),
                content=body,
                max_body=16 * 1024,
            )
        except FetchError as exc:
            return DeliveryResult.failed(f"push service unreachable: {exc}", retryable=True)
        if status in (200, 201, 202):
            return DeliveryResult.sent()
        if status in (404, 410):
            return DeliveryResult.gone(f"push service answered {status}: the subscription is gone")
        retryable = status == 429 or status >= 500
        return DeliveryResult.failed(f"push service answered {status}", retryable=retryable)


def make_channel(table: dict[str, Any], read_secret: Callable[[str], str]) -> WebPushChannel:
    read = TableReader(table)
    secret = read.secret("vapid_private_key", read_secret)
    key = None
    if secret is not None:
        try:
            key = load_vapid_key(secret)
        except ValueError as exc:
            read.problems.append(str(exc))
    subject = read.string("subject", required=True)
    if subject and not (subject.startswith("mailto:") and "@" in subject or subject.startswith("https://")):
        read.problems.append(
            "subject: must be a mailto: or https: URI (RFC 8292 §2.1: how the push service reaches you)"
        )
    hosts = read.strings("allowed_push_hosts", DEFAULT_PUSH_HOSTS)
    for host in hosts:
        bare = host[2:] if host.startswith("*.") else host
        if not bare or any(c in bare for c in "*/:@ "):
            read.problems.append(f"allowed_push_hosts: {host!r} is not a host name or *.domain")
    allow_private = read.boolean("allow_private_push_hosts", False)
    ttl = read.integer("ttl", DEFAULT_TTL_S, 0, 28 * 86400)
    include_command = read.boolean("include_command", False)
    read.done()
    assert key is not None and subject is not None
    return WebPushChannel(
        id=table["id"],
        subject=subject,
        private_key=key,
        allowed_push_hosts=hosts,
        allow_private_push_hosts=allow_private,
        ttl=ttl,
        options={"include_command": include_command},
    )


CHANNEL_TYPE = ChannelType(
    keys=KEYS,
    build=make_channel,
    secrets=SECRETS,
    description="Web Push to browsers and phones (VAPID, aes128gcm)",
)


@hookimpl
def notification_channel_types() -> dict[str, ChannelType]:
    return {TYPE: CHANNEL_TYPE}


__all__ = ["DEFAULT_PUSH_HOSTS", "WebPushChannel", "host_allowed", "load_vapid_key", "make_channel"]
