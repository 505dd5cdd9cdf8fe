"""Signing keys: created on first start, kept in storage, rotated without breaking issued tokens.

The active key is the newest unretired one. Every process asks storage for the active kid
before signing (one indexed read), so `grantd keys rotate` run anywhere takes effect at once in
every server process. A retired key stays in the JWKS until every token it can have signed has
expired (retired_at + the longest token lifetime), then it is dropped.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grantd.core.clock import Clock
from grantd.store import Store
from grantd.store.records import SigningKey


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def generate_signing_key(now_ms: int) -> SigningKey:
    private = Ed25519PrivateKey.generate()
    kid = f"key-{now_ms}-{secrets.token_hex(3)}"
    raw_public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {
        "kid": kid,
        "alg": "EdDSA",
        "private_pem": private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
        "public_jwk": {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw_public), "kid": kid, "alg": "EdDSA", "use": "sig"},
        "created_at": now_ms,
        "retired_at": None,
    }


@dataclass(frozen=True)
class LoadedKey:
    kid: str
    alg: str
    private: Ed25519PrivateKey | None  # None once retired: its private half was deleted (D12)
    public: Ed25519PublicKey
    jwk: dict[str, Any]
    created_at: int
    retired_at: int | None


def _public_from_jwk(jwk: dict[str, Any]) -> Ed25519PublicKey | None:
    try:
        x = jwk["x"]
        return Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(x + "=" * (-len(x) % 4)))
    except (KeyError, TypeError, ValueError):
        return None


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

    async def ensure(self) -> None:
        """Create the first key if storage has none (safe when several processes start at once)."""
        if await self.store.keys.active_kid() is None:
            await self.store.keys.add_first(generate_signing_key(self.clock.now_ms()))
        await self.reload()

    async def reload(self) -> None:
        keys: dict[str, LoadedKey] = {}
        for row in await self.store.keys.all():
            if row["alg"] != "EdDSA":
                continue  # tolerate keys of other algorithms (peer bug 22): never let them break issuance
            private: Ed25519PrivateKey | None = None
            if row["private_pem"]:
                loaded = serialization.load_pem_private_key(row["private_pem"].encode(), password=None)
                if not isinstance(loaded, Ed25519PrivateKey):
                    continue
                private = loaded
            public = _public_from_jwk(row["public_jwk"])
            if public is None:
                continue
            keys[row["kid"]] = LoadedKey(
                row["kid"], row["alg"], private, public, row["public_jwk"], row["created_at"], row["retired_at"]
            )
        self._keys = keys
        self._active = await self.store.keys.active_kid()
        self._loaded_at = self.clock.now_ms()

    async def signing_key(self) -> LoadedKey:
        kid = await self.store.keys.active_kid()
        if kid is None:
            await self.ensure()
            kid = self._active
        if kid != self._active or kid not in self._keys:
            await self.reload()
        assert kid is not None
        key = self._keys[kid]
        assert key.private is not None, "the active key always has its private half"
        return key

    def _published(self, key: LoadedKey, now_ms: int) -> bool:
        return key.retired_at is None or key.retired_at + self.retention_ms > now_ms

    async def verification_key(self, kid: str) -> Ed25519PublicKey | None:
        now = self.clock.now_ms()
        age = now - self._loaded_at
        if age >= self.REFRESH_MS or (kid not in self._keys and age >= self.UNKNOWN_KID_REFRESH_MS):
            await self.reload()
        key = self._keys.get(kid)
        if key is None or not self._published(key, now):
            return None
        return key.public

    async def jwks(self) -> dict[str, Any]:
        await self.signing_key()  # picks up rotations made elsewhere
        now = self.clock.now_ms()
        if now - self._loaded_at >= self.REFRESH_MS:
            await self.reload()  # and revocations: a revoked key leaves the JWKS within a second
        return {"keys": [k.jwk for k in self._keys.values() if self._published(k, now)]}

    async def rotate(self) -> tuple[str, list[str]]:
        now = self.clock.now_ms()
        new = generate_signing_key(now)
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
                "state": "active" if k.kid == self._active else ("published" if self._published(k, now) else "expired"),
            }
            for k in sorted(self._keys.values(), key=lambda k: k.created_at, reverse=True)
        ]
