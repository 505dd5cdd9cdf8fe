"""A decided grant's tokens (D3, D6): a fresh AuthZ-JWT for the requester, consume at the target
host (a ``once`` grant by one conditional update, whoever races), and verify without side effects.
Split from ``grantd.services.grants``, whose reading and state rules it uses."""

from __future__ import annotations

from types import EllipsisType
from typing import Any

import jwt

from grantd.core import policy
from grantd.core.errors import Problem, forbidden, not_found, unauthorized
from grantd.core.principals import Principal
from grantd.dpop import DpopError
from grantd.services import dpop
from grantd.services.authn import Credentials, resource_token_holder_live
from grantd.services.context import Services
from grantd.services.dpop import ProofRequest
from grantd.services.grants import UNUSABLE, Reader, _visible_view, mint
from grantd.services.tokens import TokenError
from grantd.store.records import Grant, GrantView


async def token(
    services: Services, principal: Principal, grant_id: str, read: GrantView | None | EllipsisType = ...
) -> dict[str, Any]:
    """``read``: ``grants.view_ahead``'s answer, when the route read the grant before authenticating."""
    grant, record, votes, agent = await _visible_view(services, principal, grant_id, read)
    if not policy.may_fetch_grant_token(principal, grant):
        raise forbidden("only the requester may fetch the grant's token")
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        raise Problem(400, f"grant is not approved (it is {status})", extra={"grant_status": status})
    authz = await mint(services, grant, (record, votes, agent))
    return {"authz_jwt": authz, "grant": {"id": grant["id"], "status": status}}


def token_matches_grant(claims: dict[str, Any], grant: Grant) -> bool:
    """An AuthZ-JWT speaks for its grant only with the grant's own audience, host and requester."""
    request = grant["request"]
    return (
        claims.get("aud") == request["audience"]
        and claims.get("target_host") == request["target_host"]
        and claims.get("sub") == grant["requester"]
    )


async def resource_token_claims(services: Services, presented: str) -> dict[str, Any] | None:
    """The claims of an MCP resource's access token (D17: the one grantd route it is good for),
    or None: its ``aud`` must be a configured resource and it must verify for that resource."""
    try:
        audience = jwt.decode(presented, options={"verify_signature": False}).get("aud")
    except jwt.PyJWTError:
        return None
    if not isinstance(audience, str) or audience not in {
        r["resource"] for r in services.config.mcp.resources
    }:
        return None
    try:
        return await services.tokens.verify_resource_access(presented, audience)
    except TokenError:
        return None


def resource_token_matches_grant(claims: dict[str, Any], grant: Grant) -> bool:
    """A resource's token speaks for a grant of that resource, requested by the token's person (or,
    for an agent's token from CIBA, by that agent: its id too)."""
    if claims.get("act") == "agent" and claims.get("agent_id") != grant["requester_id"]:
        return False
    return claims.get("aud") == grant["request"]["audience"] and claims.get("sub") == grant["requester"]


async def consume(services: Services, credentials: Credentials, grant_id: str) -> dict[str, Any]:
    presented = credentials.bearer
    if presented is None:
        raise unauthorized("the grant's AuthZ-JWT is required as bearer token")
    try:
        claims = await services.tokens.verify_authz(presented, credentials.digest)
        matches = token_matches_grant
    except TokenError as exc:
        found = await resource_token_claims(services, presented)  # D17: an MCP resource's token
        if found is None:
            raise unauthorized(f"invalid token: {exc}", invalid_token=True) from None
        if not await resource_token_holder_live(services, found):  # what /introspect calls inactive
            raise unauthorized("invalid token: it was revoked", invalid_token=True) from None
        claims, matches = found, resource_token_matches_grant
    if claims.get("grant_id") != grant_id:  # D2: credentials that do not allow the action
        raise forbidden("the token belongs to another grant")
    grant = await services.store.grants.get(grant_id)
    if grant is None:
        raise not_found("grant not found")
    if not matches(claims, grant):
        raise unauthorized("invalid token: it does not match the grant", invalid_token=True)
    await _check_consume_binding(services, credentials, claims, grant)
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        return {"error": UNUSABLE.get(status, "not_approved"), "status": status}
    if grant["grant_type"] != "once":
        # every use is a decision the log keeps (D14 ``grant.used``): one event in a conditional write,
        # so a grant revoked or lapsed since the read above is refused, never logged as used
        used = await services.store.grants.update_if(
            grant_id, expect=("approved",), changes={}, event="grant.used", lapse=reader.lapse, now=reader.now
        )
        if used is None:
            latest = await services.store.grants.get(grant_id)
            status = reader.status(latest) if latest else "revoked"
            return {"error": UNUSABLE.get(status, "not_approved"), "status": status}
        return {"status": "valid", "grant": reader.view(used)}
    updated = await services.store.grants.update_if(
        grant_id,
        expect=("approved",),
        changes={"status": "consumed", "used_at": reader.now},
        event="grant.consumed",
        lapse=reader.lapse,
        now=reader.now,
    )
    if updated is None:  # someone else consumed (or revoked) it between our read and our write
        latest = await services.store.grants.get(grant_id)
        status = reader.status(latest) if latest else "revoked"
        return {"error": UNUSABLE.get(status, "not_approved"), "status": status}
    services.events.changed()
    services.tokens.forget_authz(presented, credentials.digest)
    return {"status": "consumed", "grant": reader.view(updated)}


async def _check_consume_binding(
    services: Services, credentials: Credentials, claims: dict[str, Any], grant: Grant
) -> None:
    """D16: a bound AuthZ-JWT (``cnf.jkt``) is consumed only as ``Authorization: DPoP`` with a fresh
    proof (``ath`` = its hash, htu = the issuer's consume URL, jti never seen before) made by the key
    it is bound to, which must still be the requesting agent's enrolled key. A copied JWT is useless."""
    cnf = claims.get("cnf")
    if cnf != grant["request"].get("cnf"):
        raise unauthorized("invalid token: its binding does not match the grant", invalid_token=True)
    if cnf is None:
        if credentials.scheme == "dpop":
            raise await dpop.token_refusal(
                services, "this grant's token is not DPoP-bound: send it as Bearer"
            )
        return
    jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
    if not isinstance(jkt, str):
        raise unauthorized("invalid token: malformed cnf", invalid_token=True)
    if credentials.scheme != "dpop":
        raise await dpop.token_refusal(
            services, "this grant's token is DPoP-bound: send 'DPoP <token>' with a proof"
        )
    agent = await services.store.agents.get_by_id(grant["requester_id"])
    current = dpop.agent_jkt(agent["public_key"]) if agent is not None else None
    if current is None or current != jkt:
        raise await dpop.token_refusal(
            services, "the key this grant is bound to is no longer the agent's key"
        )
    try:
        await dpop.verify(
            services,
            credentials.proof or ProofRequest((), "POST", "/"),
            expected_jkt=jkt,
            access_token=credentials.bearer,
        )
    except DpopError as exc:
        raise await dpop.api_refusal(services, exc) from None


async def verify_token(services: Services, body: dict[str, Any]) -> dict[str, Any]:
    """No side effects: valid only for a well-signed, unexpired token whose grant is still usable."""
    presented = body.get("token")
    if not isinstance(presented, str) or not presented.strip():
        return {"valid": False, "error": "token is required"}
    try:
        claims = await services.tokens.verify_authz(presented.strip())
    except TokenError as exc:
        return {"valid": False, "error": str(exc)}
    grant = await services.store.grants.get(claims["grant_id"])
    if grant is None:
        return {"valid": False, "error": "grant not found"}
    if not token_matches_grant(claims, grant):
        return {"valid": False, "error": "token does not match the grant"}
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        return {"valid": False, "error": UNUSABLE.get(status, "not_approved"), "status": status}
    return {"valid": True, "claims": claims, "grant": reader.view(grant)}
