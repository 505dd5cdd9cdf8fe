"""The authorization endpoint's rules (RFC 6749 §4.1, RFC 7636, OIDC Core §3.1.2), apart from HTTP.

Validation happens in two stages, and the stage decides where an error goes:

1. ``client_id`` and ``redirect_uri`` (the client must be known and the URI registered, compared
   exactly; RFC 8252 loopback ports for apes-cli). Until both are proven, nothing is redirected
   anywhere: the error is shown on grantd's own HTML page (``PageError``). Redirecting to an
   unvalidated URI is an open redirect (the peer does it; peer bug 11).
2. Everything else (``response_type=code``, PKCE with S256 only, scopes, ``prompt``,
   ``authorization_details`` refused: peer bug 5) is answered by redirecting to the validated URI
   with ``error``, ``error_description``, ``state`` and ``iss`` (RFC 9207) (``RedirectError``).

Nothing is approved by a GET: a person who has not consented to this client (or to these scopes)
sees the consent page, whose script approves with a JSON POST (``approve``) answering
``{location}`` (peer bug 16). A public client with API access (``apes-cli``) sees the consent
page every time, remembered consent or not, and ``prompt=none`` never yields it a code
(``always_asks``; RFC 8252 §8.6, D8). Codes: ``secrets.token_urlsafe(32)``, stored as SHA-256 in
``store.onetime`` kind ``code``, good for 60 s, single use, bound to client, redirect URI, PKCE
challenge, nonce, scope, person and auth_time.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from grantd.core.errors import Problem
from grantd.oauth import resources
from grantd.oauth.errors import OAuthError
from grantd.oauth.issue import secret_hash
from grantd.services.clients import Client
from grantd.store.records import Person

if TYPE_CHECKING:
    from grantd.services.context import Services

CODE_TTL_S = 60
CODE_KEEP_S = 600  # the record outlives the code so an expired code is told apart from an unknown one
SCOPES = ("openid", "email", "profile", "offline_access")
DEFAULT_SCOPE = "openid email profile"  # the peer SP sends no scope and reads email and name
PROMPTS = frozenset({"none", "login", "consent"})
SINGLE = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "nonce",
    "code_challenge",
    "code_challenge_method",
    "prompt",
    "login_hint",
    "max_age",
    "response_mode",
    "resource",
)
MAX_STATE = 512
MAX_NONCE = 512
MAX_QUERY = 1800  # the authorize URL must fit /login?next= (grantd.web.pages.MAX_NEXT) to come back
_CHALLENGE = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
SCOPE_TEXT = {
    "openid": "sign you in and know who you are (your e-mail address)",
    "email": "see your e-mail address",
    "profile": "see your name",
    "offline_access": "stay signed in after you leave (a refresh token)",
}


class PageError(Exception):
    """An error shown on grantd's page, never redirected (the redirect URI is not proven yet)."""

    def __init__(self, status: int, title: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail


class RedirectError(Exception):
    """An error sent back to the client at its validated redirect URI."""

    def __init__(self, redirect_uri: str, state: str | None, error: str, description: str):
        super().__init__(f"{error}: {description}")
        self.redirect_uri = redirect_uri
        self.state = state
        self.error = error
        self.description = description


@dataclass(frozen=True)
class AuthorizationRequest:
    client: Client
    redirect_uri: str
    state: str | None
    scope: str
    nonce: str | None
    code_challenge: str
    prompt: frozenset[str]
    login_hint: str | None
    query: str  # the request's parameters as a query string (the consent POST sends it back)
    resource: str | None = None  # RFC 8707: a configured resource (grantd.oauth.resources), canonical

    def fail(self, error: str, description: str) -> RedirectError:
        return RedirectError(self.redirect_uri, self.state, error, description)

    @property
    def scopes(self) -> list[str]:
        return self.scope.split()


def with_query(uri: str, params: dict[str, str]) -> str:
    """``uri`` with ``params`` added to its query (its own query kept)."""
    parts = urlsplit(uri)
    extra = urlencode(params)
    query = f"{parts.query}&{extra}" if parts.query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def error_location(error: RedirectError, issuer: str) -> str:
    params = {"error": error.error, "error_description": error.description}
    if error.state is not None:
        params["state"] = error.state
    params["iss"] = issuer
    return with_query(error.redirect_uri, params)


def normalise_email(value: str | None) -> str | None:
    """``login_hint`` as e-mails are compared (D1; peer bug 19): trimmed, lowercased."""
    if value is None:
        return None
    value = value.strip().lower()
    return value or None


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    return values[0]


def parse_query(query: str) -> dict[str, list[str]]:
    try:
        return parse_qs(query, keep_blank_values=True, strict_parsing=False, max_num_fields=50)
    except ValueError:
        return {}


async def validate(services: Services, params: Mapping[str, Sequence[str]]) -> AuthorizationRequest:
    """The request, validated; ``PageError`` or ``RedirectError`` (module docstring)."""
    for name in ("client_id", "redirect_uri"):
        if len(params.get(name) or ()) > 1:
            raise PageError(400, "Invalid request", f"{name} is given more than once")
    client_id = _one(params, "client_id")
    if not client_id:
        raise PageError(400, "Invalid request", "client_id is missing")
    client = await services.oauth_clients.get(client_id)
    if client is None:
        raise PageError(400, "Unknown client", services.oauth_clients.why_unknown(client_id))
    if "authorization_code" not in client.grant_types:
        raise PageError(400, "Invalid request", "this client does not use the authorization code flow")
    redirect_uri = _one(params, "redirect_uri")
    if not redirect_uri:
        raise PageError(400, "Invalid request", "redirect_uri is missing")
    if not client.redirect_allowed(redirect_uri):
        raise PageError(400, "Invalid redirect URI", "redirect_uri is not registered for this client")
    state = _one(params, "state")

    def fail(error: str, description: str) -> RedirectError:
        return RedirectError(
            redirect_uri, state if state is not None and len(state) <= MAX_STATE else None, error, description
        )

    for name in SINGLE:
        if len(params.get(name) or ()) > 1:
            raise fail("invalid_request", f"{name} is given more than once")
    if state is not None and (len(state) > MAX_STATE or not state.isprintable()):
        raise fail("invalid_request", f"state must be at most {MAX_STATE} printable characters")
    if "authorization_details" in params:
        raise fail(
            "invalid_request",
            "authorization_details is not supported here (grants are requested at /api/grants)",
        )
    if "request" in params:
        raise RedirectError(redirect_uri, state, "request_not_supported", "request objects are not supported")
    if "request_uri" in params:
        raise RedirectError(redirect_uri, state, "request_uri_not_supported", "request_uri is not supported")
    response_type = _one(params, "response_type")
    if response_type != "code":
        raise fail("unsupported_response_type", "response_type must be code")
    mode = _one(params, "response_mode")
    if mode not in (None, "query"):
        raise fail("invalid_request", "response_mode must be query")
    method = _one(params, "code_challenge_method")
    challenge = _one(params, "code_challenge")
    if not challenge:
        raise fail("invalid_request", "code_challenge is required (PKCE, S256)")
    if method != "S256":
        raise fail("invalid_request", "code_challenge_method must be S256 (plain is not allowed)")
    if not _CHALLENGE.match(challenge):
        raise fail("invalid_request", "code_challenge must be 43-128 characters of base64url")
    raw_scope = _one(params, "scope")
    resource = None
    if _one(params, "resource") is not None:
        try:
            resource = resources.find(services.config, str(_one(params, "resource")))
        except OAuthError as exc:
            raise fail(exc.error, exc.description) from None
    # a resource's default: its scopes without a grant behind them (a grant-gated scope is asked for
    # by name, never granted because it was listed: beyond.md §5)
    default = (
        DEFAULT_SCOPE
        if resource is None
        else " ".join(s for s in resource.scopes if s not in resource.grant_scopes)
    )
    scopes = (raw_scope if raw_scope is not None and raw_scope.strip() else default).split()
    known = SCOPES if resource is None else (*SCOPES, *resource.scopes)
    unknown = [s for s in scopes if s not in known]
    if unknown:
        raise fail("invalid_scope", f"unknown scope {unknown[0][:40]!r} (supported: {' '.join(known)})")
    # canonical order, no repeats; with a resource only its scopes: its token is for it alone (no ID
    # token, no refresh token: grantd.oauth.resources), so OpenID scopes asked too are dropped
    granted = known if resource is None else resource.scopes
    scope = " ".join(s for s in granted if s in scopes)
    nonce = _one(params, "nonce")
    if nonce is not None and (len(nonce) > MAX_NONCE or not nonce.isprintable()):
        raise fail("invalid_request", f"nonce must be at most {MAX_NONCE} printable characters")
    prompt = frozenset((_one(params, "prompt") or "").split())
    if prompt - PROMPTS:
        raise fail("invalid_request", f"prompt must be a combination of {', '.join(sorted(PROMPTS))}")
    if "none" in prompt and len(prompt) > 1:
        raise fail("invalid_request", "prompt=none cannot be combined with other values")
    login_hint = normalise_email(_one(params, "login_hint"))
    if login_hint is not None and (len(login_hint) > 254 or not login_hint.isprintable()):
        raise fail("invalid_request", "login_hint must be an e-mail address")
    query = urlencode([(k, v) for k, values in params.items() for v in values[:1]])
    if len(query) > MAX_QUERY:
        raise fail("invalid_request", "the authorization request is too long")
    return AuthorizationRequest(
        client,
        redirect_uri,
        state,
        scope,
        nonce,
        challenge,
        prompt,
        login_hint,
        query,
        resource.resource if resource is not None else None,
    )


def always_asks(client: Client) -> bool:
    """A public client with API access (``apes-cli``) never gets a code without the person's
    interaction (RFC 8252 §8.6, D8): anyone can listen on a loopback port and name any
    ``code_challenge``, so a remembered consent would let any web page navigate a signed-in
    browser to /authorize and have an API-capable code delivered to its own listener."""
    return client.public and client.api_access


async def needs_consent(services: Services, req: AuthorizationRequest, person: Person) -> bool:
    """True unless the person already allowed this client every requested scope (remembered
    consent, peer bug 14) and the client did not ask to be asked again (prompt=consent). Always
    True for a client that ``always_asks``."""
    if "consent" in req.prompt or always_asks(req.client):
        return True
    consent = await services.store.consents.get(person["person_id"], req.client.client_id)
    return consent is None or not set(consented_scopes(req, req.scopes)) <= set(consent["scope"].split())


def consented_scopes(req: AuthorizationRequest, scopes: Any) -> list[str]:
    """How allowed scopes are remembered: as they are, and for a resource (D17) as
    ``scope@resource``, so what a person allowed for one resource never covers another that reuses
    the scope's name (the consent page named that one resource). No two can meet: grantd's own
    (OpenID) scopes hold no ``@``, and each resource's names end in ``@`` and its own URI."""
    if req.resource is None:
        return list(scopes)
    return [f"{scope}@{req.resource}" for scope in scopes]


CONSENT_TICKET_TTL_S = 600


def _request_digest(req: AuthorizationRequest) -> str:
    return secret_hash(f"{req.client.client_id}\n{req.redirect_uri}\n{req.query}")


async def consent_ticket(services: Services, req: AuthorizationRequest, person: Person) -> str:
    """A one-time ticket for the consent page shown to ``person`` for ``req`` (``store.onetime``
    kind ``consent``, 10 min): approving a client that ``always_asks`` needs it, so a code only
    follows a click on a page grantd showed for this very request (not a POST built elsewhere)."""
    ticket = secrets.token_urlsafe(24)
    now = services.clock.now_ms()
    await services.store.onetime.put(
        "consent",
        secret_hash(ticket),
        {
            "person_id": person["person_id"],
            "request": _request_digest(req),
        },
        now + CONSENT_TICKET_TTL_S * 1000,
        now,
    )
    return ticket


async def take_consent_ticket(
    services: Services, req: AuthorizationRequest, person: Person, ticket: Any
) -> bool:
    """True if ``ticket`` was issued with the consent page of ``req`` to ``person`` and is unused;
    it is used up either way (single use, whatever follows)."""
    if not isinstance(ticket, str) or not 0 < len(ticket) <= 100:
        return False
    found = await services.store.onetime.take("consent", secret_hash(ticket), services.clock.now_ms())
    return (
        found is not None
        and found.get("person_id") == person["person_id"]
        and found.get("request") == _request_digest(req)
    )


async def check_consent_click(
    services: Services, req: AuthorizationRequest, person: Person, ticket: Any
) -> None:
    """RFC 8252 §8.6: a code for a public client with API access follows only a click on the
    consent page grantd showed for this very request (its single-use ticket); 403 otherwise."""
    if always_asks(req.client) and not await take_consent_ticket(services, req, person, ticket):
        raise Problem(
            403,
            "approve on the consent page grantd showed for this request (its ticket is missing, "
            "used or expired: open the sign-in again)",
        )


async def remember_consent(services: Services, req: AuthorizationRequest, person: Person) -> None:
    """Remember the person's answer; a resource's grant-gated scopes never (each use asks again)."""
    now = services.clock.now_ms()
    gated = resources.find(services.config, req.resource).grant_scopes if req.resource is not None else {}
    await services.store.consents.remember(
        {
            "person_id": person["person_id"],
            "client_id": req.client.client_id,
            "scope": " ".join(consented_scopes(req, [s for s in req.scopes if s not in gated])),
            "created_at": now,
            "updated_at": now,
        }
    )


async def issue_code(
    services: Services,
    req: AuthorizationRequest,
    person: Person,
    auth_time: int,
    *,
    grant_id: str | None = None,
) -> str:
    """A new code for ``req``; returns the redirect location carrying it. ``grant_id``: the approved
    grant behind a resource's grant-gated scopes (grantd.oauth.mcp_grants)."""
    code = secrets.token_urlsafe(32)
    now = services.clock.now_ms()
    data: dict[str, Any] = {
        "client_id": req.client.client_id,
        "redirect_uri": req.redirect_uri,
        "code_challenge": req.code_challenge,
        "nonce": req.nonce,
        "scope": req.scope,
        "person_id": person["person_id"],
        "auth_time": auth_time,
        "expires_at": now + CODE_TTL_S * 1000,
    }
    if req.resource is not None:
        data["resource"] = req.resource
    if grant_id is not None:
        data["grant_id"] = grant_id
    await services.store.onetime.put("code", secret_hash(code), data, now + CODE_KEEP_S * 1000, now)
    params = {"code": code}
    if req.state is not None:
        params["state"] = req.state
    params["iss"] = services.issuer
    return with_query(req.redirect_uri, params)


def scope_descriptions(req: AuthorizationRequest) -> list[str]:
    return [SCOPE_TEXT.get(s, f"use {req.resource} for you ({s})") for s in req.scopes]


__all__ = [
    "AuthorizationRequest",
    "PageError",
    "RedirectError",
    "always_asks",
    "consent_ticket",
    "error_location",
    "issue_code",
    "needs_consent",
    "take_consent_ticket",
    "validate",
]


# -- remembered consents (D9): the person's account page and GET /api/account/consents ----------


def consent_view(consent: Any, name: str | None = None) -> dict[str, Any]:
    return {
        "client_id": consent["client_id"],
        "client_name": name or consent["client_id"],
        "scope": consent["scope"],
        "created_at": consent["created_at"],
        "updated_at": consent["updated_at"],
    }


async def consents_of(services: Services, person_id: str) -> list[dict[str, Any]]:
    """The person's consents, with the names of clients known without a fetch (built in, config,
    cached metadata; else the client_id)."""
    views = []
    for consent in await services.store.consents.list_for(person_id):
        known = services.oauth_clients.known(consent["client_id"])
        views.append(consent_view(consent, known.name if known else None))
    return views
