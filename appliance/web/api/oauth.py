"""Routes of the OAuth 2.0 authorization server / OpenID provider (D9; docs/oauth.md): /authorize,
its consent POST, /token, /revoke, /userinfo, and the signed-in person's remembered consents.

Thin: parse, call ``grantd.oauth``, answer. /token, /revoke and /userinfo answer OAuth errors
``{error, error_description}`` (D2) and every answer of these routes and of /authorize carries
``Cache-Control: no-store``. /token, /revoke and /userinfo answer any origin (CORS ``*``, no
credentials, preflights included): they authenticate by what the request carries, never by a cookie.
"""

from __future__ import annotations

import json as jsonlib
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json, redirect

from grantd.core import policy
from grantd.core.errors import Problem, unauthorized
from grantd.core.fields import json_body
from grantd.core.principals import Principal
from grantd.oauth import authorize, ciba_flow, exchange_flow, mcp_grants, revoke, token
from grantd.oauth.ciba import GRANT_TYPE as CIBA_GRANT
from grantd.oauth.errors import OAuthError, invalid_request, invalid_token
from grantd.oauth.exchange import GRANT_TYPE as EXCHANGE_GRANT
from grantd.services import sessions
from grantd.services.authn import access_token_holder, exchanged_holder, looks_exchanged
from grantd.services.context import Services
from grantd.services.limits import Rule
from grantd.services.sessions import SESSION_COOKIE
from grantd.services.tokens import TokenError
from grantd.web.api.common import principal_of, proof_request, services_of
from grantd.web.views import error_page, federation_buttons, render, viewer_of

bp = Blueprint("oauth")

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
CORS = {"Access-Control-Allow-Origin": "*"}
FORM = "application/x-www-form-urlencoded"


def oauth_error(exc: OAuthError) -> HTTPResponse:
    return json(exc.body(), status=exc.status, headers={**NO_STORE, **CORS, **exc.headers})


class _Repeated(Exception):
    """A JSON member given twice (the form rule: RFC 6749 §3.2)."""


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Repeated(key)
        found[key] = value
    return found


def params_of(request: Request) -> dict[str, str]:
    """A form-encoded or JSON body as name -> value (D9: /token takes both). A parameter given twice
    is refused (RFC 6749 §3.2)."""
    body = request.body or b""
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if not body.strip():
        return {}
    if media == "application/json":
        try:
            data = jsonlib.loads(body, object_pairs_hook=_refuse_repeats)
        except _Repeated as exc:
            raise invalid_request(f"{str(exc)[:60]} is given more than once") from None
        except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested too deep
            raise invalid_request("malformed JSON body") from None
        if not isinstance(data, dict):
            raise invalid_request("the JSON body must be an object")
        params: dict[str, str] = {}
        for key, value in data.items():
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise invalid_request(f"{key} must be a string")
            params[str(key)] = str(value)
        return params
    if media in (FORM, ""):
        try:
            pairs = parse_qsl(
                body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=50
            )
        except (ValueError, UnicodeDecodeError):
            raise invalid_request("malformed form body") from None
        params = {}
        for key, value in pairs:
            if key in params:
                raise invalid_request(f"{key} is given more than once")
            params[key] = value
        return params
    raise invalid_request("the body must be application/x-www-form-urlencoded or application/json")


# -- /authorize -------------------------------------------------------------------------------------


def metadata_rule(services: Any) -> Rule:
    """Client metadata fetches started per client address (D12): an unknown domain client_id costs a
    DNS lookup and an HTTPS request, and wildcard DNS makes endless ones. The limit of the other
    route with that cost (``limits.sp_login_per_address``), counted apart."""
    return Rule(
        "client-metadata.address", services.config.limits.sp_login_per_address, "too many unknown clients"
    )


async def count_metadata_fetch(request: Request, client_id: str | None, *, basic: bool = False) -> None:
    """429 once the caller's address made grantd fetch too many clients' metadata this minute.
    ``basic``: the client_id of HTTP Basic credentials counts too."""
    services = services_of(request)
    named = [client_id]
    if basic:
        found = token.basic_credentials(request.headers.get("authorization"))
        named.append(found[0] if found else None)
    if any(services.oauth_clients.would_fetch(name) for name in named):
        await services.limits.hit(metadata_rule(services), getattr(request.ctx, "client_ip", None))


def _no_store(response: HTTPResponse) -> HTTPResponse:
    response.headers.update(NO_STORE)
    return response


def _without(query: str, **drop: str) -> str:
    """The query with ``prompt`` values or parameters removed (``drop``: name -> value, "" = the whole parameter)."""
    pairs = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in drop:
            if drop[key] == "":
                continue
            value = " ".join(v for v in value.split() if v != drop[key])
            if not value:
                continue
        pairs.append((key, value))
    return urlencode(pairs)


def _to_login(query: str) -> HTTPResponse:
    return _no_store(redirect("/login?next=" + quote("/authorize?" + query, safe="/"), status=303))


def _back(location: str) -> HTTPResponse:
    return _no_store(redirect(location, status=302))


async def _page_error(request: Request, error: authorize.PageError) -> HTTPResponse:
    return _no_store(error_page(await viewer_of(request), error.status, error.title, error.detail))


@bp.get("/authorize", name="authorize")
async def authorize_get(request: Request) -> HTTPResponse:
    services = services_of(request)
    try:
        args = request.get_args(keep_blank_values=True)
        await count_metadata_fetch(request, args.get("client_id"))
        req = await authorize.validate(services, {name: list(args.getlist(name)) for name in args})
    except authorize.PageError as exc:
        return await _page_error(request, exc)
    except authorize.RedirectError as exc:
        return _back(authorize.error_location(exc, services.issuer))
    cookie = None if request.headers.get("authorization") else request.cookies.get(SESSION_COOKIE)
    found = await sessions.live(services, cookie)
    if found is None:
        if "none" in req.prompt:
            return _back(
                authorize.error_location(req.fail("login_required", "nobody is signed in"), services.issuer)
            )
        return _to_login(_without(req.query, prompt="login"))
    person, session = found
    if (req.login_hint is not None and req.login_hint != person["email"].lower()) or "login" in req.prompt:
        if "none" in req.prompt:
            return _back(
                authorize.error_location(
                    req.fail("login_required", "another person is signed in"), services.issuer
                )
            )
        # Sign in again (prompt=login), or as the hinted person: the sign-in page, here, with the way
        # back minus what asked for it (no loop). The current session is left alone: a GET that
        # signed people out would let any site do it (a fresh sign-in replaces the cookie anyway).
        target = "/authorize?" + _without(req.query, prompt="login", login_hint="")
        return _no_store(
            render(
                "login.html",
                viewer=None,
                title="Sign in again",
                next=target,
                providers=federation_buttons(request, target),
                sp_login=bool(services.config.sp.enabled),
            )
        )
    if await authorize.needs_consent(services, req, person):
        if "none" in req.prompt:
            return _back(
                authorize.error_location(
                    req.fail("consent_required", "the person has not consented"), services.issuer
                )
            )
        ticket = (
            await authorize.consent_ticket(services, req, person)
            if authorize.always_asks(req.client)
            else None
        )
        return _no_store(
            render(
                "consent.html",
                viewer=await viewer_of(request),
                title="Allow access?",
                client=req.client,
                scopes=authorize.scope_descriptions(req),
                query=req.query,
                person=person,
                redirect_host=req.redirect_uri.split("/")[2]
                if "//" in req.redirect_uri
                else req.redirect_uri,
                always_asks=authorize.always_asks(req.client),
                resource=req.resource,
                resource_name=mcp_grants.resource_name(services, req),
                gated=mcp_grants.gated_scopes(services, req),
                loopback_only=mcp_grants.loopback_only(req.client),
                ticket=ticket,
            )
        )
    location = await authorize.issue_code(services, req, person, session["created_at"] // 1000)
    return _back(location)


@bp.post("/authorize/consent", name="consent")
async def consent(request: Request) -> HTTPResponse:
    """The consent page's answer (JSON, from its script): approve or deny; ``{location}`` to go to."""
    services = services_of(request)
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise Problem(415, "request body must be application/json")
    body = json_body(request.body, required=True)
    query = body.get("request")
    approve = body.get("approve")
    if not isinstance(query, str) or len(query) > 4 * authorize.MAX_QUERY or not isinstance(approve, bool):
        raise Problem(
            400, "request (the authorization request's query) and approve (true or false) are required"
        )
    cookie = None if request.headers.get("authorization") else request.cookies.get(SESSION_COOKIE)
    found = await sessions.live(services, cookie)
    if found is None:
        raise unauthorized("sign in first")
    person, session = found
    try:
        req = await authorize.validate(services, authorize.parse_query(query))
    except authorize.PageError as exc:
        raise Problem(400, exc.detail) from None
    except authorize.RedirectError as exc:
        return json({"location": authorize.error_location(exc, services.issuer)}, headers=NO_STORE)
    if not approve:
        location = authorize.error_location(
            req.fail("access_denied", "the person denied access"), services.issuer
        )
        return json({"location": location}, headers=NO_STORE)
    await authorize.check_consent_click(services, req, person, body.get("ticket"))
    await authorize.remember_consent(services, req, person)
    gated = mcp_grants.gated_scopes(services, req)
    if gated:  # D17: a grant for these scopes; the person's consent is their vote when they may cast one
        answer = await mcp_grants.start(services, req, person, session["created_at"] // 1000, gated)
        return json(answer, headers=NO_STORE)
    location = await authorize.issue_code(services, req, person, session["created_at"] // 1000)
    return json({"location": location}, headers=NO_STORE)


# -- /token, /revoke --------------------------------------------------------------------------------


@bp.post("/token", name="token")
async def token_endpoint(request: Request) -> HTTPResponse:
    services = services_of(request)
    try:
        params = params_of(request)
        await count_metadata_fetch(request, params.get("client_id"), basic=True)
        if params.get("grant_type") == CIBA_GRANT:  # D16: its own module (grantd.oauth.ciba_flow)
            answer = await ciba_flow.token(services, params, proof_request(request))
        elif params.get("grant_type") == EXCHANGE_GRANT:  # D16: RFC 8693 (grantd.oauth.exchange_flow)
            answer = await exchange_flow.token(services, params, proof_request(request))
        else:
            answer = await token.exchange(
                services, params, request.headers.get("authorization"), proof_request(request)
            )
    except OAuthError as exc:
        if exc.error not in NOT_A_FAILURE:
            await _token_failed(services, request)
        return oauth_error(exc)
    except Problem:
        await _token_failed(services, request)
        raise
    return json(answer, headers={**NO_STORE, **CORS})


async def _token_failed(services: Services, request: Request) -> None:
    """D12: /token is limited per client address on its failed requests only (429 problem+json with
    Retry-After, like every limit): a valid credential is never refused because of other callers'
    failures from the same address."""
    await services.limits.failed(
        Rule("token.address", services.config.limits.token_per_address, "too many token requests"),
        getattr(request.ctx, "client_ip", None),
    )


# The answers of /token that are no failure of the caller: a poll before the decision (RFC 8628,
# CIBA), the person's refusal, a request that lapsed, a DPoP nonce to retry with.
NOT_A_FAILURE = frozenset(
    {"authorization_pending", "slow_down", "access_denied", "expired_token", "use_dpop_nonce"}
)


@bp.post("/revoke", name="revoke")
async def revoke_endpoint(request: Request) -> HTTPResponse:
    services = services_of(request)
    try:
        params = params_of(request)
        await count_metadata_fetch(request, params.get("client_id"), basic=True)
        await revoke.revoke(services, params, request.headers.get("authorization"))
    except OAuthError as exc:
        return oauth_error(exc)
    return json({}, headers={**NO_STORE, **CORS})


# -- /userinfo --------------------------------------------------------------------------------------


async def _userinfo(request: Request) -> HTTPResponse:
    services = services_of(request)
    client_ip = getattr(request.ctx, "client_ip", None)
    presented: str | None = None
    try:
        header = request.headers.get("authorization")
        if header:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise invalid_token("Authorization must be 'Bearer <access token>'")
            presented = value.strip()
        elif request.method == "POST":
            presented = params_of(request).get("access_token")  # RFC 6750 §2.2
        if not presented:
            raise OAuthError(
                "invalid_token",
                "a bearer access token is required",
                401,
                {"WWW-Authenticate": 'Bearer realm="grantd"'},
            )
        # D12: like every bearer, a refused one counts against the address (429 once over its
        # budget); a valid one is always accepted. Access tokens are signed: no tarpit needed here.
        if looks_exchanged(presented):
            return await _exchanged_userinfo(services, presented)
        try:
            claims = await services.tokens.verify_access(presented)
        except TokenError as exc:
            raise invalid_token(str(exc)) from None
        if claims.get("aud") not in (services.tokens.agent_audience, services.tokens.userinfo_audience()):
            raise invalid_token("not an access token of this server")
        holder, refusal = await access_token_holder(services, claims)
        if holder is None:
            raise invalid_token(refusal)
        person = holder
        scopes = str(claims.get("scope", "")).split()
        if "openid" not in scopes:
            raise OAuthError(
                "insufficient_scope",
                "userinfo needs the openid scope",
                403,
                {"WWW-Authenticate": 'Bearer realm="grantd", error="insufficient_scope", scope="openid"'},
            )
    except OAuthError as exc:
        if exc.status == 401 and presented:
            await services.limits.bearer_refused(client_ip)
        return oauth_error(exc)
    info: dict[str, Any] = {"sub": person["email"]}
    if "email" in scopes:
        info["email"] = person["email"]
        info["email_verified"] = True
    if "profile" in scopes:
        info["name"] = person["name"] or person["email"]
    return json(info, headers={**NO_STORE, **CORS})


async def _exchanged_userinfo(services: Services, token: str) -> HTTPResponse:
    """/userinfo for an exchanged token: the person it acts for, and its actor chain (D16: no path
    drops act). Such a token has no scopes: the e-mail and name it may read on the API are shown.
    A DPoP-bound one needs its proof, which /userinfo (Bearer only) does not take."""
    try:
        claims, person = await exchanged_holder(services, token)
    except TokenError as exc:
        raise invalid_token(str(exc)) from None
    if claims.get("cnf") is not None:
        raise invalid_token("a DPoP-bound token is not accepted at /userinfo")
    info = {
        "sub": person["email"],
        "email": person["email"],
        "email_verified": True,
        "name": person["name"] or person["email"],
        "act": claims["act"],
    }
    return json(info, headers={**NO_STORE, **CORS})


@bp.get("/userinfo", name="userinfo")
async def userinfo_get(request: Request) -> HTTPResponse:
    return await _userinfo(request)


@bp.post("/userinfo", name="userinfo_post")
async def userinfo_post(request: Request) -> HTTPResponse:
    return await _userinfo(request)


# -- CORS preflight (peer §3.1): any origin, no credentials ------------------------------------------


def _preflight(methods: str) -> HTTPResponse:
    return json(
        {},
        headers={
            **CORS,
            "Access-Control-Allow-Methods": methods,
            "Access-Control-Allow-Headers": "Authorization, Content-Type",
            "Access-Control-Max-Age": "86400",
            "Cache-Control": "no-store",
        },
    )


@bp.route("/token", methods=["OPTIONS"], name="token_preflight")
async def token_preflight(request: Request) -> HTTPResponse:
    return _preflight("POST, OPTIONS")


@bp.route("/revoke", methods=["OPTIONS"], name="revoke_preflight")
async def revoke_preflight(request: Request) -> HTTPResponse:
    return _preflight("POST, OPTIONS")


@bp.route("/userinfo", methods=["OPTIONS"], name="userinfo_preflight")
async def userinfo_preflight(request: Request) -> HTTPResponse:
    return _preflight("GET, POST, OPTIONS")


# -- the person's remembered consents (/account) ----------------------------------------------------


async def _person(request: Request) -> Principal:
    return policy.may_manage_own_consents(await principal_of(request))


@bp.get("/api/account/consents", name="list_consents")
async def list_consents(request: Request) -> HTTPResponse:
    principal = await _person(request)
    return json({"data": await authorize.consents_of(services_of(request), principal.id)})


@bp.delete("/api/account/consents/<client_id:str>", name="withdraw_consent")
async def withdraw_consent(request: Request, client_id: str) -> HTTPResponse:
    """Withdraw a consent: the client must ask again, and its refresh families of this person end
    (with them every access token minted from them)."""
    principal = await _person(request)
    services = services_of(request)
    if len(client_id) > 260 or not client_id.isprintable():
        raise Problem(400, "client_id must be printable, at most 260 characters")
    now = services.clock.now_ms()
    # One transaction: the consent goes, and so do the person's refresh families of that client.
    if not await services.store.consents.withdraw(principal.id, client_id, now):
        raise Problem(404, "no consent for this client")
    return json({"withdrawn": True, "client_id": client_id})
