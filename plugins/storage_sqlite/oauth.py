"""OAuth records on SQLite (``grantd.store.oauth``): one-time records, refresh tokens, device codes, consents."""

from __future__ import annotations

import builtins
import json
import sqlite3
from typing import Any, cast

from grantd.store import Conflict
from grantd.store.oauth import union_scope, was_live
from grantd.store.records import (
    CONSENT_COLUMNS,
    DEVICE_CODE_COLUMNS,
    REFRESH_TOKEN_COLUMNS,
    Consent,
    DeviceCode,
    RefreshToken,
)
from grantd.store.rows import to_json

from .connection import _Database, _insert


class SQLiteOneTime:
    def __init__(self, db: _Database):
        self._db = db

    async def put(self, kind: str, key: str, data: dict[str, Any], expires_at: int, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                "DELETE FROM oauth_onetime WHERE expires_at <= ?", (now,)
            )  # index range; an expired twin too
            try:
                conn.execute(
                    "INSERT INTO oauth_onetime (kind, key, data, expires_at) VALUES (?, ?, ?, ?)",
                    (kind, key, to_json(data), expires_at),
                )
            except sqlite3.IntegrityError:
                raise Conflict("key") from None

    async def take(self, kind: str, key: str, now: int) -> dict[str, Any] | None:
        # The DELETE decides: of any number of concurrent takers in any process, one sees the row.
        async with self._db.awrite() as conn:
            row = conn.execute(
                "DELETE FROM oauth_onetime WHERE kind = ? AND key = ? RETURNING data, expires_at", (kind, key)
            ).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(dict[str, Any], json.loads(row["data"]))


class SQLiteRefreshTokens:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, token: RefreshToken) -> RefreshToken:
        row: dict[str, Any] = {c: token.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.awrite() as conn:
            # families that ended before this one began go (an index range: cheap)
            conn.execute("DELETE FROM refresh_tokens WHERE expires_at <= ?", (row["created_at"],))
            try:
                _insert(conn, "refresh_tokens", REFRESH_TOKEN_COLUMNS, row)
            except sqlite3.IntegrityError:
                raise Conflict("token_hash") from None
        return cast(RefreshToken, row)

    async def rotate(self, token_hash: str, new: RefreshToken, now: int) -> tuple[str, RefreshToken | None]:
        row: dict[str, Any] = {c: new.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.awrite() as conn:
            # The conditional UPDATE decides: of concurrent redeemers of one token, one marks it used.
            used = conn.execute(
                """UPDATE refresh_tokens SET used_at = :now
                   WHERE token_hash = :hash AND used_at IS NULL AND revoked_at IS NULL AND expires_at > :now
                   RETURNING *""",
                {"now": now, "hash": token_hash},
            ).fetchone()
            if used is not None:
                try:
                    _insert(conn, "refresh_tokens", REFRESH_TOKEN_COLUMNS, row)
                except sqlite3.IntegrityError:
                    raise Conflict("token_hash") from None  # rolls the redemption back too
                return "rotated", cast(RefreshToken, {**dict(used), "used_at": None})
            found = conn.execute(
                "SELECT * FROM refresh_tokens WHERE token_hash = ?", (token_hash,)
            ).fetchone()
            if found is None:
                return "unknown", None
            old = cast(RefreshToken, dict(found))
            if old["expires_at"] <= now:
                return "expired", old
            if old["revoked_at"] is not None and old["used_at"] is None:
                return "revoked", old
            # used before: a replay (or a stolen copy) — the whole family goes (if it has not yet)
            conn.execute(
                "UPDATE refresh_tokens SET revoked_at = ? WHERE family_id = ? AND revoked_at IS NULL",
                (now, old["family_id"]),
            )
            return "reused", old

    async def get(self, token_hash: str) -> RefreshToken | None:
        return cast(
            RefreshToken | None,
            self._db.one("SELECT * FROM refresh_tokens WHERE token_hash = ?", (token_hash,)),
        )

    async def family_live(self, family_id: str, now: int) -> bool:
        return (
            self._db.one(
                "SELECT 1 FROM refresh_tokens WHERE family_id = ? AND revoked_at IS NULL AND expires_at > ? LIMIT 1",
                (family_id, now),
            )
            is not None
        )

    async def _revoke(self, where: str, params: dict[str, Any], now: int) -> int:
        async with self._db.awrite() as conn:
            return was_live(
                conn.execute(
                    f"UPDATE refresh_tokens SET revoked_at = :now WHERE {where} AND revoked_at IS NULL RETURNING used_at, expires_at",  # noqa: S608 - fixed clauses
                    {**params, "now": now},
                ).fetchall(),
                now,
            )

    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke("family_id = :family_id", {"family_id": family_id}, now)

    async def revoke_person(self, person_id: str, now: int, client_id: str | None = None) -> int:
        if client_id is None:
            return await self._revoke("person_id = :person_id", {"person_id": person_id}, now)
        return await self._revoke(
            "person_id = :person_id AND client_id = :client_id",
            {"person_id": person_id, "client_id": client_id},
            now,
        )

    async def list_families(self, person_id: str, now: int) -> builtins.list[RefreshToken]:
        # A live family has exactly one unused token: its newest (a rotation uses the old one and
        # adds the next in one transaction; a reuse revokes the family).
        rows = self._db.all(
            """SELECT * FROM refresh_tokens WHERE person_id = ? AND used_at IS NULL AND revoked_at IS NULL
               AND expires_at > ? ORDER BY created_at DESC, token_hash DESC""",
            (person_id, now),
        )
        return cast(builtins.list[RefreshToken], rows)


class SQLiteDeviceCodes:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, device: DeviceCode) -> DeviceCode:
        row: dict[str, Any] = {c: device.get(c) for c in DEVICE_CODE_COLUMNS}
        async with self._db.awrite() as conn:
            # requests that expired before this one began go, so their user codes are free again
            conn.execute("DELETE FROM device_codes WHERE expires_at <= ?", (row["created_at"],))
            try:
                _insert(conn, "device_codes", DEVICE_CODE_COLUMNS, row)
            except sqlite3.IntegrityError as exc:
                raise Conflict("user_code" if "user_code" in str(exc) else "device_code_hash") from None
        return cast(DeviceCode, row)

    async def get_by_user_code(self, user_code: str, now: int) -> DeviceCode | None:
        return cast(
            DeviceCode | None,
            self._db.one(
                "SELECT * FROM device_codes WHERE user_code = ? AND expires_at > ?", (user_code, now)
            ),
        )

    async def decide(self, user_code: str, person_id: str, approved: bool, now: int) -> DeviceCode | None:
        # The conditional UPDATE decides: of concurrent deciders, exactly one finds it pending.
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE device_codes SET status = ?, person_id = ?, decided_at = ?
                   WHERE user_code = ? AND status = 'pending' AND expires_at > ? RETURNING *""",
                ("approved" if approved else "denied", person_id, now, user_code, now),
            ).fetchone()
        return cast(DeviceCode, dict(row)) if row else None

    async def poll(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._db.awrite() as conn:
            row = conn.execute(
                "SELECT * FROM device_codes WHERE device_code_hash = ?", (device_code_hash,)
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE device_codes SET last_polled_at = ? WHERE device_code_hash = ?",
                (now, device_code_hash),
            )
        return cast(DeviceCode, dict(row))

    async def take(self, device_code_hash: str, now: int) -> DeviceCode | None:
        # The DELETE decides: of concurrent token exchanges, exactly one gets the approved request.
        async with self._db.awrite() as conn:
            row = conn.execute(
                """DELETE FROM device_codes WHERE device_code_hash = ? AND status = 'approved' AND expires_at > ?
                   RETURNING *""",
                (device_code_hash, now),
            ).fetchone()
        return cast(DeviceCode, dict(row)) if row else None

    async def slow_down(self, device_code_hash: str, interval: int, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                "UPDATE device_codes SET interval = ? WHERE device_code_hash = ? AND interval < ?",
                (int(interval), device_code_hash, int(interval)),
            )


class SQLiteConsents:
    def __init__(self, db: _Database):
        self._db = db

    async def remember(self, consent: Consent) -> Consent:
        async with self._db.awrite() as conn:
            found = conn.execute(
                "SELECT * FROM consents WHERE person_id = ? AND client_id = ?",
                (consent["person_id"], consent["client_id"]),
            ).fetchone()
            row: dict[str, Any] = {c: consent.get(c) for c in CONSENT_COLUMNS}
            row["scope"] = union_scope("", str(row["scope"]))
            if found is not None:
                row["scope"] = union_scope(found["scope"], row["scope"])
                row["created_at"] = found["created_at"]
            conn.execute(
                f"INSERT OR REPLACE INTO consents ({', '.join(CONSENT_COLUMNS)}) VALUES ({', '.join(':' + c for c in CONSENT_COLUMNS)})",  # noqa: S608 - fixed column list
                row,
            )
        return cast(Consent, row)

    async def get(self, person_id: str, client_id: str) -> Consent | None:
        return cast(
            Consent | None,
            self._db.one(
                "SELECT * FROM consents WHERE person_id = ? AND client_id = ?", (person_id, client_id)
            ),
        )

    async def list_for(self, person_id: str) -> builtins.list[Consent]:
        rows = self._db.all(
            "SELECT * FROM consents WHERE person_id = ? ORDER BY updated_at DESC, client_id", (person_id,)
        )
        return cast(builtins.list[Consent], rows)

    async def withdraw(self, person_id: str, client_id: str, now: int) -> bool:
        async with self._db.awrite() as conn:
            deleted = conn.execute(
                "DELETE FROM consents WHERE person_id = ? AND client_id = ?", (person_id, client_id)
            ).rowcount
            conn.execute(
                "UPDATE refresh_tokens SET revoked_at = ? WHERE person_id = ? AND client_id = ? AND revoked_at IS NULL",
                (now, person_id, client_id),
            )
        return int(deleted) == 1
