"""The notification outbox and channel settings on PostgreSQL (``grantd.store.notify``)."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grantd.store.notify import (
    LINK_COLUMNS,
    LINKS_KEPT_MS,
    OUTBOX_COLUMNS,
    SUBSCRIPTION_COLUMNS,
    OutboxRow,
    PushSubscription,
    ReviewLink,
    outbox_row,
)
from grantd.store.rows import to_json

from .connection import _Batch, _nul_finds_nothing, _on_store_loop, _Part
from .sql import _insert

if TYPE_CHECKING:
    import psycopg

OUTBOX_INSERT = _insert("notify_outbox", OUTBOX_COLUMNS)


def _values(row: OutboxRow) -> dict[str, Any]:
    return {**row, "payload": to_json(row["payload"])}


def add_notices_batch(batch: _Batch, rows: Sequence[OutboxRow]) -> None:
    """Outbox rows in a batch, before its COMMIT (a grant's create or decision)."""
    for row in rows:
        batch.add(OUTBOX_INSERT, _values(row))


async def add_notices(cur: psycopg.AsyncCursor[Any], rows: Sequence[OutboxRow]) -> None:
    """Outbox rows in the caller's transaction."""
    for row in rows:
        await cur.execute(OUTBOX_INSERT, _values(row))


class PostgresNotify(_Part):
    @_on_store_loop
    async def add(self, rows: Sequence[OutboxRow]) -> None:
        if rows:
            async with self._db.tx() as cur:
                await add_notices(cur, rows)

    @_on_store_loop
    async def claim(
        self, worker: str, now: int, lease_ms: int, limit: int, busy: Sequence[str] = ()
    ) -> builtins.list[OutboxRow]:
        # FOR UPDATE SKIP LOCKED: concurrent claimers on any node take disjoint rows without waiting;
        # the outer WHERE re-checks the lease on the row as committed.
        rows = await self._db.all(
            """UPDATE notify_outbox SET claimed_by = %(worker)s, claimed_until = %(until)s WHERE id IN (
                   SELECT id FROM notify_outbox WHERE status = 'pending' AND next_at <= %(now)s
                   AND (claimed_until IS NULL OR claimed_until <= %(now)s) AND channel <> ALL(%(busy)s)
                   ORDER BY next_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
               AND status = 'pending' AND (claimed_until IS NULL OR claimed_until <= %(now)s) RETURNING *""",
            {"worker": worker, "until": now + lease_ms, "now": now, "limit": limit, "busy": list(busy)},
        )
        found = [outbox_row(dict(r)) for r in rows]
        found.sort(key=lambda r: (r["next_at"], r["id"]))
        return found

    @_on_store_loop
    async def finish(
        self,
        row_id: str,
        worker: str,
        *,
        status: str,
        attempts: int,
        next_at: int,
        error: str | None,
        at: int,
    ) -> bool:
        async with self._db.statement() as cur:
            await cur.execute(
                """UPDATE notify_outbox SET status = %s, attempts = %s, next_at = %s, error = %s, sent_at = %s,
                   claimed_by = NULL, claimed_until = NULL WHERE id = %s AND claimed_by = %s""",
                (status, attempts, next_at, error, at, row_id, worker),
            )
            return int(cur.rowcount) == 1

    @_on_store_loop
    async def for_grant(self, grant_id: str) -> builtins.list[OutboxRow]:
        rows = await self._db.all(
            "SELECT * FROM notify_outbox WHERE grant_id = %s ORDER BY created_at, id", (grant_id,)
        )
        return [outbox_row(dict(r)) for r in rows]

    @_on_store_loop
    async def recent(self, recipient: str, channel: str, since: int) -> int:
        row = await self._db.one(
            """SELECT count(*) AS n FROM notify_outbox WHERE recipient = %s AND channel = %s AND created_at >= %s
               AND kind IN ('review_requested', 'escalated') AND status NOT IN ('held', 'dropped')""",
            (recipient, channel, since),
        )
        return int(row["n"]) if row else 0

    @_on_store_loop
    async def release_held(self, before: int, limit: int) -> builtins.list[OutboxRow]:
        rows = await self._db.all(
            """UPDATE notify_outbox SET status = 'dropped' WHERE status = 'held' AND (recipient, channel) IN (
                   SELECT recipient, channel FROM notify_outbox WHERE status = 'held' AND created_at < %s
                   ORDER BY created_at, id LIMIT %s) RETURNING *""",
            (before, limit),
        )
        found = [outbox_row(dict(r)) for r in rows]
        found.sort(key=lambda r: (r["created_at"], r["id"]))
        return found

    @_on_store_loop
    async def add_link(self, link: ReviewLink, now: int) -> None:
        async with self._db.tx() as cur:
            await cur.execute("DELETE FROM review_links WHERE expires_at < %s", (now - LINKS_KEPT_MS,))
            await cur.execute(_insert("review_links", LINK_COLUMNS), dict(link))

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def link(self, token_hash: str) -> ReviewLink | None:
        row = await self._db.one("SELECT * FROM review_links WHERE token_hash = %s", (token_hash,))
        return dict(row) if row else None  # type: ignore[return-value]

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def use_link(self, token_hash: str, now: int) -> ReviewLink | None:
        row = await self._db.one(
            """UPDATE review_links SET used_at = %s WHERE token_hash = %s AND used_at IS NULL
               AND expires_at > %s RETURNING *""",
            (now, token_hash, now),
        )
        return dict(row) if row else None  # type: ignore[return-value]

    @_on_store_loop
    async def add_subscription(self, subscription: PushSubscription) -> PushSubscription:
        row = await self._db.one(
            _insert("push_subscriptions", SUBSCRIPTION_COLUMNS)
            + """ ON CONFLICT (person_id, endpoint) DO UPDATE SET p256dh = excluded.p256dh,
                 auth = excluded.auth, expiration_time = excluded.expiration_time RETURNING *""",
            dict(subscription),
        )
        assert row is not None
        return dict(row)  # type: ignore[return-value]

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def subscriptions(self, person_id: str) -> builtins.list[PushSubscription]:
        rows = await self._db.all(
            "SELECT * FROM push_subscriptions WHERE person_id = %s ORDER BY created_at, id", (person_id,)
        )
        return [dict(r) for r in rows]  # type: ignore[misc]

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def delete_subscription(self, person_id: str, subscription_id: str) -> bool:
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM push_subscriptions WHERE person_id = %s AND id = %s",
                (person_id, subscription_id),
            )
            return int(cur.rowcount) == 1

    @_on_store_loop
    async def prefs(self, person_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        ids = builtins.list(dict.fromkeys(person_ids))
        if not ids:
            return {}
        rows = await self._db.all("SELECT * FROM notify_prefs WHERE person_id = ANY(%s)", (ids,))
        return {r["person_id"]: json.loads(r["prefs_json"]) for r in rows}

    @_on_store_loop
    async def set_prefs(self, person_id: str, prefs: dict[str, Any], now: int) -> None:
        await self._db.one(
            """INSERT INTO notify_prefs (person_id, prefs_json, updated_at) VALUES (%s, %s, %s)
               ON CONFLICT (person_id) DO UPDATE SET prefs_json = excluded.prefs_json,
               updated_at = excluded.updated_at""",
            (person_id, to_json(prefs), now),
            rows=False,
        )
