"""CIBA ping mode (D16): an agent's ping settings (``PUT /api/admin/agents/:id {ciba: ...}``):
``{mode: "ping", notification_endpoint}`` (checked by grantd.oauth.ciba's rule: https to a public
address unless ``[ciba] notification_allow`` covers it) or ``{mode: "poll"}`` / null. The pings
themselves go through the outbox: grantd.services.ciba_pings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grantd.core.errors import bad_request
from grantd.oauth.ciba import check_notification_endpoint

if TYPE_CHECKING:
    from grantd.services.context import Services
    from grantd.store.ciba import CibaClient


async def set_agent_ciba(services: Services, agent_id: str, value: Any) -> dict[str, Any]:
    """Store an agent's CIBA delivery mode; the value as it now stands."""
    if value is None or (isinstance(value, dict) and value.get("mode") == "poll" and set(value) <= {"mode"}):
        await services.store.ciba.set_client(None, agent_id)
        return {"mode": "poll"}
    if (
        not isinstance(value, dict)
        or value.get("mode") != "ping"
        or set(value) - {"mode", "notification_endpoint"}
    ):
        raise bad_request(
            'ciba must be {"mode": "ping", "notification_endpoint": URL}, {"mode": "poll"} or null',
            field="ciba",
        )
    try:
        url = check_notification_endpoint(
            value.get("notification_endpoint"), services.config.ciba.notification_allow
        )
    except ValueError as exc:
        raise bad_request(str(exc), field="ciba.notification_endpoint") from None
    client: CibaClient = {
        "agent_id": agent_id,
        "mode": "ping",
        "notification_endpoint": url,
        "updated_at": services.clock.now_ms(),
    }
    await services.store.ciba.set_client(client, agent_id)
    return {"mode": "ping", "notification_endpoint": url}


async def agent_ciba(services: Services, agent_id: str) -> dict[str, Any]:
    client = await services.store.ciba.get_client(agent_id)
    if client is None:
        return {"mode": "poll"}
    return {"mode": client["mode"], "notification_endpoint": client["notification_endpoint"]}


__all__ = ["agent_ciba", "set_agent_ciba"]
