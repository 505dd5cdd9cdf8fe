"""Migration "grant reviews due" (issue 27) on a database released before it: the pending grants
pinned to a policy are due at once, so the first sweep finds them and sets their real time; a
grant no longer pending is never looked at again. SQLite (migration 17) and PostgreSQL (15)."""

from __future__ import annotations

from typing import Any

import pytest

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.store.records import GRANT_COLUMNS
from grantd.store.rows import to_json

from .factories import NOW, grant
from .migrated import postgres_migrated_to, sqlite_migrated_to
from .postgres import schemas as postgres_server

pytestmark = pytest.mark.anyio

# id, status, pinned review (None: the default policy)
GRANTS = [
    ("g_pending", "pending", {"policy_ids": ["p"]}),
    ("g_default", "pending", None),
    ("g_approved", "approved", {"policy_ids": ["p"]}),
]


def _rows() -> list[tuple[dict[str, Any], str | None]]:
    found = []
    for gid, status, review in GRANTS:
        row: dict[str, Any] = {k: grant(gid, status=status).get(k) for k in GRANT_COLUMNS}
        text = None if review is None else to_json(review)
        found.append(({**row, "request": to_json(row["request"]), "version": 1}, text))
    return found


async def _check_upgraded(store: Any) -> None:
    due = await store.grants.due_reviews(NOW, 10)
    assert [r["grant_id"] for r in due] == ["g_pending"]
    assert due[0]["review"] == {"policy_ids": ["p"]} and due[0]["escalation_level"] == 0
    await store.grants.set_review_due("g_pending", NOW + 60_000)
    assert await store.grants.due_reviews(NOW, 10) == []


async def test_sqlite_migration_17_makes_pinned_pending_grants_due(tmp_path):
    store = SQLiteStore(tmp_path / "grantd.db")
    try:
        with store._db.write():
            conn = store._db.conn
            sqlite_migrated_to(store, 16)
            for row, review in _rows():
                conn.execute(
                    f"INSERT INTO grants ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})",  # noqa: S608 - test data
                    row,
                )
                if review is not None:
                    conn.execute(
                        "INSERT INTO grant_reviews (grant_id, review_json) VALUES (?, ?)", (row["id"], review)
                    )
        assert store.schema_version() == 16
        assert await store.migrate() == [17]
        await _check_upgraded(store)
    finally:
        store.close()


async def test_postgres_migration_15_makes_pinned_pending_grants_due():
    from grantd.plugins.storage_postgres import PostgresStore

    server = postgres_server()
    store = PostgresStore(server.create_schema())
    try:
        await postgres_migrated_to(store, 14)
        async with store._db.tx() as cur:
            for row, review in _rows():
                await cur.execute(
                    f"INSERT INTO grants ({', '.join(row)}) VALUES ({', '.join(f'%({k})s' for k in row)})",  # noqa: S608 - test data
                    row,
                )
                if review is not None:
                    await cur.execute(
                        "INSERT INTO grant_reviews (grant_id, review_json) VALUES (%s, %s)",
                        (row["id"], review),
                    )
        assert await store.migrate() == [15]
        await _check_upgraded(store)
    finally:
        store.close()
