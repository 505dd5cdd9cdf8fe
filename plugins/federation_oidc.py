"""Upstream OpenID Connect providers (federated login): the provider type "oidc".

A ``[[federation.providers]]`` table of type "oidc" is checked here when the server starts (and
by ``grantd config validate``): every problem is reported at once, and a configured provider is
listed publicly (id, type, name, issuer; never the secret) at ``GET /api/federation/providers``.

The sign-in round trip (grantd.web.api.federation runs it; the provider object protocol is in
grantd.hookspecs):

- ``begin``: the upstream's discovery document (``{issuer}/.well-known/openid-configuration``,
  fetched with httpx, cached an hour, its ``issuer`` must be the configured one), then the browser
  goes to its ``authorization_endpoint`` with ``response_type=code``, PKCE S256, ``state`` and a
  ``nonce``; the verifier and the nonce stay server-side (``kept``).
- ``finish``: the code is exchanged at the ``token_endpoint``, authenticated with a method the
  upstream advertises (``token_endpoint_auth_methods_supported``; absent means
  ``client_secret_basic``, OpenID Connect Discovery §3): with a configured ``client_secret``,
  ``client_secret_basic`` if offered, else ``client_secret_post``; else (or without a secret)
  ``none``, which sends no secret at all. ``client_id`` is always in the form (D9: the peer's IdP
  offers only ``none``/``private_key_jwt`` and needs it there). No usable method: the sign-in is
  refused before the browser leaves (503). Then the ``id_token`` is verified before any claim is read: its ``alg`` (EdDSA, ES256 or RS256; never
  ``none`` or an HMAC) must fit the upstream JWKS key named by ``kid`` (the JWKS is fetched again
  once when the kid is unknown: key rotation), the signature must verify, ``iss`` is the configured
  issuer, ``aud`` contains ``client_id`` (and ``azp`` is ``client_id`` when there are several
  audiences or ``azp`` is present), ``nonce`` is the one sent, ``exp`` is in the future and
  ``iat`` not in the future (60 s skew each way), ``email_verified`` is true (or absent, when the
  provider has ``trust_email = true`` because its upstream never sends it; an explicit ``false`` is
  always refused) and the e-mail is the ``email_claim`` claim. When the id_token lacks the e-mail, the upstream's ``userinfo_endpoint``
  is asked with the access token (its ``sub`` must be the id_token's).

Transport rule: the issuer and every endpoint of its discovery document must be https, except on a
loopback host (``localhost``, ``127.0.0.0/8``, ``::1``), where http is allowed: that traffic never
leaves the machine, and it is what tests and a development setup of two local servers need.
"""

from __future__ import annotations

import asyncio
import base64
import difflib
import hashlib
import hmac
import ipaddress
import json
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx
import jwt
from jwt import PyJWK

from grantd.hookspecs import FederatedIdentity, FederationContext, FederationError, FederationStart, hookimpl
from grantd.services.outbound import DEADLINE_S as FETCH_DEADLINE_S

# OAuth's error codes at the redirect (RFC 6749 §4.1.2.1, OIDC Core §3.1.2.6): the only callback
# error text a sign-in page shows.
OAUTH_ERRORS = frozenset(
    {
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
    }
)

TYPE = "oidc"
DEFAULT_SCOPES = ("openid", "email", "profile")
KEYS = (
    "id",
    "type",
    "name",
    "issuer",
    "client_id",
    "client_secret",
    "scopes",
    "email_claim",
    "allowed_domains",
    "create_unknown",
    "trust_email",
)
# how grantd can authenticate at an upstream's token endpoint, in order of preference
AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")
DEFAULT_AUTH_METHODS = (
    "client_secret_basic",
)  # OpenID Connect Discovery 1.0 §3: the default when none is listed
_SCOPE = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+$")  # RFC 6749 scope-token
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")

ALGORITHMS = ("EdDSA", "ES256", "RS256")  # id_token signatures we verify (never none, never HMAC)
SKEW_S = 60  # clock difference tolerated between us and the upstream (exp, iat)
DISCOVERY_TTL_S = 3600  # the discovery document and the JWKS are kept this long
MAX_DOCUMENT = 512 * 1024  # bytes of a discovery document, JWKS or token answer we accept
CODE_PARAM_MAX = 4096


def is_loopback_host(host: str | None) -> bool:
    """localhost, 127.0.0.0/8 or ::1: traffic to them never leaves the machine."""
    if not host:
        return False
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def transport_ok(url: str) -> bool:
    """https, or http on a loopback host (the module's transport rule)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(parts.hostname))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class _Cached:
    value: Any
    fetched_at: int


@dataclass
class OidcProvider:
    id: str
    name: str
    issuer: str
    client_id: str
    client_secret: str | None = field(repr=False)  # None: a public client upstream (method "none")
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    email_claim: str = "email"
    allowed_domains: tuple[str, ...] = ()  # empty: any e-mail domain
    create_unknown: bool = False  # sign in people grantd does not know yet (as new persons)
    trust_email: bool = False  # an upstream that never sends email_verified: its e-mail counts as verified
    configured_issuer: str = ""  # as written in the config (with a trailing slash, if it had one)
    _discovery: _Cached | None = field(default=None, repr=False, compare=False)
    _jwks: _Cached | None = field(default=None, repr=False, compare=False)

    def public_info(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "type": TYPE, "issuer": self.issuer}

    @property
    def issuers(self) -> tuple[str, ...]:
        """The iss values accepted: the configured issuer exactly, and without its trailing slash
        (``issuer`` is kept without one; providers differ in whether their issuer has it)."""
        return tuple(dict.fromkeys((self.configured_issuer or self.issuer, self.issuer)))

    # -- upstream documents -------------------------------------------------------------------

    async def _send(
        self, ctx: FederationContext, method: str, url: str, what: str, **kwargs: Any
    ) -> tuple[int, Any]:
        """(status, the JSON body or None) of one call to the upstream, reading at most MAX_DOCUMENT bytes."""
        if not transport_ok(url):
            raise FederationError(
                f"{self.name} names an insecure {what} URL (https is required): {url[:200]}", 503
            )
        body = bytearray()
        try:
            # One deadline for the whole call (D12, grantd.services.outbound): httpx's timeouts are per
            # read, so an upstream that drips a byte a second would hold the login for ever.
            async with asyncio.timeout(FETCH_DEADLINE_S), ctx.http.stream(method, url, **kwargs) as response:
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DOCUMENT:
                        raise FederationError(f"{self.name} sent a {what} that is too large.", 503)
                status = response.status_code
        except (httpx.HTTPError, TimeoutError):
            raise FederationError(
                f"{self.name} cannot be reached right now (its {what} did not answer). Try again later.", 503
            ) from None
        try:
            return status, json.loads(body)
        except ValueError:
            return status, None

    async def _get_json(
        self, ctx: FederationContext, url: str, what: str, headers: dict[str, str] | None = None
    ) -> Any:
        status, found = await self._send(
            ctx, "GET", url, what, headers={"Accept": "application/json", **(headers or {})}
        )
        if status != 200:
            raise FederationError(f"{self.name} answered its {what} with status {status}.", 503)
        if found is None:
            raise FederationError(f"{self.name} sent a {what} that is not JSON.", 503)
        return found

    async def discovery(self, ctx: FederationContext) -> dict[str, Any]:
        """The upstream's OpenID discovery document, checked and cached (``DISCOVERY_TTL_S``)."""
        now = ctx.now()
        if self._discovery is not None and now - self._discovery.fetched_at < DISCOVERY_TTL_S:
            return dict(self._discovery.value)
        document = await self._get_json(
            ctx, f"{self.issuer}/.well-known/openid-configuration", "discovery document"
        )
        if not isinstance(document, dict):
            raise FederationError(f"{self.name} sent a discovery document that is not a JSON object.", 503)
        if document.get("issuer") not in self.issuers:
            raise FederationError(
                f"{self.name}'s discovery document names another issuer "
                f"({str(document.get('issuer'))[:200]!r}, configured: {self.issuer!r}).",
                503,
            )
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            value = document.get(key)
            if not isinstance(value, str) or not transport_ok(value):
                raise FederationError(
                    f"{self.name}'s discovery document has no usable {key} (an https URL).", 503
                )
        userinfo = document.get("userinfo_endpoint")
        if userinfo is not None and (not isinstance(userinfo, str) or not transport_ok(userinfo)):
            document = {**document, "userinfo_endpoint": None}
        self._discovery = _Cached(document, now)
        return dict(document)

    async def jwks(self, ctx: FederationContext, *, refresh: bool = False) -> list[dict[str, Any]]:
        """The upstream's signing keys (cached like the discovery document; ``refresh``: fetch now)."""
        now = ctx.now()
        if not refresh and self._jwks is not None and now - self._jwks.fetched_at < DISCOVERY_TTL_S:
            return list(self._jwks.value)
        document = await self.discovery(ctx)
        found = await self._get_json(ctx, document["jwks_uri"], "key set (JWKS)")
        keys = found.get("keys") if isinstance(found, dict) else None
        if not isinstance(keys, list):
            raise FederationError(f"{self.name} sent a key set (JWKS) without keys.", 503)
        usable = [k for k in keys if isinstance(k, dict) and k.get("use", "sig") == "sig"]
        self._jwks = _Cached(usable, now)
        return usable

    # -- the round trip -----------------------------------------------------------------------

    def auth_method(self, document: dict[str, Any]) -> str:
        """The token endpoint authentication this upstream advertises and grantd can use (module docstring)."""
        listed = document.get("token_endpoint_auth_methods_supported")
        if not isinstance(listed, list) or not listed or not all(isinstance(m, str) for m in listed):
            listed = list(DEFAULT_AUTH_METHODS)
        usable = [m for m in AUTH_METHODS if m in listed and (m == "none" or self.client_secret is not None)]
        if usable:
            return usable[0]
        offered = ", ".join(m[:40] for m in listed[:8])
        if self.client_secret is None and any(m in listed for m in AUTH_METHODS):
            raise FederationError(
                f"{self.name} wants the client to authenticate ({offered}), but grantd has no "
                "client_secret for it. An administrator has to add one.",
                503,
            )
        raise FederationError(
            f"{self.name} offers no client authentication grantd can use at its token endpoint "
            f"(it offers {offered}; grantd can use {', '.join(AUTH_METHODS)}).",
            503,
        )

    async def begin(self, ctx: FederationContext, *, redirect_uri: str, state: str) -> FederationStart:
        document = await self.discovery(ctx)
        self.auth_method(document)  # refused here, before the person is sent to the upstream for nothing
        verifier = secrets.token_urlsafe(48)  # 64 characters: RFC 7636 wants 43-128
        nonce = secrets.token_urlsafe(32)
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": redirect_uri,
            "scope": " ".join(self.scopes),
            "state": state,
            "nonce": nonce,
            "code_challenge": _b64url(hashlib.sha256(verifier.encode()).digest()),
            "code_challenge_method": "S256",
        }
        endpoint = document["authorization_endpoint"]
        joiner = "&" if urlsplit(endpoint).query else "?"
        return FederationStart(
            url=endpoint + joiner + urlencode(query, quote_via=quote),
            kept={"nonce": nonce, "code_verifier": verifier},
        )

    async def finish(
        self, ctx: FederationContext, *, redirect_uri: str, params: Mapping[str, str], kept: dict[str, Any]
    ) -> FederatedIdentity:
        error = params.get("error")
        if error:
            # The callback's query is the browser's, not the upstream's word: only OAuth's own error
            # codes are shown, never free text (error_description), so a link cannot put words of
            # its maker's choosing on our page (issue 19, content spoofing).
            shown = error if error in OAUTH_ERRORS else "an error"
            raise FederationError(
                f"{self.name} did not sign you in: {shown}.", 403 if error == "access_denied" else 400
            )
        code = params.get("code")
        if not code or len(code) > CODE_PARAM_MAX:
            raise FederationError(f"{self.name} sent no authorization code back.")
        nonce, verifier = kept.get("nonce"), kept.get("code_verifier")
        if not isinstance(nonce, str) or not isinstance(verifier, str):
            raise FederationError("This sign-in lost its server-side state. Start again.")
        answer = await self._exchange(ctx, code, redirect_uri, verifier)
        id_token = answer.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise FederationError(
                f"{self.name} sent no id_token (is the openid scope allowed for this client?).", 503
            )
        claims = await self.verify_id_token(ctx, id_token, nonce)
        if self.email_claim not in claims and isinstance(answer.get("access_token"), str):
            claims = {**await self._userinfo(ctx, answer["access_token"], claims["sub"]), **claims}
        return self.identity_of(claims)

    async def _exchange(
        self, ctx: FederationContext, code: str, redirect_uri: str, verifier: str
    ) -> dict[str, Any]:
        document = await self.discovery(ctx)
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "client_id": self.client_id,
        }  # always (D9), whatever the method
        headers = {"Accept": "application/json"}
        method = self.auth_method(document)
        if method == "client_secret_basic" and self.client_secret is not None:
            # RFC 6749 2.3.1: both form-encoded, then Basic
            pair = f"{quote(self.client_id, safe='')}:{quote(self.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif method == "client_secret_post" and self.client_secret is not None:
            form["client_secret"] = self.client_secret
        # "none": client_id only, no secret anywhere
        status, answer = await self._send(
            ctx, "POST", document["token_endpoint"], "token endpoint", data=form, headers=headers
        )
        if status != 200:
            error, reason = "", ""
            if isinstance(answer, dict) and isinstance(answer.get("error"), str):
                error = answer["error"][:100]
                reason = ": " + error
                if isinstance(answer.get("error_description"), str):
                    reason += f" ({answer['error_description'][:300]})"
            if error == "invalid_grant":  # this code is no good (used, expired): a new sign-in may work
                raise FederationError(f"{self.name} refused the authorization code{reason}. Start again.")
            raise FederationError(f"{self.name} refused to exchange the authorization code{reason}.", 503)
        if not isinstance(answer, dict):
            raise FederationError(f"{self.name} sent a token answer that is not a JSON object.", 503)
        return answer

    async def _userinfo(self, ctx: FederationContext, access_token: str, subject: str) -> dict[str, Any]:
        document = await self.discovery(ctx)
        endpoint = document.get("userinfo_endpoint")
        if not isinstance(endpoint, str):
            return {}
        found = await self._get_json(
            ctx, endpoint, "userinfo endpoint", {"Authorization": f"Bearer {access_token}"}
        )
        if not isinstance(found, dict) or found.get("sub") != subject:
            raise FederationError(
                f"{self.name}'s userinfo answer is about someone else (sub differs from the id_token).", 503
            )
        return found

    async def _key_for(self, ctx: FederationContext, header: dict[str, Any]) -> PyJWK:
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise FederationError(
                f"{self.name}'s id_token is signed with {str(alg)[:20]!r}; grantd accepts "
                f"{', '.join(ALGORITHMS)}."
            )
        kid = header.get("kid")
        for refresh in (False, True):  # an unknown kid: the upstream rotated its keys, fetch them again once
            keys = await self.jwks(ctx, refresh=refresh)
            if kid is not None:
                matching = [k for k in keys if k.get("kid") == kid]
            else:  # no kid: only a key set with exactly one key for this alg is unambiguous
                matching = [k for k in keys if k.get("alg") in (None, alg)]
                matching = matching if len(matching) == 1 else []
            if matching:
                jwk = matching[0]
                if jwk.get("alg") not in (None, alg):
                    raise FederationError(
                        f"{self.name}'s id_token names alg {alg} but its key is for {jwk.get('alg')}."
                    )
                try:
                    key = PyJWK(jwk, algorithm=alg)
                except (
                    jwt.exceptions.PyJWKError,
                    jwt.exceptions.InvalidKeyError,
                    ValueError,
                    TypeError,
                    KeyError,
                ):
                    raise FederationError(
                        f"{self.name}'s key {str(kid)[:60]!r} does not fit alg {alg}."
                    ) from None
                if key.algorithm_name != alg:
                    raise FederationError(f"{self.name}'s key {str(kid)[:60]!r} does not fit alg {alg}.")
                return key
        raise FederationError(
            f"{self.name}'s id_token is signed with a key its JWKS does not publish (kid {str(kid)[:60]!r})."
        )

    async def verify_id_token(self, ctx: FederationContext, token: str, nonce: str) -> dict[str, Any]:
        """The id_token's claims after every check of the module docstring; FederationError otherwise."""
        try:
            header = jwt.get_unverified_header(token)  # only to choose the key; no claim is read unverified
        except jwt.exceptions.DecodeError:
            raise FederationError(f"{self.name} sent an id_token that is not a JWT.") from None
        key = await self._key_for(ctx, header)
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[key.algorithm_name],
                issuer=list(self.issuers),
                audience=self.client_id,
                options={
                    "require": ["iss", "aud", "exp", "iat", "sub"],
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.exceptions.InvalidSignatureError:
            raise FederationError(f"{self.name}'s id_token signature does not verify.") from None
        except jwt.exceptions.InvalidIssuerError:
            raise FederationError(
                f"{self.name}'s id_token was issued by someone else (iss is not {self.issuer})."
            ) from None
        except jwt.exceptions.InvalidAudienceError:
            raise FederationError(
                f"{self.name}'s id_token is not meant for grantd (aud does not contain {self.client_id})."
            ) from None
        except jwt.exceptions.MissingRequiredClaimError as exc:
            raise FederationError(f"{self.name}'s id_token lacks the {exc.claim} claim.") from None
        except jwt.exceptions.InvalidTokenError:
            raise FederationError(f"{self.name}'s id_token is malformed.") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        azp = claims.get("azp")
        if (len(audiences) > 1 or azp is not None) and azp != self.client_id:
            raise FederationError(
                f"{self.name}'s id_token was issued to another client (azp is not {self.client_id})."
            )
        if not isinstance(claims.get("nonce"), str) or not hmac.compare_digest(claims["nonce"], nonce):
            raise FederationError(f"{self.name}'s id_token does not belong to this sign-in (nonce differs).")
        now = ctx.now()
        exp, iat = claims["exp"], claims["iat"]
        if not isinstance(exp, int | float) or not isinstance(iat, int | float) or isinstance(exp, bool):
            raise FederationError(f"{self.name}'s id_token has malformed times (exp, iat).")
        if exp + SKEW_S <= now:
            raise FederationError(f"{self.name}'s id_token has expired.")
        if iat - SKEW_S > now:
            raise FederationError(f"{self.name}'s id_token was issued in the future (check the clocks).")
        nbf = claims.get("nbf")
        if isinstance(nbf, int | float) and nbf - SKEW_S > now:
            raise FederationError(f"{self.name}'s id_token is not valid yet.")
        if not isinstance(claims["sub"], str) or not claims["sub"]:
            raise FederationError(f"{self.name}'s id_token has no subject.")
        return dict(claims)

    def identity_of(self, claims: dict[str, Any]) -> FederatedIdentity:
        email = claims.get(self.email_claim)
        if not isinstance(email, str) or "@" not in email:
            raise FederationError(
                f"{self.name} did not tell grantd your e-mail address (claim {self.email_claim!r})."
            )
        verified = claims.get("email_verified")
        trusted = (
            "email_verified" not in claims and self.trust_email
        )  # never sent: the provider's config vouches
        if verified is not True and verified != "true" and not trusted:  # some providers send the string
            raise FederationError(f"{self.name} has not verified the e-mail address {email[:254]}.", 403)
        name = claims.get("name")
        return FederatedIdentity(
            subject=str(claims["sub"]),
            email=email.strip().lower(),
            email_verified=True,
            name=name.strip()[:255] if isinstance(name, str) and name.strip() else None,
        )


# -- the config table ---------------------------------------------------------------------------


def _issuer(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string: the provider's https issuer URL"
    parts = urlsplit(value)
    if not parts.hostname or not transport_ok(value):
        return (
            f"must be an https URL such as https://sso.example.com (http only on a loopback host), "
            f"got {value!r}"
        )
    if parts.username or parts.password or parts.query or parts.fragment:
        return "must not carry credentials, a query or a fragment"
    return None


def _string_list(value: Any, pattern: re.Pattern[str], one: str) -> str | None:
    if not isinstance(value, list) or not value:
        return f"must be a non-empty list of {one}s"
    bad = [v for v in value if not isinstance(v, str) or not pattern.match(v)]
    return f"{bad[0]!r} is not a {one}" if bad else None


def make_provider(table: dict[str, Any], read_secret: Callable[[str], str]) -> OidcProvider:
    """Check one "oidc" table and build its provider; ValueError lists every problem, one per line."""
    problems: list[str] = []
    for key in table:
        if key not in KEYS:
            hint = difflib.get_close_matches(key, KEYS, n=1)
            problems.append(
                f"{key}: unknown key for type oidc" + (f' (did you mean "{hint[0]}"?)' if hint else "")
            )
    if "issuer" not in table:
        problems.append("issuer: missing (the provider's https issuer URL)")
    elif msg := _issuer(table["issuer"]):
        problems.append(f"issuer: {msg}")
    client_id = table.get("client_id")
    if not isinstance(client_id, str) or not client_id.strip():
        problems.append("client_id: missing or empty (the client id the provider gave grantd)")
    client_secret: str | None = None  # optional: an upstream offering "none" needs no secret (D9)
    if "client_secret" in table:
        try:
            client_secret = read_secret("client_secret")
        except ValueError as exc:
            problems.append(str(exc))
    scopes = table.get("scopes", list(DEFAULT_SCOPES))
    if msg := _string_list(scopes, _SCOPE, "scope"):
        problems.append(f"scopes: {msg}")
    elif "openid" not in scopes:
        problems.append('scopes: must include "openid"')
    email_claim = table.get("email_claim", "email")
    if not isinstance(email_claim, str) or not email_claim.strip():
        problems.append("email_claim: must be a non-empty string (the ID token claim holding the e-mail)")
    domains = table.get("allowed_domains", [])
    if domains != [] and (msg := _string_list(domains, _DOMAIN, "domain")):
        problems.append(f"allowed_domains: {msg} (lower-case domain names such as example.com)")
    create_unknown = table.get("create_unknown", False)
    if not isinstance(create_unknown, bool):
        problems.append(f"create_unknown: must be true or false, got {create_unknown!r}")
    trust_email = table.get("trust_email", False)
    if not isinstance(trust_email, bool):
        problems.append(f"trust_email: must be true or false, got {trust_email!r}")
    if problems:
        raise ValueError("\n".join(problems))
    return OidcProvider(
        id=table["id"],
        name=table["name"],
        issuer=table["issuer"].rstrip("/"),
        configured_issuer=table["issuer"],
        client_id=str(client_id).strip(),
        client_secret=client_secret,
        scopes=tuple(scopes),
        email_claim=email_claim,
        allowed_domains=tuple(domains),
        create_unknown=create_unknown,
        trust_email=trust_email,
    )


@hookimpl
def federation_provider_types() -> dict[str, Any]:
    return {TYPE: make_provider}


__all__ = ["OidcProvider", "is_loopback_host", "make_provider", "transport_ok"]
