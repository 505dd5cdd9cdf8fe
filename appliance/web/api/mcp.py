"""Routes of grantd as the authorization server of MCP servers (D17; docs/mcp.md): RFC 8414
metadata and RFC 7662 introspection. Thin: parse, call ``grantd.oauth.resources``, answer."""

from __future__ import annotations

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core.errors import Problem, unauthorized
from grantd.oauth import mcp_grants, resources
from grantd.oauth.errors import OAuthError
from grantd.services import sessions
from grantd.services.limits import Rule
from grantd.services.sessions import SESSION_COOKIE
from grantd.web.api.common import services_of
from grantd.web.api.oauth import CORS, NO_STORE, oauth_error, params_of
from grantd.web.api.wellknown import metadata

bp = Blueprint("mcp")


@bp.get("/.well-known/oauth-authorization-server")
async def authorization_server_metadata(request: Request) -> HTTPResponse:
    """RFC 8414: the OpenID configuration's members, plus what MCP clients look for."""
    services = services_of(request)
    issuer = services.issuer
    doc = metadata(services)  # the OpenID configuration's members with the same values (D17)
    doc.update(
        {
            "client_id_metadata_document_supported": True,
            "introspection_endpoint": f"{issuer}/introspect",
            "introspection_endpoint_auth_methods_supported": ["client_secret_basic"],
        }
    )
    return json(doc, headers={"Cache-Control": "public, max-age=3600", **CORS})


@bp.get("/authorize/poll/<secret:str>", name="authorize_poll")
async def authorize_poll(request: Request, secret: str) -> HTTPResponse:
    """A pending grant-gated authorization (grantd.oauth.mcp_grants): ``{status}`` until decided,
    then once ``{status, location}``. Only the person who consented (their session) may poll."""
    services = services_of(request)
    found = await sessions.live(services, request.cookies.get(SESSION_COOKIE))
    if found is None:
        raise unauthorized("sign in first")
    return json(await mcp_grants.poll(services, secret, found[0]), headers=NO_STORE)


@bp.post("/introspect", name="introspect")
async def introspect_endpoint(request: Request) -> HTTPResponse:
    """RFC 7662: a configured resource asks about a token (HTTP Basic: its URI and credential)."""
    services = services_of(request)
    try:
        resource = resources.authenticate_resource(services.config, request.headers.get("authorization"))
        params = params_of(request)
        answer = await resources.introspect(services, resource, params.get("token"))
    except (OAuthError, Problem) as exc:
        # D12: per client address, the budget of /token, charged for failed requests only (a resource
        # with its valid credential is never refused because of other callers' failures)
        await services.limits.failed(
            Rule(
                "introspect.address",
                services.config.limits.token_per_address,
                "too many introspection requests",
            ),
            getattr(request.ctx, "client_ip", None),
        )
        if isinstance(exc, Problem):
            raise
        return oauth_error(exc)
    return json(answer, headers=NO_STORE)
