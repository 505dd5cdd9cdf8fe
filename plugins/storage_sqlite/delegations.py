"""Delegations on SQLite (``grantd.store.Delegations``)."""

from __future__ import annotations

import builtins
import sqlite3
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

from .connection import _Database
from .tlog import _record


class SQLiteDelegations:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, delegation: Delegation) -> Delegation:
        row: dict[str, Any] = {k: delegation.get(k) for k in DELEGATION_COLUMNS}
        async with self._db.awrite() as conn:
            if conn.execute(
                "SELECT 1 FROM agents WHERE email = ?", (str(row["delegator"]).lower(),)
            ).fetchone():
                raise Conflict("delegator")  # a delegator is a person (D11)
            try:
                conn.execute(
                    f"INSERT INTO delegations ({', '.join(DELEGATION_COLUMNS)}) VALUES ({', '.join(':' + c for c in DELEGATION_COLUMNS)})",  # noqa: S608 - fixed column list
                    {**row, "scopes": to_json(row["scopes"])},
                )
            except sqlite3.IntegrityError:
                raise Conflict("id") from None
            _record(
                conn,
                delegation_event("delegation.created", row, str(row["delegator"]), int(row["created_at"])),
            )
        return cast(Delegation, row)

    async def get(self, delegation_id: str) -> Delegation | None:
        row = self._db.one("SELECT * FROM delegations WHERE id = ?", (delegation_id,))
        return delegation_row(row) if row else None

    async def list(
        self, *, party: str | None, page: PageRequest, since: int | None = None
    ) -> tuple[list[Delegation], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        if party is not None:
            where.append("(delegator = :party OR delegate = :party)")
            params["party"] = party
        if since is not None:
            where.append("created_at >= :since")
            params["since"] = since
        after_sql(page, "id", where, params)
        rows = self._db.all(
            f"SELECT * FROM delegations WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = page_rows(rows, page.limit)
        return [delegation_row(r) for r in found], more

    async def revoke(self, delegation_id: str, by: str, now: int) -> Delegation | None:
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE delegations SET status = 'revoked', revoked_at = ?, revoked_by = ?
                   WHERE id = ? AND status = 'active' RETURNING *""",
                (now, by, delegation_id),
            ).fetchone()
            if row:
                _record(conn, delegation_event("delegation.revoked", dict(row), by, now))
        return delegation_row(dict(row)) if row else None

    async def live_for(self, delegate: str, lapse: Lapse) -> builtins.list[Delegation]:
        live, params = not_lapsed_sql(lapse, DELEGATION_COLUMNS)
        rows = self._db.all(
            f"""SELECT * FROM delegations WHERE delegate = :delegate AND status = 'active' AND {live}
                ORDER BY created_at, id""",  # noqa: S608 - generated from the Lapse
            {**params, "delegate": delegate},
        )
        return [delegation_row(r) for r in rows]
