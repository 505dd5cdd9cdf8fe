"""Signing keys: created on first start (EdDSA, and the ES256/RS256 keys configured clients ask
for), kept in storage, rotated without breaking issued tokens.

The active key is the newest unretired one. Every process asks storage for the active kid
before signing (one indexed read), so `grantd keys rotate` run anywhere takes effect at once in
every server process. A retired key stays in the JWKS until every token it can have signed has
expired (retired_at + the longest token lifetime), then it is dropped.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grantd.core.clock import Clock
from grantd.store import Store
from grantd.store.records import SigningKey


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64url_int(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8 or 1, "big"))


SIGNING_ALGS = ("EdDSA", "ES256", "RS256")  # D3: EdDSA signs everything; ID tokens may ask for the others


def generate_signing_key(now_ms: int, alg: str = "EdDSA") -> SigningKey:
    """A new key of ``alg``: Ed25519, EC P-256 or RSA 2048. Its JWK has the standard members only."""
    private: Any
    kid = (
        f"key-{now_ms}-{secrets.token_hex(3)}"
        if alg == "EdDSA"
        else f"{alg.lower()}-{now_ms}-{secrets.token_hex(3)}"
    )
    if alg == "EdDSA":
        private = Ed25519PrivateKey.generate()
        raw_public = private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        jwk: dict[str, Any] = {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw_public)}
    elif alg == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
        numbers = private.public_key().public_numbers()
        jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": _b64url(numbers.x.to_bytes(32, "big")),
            "y": _b64url(numbers.y.to_bytes(32, "big")),
        }
    elif alg == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        rsa_numbers = private.public_key().public_numbers()
        jwk = {"kty": "RSA", "n": _b64url_int(rsa_numbers.n), "e": _b64url_int(rsa_numbers.e)}
    else:
        raise ValueError(f"unsupported signing algorithm {alg!r}")
    return {
        "kid": kid,
        "alg": alg,
        "private_pem": private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
        "public_jwk": {**jwk, "kid": kid, "alg": alg, "use": "sig"},
        "created_at": now_ms,
        "retired_at": None,
    }


@dataclass(frozen=True)
class LoadedKey:
    kid: str
    alg: str
    private: Any  # Ed25519 / EC / RSA private key; None once retired: its private half was deleted (D12)
    public: Any
    jwk: dict[str, Any]
    created_at: int
    retired_at: int | None


def _b64decode(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


def _public_from_jwk(jwk: dict[str, Any], alg: str = "EdDSA") -> Any:
    try:
        if alg == "EdDSA":
            return Ed25519PublicKey.from_public_bytes(_b64decode(jwk["x"]))
        if alg == "ES256":
            x, y = (int.from_bytes(_b64decode(jwk[k]), "big") for k in ("x", "y"))
            return ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
        if alg == "RS256":
            n, e = (int.from_bytes(_b64decode(jwk[k]), "big") for k in ("n", "e"))
            return rsa.RSAPublicNumbers(e, n).public_key()
    except (KeyError, TypeError, ValueError):
        return None
    return None


_PRIVATE_TYPES: dict[str, Any] = {
    "EdDSA": Ed25519PrivateKey,
    "ES256": ec.EllipticCurvePrivateKey,
    "RS256": rsa.RSAPrivateKey,
}


class KeyRing:
    """The signing keys as this process sees them. Storage is the truth: the active kid is read
    before every signature, and the key list is re-read at least every ``REFRESH_MS`` when verifying,
    so a ``grantd keys revoke`` run anywhere stops every process trusting that key within a second."""

    REFRESH_MS = 1000
    UNKNOWN_KID_REFRESH_MS = 100  # a kid made elsewhere just now; strangers' kids cost at most 10 reads/s

    def __init__(self, store: Store, retention_seconds: int, clock: Clock):
        self.store = store
        self.clock = clock
        self.retention_ms = retention_seconds * 1000
        self._keys: dict[str, LoadedKey] = {}
        self._active: str | None = None
        self._loaded_at = -(10**15)

    async def ensure(self, algs: Iterable[str] = ("EdDSA",)) -> None:
        """Create the first key of each of ``algs`` that storage has no active key of (EdDSA always):
        at start, EdDSA and the ES256/RS256 of configured clients (D9), so a relying party that
        caches the JWKS when it starts finds its key there before the first ID token. Creation is
        single-winner (``store.keys.add_first``): processes starting at once all end up with the
        same key, the one storage kept."""
        for alg in dict.fromkeys(("EdDSA", *algs)):
            if alg not in SIGNING_ALGS:
                raise ValueError(f"unsupported signing algorithm {alg!r}")
            if await self.store.keys.active_kid(alg) is None:
                await self.store.keys.add_first(generate_signing_key(self.clock.now_ms(), alg))
        await self.reload()

    async def reload(self) -> None:
        keys: dict[str, LoadedKey] = {}
        for row in await self.store.keys.all():
            alg = row["alg"]
            if alg not in SIGNING_ALGS:
                continue  # tolerate keys of unknown algorithms (peer bug 22): never let them break issuance
            private: Any = None
            if row["private_pem"]:
                try:
                    loaded = serialization.load_pem_private_key(row["private_pem"].encode(), password=None)
                except ValueError:
                    continue
                if not isinstance(loaded, _PRIVATE_TYPES[alg]):
                    continue
                private = loaded
            public = _public_from_jwk(row["public_jwk"], alg)
            if public is None:
                continue
            keys[row["kid"]] = LoadedKey(
                row["kid"], alg, private, public, row["public_jwk"], row["created_at"], row["retired_at"]
            )
        self._keys = keys
        self._active = await self.store.keys.active_kid("EdDSA")
        self._loaded_at = self.clock.now_ms()

    async def signing_key(self, alg: str = "EdDSA") -> LoadedKey:
        """The active key of ``alg``. EdDSA's and those of configured clients are made at start
        (``ensure``); an ES256 or RS256 key a domain client asks for is made the first time an ID
        token needs one (D3), then kept in storage like any key."""
        kid = await self.store.keys.active_kid(alg)
        if kid is None:
            if alg == "EdDSA":
                await self.ensure()
            elif alg in SIGNING_ALGS:
                await self.store.keys.add_first(generate_signing_key(self.clock.now_ms(), alg))
            else:
                raise ValueError(f"unsupported signing algorithm {alg!r}")
            kid = await self.store.keys.active_kid(alg)
        if kid is None:
            raise RuntimeError(f"no active {alg} key")
        if (alg == "EdDSA" and kid != self._active) or kid not in self._keys:
            await self.reload()
        key = self._keys[kid]
        assert key.private is not None, "the active key always has its private half"
        return key

    def _published(self, key: LoadedKey, now_ms: int) -> bool:
        return key.retired_at is None or key.retired_at + self.retention_ms > now_ms

    async def verification_key(self, kid: str, alg: str = "EdDSA") -> Any:
        """The public key of a published key of ``alg`` (grantd's own bearers are all EdDSA: an
        ES256/RS256 ID-token key never verifies one of them)."""
        now = self.clock.now_ms()
        age = now - self._loaded_at
        if age >= self.REFRESH_MS or (kid not in self._keys and age >= self.UNKNOWN_KID_REFRESH_MS):
            await self.reload()
        key = self._keys.get(kid)
        if key is None or key.alg != alg or not self._published(key, now):
            return None
        return key.public

    async def jwks(self) -> dict[str, Any]:
        await self.signing_key()  # picks up rotations made elsewhere
        now = self.clock.now_ms()
        if now - self._loaded_at >= self.REFRESH_MS:
            await self.reload()  # and revocations: a revoked key leaves the JWKS within a second
        return {"keys": [k.jwk for k in self._keys.values() if self._published(k, now)]}

    async def rotate(self, alg: str = "EdDSA") -> tuple[str, list[str]]:
        """A new active key of ``alg`` (``grantd keys rotate``: EdDSA, the key of every bearer and
        default ID token). ES256/RS256 ID-token keys rotate only when asked for by name."""
        now = self.clock.now_ms()
        new = generate_signing_key(now, alg)
        retired = await self.store.keys.rotate(new, now)
        await self.store.keys.drop_retired_before(now - self.retention_ms)
        await self.reload()
        return new["kid"], retired

    async def revoke(self, kid: str) -> tuple[bool, str | None]:
        """Stop trusting a key at once (D12): it leaves the JWKS and every token it signed stops
        verifying. Revoking the active key first rotates to a new one, so signing goes on.
        Returns (whether the key existed, the new active kid if a rotation happened)."""
        await self.reload()
        if kid not in self._keys:
            return False, None
        new_kid = None
        if kid == self._active:
            new_kid, _ = await self.rotate()
        elif self._keys[kid].retired_at is None and self._keys[kid].alg != "EdDSA":
            new_kid, _ = await self.rotate(self._keys[kid].alg)
        existed = await self.store.keys.revoke(kid, self.clock.now_ms())
        await self.reload()
        return existed, new_kid

    def describe(self) -> list[dict[str, Any]]:
        now = self.clock.now_ms()
        return [
            {
                "kid": k.kid,
                "alg": k.alg,
                "created_at": k.created_at,
                "retired_at": k.retired_at,
                "state": "active"
                if k.kid == self._active or (k.alg != "EdDSA" and k.retired_at is None)
                else ("published" if self._published(k, now) else "expired"),
            }
            for k in sorted(self._keys.values(), key=lambda k: k.created_at, reverse=True)
        ]
