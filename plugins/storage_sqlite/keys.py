"""Signing keys on SQLite (``grantd.store.Keys``)."""

from __future__ import annotations

import json
import sqlite3

from grantd.store.records import (
    SigningKey,
)
from grantd.store.rows import key_row
from grantd.store.tlog import jwt_key_event

from .connection import _Database
from .tlog import _record


# -- parts ----------------------------------------------------------------------------------------------
class SQLiteKeys:
    def __init__(self, db: _Database):
        self._db = db

    async def all(self) -> list[SigningKey]:
        return [
            key_row(r)
            for r in self._db.all("SELECT * FROM signing_keys ORDER BY created_at DESC, rowid DESC")
        ]

    async def active_kid(self, alg: str = "EdDSA") -> str | None:
        row = self._db.one(
            "SELECT kid FROM signing_keys WHERE alg = ? AND retired_at IS NULL ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (alg,),
        )
        return str(row["kid"]) if row else None

    @staticmethod
    def _insert(conn: sqlite3.Connection, key: SigningKey) -> None:
        conn.execute(
            "INSERT INTO signing_keys (kid, alg, private_pem, public_jwk, created_at, retired_at) VALUES (?,?,?,?,?,NULL)",
            (key["kid"], key["alg"], key["private_pem"], json.dumps(key["public_jwk"]), key["created_at"]),
        )

    async def add_first(self, key: SigningKey) -> bool:
        async with self._db.awrite() as conn:
            if conn.execute(
                "SELECT 1 FROM signing_keys WHERE alg = ? AND retired_at IS NULL", (key["alg"],)
            ).fetchone():
                return False
            self._insert(conn, key)
            return True

    async def rotate(self, key: SigningKey, now: int) -> list[str]:
        async with self._db.awrite() as conn:
            retired = conn.execute(
                "UPDATE signing_keys SET retired_at = ?, private_pem = '' WHERE alg = ? AND retired_at IS NULL RETURNING kid",
                (now, key["alg"]),
            ).fetchall()
            self._insert(conn, key)
            _record(conn, jwt_key_event(dict(key), now))
        return [str(r[0]) for r in retired]

    async def drop_retired_before(self, cutoff: int) -> int:
        async with self._db.awrite() as conn:
            return int(
                conn.execute(
                    "DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < ?", (cutoff,)
                ).rowcount
            )

    async def revoke(self, kid: str, now: int) -> bool:
        async with self._db.awrite() as conn:
            return int(conn.execute("DELETE FROM signing_keys WHERE kid = ?", (kid,)).rowcount) == 1
