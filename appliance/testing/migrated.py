"""A store's schema as an older grantd left it, for the migration tests: the first migrations
only, recorded in ``schema_migrations`` as grantd records them, so that ``migrate()`` then runs
the rest on whatever rows a test put in between."""

from __future__ import annotations

from typing import Any


def sqlite_migrated_to(store: Any, version: int) -> None:
    """Migrations 1..``version`` of a new SQLite file; call inside ``store._db.write()``."""
    from grantd.plugins import storage_sqlite

    conn = store._db.conn
    conn.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at INTEGER)"
    )
    for number, name, migration in storage_sqlite.MIGRATIONS[:version]:
        migration(store.db)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 0)", (number, name))


async def postgres_migrated_to(store: Any, version: int) -> None:
    """Migrations 1..``version`` of a new PostgreSQL schema (the later ones held back meanwhile)."""
    from grantd.plugins import storage_postgres

    saved = list(storage_postgres.MIGRATIONS)
    storage_postgres.MIGRATIONS[:] = saved[:version]
    try:
        assert await store.migrate() == list(range(1, version + 1))
    finally:
        storage_postgres.MIGRATIONS[:] = saved
