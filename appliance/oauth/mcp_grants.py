"""Grant-gated scopes of MCP resources (D17; beyond.md §5 "Step-up becomes a grant").

Approving an authorization request that names a scope in its resource's ``grant_scopes`` creates
a grant (``grantd.services.grants.create``, so D13's policies route it: the resource's ``policy``
when it names one) for the signed-in person, with ``authorization_details: [{type:
"mcp_tool_call", locations: [resource], actions: ["tools/call"], scope, client_id}]``. When the
person is an eligible approver, their consent is their vote (``via: "consent"``); if that decides
the grant, the code follows at once. Otherwise the consent answers ``{pending: true, grant_id,
poll}``; ``GET`` of ``poll`` answers ``{status: pending}`` until the grant is decided, then once
``{status: approved|denied, location}`` (a code bound to the grant, or ``access_denied``).

The poll secret is kept in ``store.onetime`` (kind ``mcp-poll``, by SHA-256, as long as a pending
grant may wait) and bound to the person who consented. A grant-gated scope is never remembered
as consent: each authorization asks again.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from grantd.core import principals
from grantd.core.errors import Problem, not_found
from grantd.oauth import authorize, resources
from grantd.oauth.issue import secret_hash
from grantd.services import grants

if TYPE_CHECKING:
    from grantd.services.context import Services
    from grantd.store.records import Person

POLL_KIND = "mcp-poll"
POLL_TTL_S = 3600
POLL_PATH = "/authorize/poll/"
DECIDED_BAD = frozenset({"denied", "revoked", "expired", "consumed"})


def loopback_only(client: Any) -> bool:
    """A client whose every redirect URI is on a loopback host: whatever runs on this computer can
    receive its codes (the consent page warns; MCP 2025-11-25)."""
    hosts = {urlsplit(u).hostname for u in client.redirect_uris}
    return bool(hosts) and hosts <= {"127.0.0.1", "::1", "localhost"}


def resource_name(services: Services, req: authorize.AuthorizationRequest) -> str | None:
    return resources.find(services.config, req.resource).name if req.resource is not None else None


def gated_scopes(services: Services, req: authorize.AuthorizationRequest) -> list[str]:
    if req.resource is None:
        return []
    resource = resources.find(services.config, req.resource)
    return [s for s in req.scopes if s in resource.grant_scopes]


def _grant_body(
    services: Services, req: authorize.AuthorizationRequest, person: Person, gated: list[str]
) -> tuple[dict[str, Any], str | None]:
    assert req.resource is not None
    resource = resources.find(services.config, req.resource)
    body, policy_id = resource_grant_body(
        services, resource, gated, client_id=req.client.client_id, client_name=req.client.name
    )
    return {"requester": person["email"], **body}, policy_id


def resource_grant_body(
    services: Services,
    resource: resources.Resource,
    gated: list[str],
    *,
    client_id: str,
    client_name: str,
    permissions: list[str] | None = None,
    details: list[dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The grant-create body (and the policy that reviews it) for ``gated`` scopes of ``resource``,
    asked by ``client_id``: one ``mcp_tool_call`` per gated scope unless ``details`` are given (a
    person's consent, and an agent's CIBA request: grantd.oauth.mcp_ciba). ``permissions``: the
    scopes the grant covers (default: the gated ones)."""
    specs = [resource.grant_scopes[s] for s in gated]
    # the strictest kind of grant the scopes ask for (once < timed < always)
    grant_type = min((s["grant_type"] for s in specs), key=("once", "timed", "always").index)
    policy_id = next((s["policy"] for s in specs if s.get("policy")), None)
    body: dict[str, Any] = {
        "target_host": urlsplit(resource.resource).netloc,
        "audience": resource.resource,
        "permissions": permissions or gated,
        "grant_type": grant_type,
        "reason": f"{client_name[:200]} asks to use {' '.join(gated)} at {resource.name[:200]}",
        "authorization_details": details
        or [
            {
                "type": resources.MCP_TOOL_CALL,
                "locations": [resource.resource],
                "actions": ["tools/call"],
                "scope": scope,
                "client_id": client_id,
            }
            for scope in gated
        ],
    }
    if grant_type == "timed":
        body["duration"] = int(services.config.oauth.access_token_ttl)
    return body, policy_id


async def start(
    services: Services, req: authorize.AuthorizationRequest, person: Person, auth_time: int, gated: list[str]
) -> dict[str, Any]:
    """The consent's answer for a request with grant-gated scopes (module docstring)."""
    principal = principals.for_person(person, services.admin_emails)
    body, policy_id = _grant_body(services, req, person, gated)
    created, _ = await grants.create(services, principal, body, policy_id=policy_id)
    grant_id = str(created["id"])
    status = created["status"]
    if status == "pending":
        try:
            voted = await grants.vote(services, principal, grant_id, {"decision": "approve"}, via="consent")
            status = voted.get("grant", voted).get("status", status)
        except Problem as refused:
            # 403: the person is no eligible approver of this grant, so it waits for those who are;
            # 409: someone decided first. Anything else is a fault, not an answer to the consent.
            if refused.status not in (403, 409):
                raise
            current = await services.store.grants.get(grant_id)
            status = grants.Reader(services).status(current) if current is not None else "revoked"
    if status == "approved":
        return {"location": await authorize.issue_code(services, req, person, auth_time, grant_id=grant_id)}
    if status != "pending":
        return {"location": _denied(services, req)}
    secret = secrets.token_urlsafe(32)
    now = services.clock.now_ms()
    await services.store.onetime.put(
        POLL_KIND,
        secret_hash(secret),
        {
            "grant_id": grant_id,
            "request": req.query,
            "person_id": person["person_id"],
            "auth_time": auth_time,
        },
        now + POLL_TTL_S * 1000,
        now,
    )
    return {"pending": True, "grant_id": grant_id, "poll": f"{services.issuer}{POLL_PATH}{secret}"}


def _denied(services: Services, req: authorize.AuthorizationRequest) -> str:
    return authorize.error_location(req.fail("access_denied", "the grant was not approved"), services.issuer)


async def poll(services: Services, secret: str, person: Person) -> dict[str, Any]:
    """``{status: pending}`` while the grant waits; then, once, the redirect location."""
    if not 20 <= len(secret) <= 100:
        raise not_found("unknown or finished authorization")
    key = secret_hash(secret)
    now = services.clock.now_ms()
    found = await services.store.onetime.take(POLL_KIND, key, now)
    if found is None or found.get("person_id") != person["person_id"]:
        if found is not None:  # another person's: left as it was
            await services.store.onetime.put(POLL_KIND, key, found, now + POLL_TTL_S * 1000, now)
        raise not_found("unknown or finished authorization")
    grant = await services.store.grants.get(str(found["grant_id"]))
    status = grants.Reader(services).status(grant) if grant is not None else "revoked"
    if status == "pending":
        await services.store.onetime.put(POLL_KIND, key, found, now + POLL_TTL_S * 1000, now)
        return {"status": "pending", "grant_id": found["grant_id"]}
    try:
        req = await authorize.validate(services, authorize.parse_query(str(found["request"])))
    except authorize.RedirectError as exc:
        return {"status": "denied", "location": authorize.error_location(exc, services.issuer)}
    except authorize.PageError as exc:
        raise Problem(400, exc.detail) from None
    if status != "approved":
        return {"status": "denied", "grant_id": found["grant_id"], "location": _denied(services, req)}
    location = await authorize.issue_code(
        services, req, person, int(found["auth_time"]), grant_id=str(found["grant_id"])
    )
    return {"status": "approved", "grant_id": found["grant_id"], "location": location}


__all__ = ["POLL_PATH", "gated_scopes", "poll", "resource_grant_body", "start"]
