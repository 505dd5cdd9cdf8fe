"""Authentication: one chain of authenticators turns a request's credentials into a Principal.

The web layer extracts ``Credentials`` from the request (services never see the request) and asks
the chain; the first authenticator that recognises the credential answers. Built in, in order:
the management token, then OAuth access tokens of people (``AccessToken``: only those minted for
a client with API access, ``aud`` = ``tokens.agent_audience``), then agent identity tokens, then
the session cookie of a person (``grantd.services.sessions.SessionCookie``; never consulted when a
bearer is presented). An ID token, an access token for an SP (``aud`` = ``{issuer}/userinfo``) or
an AuthZ-JWT is never a bearer here (peer bug 27). A bearer nobody recognises is a 401 invalid_token;
no credential at all is ``None`` (routes decide whether that is allowed).
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from grantd.core import principals
from grantd.core.errors import Problem, unauthorized
from grantd.core.principals import Principal
from grantd.dpop import DpopError
from grantd.services import dpop
from grantd.services.dpop import ProofRequest
from grantd.services.tokens import TokenError, TokenKind, token_digest

if TYPE_CHECKING:
    from grantd.services.context import Services
    from grantd.store.records import Agent, Person


@dataclass(frozen=True)
class Credentials:
    """What a request presented. ``bearer`` is the token of an ``Authorization: Bearer`` header;
    ``client`` the client address (``request.ctx.client_ip``), which refused bearers count against
    (D12, ``grantd.services.limits``); ``session`` the value of the ``grantd_session`` cookie (None
    when the request has an Authorization header: a bearer request never uses the cookie)."""

    bearer: str | None = None
    client: str | None = None
    session: str | None = None
    # ``Authorization: DPoP <token>`` (RFC 9449): the token is in ``bearer`` and ``scheme`` says
    # "dpop"; ``proof`` is the request's DPoP header(s), method and path (None: not collected).
    scheme: str = "bearer"
    proof: ProofRequest | None = None
    # the request's proof was verified when it began (a live stream's later credential checks):
    # the binding is checked again, the proof is not (its jti is spent, its iat ages)
    proof_verified: bool = False

    # What the authenticators of the chain each need of the bearer, worked out once per request
    # (they follow from ``bearer`` alone). ``digest``: ``token_digest`` of the bearer (b"" without
    # one), the management token's comparison and the key verified identity tokens are remembered
    # under; every bearer needs it, so it is made with the credentials.
    digest: bytes = field(init=False, repr=False, compare=False)
    # Agents read earlier in this request, by id, as they were then (a route that reads the grant
    # before the chain runs gets its requesting agent in the same statement, issue 27): the
    # identity-token authenticator checks the bearer's agent from here instead of reading it again,
    # and leaves the row it read here for the route (a grant request's notices need the agent).
    # Still D11's read of the agent as it is now, made in this request; never kept across requests,
    # nor by ``dataclasses.replace`` (not an init field: a live stream's later checks read again).
    agents_read: dict[str, Agent] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", b"" if self.bearer is None else token_digest(self.bearer))
        object.__setattr__(self, "agents_read", {})

    @cached_property
    def peeked(self) -> dict[str, Any] | None:
        """The bearer's unverified payload (``_peek``), only to route it to its authenticator."""
        assert self.bearer is not None
        return _peek(self.bearer)


class Authenticator(Protocol):
    name: str

    async def authenticate(self, services: Services, credentials: Credentials) -> Principal | None:
        """The principal these credentials prove, None if they are not of this authenticator's kind;
        raise a 401 Problem if they are of its kind but do not verify."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an Authorization header; a header of another scheme is a 401."""
    return authorization_token(authorization)[1]


def authorization_token(authorization: str | None) -> tuple[str, str | None]:
    """(scheme, token) of an Authorization header: ``Bearer`` or ``DPoP`` (RFC 9449 §7.1); a
    header of another scheme is a 401."""
    if not authorization:
        return "bearer", None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() not in ("bearer", "dpop") or not value.strip():
        raise unauthorized(
            "Authorization header must be 'Bearer <token>' or 'DPoP <token>'", invalid_token=True
        )
    return scheme.lower(), value.strip()


class ManagementToken:
    name = "management-token"

    def __init__(self) -> None:
        self._expected: tuple[str, bytes] | None = None  # the configured token and its digest

    def _expected_digest(self, expected: str) -> bytes:
        """The configured token's digest, worked out once per process (again if the setting changes)."""
        known = self._expected
        if known is None or known[0] != expected:
            known = self._expected = (expected, token_digest(expected))
        return known[1]

    async def authenticate(self, services: Services, credentials: Credentials) -> Principal | None:
        expected = services.config.admin.management_token
        # Compare fixed-length digests so neither content nor length leaks through timing.
        if (
            credentials.bearer is None
            or credentials.scheme != "bearer"
            or not expected
            or not hmac.compare_digest(credentials.digest, self._expected_digest(expected))
        ):
            return None
        return principals.management(services.config.admin.management_identity)


def could_be_management_token(services: Services, bearer: str | None) -> bool:
    """Whether a presented bearer could be a guess of the management token: anything but a signed
    token (three dot-separated parts, verified by signature, which no guess passes) — unless the
    management token itself has that shape."""
    if bearer is None:
        return False
    expected = services.config.admin.management_token or ""
    return bearer.count(".") != 2 or expected.count(".") == 2


class AgentIdentityToken:
    name = "agent-identity-token"

    async def authenticate(self, services: Services, credentials: Credentials) -> Principal | None:
        if credentials.bearer is None or credentials.bearer.count(".") != 2:
            return None
        try:
            claims = await services.tokens.verify_identity(credentials.bearer, credentials.digest)
        except TokenError as exc:
            raise unauthorized(f"invalid token: {exc}", invalid_token=True) from None
        agent = credentials.agents_read.get(claims["agent_id"])
        if agent is None:
            agent = await services.store.agents.get_by_id(claims["agent_id"])
            if agent is not None:
                credentials.agents_read[agent["agent_id"]] = agent
        # D11: the token dies with its agent: disabled, deleted, re-enrolled (another agent_id
        # behind the same e-mail) or re-keyed (another key generation).
        if (
            agent is None
            or agent["status"] != "active"
            or agent["email"] != claims["sub"]
            or agent["key_generation"] != claims["key_generation"]
        ):
            if credentials.scheme == "dpop":
                raise await dpop.token_refusal(services, "agent unknown, disabled or re-keyed")
            raise unauthorized("invalid token: agent unknown, disabled or re-keyed", invalid_token=True)
        jkt = await check_binding(services, credentials, claims, agent["public_key"])
        return principals.agent(agent["agent_id"], agent["email"], dpop_jkt=jkt)


async def check_binding(
    services: Services, credentials: Credentials, claims: dict[str, Any], public_key_line: str
) -> str | None:
    """D16: a token bound by ``cnf.jkt`` is accepted only as ``Authorization: DPoP`` with a fresh
    proof by that key, which must still be the agent's enrolled key; an unbound token only as
    Bearer, and not at all under ``agent_dpop = "required"``. The bound key's thumbprint, or None."""
    assert credentials.bearer is not None
    cnf = claims.get("cnf")
    if cnf is None:
        if credentials.scheme == "dpop":
            raise await dpop.token_refusal(services, "this token is not DPoP-bound: send it as Bearer")
        if dpop.mode(services) == dpop.REQUIRED:
            raise await dpop.token_refusal(services, "this grantd accepts only DPoP-bound agent tokens")
        return None
    jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
    if not isinstance(jkt, str) or not jkt:
        raise unauthorized("invalid token: malformed cnf", invalid_token=True)
    if credentials.scheme != "dpop":
        raise await dpop.token_refusal(
            services, "a DPoP-bound token must be sent as 'DPoP <token>' with a proof"
        )
    if dpop.mode(services) == dpop.OFF:
        raise await dpop.token_refusal(services, "DPoP is off on this grantd")
    current = dpop.agent_jkt(public_key_line)
    if current is None or not hmac.compare_digest(current, jkt):
        raise await dpop.token_refusal(
            services, "the key this token is bound to is no longer the agent's key"
        )
    if credentials.proof_verified:
        return jkt
    try:
        await dpop.verify(
            services,
            credentials.proof or ProofRequest((), "GET", "/"),
            expected_jkt=jkt,
            access_token=credentials.bearer,
        )
    except DpopError as exc:
        raise await dpop.api_refusal(services, exc) from None
    return jkt


def _peek(token: str) -> dict[str, Any] | None:
    """The unverified payload of a JWT, only to route it to its authenticator (which verifies it)."""
    try:
        payload = token.split(".")[1]
        value = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, IndexError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def names_a_delegation(claims: dict[str, Any] | None) -> bool:
    """The shape of a token exchange's token (D16): its ``act`` is an object and it names its
    delegation. Only routes a bearer (``exchanged_holder`` verifies it)."""
    return claims is not None and isinstance(claims.get("act"), dict) and "delegation_id" in claims


def looks_exchanged(token: str) -> bool:
    """``names_a_delegation`` of a bearer's unverified payload."""
    return names_a_delegation(_peek(token))


class AccessToken:
    """A person's OAuth access token as an API bearer: only ``token_use: "access"`` with ``aud`` =
    ``tokens.agent_audience`` (clients with API access); the person must still be active and, when
    the token names a refresh family (``sid``), the family must still be live (revoking it, or the
    person's consent, ends the token at once)."""

    name = "oauth-access-token"

    async def authenticate(self, services: Services, credentials: Credentials) -> Principal | None:
        token = credentials.bearer
        if token is None or token.count(".") != 2 or len(token) > 8192 or credentials.scheme != "bearer":
            return None
        if services.tokens.remembers_identity(token, credentials.digest):
            return None  # an identity token verified before (the usual agent bearer): never an access token
        peeked = credentials.peeked
        if peeked is None or peeked.get("token_use") != "access":
            return None  # not ours to judge: the identity-token authenticator refuses what is no bearer
        try:
            claims = await services.tokens.verify_access(token)
        except TokenError as exc:
            raise unauthorized(f"invalid token: {exc}", invalid_token=True) from None
        if claims.get("aud") != services.tokens.agent_audience:
            raise unauthorized("invalid token: this access token is not for grantd's API", invalid_token=True)
        person, refusal = await access_token_holder(services, claims)
        if person is None:
            raise unauthorized(f"invalid token: {refusal}", invalid_token=True)
        return principals.for_access_token(person, services.admin_emails, str(claims.get("scope", "")))


async def access_token_holder(services: Services, claims: dict[str, Any]) -> tuple[Person | None, str]:
    """The person a verified access token still speaks for, or (None, why not). The one rule for
    the API (``AccessToken``) and /userinfo: the person exists, is active and still has the token's
    e-mail; a token that names a refresh family (``sid``) lives only while the family does; one
    without a family lives only while the consent it was minted under does (withdrawing it, even
    if it is given again later, ends the token at once: docs/oauth.md)."""
    person = await services.store.people.get(claims["person_id"])
    if (
        person is None
        or person["status"] != "active"
        or person["email"].lower() != str(claims["sub"]).lower()
    ):
        return None, "the person is unknown or disabled"
    if claims["sid"]:
        if not await services.store.refresh_tokens.family_live(claims["sid"], services.clock.now_ms()):
            return None, "its sign-in was revoked"
        return person, ""
    consent = await services.store.consents.get(person["person_id"], str(claims.get("client_id")))
    if consent is None or consent["created_at"] // 1000 > int(claims["iat"]):
        return None, "the person withdrew the consent this token was issued under"
    return person, ""


async def resource_token_holder_live(services: Services, claims: dict[str, Any]) -> bool:
    """A verified resource token (D17) still speaks for someone: the person active with the token's
    e-mail and its family live (``access_token_holder``); an agent's token from CIBA: the agent
    active with that e-mail; a delegate's from a token exchange: its delegation active. The one rule
    for /introspect and for consume with such a token."""
    if claims.get("act") == "agent":  # an agent's token from CIBA (grantd.oauth.mcp_ciba)
        agent = await services.store.agents.get_by_id(str(claims["agent_id"]))
        return agent is not None and agent["status"] == "active" and agent["email"] == claims["sub"]
    if isinstance(claims.get("act"), dict):  # a delegate's, from a token exchange: its delegation
        delegation = await services.store.delegations.get(str(claims["delegation_id"]))
        return (
            delegation is not None
            and services.delegation_lapse().status_of(delegation) == "active"
            and delegation["delegator"] == claims["sub"]
        )
    person, _ = await access_token_holder(services, claims)
    return person is not None


async def exchanged_holder(services: Services, token: str) -> tuple[dict[str, Any], Person]:
    """An exchanged token's claims and the person it acts for (D16), or ``TokenError`` saying why
    not. The one rule for the API (``ExchangedToken``) and /userinfo: a token exchange issued it,
    for grantd itself (``aud`` = the issuer), its delegation is live and its person active."""
    claims, _ = await services.tokens.verify_kind(token, TokenKind.EXCHANGED)
    if claims.get("aud") != services.issuer:
        raise TokenError("this exchanged token is for another audience")
    delegation = await services.store.delegations.get(str(claims["delegation_id"]))
    if delegation is None or services.delegation_lapse().status_of(delegation) != "active":
        raise TokenError("its delegation is revoked or expired")
    person = await services.store.people.get(str(claims["sub"]))
    if person is None or person["status"] != "active":
        raise TokenError("the person is unknown or disabled")
    return claims, person


class ExchangedToken:
    """A token a token exchange issued (D16): the person it names, acting through the agent(s) in
    ``act``; only for grantd itself (``aud`` = the issuer), only while the delegation is live and
    the person active; DPoP-bound ones need a proof by the acting agent's current key. What such a
    principal may do is grantd.core.policy.refuse_acting_token's (read and request only)."""

    name = "exchanged-token"

    async def authenticate(self, services: Services, credentials: Credentials) -> Principal | None:
        token = credentials.bearer
        if token is None or token.count(".") != 2 or len(token) > 8192:
            return None
        if services.tokens.remembers_identity(token, credentials.digest):
            return None  # an identity token verified before: its ``act`` is "agent", never an object
        if not names_a_delegation(credentials.peeked):
            return None
        try:
            claims, person = await exchanged_holder(services, token)
        except TokenError as exc:
            raise unauthorized(f"invalid token: {exc}", invalid_token=True) from None
        act = claims["act"]
        if claims.get("cnf") is not None:
            actor = await services.store.agents.get(str(act.get("sub")))
            if actor is None:
                raise unauthorized("invalid token: the acting agent is unknown", invalid_token=True)
            await check_binding(services, credentials, claims, actor["public_key"])
        elif credentials.scheme == "dpop":
            raise await dpop.token_refusal(services, "this token is not DPoP-bound: send it as Bearer")
        return dataclasses.replace(
            principals.for_person(person, services.admin_emails),
            act=act,
            delegation_id=str(claims["delegation_id"]),
        )


class AuthnChain:
    def __init__(self, authenticators: list[Authenticator]):
        self.authenticators = list(authenticators)

    def add(self, authenticator: Authenticator) -> None:
        self.authenticators.append(authenticator)

    async def principal(self, services: Services, credentials: Credentials) -> Principal | None:
        presented = credentials.bearer is not None
        if presented:
            # D12: every bearer is checked and a valid one accepted, whatever others at the same
            # address did; while the address is over its budget, possible management-token guesses
            # are slowed, and each refusal below counts against the address (429 once over it).
            await services.limits.bearer_allowed(
                credentials.client,
                could_be_management_token=could_be_management_token(services, credentials.bearer),
            )
        try:
            for authenticator in self.authenticators:
                found = await authenticator.authenticate(services, credentials)
                if found is not None:
                    return found
            if presented:
                raise unauthorized("invalid token", invalid_token=True)
            return None
        except Problem as exc:
            if presented and exc.status == 401:
                await services.limits.bearer_refused(credentials.client)
            raise


def default_chain() -> AuthnChain:
    from grantd.services.sessions import SessionCookie

    return AuthnChain(
        [ManagementToken(), AccessToken(), ExchangedToken(), AgentIdentityToken(), SessionCookie()]
    )
