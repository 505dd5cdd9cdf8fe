"""Token exchange (RFC 8693, D16): the `delegation_token` a delegation answers, the request a
delegate sends to /token, and the claims of the token it gets: `{sub: delegator, act: {sub: agent},
delegation_id}`, nested for chains. Pure: the subject token's signature, the delegation's status
and the client's authentication are grantd.oauth.exchange_flow's (docs/protocols.md).

Decisions (docs/protocols.md):
- A subject token may be exchanged by the actor it names: its `may_act.sub` when it has one (a
  delegation token, or a token re-delegated), else its current actor `act.sub`. Anyone else gets
  `invalid_grant`. The result nests the subject's `act` under the new actor (RFC 8693 §4.1), never
  drops it; a chain deeper than 4 actors is refused.
- Lifetime: the smallest of the delegation's end, the subject token's `exp` and 15 minutes.
- A delegation token lives until the delegation's end, at most 30 days (the exchange checks the
  delegation is still active, so revoking it ends every exchange at once).
- Audience: the one requested `resource` (RFC 8707; an absolute URI without fragment) or
  `audience`, else grantd's issuer.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from grantd.oauth.errors import OAuthError, invalid_grant, invalid_request

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"  # noqa: S105 - a token type URN, not a secret
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a URN
DELEGATION_TOKEN_KIND = "delegation"  # noqa: S105 - the `token_use` claim that tells a delegation token apart
MAX_DEPTH = 4
MAX_EXCHANGED_LIFETIME = 15 * 60
MAX_DELEGATION_TOKEN_LIFETIME = 30 * 24 * 3600
_SINGLE = (
    "grant_type",
    "subject_token",
    "subject_token_type",
    "actor_token",
    "actor_token_type",
    "requested_token_type",
    "scope",
)


@dataclass(frozen=True)
class ExchangeRequest:
    subject_token: str
    audience: str | None  # the requested resource/audience, None = grantd itself
    scope: str | None


def delegation_token_claims(delegation: Mapping[str, Any], *, issuer: str, now: int) -> dict[str, Any]:
    """The claims of the `delegation_token` POST /api/delegations answers: sub = delegator,
    may_act.sub = delegate. ``now`` in seconds; the delegation's `expires_at` in ms or None."""
    end = delegation.get("expires_at")
    exp = now + MAX_DELEGATION_TOKEN_LIFETIME
    if isinstance(end, int) and not isinstance(end, bool):
        exp = min(exp, end // 1000)
    return {
        "iss": issuer,
        "aud": issuer,
        "sub": delegation["delegator"],
        "may_act": {"sub": delegation["delegate"]},
        "delegation_id": delegation["id"],
        "token_use": DELEGATION_TOKEN_KIND,
        "iat": now,
        "exp": exp,
        "jti": str(uuid.uuid4()),
    }


def _one(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if isinstance(value, list):
        if len(value) != 1:
            raise invalid_request(f"{name} must be given once")
        value = value[0]
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_request(f"{name} must be a string")
    return value


def _target(params: Mapping[str, Any]) -> str | None:
    targets: list[str] = []
    for name in ("resource", "audience"):
        value = params.get(name)
        values = value if isinstance(value, list) else [] if value is None else [value]
        for item in values:
            if not isinstance(item, str) or not item:
                raise OAuthError("invalid_target", f"{name} must be a non-empty string")
            targets.append(item)
    if len(set(targets)) > 1:
        raise OAuthError("invalid_target", "grantd issues a token for one resource (or audience) at a time")
    if not targets:
        return None
    target = targets[0]
    if "resource" in params:
        parts = urlsplit(target)
        if not parts.scheme or not parts.netloc or parts.fragment or "#" in target:
            raise OAuthError(
                "invalid_target", "resource must be an absolute URI without a fragment (RFC 8707)"
            )
    if len(target) > 2048 or not target.isprintable():
        raise OAuthError("invalid_target", "the resource is not an acceptable URI")
    return target


def parse_request(params: Mapping[str, Any]) -> ExchangeRequest:
    """Validate a token-exchange request (after client authentication) with RFC 8693's codes."""
    for name in _SINGLE:
        _one(params, name)
    grant_type = _one(params, "grant_type")
    if grant_type != GRANT_TYPE:
        raise OAuthError("unsupported_grant_type", f"grant_type must be {GRANT_TYPE}")
    subject_token = _one(params, "subject_token")
    if not subject_token:
        raise invalid_request("subject_token is required")
    subject_type = _one(params, "subject_token_type")
    if not subject_type:
        raise invalid_request("subject_token_type is required")
    if subject_type != JWT_TOKEN_TYPE:
        raise invalid_request(f"subject_token_type must be {JWT_TOKEN_TYPE}")
    if _one(params, "actor_token") is not None or _one(params, "actor_token_type") is not None:
        raise invalid_request("the actor is the authenticated client: actor_token is not accepted")
    requested = _one(params, "requested_token_type")
    if requested is not None and requested not in (ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE):
        raise invalid_request(f"requested_token_type must be {ACCESS_TOKEN_TYPE} or {JWT_TOKEN_TYPE}")
    return ExchangeRequest(subject_token=subject_token, audience=_target(params), scope=_one(params, "scope"))


def act_depth(act: object) -> int:
    """How many actors a chain names (0 without `act`); ValueError when it is malformed."""
    depth = 0
    while act is not None:
        if not isinstance(act, Mapping) or not isinstance(act.get("sub"), str) or not act["sub"]:
            raise ValueError("act must be an object with a sub")
        depth += 1
        if depth > MAX_DEPTH + 1:
            break
        act = act.get("act")
    return depth


def allowed_actor(subject: Mapping[str, Any]) -> str | None:
    """Who may exchange this subject token: its `may_act.sub`, else its current actor's `sub`."""
    may_act = subject.get("may_act")
    if may_act is not None:
        return (
            may_act.get("sub")
            if isinstance(may_act, Mapping) and isinstance(may_act.get("sub"), str)
            else None
        )
    act = subject.get("act")
    return act.get("sub") if isinstance(act, Mapping) and isinstance(act.get("sub"), str) else None


def exchanged_claims(
    subject: Mapping[str, Any],
    *,
    actor: str,
    issuer: str,
    now: int,
    delegation_end: int | None,
    audience: str | None,
    may_act: str | None = None,
) -> dict[str, Any]:
    """The claims of the exchanged access token. ``subject``: the verified subject token's claims;
    ``actor``: the authenticated client's (the agent's) e-mail; ``delegation_end``: the delegation's
    `expires_at` in seconds (None: no end); ``now`` in seconds; ``may_act``: the next actor the
    result may be exchanged by (a chain person -> agent A -> agent B), else only by ``actor``."""
    sub = subject.get("sub")
    delegation_id = subject.get("delegation_id")
    if not isinstance(sub, str) or not sub or not isinstance(delegation_id, str) or not delegation_id:
        raise invalid_grant("the subject token is not a delegation's token (no sub or delegation_id)")
    if "act" not in subject and subject.get("token_use") != DELEGATION_TOKEN_KIND:
        raise invalid_grant("the subject token is neither a delegation token nor an exchanged token")
    try:
        depth = act_depth(subject.get("act"))
    except ValueError:
        raise invalid_grant("the subject token's act claim is malformed") from None
    if depth + 1 > MAX_DEPTH:
        raise invalid_grant(f"a delegation chain may name at most {MAX_DEPTH} actors")
    if allowed_actor(subject) != actor:
        raise invalid_grant("the subject token does not name this client as the one who may act")
    if actor == sub:
        raise invalid_grant("a subject cannot act for itself")
    exp = now + MAX_EXCHANGED_LIFETIME
    subject_exp = subject.get("exp")
    if isinstance(subject_exp, int) and not isinstance(subject_exp, bool):
        exp = min(exp, subject_exp)
    if delegation_end is not None:
        exp = min(exp, delegation_end)
    if exp <= now:
        raise invalid_grant("the delegation (or the subject token) has ended")
    act: dict[str, Any] = {"sub": actor}
    if subject.get("act") is not None:
        act["act"] = subject["act"]  # nested, never dropped (RFC 8693 §4.1)
    if may_act is not None and (may_act in (sub, actor) or depth + 2 > MAX_DEPTH):
        raise invalid_request("may_act must name another actor, within the chain's depth")
    claims = {
        "iss": issuer,
        "sub": sub,
        "aud": audience or issuer,
        "act": act,
        "delegation_id": delegation_id,
        "iat": now,
        "exp": exp,
        "jti": str(uuid.uuid4()),
    }
    if may_act is not None:
        claims["may_act"] = {"sub": may_act}
    return claims


__all__ = [
    "ACCESS_TOKEN_TYPE",
    "GRANT_TYPE",
    "JWT_TOKEN_TYPE",
    "MAX_DEPTH",
    "ExchangeRequest",
    "act_depth",
    "allowed_actor",
    "delegation_token_claims",
    "exchanged_claims",
    "parse_request",
]
