"""The numbered SQLite migrations: the ``.sql`` files in ``schema/`` (``grantd.store.migrations``).

Each runs in the write transaction of ``SQLiteStore.migrate_sync`` through sqlite-utils (the
only place that imports it). SQLite cannot make a column nullable, so migration 6 rebuilds
``sessions`` the documented 12-step way, all in SQL. The one value plain SQL cannot spell like
the Python it replaced is the current time in milliseconds (migration 9 stamps the delegations it
ends): the runner binds it as ``:now``, so no migration runs Python of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from grantd.store.migrations import load

if TYPE_CHECKING:
    # sqlite-utils runs the migrations only; a server process on a current schema never imports it
    # (4.5 MiB per process, issue 14).
    import sqlite_utils


def _now_ms() -> int:
    return int(time.time() * 1000)


class _SqlFile:
    """One migration file's statements, run in order on the migrating connection."""

    def __init__(self, statements: tuple[str, ...]):
        self.statements = statements

    def __call__(self, db: sqlite_utils.Database) -> None:
        for statement in self.statements:
            if ":now" in statement:
                db.execute(statement, {"now": _now_ms()})
            else:
                db.execute(statement)


MIGRATIONS: list[tuple[int, str, Callable[[sqlite_utils.Database], None]]] = [
    (m.version, m.name, _SqlFile(m.statements)) for m in load(__package__ or __name__, "schema")
]
