"""CIBA for MCP resources (D16 with D17; beyond.md §5 "Agent"; issue 26; docs/mcp.md "What an agent
sees"): an enrolled agent without a browser asks at ``POST /bc-authorize`` for a grant-gated scope
of a configured resource, and the approved request's ``/token`` answer is a resource token.

Accepted shapes (everything else of /bc-authorize as D16 says: ``private_key_jwt``, one hint,
``binding_message``, ``requested_expiry``, ping):

- ``resource`` (RFC 8707) names a configured resource exactly (scheme and host compared lower-case):
  unknown or malformed → ``invalid_target``; one per request (a repeat is ``invalid_request``, as at
  /authorize).
- ``scope`` holds ``openid`` (CIBA Core) and scopes of that resource; at least one grant-gated scope
  must be asked for, in ``scope`` or by a detail (``invalid_scope`` otherwise, and for a scope the
  resource does not have).
- ``authorization_details`` is optional: ``mcp_tool_call`` objects ``{type, locations?: [resource],
  actions?: ["tools/call"], scope, tool?}``; ``scope`` must be one of the resource's grant-gated
  scopes; ``tool`` (a tool name, shown to the approver) is optional. A ``grantd_command`` (or any
  other type) beside ``resource`` is ``invalid_authorization_details``. Without details grantd
  writes one ``mcp_tool_call`` per gated scope, as for a person's consent.
- Without ``resource``: a grant-gated scope of any resource → ``invalid_scope``; an
  ``mcp_tool_call`` detail → ``invalid_target`` (the resource is missing).

The grant is the one a person's consent makes (grantd.oauth.mcp_grants.resource_grant_body): routed
by D13 (the scope's ``policy`` when it names one), ``requester`` = the agent, ``permissions`` = the
resource scopes asked for (what the token will carry, so the approver sees all of it). Approved,
``/token`` answers an RFC 9068 ``at+jwt``: ``aud`` = the resource, ``sub`` = the agent's e-mail,
``act: "agent"``, ``agent_id``, ``client_id`` = the agent id, ``scope`` = the grant's permissions,
``grant_id``, ``authorization_details``; it lives as long as the grant may be used and at most
``[oauth] access_token_ttl``. Like every resource token it is a bearer token: a DPoP proof at
/bc-authorize authenticates the request but does not bind the grant (the MCP SDK sends Bearer, and
the resource consumes a ``once`` grant with the token itself).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from grantd.oauth import ciba, mcp_grants, resources
from grantd.oauth.errors import OAuthError

if TYPE_CHECKING:
    from grantd.config import Config
    from grantd.services.context import Services
    from grantd.store.records import Agent

DETAIL_MEMBERS = frozenset({"type", "locations", "actions", "scope", "tool"})
MAX_TOOL = 128


def _gated_anywhere(config: Config) -> set[str]:
    return {s for r in resources.resources_of(config).values() for s in r.grant_scopes}


def _raw_details(params: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    raw = params.get("authorization_details")
    if raw is None:
        return None
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        raw = raw[0]  # a form field
    if isinstance(raw, str):
        if len(raw) > ciba.MAX_DETAILS_BYTES:
            raise ciba.invalid_details("authorization_details is larger than 16 KiB")
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ciba.invalid_details("authorization_details is not JSON") from None
    if not isinstance(raw, list) or not raw or not all(isinstance(d, dict) for d in raw):
        raise ciba.invalid_details("authorization_details must be a JSON array of objects")
    return raw


def for_resource(config: Config, params: Mapping[str, Any]) -> bool:
    """Whether a /bc-authorize request is for an MCP resource (it names ``resource``); a request
    without one that asks for a grant-gated scope or an ``mcp_tool_call`` is refused here."""
    if not isinstance(params, Mapping):
        return False
    if params.get("resource") is not None:
        return True
    scope = params.get("scope")
    asked = set(scope.split()) if isinstance(scope, str) else set()
    gated = sorted(asked & _gated_anywhere(config))
    if gated:
        raise OAuthError("invalid_scope", f"scope {gated[0]!r} is a resource's: name it in resource")
    try:
        details = _raw_details(params) or []
    except OAuthError:
        return False  # the grantd_command parser says what is wrong
    if any(d.get("type") == resources.MCP_TOOL_CALL for d in details):
        raise resources.invalid_target("an mcp_tool_call needs resource (RFC 8707) naming its MCP resource")
    return False


def _resource(config: Config, params: Mapping[str, Any]) -> resources.Resource:
    value = params.get("resource")  # given once: the form reader refuses repeats (invalid_request)
    if not isinstance(value, str) or not value or len(value) > 2048:
        raise resources.invalid_target("resource must be the URI of a configured resource")
    return resources.find(config, value)


def _detail(resource: resources.Resource, detail: dict[str, Any], client_id: str) -> dict[str, Any]:
    kind = detail.get("type")
    if kind != resources.MCP_TOOL_CALL:
        raise ciba.invalid_details(
            f"a request for a resource takes {resources.MCP_TOOL_CALL} details, not {str(kind)[:60]!r}"
        )
    extra = sorted(set(detail) - DETAIL_MEMBERS)
    if extra:
        raise ciba.invalid_details(f"mcp_tool_call has unknown members: {', '.join(extra)[:100]}")
    if "locations" in detail and detail["locations"] != [resource.resource]:
        raise ciba.invalid_details("mcp_tool_call.locations must be [resource]: the resource asked for")
    if "actions" in detail and detail["actions"] != ["tools/call"]:
        raise ciba.invalid_details('mcp_tool_call.actions must be ["tools/call"]')
    scope = detail.get("scope")
    if not isinstance(scope, str) or scope not in resource.grant_scopes:
        raise ciba.invalid_details("mcp_tool_call.scope must be one of the resource's grant-gated scopes")
    out: dict[str, Any] = {
        "type": resources.MCP_TOOL_CALL,
        "locations": [resource.resource],
        "actions": ["tools/call"],
        "scope": scope,
        "client_id": client_id,
    }
    tool = detail.get("tool")
    if tool is not None:
        if not isinstance(tool, str) or not tool or len(tool) > MAX_TOOL or not tool.isprintable():
            raise ciba.invalid_details(
                f"mcp_tool_call.tool must be a tool name (at most {MAX_TOOL} characters)"
            )
        out["tool"] = tool
    return out


def parse(services: Services, params: Mapping[str, Any], *, ping: bool, agent: Agent) -> ciba.CibaRequest:
    """A /bc-authorize request for a resource (module docstring), as grantd.oauth.ciba reads it."""
    resource = _resource(services.config, params)
    chosen: dict[str, Any] = {}

    def details(
        params: Mapping[str, Any], scopes: frozenset[str]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        asked = [s for s in resource.scopes if s in scopes]  # the resource's order
        unknown = sorted(scopes - set(asked) - {"openid"})
        if unknown:
            raise OAuthError("invalid_scope", f"scope {unknown[0][:60]!r} is not a scope of {resource.name}")
        given = [_detail(resource, d, agent["agent_id"]) for d in _raw_details(params) or []]
        gated = list(
            dict.fromkeys([s for s in asked if s in resource.grant_scopes] + [d["scope"] for d in given])
        )
        if not gated:
            raise OAuthError(
                "invalid_scope",
                f"ask for a grant-gated scope of {resource.name} ({' '.join(resource.grant_scopes)})",
            )
        permissions = list(dict.fromkeys(asked + gated))
        body, chosen["policy"] = mcp_grants.resource_grant_body(
            services,
            resource,
            gated,
            client_id=agent["agent_id"],
            client_name=f"agent {agent['email']}",
            permissions=permissions,
            details=given or None,
        )
        return body["authorization_details"], body

    request = ciba.parse_bc_authorize(params, ping=ping, details=details)
    return replace(request, policy_id=chosen["policy"])


def resource_of(services: Services, grant: Any) -> resources.Resource | None:
    """The resource a CIBA request's grant is for (its details are ``mcp_tool_call``), or None."""
    request = grant["request"]
    details = request.get("authorization_details") or []
    if not any(isinstance(d, dict) and d.get("type") == resources.MCP_TOOL_CALL for d in details):
        return None
    return resources.find(services.config, str(request["audience"]))


async def answer(
    services: Services, grant: Any, agent: Agent, resource: resources.Resource
) -> dict[str, Any]:
    """The /token answer's token part for an approved grant of ``resource``: an at+jwt (module
    docstring), ``token_type`` Bearer, ``expires_in``, ``scope``."""
    request = grant["request"]
    scope = " ".join(request.get("permissions") or [])
    ttl = int(services.config.oauth.access_token_ttl)
    expires_at = grant.get("expires_at")
    if expires_at:
        ttl = max(1, min(ttl, int(expires_at) // 1000 - services.clock.now_s()))
    claims = {
        "client_id": agent["agent_id"],
        "scope": scope,
        "grant_id": grant["id"],
        "authorization_details": request.get("authorization_details", []),
        "auth_time": int((grant.get("decided_at") or services.clock.now_ms()) // 1000),
    }
    token = await services.tokens.mint_agent_resource_access(
        agent, resource=resource.resource, claims=claims, ttl=ttl
    )
    return {"access_token": token, "token_type": "Bearer", "expires_in": ttl, "scope": scope}


__all__ = ["answer", "for_resource", "parse", "resource_of"]
