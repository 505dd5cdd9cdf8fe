"""The decision log on PostgreSQL (``grantd.store.tlog``): leaves, nodes, state and lease, checkpoints,
log keys, audit events, hosts and receipts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from grantd.store import Conflict
from grantd.store.rows import from_json
from grantd.store.tlog import AuditEvent, Host, LeafRow, NodeRow, TlogHead, TlogKey

from .connection import _lock, _on_store_loop, _Part, _unique_violation
from .constants import AUDIT_LOCK, TLOG_KEYS_LOCK

if TYPE_CHECKING:
    import psycopg


async def _record(cur: psycopg.AsyncCursor[Any], event: AuditEvent) -> None:
    """Last in its transaction: the lock is held to COMMIT, so ``seq`` follows commit order."""
    await _lock(cur, AUDIT_LOCK)
    await cur.execute(
        "INSERT INTO audit_events (kind, grant_id, actor, data, created_at) VALUES (%s, %s, %s, %s, %s)",
        (
            event["kind"],
            event["grant_id"],
            json.dumps(event["actor"]),
            json.dumps(event["data"]),
            event["created_at"],
        ),
    )


def _key_row(row: dict[str, Any]) -> TlogKey:
    return TlogKey(
        kid=row["kid"],
        name=row["name"],
        seed=row["seed"],
        public=row["public"],
        created_at=int(row["created_at"]),
        retired_at=None if row["retired_at"] is None else int(row["retired_at"]),
    )


class PostgresTlog(_Part):
    @_on_store_loop
    async def head(self) -> TlogHead:
        row = await self._db.one(
            "SELECT size, grant_seq, event_seq, holder, lease_until FROM tlog_state WHERE id = 1"
        )
        assert row is not None
        return TlogHead(
            size=int(row["size"]),
            grant_seq=int(row["grant_seq"]),
            event_seq=int(row["event_seq"]),
            holder=row["holder"],
            lease_until=int(row["lease_until"]),
        )

    @_on_store_loop
    async def lease(self, holder: str, now: int, ttl_ms: int) -> bool:
        async with self._db.statement() as cur:
            await cur.execute(
                "UPDATE tlog_state SET holder = %s, lease_until = %s "
                "WHERE id = 1 AND (holder IS NULL OR holder = %s OR lease_until <= %s)",
                (holder, now + ttl_ms, holder, now),
            )
            return int(cur.rowcount) == 1

    @_on_store_loop
    async def release(self, holder: str) -> None:
        await self._db.one(
            "UPDATE tlog_state SET holder = NULL, lease_until = 0 WHERE id = 1 AND holder = %s",
            (holder,),
            rows=False,
        )

    @_on_store_loop
    async def nodes(self, coords: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        if not coords:
            return {}
        leaves = [c[1] for c in coords if c[0] == 0]  # level 0: the leaf hashes (stored once, issue 23)
        above = [c for c in coords if c[0] != 0]
        rows = await self._db.all(  # one round trip for both tables
            "SELECT 0 AS level, idx, leaf_hash AS hash FROM tlog_leaves WHERE idx = ANY(%s::bigint[]) "
            "UNION ALL SELECT n.level, n.idx, n.hash FROM tlog_nodes n "
            "JOIN unnest(%s::integer[], %s::bigint[]) AS w(level, idx) ON n.level = w.level AND n.idx = w.idx",
            (leaves, [c[0] for c in above], [c[1] for c in above]),
        )
        return {(int(r["level"]), int(r["idx"])): bytes(r["hash"]) for r in rows}

    @_on_store_loop
    async def append(
        self,
        *,
        holder: str,
        now: int,
        expect_size: int,
        leaves: Sequence[LeafRow],
        nodes: Sequence[NodeRow],
        grant_seq: int,
        event_seq: int,
    ) -> bool:
        async with self._db.tx() as cur:
            await cur.execute(
                "UPDATE tlog_state SET size = %s, grant_seq = %s, event_seq = %s "
                "WHERE id = 1 AND size = %s AND holder = %s AND lease_until > %s",
                (expect_size + len(leaves), grant_seq, event_seq, expect_size, holder, now),
            )
            if cur.rowcount != 1:
                return False
            if leaves:
                await cur.executemany(
                    "INSERT INTO tlog_leaves (idx, leaf, leaf_hash, grant_id, grant_created) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    list(leaves),
                )
            above = [n for n in nodes if n[0]]  # level 0 is the leaves' hashes, just written (issue 23)
            if above:
                await cur.executemany("INSERT INTO tlog_nodes (level, idx, hash) VALUES (%s, %s, %s)", above)
        return True

    @_on_store_loop
    async def entries(self, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        rows = await self._db.all(
            "SELECT idx, leaf, leaf_hash FROM tlog_leaves WHERE idx >= %s AND idx < %s ORDER BY idx",
            (start, end),
        )
        return [(int(r["idx"]), bytes(r["leaf"]), bytes(r["leaf_hash"])) for r in rows]

    @_on_store_loop
    async def grant_indexes(self, grant_id: str, below: int, created_at: int | None) -> list[int]:
        if "\x00" in grant_id:
            return []
        # two index searches (migration 13): by the grant's created_at, and among the leaves without one
        rows = await self._db.all(
            "SELECT idx FROM tlog_leaves WHERE grant_created = %s AND grant_id = %s AND idx < %s "
            "UNION ALL SELECT idx FROM tlog_leaves WHERE grant_created IS NULL AND grant_id = %s AND idx < %s "
            "ORDER BY idx",
            (created_at, grant_id, below, grant_id, below),
        )
        return [int(r["idx"]) for r in rows]

    @_on_store_loop
    async def add_checkpoint(self, size: int, note: str, now: int) -> bool:
        async with self._db.statement() as cur:
            await cur.execute(
                "INSERT INTO tlog_checkpoints (size, note, created_at) VALUES (%s, %s, %s) ON CONFLICT (size) DO NOTHING",
                (size, note, now),
            )
            return int(cur.rowcount) == 1

    @_on_store_loop
    async def latest_checkpoint(self) -> tuple[int, str] | None:
        row = await self._db.one("SELECT size, note FROM tlog_checkpoints ORDER BY size DESC LIMIT 1")
        return (int(row["size"]), str(row["note"])) if row else None

    @_on_store_loop
    async def checkpoints(self) -> list[tuple[int, str]]:
        return [
            (int(r["size"]), str(r["note"]))
            for r in await self._db.all("SELECT size, note FROM tlog_checkpoints ORDER BY size")
        ]

    @_on_store_loop
    async def keys(self) -> list[TlogKey]:
        rows = await self._db.all(
            "SELECT kid, name, seed, public, created_at, retired_at FROM tlog_keys ORDER BY created_at DESC, seq DESC"
        )
        return [_key_row(r) for r in rows]

    @staticmethod
    async def _insert_key(cur: psycopg.AsyncCursor[Any], key: TlogKey) -> None:
        await cur.execute(
            "INSERT INTO tlog_keys (kid, name, seed, public, created_at, retired_at) VALUES (%s, %s, %s, %s, %s, NULL)",
            (key["kid"], key["name"], key["seed"], key["public"], key["created_at"]),
        )

    @_on_store_loop
    async def add_first_key(self, key: TlogKey) -> bool:
        async with self._db.tx() as cur:
            await _lock(cur, TLOG_KEYS_LOCK)
            await cur.execute("SELECT 1 AS x FROM tlog_keys WHERE retired_at IS NULL LIMIT 1")
            if await cur.fetchone():
                return False
            await self._insert_key(cur, key)
            return True

    @_on_store_loop
    async def rotate_key(self, key: TlogKey, now: int) -> list[str]:
        async with self._db.tx() as cur:
            await _lock(cur, TLOG_KEYS_LOCK)
            await cur.execute(
                "UPDATE tlog_keys SET retired_at = %s, seed = '' WHERE retired_at IS NULL RETURNING kid",
                (now,),
            )
            retired = await cur.fetchall()
            await self._insert_key(cur, key)
            await _record(
                cur,
                AuditEvent(
                    seq=0,
                    kind="key.rotated",
                    grant_id=None,
                    actor={"kind": "system"},
                    data={"purpose": "log", "kid": key["kid"], "public_key": key["public"]},
                    created_at=now,
                ),
            )
        return [str(r["kid"]) for r in retired]

    @_on_store_loop
    async def events_after(self, seq: int, limit: int) -> list[AuditEvent]:
        rows = await self._db.all(
            "SELECT * FROM audit_events WHERE seq > %s ORDER BY seq LIMIT %s", (seq, limit)
        )
        return [
            AuditEvent(
                seq=int(r["seq"]),
                kind=r["kind"],
                grant_id=r["grant_id"],
                actor=from_json(r["actor"]),
                data=from_json(r["data"]),
                created_at=int(r["created_at"]),
            )
            for r in rows
        ]

    @_on_store_loop
    async def policy_loaded(self, event: AuditEvent) -> bool:
        async with self._db.tx() as cur:
            await _lock(cur, AUDIT_LOCK)  # held to COMMIT: processes starting together take turns
            await cur.execute(
                "SELECT data FROM audit_events WHERE kind = 'policy.loaded' ORDER BY seq DESC LIMIT 1"
            )
            last = await cur.fetchone()
            if (
                last is not None
                and json.loads(last["data"]).get("policy_hash") == event["data"]["policy_hash"]
            ):
                return False
            await _record(cur, event)
            return True


class PostgresHosts(_Part):
    @_on_store_loop
    async def add(self, host: Host, actor: dict[str, str]) -> Host:
        try:
            async with self._db.tx() as cur:
                await cur.execute(
                    "INSERT INTO hosts (host, public_key, enrolled_by, created_at) VALUES (%s, %s, %s, %s)",
                    (host["host"], host["public_key"], host["enrolled_by"], host["created_at"]),
                )
                await _record(
                    cur,
                    AuditEvent(
                        seq=0,
                        kind="host.enrolled",
                        grant_id=None,
                        actor=dict(actor),
                        data={"host": host["host"], "public_key": host["public_key"]},
                        created_at=host["created_at"],
                    ),
                )
        except _unique_violation():
            raise Conflict("host") from None
        return host

    @_on_store_loop
    async def get(self, host: str) -> Host | None:
        if "\x00" in host:
            return None
        row = await self._db.one(
            "SELECT host, public_key, enrolled_by, created_at FROM hosts WHERE host = %s", (host,)
        )
        if row is None:
            return None
        return Host(
            host=row["host"],
            public_key=row["public_key"],
            enrolled_by=row["enrolled_by"],
            created_at=int(row["created_at"]),
        )


class PostgresReceipts(_Part):
    @_on_store_loop
    async def add(self, key: str, event: AuditEvent) -> bool:
        async with self._db.tx() as cur:
            await cur.execute(
                "INSERT INTO receipts (key, created_at) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                (key, event["created_at"]),
            )
            if cur.rowcount != 1:
                return False
            await _record(cur, event)
        return True
