"""Discovery documents: JWKS and the OpenID configuration (with the members the peer CLI reads)."""

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

bp = Blueprint("wellknown")


@bp.get("/.well-known/jwks.json")
async def jwks(request: Request) -> HTTPResponse:
    services = request.app.ctx.services
    # Short cache: a rotation must reach verifiers quickly; they refetch on an unknown kid anyway.
    return json(await services.keyring.jwks(), headers={"Cache-Control": "public, max-age=300"})


@bp.get("/.well-known/openid-configuration")
async def openid_configuration(request: Request) -> HTTPResponse:
    issuer = request.app.ctx.services.issuer
    doc = {
        "issuer": issuer,
        "jwks_uri": f"{issuer}/.well-known/jwks.json",
        "id_token_signing_alg_values_supported": ["EdDSA"],
        "subject_types_supported": ["public"],
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "ddisa_version": "1.0",
        "ddisa_auth_methods_supported": ["ed25519", "ssh-key"],
        "ddisa_agent_challenge_endpoint": f"{issuer}/api/agent/challenge",
        "ddisa_agent_authenticate_endpoint": f"{issuer}/api/agent/authenticate",
        "ddisa_auth_challenge_endpoint": f"{issuer}/api/auth/challenge",
        "ddisa_auth_authenticate_endpoint": f"{issuer}/api/auth/authenticate",
        "openape_grants_endpoint": f"{issuer}/api/grants",
        "openape_delegations_endpoint": f"{issuer}/api/delegations",
        "openape_grant_types_supported": ["once", "timed", "always"],
    }
    return json(doc, headers={"Cache-Control": "public, max-age=3600"})
