"""CIBA records on PostgreSQL (``grantd.store.ciba``)."""

from __future__ import annotations

import builtins
from typing import Any, cast

from grantd.store import Conflict
from grantd.store.ciba import CIBA_CLIENT_COLUMNS, CIBA_REQUEST_COLUMNS, CibaClient, CibaRequest

from .connection import _nul_finds_nothing, _on_store_loop, _Part, _unique_violation
from .sql import _cols, _insert

_REQUEST_COLS = _cols(CIBA_REQUEST_COLUMNS)
_SELECT = f"SELECT {_REQUEST_COLS} FROM ciba_requests"  # noqa: S608 - fixed columns


class PostgresCiba(_Part):
    @_on_store_loop
    async def create(self, request: CibaRequest) -> CibaRequest:
        row: dict[str, Any] = {c: request.get(c) for c in CIBA_REQUEST_COLUMNS}
        async with self._db.tx() as cur:
            await cur.execute("DELETE FROM ciba_requests WHERE expires_at <= %s", (row["created_at"],))
            try:
                await cur.execute(_insert("ciba_requests", CIBA_REQUEST_COLUMNS), row)
            except _unique_violation():
                raise Conflict("auth_req_hash") from None
        return cast(CibaRequest, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def poll(self, auth_req_hash: str, now: int, agent_id: str) -> CibaRequest | None:
        async with self._db.tx() as cur:
            await cur.execute(
                f"{_SELECT} WHERE auth_req_hash = %s AND agent_id = %s FOR UPDATE", (auth_req_hash, agent_id)
            )
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute(
                "UPDATE ciba_requests SET last_polled_at = %s WHERE auth_req_hash = %s", (now, auth_req_hash)
            )
        return cast(CibaRequest, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def slow_down(self, auth_req_hash: str, interval: int) -> None:
        async with self._db.statement() as cur:
            await cur.execute(
                "UPDATE ciba_requests SET poll_interval = %s WHERE auth_req_hash = %s AND poll_interval < %s",
                (int(interval), auth_req_hash, int(interval)),
            )

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def redeem(self, auth_req_hash: str, now: int) -> CibaRequest | None:
        # The conditional UPDATE decides: of concurrent redeemers on any node, exactly one wins.
        async with self._db.statement() as cur:
            await cur.execute(
                f"""UPDATE ciba_requests SET redeemed_at = %s
                    WHERE auth_req_hash = %s AND redeemed_at IS NULL AND expires_at > %s
                    RETURNING {_REQUEST_COLS}""",  # noqa: S608 - fixed columns
                (now, auth_req_hash, now),
            )
            row = await cur.fetchone()
        return cast(CibaRequest, row) if row else None

    @_nul_finds_nothing([])
    @_on_store_loop
    async def for_grant(self, grant_id: str) -> builtins.list[CibaRequest]:
        rows = await self._db.all(f"{_SELECT} WHERE grant_id = %s ORDER BY created_at", (grant_id,))
        return cast(builtins.list[CibaRequest], rows)

    @_on_store_loop
    async def set_client(self, client: CibaClient | None, agent_id: str) -> None:
        async with self._db.tx() as cur:
            await cur.execute("DELETE FROM ciba_clients WHERE agent_id = %s", (agent_id,))
            if client is not None:
                await cur.execute(
                    _insert("ciba_clients", CIBA_CLIENT_COLUMNS),
                    {c: client.get(c) for c in CIBA_CLIENT_COLUMNS},
                )

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get_client(self, agent_id: str) -> CibaClient | None:
        return cast(
            CibaClient | None,
            await self._db.one(
                f"SELECT {_cols(CIBA_CLIENT_COLUMNS)} FROM ciba_clients WHERE agent_id = %s",  # noqa: S608
                (agent_id,),
            ),
        )
