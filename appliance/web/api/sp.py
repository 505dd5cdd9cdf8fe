"""SP login routes (D9, docs/sp.md): ``POST /api/login``, ``GET /api/callback`` and the SP's
well-known documents. Thin: parse, call ``grantd.sp.login``, set cookies, redirect. With ``[sp]
enabled = false`` (the default) every one of them answers 404.

- ``POST /api/login {email, returnTo?}`` → 200 ``{redirectUrl}`` (and the flow cookie); 400 a bad
  e-mail, 403 the domain's DDISA record says ``mode=deny``, 404 "could not discover IdP for this
  email domain", 503 the IdP cannot be reached or its discovery document is unusable (retry later).
- ``GET /api/callback?code&state`` (or ``?error``) → 303 to the flow's ``returnTo`` (default ``/``)
  with the guest session cookie; every failure → 303 to ``/?error=<message>`` (``grantd.sp.login.LOGIN_ERRORS``).
- ``/.well-known/oauth-client-metadata``, ``/.well-known/auth.md``, ``/.well-known/grantd.json``
  (= ``/.well-known/service.json``): public, CORS ``*``, cached an hour.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json, redirect, text

import grantd
from grantd.core.errors import not_found
from grantd.core.fields import email_field
from grantd.logs import LOGGER
from grantd.services import flows, sessions
from grantd.services.limits import Rule
from grantd.sp.login import (
    CALLBACK_PATH,
    FLOW_COOKIE,
    SCOPE,
    LoginError,
    SpLogin,
    client_id_of,
    client_metadata,
    error_query,
)
from grantd.web.api.common import body_of, services_of, set_session_cookie
from grantd.web.state import state_of
from grantd.web.views import safe_next

bp = Blueprint("sp")
log = logging.getLogger(LOGGER)

PUBLIC_HEADERS = {"Access-Control-Allow-Origin": "*", "Cache-Control": "public, max-age=3600"}


def _sp(request: Request) -> SpLogin:
    """The process's SP login (its caches), made on first use; 404 while ``[sp]`` is off."""
    state = state_of(request)
    if not state.config.sp.enabled:
        raise not_found("SP login is not enabled on this server ([sp] enabled = false)")
    if state.sp_login is None:
        services = services_of(request)
        state.sp_login = SpLogin(state.config, services.clock, services.oauth_clients.fetches)
    return state.sp_login


def _secure(request: Request) -> bool:
    return services_of(request).issuer.startswith("https://")


@bp.post("/api/login")
async def login(request: Request) -> HTTPResponse:
    sp = _sp(request)
    services = services_of(request)
    # D12: each login costs a DNS lookup and a request to an IdP; bounded per client address
    rule = Rule("sp-login.address", state_of(request).config.limits.sp_login_per_address, "too many logins")
    await services.limits.hit(rule, request.ctx.client_ip)
    body = body_of(request)
    email = email_field(body, "email")
    assert email is not None
    wanted = body.get("returnTo")
    return_to = safe_next(wanted) if isinstance(wanted, str) and wanted else "/"  # a local path only
    try:
        url, binding = await sp.begin(services, email, return_to)
    except LoginError as exc:
        if exc.status < 500:
            raise exc.problem() from None
        # The IdP is down or broken: a 503 that is no fault of ours, answered here (the app's
        # handler would log it as an unhandled error with a trace).
        log.warning("SP login: %s", exc.message)
        return json(exc.problem().body(), status=exc.status, content_type="application/problem+json")
    response = json({"redirectUrl": url})
    response.add_cookie(
        FLOW_COOKIE,
        binding,
        path=CALLBACK_PATH,
        max_age=flows.FLOW_TTL_MS // 1000,
        httponly=True,
        samesite="Lax",
        secure=_secure(request),
    )
    return response


def _failed(request: Request, message: str) -> HTTPResponse:
    """To the home page with the failure's readable message as the fixed table words it (D9;
    grantd.sp.login.LOGIN_ERRORS), never other text."""
    response = redirect(
        "/?error=" + quote(error_query(message), safe=""), status=303, headers={"Cache-Control": "no-store"}
    )
    response.add_cookie(
        FLOW_COOKIE, "", path=CALLBACK_PATH, max_age=0, httponly=True, samesite="Lax", secure=_secure(request)
    )
    return response


@bp.get("/api/callback")
async def callback(request: Request) -> HTTPResponse:
    sp = _sp(request)
    services = services_of(request)
    params: dict[str, str | None] = {
        k: request.args.get(k) for k in ("code", "state", "error", "error_description")
    }
    try:
        cookie, _, target = await sp.finish(
            services, params, request.cookies.get(FLOW_COOKIE), request.headers.get("user-agent", "")
        )
    except LoginError as exc:
        log.info("SP login failed: %s", exc.message)
        return _failed(request, exc.message)
    previous = request.cookies.get(sessions.SESSION_COOKIE)
    if previous and request.headers.get("authorization") is None:
        await sessions.end(services, previous)  # a new sign-in replaces the browser's session
    response = redirect(target, status=303, headers={"Cache-Control": "no-store"})
    set_session_cookie(response, services, cookie)
    response.add_cookie(
        FLOW_COOKIE, "", path=CALLBACK_PATH, max_age=0, httponly=True, samesite="Lax", secure=_secure(request)
    )
    return response


# -- well-known documents ------------------------------------------------------------------------


@bp.get("/.well-known/oauth-client-metadata")
async def client_metadata_document(request: Request) -> HTTPResponse:
    _sp(request)
    return json(client_metadata(state_of(request).config), headers=PUBLIC_HEADERS)


def manifest(issuer: str, config: Any) -> dict[str, Any]:
    return {
        "version": "1.0",
        "service": {"name": "grantd", "version": grantd.__version__, "url": issuer},
        "auth": {
            "ddisa_domain": client_id_of(config).partition(":")[0],
            "client_id": client_id_of(config),
            "supported_methods": ["ddisa"],
            "fallback_idp": config.sp.fallback_idp,
        },
        "scopes": SCOPE.split(),
        "endpoints": {
            "login": f"{issuer}/api/login",
            "callback": f"{issuer}{CALLBACK_PATH}",
            "me": f"{issuer}/api/me",
            "logout": f"{issuer}/api/logout",
            "client_metadata": f"{issuer}/.well-known/oauth-client-metadata",
            "auth_md": f"{issuer}/.well-known/auth.md",
        },
    }


@bp.get("/.well-known/grantd.json")
@bp.get("/.well-known/service.json", name="service_json")
async def service_manifest(request: Request) -> HTTPResponse:
    _sp(request)
    return json(manifest(services_of(request).issuer, state_of(request).config), headers=PUBLIC_HEADERS)


AUTH_MD = """# Logging in to {issuer}

This server is an OAuth 2.0 / OpenID Connect **service provider** (client id `{client_id}`). It has
no passwords of its own: you log in at the identity provider (IdP) of your e-mail domain, found
through DNS (DDISA){fallback}.

## DDISA discovery

The IdP of `alice@example.com` is named by the TXT record `_ddisa.example.com`:

    _ddisa.example.com. TXT "v=ddisa1 idp=https://idp.example.com; mode=open; priority=10"

`v=ddisa1`, then `key=value` pairs separated by `;` and/or spaces. The lowest `priority` wins;
`idp` must be an https URL equal to the IdP's `issuer`; `mode=deny` refuses every login.

## Logging in, three steps

1. `POST {issuer}/api/login` with `{{"email": "alice@example.com"}}` (JSON). The answer is
   `{{"redirectUrl": "https://idp.example.com/authorize?..."}}` and a cookie (`{flow_cookie}`) that
   binds the login to your browser or HTTP client: keep cookies.
2. Open `redirectUrl` and sign in at your IdP (authorization code flow with PKCE S256,
   `scope={scope}`, `login_hint` = your e-mail). It sends you back to `{issuer}{callback}`.
3. The callback checks the state, exchanges the code, verifies the ID token (signature against the
   IdP's JWKS, `iss` = the IdP, `aud` = `{client_id}`, nonce, expiry) and sets the session cookie
   `grantd_session`. On failure you land on `{issuer}/?error=<message>` (a fixed message of the error table).

Then `GET {issuer}/api/me` answers `{{"sub", "email", "name", "act": "human", "kind": "guest",
"idp"}}` and `POST {issuer}/api/logout` ends the session.

A guest session says who you are, nothing more: it grants no rights on this grantd (approving,
enrolling, administration need an account here). Agents use the agent API instead
(`{issuer}/.well-known/openid-configuration` lists it).

Client metadata: `{issuer}/.well-known/oauth-client-metadata`. Manifest:
`{issuer}/.well-known/grantd.json` (also `/.well-known/service.json`).
"""


@bp.get("/.well-known/auth.md")
async def auth_md(request: Request) -> HTTPResponse:
    _sp(request)
    config = state_of(request).config
    issuer = services_of(request).issuer
    fallback = (
        f", or at `{config.sp.fallback_idp}` when your domain has no DDISA record"
        if config.sp.fallback_idp
        else ""
    )
    body = AUTH_MD.format(
        issuer=issuer,
        client_id=client_id_of(config),
        fallback=fallback,
        flow_cookie=FLOW_COOKIE,
        scope=SCOPE.replace(" ", "%20"),
        callback=CALLBACK_PATH,
    )
    return text(body, headers=PUBLIC_HEADERS, content_type="text/markdown; charset=utf-8")
