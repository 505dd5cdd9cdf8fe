"""Token exchange wired (RFC 8693, D16): ``/token`` with
``urn:ietf:params:oauth:grant-type:token-exchange``. The rules are grantd.oauth.exchange's (pure);
this module verifies the subject token, checks the delegation is live, authenticates the delegate
(``private_key_jwt`` with its enrolled key) and signs the result.

- The subject token is a delegation's token (``POST /api/delegations`` answers it) or a token an
  earlier exchange issued (a chain); either must be ours, of its kind (claims and ``typ``).
- The delegation must be active and not expired: revoking it ends every exchange at once.
- The result: ``{sub: delegator, act: {sub: agent[, act: ...]}, delegation_id, aud, exp}`` with
  ``exp`` at most 15 minutes ahead and never after the delegation ends; bound to the agent's key
  (``cnf.jkt``) when the request carried a DPoP proof.
- A ``resource`` (or ``audience``) other than grantd itself must name a configured MCP resource
  (``invalid_target`` otherwise, D17); the token for it is an RFC 9068 ``at+jwt`` with ``aud`` = the
  resource, the same ``act`` and ``delegation_id``, ``client_id`` = the agent and the ``scope``
  asked for (the resource's scopes without a grant behind them by default; a grant-gated scope is
  ``invalid_scope``: a delegation is no person's grant). /introspect knows it while the delegation
  is active.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grantd.oauth import exchange, resources
from grantd.oauth.errors import invalid_grant
from grantd.oauth.token import agent_client
from grantd.services.dpop import ProofRequest
from grantd.services.tokens import TokenError, TokenKind

if TYPE_CHECKING:
    from grantd.services.context import Services


async def delegation_token(services: Services, delegation: dict[str, Any]) -> str:
    """The ``delegation_token`` of a new delegation (grantd.oauth.exchange.delegation_token_claims)."""
    claims = exchange.delegation_token_claims(delegation, issuer=services.issuer, now=services.clock.now_s())
    return await services.tokens.mint_kind(claims, TokenKind.DELEGATION)


async def token(services: Services, params: dict[str, str], proof: ProofRequest | None) -> dict[str, Any]:
    issuer = services.issuer
    request = exchange.parse_request(params)
    agent, jkt = await agent_client(services, params, (issuer, f"{issuer}/token"), proof)
    # D17: a resource (or audience) other than grantd itself must name a configured resource
    resource = (
        resources.find(services.config, request.audience)
        if request.audience is not None and request.audience.rstrip("/") != issuer.rstrip("/")
        else None
    )
    scope = (
        resources.scope_without_grant(resource, request.scope, "a delegation")
        if resource is not None
        else None
    )
    try:
        subject, kind = await services.tokens.verify_kind(
            request.subject_token, TokenKind.DELEGATION, TokenKind.EXCHANGED
        )
    except TokenError as exc:
        raise invalid_grant(f"subject_token: {exc}") from None
    now = services.clock.now_s()
    if int(subject["exp"]) <= now:
        raise invalid_grant("subject_token expired")
    if kind is TokenKind.DELEGATION and subject.get("aud") != issuer:
        raise invalid_grant("subject_token is not for this issuer")
    delegation = await services.store.delegations.get(str(subject["delegation_id"]))
    lapse = services.delegation_lapse()
    if delegation is None or lapse.status_of(delegation) != "active":
        raise invalid_grant("the delegation is revoked, expired or unknown")
    if delegation["delegator"] != subject["sub"]:
        raise invalid_grant("subject_token does not match its delegation")
    end = delegation["expires_at"]
    claims = exchange.exchanged_claims(
        subject,
        actor=agent["email"],
        issuer=issuer,
        now=now,
        delegation_end=None if end is None else int(end) // 1000,
        audience=resource.resource if resource is not None else None,
    )
    if jkt is not None:
        claims["cnf"] = {"jkt": jkt}
    answer: dict[str, Any] = {
        "issued_token_type": exchange.ACCESS_TOKEN_TYPE,
        "token_type": "DPoP" if jkt else "Bearer",
        "expires_in": int(claims["exp"]) - now,
    }
    if resource is None:
        answer["access_token"] = await services.tokens.mint_kind(claims, TokenKind.EXCHANGED)
    else:  # D17: a resource's tokens are RFC 9068 at+jwt with aud = the resource, act kept (D16)
        assert scope is not None
        answer["access_token"] = await services.tokens.mint_exchanged_resource_access(claims, scope=scope)
        answer["scope"] = scope
    return answer


__all__ = ["delegation_token", "token"]
