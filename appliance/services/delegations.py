"""Delegations (D7): a person lets a delegate's grant requests through without asking each time.

Rules we chose where D7 is silent (docs/grants.md):
 - Only people create delegations. Until human sign-in lands, the management token creates
   them on behalf of a person named in ``delegator`` (default: admin.management_identity).
 - A delegator must be allowed to decide the delegate's grants (admin, or the agent's owner or
   approver) when the delegation is created **and** when it is used, so a delegation cannot
   lend rights its creator does not have, or keeps after losing them.
 - ``approval`` caps the grant types it approves: once < timed < always.
 - ``scopes`` empty or containing ``*`` cover every request at the audience; otherwise each
   permission must be listed, and a command needs ``command:*`` or ``command:<argv[0]>``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from grantd.auth import Principal
from grantd.context import Services
from grantd.errors import forbidden, not_found
from grantd.idp.grants import (
    GRANT_TYPES,
    MAX_TEXT,
    cursor_of,
    now_ms,
    parse_cursor,
    parse_limit,
    person_may_decide,
    seconds_field,
)
from grantd.validation import email_field, field_error, string_field

RANK = {"once": 0, "timed": 1, "always": 2}
MAX_SCOPES = 100


def status_of(delegation: dict[str, Any], now: int) -> str:
    if delegation["status"] == "active" and delegation.get("expires_at") is not None and delegation["expires_at"] <= now:
        return "expired"
    return str(delegation["status"])


def view(delegation: dict[str, Any], now: int) -> dict[str, Any]:
    return {
        "id": delegation["id"],
        "delegator": delegation["delegator"],
        "delegate": delegation["delegate"],
        "audience": delegation["audience"],
        "scopes": delegation["scopes"],
        "approval": delegation["approval"],
        "grant_type": delegation["approval"],
        "created_at": delegation["created_at"],
        "expires_at": delegation.get("expires_at"),
        "status": status_of(delegation, now),
        "revoked_at": delegation.get("revoked_at"),
        "revoked_by": delegation.get("revoked_by"),
    }


def _expires_at(body: dict[str, Any], now: int, max_seconds: int) -> int | None:
    duration = seconds_field(body, "duration", max_seconds)
    if duration is not None:
        return now + duration * 1000
    value = body.get("expires_at")
    if value is None:
        return None
    if isinstance(value, bool):
        raise field_error("expires_at", "expires_at must be milliseconds since the epoch or an ISO-8601 time")
    if isinstance(value, int):
        at = value
    elif isinstance(value, str):
        # The peer CLI sends an ISO-8601 string here.
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise field_error("expires_at", "expires_at must be milliseconds since the epoch or an ISO-8601 time") from None
        if parsed.tzinfo is None:
            raise field_error("expires_at", "expires_at needs a time zone")
        at = int(parsed.timestamp() * 1000)
    else:
        raise field_error("expires_at", "expires_at must be milliseconds since the epoch or an ISO-8601 time")
    if at <= now:
        raise field_error("expires_at", "expires_at is in the past")
    return at


async def create(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    if principal.kind == "agent":
        raise forbidden("only people can create delegations")
    if principal.kind == "management":
        delegator = email_field(body, "delegator", required=False) or principal.email
    else:
        delegator = principal.email
    delegate = email_field(body, "delegate")
    assert delegate is not None
    audience = string_field(body, "audience", required=True)
    scopes = body.get("scopes", [])
    if not isinstance(scopes, list) or not all(isinstance(s, str) and s.strip() and len(s) <= MAX_TEXT for s in scopes):
        raise field_error("scopes", "scopes must be an array of non-empty strings")
    if len(scopes) > MAX_SCOPES:
        raise field_error("scopes", f"at most {MAX_SCOPES} scopes")
    approval = body.get("approval")
    if approval is None:
        approval = body.get("grant_type", "once")  # the peer CLI sends grant_type
    if approval not in GRANT_TYPES:
        raise field_error("approval", "approval must be one of once, timed, always")
    now = now_ms()
    expires_at = _expires_at(body, now, services.config.grants.max_duration * 12)
    if delegate == delegator:
        raise field_error("delegate", "a delegation to oneself means nothing")
    if not await person_may_decide(services, delegator, delegate):
        raise forbidden("the delegator may not decide this delegate's grants")
    delegation = {
        "id": str(uuid.uuid4()),
        "delegator": delegator,
        "delegate": delegate,
        "audience": audience,
        "scopes": sorted(set(scopes)),
        "approval": approval,
        "duration": body.get("duration"),
        "created_at": now,
        "expires_at": expires_at,
        "status": "active",
    }
    return view(await services.store.create_delegation(delegation), now)


async def list_delegations(services: Services, principal: Principal, args: Any) -> dict[str, Any]:
    everyone = principal.is_admin
    rows, has_more = await services.store.list_delegations(
        party=None if everyone else principal.email,
        limit=parse_limit(args.get("limit")),
        cursor=parse_cursor(args.get("cursor")),
    )
    now = now_ms()
    return {
        "data": [view(r, now) for r in rows],
        "pagination": {"cursor": cursor_of(rows[-1]) if has_more and rows else None, "has_more": has_more},
    }


async def delete(services: Services, principal: Principal, delegation_id: str) -> dict[str, Any]:
    delegation = await services.store.get_delegation(delegation_id)
    now = now_ms()
    if delegation is None or not (
        principal.is_admin or principal.email in (delegation["delegator"], delegation["delegate"])
    ):
        raise not_found("delegation not found")
    if not (principal.is_admin or principal.email == delegation["delegator"]):
        raise forbidden("only the delegator or an administrator may delete a delegation")
    revoked = await services.store.revoke_delegation(delegation_id, principal.email, now)
    return view(revoked or delegation, now)  # deleting twice answers with the revoked delegation


def covers(delegation: dict[str, Any], request: dict[str, Any]) -> bool:
    if delegation["audience"] not in ("*", request["audience"]):
        return False
    if RANK[request["grant_type"]] > RANK[delegation["approval"]]:
        return False
    scopes = set(delegation["scopes"])
    if not scopes or "*" in scopes:
        return True
    if any(p not in scopes for p in request.get("permissions") or []):
        return False
    command = request.get("command")
    return not command or "command:*" in scopes or f"command:{command[0]}" in scopes


async def covering_delegation(services: Services, request: dict[str, Any], now: int) -> dict[str, Any] | None:
    for delegation in await services.store.live_delegations(request["requester"], now):
        if covers(delegation, request) and await person_may_decide(
            services, delegation["delegator"], request["requester"]
        ):
            return delegation
    return None


async def validate(services: Services, delegation_id: str, body: dict[str, Any]) -> dict[str, Any]:
    delegation = await services.store.get_delegation(delegation_id)
    if delegation is None:
        raise not_found("delegation not found")
    now = now_ms()
    answer: dict[str, Any] = {"valid": False, "delegation": view(delegation, now)}
    delegate = body.get("delegate")
    audience = body.get("audience")
    scope = body.get("scope")
    status = status_of(delegation, now)
    if status != "active":
        answer["error"] = f"delegation {status}"
    elif isinstance(delegate, str) and delegate.strip().lower() != delegation["delegate"]:
        answer["error"] = "delegate does not match"
    elif isinstance(audience, str) and delegation["audience"] not in ("*", audience):
        answer["error"] = "audience does not match"
    elif isinstance(scope, str) and delegation["scopes"] and "*" not in delegation["scopes"] and scope not in delegation["scopes"]:
        answer["error"] = "scope not covered"
    elif not await person_may_decide(services, delegation["delegator"], delegation["delegate"]):
        answer["error"] = "the delegator may no longer decide this delegate's grants"
    else:
        answer = {"valid": True, "delegation": view(delegation, now)}
    return answer

