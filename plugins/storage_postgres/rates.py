"""Abuse-limit counters on PostgreSQL (``grantd.store.Rates``)."""

from __future__ import annotations

from grantd.store import RATE_SWEEP_EVERY_MS

from .connection import _on_store_loop, _Part
from .constants import RATE_SWEEP_LIMIT


class PostgresRates(_Part):
    """Counters in one UNLOGGED table (schema 0009: no WAL flush per counted request, see there why
    that keeps D12's limits). A hit is one statement in autocommit, one round trip: the upsert and
    its RETURNING decide the count under the row's lock, so concurrent hits on every node each get
    a different count. Ended windows are dropped by a statement of their own at most once a second
    per process (issue 27: a hit was BEGIN, DELETE, upsert, COMMIT)."""

    _swept_at: int | None = None  # `now` of this process's last drop of ended windows

    @_on_store_loop
    async def hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        if self._swept_at is None or not 0 <= now - self._swept_at < RATE_SWEEP_EVERY_MS:
            self._swept_at = now
            # SKIP LOCKED: rows another hit is deleting right now are its job, so concurrent hits
            # on every node never queue behind each other here.
            await self._db.one(
                """DELETE FROM rate_counters WHERE (key, window_start) IN (
                       SELECT key, window_start FROM rate_counters WHERE ends_at <= %s LIMIT %s FOR UPDATE SKIP LOCKED)""",
                (now, RATE_SWEEP_LIMIT),
                rows=False,
            )
        row = await self._db.one(
            """INSERT INTO rate_counters (key, window_start, count, ends_at) VALUES (%s, %s, 1, %s)
               ON CONFLICT (key, window_start) DO UPDATE SET count = rate_counters.count + 1 RETURNING count""",
            (key, window_start, window_start + window_ms),
        )
        assert row is not None
        return int(row["count"])

    @_on_store_loop
    async def count(self, key: str, window_start: int) -> int:
        row = await self._db.one(
            "SELECT count FROM rate_counters WHERE key = %s AND window_start = %s", (key, window_start)
        )
        return int(row["count"]) if row else 0
