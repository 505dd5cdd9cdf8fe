"""The notification outbox and channel settings on SQLite (``grantd.store.notify``)."""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Sequence
from typing import Any

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

from .connection import _Database

OUTBOX_INSERT = (
    f"INSERT INTO notify_outbox ({', '.join(OUTBOX_COLUMNS)}) "  # noqa: S608 - fixed column list
    f"VALUES ({', '.join(':' + c for c in OUTBOX_COLUMNS)})"
)
PENDING_KINDS = ("review_requested", "escalated")


def add_notices(conn: sqlite3.Connection, rows: Sequence[OutboxRow]) -> None:
    """Outbox rows in the caller's transaction (a grant's create, decision or escalation)."""
    for row in rows:
        conn.execute(OUTBOX_INSERT, {**row, "payload": to_json(row["payload"])})


class SQLiteNotify:
    def __init__(self, db: _Database):
        self._db = db

    async def add(self, rows: Sequence[OutboxRow]) -> None:
        if rows:
            async with self._db.awrite() as conn:
                add_notices(conn, rows)

    async def claim(
        self, worker: str, now: int, lease_ms: int, limit: int, busy: Sequence[str] = ()
    ) -> builtins.list[OutboxRow]:
        # BEGIN IMMEDIATE serialises writers across processes; the UPDATE re-checks the lease in its
        # WHERE clause, so two claimers never get the same row.
        skip = f" AND channel NOT IN ({', '.join('?' * len(busy))})" if busy else ""
        due = self._db.one(
            f"""SELECT 1 AS x FROM notify_outbox WHERE status = 'pending' AND next_at <= ?
               AND (claimed_until IS NULL OR claimed_until <= ?){skip} LIMIT 1""",  # noqa: S608 - placeholders
            (now, now, *busy),
        )
        if due is None:
            return []
        async with self._db.awrite() as conn:
            rows = conn.execute(
                f"""UPDATE notify_outbox SET claimed_by = ?, claimed_until = ? WHERE id IN (
                       SELECT id FROM notify_outbox WHERE status = 'pending' AND next_at <= ?
                       AND (claimed_until IS NULL OR claimed_until <= ?){skip} ORDER BY next_at, id LIMIT ?)
                   AND status = 'pending' AND (claimed_until IS NULL OR claimed_until <= ?) RETURNING *""",  # noqa: S608 - placeholders
                (worker, now + lease_ms, now, now, *busy, limit, now),
            ).fetchall()
        found = [outbox_row(dict(r)) for r in rows]
        found.sort(key=lambda r: (r["next_at"], r["id"]))
        return found

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
        async with self._db.awrite() as conn:
            cur = conn.execute(
                """UPDATE notify_outbox SET status = ?, attempts = ?, next_at = ?, error = ?, sent_at = ?,
                   claimed_by = NULL, claimed_until = NULL WHERE id = ? AND claimed_by = ?""",
                (status, attempts, next_at, error, at, row_id, worker),
            )
            return cur.rowcount == 1

    async def for_grant(self, grant_id: str) -> builtins.list[OutboxRow]:
        rows = self._db.all(
            "SELECT * FROM notify_outbox WHERE grant_id = ? ORDER BY created_at, id", (grant_id,)
        )
        return [outbox_row(r) for r in rows]

    async def recent(self, recipient: str, channel: str, since: int) -> int:
        row = self._db.one(
            """SELECT count(*) AS n FROM notify_outbox WHERE recipient = ? AND channel = ? AND created_at >= ?
               AND kind IN ('review_requested', 'escalated') AND status NOT IN ('held', 'dropped')""",
            (recipient, channel, since),
        )
        return int(row["n"]) if row else 0

    async def release_held(self, before: int, limit: int) -> builtins.list[OutboxRow]:
        async with self._db.awrite() as conn:
            rows = conn.execute(
                """UPDATE notify_outbox SET status = 'dropped' WHERE status = 'held' AND (recipient, channel) IN (
                       SELECT recipient, channel FROM notify_outbox WHERE status = 'held' AND created_at < ?
                       ORDER BY created_at, id LIMIT ?) RETURNING *""",
                (before, limit),
            ).fetchall()
        found = [outbox_row(dict(r)) for r in rows]
        found.sort(key=lambda r: (r["created_at"], r["id"]))
        return found

    async def add_link(self, link: ReviewLink, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM review_links WHERE expires_at < ?", (now - LINKS_KEPT_MS,))
            conn.execute(
                f"INSERT INTO review_links ({', '.join(LINK_COLUMNS)}) VALUES ({', '.join(':' + c for c in LINK_COLUMNS)})",  # noqa: S608 - fixed column list
                dict(link),
            )

    async def link(self, token_hash: str) -> ReviewLink | None:
        row = self._db.one("SELECT * FROM review_links WHERE token_hash = ?", (token_hash,))
        return row  # type: ignore[return-value]

    async def use_link(self, token_hash: str, now: int) -> ReviewLink | None:
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE review_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL
                   AND expires_at > ? RETURNING *""",
                (now, token_hash, now),
            ).fetchone()
        return dict(row) if row else None  # type: ignore[return-value]

    async def add_subscription(self, subscription: PushSubscription) -> PushSubscription:
        async with self._db.awrite() as conn:
            row = conn.execute(
                f"""INSERT INTO push_subscriptions ({", ".join(SUBSCRIPTION_COLUMNS)})
                    VALUES ({", ".join(":" + c for c in SUBSCRIPTION_COLUMNS)})
                    ON CONFLICT (person_id, endpoint) DO UPDATE SET p256dh = excluded.p256dh,
                    auth = excluded.auth, expiration_time = excluded.expiration_time RETURNING *""",  # noqa: S608 - fixed column list
                dict(subscription),
            ).fetchone()
        return dict(row)  # type: ignore[return-value]

    async def subscriptions(self, person_id: str) -> builtins.list[PushSubscription]:
        return self._db.all(  # type: ignore[return-value]
            "SELECT * FROM push_subscriptions WHERE person_id = ? ORDER BY created_at, id", (person_id,)
        )

    async def delete_subscription(self, person_id: str, subscription_id: str) -> bool:
        async with self._db.awrite() as conn:
            cur = conn.execute(
                "DELETE FROM push_subscriptions WHERE person_id = ? AND id = ?", (person_id, subscription_id)
            )
            return cur.rowcount == 1

    async def prefs(self, person_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        import json

        ids = list(dict.fromkeys(person_ids))
        if not ids:
            return {}
        marks = ", ".join("?" for _ in ids)
        rows = self._db.all(f"SELECT * FROM notify_prefs WHERE person_id IN ({marks})", ids)  # noqa: S608 - placeholders only
        return {r["person_id"]: json.loads(r["prefs_json"]) for r in rows}

    async def set_prefs(self, person_id: str, prefs: dict[str, Any], now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                """INSERT INTO notify_prefs (person_id, prefs_json, updated_at) VALUES (?, ?, ?)
                   ON CONFLICT (person_id) DO UPDATE SET prefs_json = excluded.prefs_json,
                   updated_at = excluded.updated_at""",
                (person_id, to_json(prefs), now),
            )
