"""Delegations (D7): a person lets a delegate's grant requests through without asking each time.

Rules we chose where D7 is silent (docs/grants.md):
 - Only people create delegations (grantd.core.policy). Until human sign-in lands, the management
   token creates them on behalf of a person named in ``delegator`` (default: the management identity).
 - A delegator is a person, never an agent (D11), and must be allowed to decide the delegate's
   grants (admin, or the agent's owner or approver) when the delegation is created **and** when it
   is used, so a delegation cannot lend rights its creator does not have, or keeps after losing them.
 - ``approval`` caps the grant types it approves: once < timed < always.
 - ``scopes`` empty or containing ``*`` cover every request at the audience; otherwise each
   permission must be listed, and a command needs ``command:*`` or ``command:<argv[0]>``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from grantd.core import policy
from grantd.core.errors import conflict, forbidden, not_found
from grantd.core.fields import (
    MAX_TEXT,
    check_identifier,
    email_field,
    field_error,
    identifier_field,
    seconds_field,
    string_field,
)
from grantd.core.lifecycle import GRANT_TYPES
from grantd.core.paging import page, page_request
from grantd.core.principals import Kind, Principal, person_is_admin
from grantd.services.agents import agent_or_email_field, email_of_agent_id
from grantd.services.context import Services
from grantd.store import Conflict
from grantd.store.records import Delegation

RANK = {"once": 0, "timed": 1, "always": 2}
MAX_SCOPES = 100
MAX_EXPIRES_AT = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z in ms


def view(delegation: Delegation, status: str) -> dict[str, Any]:
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
        "status": status,
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
    message = "expires_at must be milliseconds since the epoch or an ISO-8601 time"
    if isinstance(value, bool):
        raise field_error("expires_at", message)
    if isinstance(value, int):
        at = value
    elif isinstance(value, str):
        # The peer CLI sends an ISO-8601 string here.
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise field_error("expires_at", message) from None
        if parsed.tzinfo is None:
            raise field_error("expires_at", "expires_at needs a time zone")
        at = int(parsed.timestamp() * 1000)
    else:
        raise field_error("expires_at", message)
    if at <= now:
        raise field_error("expires_at", "expires_at is in the past")
    if at > MAX_EXPIRES_AT:
        raise field_error("expires_at", "expires_at is too far in the future")
    return at


async def _delegator_may_decide(services: Services, delegator: str, delegate: str) -> bool:
    """Whether the delegator may decide the delegate's grants now: a registered person must be active
    (their admin flag counts like admin.emails) and is the delegate's owner or approver by id (D11);
    a delegator without a person record decides only as an administrator by configuration
    (admin.emails, the management identity)."""
    admins = services.admin_emails
    person_id = None
    person = await services.store.people.get(delegator)
    if person is not None:
        if person["status"] != "active":
            return False
        person_id = person["person_id"]
        if person_is_admin(person, admins):
            admins = admins | {person["email"]}
    return policy.person_may_decide(person_id, delegator, await services.store.agents.get(delegate), admins)


async def create(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    if not policy.may_create_delegation(principal):
        raise forbidden("only people can create delegations")
    if policy.may_request_for_someone_else(principal):
        delegator = email_field(body, "delegator", required=False) or principal.email
    else:
        delegator = principal.email
    delegate = await agent_or_email_field(services, body, "delegate")  # D1: or the agent's agent_id
    assert delegate is not None
    audience = identifier_field(body, "audience", required=True)
    scopes = body.get("scopes")
    if scopes is None:  # null means absent
        scopes = []
    if not isinstance(scopes, list) or not all(
        isinstance(s, str) and s.strip() and len(s) <= MAX_TEXT for s in scopes
    ):
        raise field_error("scopes", "scopes must be an array of non-empty strings")
    if len(scopes) > MAX_SCOPES:
        raise field_error("scopes", f"at most {MAX_SCOPES} scopes")
    for scope in scopes:
        check_identifier("scopes", scope)
    approval = body.get("approval")
    if approval is None:
        approval = body.get("grant_type")  # the peer CLI sends grant_type
    if approval is None:
        approval = "once"
    if not isinstance(approval, str) or approval not in GRANT_TYPES:
        raise field_error("approval", "approval must be one of once, timed, always")
    now = services.clock.now_ms()
    expires_at = _expires_at(body, now, services.config.grants.max_duration * 12)
    if delegate == delegator:
        raise field_error("delegate", "a delegation to oneself means nothing")
    if not await _delegator_may_decide(services, delegator, delegate):
        raise forbidden("the delegator may not decide this delegate's grants")
    delegation: Delegation = {
        "id": str(uuid.uuid4()),
        "delegator": delegator,
        "delegate": delegate,
        "audience": str(audience),
        "scopes": sorted(set(scopes)),
        "approval": approval,
        "duration": body.get("duration"),
        "created_at": now,
        "expires_at": expires_at,
        "status": "active",
        "revoked_at": None,
        "revoked_by": None,
    }
    try:
        stored = await services.store.delegations.create(delegation)
    except Conflict:
        raise conflict("the delegator must be a person, not an agent") from None
    return view(stored, services.delegation_lapse().status_of(stored))


async def list_delegations(services: Services, principal: Principal, args: Any) -> dict[str, Any]:
    rows, has_more = await services.store.delegations.list(
        party=None if principal.admin else principal.email,
        page=page_request(args),
        since=await _caller_created_at(services, principal),
    )
    lapse = services.delegation_lapse()
    return page(rows, has_more, lambda d: view(d, lapse.status_of(d)))


async def _caller_created_at(services: Services, principal: Principal) -> int | None:
    """When the caller's person or agent record was created (None: an administrator, who sees every
    delegation). D11: parties are bound to the principal, not the e-mail, so a person or agent
    created later with an e-mail that named an earlier one inherits nothing of its delegations."""
    if principal.admin:
        return None
    if principal.kind is Kind.AGENT:
        agent = await services.store.agents.get_by_id(principal.id)
        return int(agent["created_at"]) if agent is not None else None
    person = await services.store.people.get(principal.id) if principal.is_person else None
    return int(person["created_at"]) if person is not None else None


async def _visible(
    services: Services,
    principal: Principal,
    delegation_id: str,
    may: Callable[[Principal, Delegation], bool] = policy.may_see_delegation,
) -> Delegation:
    """The delegation if ``may`` lets the principal at it; else 404 (nobody else learns it exists)."""
    delegation = await services.store.delegations.get(delegation_id)
    if delegation is None or not may(principal, delegation):
        raise not_found("delegation not found")
    since = await _caller_created_at(services, principal)
    if since is not None and delegation["created_at"] < since:
        raise not_found("delegation not found")  # an earlier holder of the caller's e-mail's (D11)
    return delegation


async def delete(services: Services, principal: Principal, delegation_id: str) -> dict[str, Any]:
    delegation = await _visible(services, principal, delegation_id)
    if not policy.may_delete_delegation(principal, delegation):
        raise forbidden("only the delegator or an administrator may delete a delegation")
    revoked = await services.store.delegations.revoke(delegation_id, principal.email, services.clock.now_ms())
    current = revoked or delegation  # deleting twice answers with the revoked delegation
    return view(current, services.delegation_lapse().status_of(current))


def covers(delegation: Delegation, request: dict[str, Any]) -> bool:
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


async def covering_delegation(
    services: Services, request: dict[str, Any], requester_id: str
) -> Delegation | None:
    lapse = services.delegation_lapse()
    for delegation in await services.store.delegations.live_for(request["requester"], lapse):
        if covers(delegation, request) and await _delegator_may_decide(
            services, delegation["delegator"], requester_id
        ):
            return delegation
    return None


async def _names_delegate(services: Services, given: str, delegate: str) -> bool:
    """``given`` names the delegation's delegate: its e-mail, or (an agent) its agent_id (D1)."""
    return given.strip().lower() == delegate or await email_of_agent_id(services, given) == delegate


async def validate(
    services: Services, principal: Principal, delegation_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    delegation = await _visible(services, principal, delegation_id, policy.may_validate_delegation)
    # D7: {delegate, audience, scope?}; the first two name what is asked about, so both are required
    delegate = string_field(body, "delegate", max_len=254)
    audience = string_field(body, "audience")
    scope = body.get("scope")
    status = services.delegation_lapse().status_of(delegation)
    answer: dict[str, Any] = {"valid": False, "delegation": view(delegation, status)}
    if status != "active":
        answer["error"] = f"delegation {status}"
    elif not await _names_delegate(services, str(delegate), delegation["delegate"]):
        answer["error"] = "delegate does not match"
    elif delegation["audience"] not in ("*", audience):
        answer["error"] = "audience does not match"
    elif (
        isinstance(scope, str)
        and delegation["scopes"]
        and "*" not in delegation["scopes"]
        and scope not in delegation["scopes"]
    ):
        answer["error"] = "scope not covered"
    elif not await _delegator_may_decide(services, delegation["delegator"], delegation["delegate"]):
        answer["error"] = "the delegator may no longer decide this delegate's grants"
    else:
        answer = {"valid": True, "delegation": view(delegation, status)}
    return answer
