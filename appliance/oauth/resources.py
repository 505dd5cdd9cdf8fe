"""Resources (MCP servers) grantd issues tokens for (D17; beyond.md §5; docs/mcp.md).

- ``[[mcp.resources]]`` names them (``grantd.config.mcp``). The RFC 8707 ``resource`` parameter at
  /authorize and /token must name one exactly (scheme and host compared lower-case), else
  ``invalid_target``; one resource per authorization request.
- Their tokens are RFC 9068 ``at+jwt`` with ``aud`` = the resource (``Tokens.mint_resource_access``):
  grantd's own /api refuses them (its bearer audience is ``tokens.agent_audience``). Each code for a
  resource starts a refresh family without a refresh token: the token lives while the family does
  (revoking it, or the person's consent, ends the token at /introspect at once).
- ``POST /introspect`` (RFC 7662): the resource authenticates with HTTP Basic (user = its URI,
  password = its ``credential``), and learns only about tokens for itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from grantd.config.mcp import canonical_resource
from grantd.oauth.errors import OAuthError, invalid_client
from grantd.services import grants
from grantd.services.authn import resource_token_holder_live
from grantd.services.tokens import TokenError

if TYPE_CHECKING:
    from grantd.config import Config
    from grantd.services.context import Services
    from grantd.store.records import Person

MCP_TOOL_CALL = "mcp_tool_call"


@dataclass(frozen=True)
class Resource:
    resource: str
    name: str
    scopes: tuple[str, ...]
    credential: str | None = field(default=None, repr=False)
    grant_scopes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check_credential(self, presented: str) -> bool:
        if self.credential is None:
            return False
        return hmac.compare_digest(
            hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest(),
            hashlib.sha256(self.credential.encode()).digest(),
        )


def resources_of(config: Config) -> dict[str, Resource]:
    return {
        table["resource"]: Resource(
            table["resource"],
            table["name"],
            tuple(table["scopes"]),
            table["credential"],
            dict(table["grant_scopes"]),
        )
        for table in config.mcp.resources
    }


def invalid_target(description: str) -> OAuthError:
    return OAuthError("invalid_target", description)


def find(config: Config, value: str) -> Resource:
    """The configured resource ``value`` names (RFC 8707), or ``invalid_target``."""
    canonical = canonical_resource(value)
    found = resources_of(config).get(canonical) if canonical is not None else None
    if found is None:
        raise invalid_target("resource is not a resource this server issues tokens for")
    return found


def all_scopes(config: Config) -> list[str]:
    """The resources' scopes without a grant behind them, for the metadata's ``scopes_supported``:
    clients that ask for every scope listed there (anthropics/claude-code#55954) should not start
    a grant each time they sign in. A grant-gated scope is named in the resource's 403 challenge."""
    seen: dict[str, None] = {}
    for resource in resources_of(config).values():
        seen.update(dict.fromkeys(s for s in resource.scopes if s not in resource.grant_scopes))
    return list(seen)


def scope_without_grant(resource: Resource, requested: str | None, holder: str) -> str:
    """The scope of a token for ``resource`` that no person's grant stands behind (an agent's own,
    by client credentials; a delegate's, by token exchange): the requested scopes, by default every
    scope of the resource without a grant behind it. A grant-gated scope needs a person's grant
    (D17: CIBA or the code flow), and ``holder`` (who asks, for the message) has none: ``invalid_scope``."""
    open_scopes = [s for s in resource.scopes if s not in resource.grant_scopes]
    wanted = requested.split() if requested else open_scopes
    for name in wanted:
        if name in resource.grant_scopes:
            raise OAuthError("invalid_scope", f"scope {name!r} needs a person's grant, not {holder}")
        if name not in resource.scopes:
            raise OAuthError("invalid_scope", f"scope {name!r} is not a scope of {resource.resource}")
    if not wanted:
        raise OAuthError("invalid_scope", f"{resource.resource} has no scope {holder} may hold")
    return " ".join(dict.fromkeys(wanted))


async def mint(
    services: Services,
    person: Person,
    *,
    resource: str,
    client_id: str,
    scope: str,
    sid: str,
    auth_time: int,
    grant: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The token answer for a resource: ``{access_token, token_type, expires_in, scope}``."""
    ttl = int(services.config.oauth.access_token_ttl)
    claims: dict[str, Any] = {"client_id": client_id, "scope": scope, "sid": sid, "auth_time": auth_time}
    if grant is not None:
        claims["grant_id"] = grant["id"]
        claims["authorization_details"] = grant["request"].get("authorization_details", [])
        expires_at = grant.get("expires_at")
        if expires_at:
            ttl = max(1, min(ttl, int(expires_at) // 1000 - services.clock.now_s()))
    token = await services.tokens.mint_resource_access(person, resource=resource, claims=claims, ttl=ttl)
    return {"access_token": token, "token_type": "Bearer", "expires_in": ttl, "scope": scope}


# -- POST /introspect (RFC 7662) ----------------------------------------------------------------------

INTROSPECTED = (
    "iss",
    "sub",
    "aud",
    "client_id",
    "scope",
    "iat",
    "exp",
    "jti",
    "auth_time",
    "act",
    "grant_id",
    "authorization_details",
    "cnf",  # RFC 9449 §6.2: a DPoP-bound token's key thumbprint, so the resource can demand the proof
)


def _basic_pairs(authorization: str | None, config: Config) -> list[tuple[str, str]]:
    """The (user, password) readings of an HTTP Basic header: form-decoded as RFC 6749 §2.3.1 asks
    (D17), and, because the URI holds a colon that common clients do not encode, a configured
    resource URI followed by ``:`` and the password."""
    if not authorization or not authorization[:6].lower() == "basic ":
        return []
    try:
        decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return []
    pairs = []
    user, sep, password = decoded.partition(":")
    if sep:
        pairs.append((unquote(user.replace("+", " ")), unquote(password.replace("+", " "))))
    pairs.extend(
        (uri, decoded[len(uri) + 1 :]) for uri in resources_of(config) if decoded.startswith(uri + ":")
    )
    return pairs


def authenticate_resource(config: Config, authorization: str | None) -> Resource:
    """The resource presenting HTTP Basic credentials (user = its URI, password = its credential);
    ``invalid_client`` (401) otherwise, the same answer whatever was wrong."""
    pairs = _basic_pairs(authorization, config)
    if not pairs:
        raise invalid_client("the resource authenticates with HTTP Basic (its URI and credential)")
    known = resources_of(config)
    for user, password in pairs:
        canonical = canonical_resource(user)
        resource = known.get(canonical) if canonical is not None else None
        # a digest is compared even for an unknown user: the time says little about which part was wrong
        ok = (resource or Resource("", "", (), "-")).check_credential(password)
        if resource is not None and resource.credential is not None and ok:
            return resource
    raise invalid_client("resource authentication failed")


async def token_live(services: Services, claims: dict[str, Any]) -> bool:
    """A verified resource token still speaks for someone (``resource_token_holder_live``) and its
    grant (if any) is still usable (approved, not revoked, consumed or expired)."""
    if not await resource_token_holder_live(services, claims):
        return False
    grant_id = claims.get("grant_id")
    if grant_id is None:
        return True
    grant = await services.store.grants.get(str(grant_id))
    return grant is not None and grants.Reader(services).status(grant) == "approved"


async def introspect(services: Services, resource: Resource, token: str | None) -> dict[str, Any]:
    """RFC 7662 §2.2: ``{active: false}`` for anything not a live token for ``resource``."""
    if not token or len(token) > 8192:
        return {"active": False}
    try:
        claims = await services.tokens.verify_resource_access(token, resource.resource)
    except TokenError:
        return {"active": False}
    if not await token_live(services, claims):
        return {"active": False}
    cnf = claims.get("cnf")
    bound = isinstance(cnf, dict) and isinstance(cnf.get("jkt"), str)
    answer: dict[str, Any] = {"active": True, "token_type": "DPoP" if bound else "Bearer"}
    answer.update({name: claims[name] for name in INTROSPECTED if name in claims})
    answer["username"] = claims["sub"]
    return answer


__all__ = [
    "MCP_TOOL_CALL",
    "Resource",
    "all_scopes",
    "authenticate_resource",
    "find",
    "introspect",
    "invalid_target",
    "mint",
    "resources_of",
    "scope_without_grant",
    "token_live",
]


# -- the code grant for a resource ----------------------------------------------------------------


def target_of_code(record: dict[str, Any], presented: str | None) -> str | None:
    """The resource a code's token is for: the one named at /authorize; a ``resource`` at /token
    must name the same one (RFC 8707 §2.2), and one with a code issued for no resource is refused."""
    bound = record.get("resource")
    if presented is None:
        return str(bound) if bound is not None else None
    canonical = canonical_resource(presented)
    if bound is None or canonical != bound:
        raise invalid_target("resource differs from the one the authorization request named")
    return str(bound)


async def answer_for_code(
    services: Services, client_id: str, person: Person, record: dict[str, Any], family: Any
) -> dict[str, Any]:
    """The token answer of a code for a resource. A grant-gated scope is in the token only with the
    approved grant the code carries (``grant_id``); a code without one never yields it."""
    resource = find(services.config, str(record["resource"]))
    scopes = str(record["scope"]).split()
    grant = None
    if record.get("grant_id") is not None:
        grant = await services.store.grants.get(str(record["grant_id"]))
        if grant is None or grants.Reader(services).status(grant) != "approved":
            raise OAuthError("invalid_grant", "the grant behind this code is no longer approved")
    gated = [s for s in scopes if s in resource.grant_scopes]
    if gated and grant is None:
        raise OAuthError("invalid_grant", f"scope {gated[0]!r} needs a person's grant")
    return await mint(
        services,
        person,
        resource=resource.resource,
        client_id=client_id,
        scope=" ".join(scopes),
        sid=str(family["family_id"]),
        auth_time=int(record["auth_time"]),
        grant=dict(grant) if grant is not None else None,
    )
