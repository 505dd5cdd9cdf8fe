"""Who is calling: turns a request's credentials into a Principal, and answers "may they?".

Every route asks this module; nothing else interprets credentials.
 - the management token (compared in constant time, never logged) -> kind "management"
 - an agent identity token (EdDSA JWT of ours, aud = tokens.agent_audience, act = "agent",
   not an AuthZ-JWT) whose agent exists and is active -> kind "agent"
 - (human sessions plug in here as kind "admin"/"user" once human sign-in exists)
No credentials -> 401; a credential that does not verify -> 401 invalid_token; a valid
credential without the right -> 403.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

from grantd.context import Services
from grantd.errors import Problem, forbidden, unauthorized
from grantd.tokens import TokenError, verify

PrincipalKind = Literal["management", "admin", "user", "agent"]


@dataclass(frozen=True)
class Principal:
    kind: PrincipalKind
    email: str
    agent_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.kind in ("management", "admin")

    @property
    def is_human(self) -> bool:
        return self.kind in ("admin", "user")


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def is_management_token(services: Services, presented: str) -> bool:
    expected = services.config.admin.management_token
    # Compare fixed-length digests so neither content nor length leaks through timing.
    return bool(expected) and hmac.compare_digest(_digest(presented), _digest(expected))


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise unauthorized("Authorization header must be 'Bearer <token>'", invalid_token=True)
    return value.strip()


async def principal_from_authorization(services: Services, authorization: str | None) -> Principal | None:
    token = bearer_token(authorization)
    if token is None:
        return None
    if is_management_token(services, token):
        return Principal("management", services.config.admin.management_identity)
    claims = services.token_cache.get(token)
    if claims is None:
        try:
            claims = await verify(
                services.keyring, token, issuer=services.issuer, audience=services.config.tokens.agent_audience
            )
        except TokenError as exc:
            raise unauthorized(f"invalid token: {exc}", invalid_token=True) from None
        # Only identity tokens are bearers: an AuthZ-JWT or any other token we sign is refused
        # even if its audience happens to match (peer bug 27).
        if claims.get("act") != "agent" or "grant_id" in claims or not isinstance(claims.get("sub"), str):
            raise unauthorized("invalid token: not an identity token", invalid_token=True)
        services.token_cache.put(token, claims)
    agent = await services.store.get_agent(claims["sub"])
    if agent is None or agent["status"] != "active":
        raise unauthorized("invalid token: agent unknown or disabled", invalid_token=True)
    return Principal("agent", agent["email"], agent["agent_id"])


def require_principal(principal: Principal | None) -> Principal:
    if principal is None:
        raise unauthorized()
    return principal


def require_admin(principal: Principal | None) -> Principal:
    principal = require_principal(principal)
    if not principal.is_admin:
        raise forbidden("administrator rights required")
    return principal


__all__ = ["Principal", "Problem", "principal_from_authorization", "require_admin", "require_principal"]
