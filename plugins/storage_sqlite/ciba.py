"""CIBA records on SQLite (``grantd.store.ciba``)."""

from __future__ import annotations

import builtins
import sqlite3
from typing import Any, cast

from grantd.store import Conflict
from grantd.store.ciba import CIBA_CLIENT_COLUMNS, CIBA_REQUEST_COLUMNS, CibaClient, CibaRequest

from .connection import _Database, _insert


class SQLiteCiba:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, request: CibaRequest) -> CibaRequest:
        row: dict[str, Any] = {c: request.get(c) for c in CIBA_REQUEST_COLUMNS}
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM ciba_requests WHERE expires_at <= ?", (row["created_at"],))
            try:
                _insert(conn, "ciba_requests", CIBA_REQUEST_COLUMNS, row)
            except sqlite3.IntegrityError:
                raise Conflict("auth_req_hash") from None
        return cast(CibaRequest, row)

    async def poll(self, auth_req_hash: str, now: int, agent_id: str) -> CibaRequest | None:
        async with self._db.awrite() as conn:
            row = conn.execute(
                "SELECT * FROM ciba_requests WHERE auth_req_hash = ? AND agent_id = ?",
                (auth_req_hash, agent_id),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE ciba_requests SET last_polled_at = ? WHERE auth_req_hash = ?", (now, auth_req_hash)
            )
        return cast(CibaRequest, dict(row))

    async def slow_down(self, auth_req_hash: str, interval: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                "UPDATE ciba_requests SET poll_interval = ? WHERE auth_req_hash = ? AND poll_interval < ?",
                (int(interval), auth_req_hash, int(interval)),
            )

    async def redeem(self, auth_req_hash: str, now: int) -> CibaRequest | None:
        # The conditional UPDATE decides: of concurrent redeemers, exactly one finds it unredeemed.
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE ciba_requests SET redeemed_at = ?
                   WHERE auth_req_hash = ? AND redeemed_at IS NULL AND expires_at > ? RETURNING *""",
                (now, auth_req_hash, now),
            ).fetchone()
        return cast(CibaRequest, dict(row)) if row else None

    async def for_grant(self, grant_id: str) -> builtins.list[CibaRequest]:
        rows = self._db.all("SELECT * FROM ciba_requests WHERE grant_id = ? ORDER BY created_at", (grant_id,))
        return cast(builtins.list[CibaRequest], rows)

    async def set_client(self, client: CibaClient | None, agent_id: str) -> None:
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM ciba_clients WHERE agent_id = ?", (agent_id,))
            if client is not None:
                _insert(
                    conn, "ciba_clients", CIBA_CLIENT_COLUMNS, {c: client.get(c) for c in CIBA_CLIENT_COLUMNS}
                )

    async def get_client(self, agent_id: str) -> CibaClient | None:
        return cast(
            CibaClient | None, self._db.one("SELECT * FROM ciba_clients WHERE agent_id = ?", (agent_id,))
        )
