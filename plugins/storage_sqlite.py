"""Embedded SQLite storage (the default), on sqlite-utils.

One connection per server process, used from the event loop: with WAL and
synchronous=NORMAL a commit costs tens of microseconds, less than a hop to a thread pool
(see docs/decisions.md). Several processes share the file; every write runs in
``BEGIN IMMEDIATE`` so writers queue on SQLite's lock (busy_timeout) instead of failing, and
everything single-use is decided by a conditional DELETE/UPDATE and its row count.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from grantd.hookspecs import hookimpl
from grantd.store import Conflict

BUSY_TIMEOUT_MS = 10_000
CHECKPOINT_INTERVAL = 0.5  # seconds between WAL checkpoints of a serving process


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


def _m2_grants(db: sqlite_utils.Database) -> None:
    # `request` is the JSON of the grant request as stored (server-computed cmd_hash included);
    # `reuse_key` is the digest of what makes two timed/always requests "the same" (D6);
    # `version` grows on every change and feeds the strong ETag.
    db.execute(
        """CREATE TABLE grants (
            id TEXT PRIMARY KEY,
            type TEXT NOT NULL,
            requester TEXT NOT NULL,
            request TEXT NOT NULL,
            grant_type TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            decided_by TEXT,
            decided_at INTEGER,
            expires_at INTEGER,
            used_at INTEGER,
            decision_reason TEXT,
            delegation_id TEXT,
            revoked_by TEXT,
            revoked_at INTEGER,
            reuse_key TEXT,
            version INTEGER NOT NULL DEFAULT 1
        )"""
    )
    db.execute("CREATE INDEX grants_requester ON grants (requester, created_at DESC)")
    db.execute("CREATE INDEX grants_created ON grants (created_at DESC, id DESC)")
    db.execute("CREATE INDEX grants_status ON grants (status, created_at)")
    db.execute("CREATE INDEX grants_lapse ON grants (status, expires_at)")
    db.execute("CREATE INDEX grants_reuse ON grants (requester, reuse_key, status)")
    # Every change of a grant, in commit order: the source of the event stream for all processes.
    db.execute(
        """CREATE TABLE grant_events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            event TEXT NOT NULL,
            grant_id TEXT NOT NULL,
            requester TEXT NOT NULL,
            grant_json TEXT NOT NULL,
            created_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX grant_events_created ON grant_events (created_at)")
    db.execute(
        """CREATE TABLE delegations (
            id TEXT PRIMARY KEY,
            delegator TEXT NOT NULL,
            delegate TEXT NOT NULL,
            audience TEXT NOT NULL,
            scopes TEXT NOT NULL,
            approval TEXT NOT NULL,
            duration INTEGER,
            created_at INTEGER NOT NULL,
            expires_at INTEGER,
            status TEXT NOT NULL,
            revoked_at INTEGER,
            revoked_by TEXT
        )"""
    )
    db.execute("CREATE INDEX delegations_delegate ON delegations (delegate, audience, status)")
    db.execute("CREATE INDEX delegations_delegator ON delegations (delegator, created_at)")


MIGRATIONS: list[tuple[int, str, Callable[[sqlite_utils.Database], None]]] = [
    (1, "signing keys, agents, challenges", _m1_core),
    (2, "grants, grant events, delegations", _m2_grants),
]

# A grant's status as read at `now` (grantd.idp.grants.effective_status): lapsed ones are
# expired even before the sweeper has stored that (D6: expiry is applied before anything reads a
# grant, list filters included).
NOT_LAPSED = """NOT ((status = 'approved' AND expires_at IS NOT NULL AND expires_at <= :now)
    OR (status = 'pending' AND created_at <= :pending_cutoff))"""
# The list filter per status, by that rule, written so that SQLite can use the status indexes.
STATUS_FILTERS = {
    "pending": "(status = 'pending' AND created_at > :pending_cutoff)",
    "approved": "(status = 'approved' AND (expires_at IS NULL OR expires_at > :now))",
    "expired": """(status = 'expired' OR (status = 'approved' AND expires_at IS NOT NULL AND expires_at <= :now)
        OR (status = 'pending' AND created_at <= :pending_cutoff))""",
}
GRANT_COLUMNS = (
    "id", "type", "requester", "request", "grant_type", "status", "created_at", "decided_by", "decided_at",
    "expires_at", "used_at", "decision_reason", "delegation_id", "revoked_by", "revoked_at", "reuse_key", "version",
)
GRANT_CHANGEABLE = {"request", "grant_type", "status", "decided_by", "decided_at", "expires_at", "used_at",
                    "decision_reason", "delegation_id", "revoked_by", "revoked_at", "reuse_key"}
DELEGATION_COLUMNS = (
    "id", "delegator", "delegate", "audience", "scopes", "approval", "duration", "created_at", "expires_at",
    "status", "revoked_at", "revoked_by",
)


class SQLiteStore:
    """Store on one SQLite file; see grantd.store.Store for the contract of each method."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # Reads (and the startup migration) use `conn`, which may wait in SQLite's busy handler.
        # Server writes use `wconn`, which never waits there: SQLite's busy handler sleeps in the
        # calling thread, i.e. it would stop this process's event loop while another process
        # holds the write lock. `awrite` waits with asyncio.sleep instead.
        self.conn = self._connect(BUSY_TIMEOUT_MS)
        self.wconn = self.conn if self.path == ":memory:" else self._connect(0)
        self.db = sqlite_utils.Database(self.conn, execute_plugins=False)
        self._write_queue = asyncio.Lock()
        self._checkpointer: threading.Thread | None = None
        self._stop_checkpoints = threading.Event()

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    # -- plumbing ---------------------------------------------------------------------------------
    @staticmethod
    @contextmanager
    def _commit_or_roll_back(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """The end of a transaction begun on ``conn``: COMMIT if the body succeeded, else ROLLBACK."""
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock up front (no upgrade deadlocks).
        For startup work (migrations): it may wait in SQLite's busy handler, blocking the thread."""
        self.conn.execute("BEGIN IMMEDIATE")
        with self._commit_or_roll_back(self.conn) as conn:
            yield conn

    @asynccontextmanager
    async def awrite(self) -> AsyncIterator[sqlite3.Connection]:
        """One write transaction for the server: waits for the write lock without blocking the
        event loop. The body must not await, so nothing else in this process interleaves."""
        if self._write_queue.locked() or not self._try_begin():
            await self._begin_queued()
        with self._commit_or_roll_back(self.wconn) as conn:
            yield conn

    def _try_begin(self) -> bool:
        try:
            self.wconn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            return False
        return True

    async def _begin_queued(self) -> None:
        """Another process holds SQLite's write lock (for tens of microseconds at a time). This
        process's waiting writers queue in FIFO order and only the head polls; when every waiter
        polled on its own, some lost the race again and again (p99 of hundreds of ms)."""
        async with self._write_queue:
            delay = 0.0001
            deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
            while not self._try_begin():
                if time.monotonic() > deadline:
                    raise sqlite3.OperationalError(f"database is locked (waited {BUSY_TIMEOUT_MS} ms)")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.001)

    def serving(self) -> None:
        """A server process starts: checkpoint the WAL in a background thread instead of inside
        whichever commit crosses the auto-checkpoint threshold (an fsync on the event loop)."""
        if self._checkpointer is not None or self.path == ":memory:":
            return
        for conn in (self.conn, self.wconn):
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="sqlite-checkpoint", daemon=True)
        self._checkpointer.start()

    def _checkpoint_loop(self) -> None:
        conn = self._connect(0)
        try:
            while not self._stop_checkpoints.wait(CHECKPOINT_INTERVAL):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    continue  # busy with another process's checkpoint: next round
        finally:
            conn.close()

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
        self._stop_checkpoints.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=5)
        if self.wconn is not self.conn:
            self.wconn.close()
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
        async with self.awrite() as conn:
            if conn.execute("SELECT 1 FROM signing_keys WHERE retired_at IS NULL").fetchone():
                return False
            self._insert_key(conn, key)
            return True

    async def rotate_signing_key(self, key: dict[str, Any], now: int) -> list[str]:
        async with self.awrite() as conn:
            retired = [r[0] for r in conn.execute("SELECT kid FROM signing_keys WHERE retired_at IS NULL")]
            conn.execute("UPDATE signing_keys SET retired_at = ? WHERE retired_at IS NULL", (now,))
            self._insert_key(conn, key)
        return retired

    async def drop_signing_keys_retired_before(self, cutoff: int) -> int:
        async with self.awrite() as conn:
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
            async with self.awrite() as conn:
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
            async with self.awrite() as conn:
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
        async with self.awrite() as conn:
            conn.execute("DELETE FROM challenges WHERE agent_id = ?", (agent_id,))
            return conn.execute("DELETE FROM agents WHERE agent_id = ?", (agent_id,)).rowcount == 1

    # -- challenges -------------------------------------------------------------------------------
    async def create_challenge(self, challenge: str, agent_id: str, expires_at: int) -> None:
        async with self.awrite() as conn:
            conn.execute("DELETE FROM challenges WHERE expires_at < ?", (_now_ms() - 60_000,))
            conn.execute(
                "INSERT INTO challenges (challenge, agent_id, expires_at) VALUES (?, ?, ?)",
                (challenge, agent_id, expires_at),
            )

    async def take_challenge(self, challenge: str, agent_id: str) -> int | None:
        # The DELETE decides who wins: of any number of concurrent takers in any process,
        # exactly one sees the row.
        async with self.awrite() as conn:
            row = conn.execute(
                "DELETE FROM challenges WHERE challenge = ? AND agent_id = ? RETURNING expires_at",
                (challenge, agent_id),
            ).fetchone()
        return int(row[0]) if row else None


    # -- grants -----------------------------------------------------------------------------------
    @staticmethod
    def _grant_row(row: dict[str, Any]) -> dict[str, Any]:
        row["request"] = json.loads(row["request"])
        return row

    def _record_event(self, conn: sqlite3.Connection, event: str, row: dict[str, Any], now: int) -> None:
        snapshot = {k: row[k] for k in GRANT_COLUMNS if k != "reuse_key"}
        conn.execute(
            "INSERT INTO grant_events (event, grant_id, requester, grant_json, created_at) VALUES (?, ?, ?, ?, ?)",
            (event, row["id"], row["requester"], json.dumps(snapshot, separators=(",", ":")), now),
        )

    async def create_grant(self, grant: dict[str, Any], events: list[str]) -> dict[str, Any]:
        row = {k: grant.get(k) for k in GRANT_COLUMNS}
        row["version"] = 1
        stored = {**row, "request": json.dumps(row["request"], separators=(",", ":"))}
        async with self.awrite() as conn:
            conn.execute(
                f"INSERT INTO grants ({', '.join(GRANT_COLUMNS)}) VALUES ({', '.join(':' + c for c in GRANT_COLUMNS)})",  # noqa: S608 - fixed column list
                stored,
            )
            for event in events:
                self._record_event(conn, event, stored, int(grant["created_at"]))
        return row

    async def get_grant(self, grant_id: str) -> dict[str, Any] | None:
        row = self._one("SELECT * FROM grants WHERE id = ?", (grant_id,))
        return self._grant_row(row) if row else None

    async def find_reusable_grant(self, requester: str, reuse_key: str, now: int) -> dict[str, Any] | None:
        row = self._one(
            """SELECT * FROM grants WHERE requester = ? AND reuse_key = ? AND status = 'approved'
               AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at DESC LIMIT 1""",
            (requester, reuse_key, now),
        )
        return self._grant_row(row) if row else None

    async def list_grants(
        self,
        *,
        now: int,
        pending_cutoff: int,
        limit: int,
        status: str | None = None,
        requester: str | None = None,
        only_requester: str | None = None,
        decider: str | None = None,
        cursor: tuple[int, str] | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {"now": now, "pending_cutoff": pending_cutoff, "limit": limit + 1}
        if status:
            where.append(STATUS_FILTERS.get(status, "status = :status"))
            params["status"] = status
        if requester:
            where.append("requester = :requester")
            params["requester"] = requester
        if only_requester:
            where.append("requester = :only_requester")
            params["only_requester"] = only_requester
        if decider:
            # A person sees what they asked for and what they may decide (as an agent's owner/approver).
            where.append(
                "(requester = :decider OR requester IN (SELECT email FROM agents WHERE owner = :decider OR approver = :decider))"
            )
            params["decider"] = decider
        if cursor:
            where.append("(created_at < :c_at OR (created_at = :c_at AND id < :c_id))")
            params["c_at"], params["c_id"] = cursor
        rows = self._all(
            f"SELECT * FROM grants WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608 - clauses are fixed strings
            params,
        )
        return [self._grant_row(r) for r in rows[:limit]], len(rows) > limit

    async def update_grant_if(
        self,
        grant_id: str,
        *,
        expect: tuple[str, ...],
        changes: dict[str, Any],
        event: str,
        now: int,
        pending_cutoff: int,
    ) -> dict[str, Any] | None:
        """Apply ``changes`` only if the grant's status is in ``expect`` and it has not lapsed;
        the row count decides between concurrent callers in any process. None if it did not apply."""
        cols = [c for c in changes if c in GRANT_CHANGEABLE]
        values = {c: (json.dumps(changes[c], separators=(",", ":")) if c == "request" else changes[c]) for c in cols}
        sets = ", ".join([*(f"{c} = :set_{c}" for c in cols), "version = version + 1"])
        marks = ", ".join(f":expect_{i}" for i in range(len(expect)))
        params: dict[str, Any] = {
            "id": grant_id, "now": now, "pending_cutoff": pending_cutoff,
            **{f"set_{c}": v for c, v in values.items()},
            **{f"expect_{i}": s for i, s in enumerate(expect)},
        }
        async with self.awrite() as conn:
            row = conn.execute(
                f"UPDATE grants SET {sets} WHERE id = :id AND status IN ({marks}) AND {NOT_LAPSED} RETURNING *",  # noqa: S608 - fixed column names
                params,
            ).fetchone()
            if row is None:
                return None
            updated = dict(row)
            self._record_event(conn, event, updated, now)
        return self._grant_row(updated)

    # Both lapse conditions are index ranges (grants_lapse, grants_status), so a sweep costs
    # nothing while nothing lapsed, however many grants exist; the write lock is taken only then.
    LAPSED = """(status = 'approved' AND expires_at IS NOT NULL AND expires_at <= :now)
        OR (status = 'pending' AND created_at <= :pending_cutoff)"""

    async def expire_grants(self, now: int, pending_cutoff: int, events_before: int) -> list[dict[str, Any]]:
        """Persist the expiry of lapsed grants (one event each) and drop events older than ``events_before``."""
        params = {"now": now, "pending_cutoff": pending_cutoff}
        lapsed = self._one(f"SELECT 1 AS x FROM grants WHERE {self.LAPSED} LIMIT 1", params)  # noqa: S608
        old_events = self._one("SELECT 1 AS x FROM grant_events WHERE created_at < ? LIMIT 1", (events_before,))
        if lapsed is None and old_events is None:
            return []
        async with self.awrite() as conn:
            rows = [
                dict(r)
                for r in conn.execute(
                    f"UPDATE grants SET status = 'expired', version = version + 1 WHERE {self.LAPSED} RETURNING *",  # noqa: S608
                    params,
                ).fetchall()
            ]
            for row in rows:
                self._record_event(conn, "grant.expired", row, now)
            conn.execute("DELETE FROM grant_events WHERE created_at < ?", (events_before,))
        return [self._grant_row(r) for r in rows]

    async def grant_events_after(self, seq: int, limit: int) -> list[dict[str, Any]]:
        rows = self._all("SELECT * FROM grant_events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit))
        for row in rows:
            row["grant"] = self._grant_row(json.loads(row.pop("grant_json")))
        return rows

    async def last_grant_event_seq(self) -> int:
        row = self.conn.execute("SELECT max(seq) FROM grant_events").fetchone()
        return int(row[0] or 0)

    # -- delegations ------------------------------------------------------------------------------
    @staticmethod
    def _delegation_row(row: dict[str, Any]) -> dict[str, Any]:
        row["scopes"] = json.loads(row["scopes"])
        return row

    async def create_delegation(self, delegation: dict[str, Any]) -> dict[str, Any]:
        row = {k: delegation.get(k) for k in DELEGATION_COLUMNS}
        async with self.awrite() as conn:
            conn.execute(
                f"INSERT INTO delegations ({', '.join(DELEGATION_COLUMNS)}) VALUES ({', '.join(':' + c for c in DELEGATION_COLUMNS)})",  # noqa: S608
                {**row, "scopes": json.dumps(row["scopes"])},
            )
        return row

    async def get_delegation(self, delegation_id: str) -> dict[str, Any] | None:
        row = self._one("SELECT * FROM delegations WHERE id = ?", (delegation_id,))
        return self._delegation_row(row) if row else None

    async def list_delegations(
        self, *, party: str | None, limit: int, cursor: tuple[int, str] | None
    ) -> tuple[list[dict[str, Any]], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {"limit": limit + 1}
        if party:
            where.append("(delegator = :party OR delegate = :party)")
            params["party"] = party
        if cursor:
            where.append("(created_at < :c_at OR (created_at = :c_at AND id < :c_id))")
            params["c_at"], params["c_id"] = cursor
        rows = self._all(
            f"SELECT * FROM delegations WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608
            params,
        )
        return [self._delegation_row(r) for r in rows[:limit]], len(rows) > limit

    async def revoke_delegation(self, delegation_id: str, by: str, now: int) -> dict[str, Any] | None:
        async with self.awrite() as conn:
            row = conn.execute(
                "UPDATE delegations SET status = 'revoked', revoked_at = ?, revoked_by = ? WHERE id = ? AND status = 'active' RETURNING *",
                (now, by, delegation_id),
            ).fetchone()
        return self._delegation_row(dict(row)) if row else None

    async def live_delegations(self, delegate: str, now: int) -> list[dict[str, Any]]:
        rows = self._all(
            """SELECT * FROM delegations WHERE delegate = ? AND status = 'active'
               AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at""",
            (delegate, now),
        )
        return [self._delegation_row(r) for r in rows]


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], SQLiteStore]]:
    def open_sqlite(config: Any) -> SQLiteStore:
        return SQLiteStore(config.resolve_path(config.storage.path))

    return {"sqlite": open_sqlite}
