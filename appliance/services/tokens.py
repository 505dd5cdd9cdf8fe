"""Every token grantd signs is minted and told apart here (PyJWT, EdDSA; D3, D11).

Kinds, by their claims:
- ``identity``: an agent's identity token: ``act: "agent"``, ``aud`` = ``tokens.agent_audience``,
  ``sub`` = the agent's e-mail, ``agent_id`` and ``key_generation`` (D11: the token dies with the
  agent, its re-enrolment and its key), no ``grant_id``.
- ``authz``: an AuthZ-JWT of an approved grant: ``grant_id``, ``aud`` = the grant's audience.
- ``access``: an OAuth access token of a person (``token_use: "access"``, ``act: "human"``,
  ``sub`` = the person's e-mail, ``person_id``, ``client_id``, ``scope``, ``sid`` = its refresh
  family or ""). ``aud`` = ``tokens.agent_audience`` for clients with API access (apes-cli,
  grantd-cli, config clients with ``api_access``): a bearer on /api/** (``AccessToken`` in
  ``grantd.services.authn``); for every other client ``{issuer}/userinfo``: only /userinfo takes it.
- ``id``: an OIDC ID token (``act: "human"``, ``auth_time``, ``aud`` = the client, no
  ``token_use``); EdDSA, or ES256/RS256 when the client asks (D3). Never a bearer anywhere (peer
  bug 27): every verifier of ours wants another kind. Refresh tokens are opaque (not JWTs).

Each kind also says what it is in its header's ``typ`` (D3): access tokens ``at+jwt`` (RFC 9068
§2.1), every other kind the peer's ``JWT``. Every verifier checks both the claims and the ``typ``
of the kind it expects (``typ_of``), so no kind is ever accepted for another, whichever claims
a minting bug or a signer/verifier difference put into it.

Time comes from the injected clock (PyJWT checks signature, issuer and audience; expiry is checked
here against the clock, with PyJWT's semantics).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections import OrderedDict
from enum import StrEnum
from typing import Any

import jwt

from grantd.config import Config
from grantd.core.clock import Clock
from grantd.services.keys import KeyRing
from grantd.store.records import Agent, Grant, Person

TYP_JWT = "JWT"
TYP_ACCESS = "at+jwt"  # RFC 9068 §2.1
ONCE_TOKEN_TTL = 300
ALWAYS_TOKEN_TTL = 3600
ID_TOKEN_TTL = 300


class TokenError(Exception):
    """A token that does not verify; the message is safe to show."""


class TokenKind(StrEnum):
    IDENTITY = "identity"
    AUTHZ = "authz"
    ACCESS = "access"
    ID = "id"
    DELEGATION = "delegation"  # a delegation's token: the subject of a token exchange (D16)
    EXCHANGED = "exchanged"  # what a token exchange issues: sub = the person, act = the agent(s)


def kind_of(claims: dict[str, Any]) -> TokenKind | None:
    if isinstance(claims.get("grant_id"), str):
        return TokenKind.AUTHZ
    if isinstance(claims.get("delegation_id"), str):
        if claims.get("token_use") == "delegation" and isinstance(claims.get("may_act"), dict):
            return TokenKind.DELEGATION
        if isinstance(claims.get("act"), dict) and "token_use" not in claims:
            return TokenKind.EXCHANGED
        return None
    if claims.get("token_use") == "access":
        if (
            claims.get("act") == "human"
            and isinstance(claims.get("person_id"), str)
            and isinstance(claims.get("sid"), str)
        ):
            return TokenKind.ACCESS
        return None
    if claims.get("act") == "human" and isinstance(claims.get("auth_time"), int):
        return TokenKind.ID
    if (
        claims.get("act") == "agent"
        and isinstance(claims.get("agent_id"), str)
        and isinstance(claims.get("sub"), str)
    ):
        return TokenKind.IDENTITY
    return None


TYP_OF_KIND = {
    TokenKind.IDENTITY: TYP_JWT,
    TokenKind.AUTHZ: TYP_JWT,
    TokenKind.ID: TYP_JWT,
    TokenKind.ACCESS: TYP_ACCESS,
    TokenKind.DELEGATION: "grantd-delegation+jwt",
    TokenKind.EXCHANGED: "grantd-act+jwt",
}


def typ_of(header: dict[str, Any]) -> str | None:
    """The header's ``typ`` as compared (RFC 7515 §4.1.9: media types without ``application/``,
    case-insensitive); None when missing or not a string."""
    typ = header.get("typ")
    if not isinstance(typ, str):
        return None
    typ = typ.strip().lower()
    return typ.removeprefix("application/")


def check_kind(claims: dict[str, Any], header: dict[str, Any], expected: TokenKind, refusal: str) -> None:
    """``TokenError(refusal)`` unless the token is of the ``expected`` kind by its claims and its ``typ``."""
    if kind_of(claims) is not expected or typ_of(header) != TYP_OF_KIND[expected].lower():
        raise TokenError(refusal)


def new_jti() -> str:
    return str(uuid.uuid4())


class Tokens:
    def __init__(self, keyring: KeyRing, clock: Clock, config: Config):
        self.keyring = keyring
        self.clock = clock
        self.issuer = str(config.server.issuer)
        self.agent_audience = str(config.tokens.agent_audience)
        self.agent_ttl = int(config.tokens.agent_token_ttl)
        self._verified = _VerifiedCache()
        # AuthZ-JWTs verified before (a target host checks an always or timed grant's token each
        # time it runs the command); the grant itself is still read on every use.
        self._verified_authz = _VerifiedCache(AUTHZ_CACHE_ENTRIES)
        # Every token one key signs has the same header segment; remembering the headers of tokens
        # that verified saves PyJWT a parse per request (one entry per key; strangers cannot fill it).
        self._headers: dict[str, dict[str, Any]] = {}

    # -- minting ----------------------------------------------------------------------------------
    async def _sign(self, claims: dict[str, Any], alg: str = "EdDSA", typ: str = TYP_JWT) -> str:
        key = await self.keyring.signing_key(alg)
        assert key.private is not None  # the active key always has its private half
        return jwt.encode(claims, key.private, algorithm=alg, headers={"kid": key.kid, "typ": typ})

    def userinfo_audience(self) -> str:
        return f"{self.issuer}/userinfo"

    async def mint_access(
        self, person: Person, *, client_id: str, api_access: bool, scope: str, sid: str, ttl: int
    ) -> str:
        """An OAuth access token (module docstring): a bearer on /api/** only for ``api_access``."""
        now = self.clock.now_s()
        return await self._sign(
            {
                "iss": self.issuer,
                "sub": person["email"],
                "act": "human",
                "aud": self.agent_audience if api_access else self.userinfo_audience(),
                "person_id": person["person_id"],
                "client_id": client_id,
                "scope": scope,
                "sid": sid,
                "token_use": "access",
                "iat": now,
                "exp": now + ttl,
                "jti": new_jti(),
            },
            typ=TYP_ACCESS,
        )

    async def mint_resource_access(
        self, person: Person, *, resource: str, claims: dict[str, Any], ttl: int
    ) -> str:
        """An RFC 9068 access token for an MCP resource (D17): ``aud`` = the resource, so grantd's
        own /api never takes it (its audience is ``tokens.agent_audience``). ``claims``: client_id,
        scope, sid, auth_time and, for a grant-gated scope, grant_id and authorization_details."""
        now = self.clock.now_s()
        return await self._sign(
            {
                **claims,
                "iss": self.issuer,
                "sub": person["email"],
                "act": "human",
                "aud": resource,
                "person_id": person["person_id"],
                "token_use": "access",
                "iat": now,
                "exp": now + ttl,
                "jti": new_jti(),
            },
            typ=TYP_ACCESS,
        )

    async def mint_agent_resource_access(
        self, agent: Agent, *, resource: str, claims: dict[str, Any], ttl: int
    ) -> str:
        """An RFC 9068 access token for an MCP resource that an agent got through CIBA (D16, D17), or
        by client credentials for the scopes without a grant behind them: ``sub`` = the agent's
        e-mail, ``act: "agent"``, ``agent_id``; ``claims``: client_id, scope, auth_time and, behind
        a grant, grant_id and authorization_details (grantd.oauth.mcp_ciba); cnf when bound."""
        now = self.clock.now_s()
        return await self._sign(
            {
                **claims,
                "iss": self.issuer,
                "sub": agent["email"],
                "act": "agent",
                "agent_id": agent["agent_id"],
                "aud": resource,
                "token_use": "access",
                "iat": now,
                "exp": now + ttl,
                "jti": new_jti(),
            },
            typ=TYP_ACCESS,
        )

    async def mint_exchanged_resource_access(self, exchanged: dict[str, Any], *, scope: str) -> str:
        """An RFC 9068 access token for an MCP resource from a token exchange (D16, D17): the
        exchange's claims (``sub`` = the delegator, ``act`` = the actor chain, ``delegation_id``,
        ``aud`` = the resource, ``exp``; ``cnf`` when bound), with ``typ`` at+jwt, ``token_use``
        access, ``client_id`` = the acting agent and the ``scope`` granted."""
        return await self._sign(
            {**exchanged, "token_use": "access", "client_id": exchanged["act"]["sub"], "scope": scope},
            typ=TYP_ACCESS,
        )

    async def mint_id_token(
        self,
        person: Person,
        *,
        client_id: str,
        scope: str,
        nonce: str | None,
        auth_time: int,
        alg: str = "EdDSA",
    ) -> str:
        """An OIDC ID token for ``client_id`` (peer §3.6; ``email`` with scope email, ``name`` with
        scope profile), signed with ``alg`` (D3)."""
        now = self.clock.now_s()
        scopes = set(scope.split())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": person["email"],
            "aud": client_id,
            "act": "human",
            "iat": now,
            "exp": now + ID_TOKEN_TTL,
            "auth_time": auth_time,
            "jti": new_jti(),
        }
        if nonce is not None:
            claims["nonce"] = nonce
        if "email" in scopes:
            claims["email"] = person["email"]
            claims["email_verified"] = True  # the account's identity, set by an administrator (docs/oauth.md)
        if "profile" in scopes:
            claims["name"] = person["name"] or person["email"]
        return await self._sign(claims, alg)

    async def mint_kind(self, claims: dict[str, Any], kind: TokenKind) -> str:
        """A delegation token or an exchanged token (D16; claims made by grantd.oauth.exchange),
        signed with its kind's ``typ``, so one kind is never taken for another."""
        if kind_of(claims) is not kind or kind not in (TokenKind.DELEGATION, TokenKind.EXCHANGED):
            raise ValueError(f"these claims do not make a {kind} token")
        return await self._sign(claims, typ=TYP_OF_KIND[kind])

    async def verify_kind(self, token: str, *kinds: TokenKind) -> tuple[dict[str, Any], TokenKind]:
        """A token of ours of one of ``kinds`` (by claims and ``typ``): its claims and kind."""
        claims, header = await self._verify_with_header(token, audience=None)
        kind = kind_of(claims)
        if kind not in kinds or typ_of(header) != TYP_OF_KIND[kind].lower():
            raise TokenError("not a token of the expected kind")
        return claims, kind

    async def mint_backchannel_id_token(self, *, sub: str, aud: str, auth_time: int) -> str:
        """The ID token of a CIBA token answer (D16): ``sub`` = the approver whose decision completed
        the request, ``aud`` = the client (agent) that asked, ``auth_time`` = that decision."""
        now = self.clock.now_s()
        return await self._sign(
            {
                "iss": self.issuer,
                "sub": sub,
                "aud": aud,
                "act": "human",
                "iat": now,
                "exp": now + ID_TOKEN_TTL,
                "auth_time": auth_time,
                "jti": new_jti(),
            }
        )

    async def mint_identity(self, agent: Agent, *, jkt: str | None = None) -> tuple[str, int]:
        """An agent's identity token; ``jkt``: DPoP-bound to that key (``cnf.jkt``, D16)."""
        now = self.clock.now_s()
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": agent["email"],
            "act": "agent",
            "aud": self.agent_audience,
            "agent_id": agent["agent_id"],
            "key_generation": agent["key_generation"],
            "iat": now,
            "exp": now + self.agent_ttl,
            "jti": new_jti(),
        }
        if jkt is not None:
            claims["cnf"] = {"jkt": jkt}
        return await self._sign(claims), self.agent_ttl

    async def mint_authz(self, grant: Grant, review: dict[str, Any] | None = None) -> str:
        """The AuthZ-JWT of an approved grant (specification claims + D3, D6); ``review``: the
        approval claims of D13 (``approvals``, ``policy``, ``quorum``)."""
        request = grant["request"]
        now = self.clock.now_s()
        grant_type = grant["grant_type"]
        expires_at = grant.get("expires_at")
        if grant_type == "once":
            exp = now + ONCE_TOKEN_TTL
            if expires_at is not None:
                exp = min(exp, int(expires_at // 1000))
        elif grant_type == "timed":
            exp = int((expires_at or 0) // 1000)
        else:
            exp = now + ALWAYS_TOKEN_TTL
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": grant["requester"],
            "aud": request["audience"],
            "target_host": request["target_host"],
            "grant_id": grant["id"],
            "grant_type": grant_type,
            "approval": grant_type,
            "permissions": list(request.get("permissions") or []),
            "decided_by": grant["decided_by"],
            "iat": now,
            "exp": exp,
            "jti": new_jti(),
        }
        if "command" in request:
            claims["command"] = list(request["command"])
            claims["cmd_hash"] = request["cmd_hash"]
        if request.get("run_as"):
            claims["run_as"] = request["run_as"]
        for extension in ("authorization_details", "execution_context", "act", "delegation"):
            if extension in request:  # act, delegation: requested with an exchanged token (D16)
                claims[extension] = request[extension]
        if grant.get("delegation_id"):
            claims["delegation_id"] = grant["delegation_id"]
        cnf = request.get("cnf")
        if isinstance(cnf, dict) and isinstance(cnf.get("jkt"), str):
            claims["cnf"] = {"jkt": cnf["jkt"]}  # requested with a DPoP-bound token (D16)
        if review is not None:
            claims.update(review)
        return await self._sign(claims)

    # -- verifying --------------------------------------------------------------------------------
    async def verify(self, token: str, *, audience: str | None) -> dict[str, Any]:
        """Signature (a published key of ours), issuer, audience (if given), expiry by the clock.
        (See ``_verify``.)"""
        return (await self._verify(token, audience=audience))[0]

    async def _verify(self, token: str, *, audience: str | None) -> tuple[dict[str, Any], str]:
        claims, header = await self._verify_with_header(token, audience=audience)
        return claims, header["kid"]

    async def _verify_with_header(
        self, token: str, *, audience: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The claims and the ``kid`` of a token of ours: signature (a published key of ours),
        issuer, audience (if given), expiry by the clock.

        Only the one spelling we mint is accepted: compact form, unpadded base64url, bounded length,
        a payload without duplicate members, a single-string ``aud``, integer times with ``iat`` not
        ahead of the clock and ``nbf`` (if any) reached — so nobody can make a second valid string
        of a token or smuggle a claim past a parser that keeps the other duplicate."""
        if len(token) > MAX_TOKEN_LENGTH or not _COMPACT_JWS.fullmatch(token):
            raise TokenError("malformed token")
        segment = token.partition(".")[0]
        header = self._headers.get(segment)
        if header is None:
            try:
                header = jwt.get_unverified_header(token)
            except jwt.PyJWTError:
                raise TokenError("malformed token") from None
        if header.get("alg") != "EdDSA" or not isinstance(header.get("kid"), str):
            raise TokenError("unsupported token algorithm or missing kid")
        public = await self.keyring.verification_key(header["kid"])
        if public is None:
            raise TokenError("unknown signing key")
        options: Any = {
            "require": ["exp", "iat", "iss", "sub"],
            "verify_aud": audience is not None,
            "verify_exp": False,
            "verify_iat": False,
            "verify_nbf": False,
        }
        try:
            claims = _STRICT_JWT.decode(
                token, public, algorithms=["EdDSA"], issuer=self.issuer, audience=audience, options=options
            )
        except jwt.InvalidAudienceError:
            raise TokenError("audience mismatch") from None
        except jwt.InvalidIssuerError:
            raise TokenError("issuer mismatch") from None
        except jwt.InvalidSignatureError:
            raise TokenError("bad signature") from None
        except jwt.PyJWTError as exc:
            raise TokenError(f"invalid token: {exc}") from None
        _check_claim_shapes(claims, self.clock.now_s())
        if segment not in self._headers and len(self._headers) < 64:
            self._headers[segment] = header
        return claims, header

    async def verify_identity(self, token: str, digest: bytes | None = None) -> dict[str, Any]:
        """An agent identity token's claims. Verified tokens are remembered for their lifetime (an
        agent reuses one token for an hour); the caller still checks the agent on every request.
        ``digest``: ``token_digest(token)`` when the caller has it."""
        remembered = await self._remembered(self._verified, token, digest)
        if remembered is not None:
            return remembered
        claims, header = await self._verify_with_header(token, audience=self.agent_audience)
        # Only identity tokens are bearers: an AuthZ-JWT or any other token we sign is refused even
        # if its audience happens to match (peer bug 27), and so is one whose typ says another kind.
        check_kind(claims, header, TokenKind.IDENTITY, "not an identity token")
        if not isinstance(claims.get("key_generation"), int):
            raise TokenError("not an identity token")
        self._verified.put(token, claims, header["kid"])
        return claims

    async def _remembered(
        self, cache: _VerifiedCache, token: str, digest: bytes | None = None
    ) -> dict[str, Any] | None:
        """The claims of a token verified before, not expired by the clock, whose key is still
        published (a revoked key ends remembered tokens within the keyring's refresh bound, as it
        ends the others); None otherwise."""
        cached = cache.get(token, self.clock.now_s(), digest)
        if cached is not None and await self.keyring.verification_key(cached[1]) is not None:
            return cached[0]
        return None

    def forget_authz(self, token: str, digest: bytes | None = None) -> None:
        """A consumed once grant's token is dead: it need not take a place among the remembered."""
        self._verified_authz.discard(token, digest)

    def remembers_identity(self, token: str, digest: bytes | None = None) -> bool:
        """Whether this exact token verified as an identity token before (expired or not): it is
        then no other kind of token, so other authenticators can pass it on without parsing it."""
        return self._verified.contains(token, digest)

    def remembered_agent_id(self, token: str, digest: bytes | None = None) -> str | None:
        """The agent a remembered identity token names (expired or not), else None. Only a hint of
        which agent the authentication chain will read for this bearer (a route reads it ahead, in
        its own statement); the chain still verifies the token and checks that agent (D11)."""
        entry = self._verified.peek(token, digest)
        agent_id = entry[0].get("agent_id") if entry is not None else None
        return agent_id if isinstance(agent_id, str) else None

    async def verify_access(self, token: str) -> dict[str, Any]:
        """An OAuth access token's claims (signature, issuer, expiry, kind); the caller checks the
        audience, the person and the family."""
        claims, header = await self._verify_with_header(token, audience=None)
        check_kind(claims, header, TokenKind.ACCESS, "not an access token")
        return claims

    async def verify_resource_access(self, token: str, resource: str) -> dict[str, Any]:
        """A resource's access token (``mint_resource_access``): signature, issuer, expiry, ``aud``
        = ``resource``, ``typ`` at+jwt and ``token_use`` access (POST /introspect, the consume route)."""
        claims, header = await self._verify_with_header(token, audience=resource)
        if typ_of(header) != TYP_ACCESS or claims.get("token_use") != "access":
            raise TokenError("not a resource access token")
        person = isinstance(claims.get("person_id"), str) and isinstance(claims.get("sid"), str)
        agent = (  # an agent's: from CIBA behind a grant, or its own by client credentials (no grant)
            claims.get("act") == "agent"
            and isinstance(claims.get("agent_id"), str)
            and isinstance(claims.get("grant_id", ""), str)
            and "person_id" not in claims
        )
        exchanged = (  # a delegate's, from a token exchange: for a person, through a delegation
            isinstance(claims.get("act"), dict)
            and isinstance(claims.get("delegation_id"), str)
            and "person_id" not in claims
        )
        if not (person or agent or exchanged):
            raise TokenError("not a resource access token")
        return claims

    async def verify_authz(self, token: str, digest: bytes | None = None) -> dict[str, Any]:
        """An AuthZ-JWT of ours (its audience is the grant's own, checked against the grant).

        Like identity tokens, verified AuthZ-JWTs are remembered by a digest of the exact string
        until they expire, and a remembered one is accepted only while its key is still published
        (a revoked key ends it within the keyring's refresh bound, as it does uncached). What the
        token may do is decided by the caller from the grant, read on every request: revoked,
        consumed, lapsed or expired grants are refused as before, and consuming a once grant stays a
        conditional write in the store (one winner). ``digest``: ``token_digest(token)`` when the
        caller has it (a bearer's: ``Credentials.digest``)."""
        remembered = await self._remembered(self._verified_authz, token, digest)
        if remembered is not None:
            return dict(remembered)  # a copy: callers never share the remembered claims
        claims, header = await self._verify_with_header(token, audience=None)
        check_kind(claims, header, TokenKind.AUTHZ, "not a grant token")
        self._verified_authz.put(token, claims, header["kid"], digest)
        return dict(claims)


MAX_TOKEN_LENGTH = 8192
AUTHZ_CACHE_ENTRIES = 4096  # remembered AuthZ-JWTs per process (2–3 KiB each: at most about 11 MiB)
_COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
CLOCK_SKEW_S = 60  # how far ahead of our clock an iat may be (a verifier's clock is not ours)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise TokenError("invalid token: duplicate claim")
        found[key] = value
    return found


def _is_time(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _StrictPyJWT(jwt.PyJWT):
    """PyJWT, parsing the payload once with duplicate members refused (``_decode_payload`` is
    PyJWT's documented override point; it runs after the signature verified)."""

    def _decode_payload(self, decoded: dict[str, Any]) -> dict[str, Any]:
        try:
            payload = json.loads(decoded["payload"], object_pairs_hook=_refuse_duplicates)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise TokenError("malformed token") from None
        if not isinstance(payload, dict):
            raise TokenError("malformed token")
        return payload


_STRICT_JWT = _StrictPyJWT()


def _check_claim_shapes(claims: dict[str, Any], now_s: int) -> None:
    """What PyJWT leaves to us, after the signature verified (duplicate members were refused
    while the payload was parsed: ``_StrictPyJWT``)."""
    if not isinstance(claims.get("aud", ""), str):
        raise TokenError("audience must be a single string")
    exp, iat, nbf = claims.get("exp"), claims.get("iat"), claims.get("nbf")
    if (
        not isinstance(exp, int)
        or not isinstance(iat, int)
        or not all(map(_is_time, (exp, iat)))
        or (nbf is not None and not _is_time(nbf))
    ):
        raise TokenError("invalid token: times must be whole seconds")
    if exp <= now_s:
        raise TokenError("token expired")
    if iat > now_s + CLOCK_SKEW_S or (isinstance(nbf, int) and nbf > now_s + CLOCK_SKEW_S):
        raise TokenError("token not valid yet")


def token_digest(token: str) -> bytes:
    """SHA-256 of a presented token's exact string: the key its verification is remembered under,
    and what the management token is compared by (fixed length: neither content nor length leaks
    through the comparison's time). Computed once per request (``authn.Credentials.digest``)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class _VerifiedCache:
    """Bounded LRU of verified identity tokens, keyed by a digest of the token."""

    def __init__(self, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, tuple[dict[str, Any], str]] = OrderedDict()

    @staticmethod
    def _key(token: str, digest: bytes | None) -> bytes:
        """The entry's key: ``digest`` (``token_digest(token)``) when the caller has it."""
        return token_digest(token) if digest is None else digest

    def get(self, token: str, now_s: int, digest: bytes | None = None) -> tuple[dict[str, Any], str] | None:
        """(claims, kid) of a remembered token that has not expired (``digest``: ``token_digest(token)``
        when the caller has it)."""
        key = self._key(token, digest)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0]["exp"] <= now_s:
            self._entries.pop(key, None)
            return None
        self._entries.move_to_end(key)
        return entry

    def discard(self, token: str, digest: bytes | None = None) -> None:
        self._entries.pop(self._key(token, digest), None)

    def peek(self, token: str, digest: bytes | None = None) -> tuple[dict[str, Any], str] | None:
        """(claims, kid) of a remembered token, expired or not, without touching its place."""
        return self._entries.get(self._key(token, digest))

    def contains(self, token: str, digest: bytes | None = None) -> bool:
        return self._key(token, digest) in self._entries

    def put(self, token: str, claims: dict[str, Any], kid: str, digest: bytes | None = None) -> None:
        key = self._key(token, digest)
        self._entries[key] = (claims, kid)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
