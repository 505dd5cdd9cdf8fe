"""The decision log on SQLite (``grantd.store.tlog``): leaves, nodes, state and lease, checkpoints,
log keys, audit events, hosts and receipts."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from grantd.store import Conflict
from grantd.store.rows import from_json
from grantd.store.tlog import AuditEvent, Host, LeafRow, NodeRow, TlogHead, TlogKey

from .connection import _Database


def _record(conn: sqlite3.Connection, event: AuditEvent) -> None:
    conn.execute(
        "INSERT INTO audit_events (kind, grant_id, actor, data, created_at) VALUES (?, ?, ?, ?, ?)",
        (
            event["kind"],
            event["grant_id"],
            json.dumps(event["actor"]),
            json.dumps(event["data"]),
            event["created_at"],
        ),
    )


_as_blob: Callable[[Any], object] = bytearray  # (typed for ``map``: bytearray's overloads confuse it)
_ROWS = 128  # rows per INSERT at most: 512 bound parameters at most, under any build's limit (999)


def _insert(
    conn: sqlite3.Connection,
    head: str,
    width: int,
    rows: Sequence[Sequence[object]],
    blobs: Sequence[int] = (),
) -> None:
    """Insert ``rows`` with multi-row ``VALUES`` statements: one statement step per many rows instead
    of one per row (``executemany``), ~0.4 µs less per row (issue 23: the sequencer writes a leaf and
    a node per event). Only statements of 128, 64, 32, …, 1 rows are made (what is left after the
    full ones goes by its binary digits): a step's size varies with the load, and a text per size
    would fill the connection's statement cache (128 texts) and push out the request path's own
    statements, which then compile again. So at most eight texts per table.

    ``blobs``: the columns holding ``bytes``, bound as ``bytearray``. The sqlite3 module binds an
    exact ``str``, ``int``, ``float`` or ``bytearray`` directly, but looks every other type up among
    its adapters first (a tuple built, a dict missed, two attribute look-ups): ~0.5 µs per ``bytes``
    value, more than the copy into a ``bytearray`` (~1 µs less per leaf row, measured; issue 23).
    SQLite stores the same BLOB either way."""
    one = "(" + ", ".join("?" * width) + ")"
    start, size = 0, _ROWS
    while start < len(rows):
        while size > len(rows) - start:
            size //= 2
        part = rows[start : start + size]
        values = [value for row in part for value in row]
        for column in blobs:
            values[column::width] = map(_as_blob, values[column::width])
        conn.execute(head + ", ".join([one] * size), values)
        start += size


def _key_row(row: dict[str, object]) -> TlogKey:
    return TlogKey(
        kid=str(row["kid"]),
        name=str(row["name"]),
        seed=str(row["seed"]),
        public=str(row["public"]),
        created_at=int(row["created_at"]),  # type: ignore[call-overload]
        retired_at=None if row["retired_at"] is None else int(row["retired_at"]),  # type: ignore[call-overload]
    )  # type: ignore[call-overload]


class SQLiteTlog:
    def __init__(self, db: _Database):
        self._db = db

    async def head(self) -> TlogHead:
        row = self._db.one(
            "SELECT size, grant_seq, event_seq, holder, lease_until FROM tlog_state WHERE id = 1"
        )
        assert row is not None
        return TlogHead(
            size=row["size"],
            grant_seq=row["grant_seq"],
            event_seq=row["event_seq"],
            holder=row["holder"],
            lease_until=row["lease_until"],
        )

    async def lease(self, holder: str, now: int, ttl_ms: int) -> bool:
        async with self._db.awrite() as conn:
            return (
                int(
                    conn.execute(
                        "UPDATE tlog_state SET holder = ?, lease_until = ? WHERE id = 1 AND (holder IS NULL OR holder = ? OR lease_until <= ?)",
                        (holder, now + ttl_ms, holder, now),
                    ).rowcount
                )
                == 1
            )

    async def release(self, holder: str) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                "UPDATE tlog_state SET holder = NULL, lease_until = 0 WHERE id = 1 AND holder = ?", (holder,)
            )

    async def nodes(self, coords: Sequence[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        if not coords:
            return {}
        wanted = list(dict.fromkeys(coords))
        found: dict[tuple[int, int], bytes] = {}
        leaves = [c[1] for c in wanted if c[0] == 0]  # level 0: the leaf hashes (stored once, issue 23)
        above = [c for c in wanted if c[0] != 0]
        conn = self._db.conn
        for start in range(0, len(leaves), 800):  # SQLite's bound-parameter limit
            part = leaves[start : start + 800]
            marks = ", ".join("?" * len(part))
            for row in conn.execute(
                f"SELECT idx, leaf_hash FROM tlog_leaves WHERE idx IN ({marks})",  # noqa: S608 - generated placeholders
                part,
            ):
                found[(0, int(row[0]))] = bytes(row[1])
        for start in range(0, len(above), 400):
            chunk = above[start : start + 400]
            clause = " OR ".join("(level = ? AND idx = ?)" for _ in chunk)
            params = [v for c in chunk for v in c]
            for row in conn.execute(
                f"SELECT level, idx, hash FROM tlog_nodes WHERE {clause}",  # noqa: S608 - generated placeholders
                params,
            ):
                found[(int(row[0]), int(row[1]))] = bytes(row[2])
        return found

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
        async with self._db.awrite() as conn:
            moved = conn.execute(
                "UPDATE tlog_state SET size = ?, grant_seq = ?, event_seq = ? "
                "WHERE id = 1 AND size = ? AND holder = ? AND lease_until > ?",
                (expect_size + len(leaves), grant_seq, event_seq, expect_size, holder, now),
            ).rowcount
            if moved != 1:
                return False
            _insert(
                conn,
                "INSERT INTO tlog_leaves (idx, leaf, leaf_hash, grant_id, grant_created) VALUES ",
                5,
                leaves,
                blobs=(1, 2),
            )
            # level 0 is the leaves' hashes, just written with them (issue 23)
            _insert(
                conn,
                "INSERT INTO tlog_nodes (level, idx, hash) VALUES ",
                3,
                [n for n in nodes if n[0]],
                blobs=(2,),
            )
        return True

    async def entries(self, start: int, end: int) -> list[tuple[int, bytes, bytes]]:
        rows = self._db.conn.execute(
            "SELECT idx, leaf, leaf_hash FROM tlog_leaves WHERE idx >= ? AND idx < ? ORDER BY idx",
            (start, end),
        ).fetchall()
        return [(int(r[0]), bytes(r[1]), bytes(r[2])) for r in rows]

    async def grant_indexes(self, grant_id: str, below: int, created_at: int | None) -> list[int]:
        # two index searches (migration 15): by the grant's created_at, and among the leaves without one
        rows = self._db.conn.execute(
            "SELECT idx FROM tlog_leaves WHERE grant_created = ? AND grant_id = ? AND idx < ? "
            "UNION ALL SELECT idx FROM tlog_leaves WHERE grant_created IS NULL AND grant_id = ? AND idx < ? "
            "ORDER BY idx",
            (created_at, grant_id, below, grant_id, below),
        ).fetchall()
        return [int(r[0]) for r in rows]

    async def add_checkpoint(self, size: int, note: str, now: int) -> bool:
        async with self._db.awrite() as conn:
            return (
                int(
                    conn.execute(
                        "INSERT INTO tlog_checkpoints (size, note, created_at) VALUES (?, ?, ?) ON CONFLICT (size) DO NOTHING",
                        (size, note, now),
                    ).rowcount
                )
                == 1
            )

    async def latest_checkpoint(self) -> tuple[int, str] | None:
        row = self._db.one("SELECT size, note FROM tlog_checkpoints ORDER BY size DESC LIMIT 1")
        return (int(row["size"]), str(row["note"])) if row else None

    async def checkpoints(self) -> list[tuple[int, str]]:
        return [
            (int(r["size"]), str(r["note"]))
            for r in self._db.all("SELECT size, note FROM tlog_checkpoints ORDER BY size")
        ]

    async def keys(self) -> list[TlogKey]:
        return [
            _key_row(r) for r in self._db.all("SELECT * FROM tlog_keys ORDER BY created_at DESC, rowid DESC")
        ]

    @staticmethod
    def _insert_key(conn: sqlite3.Connection, key: TlogKey) -> None:
        conn.execute(
            "INSERT INTO tlog_keys (kid, name, seed, public, created_at, retired_at) VALUES (?, ?, ?, ?, ?, NULL)",
            (key["kid"], key["name"], key["seed"], key["public"], key["created_at"]),
        )

    async def add_first_key(self, key: TlogKey) -> bool:
        async with self._db.awrite() as conn:
            if conn.execute("SELECT 1 FROM tlog_keys WHERE retired_at IS NULL").fetchone():
                return False
            self._insert_key(conn, key)
            return True

    async def rotate_key(self, key: TlogKey, now: int) -> list[str]:
        async with self._db.awrite() as conn:
            retired = conn.execute(
                "UPDATE tlog_keys SET retired_at = ?, seed = '' WHERE retired_at IS NULL RETURNING kid",
                (now,),
            ).fetchall()
            self._insert_key(conn, key)
            _record(
                conn,
                AuditEvent(
                    seq=0,
                    kind="key.rotated",
                    grant_id=None,
                    actor={"kind": "system"},
                    data={"purpose": "log", "kid": key["kid"], "public_key": key["public"]},
                    created_at=now,
                ),
            )
        return [str(r[0]) for r in retired]

    async def events_after(self, seq: int, limit: int) -> list[AuditEvent]:
        rows = self._db.all("SELECT * FROM audit_events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit))
        return [
            AuditEvent(
                seq=r["seq"],
                kind=r["kind"],
                grant_id=r["grant_id"],
                actor=from_json(r["actor"]),
                data=from_json(r["data"]),
                created_at=r["created_at"],
            )
            for r in rows
        ]

    async def policy_loaded(self, event: AuditEvent) -> bool:
        async with self._db.awrite() as conn:  # BEGIN IMMEDIATE: the read and the insert are one step
            last = conn.execute(
                "SELECT data FROM audit_events WHERE kind = 'policy.loaded' ORDER BY seq DESC LIMIT 1"
            ).fetchone()
            if last is not None and json.loads(last[0]).get("policy_hash") == event["data"]["policy_hash"]:
                return False
            _record(conn, event)
            return True


class SQLiteHosts:
    def __init__(self, db: _Database):
        self._db = db

    async def add(self, host: Host, actor: dict[str, str]) -> Host:
        async with self._db.awrite() as conn:
            try:
                conn.execute(
                    "INSERT INTO hosts (host, public_key, enrolled_by, created_at) VALUES (?, ?, ?, ?)",
                    (host["host"], host["public_key"], host["enrolled_by"], host["created_at"]),
                )
            except sqlite3.IntegrityError:
                raise Conflict("host") from None
            _record(
                conn,
                AuditEvent(
                    seq=0,
                    kind="host.enrolled",
                    grant_id=None,
                    actor=actor,
                    data={"host": host["host"], "public_key": host["public_key"]},
                    created_at=host["created_at"],
                ),
            )
        return host

    async def get(self, host: str) -> Host | None:
        row = self._db.one(
            "SELECT host, public_key, enrolled_by, created_at FROM hosts WHERE host = ?", (host,)
        )
        return Host(**row) if row else None  # type: ignore[typeddict-item]


class SQLiteReceipts:
    def __init__(self, db: _Database):
        self._db = db

    async def add(self, key: str, event: AuditEvent) -> bool:
        async with self._db.awrite() as conn:
            if (
                conn.execute(
                    "INSERT INTO receipts (key, created_at) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                    (key, event["created_at"]),
                ).rowcount
                != 1
            ):
                return False
            _record(conn, event)
        return True
