"""Abuse-limit counters on PostgreSQL (``grantd.store.Rates``)."""

from __future__ import annotations

from .connection import _on_store_loop, _Part
from .constants import RATE_SWEEP_LIMIT


class PostgresRates(_Part):
    @_on_store_loop
    async def hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        async with self._db.tx() as cur:
            # Ended windows go as we count; SKIP LOCKED: rows another hit is deleting right now are
            # its job, so concurrent hits on every node never queue behind each other here.
            await cur.execute(
                """DELETE FROM rate_counters WHERE (key, window_start) IN (
                       SELECT key, window_start FROM rate_counters WHERE ends_at <= %s LIMIT %s FOR UPDATE SKIP LOCKED)""",
                (now, RATE_SWEEP_LIMIT),
            )
            await cur.execute(
                """INSERT INTO rate_counters (key, window_start, count, ends_at) VALUES (%s, %s, 1, %s)
                   ON CONFLICT (key, window_start) DO UPDATE SET count = rate_counters.count + 1 RETURNING count""",
                (key, window_start, window_start + window_ms),
            )
            row = await cur.fetchone()
        assert row is not None
        return int(row["count"])

    @_on_store_loop
    async def count(self, key: str, window_start: int) -> int:
        row = await self._db.one(
            "SELECT count FROM rate_counters WHERE key = %s AND window_start = %s", (key, window_start)
        )
        return int(row["count"]) if row else 0
