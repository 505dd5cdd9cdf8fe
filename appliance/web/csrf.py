"""The cross-site request check of D8, applied once to every request (a request hook of the app).

A request is *cookie-authenticated* when it carries the session cookie (``grantd_session``) and no
``Authorization`` header (with one, the cookie is never used: browsers do not attach bearers to
cross-site requests, so bearer requests are not affected). The passkey routes (``/api/webauthn/*``)
are treated as cookie-authenticated whether or not a cookie came with them: they *start* sessions,
so a forged sign-in (login CSRF: a victim's browser signed in as the attacker, issue 19) needs no
cookie at all. Such a request with an unsafe method (POST, PUT, PATCH, DELETE) is refused

- 403 ``cross-site request refused`` when its ``Origin`` header, or, without one, the origin of its
  ``Referer``, is not this server's origin (the issuer's origin, or ``webauthn.origin`` when that
  is set apart; ``Origin: null`` and an unparsable Referer count as another origin); on the
  passkey routes also when ``Sec-Fetch-Site`` says ``cross-site``;
- 415 ``request body must be application/json`` when it has a body whose ``Content-Type`` is not
  ``application/json``, on every path. 415 rather than 403: it names what to fix, and HTML forms
  can only send ``application/x-www-form-urlencoded``, ``multipart/form-data`` or ``text/plain``,
  which is exactly what this refuses (together with SameSite=Lax, a cross-site form cannot act
  with the session even if a browser sent no Origin). Our own pages never post a form: their
  scripts send JSON with ``fetch``. Two kinds of route are left to their own body rules, because
  they never read the session cookie: the OAuth protocol endpoints whose RFCs define form bodies
  (``FORM_ENDPOINTS``), and the agents' challenge and authenticate routes, which take a JSON body
  under any content type (curl's ``-d``; ``ANY_CONTENT_TYPE``).

A client that sends neither ``Origin`` nor ``Referer`` is allowed (curl, scripts: not a browser).
Whether the cookie is still valid does not matter: the check runs before authentication.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sanic import Request

from grantd.core.errors import Problem
from grantd.services.sessions import SESSION_COOKIE

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PASSKEY_ROUTES = "/api/webauthn/"
FORM_ENDPOINTS = frozenset(
    {"/token", "/revoke", "/userinfo", "/device_authorization", "/introspect", "/bc-authorize"}
)
ANY_CONTENT_TYPE = frozenset(
    {"/api/agent/challenge", "/api/agent/authenticate", "/api/auth/challenge", "/api/auth/authenticate"}
)


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of a URL, lowercased, default ports dropped; None if it has none."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host:
        return None
    if port is None or (scheme, port) in (("http", 80), ("https", 443)):
        netloc = f"[{host}]" if ":" in host else host
    else:
        netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"{scheme}://{netloc}"


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "transfer-encoding" in request.headers or bool(request.body)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json"


def check(request: Request, own_origins: frozenset[str]) -> None:
    """Raise the refusal for a cookie-authenticated (or passkey) cross-site or non-JSON state change.
    ``own_origins``: this server's origins (``origin_of`` of the issuer and of ``webauthn.origin``)."""
    if request.method not in UNSAFE_METHODS or "authorization" in request.headers:
        return
    passkey = request.path.startswith(PASSKEY_ROUTES)
    if not passkey and SESSION_COOKIE not in request.cookies:
        return
    origin = request.headers.get("origin")
    claimed = origin if origin is not None else request.headers.get("referer")
    if claimed is not None and origin_of(claimed) not in own_origins:
        raise Problem(403, "cross-site request refused")
    if passkey and (request.headers.get("sec-fetch-site") or "").strip().lower() == "cross-site":
        raise Problem(403, "cross-site request refused")
    if request.path in FORM_ENDPOINTS or request.path in ANY_CONTENT_TYPE:
        return
    if _has_body(request) and not _is_json(request.headers.get("content-type")):
        raise Problem(415, "request body must be application/json")


def own_origins(issuer: str, webauthn_origin: str | None) -> frozenset[str]:
    return frozenset(o for o in (origin_of(issuer), origin_of(webauthn_origin or issuer)) if o)
