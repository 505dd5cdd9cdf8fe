"""The numbered PostgreSQL migrations: the ``.sql`` files in ``schema/`` (``grantd.store.migrations``).

Each is a list of statements that ``PostgresStore.migrate`` runs in one transaction, under a
session advisory lock. Text columns are ``TEXT COLLATE "C"``: text compares byte-wise, as in
SQLite, so ids page and sort the same on every backend and locale.
"""

from __future__ import annotations

from grantd.store.migrations import load

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (m.version, m.name, list(m.statements)) for m in load(__package__ or __name__, "schema")
]
