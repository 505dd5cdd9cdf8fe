"""JWT minting and verification (PyJWT, EdDSA). Token kinds are told apart by their claims."""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from typing import Any

import jwt

from grantd.keys import KeyRing


class TokenError(Exception):
    """A token that does not verify; the message is safe to show."""


async def mint(keyring: KeyRing, claims: dict[str, Any]) -> str:
    key = await keyring.signing_key()
    return jwt.encode(claims, key.private, algorithm="EdDSA", headers={"kid": key.kid, "typ": "JWT"})


async def verify(
    keyring: KeyRing, token: str, *, issuer: str, audience: str | None, leeway: int = 0
) -> dict[str, Any]:
    header = _known_headers.get(token.partition(".")[0])
    if header is None:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenError("malformed token") from None
    if header.get("alg") != "EdDSA" or not isinstance(header.get("kid"), str):
        raise TokenError("unsupported token algorithm or missing kid")
    public = await keyring.verification_key(header["kid"])
    if public is None:
        raise TokenError("unknown signing key")
    options: Any = {"require": ["exp", "iat", "iss", "sub"], "verify_aud": audience is not None}
    try:
        claims = jwt.decode(
            token, public, algorithms=["EdDSA"], issuer=issuer, audience=audience, options=options, leeway=leeway
        )
    except jwt.ExpiredSignatureError:
        raise TokenError("token expired") from None
    except jwt.InvalidAudienceError:
        raise TokenError("audience mismatch") from None
    except jwt.InvalidIssuerError:
        raise TokenError("issuer mismatch") from None
    except jwt.InvalidSignatureError:
        raise TokenError("bad signature") from None
    except jwt.PyJWTError as exc:
        raise TokenError(f"invalid token: {exc}") from None
    _remember_header(token.partition(".")[0], header)
    return claims


# Every token we sign with one key has the same header segment; parsing it separately costs a
# full pass over the token in PyJWT. Only headers of tokens that verified are remembered, so the
# table holds one entry per signing key and cannot be filled by strangers.
_known_headers: dict[str, dict[str, Any]] = {}
_MAX_KNOWN_HEADERS = 64


def _remember_header(segment: str, header: dict[str, Any]) -> None:
    if segment not in _known_headers and len(_known_headers) < _MAX_KNOWN_HEADERS:
        _known_headers[segment] = header


def new_jti() -> str:
    return str(uuid.uuid4())


class VerifiedTokenCache:
    """Bounded cache of successfully verified bearer tokens: an agent reuses its token for its
    whole lifetime, and the Ed25519 verify is the largest per-request cost. Entries end with the
    token's exp; agent status is still checked on every request by the caller."""

    def __init__(self, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._entries: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def get(self, token: str) -> dict[str, Any] | None:
        claims = self._entries.get(token)
        if claims is None:
            return None
        if claims["exp"] <= time.time():
            self._entries.pop(token, None)
            return None
        self._entries.move_to_end(token)
        return claims

    def put(self, token: str, claims: dict[str, Any]) -> None:
        self._entries[token] = claims
        self._entries.move_to_end(token)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
