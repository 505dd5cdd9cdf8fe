"""CIBA wired (OpenID CIBA Core 1.0, RFC 9396, D16): ``POST /bc-authorize`` and the ``/token`` grant
``urn:openid:params:grant-type:ciba``. Parsing is grantd.oauth.ciba; the grant is made by
grantd.services.grants.create (so D13's policies route it and the limits of POST /api/grants hold).

- Clients are enrolled agents, authenticated by ``private_key_jwt`` with their Ed25519 key
  (grantd.oauth.token.agent_client); ``aud`` may be the issuer, ``{issuer}/token`` or
  ``{issuer}/bc-authorize``. A DPoP proof at /bc-authorize binds the grant (``cnf.jkt``).
- ``auth_req_id``: 32 random bytes (base64url); only its SHA-256 is stored (``store.ciba``), with
  the grant it created, the agent, the expiry and the poll interval. It is not the grant id.
- Polling: ``authorization_pending``; a poll sooner than the interval after the previous poll of
  the same request is ``slow_down`` and adds 5 s (the first poll is never too soon);
  ``access_denied`` for a denied or revoked grant; ``expired_token`` when the request or the grant
  lapsed; ``invalid_grant`` for an unknown request, another client's, or one redeemed before.
- Approved: the AuthZ-JWT as ``access_token`` (``token_type`` DPoP when bound), an ID token
  (``sub`` = the approver whose decision completed it, ``aud`` = the client id the agent used),
  ``authorization_details`` enriched with ``grant_id``, ``cmd_hash``, ``grant_type`` and
  ``expires_at``. Redeemed once (``store.ciba.redeem``: one winner across processes and nodes).
- A request naming an MCP ``resource`` (D17) is read by grantd.oauth.mcp_ciba: its grant is the one a
  person's consent makes, and the approved answer's ``access_token`` is an ``at+jwt`` for the resource.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import TYPE_CHECKING, Any

from grantd.core import policy, principals
from grantd.core.errors import Problem
from grantd.oauth import ciba, mcp_ciba
from grantd.oauth.errors import OAuthError, invalid_grant
from grantd.oauth.token import agent_client, param
from grantd.services import ciba_pings, grants, review
from grantd.services.dpop import ProofRequest
from grantd.services.tokens import TokenError

if TYPE_CHECKING:
    from grantd.services.context import Services
    from grantd.store.ciba import CibaRequest
    from grantd.store.records import Agent

INTERVAL = 5  # seconds between polls (CIBA's default); each slow_down adds 5
SLOW_DOWN_STEP = 5


def _hash(auth_req_id: str) -> str:
    return hashlib.sha256(auth_req_id.encode("utf-8", "surrogatepass")).hexdigest()


def _oauth_error(problem: Problem) -> OAuthError:
    """A refusal of the grant services (limits, bounds, a field) in OAuth's words."""
    if problem.status == 400 and problem.extra.get("field"):
        return ciba.invalid_details(f"{ciba.DETAIL_TYPE}.{problem.extra['field']}: {problem.detail}")
    code = {401: "invalid_client", 403: "access_denied", 429: "slow_down"}.get(
        problem.status, "invalid_request"
    )
    return OAuthError(code, problem.detail, problem.status, problem.headers)


async def _check_hint(
    services: Services, hint: ciba.LoginHint, agent: Agent, request: dict[str, Any]
) -> None:
    """``unknown_user_id`` unless the hint names someone who may decide this grant (docs/protocols.md):
    a person who is active and may decide the agent's grants (owner, approver, admin) or whom the
    matching approval policy names; a group the policies define; or ``policy``."""
    if hint.kind == "policy":
        return
    config = review.review_config(services)
    if hint.kind == "group":
        if config is None or hint.value not in config.members:
            raise OAuthError("unknown_user_id", f"no approver group {hint.value[:64]!r} is defined")
        return
    if hint.kind == "login_hint_token":
        raise OAuthError("invalid_request", "login_hint_token is not supported: use login_hint")
    email = hint.value
    if hint.kind == "id_token_hint":
        try:
            claims = await services.tokens.verify(hint.value, audience=None)
        except TokenError:
            raise OAuthError("invalid_request", "id_token_hint is not an ID token of this issuer") from None
        email = str(claims.get("sub", ""))
    person = await services.store.people.get(email)
    if email.lower() == str(services.config.admin.management_identity).lower():
        return
    if person is None or person["status"] != "active":
        raise OAuthError("unknown_user_id", "login_hint names nobody who may decide this request")
    who = principals.for_person(person, services.admin_emails)
    if policy.may_decide(who, agent, services.admin_emails):
        return
    if config is not None:
        from grantd.core.review import evaluate

        pinned = evaluate(config, review.request_facts(request, agent["email"], agent["agent_id"])).review
        people = await review.people(services, pinned, [who.email])
        if review.named_in_groups(pinned, people, who.email, 0):
            return
    raise OAuthError("unknown_user_id", "login_hint names nobody who may decide this request")


async def bc_authorize(
    services: Services, params: dict[str, Any], proof: ProofRequest | None
) -> dict[str, Any]:
    """``POST /bc-authorize``: a grant from one ``grantd_command`` detail, and its ``auth_req_id``."""
    flat = {k: v for k, v in params.items() if isinstance(v, str)}
    issuer = services.issuer
    audiences = (issuer, f"{issuer}/token", f"{issuer}/bc-authorize")
    agent, jkt = await agent_client(services, flat, audiences, proof)
    client = await services.store.ciba.get_client(agent["agent_id"])
    if mcp_ciba.for_resource(services.config, params):  # D17: a grant-gated scope of an MCP resource
        request = mcp_ciba.parse(services, params, ping=client is not None, agent=agent)
        jkt = None  # resource tokens are bearer tokens (grantd.oauth.mcp_ciba)
    else:
        request = ciba.parse_bc_authorize(params, ping=client is not None)
    principal = principals.agent(agent["agent_id"], agent["email"], dpop_jkt=jkt)
    stored, requester_id = await ciba.grant_request(services, principal, request)
    stored["authorization_details"] = request.details
    await _check_hint(services, request.hint, agent, stored)
    try:
        await services.limits.grant_request(principal)
        answer, _ = await grants.create(
            services, principal, {}, (stored, requester_id), policy_id=request.policy_id
        )
    except Problem as problem:
        raise _oauth_error(problem) from None
    now = services.clock.now_ms()
    default = int(services.config.ciba.request_ttl)
    expires_in = min(request.requested_expiry or default, int(services.config.grants.pending_ttl))
    auth_req_id = secrets.token_urlsafe(32)
    record: CibaRequest = {
        "auth_req_hash": _hash(auth_req_id),
        "grant_id": answer["id"],
        "agent_id": agent["agent_id"],
        "created_at": now,
        "expires_at": now + expires_in * 1000,
        "poll_interval": INTERVAL,
        "last_polled_at": None,
        "redeemed_at": None,
        "notification_token": ciba_pings.kept_for_ping(auth_req_id, request.client_notification_token),
    }
    await services.store.ciba.create(record)
    return {"auth_req_id": auth_req_id, "expires_in": expires_in, "interval": INTERVAL}


async def token(services: Services, params: dict[str, str], proof: ProofRequest | None) -> dict[str, Any]:
    """``/token`` with ``grant_type=urn:openid:params:grant-type:ciba`` (module docstring)."""
    issuer = services.issuer
    agent, _ = await agent_client(services, params, (issuer, f"{issuer}/token"), proof, bind=False)
    auth_req_id = param(params, "auth_req_id", required=True)
    assert auth_req_id is not None
    key = _hash(auth_req_id)
    now = services.clock.now_ms()
    record = await services.store.ciba.poll(key, now, agent["agent_id"])  # another's: None, unrecorded
    if record is None:
        raise invalid_grant("auth_req_id is unknown or was issued to another client")
    if record["redeemed_at"] is not None:
        raise invalid_grant("auth_req_id was redeemed already (single use)")
    if record["expires_at"] <= now:
        raise OAuthError("expired_token", "the authentication request expired; start a new one")
    last = record["last_polled_at"]  # too soon is too soon whatever the decision (D16)
    if last is not None and now - last < record["poll_interval"] * 1000:
        await services.store.ciba.slow_down(key, record["poll_interval"] + SLOW_DOWN_STEP)
        raise OAuthError(
            "slow_down", f"poll at most every {record['poll_interval'] + SLOW_DOWN_STEP} s from now on"
        )
    grant = await services.store.grants.get(record["grant_id"])
    reader = grants.Reader(services)
    status = reader.status(grant) if grant is not None else "revoked"
    if status == "pending":
        raise OAuthError("authorization_pending", "the request waits for a decision")
    if status == "denied":
        assert grant is not None
        why = f": {grant['decision_reason']}" if grant.get("decision_reason") else ""
        raise OAuthError("access_denied", f"denied by {grant.get('decided_by') or 'policy'}{why}")
    if status == "revoked":
        raise OAuthError("access_denied", "the grant was revoked")
    if status != "approved":
        raise OAuthError("expired_token", f"the grant is {status}")
    assert grant is not None
    if await services.store.ciba.redeem(key, now) is None:
        raise invalid_grant("auth_req_id was redeemed already (single use)")
    return await _answer(services, grant, agent, params.get("client_id") or _client_named(params))


def _client_named(params: dict[str, str]) -> str:
    import jwt

    try:
        claims = jwt.decode(params["client_assertion"], options={"verify_signature": False})
    except (jwt.PyJWTError, KeyError):
        return ""
    return str(claims.get("iss", ""))


async def _answer(services: Services, grant: Any, agent: Agent, client_id: str) -> dict[str, Any]:
    request = grant["request"]
    resource = mcp_ciba.resource_of(services, grant)
    authz = await grants.mint(services, grant) if resource is None else ""
    decided_at = int((grant.get("decided_at") or services.clock.now_ms()) // 1000)
    id_token = await services.tokens.mint_backchannel_id_token(
        sub=str(grant.get("decided_by") or "policy"), aud=client_id or agent["agent_id"], auth_time=decided_at
    )
    details = []
    for detail in request.get("authorization_details") or []:
        enriched = dict(detail)
        enriched.update(
            grant_id=grant["id"], grant_type=grant["grant_type"], expires_at=grant.get("expires_at")
        )
        if request.get("cmd_hash"):
            enriched["cmd_hash"] = request["cmd_hash"]
        details.append(enriched)
    if resource is not None:  # D17: an RFC 9068 token for the resource instead of the AuthZ-JWT
        token = await mcp_ciba.answer(services, grant, agent, resource)
        return {**token, "id_token": id_token, "authorization_details": details, "grant_id": grant["id"]}
    bound = isinstance(request.get("cnf"), dict)
    claims_exp = _exp_of(authz)
    return {
        "access_token": authz,
        "token_type": "DPoP" if bound else "Bearer",
        "expires_in": max(0, claims_exp - services.clock.now_s()),
        "id_token": id_token,
        "authorization_details": details,
        "grant_id": grant["id"],
    }


def _exp_of(token: str) -> int:
    import jwt

    return int(jwt.decode(token, options={"verify_signature": False})["exp"])


__all__ = ["bc_authorize", "token"]
