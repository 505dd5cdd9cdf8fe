"""Signing keys: created on first start, kept in storage, rotated without breaking issued tokens.

The active key is the newest unretired one. Every process asks storage for the active kid
before signing (one indexed read), so `grantd keys rotate` run anywhere takes effect at once in
every server process. A retired key stays in the JWKS until every token it can have signed has
expired (retired_at + the longest token lifetime), then it is dropped.
"""

from __future__ import annotations

import base64
import secrets
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grantd.store import Store


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def generate_signing_key(now_ms: int | None = None) -> dict[str, Any]:
    now_ms = now_ms or int(time.time() * 1000)
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
    private: Ed25519PrivateKey
    public: Ed25519PublicKey
    jwk: dict[str, Any]
    created_at: int
    retired_at: int | None


class KeyRing:
    def __init__(self, store: Store, retention_seconds: int):
        self.store = store
        self.retention_ms = retention_seconds * 1000
        self._keys: dict[str, LoadedKey] = {}
        self._active: str | None = None

    async def ensure(self) -> None:
        """Create the first key if storage has none (safe when several processes start at once)."""
        if await self.store.active_kid() is None:
            await self.store.add_first_signing_key(generate_signing_key())
        await self.reload()

    async def reload(self) -> None:
        keys: dict[str, LoadedKey] = {}
        for row in await self.store.signing_keys():
            if row["alg"] != "EdDSA":
                continue  # tolerate keys of other algorithms (peer bug 22): never let them break issuance
            private = serialization.load_pem_private_key(row["private_pem"].encode(), password=None)
            if not isinstance(private, Ed25519PrivateKey):
                continue
            keys[row["kid"]] = LoadedKey(
                row["kid"], row["alg"], private, private.public_key(), row["public_jwk"], row["created_at"], row["retired_at"]
            )
        self._keys = keys
        self._active = await self.store.active_kid()

    async def signing_key(self) -> LoadedKey:
        kid = await self.store.active_kid()
        if kid is None:
            await self.ensure()
            kid = self._active
        if kid != self._active or kid not in self._keys:
            await self.reload()
        assert kid is not None
        return self._keys[kid]

    def _published(self, key: LoadedKey, now_ms: int) -> bool:
        return key.retired_at is None or key.retired_at + self.retention_ms > now_ms

    async def verification_key(self, kid: str) -> Ed25519PublicKey | None:
        key = self._keys.get(kid)
        if key is None:
            await self.reload()  # a key made by another process since we last looked
            key = self._keys.get(kid)
        if key is None or not self._published(key, int(time.time() * 1000)):
            return None
        return key.public

    async def jwks(self) -> dict[str, Any]:
        await self.signing_key()  # picks up rotations made elsewhere
        now = int(time.time() * 1000)
        return {"keys": [k.jwk for k in self._keys.values() if self._published(k, now)]}

    async def rotate(self) -> tuple[str, list[str]]:
        new = generate_signing_key()
        retired = await self.store.rotate_signing_key(new, int(time.time() * 1000))
        await self.store.drop_signing_keys_retired_before(int(time.time() * 1000) - self.retention_ms)
        await self.reload()
        return new["kid"], retired

    def describe(self) -> list[dict[str, Any]]:
        now = int(time.time() * 1000)
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
