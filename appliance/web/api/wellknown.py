"""Discovery documents: JWKS and the OpenID configuration (with the members the peer CLI reads)."""

from typing import Any

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.oauth import resources
from grantd.oauth.discovery import agent_protocol_metadata
from grantd.services.context import Services
from grantd.web.api.common import services_of

bp = Blueprint("wellknown")

CORS = {"Access-Control-Allow-Origin": "*"}  # public documents: any web app may read them (peer §3.1)


@bp.get("/.well-known/jwks.json")
async def jwks(request: Request) -> HTTPResponse:
    services = services_of(request)
    # Short cache: a rotation must reach verifiers quickly; they refetch on an unknown kid anyway.
    return json(await services.keyring.jwks(), headers={"Cache-Control": "public, max-age=300", **CORS})


@bp.get("/.well-known/openid-configuration")
async def openid_configuration(request: Request) -> HTTPResponse:
    return json(metadata(services_of(request)), headers={"Cache-Control": "public, max-age=3600", **CORS})


def metadata(services: Services) -> dict[str, Any]:
    """What both discovery documents say, with the same values: the OpenID configuration, the MCP
    resources' scopes (those without a grant behind them) and the `mcp_tool_call` details type (D17:
    RFC 8414's document has the same members, plus its own; grantd.web.api.mcp adds those)."""
    doc = discovery(services.issuer, services.config.tokens.agent_dpop)
    doc["scopes_supported"] = [*doc["scopes_supported"], *resources.all_scopes(services.config)]
    doc["authorization_details_types_supported"] = [
        *doc.get("authorization_details_types_supported", []),
        resources.MCP_TOOL_CALL,
    ]
    return doc


def discovery(issuer: str, agent_dpop: str) -> dict[str, Any]:
    """The OpenID configuration; RFC 8414's document (grantd.web.api.mcp) adds to it."""
    doc: dict[str, Any] = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        "userinfo_endpoint": f"{issuer}/userinfo",
        "revocation_endpoint": f"{issuer}/revoke",
        "device_authorization_endpoint": f"{issuer}/device_authorization",
        "jwks_uri": f"{issuer}/.well-known/jwks.json",
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": [
            "authorization_code",
            "refresh_token",
            "client_credentials",
            "urn:ietf:params:oauth:grant-type:device_code",
        ],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["EdDSA", "ES256", "RS256"],
        "token_endpoint_auth_methods_supported": [
            "none",
            "client_secret_basic",
            "client_secret_post",
            "private_key_jwt",
        ],
        "token_endpoint_auth_signing_alg_values_supported": ["EdDSA", "Ed25519"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["openid", "email", "profile", "offline_access"],
        "claims_supported": [
            "iss",
            "sub",
            "aud",
            "iat",
            "exp",
            "auth_time",
            "nonce",
            "jti",
            "act",
            "email",
            "email_verified",
            "name",
        ],
        "prompt_values_supported": ["none", "login", "consent"],
        "authorization_response_iss_parameter_supported": True,
        "request_parameter_supported": False,
        "request_uri_parameter_supported": False,
        "ddisa_version": "1.0",
        "ddisa_auth_methods_supported": ["webauthn", "ed25519", "ssh-key"],
        "ddisa_agent_challenge_endpoint": f"{issuer}/api/agent/challenge",
        "ddisa_agent_authenticate_endpoint": f"{issuer}/api/agent/authenticate",
        "ddisa_auth_challenge_endpoint": f"{issuer}/api/auth/challenge",
        "ddisa_auth_authenticate_endpoint": f"{issuer}/api/auth/authenticate",
        "openape_grants_endpoint": f"{issuer}/api/grants",
        "openape_delegations_endpoint": f"{issuer}/api/delegations",
        "openape_grant_types_supported": ["once", "timed", "always"],
    }
    added, grant_types = agent_protocol_metadata(issuer, agent_dpop)  # D16
    doc.update(added)
    doc["grant_types_supported"] += grant_types
    return doc
