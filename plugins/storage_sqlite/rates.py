"""Abuse-limit counters on SQLite (``grantd.store.Rates``): in the shared-memory table beside the
file (``counter_table``), and in the database's ``rate_counters`` when that table is full."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from grantd.store import RATE_SWEEP_EVERY_MS, StoreError

from .connection import _Database
from .counter_table import CounterTable

log = logging.getLogger("grantd")  # configured by grantd.logs (it does not propagate to the root)


class SQLiteRates:
    def __init__(self, db: _Database):
        self._db = db
        self._swept_at: int | None = None  # `now` of this process's last drop of ended windows
        self._table: CounterTable | None = None  # opened at the first hit (commands never count)
        self._no_table = db.path == ":memory:"  # an in-memory database: one process, its own counters

    def _counters(self) -> CounterTable | None:
        """The shared table, or None: then the database counts (exact as well, only dearer). A
        table that cannot be opened (its file is another user's, loose, or not a file) is said
        once in the log, and never used: a file someone else may write could move counters."""
        if self._table is None and not self._no_table:
            path = Path(self._db.path + "-limits")
            try:
                self._table = CounterTable(path, self._database_until)
            except (OSError, ValueError, StoreError) as exc:
                self._no_table = True
                log.warning("abuse-limit counters: cannot use %s (%s); counting in the database", path, exc)
        return self._table

    def close(self) -> None:
        if self._table is not None:
            self._table.close()
            self._table = None

    async def hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        table = self._counters()
        if table is None:
            return self._database_hit(key, window_start, window_ms, now)
        return await table.hit(key, window_start, window_ms, now, self._database_hit, self._database_count)

    async def count(self, key: str, window_start: int) -> int:
        table = self._counters()
        if table is None:
            return self._database_count(key, window_start)
        return await table.count(key, window_start, self._database_count)

    # -- the database's counters (a full table; an in-memory database) -----------------------------
    def _database_hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        # The upsert and its RETURNING decide the count inside the write lock. Ended windows go in
        # the same transaction, at most once a second per process. Synchronous (SQLite's busy
        # handler may block this thread): it runs under the counter table's lock, which no await
        # may split, and only when that table is full for this key.
        sweep = self._swept_at is None or not 0 <= now - self._swept_at < RATE_SWEEP_EVERY_MS
        with self._db.write() as conn:
            if sweep:
                conn.execute("DELETE FROM rate_counters WHERE ends_at <= ?", (now,))
                self._swept_at = now
            row = conn.execute(
                """INSERT INTO rate_counters (key, window_start, count, ends_at) VALUES (?, ?, 1, ?)
                   ON CONFLICT (key, window_start) DO UPDATE SET count = count + 1 RETURNING count""",
                (key, window_start, window_start + window_ms),
            ).fetchone()
        return int(row[0])

    def _database_count(self, key: str, window_start: int) -> int:
        row = self._db.one(
            "SELECT count FROM rate_counters WHERE key = ? AND window_start = ?", (key, window_start)
        )
        return int(row["count"]) if row else 0

    def _database_until(self) -> int:
        """When the database's live counters end (0: none), so that a new table continues them."""
        try:
            row = self._db.one("SELECT max(ends_at) AS until FROM rate_counters")
        except sqlite3.OperationalError:  # not migrated yet: no counters
            return 0
        return int(row["until"] or 0) if row else 0
