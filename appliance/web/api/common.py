"""Small helpers every route module uses to reach the process's services and the caller."""

from __future__ import annotations

from typing import Any

from sanic import Request
from sanic.response import BaseHTTPResponse

from grantd.core import policy
from grantd.core.fields import json_body
from grantd.core.principals import Principal
from grantd.services.authn import Credentials, authorization_token
from grantd.services.context import Services
from grantd.services.dpop import ProofRequest
from grantd.services.sessions import SESSION_COOKIE, secure_cookie, ttl_seconds
from grantd.web.state import state_of


def services_of(request: Request) -> Services:
    """The process's services (grantd.web.state): open from before the server starts."""
    services = state_of(request).services
    if services is None:
        raise RuntimeError("the services are not open yet (before_server_start opens them)")
    return services


def credentials_of(request: Request) -> Credentials:
    """What the request presented; the authentication chain decides what it proves. The session
    cookie is left out when an Authorization header is present (a bearer request never uses it).
    Worked out once per request (the request's headers do not change; a malformed Authorization
    header is a 401 each time it is asked)."""
    ctx = request.ctx
    known: Credentials | None = getattr(ctx, "credentials", None)
    if known is not None:
        return known
    authorization = request.headers.get("authorization")
    scheme, bearer = authorization_token(authorization)
    credentials = Credentials(
        bearer=bearer,
        client=getattr(ctx, "client_ip", None),
        session=None if authorization else request.cookies.get(SESSION_COOKIE),
        scheme=scheme,
        proof=proof_request(request),
    )
    ctx.credentials = credentials
    return credentials


def proof_request(request: Request) -> ProofRequest:
    """The request's DPoP header(s), method and raw path, for grantd.services.dpop (htu is made
    from the configured issuer and this path, never from the Host header)."""
    return ProofRequest(tuple(request.headers.getall("dpop", [])), request.method, request.path)


async def principal_of(request: Request) -> Principal | None:
    """The caller, resolved once per request through the authentication chain."""
    ctx = request.ctx
    if not hasattr(ctx, "principal"):
        services = services_of(request)
        credentials = credentials_of(request)
        principal = ctx.principal = await services.authn.principal(services, credentials)
        if credentials.session is not None and principal is None:
            ctx.stale_session = True  # unknown, expired or revoked: the response clears it
        if principal is not None and principal.act is not None:
            action = acting_action(request)  # D16: an agent acting for a person
            policy.refuse_acting_token({"act": principal.act}, action)
    return ctx.principal  # type: ignore[no-any-return]


# D16: what a request does, in grantd.core.policy's words for tokens with ``act``, by route name
# (``blueprint.handler``): deciding, delegating and administering are refused by name; besides reading
# (GET, HEAD), a token with ``act`` may only do what requesting a grant needs (``ACTING_MAY``); every
# other change (the person's passkeys, sessions, agents, notification settings, a revocation) is
# ``manage``, refused: an agent acting for a person never administers the person's account.
ACTING_ROUTES = {
    "grants.approve": "approve",
    "grants.deny": "deny",
    "grants.review": "review",
    "grants.batch": "approve",
    "delegations.create": "delegate",
    "delegations.delete": "delegate",
    "device.decide": "approve",
    "oauth.consent": "approve",
    "audit.hosts": "admin",
}
ACTING_MAY = frozenset(
    {
        "grants.create",  # request a grant (its request records the actor: D16)
        "grants.token",  # fetch the AuthZ-JWT of a grant it may read
        "grants.consume",
        "grants.verify",
        "grants.evaluate_policies",  # a dry run: decides nothing
        "delegations.validate",
        "oauth.userinfo_post",
    }
)
ADMIN_BLUEPRINTS = ("admin", "people_admin")


def acting_action(request: Request) -> str:
    """The action a request is for a token with ``act`` (D16): approve, deny, review, delegate or
    admin by its route (an unknown route: admin, so a new route is refused until it is named),
    else read (GET/HEAD), request (``ACTING_MAY``) or manage (any other change)."""
    route = getattr(request, "route", None)
    name = str(getattr(route, "name", "") or "").split(".", 1)[-1]
    if not name:
        return "admin"
    if name.split(".", 1)[0] in ADMIN_BLUEPRINTS:
        return "admin"
    if name in ACTING_ROUTES:
        return ACTING_ROUTES[name]
    if request.method in ("GET", "HEAD"):
        return "read"
    return "request" if name in ACTING_MAY else "manage"


def set_session_cookie(response: BaseHTTPResponse, services: Services, value: str) -> None:
    """The session cookie (D8): HttpOnly, SameSite=Lax, Path=/, Secure on an https issuer,
    Max-Age = ``sessions.ttl``."""
    response.add_cookie(
        SESSION_COOKIE,
        value,
        path="/",
        secure=secure_cookie(services),
        max_age=ttl_seconds(services),
        httponly=True,
        samesite="Lax",
    )


def clear_session_cookie(response: BaseHTTPResponse, services: Services) -> None:
    response.add_cookie(
        SESSION_COOKIE, "", path="/", secure=secure_cookie(services), max_age=0, httponly=True, samesite="Lax"
    )


def clear_stale_session_cookie(request: Request, response: BaseHTTPResponse) -> None:
    """Response hook: a cookie that named no live session is cleared (unless the route set one)."""
    services = getattr(request.app.ctx, "services", None)
    if (
        getattr(request.ctx, "stale_session", False)
        and services is not None
        and not response.cookies.has_cookie(SESSION_COOKIE)
    ):
        clear_session_cookie(response, services)


def body_of(request: Request, *, required: bool = True) -> dict[str, Any]:
    return json_body(request.body, required=required)
