"""What people see and set of notifications (D15): a grant's notices (``GET
/api/grants/:id/notifications``: "was anyone even asked?") and a person's own channel settings
(``PUT /api/account/notifications``)."""

from __future__ import annotations

import re
from typing import Any

from grantd.core import policy
from grantd.core.fields import field_error
from grantd.core.principals import Principal
from grantd.services.context import Services
from grantd.services.grants import _visible_grant
from grantd.store.notify import OutboxRow

TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")  # ntfy's topic rule
# D15's statuses are pending, sent and failed: a notice held back by per_approver_limit is pending
# (it waits for the digest), and one that went out in the digest is sent; ``digest`` says which.
STATUS_SHOWN = {"held": "pending", "dropped": "sent"}
DIGEST_SHOWN = {"held": "held", "dropped": "sent"}


def notice_view(row: OutboxRow) -> dict[str, Any]:
    view: dict[str, Any] = {
        "channel": row["channel"],
        "recipient": row["recipient"],
        "kind": row["kind"],
        "level": row["level"],
        "status": STATUS_SHOWN.get(row["status"], row["status"]),
        "attempts": row["attempts"],
        "at": row["sent_at"] if row["sent_at"] is not None else row["created_at"],
        "created_at": row["created_at"],
    }
    if row["status"] in DIGEST_SHOWN:
        view["digest"] = DIGEST_SHOWN[row["status"]]
    if row["error"]:
        view["error"] = row["error"]
    return view


async def notifications_of(services: Services, principal: Principal, grant_id: str) -> dict[str, Any]:
    """The grant's notices, in the order written. Who may read them: whoever may read the grant
    (its requester, who may decide it, the approvers its pinned policy names, administrators);
    everyone else gets the grant's 404."""
    grant = await _visible_grant(services, principal, grant_id)
    return {"data": [notice_view(r) for r in await services.store.notify.for_grant(grant["id"])]}


def _channel_setting(services: Services, channel_id: Any, value: Any) -> Any:
    channel = services.notify_channels.get(channel_id) if isinstance(channel_id, str) else None
    if channel is None:
        raise field_error("channels", f"no notification channel {str(channel_id)[:64]!r}")
    if isinstance(value, bool):
        return value
    if not isinstance(value, dict):
        raise field_error("channels", "each channel is true, false or a table")
    allowed = ("topic",) if channel.type == "ntfy" else ()
    unknown = [k for k in value if k not in allowed]
    if unknown:
        raise field_error("channels", f"{channel_id}: unknown setting {str(unknown[0])[:64]!r}")
    if "topic" in value and (not isinstance(value["topic"], str) or not TOPIC.match(value["topic"])):
        raise field_error("channels", f"{channel_id}: topic must be 1 to 64 letters, digits, - or _")
    return dict(value)


async def set_preferences(
    services: Services, principal: Principal | None, body: dict[str, Any]
) -> dict[str, Any]:
    """``{channels: {<channel id>: {topic?} | true | false}}`` replaces the person's settings:
    ``false`` opts out of a channel, ``{topic}`` names their ntfy topic."""
    me = policy.may_manage_own_notifications(principal)
    channels = body.get("channels")
    if not isinstance(channels, dict):
        raise field_error("channels", "channels must be an object of channel id to setting")
    if len(channels) > max(1, len(services.notify_channels)):
        raise field_error("channels", "more channels than are configured")
    prefs = {key: _channel_setting(services, key, value) for key, value in channels.items()}
    await services.store.notify.set_prefs(me.id, prefs, services.clock.now_ms())
    return {"channels": prefs, "available": [c.public_info() for c in services.notify_channels.values()]}


async def preferences(services: Services, principal: Principal | None) -> dict[str, Any]:
    me = policy.may_manage_own_notifications(principal)
    found = await services.store.notify.prefs([me.id])
    return {
        "channels": found.get(me.id, {}),
        "available": [c.public_info() for c in services.notify_channels.values()],
    }
