"""Delegations on PostgreSQL (``grantd.store.Delegations``)."""

from __future__ import annotations

import builtins
from typing import Any, cast

from grantd.core.lifecycle import Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict
from grantd.store.records import (
    DELEGATION_COLUMNS,
    Delegation,
)
from grantd.store.rows import delegation_row, page_rows, to_json
from grantd.store.sql import after_sql, not_lapsed_sql
from grantd.store.tlog import delegation_event

from .connection import _lock, _nul_finds_nothing, _on_store_loop, _Part, _unique_violation
from .constants import PRINCIPALS_LOCK
from .sql import PG, _insert
from .tlog import _record


class PostgresDelegations(_Part):
    @_on_store_loop
    async def create(self, delegation: Delegation) -> Delegation:
        row: dict[str, Any] = {k: delegation.get(k) for k in DELEGATION_COLUMNS}
        async with self._db.tx() as cur:
            await _lock(
                cur, PRINCIPALS_LOCK
            )  # against an agent enrolled with the delegator's e-mail meanwhile
            await cur.execute("SELECT 1 AS x FROM agents WHERE email = %s", (str(row["delegator"]).lower(),))
            if await cur.fetchone():
                raise Conflict("delegator")  # a delegator is a person (D11)
            try:
                await cur.execute(
                    _insert("delegations", DELEGATION_COLUMNS), {**row, "scopes": to_json(row["scopes"])}
                )
            except _unique_violation():
                raise Conflict("id") from None
            await _record(
                cur,
                delegation_event("delegation.created", row, str(row["delegator"]), int(row["created_at"])),
            )
        return cast(Delegation, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, delegation_id: str) -> Delegation | None:
        row = await self._db.one("SELECT * FROM delegations WHERE id = %s", (delegation_id,))
        return delegation_row(row) if row else None

    @_nul_finds_nothing(lambda: ([], False))
    @_on_store_loop
    async def list(
        self, *, party: str | None, page: PageRequest, since: int | None = None
    ) -> tuple[list[Delegation], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        if party is not None:
            where.append("(delegator = %(party)s OR delegate = %(party)s)")
            params["party"] = party
        if since is not None:
            where.append("created_at >= %(since)s")
            params["since"] = since
        after_sql(page, "id", where, params, paramstyle=PG)
        rows = await self._db.all(
            f"SELECT * FROM delegations WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [delegation_row(r) for r in found], more

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def revoke(self, delegation_id: str, by: str, now: int) -> Delegation | None:
        async with self._db.tx() as cur:
            await cur.execute(
                """UPDATE delegations SET status = 'revoked', revoked_at = %s, revoked_by = %s
                   WHERE id = %s AND status = 'active' RETURNING *""",
                (now, by, delegation_id),
            )
            row = await cur.fetchone()
            if row:
                await _record(cur, delegation_event("delegation.revoked", dict(row), by, now))
        return delegation_row(dict(row)) if row else None

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def live_for(self, delegate: str, lapse: Lapse) -> builtins.list[Delegation]:
        live, params = not_lapsed_sql(lapse, DELEGATION_COLUMNS, paramstyle=PG)
        rows = await self._db.all(
            f"""SELECT * FROM delegations WHERE delegate = %(delegate)s AND status = 'active' AND {live}
                ORDER BY created_at, id""",  # noqa: S608 - generated from the Lapse
            {**params, "delegate": delegate},
        )
        return [delegation_row(r) for r in rows]
