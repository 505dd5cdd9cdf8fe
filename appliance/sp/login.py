"""SP login (D9): a person of another domain signs in here at the IdP their e-mail domain names.

``begin`` (``POST /api/login {email}``): DDISA discovery (``grantd.sp.ddisa``) or ``sp.fallback_idp``;
the IdP's discovery document (cached); an authorization request with PKCE S256 (a 64-byte verifier
from ``secrets``), ``state`` and ``nonce`` (32 random bytes each), ``login_hint`` and ``scope=openid
email profile``. The flow state stays server-side in ``store.onetime`` kind ``sp`` under SHA-256 of
``state`` for 10 minutes, bound to the browser that started it by a cookie (``grantd_sp_flow``,
HttpOnly, SameSite=Lax, path /api/callback) whose SHA-256 the state keeps: a callback URL carried to
another browser signs nobody in there (login CSRF, RFC 6749 §10.12).

``finish`` (``GET /api/callback``): takes the state once (a replay finds nothing), checks the
browser binding, exchanges the code at the IdP's token endpoint (form-encoded, with the verifier),
and verifies the ID token: signature against the IdP's JWKS (cached by kid, refetched on an unknown
kid at most every ``JWKS_REFETCH_S``), ``iss`` equal to the discovered IdP byte for byte, ``aud``
the client id (``azp`` too when ``aud`` is a list), ``nonce``, ``iat``/``exp`` on this server's clock
with 60 s of skew, a lifetime of at most 300 s, ``act`` absent or ``"human"`` (peer bug 29), and
the e-mail the IdP asserts equal to the one the login started with (an IdP is only trusted for the
domain that named it). Then the browser gets a guest session (``sessions.start_guest``).

Every failure is a ``LoginError`` carrying a readable message (the specification's where it has
one); the routes turn it into problem+json (``begin``) or a redirect to ``/?error=<message>``
(``finish``). The code is one of ``LOGIN_ERRORS`` (issue 19: the home page shows only the fixed
message of a known code, never text from the query, so nobody can put words on our origin with a
link); a message outside the table (none today) goes out as ``login_failed``, the generic one.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

import jwt

from grantd.core.errors import Problem
from grantd.logs import LOGGER
from grantd.services import flows, sessions
from grantd.services.outbound import FetchGuard, registrable_domain
from grantd.sp import ddisa
from grantd.sp.fetch import FetchError, request

if TYPE_CHECKING:
    from grantd.config import Config
    from grantd.core.clock import Clock
    from grantd.services.context import Services
    from grantd.store.records import Session

log = logging.getLogger(LOGGER)

FLOW_KIND = "sp"
FLOW_COOKIE = "grantd_sp_flow"
CALLBACK_PATH = "/api/callback"
SCOPE = "openid email profile"
SKEW_S = 60
MAX_TOKEN_LIFETIME_S = 300
METADATA_TTL_MS = 300_000
JWKS_TTL_MS = 3_600_000
JWKS_REFETCH_S = 30
MAX_IDPS_CACHED = 256
ALGORITHMS = ("EdDSA", "ES256", "RS256")

# The specification's messages (http-interface.md, errors table) and grantd's own for the rest.
NO_IDP = "could not discover IdP for this email domain"
CODE_EXCHANGE = "code exchange error"
EXPIRED_CODE = "expired authorization code"
WRONG_AUDIENCE = "JWT audience does not match client ID"
WRONG_ISSUER = "JWT issuer does not match the IdP"
WRONG_NONCE = "JWT nonce does not match the login"
BAD_SIGNATURE = "JWT signature is not valid"
EXPIRED_JWT = "JWT has expired"
LONG_JWT = "JWT lifetime exceeds 300 seconds"
BAD_STATE = "login state is unknown, expired or already used: start again"
OTHER_BROWSER = "this login was started in another browser: start again"
DENIED_DOMAIN = "the e-mail domain's DDISA record refuses logins (mode=deny)"
IDP_UNREACHABLE = "could not reach the IdP"
WRONG_EMAIL = "the IdP signed in another e-mail address than the one entered"
NOT_HUMAN = "only people sign in here (the ID token's act is not human)"
REQUIRED_CLAIMS = ("iss", "aud", "exp", "iat", "sub")
# OAuth's error codes an IdP may send back to the callback (RFC 6749 §4.1.2.1, OIDC Core §3.1.2.6):
# shown by name; anything else an IdP sends, and its error_description, are only logged.
IDP_ERRORS = (
    "invalid_request",
    "unauthorized_client",
    "access_denied",
    "unsupported_response_type",
    "invalid_scope",
    "server_error",
    "temporarily_unavailable",
    "interaction_required",
    "login_required",
    "account_selection_required",
    "consent_required",
)
GENERIC_ERROR = "login_failed"

# The only messages /?error= can show: code -> message.
LOGIN_ERRORS: dict[str, str] = {
    GENERIC_ERROR: "the login did not complete",
    "state": BAD_STATE,
    "other_browser": OTHER_BROWSER,
    "code_exchange": CODE_EXCHANGE,
    "code_exchange_unreachable": f"{CODE_EXCHANGE}: {IDP_UNREACHABLE}",
    "no_id_token": f"{CODE_EXCHANGE}: the IdP sent no ID token",
    "no_code": f"{CODE_EXCHANGE}: the IdP sent no code",
    "expired_code": EXPIRED_CODE,
    "bad_signature": BAD_SIGNATURE,
    "jwks_unreachable": f"{BAD_SIGNATURE}: {IDP_UNREACHABLE}",
    "unknown_key": f"{BAD_SIGNATURE} (unknown key)",
    "bad_algorithm": f"{BAD_SIGNATURE} (its algorithm is not accepted)",
    "key_algorithm": f"{BAD_SIGNATURE} (the key is not for its algorithm)",
    "wrong_issuer": WRONG_ISSUER,
    "wrong_audience": WRONG_AUDIENCE,
    "wrong_nonce": WRONG_NONCE,
    "bad_times": "the ID token's iat and exp must be numbers",
    "expired_jwt": EXPIRED_JWT,
    "future_jwt": "the ID token was issued in the future",
    "long_jwt": LONG_JWT,
    "not_human": NOT_HUMAN,
    "wrong_email": WRONG_EMAIL,
    "idp_refused": "the IdP refused the login",
    **{f"no_{claim}": f"the ID token has no {claim} claim" for claim in REQUIRED_CLAIMS},
    **{f"idp_refused_{error}": f"the IdP refused the login: {error}" for error in IDP_ERRORS},
}
_CODE_OF = {message: code for code, message in LOGIN_ERRORS.items()}


def error_code(message: str) -> str:
    """The code of a login failure's message (``login_failed`` for one not in the table)."""
    return _CODE_OF.get(message, GENERIC_ERROR)


def error_query(message: str) -> str:
    """What ``/?error=`` carries for a login failure: its readable message as the table words it
    (D9: the specification's error table), the generic one for a message not in the table."""
    return LOGIN_ERRORS[error_code(message)]


def error_message(value: str | None) -> str | None:
    """What the home page shows for ``?error=``: a message of the table (given as itself or by its
    code), the generic one for anything else, None without one. Never text the table does not hold,
    so a crafted link cannot make our origin say its words (issue 19)."""
    if value is None:
        return None
    if value in _CODE_OF:
        return value
    return LOGIN_ERRORS.get(value, LOGIN_ERRORS[GENERIC_ERROR])


class LoginError(Exception):
    """A failed login, with the message the person reads and the status ``POST /api/login`` answers."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message = message
        self.status = status

    def problem(self) -> Problem:
        return Problem(self.status, self.message)


@dataclass(frozen=True)
class IdpEndpoints:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def client_id_of(config: Config) -> str:
    """``sp.client_id``, else the issuer's host[:port] (peer-facts §3.8: no scheme)."""
    configured = config.sp.client_id
    return str(configured) if configured else urlsplit(str(config.server.issuer)).netloc.lower()


def redirect_uri_of(issuer: str) -> str:
    return issuer + CALLBACK_PATH


def client_metadata(config: Config) -> dict[str, Any]:
    """``/.well-known/oauth-client-metadata``: what an IdP checks this SP's redirects against."""
    issuer = str(config.server.issuer)
    return {
        "client_id": client_id_of(config),
        "client_name": "grantd",
        "redirect_uris": [redirect_uri_of(issuer)],
        "client_uri": issuer,
        "contacts": [],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
        "scope": SCOPE,
        "id_token_signed_response_alg": "EdDSA",
    }


def _domain_of(url: str) -> str:
    """The registrable domain an IdP's failures are remembered under (``grantd.services.outbound``)."""
    try:
        parts = urlsplit(url)
        return registrable_domain(parts.hostname or "", parts.port)
    except ValueError:
        return url


def _bounded_put(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > MAX_IDPS_CACHED:
        cache.popitem(last=False)


class SpLogin:
    """One per server process (``app.ctx``): the DNS, discovery-document and JWKS caches."""

    def __init__(self, config: Config, clock: Clock, fetches: FetchGuard | None = None):
        sp = config.sp
        self.fetches = (
            fetches  # the process's FetchGuard (grantd.services.outbound), shared with client metadata
        )
        self.config = config
        self.clock = clock
        self.allow_http = bool(sp.allow_http_idp)
        self.fallback_idp = str(sp.fallback_idp) if sp.fallback_idp else None
        self.discovery = ddisa.Discovery(
            list(sp.nameservers),
            allow_http=self.allow_http,
            cache_ttl=int(sp.dns_cache_ttl),
            negative_ttl=int(sp.dns_negative_cache_ttl),
            clock=clock,
        )
        self._endpoints: OrderedDict[str, tuple[int, IdpEndpoints]] = OrderedDict()
        self._jwks: OrderedDict[str, tuple[int, int, dict[str, jwt.PyJWK]]] = (
            OrderedDict()
        )  # uri -> (expires, fetched_s, keys)

    @property
    def client_id(self) -> str:
        return client_id_of(self.config)

    # -- discovery --------------------------------------------------------------------------------

    async def idp_for(self, email: str) -> tuple[str, bool]:
        """(the IdP's issuer URL, whether requests to it are address-guarded)."""
        record = await self.discovery.discover(email)
        if record is not None:
            if record.mode == "deny":
                raise LoginError(DENIED_DOMAIN, 403)
            return record.idp, not self.allow_http
        if self.fallback_idp:
            return self.fallback_idp, False  # configured by the operator: may live on a private network
        raise LoginError(NO_IDP, 404)

    def _endpoint(self, document: dict[str, Any], name: str, default: str, allow_http: bool) -> str:
        value = document.get(name, default)
        if not isinstance(value, str) or not ddisa.valid_idp_url(value, allow_http=allow_http):
            raise LoginError(f"the IdP's discovery document has no usable {name}", 503)
        return value

    async def endpoints(self, idp: str, guarded: bool) -> IdpEndpoints:
        """The IdP's endpoints from ``{idp}/.well-known/openid-configuration`` (cached 5 minutes). The
        document's ``issuer`` must be the IdP's URL exactly; absent endpoints default to the peer's
        paths (``/authorize``, ``/token``, ``/.well-known/jwks.json``)."""
        cached = self._endpoints.get(idp)
        now = self.clock.now_ms()
        if cached is not None and cached[0] > now:
            return cached[1]
        # D12: an IdP named by DNS (by whoever controls a zone) whose discovery failed is not asked
        # again for a while, under any name of its registrable domain (FetchGuard, shared with
        # client metadata); the IdP the operator configured (sp.fallback_idp) is always asked.
        domain = _domain_of(idp)
        remember = idp != self.fallback_idp
        if remember and self.fetches is not None and self.fetches.failed(domain) is not None:
            raise LoginError(f"{IDP_UNREACHABLE} (it failed moments ago; try again later)", 503)
        try:
            status, document = await request(
                "GET",
                idp + "/.well-known/openid-configuration",
                allow_private=not guarded,
                guard=self.fetches,
            )
        except FetchError as exc:
            log.info("SP login: discovery of %r failed: %s", idp, exc)
            self._remember_failure(remember, domain, str(exc))
            raise LoginError(IDP_UNREACHABLE, 503) from None
        if status != 200 or not isinstance(document, dict):
            self._remember_failure(remember, domain, f"discovery answered {status}")
            raise LoginError(f"{IDP_UNREACHABLE} (its discovery document answered {status})", 503)
        if document.get("issuer", idp) != idp:
            raise LoginError("the IdP's discovery document names another issuer", 503)
        # http endpoints: in tests (sp.allow_http_idp), or of a fallback IdP the operator chose with http
        allow_http = self.allow_http or (not guarded and idp.startswith("http://"))
        found = IdpEndpoints(
            issuer=idp,
            authorization_endpoint=self._endpoint(
                document, "authorization_endpoint", idp + "/authorize", allow_http
            ),
            token_endpoint=self._endpoint(document, "token_endpoint", idp + "/token", allow_http),
            jwks_uri=self._endpoint(document, "jwks_uri", idp + "/.well-known/jwks.json", allow_http),
        )
        _bounded_put(self._endpoints, idp, (now + METADATA_TTL_MS, found))
        return found

    def _remember_failure(self, remember: bool, domain: str, why: str) -> None:
        if remember and self.fetches is not None and not str(why).startswith("too many fetches"):
            self.fetches.remember_failure(domain, why)

    # -- begin ------------------------------------------------------------------------------------

    async def begin(self, services: Services, email: str, return_to: str) -> tuple[str, str]:
        """(the IdP authorization URL to send the browser to, the flow cookie's value)."""
        idp, guarded = await self.idp_for(email)
        found = await self.endpoints(idp, guarded)
        verifier = b64url(secrets.token_bytes(64))
        state, nonce, binding = flows.new_secret(), flows.new_secret(), flows.new_secret()
        challenge = b64url(hashlib.sha256(verifier.encode()).digest())
        redirect_uri = redirect_uri_of(services.issuer)
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": redirect_uri,
                "scope": SCOPE,
                "state": state,
                "nonce": nonce,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "login_hint": email,
            }
        )
        separator = "&" if "?" in found.authorization_endpoint else "?"
        await flows.keep(
            services,
            FLOW_KIND,
            state,
            binding,
            {
                "idp": idp,
                "guarded": guarded,
                "token_endpoint": found.token_endpoint,
                "jwks_uri": found.jwks_uri,
                "verifier": verifier,
                "nonce": nonce,
                "email": email,
                "return_to": return_to,
                "client_id": self.client_id,
                "redirect_uri": redirect_uri,
                "created_at": services.clock.now_ms(),
            },
        )
        return found.authorization_endpoint + separator + query, binding

    # -- finish -----------------------------------------------------------------------------------

    async def take_flow(self, services: Services, state: str | None, binding: str | None) -> dict[str, Any]:
        try:
            return await flows.take(services, FLOW_KIND, state, binding)
        except flows.FlowRefused as refused:
            raise LoginError(OTHER_BROWSER if refused.other_browser else BAD_STATE) from None

    async def exchange(self, flow: dict[str, Any], code: str) -> str:
        """The ID token for ``code`` (PKCE verifier, redirect URI and client id with it)."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": flow["redirect_uri"],
            "client_id": flow["client_id"],
            "code_verifier": flow["verifier"],
        }
        try:
            status, answer = await request(
                "POST",
                flow["token_endpoint"],
                allow_private=not flow["guarded"],
                form=form,
                guard=self.fetches,
            )
        except FetchError as exc:
            log.info("SP login: token endpoint of %r failed: %s", flow["idp"], exc)
            raise LoginError(f"{CODE_EXCHANGE}: {IDP_UNREACHABLE}") from None
        answer = answer if isinstance(answer, dict) else {}
        if status != 200:
            described = f"{answer.get('error', '')} {answer.get('error_description', '')}".lower()
            if "expired" in described:
                raise LoginError(EXPIRED_CODE)
            raise LoginError(CODE_EXCHANGE)
        token = answer.get("id_token") or answer.get("assertion")
        if not isinstance(token, str) or token.count(".") != 2:
            raise LoginError(f"{CODE_EXCHANGE}: the IdP sent no ID token")
        return token

    async def _keys(self, jwks_uri: str, guarded: bool, *, refresh: bool) -> dict[str, jwt.PyJWK]:
        now_ms, now_s = self.clock.now_ms(), self.clock.now_s()
        cached = self._jwks.get(jwks_uri)
        if cached is not None and cached[0] > now_ms and (not refresh or now_s - cached[1] < JWKS_REFETCH_S):
            return cached[2]
        try:
            status, document = await request("GET", jwks_uri, allow_private=not guarded, guard=self.fetches)
        except FetchError as exc:
            log.info("SP login: JWKS %r failed: %s", jwks_uri, exc)
            raise LoginError(f"{BAD_SIGNATURE}: {IDP_UNREACHABLE}") from None
        keys: dict[str, jwt.PyJWK] = {}
        if status == 200 and isinstance(document, dict) and isinstance(document.get("keys"), list):
            for item in document["keys"]:
                if not isinstance(item, dict) or item.get("use", "sig") != "sig":
                    continue
                try:
                    key = jwt.PyJWK(item)
                except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError):
                    continue  # a key type or algorithm we do not use
                if key.algorithm_name in ALGORITHMS:
                    keys[str(item.get("kid", ""))] = key
        _bounded_put(self._jwks, jwks_uri, (now_ms + JWKS_TTL_MS, now_s, keys))
        return keys

    async def _key_for(self, flow: dict[str, Any], header: dict[str, Any]) -> jwt.PyJWK:
        kid = header.get("kid")
        kid = kid if isinstance(kid, str) else ""
        for refresh in (False, True):
            keys = await self._keys(flow["jwks_uri"], flow["guarded"], refresh=refresh)
            if kid in keys:
                return keys[kid]
            if not kid and len(keys) == 1:
                return next(iter(keys.values()))
        raise LoginError(f"{BAD_SIGNATURE} (unknown key)")

    async def verify(self, flow: dict[str, Any], token: str) -> dict[str, Any]:
        """The ID token's claims, after every check of the module docstring."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise LoginError(BAD_SIGNATURE) from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            log.info("SP login: an ID token with algorithm %r", str(alg)[:20])
            raise LoginError(LOGIN_ERRORS["bad_algorithm"])
        key = await self._key_for(flow, header)
        if key.algorithm_name != alg:
            raise LoginError(LOGIN_ERRORS["key_algorithm"])
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                options={
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                    "verify_aud": False,
                    "verify_iss": False,
                    "require": list(REQUIRED_CLAIMS),
                },
            )
        except jwt.MissingRequiredClaimError as exc:
            raise LoginError(f"the ID token has no {exc.claim} claim") from None
        except jwt.PyJWTError:
            raise LoginError(BAD_SIGNATURE) from None
        if claims.get("iss") != flow["idp"]:
            raise LoginError(WRONG_ISSUER)
        aud, client_id = claims.get("aud"), self.client_id  # as configured now, not as the login began
        if isinstance(aud, list):
            if client_id not in aud or (len(aud) > 1 and claims.get("azp") != client_id):
                raise LoginError(WRONG_AUDIENCE)
        elif aud != client_id:
            raise LoginError(WRONG_AUDIENCE)
        nonce = claims.get("nonce")
        if not isinstance(nonce, str) or not secrets.compare_digest(
            nonce.encode(), str(flow["nonce"]).encode()
        ):
            raise LoginError(WRONG_NONCE)
        iat, exp = claims.get("iat"), claims.get("exp")
        if (
            isinstance(iat, bool)
            or isinstance(exp, bool)
            or not isinstance(iat, int | float)
            or not isinstance(exp, int | float)
        ):
            raise LoginError("the ID token's iat and exp must be numbers")
        now = self.clock.now_s()
        if exp <= now - SKEW_S:
            raise LoginError(EXPIRED_JWT)
        if iat > now + SKEW_S:
            raise LoginError("the ID token was issued in the future")
        if exp - iat > MAX_TOKEN_LIFETIME_S:
            raise LoginError(LONG_JWT)
        act = claims.get("act", "human")
        if act != "human":  # an agent or a delegated token (act object) does not start a browser session
            raise LoginError(NOT_HUMAN)
        return claims

    async def finish(
        self, services: Services, params: dict[str, str | None], binding: str | None, user_agent: str
    ) -> tuple[str, Session, str]:
        """(guest session cookie, its record, where to send the browser) for a callback's parameters."""
        state, code, error = params.get("state"), params.get("code"), params.get("error")
        flow = await self.take_flow(services, state, binding)
        if error:
            described = params.get("error_description") or ""
            log.info(
                "SP login: the IdP refused: %s", readable(f"{error}: {described}" if described else error)
            )
            raise LoginError(
                LOGIN_ERRORS["idp_refused_" + error] if error in IDP_ERRORS else LOGIN_ERRORS["idp_refused"]
            )
        if not code or len(code) > 2048:
            raise LoginError(f"{CODE_EXCHANGE}: the IdP sent no code")
        claims = await self.verify(flow, await self.exchange(flow, code))
        email = claims.get("email")
        if email is None and isinstance(claims.get("sub"), str) and "@" in claims["sub"]:
            email = claims["sub"]
        if not isinstance(email, str) or email.strip().lower() != str(flow["email"]).lower():
            raise LoginError(WRONG_EMAIL)
        name = claims.get("name")
        name = readable(name, 200) if isinstance(name, str) and name.strip() else None
        cookie, session = await sessions.start_guest(
            services,
            idp=flow["idp"],
            email=str(flow["email"]),
            name=name,
            user_agent=user_agent,
        )
        return cookie, session, str(flow.get("return_to") or "/")


def readable(text: str, limit: int = 300) -> str:
    """Text from another server, fit to show: printable characters only, bounded."""
    cleaned = "".join(c if c.isprintable() else " " for c in text).strip()
    return cleaned[:limit] or "(no reason given)"
