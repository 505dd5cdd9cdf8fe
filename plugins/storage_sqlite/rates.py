"""Abuse-limit counters on SQLite (``grantd.store.Rates``)."""

from __future__ import annotations

from grantd.store import RATE_SWEEP_EVERY_MS

from .connection import _Database


class SQLiteRates:
    def __init__(self, db: _Database):
        self._db = db
        self._swept_at: int | None = None  # `now` of this process's last drop of ended windows

    async def hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        # The upsert and its RETURNING decide the count inside the write lock: concurrent hits in
        # any process each get a different count. Ended windows go in the same transaction (an
        # index range on ends_at), at most once a second per process (issue 27: a statement less per
        # counted request; a window that ended is dropped at most a second later, counts are unchanged).
        sweep = self._swept_at is None or not 0 <= now - self._swept_at < RATE_SWEEP_EVERY_MS
        async with self._db.awrite() as conn:
            if sweep:
                conn.execute("DELETE FROM rate_counters WHERE ends_at <= ?", (now,))
                self._swept_at = now
            row = conn.execute(
                """INSERT INTO rate_counters (key, window_start, count, ends_at) VALUES (?, ?, 1, ?)
                   ON CONFLICT (key, window_start) DO UPDATE SET count = count + 1 RETURNING count""",
                (key, window_start, window_start + window_ms),
            ).fetchone()
        return int(row[0])

    async def count(self, key: str, window_start: int) -> int:
        row = self._db.one(
            "SELECT count FROM rate_counters WHERE key = ? AND window_start = ?", (key, window_start)
        )
        return int(row["count"]) if row else 0
