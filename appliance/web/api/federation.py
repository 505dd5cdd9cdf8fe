"""Federated sign-in: people sign in to grantd through an upstream identity provider
(``[[federation.providers]]``; the provider types come from plugins, grantd.hookspecs describes
their objects), and the public list a login page shows.

- ``GET /api/federation/providers``: the configured providers, without secrets.
- ``GET /auth/federated/{provider_id}?next=/local/path``: draws a random ``state``, asks the
  provider's ``begin`` for the upstream URL, keeps the flow server-side (``store.onetime`` kind
  ``federation``, key SHA-256 of ``state``, single use, 10 minutes: the provider's kept data, the
  provider id, ``next`` and the hash of the browser binding) and answers 302 to the upstream. The
  browser binding is a cookie (``grantd_federation``, HttpOnly, SameSite=Lax, path
  ``/auth/federated/``): a callback is accepted only from the browser that started the sign-in,
  so nobody can sign a victim in to the attacker's account by sending them a callback link.
  ``next`` is only ever a local path (``grantd.web.pages.safe_next``; the peer's returnTo was not
  checked).
- ``GET /auth/federated/{provider_id}/callback?state=...``: takes the flow (a replayed or unknown
  state finds nothing), checks the binding, lets the provider's ``finish`` verify the upstream's
  answer, then applies the rules every provider type shares: the e-mail must be verified, in the
  provider's ``allowed_domains`` (if any), not an agent's (D11), and name an active person -- or,
  with ``create_unknown``, becomes a new person (never an administrator's address: those are
  created by an administrator). Then an ordinary browser session starts (the browser's previous
  one ends) and the answer is 303 to ``next``.

Every failure is an HTML error page with a message for the person (400 for a bad or stale link or
an answer that does not verify, 403 for an identity that may not sign in, 404 for an unknown
provider, 429 over the sign-in limit, 503 when the upstream cannot be reached or answers nonsense:
the sign-in is not available right now): never a stack trace, never a 500.
"""

from __future__ import annotations

import json as json_module
import logging
from urllib.parse import urlsplit

import httpx
from sanic import Blueprint, Request
from sanic.response import HTTPResponse, json

from grantd.core.errors import Problem
from grantd.hookspecs import FederatedIdentity, FederationContext, FederationError, FederationStart
from grantd.logs import LOGGER
from grantd.plugin_manager import FederationProvider
from grantd.services import federation, flows, sessions
from grantd.services.context import Services
from grantd.services.limits import Rule
from grantd.web.api.common import services_of, set_session_cookie
from grantd.web.views import error_page, safe_next

bp = Blueprint("federation")
log = logging.getLogger(LOGGER)

KIND = "federation"  # store.onetime kind
BINDING_COOKIE = "grantd_federation"
BINDING_PATH = "/auth/federated/"
UPSTREAM_TIMEOUT_S = 10.0
NO_STORE = {"Cache-Control": "no-store"}
PAGE_STATUSES = frozenset({400, 403, 404, 429, 503})
STALE = (
    "This sign-in link is incomplete, was already used or has expired (sign-ins must finish within "
    "10 minutes). Start again from the sign-in page."
)


def sign_in_rule(services: Services) -> Rule:
    """Federated sign-ins count against the per-address limit of passkey sign-ins (D12)."""
    return Rule(
        "federation-start.address", services.config.limits.passkey_per_address, "too many sign-in attempts"
    )


def _find(request: Request, provider_id: str) -> FederationProvider | None:
    return next((p for p in services_of(request).federation if p.id == provider_id and p.can_sign_in), None)


def callback_url(services: Services, provider_id: str) -> str:
    """The redirect_uri of a provider: register exactly this at the upstream."""
    return f"{services.issuer}/auth/federated/{provider_id}/callback"


def _failed(
    status: int, detail: str, *, title: str = "Sign-in failed", headers: dict[str, str] | None = None
) -> HTTPResponse:
    if status not in PAGE_STATUSES:  # a plugin's odd status
        status = 503 if isinstance(status, int) and status >= 500 else 400
    response = error_page(None, status, title, detail)
    response.headers.update(headers or {})
    return response


def _http() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=UPSTREAM_TIMEOUT_S, follow_redirects=False, headers={"User-Agent": "grantd-federation"}
    )


def _context(services: Services, http: httpx.AsyncClient) -> FederationContext:
    return FederationContext(issuer=services.issuer, http=http, now=services.clock.now_s)


def _json_ready(value: object) -> bool:
    """A dict the store can keep (``begin``'s ``kept``)."""
    try:
        return isinstance(value, dict) and bool(json_module.dumps(value)) is True
    except (TypeError, ValueError):
        return False


def _binding_of(request: Request) -> str | None:
    value = request.cookies.get(BINDING_COOKIE)
    return value if sessions.plausible(value) else None


@bp.get("/api/federation/providers")
async def providers(request: Request) -> HTTPResponse:
    """No credential needed (a login page lists them); each entry is public_info(): no secrets."""
    return json({"providers": [provider.public_info() for provider in services_of(request).federation]})


@bp.get("/auth/federated/<provider_id:str>")
async def start(request: Request, provider_id: str) -> HTTPResponse:
    services = services_of(request)
    entry = _find(request, provider_id)
    if entry is None:
        return _failed(404, "There is no such sign-in provider here.", title="Unknown sign-in provider")
    try:
        await services.limits.hit(sign_in_rule(services), getattr(request.ctx, "client_ip", None))
    except Problem as exc:
        return _failed(
            exc.status,
            "Too many sign-in attempts from your address. Wait a minute and try again.",
            headers=exc.headers,
        )
    target = safe_next(request.args.get("next"))
    state = flows.new_secret()
    binding = _binding_of(request) or flows.new_secret()  # one per browser: several tabs may sign in
    try:
        async with _http() as http:
            started = await entry.provider.begin(
                _context(services, http), redirect_uri=callback_url(services, entry.id), state=state
            )
    except FederationError as exc:
        return _failed(exc.status, exc.message)
    except Exception:  # a plugin's bug: the person gets a page, the log the traceback
        log.exception("federation provider %s failed to start a sign-in", entry.id)
        return _failed(503, f"Signing in through {entry.name} is not possible right now. Try again later.")
    url = started.url if isinstance(started, FederationStart) and isinstance(started.url, str) else ""
    parts = urlsplit(url)
    kept = started.kept if isinstance(started, FederationStart) else None
    if (
        parts.scheme not in ("https", "http")
        or not parts.hostname
        or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url)
        or not _json_ready(kept)
    ):
        log.error("federation provider %s returned an unusable upstream URL or kept data", entry.id)
        return _failed(503, f"Signing in through {entry.name} is not possible right now. Try again later.")
    await flows.keep(services, KIND, state, binding, {"provider": entry.id, "next": target, "kept": kept})
    response = HTTPResponse(status=302, headers={"Location": url, **NO_STORE})
    response.add_cookie(
        BINDING_COOKIE,
        binding,
        path=BINDING_PATH,
        secure=sessions.secure_cookie(services),
        max_age=flows.FLOW_TTL_MS // 1000,
        httponly=True,
        samesite="Lax",
    )
    return response


@bp.get("/auth/federated/<provider_id:str>/callback")
async def callback(request: Request, provider_id: str) -> HTTPResponse:
    services = services_of(request)
    entry = _find(request, provider_id)
    if entry is None:
        return _failed(404, "There is no such sign-in provider here.", title="Unknown sign-in provider")
    params = {key: values[0] for key, values in request.args.items() if values}
    try:
        flow = await flows.take(services, KIND, params.get("state"), _binding_of(request))  # single use
    except flows.FlowRefused as refused:
        if not refused.other_browser:
            return _failed(400, STALE)
        return _failed(
            400,
            "This sign-in was started in another browser (or this browser refused the sign-in "
            "cookie). Start again from the sign-in page, in this browser.",
        )
    if flow.get("provider") != entry.id:
        return _failed(400, STALE)
    try:
        async with _http() as http:
            identity = await entry.provider.finish(
                _context(services, http),
                redirect_uri=callback_url(services, entry.id),
                params=params,
                kept=dict(flow.get("kept") or {}),
            )
    except FederationError as exc:
        return _failed(exc.status, exc.message)
    except Exception:
        log.exception("federation provider %s failed to finish a sign-in", entry.id)
        return _failed(503, f"Signing in through {entry.name} failed. Try again later.")
    if not isinstance(identity, FederatedIdentity) or not isinstance(identity.email, str):
        log.error(
            "federation provider %s returned %s, not a FederatedIdentity", entry.id, type(identity).__name__
        )
        return _failed(503, f"Signing in through {entry.name} failed. Try again later.")
    try:
        person = await federation.person_for(services, entry, identity)
    except FederationError as exc:
        return _failed(exc.status, exc.message)
    except Problem as exc:
        if exc.status >= 500:
            raise
        return _failed(exc.status, exc.detail)
    current = request.cookies.get(sessions.SESSION_COOKIE)
    if current and request.headers.get("authorization") is None:
        await sessions.end(services, current)  # a new sign-in replaces the browser's session
    value, _ = await sessions.start(services, person, request.headers.get("user-agent", ""))
    log.info("federated sign-in of %s through %s", person["person_id"], entry.id)
    response = HTTPResponse(status=303, headers={"Location": str(flow.get("next") or "/"), **NO_STORE})
    set_session_cookie(response, services, value)
    return response
