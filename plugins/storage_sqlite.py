"""Embedded SQLite storage (the default), on sqlite-utils.

One connection per server process, used from the event loop: with WAL and
synchronous=NORMAL a commit costs tens of microseconds, less than a hop to a thread pool
(see docs/decisions.md). Several processes share the file; every write runs in
``BEGIN IMMEDIATE`` so writers queue on SQLite's lock (busy_timeout) instead of failing, and
everything single-use is decided by a conditional DELETE/UPDATE and its row count.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from appliance.hookspecs import hookimpl
from appliance.store import Conflict

BUSY_TIMEOUT_MS = 10_000


def _now_ms() -> int:
    return int(time.time() * 1000)


# Numbered migrations. Never edit a released one: add the next number.
def _m1_core(db: sqlite_utils.Database) -> None:
    db.execute(
        """CREATE TABLE signing_keys (
            kid TEXT PRIMARY KEY,
            alg TEXT NOT NULL,
            private_pem TEXT NOT NULL,
            public_jwk TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            retired_at INTEGER
        )"""
    )
    db.execute(
        """CREATE TABLE agents (
            agent_id TEXT PRIMARY KEY,
            email TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            public_key TEXT NOT NULL,
            key_id TEXT NOT NULL UNIQUE,
            owner TEXT NOT NULL,
            approver TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )"""
    )
    db.execute(
        """CREATE TABLE challenges (
            challenge TEXT PRIMARY KEY,
            agent_id TEXT NOT NULL,
            expires_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX challenges_expires ON challenges (expires_at)")


MIGRATIONS: list[tuple[int, str, Callable[[sqlite_utils.Database], None]]] = [
    (1, "signing keys, agents, challenges", _m1_core),
]


class SQLiteStore:
    """Store on one SQLite file; see appliance.store.Store for the contract of each method."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        self.conn = conn
        self.db = sqlite_utils.Database(conn, execute_plugins=False)

    # -- plumbing ---------------------------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock up front (no upgrade deadlocks)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    def _one(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> dict[str, Any] | None:
        row = self.conn.execute(sql, params).fetchone()
        return dict(row) if row is not None else None

    def _all(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(sql, params).fetchall()]

    # -- lifecycle --------------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        return self.migrate_sync()

    def migrate_sync(self) -> list[int]:
        applied: list[int] = []
        with self.write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at INTEGER)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, migration in MIGRATIONS:
                if version in done:
                    continue
                migration(self.db)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                    (version, name, _now_ms()),
                )
                applied.append(version)
        return applied

    def schema_version(self) -> int:
        row = self.conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    async def ping(self) -> bool:
        try:
            self.conn.execute("SELECT 1 FROM schema_migrations LIMIT 1").fetchall()
        except sqlite3.Error:
            return False
        return True

    def close(self) -> None:
        self.conn.close()

    async def backup(self, target: str) -> None:
        self.conn.execute("VACUUM INTO ?", (target,))

    # -- signing keys -----------------------------------------------------------------------------
    @staticmethod
    def _key_row(row: dict[str, Any]) -> dict[str, Any]:
        row["public_jwk"] = json.loads(row["public_jwk"])
        return row

    async def signing_keys(self) -> list[dict[str, Any]]:
        return [self._key_row(r) for r in self._all("SELECT * FROM signing_keys ORDER BY created_at DESC, rowid DESC")]

    async def active_kid(self) -> str | None:
        row = self.conn.execute(
            "SELECT kid FROM signing_keys WHERE retired_at IS NULL ORDER BY created_at DESC, rowid DESC LIMIT 1"
        ).fetchone()
        return row[0] if row else None

    def _insert_key(self, conn: sqlite3.Connection, key: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO signing_keys (kid, alg, private_pem, public_jwk, created_at, retired_at) VALUES (?,?,?,?,?,NULL)",
            (key["kid"], key["alg"], key["private_pem"], json.dumps(key["public_jwk"]), key["created_at"]),
        )

    async def add_first_signing_key(self, key: dict[str, Any]) -> bool:
        with self.write() as conn:
            if conn.execute("SELECT 1 FROM signing_keys WHERE retired_at IS NULL").fetchone():
                return False
            self._insert_key(conn, key)
            return True

    async def rotate_signing_key(self, key: dict[str, Any], now: int) -> list[str]:
        with self.write() as conn:
            retired = [r[0] for r in conn.execute("SELECT kid FROM signing_keys WHERE retired_at IS NULL")]
            conn.execute("UPDATE signing_keys SET retired_at = ? WHERE retired_at IS NULL", (now,))
            self._insert_key(conn, key)
        return retired

    async def drop_signing_keys_retired_before(self, cutoff: int) -> int:
        with self.write() as conn:
            return conn.execute("DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < ?", (cutoff,)).rowcount

    # -- agents -----------------------------------------------------------------------------------
    @staticmethod
    def _conflict(exc: sqlite3.IntegrityError) -> Conflict:
        msg = str(exc)
        if "agents.email" in msg:
            return Conflict("email")
        if "agents.key_id" in msg:
            return Conflict("publicKey")
        return Conflict("id")

    async def create_agent(self, agent: dict[str, Any]) -> dict[str, Any]:
        try:
            with self.write() as conn:
                conn.execute(
                    """INSERT INTO agents (agent_id, email, name, public_key, key_id, owner, approver, status,
                       created_at, updated_at) VALUES (:agent_id, :email, :name, :public_key, :key_id, :owner,
                       :approver, :status, :created_at, :updated_at)""",
                    agent,
                )
        except sqlite3.IntegrityError as exc:
            raise self._conflict(exc) from None
        return dict(agent)

    async def get_agent(self, ident: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM agents WHERE agent_id = ? OR email = ?", (ident, ident.lower()))

    async def list_agents(self, limit: int, after: str | None) -> tuple[list[dict[str, Any]], bool]:
        rows = self._all(
            "SELECT * FROM agents WHERE email > ? ORDER BY email LIMIT ?",
            (after or "", limit + 1),
        )
        return rows[:limit], len(rows) > limit

    async def update_agent(self, agent_id: str, changes: dict[str, Any]) -> dict[str, Any] | None:
        allowed = {"name", "public_key", "key_id", "owner", "approver", "status", "updated_at"}
        cols = [c for c in changes if c in allowed]
        try:
            with self.write() as conn:
                if cols:
                    sets = ", ".join(f"{c} = :{c}" for c in cols)
                    conn.execute(
                        f"UPDATE agents SET {sets} WHERE agent_id = :agent_id",  # noqa: S608 - column names from a fixed set
                        {**{c: changes[c] for c in cols}, "agent_id": agent_id},
                    )
                if changes.get("status") == "disabled":
                    conn.execute("DELETE FROM challenges WHERE agent_id = ?", (agent_id,))
        except sqlite3.IntegrityError as exc:
            raise self._conflict(exc) from None
        return await self.get_agent(agent_id)

    async def delete_agent(self, agent_id: str) -> bool:
        with self.write() as conn:
            conn.execute("DELETE FROM challenges WHERE agent_id = ?", (agent_id,))
            return conn.execute("DELETE FROM agents WHERE agent_id = ?", (agent_id,)).rowcount == 1

    # -- challenges -------------------------------------------------------------------------------
    async def create_challenge(self, challenge: str, agent_id: str, expires_at: int) -> None:
        with self.write() as conn:
            conn.execute("DELETE FROM challenges WHERE expires_at < ?", (_now_ms() - 60_000,))
            conn.execute(
                "INSERT INTO challenges (challenge, agent_id, expires_at) VALUES (?, ?, ?)",
                (challenge, agent_id, expires_at),
            )

    async def take_challenge(self, challenge: str, agent_id: str) -> int | None:
        # The DELETE decides who wins: of any number of concurrent takers in any process,
        # exactly one sees the row.
        with self.write() as conn:
            row = conn.execute(
                "DELETE FROM challenges WHERE challenge = ? AND agent_id = ? RETURNING expires_at",
                (challenge, agent_id),
            ).fetchone()
        return int(row[0]) if row else None


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], SQLiteStore]]:
    def open_sqlite(config: Any) -> SQLiteStore:
        return SQLiteStore(config.resolve_path(config.storage.path))

    return {"sqlite": open_sqlite}
