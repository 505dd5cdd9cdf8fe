"""OAuth records on PostgreSQL (``grantd.store.oauth``): one-time records, refresh tokens, device codes, consents."""

from __future__ import annotations

import builtins
import json
from typing import TYPE_CHECKING, Any, cast

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

from .connection import _constraint, _nul_finds_nothing, _on_store_loop, _Part, _unique_violation
from .constants import RATE_SWEEP_LIMIT, REFRESH_LOCKS
from .sql import _cols, _insert, _marks

if TYPE_CHECKING:
    import psycopg


# -- OAuth (grantd.store.oauth) --------------------------------------------------------------------------
async def _lock_person_refresh(cur: psycopg.AsyncCursor[Any], person_id: str) -> None:
    """Serialise the changes of one person's refresh families. A row lock is not enough: under READ
    COMMITTED a revocation's UPDATE does not see the token a concurrent rotation inserts (its
    snapshot is older), so the new token of a just-revoked family would live on. Every writer of
    a person's families takes this lock first; statements after it see what earlier holders
    committed."""
    await cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (REFRESH_LOCKS, person_id))


async def _sweep(cur: psycopg.AsyncCursor[Any], table: str, key: str, cutoff: int) -> None:
    """Drop rows that expired at or before ``cutoff``, at most RATE_SWEEP_LIMIT of them. SKIP LOCKED:
    rows another transaction holds are its business, so concurrent writers never queue behind (or
    deadlock with) each other over rows nobody needs (``table`` and ``key`` are this module's)."""
    await cur.execute(
        f"""DELETE FROM {table} WHERE ({key}) IN (
               SELECT {key} FROM {table} WHERE expires_at <= %s LIMIT %s FOR UPDATE SKIP LOCKED)""",  # noqa: S608 - fixed names
        (cutoff, RATE_SWEEP_LIMIT),
    )


REFRESH_SELECT = f"SELECT {_cols(REFRESH_TOKEN_COLUMNS)} FROM refresh_tokens"  # noqa: S608 - fixed columns
DEVICE_COLUMNS_SQL = ", ".join('"interval"' if c == "interval" else c for c in DEVICE_CODE_COLUMNS)


def _device_insert() -> str:
    return f"INSERT INTO device_codes ({DEVICE_COLUMNS_SQL}) VALUES ({_marks(DEVICE_CODE_COLUMNS)})"  # noqa: S608 - fixed column list


class PostgresOneTime(_Part):
    @_on_store_loop
    async def put(self, kind: str, key: str, data: dict[str, Any], expires_at: int, now: int) -> None:
        async with self._db.tx() as cur:
            await cur.execute(  # an expired twin makes way (waiting for whoever holds it)
                "DELETE FROM oauth_onetime WHERE kind = %s AND key = %s AND expires_at <= %s",
                (kind, key, now),
            )
            await _sweep(cur, "oauth_onetime", "kind, key", now)
            try:
                await cur.execute(
                    "INSERT INTO oauth_onetime (kind, key, data, expires_at) VALUES (%s, %s, %s, %s)",
                    (kind, key, to_json(data), expires_at),
                )
            except _unique_violation():
                raise Conflict("key") from None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, kind: str, key: str, now: int) -> dict[str, Any] | None:
        # The DELETE decides: of any number of concurrent takers on any node, one sees the row.
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM oauth_onetime WHERE kind = %s AND key = %s RETURNING data, expires_at",
                (kind, key),
            )
            row = await cur.fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(dict[str, Any], json.loads(row["data"]))


class PostgresRefreshTokens(_Part):
    @_on_store_loop
    async def create(self, token: RefreshToken) -> RefreshToken:
        row: dict[str, Any] = {c: token.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.tx() as cur:
            await _lock_person_refresh(cur, str(row["person_id"]))
            await _sweep(cur, "refresh_tokens", "token_hash", row["created_at"])  # families that ended before
            try:
                await cur.execute(_insert("refresh_tokens", REFRESH_TOKEN_COLUMNS), row)
            except _unique_violation():
                raise Conflict("token_hash") from None
        return cast(RefreshToken, row)

    @_nul_finds_nothing(("unknown", None))
    @_on_store_loop
    async def rotate(self, token_hash: str, new: RefreshToken, now: int) -> tuple[str, RefreshToken | None]:
        row: dict[str, Any] = {c: new.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.tx() as cur:
            await cur.execute("SELECT person_id FROM refresh_tokens WHERE token_hash = %s", (token_hash,))
            owner = await cur.fetchone()
            if owner is None:
                return "unknown", None
            await _lock_person_refresh(cur, owner["person_id"])
            # The conditional UPDATE decides: of concurrent redeemers of one token, one marks it used.
            await cur.execute(
                f"""UPDATE refresh_tokens SET used_at = %(now)s
                    WHERE token_hash = %(hash)s AND used_at IS NULL AND revoked_at IS NULL AND expires_at > %(now)s
                    RETURNING {_cols(REFRESH_TOKEN_COLUMNS)}""",  # noqa: S608 - fixed columns
                {"now": now, "hash": token_hash},
            )
            used = await cur.fetchone()
            if used is not None:
                try:
                    await cur.execute(_insert("refresh_tokens", REFRESH_TOKEN_COLUMNS), row)
                except _unique_violation():
                    raise Conflict("token_hash") from None  # rolls the redemption back too
                return "rotated", cast(RefreshToken, {**used, "used_at": None})
            await cur.execute(f"{REFRESH_SELECT} WHERE token_hash = %s", (token_hash,))
            found = await cur.fetchone()
            if found is None:
                return "unknown", None
            old = cast(RefreshToken, found)
            if old["expires_at"] <= now:
                return "expired", old
            if old["revoked_at"] is not None and old["used_at"] is None:
                return "revoked", old
            # used before: a replay (or a stolen copy) — the whole family goes (if it has not yet)
            await cur.execute(
                "UPDATE refresh_tokens SET revoked_at = %s WHERE family_id = %s AND revoked_at IS NULL",
                (now, old["family_id"]),
            )
            return "reused", old

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, token_hash: str) -> RefreshToken | None:
        return cast(
            RefreshToken | None, await self._db.one(f"{REFRESH_SELECT} WHERE token_hash = %s", (token_hash,))
        )

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def family_live(self, family_id: str, now: int) -> bool:
        return (
            await self._db.one(
                "SELECT 1 AS x FROM refresh_tokens WHERE family_id = %s AND revoked_at IS NULL AND expires_at > %s LIMIT 1",
                (family_id, now),
            )
            is not None
        )

    @staticmethod
    async def _revoke(cur: psycopg.AsyncCursor[Any], where: str, params: dict[str, Any], now: int) -> int:
        await cur.execute(
            f"UPDATE refresh_tokens SET revoked_at = %(now)s WHERE {where} AND revoked_at IS NULL RETURNING used_at, expires_at",  # noqa: S608 - fixed clauses
            {**params, "now": now},
        )
        return was_live(await cur.fetchall(), now)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_family(self, family_id: str, now: int) -> int:
        async with self._db.tx() as cur:
            await cur.execute(
                "SELECT person_id FROM refresh_tokens WHERE family_id = %s LIMIT 1", (family_id,)
            )
            owner = await cur.fetchone()
            if owner is None:
                return 0
            await _lock_person_refresh(cur, owner["person_id"])
            return await self._revoke(cur, "family_id = %(family_id)s", {"family_id": family_id}, now)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_person(self, person_id: str, now: int, client_id: str | None = None) -> int:
        async with self._db.tx() as cur:
            await _lock_person_refresh(cur, person_id)
            if client_id is None:
                return await self._revoke(cur, "person_id = %(person_id)s", {"person_id": person_id}, now)
            return await self._revoke(
                cur,
                "person_id = %(person_id)s AND client_id = %(client_id)s",
                {"person_id": person_id, "client_id": client_id},
                now,
            )

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def list_families(self, person_id: str, now: int) -> builtins.list[RefreshToken]:
        # A live family has exactly one unused token: its newest (a rotation uses the old one and
        # adds the next in one transaction; a reuse revokes the family).
        rows = await self._db.all(
            f"""{REFRESH_SELECT} WHERE person_id = %s AND used_at IS NULL AND revoked_at IS NULL
                AND expires_at > %s ORDER BY created_at DESC, token_hash DESC""",
            (person_id, now),
        )
        return cast(builtins.list[RefreshToken], rows)


class PostgresDeviceCodes(_Part):
    SELECT = f"SELECT {DEVICE_COLUMNS_SQL} FROM device_codes"  # noqa: S608 - fixed columns

    @_on_store_loop
    async def create(self, device: DeviceCode) -> DeviceCode:
        row: dict[str, Any] = {c: device.get(c) for c in DEVICE_CODE_COLUMNS}
        async with self._db.tx() as cur:
            # an expired request with this user code makes way (waiting for whoever holds it); others go as we go
            await cur.execute(
                "DELETE FROM device_codes WHERE user_code = %s AND expires_at <= %s",
                (row["user_code"], row["created_at"]),
            )
            await _sweep(cur, "device_codes", "device_code_hash", row["created_at"])
            try:
                await cur.execute(_device_insert(), row)
            except _unique_violation() as exc:
                raise Conflict(
                    "user_code" if _constraint(exc) == "device_codes_user_code_key" else "device_code_hash"
                ) from None
        return cast(DeviceCode, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get_by_user_code(self, user_code: str, now: int) -> DeviceCode | None:
        return cast(
            DeviceCode | None,
            await self._db.one(f"{self.SELECT} WHERE user_code = %s AND expires_at > %s", (user_code, now)),
        )

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def decide(self, user_code: str, person_id: str, approved: bool, now: int) -> DeviceCode | None:
        # The conditional UPDATE decides: of concurrent deciders, exactly one finds it pending.
        async with self._db.statement() as cur:
            await cur.execute(
                f"""UPDATE device_codes SET status = %s, person_id = %s, decided_at = %s
                    WHERE user_code = %s AND status = 'pending' AND expires_at > %s RETURNING {DEVICE_COLUMNS_SQL}""",  # noqa: S608 - fixed columns
                ("approved" if approved else "denied", person_id, now, user_code, now),
            )
            row = await cur.fetchone()
        return cast(DeviceCode, row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def poll(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._db.tx() as cur:
            await cur.execute(f"{self.SELECT} WHERE device_code_hash = %s FOR UPDATE", (device_code_hash,))
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute(
                "UPDATE device_codes SET last_polled_at = %s WHERE device_code_hash = %s",
                (now, device_code_hash),
            )
        return cast(DeviceCode, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, device_code_hash: str, now: int) -> DeviceCode | None:
        # The DELETE decides: of concurrent token exchanges, exactly one gets the approved request.
        async with self._db.statement() as cur:
            await cur.execute(
                f"""DELETE FROM device_codes WHERE device_code_hash = %s AND status = 'approved' AND expires_at > %s
                    RETURNING {DEVICE_COLUMNS_SQL}""",  # noqa: S608 - fixed columns
                (device_code_hash, now),
            )
            row = await cur.fetchone()
        return cast(DeviceCode, row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def slow_down(self, device_code_hash: str, interval: int, now: int) -> None:
        async with self._db.statement() as cur:
            await cur.execute(
                'UPDATE device_codes SET "interval" = %s WHERE device_code_hash = %s AND "interval" < %s',
                (int(interval), device_code_hash, int(interval)),
            )


class PostgresConsents(_Part):
    SELECT = f"SELECT {_cols(CONSENT_COLUMNS)} FROM consents"  # noqa: S608 - fixed columns

    @_on_store_loop
    async def remember(self, consent: Consent) -> Consent:
        row: dict[str, Any] = {c: consent.get(c) for c in CONSENT_COLUMNS}
        row["scope"] = union_scope("", str(row["scope"]))
        async with self._db.tx() as cur:
            # One statement inserts the first consent or locks the stored one (a concurrent first
            # insert or withdraw is waited for); then the union is written back under that lock.
            await cur.execute(
                f"""{_insert("consents", CONSENT_COLUMNS)} ON CONFLICT (person_id, client_id)
                    DO UPDATE SET updated_at = EXCLUDED.updated_at RETURNING scope, created_at""",
                row,
            )
            stored = await cur.fetchone()
            assert stored is not None
            row["created_at"] = stored["created_at"]
            merged = union_scope(stored["scope"], row["scope"])
            if merged != stored["scope"]:
                row["scope"] = merged
                await cur.execute(
                    "UPDATE consents SET scope = %(scope)s WHERE person_id = %(person_id)s AND client_id = %(client_id)s",
                    row,
                )
            row["scope"] = merged
        return cast(Consent, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, person_id: str, client_id: str) -> Consent | None:
        return cast(
            Consent | None,
            await self._db.one(
                f"{self.SELECT} WHERE person_id = %s AND client_id = %s", (person_id, client_id)
            ),
        )

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def list_for(self, person_id: str) -> builtins.list[Consent]:
        rows = await self._db.all(
            f"{self.SELECT} WHERE person_id = %s ORDER BY updated_at DESC, client_id", (person_id,)
        )
        return cast(builtins.list[Consent], rows)

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def withdraw(self, person_id: str, client_id: str, now: int) -> bool:
        async with self._db.tx() as cur:
            await _lock_person_refresh(cur, person_id)
            await cur.execute(
                "DELETE FROM consents WHERE person_id = %s AND client_id = %s", (person_id, client_id)
            )
            deleted = int(cur.rowcount)
            await cur.execute(
                """UPDATE refresh_tokens SET revoked_at = %s
                   WHERE person_id = %s AND client_id = %s AND revoked_at IS NULL""",
                (now, person_id, client_id),
            )
        return deleted == 1
