"""Signing keys on PostgreSQL (``grantd.store.Keys``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from grantd.store.records import (
    KEY_COLUMNS,
    SigningKey,
)
from grantd.store.rows import key_row
from grantd.store.tlog import jwt_key_event

from .connection import _lock, _nul_finds_nothing, _on_store_loop, _Part
from .constants import KEYS_LOCK
from .sql import _cols
from .tlog import _record

if TYPE_CHECKING:
    import psycopg


# -- parts ------------------------------------------------------------------------------------------------
class PostgresKeys(_Part):
    @_on_store_loop
    async def all(self) -> list[SigningKey]:
        rows = await self._db.all(
            f"SELECT {_cols(KEY_COLUMNS)} FROM signing_keys ORDER BY created_at DESC, seq DESC"  # noqa: S608 - fixed columns
        )
        return [key_row(r) for r in rows]

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def active_kid(self, alg: str = "EdDSA") -> str | None:
        row = await self._db.one(
            "SELECT kid FROM signing_keys WHERE alg = %s AND retired_at IS NULL ORDER BY created_at DESC, seq DESC LIMIT 1",
            (alg,),
        )
        return str(row["kid"]) if row else None

    @staticmethod
    async def _insert(cur: psycopg.AsyncCursor[Any], key: SigningKey) -> None:
        await cur.execute(
            "INSERT INTO signing_keys (kid, alg, private_pem, public_jwk, created_at, retired_at) VALUES (%s,%s,%s,%s,%s,NULL)",
            (key["kid"], key["alg"], key["private_pem"], json.dumps(key["public_jwk"]), key["created_at"]),
        )

    @_on_store_loop
    async def add_first(self, key: SigningKey) -> bool:
        async with self._db.tx() as cur:
            await _lock(cur, KEYS_LOCK)  # statements after it see what an earlier holder committed
            await cur.execute(
                "SELECT 1 AS x FROM signing_keys WHERE alg = %s AND retired_at IS NULL LIMIT 1", (key["alg"],)
            )
            if await cur.fetchone():
                return False
            await self._insert(cur, key)
            return True

    @_on_store_loop
    async def rotate(self, key: SigningKey, now: int) -> list[str]:
        async with self._db.tx() as cur:
            await _lock(cur, KEYS_LOCK)
            await cur.execute(
                "UPDATE signing_keys SET retired_at = %s, private_pem = '' WHERE alg = %s AND retired_at IS NULL RETURNING kid",
                (now, key["alg"]),
            )
            retired = await cur.fetchall()
            await self._insert(cur, key)
            await _record(cur, jwt_key_event(dict(key), now))
        return [str(r["kid"]) for r in retired]

    @_on_store_loop
    async def drop_retired_before(self, cutoff: int) -> int:
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < %s", (cutoff,)
            )
            return int(cur.rowcount)

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def revoke(self, kid: str, now: int) -> bool:
        async with self._db.statement() as cur:
            await cur.execute("DELETE FROM signing_keys WHERE kid = %s", (kid,))
            return int(cur.rowcount) == 1
