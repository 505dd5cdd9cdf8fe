"""Web Push subscriptions (D15, RFC 8030/8291/8292): a person's browsers and phones.

``GET /api/push/vapid`` → ``{publicKey}`` (the application server key of the webpush channel);
``POST /api/push/subscriptions {endpoint, keys: {p256dh, auth}, expirationTime?}`` → 201 the
subscription; ``GET`` → the person's own; ``DELETE /api/push/subscriptions/:id``. A person's own
only (session, D8 rules). The endpoint comes from a browser, so it is checked before it is stored
and again before each delivery: https, a host on ``allowed_push_hosts``, every address public
(the SSRF guard's rule; ``allow_private_push_hosts`` is for tests). The keys must be a P-256 point
(65 bytes, uncompressed) and a 16-byte secret, base64url. A push service answering 404 or 410
removes the subscription (grantd.services.notify_delivery).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Any

from grantd.core import policy
from grantd.core.errors import Problem, not_found
from grantd.core.fields import field_error
from grantd.core.principals import Principal
from grantd.notify import EndpointRefused
from grantd.services.context import Services
from grantd.store.notify import PushSubscription

MAX_PER_PERSON = 20
MAX_KEY = 200


def push_channel(services: Services) -> Any:
    """The first webpush channel, or 404 when Web Push is not configured."""
    for channel in services.notify_channels.values():
        if channel.type == "webpush":
            return channel
    raise not_found("Web Push is not configured on this server")


def vapid(services: Services) -> dict[str, str]:
    return {"publicKey": str(push_channel(services).public_key)}


def _key(keys: dict[str, Any], name: str, length: int) -> str:
    value = keys.get(name)
    if not isinstance(value, str) or not value or len(value) > MAX_KEY or not value.isascii():
        raise field_error("keys", f"keys.{name} must be base64url")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise field_error("keys", f"keys.{name} must be base64url") from None
    if len(raw) != length or (name == "p256dh" and raw[0] != 4):
        what = "an uncompressed P-256 point (65 bytes)" if name == "p256dh" else f"{length} bytes"
        raise field_error("keys", f"keys.{name} must be {what}")
    return value


def view(subscription: PushSubscription) -> dict[str, Any]:
    return {
        "id": subscription["id"],
        "endpoint": subscription["endpoint"],
        "expirationTime": subscription["expiration_time"],
        "created_at": subscription["created_at"],
    }


async def subscribe(services: Services, principal: Principal | None, body: dict[str, Any]) -> dict[str, Any]:
    me = policy.may_manage_own_notifications(principal)
    channel = push_channel(services)
    endpoint = body.get("endpoint")
    keys = body.get("keys")
    if not isinstance(keys, dict):
        raise field_error("keys", "keys must be {p256dh, auth}")
    p256dh, auth = _key(keys, "p256dh", 65), _key(keys, "auth", 16)
    expiration = body.get("expirationTime")
    if expiration is not None and (
        isinstance(expiration, bool) or not isinstance(expiration, int) or not 0 <= expiration < 2**53
    ):
        raise field_error("expirationTime", "expirationTime must be null or milliseconds since the epoch")
    try:
        await channel.check_endpoint(endpoint)
    except EndpointRefused as refused:
        raise field_error("endpoint", refused.reason) from None
    existing = await services.store.notify.subscriptions(me.id)
    if len(existing) >= MAX_PER_PERSON and all(s["endpoint"] != endpoint for s in existing):
        raise Problem(409, f"at most {MAX_PER_PERSON} push subscriptions per person: remove one first")
    stored = await services.store.notify.add_subscription(
        {
            "id": "sub_" + uuid.uuid4().hex,
            "person_id": me.id,
            "endpoint": str(endpoint),
            "p256dh": p256dh,
            "auth": auth,
            "expiration_time": expiration,
            "created_at": services.clock.now_ms(),
        }
    )
    return view(stored)


async def subscriptions(services: Services, principal: Principal | None) -> dict[str, Any]:
    me = policy.may_manage_own_notifications(principal)
    return {"data": [view(s) for s in await services.store.notify.subscriptions(me.id)]}


async def unsubscribe(
    services: Services, principal: Principal | None, subscription_id: str
) -> dict[str, Any]:
    me = policy.may_manage_own_notifications(principal)
    if not await services.store.notify.delete_subscription(me.id, subscription_id):
        raise not_found("no such subscription")
    return {"deleted": subscription_id}


def recipient_subscription(subscription: PushSubscription) -> dict[str, Any]:
    """What a webpush channel's ``send`` takes (``Recipient.subscription``)."""
    return {
        "endpoint": subscription["endpoint"],
        "keys": {"p256dh": subscription["p256dh"], "auth": subscription["auth"]},
    }


__all__ = ["push_channel", "recipient_subscription", "subscribe", "subscriptions", "unsubscribe", "vapid"]
