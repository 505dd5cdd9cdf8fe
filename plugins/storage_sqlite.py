"""Embedded SQLite storage (the default), on sqlite-utils: ``grantd.store.Store`` on one file.

One connection per server process for reads and one for writes, used from the event loop: with WAL
and synchronous=NORMAL a commit costs tens of microseconds, less than a hop to a thread pool (see
docs/performance.md). Several processes share the file; every write runs in ``BEGIN IMMEDIATE`` so
writers queue on SQLite's write lock instead of failing, and everything single-use is decided by a
conditional DELETE/UPDATE and its row count (``RETURNING``), never in process memory.

The file holds the signing keys: the database, its -wal and -shm files, backups and the directories
this module creates are private to the service account (D12).
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import sqlite_utils

from grantd.core.lifecycle import EXPIRED, Lapse
from grantd.core.paging import PageRequest
from grantd.hookspecs import hookimpl
from grantd.store import Conflict, StoreError
from grantd.store.records import Agent, Delegation, Grant, GrantEvent, SigningKey
from grantd.store.sql import lapsed_sql, not_lapsed_sql, status_sql

log = logging.getLogger("grantd")

BUSY_TIMEOUT_MS = 10_000
CHECKPOINT_INTERVAL = 0.5  # seconds between WAL checkpoints of a serving process
FILE_MODE = 0o600
DIR_MODE = 0o700
COMPANIONS = ("-wal", "-shm")


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


def _m3_principals(db: sqlite_utils.Database) -> None:
    # D11: an identity token carries the agent's key generation; grants name their requester by a
    # stable id (the agent_id of an agent, else the person's e-mail) that survives re-enrolment.
    db.execute("ALTER TABLE agents ADD COLUMN key_generation INTEGER NOT NULL DEFAULT 1")
    db.execute("CREATE INDEX agents_created ON agents (created_at DESC, agent_id DESC)")
    db.execute("CREATE INDEX agents_owner ON agents (owner)")
    db.execute("CREATE INDEX agents_approver ON agents (approver)")
    db.execute("ALTER TABLE grants ADD COLUMN requester_id TEXT")
    db.execute(
        """UPDATE grants SET requester_id = coalesce(
               (SELECT agent_id FROM agents WHERE agents.email = grants.requester), requester)"""
    )
    db.execute("CREATE INDEX grants_requester_id ON grants (requester_id, created_at DESC)")
    db.execute("DROP INDEX grants_reuse")
    db.execute("CREATE INDEX grants_reuse ON grants (requester_id, reuse_key, status)")
    # D12: a retired key only verifies; its private half is deleted.
    db.execute("UPDATE signing_keys SET private_pem = '' WHERE retired_at IS NOT NULL")


def _m4_rate_counters(db: sqlite_utils.Database) -> None:
    # D12: abuse-limit counters shared by every process; one row per (key, fixed window). The
    # index on the window's end lets each hit drop ended windows with an index range.
    db.execute(
        """CREATE TABLE rate_counters (
            key TEXT NOT NULL,
            window_start INTEGER NOT NULL,
            count INTEGER NOT NULL,
            ends_at INTEGER NOT NULL,
            PRIMARY KEY (key, window_start)
        ) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX rate_counters_ends ON rate_counters (ends_at)")


MIGRATIONS: list[tuple[int, str, Callable[[sqlite_utils.Database], None]]] = [
    (1, "signing keys, agents, challenges", _m1_core),
    (2, "grants, grant events, delegations", _m2_grants),
    (3, "key generation, requester ids, agent paging, retired keys without private keys", _m3_principals),
    (4, "rate counters", _m4_rate_counters),
]

# Column allow-lists: the only names that ever reach SQL text (lapse columns are checked against them).
AGENT_COLUMNS = (
    "agent_id", "email", "name", "public_key", "key_id", "key_generation", "owner", "approver", "status",
    "created_at", "updated_at",
)
AGENT_CHANGEABLE = ("name", "owner", "approver", "public_key", "key_id", "status", "updated_at")
GRANT_COLUMNS = (
    "id", "type", "requester", "requester_id", "request", "grant_type", "status", "created_at", "decided_by",
    "decided_at", "expires_at", "used_at", "decision_reason", "delegation_id", "revoked_by", "revoked_at",
    "reuse_key", "version",
)
GRANT_CHANGEABLE = frozenset({
    "request", "grant_type", "status", "decided_by", "decided_at", "expires_at", "used_at", "decision_reason",
    "delegation_id", "revoked_by", "revoked_at", "reuse_key",
})
DELEGATION_COLUMNS = (
    "id", "delegator", "delegate", "audience", "scopes", "approval", "duration", "created_at", "expires_at",
    "status", "revoked_at", "revoked_by",
)
# Lists newest first by (created_at, id); the cursor is the last row of the previous page.
AFTER = "(created_at < :after_at OR (created_at = :after_at AND {id} < :after_id))"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# -- file modes (D12) ---------------------------------------------------------------------------------
def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents mode 0700 (only those this call creates)."""
    missing: list[Path] = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)


def _create_private_file(path: Path) -> bool:
    """Create ``path`` empty and 0600 unless it exists (SQLite then opens it as a new database and
    creates its -wal and -shm files with the same mode). True if this call created it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken bits away; never adds any
    finally:
        os.close(fd)
    return True


def _check_private(path: Path) -> None:
    """An existing file readable or writable by group or others is fixed to 0600 when this process
    owns it (with a warning); otherwise the store refuses to open."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o077:
        return
    loose = oct(stat.S_IMODE(st.st_mode))
    if st.st_uid == os.geteuid():
        try:
            os.chmod(path, FILE_MODE)
        except OSError:
            pass
        else:
            log.warning("%s was mode %s (it holds signing keys); changed it to 0600", path, loose)
            return
    raise StoreError(
        f"{path} is mode {loose}: readable or writable by group or others, and grantd cannot change that "
        f"(it holds signing keys). Run: chmod 600 {path}"
    )


class _Database:
    """The connections and the write machinery the parts share."""

    def __init__(self, path: str):
        self.path = path
        # Reads (and the startup migration) use `conn`, which may wait in SQLite's busy handler.
        # Server writes use `wconn`, which never waits there: SQLite's busy handler sleeps in the
        # calling thread, i.e. it would stop this process's event loop while another process
        # holds the write lock. `awrite` waits with asyncio.sleep instead.
        self.conn = self.connect(BUSY_TIMEOUT_MS)
        self.wconn = self.conn if path == ":memory:" else self.connect(0)
        self.write_queue = asyncio.Lock()

    def connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        # Opening may wait (switching a new file to WAL takes an exclusive lock another process may
        # hold for a moment); the connection's own busy timeout applies from then on.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        return conn

    @staticmethod
    @contextmanager
    def commit_or_roll_back(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
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
        with self.commit_or_roll_back(self.conn) as conn:
            yield conn

    @asynccontextmanager
    async def awrite(self) -> AsyncIterator[sqlite3.Connection]:
        """One write transaction for the server: waits for the write lock without blocking the
        event loop. The body must not await, so nothing else in this process interleaves."""
        if self.write_queue.locked() or not self._try_begin():
            await self._begin_queued()
        with self.commit_or_roll_back(self.wconn) as conn:
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
        async with self.write_queue:
            delay = 0.0001
            deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
            while not self._try_begin():
                if time.monotonic() > deadline:
                    raise sqlite3.OperationalError(f"database is locked (waited {BUSY_TIMEOUT_MS} ms)")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.001)

    def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> dict[str, Any] | None:
        row = self.conn.execute(sql, params).fetchone()
        return dict(row) if row is not None else None

    def all(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.conn.execute(sql, params).fetchall()]


def _page(rows: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    return rows[:limit], len(rows) > limit


def _after(page: PageRequest, id_column: str, where: list[str], params: dict[str, Any]) -> None:
    params["limit"] = page.limit + 1
    if page.after is not None:
        where.append(AFTER.format(id=id_column))
        params["after_at"], params["after_id"] = page.after.created_at, page.after.id


# -- parts ----------------------------------------------------------------------------------------------
class SQLiteKeys:
    def __init__(self, db: _Database):
        self._db = db

    @staticmethod
    def _key(row: dict[str, Any]) -> SigningKey:
        row["public_jwk"] = json.loads(row["public_jwk"])
        return cast(SigningKey, row)

    async def all(self) -> list[SigningKey]:
        return [self._key(r) for r in self._db.all("SELECT * FROM signing_keys ORDER BY created_at DESC, rowid DESC")]

    async def active_kid(self) -> str | None:
        row = self._db.one(
            "SELECT kid FROM signing_keys WHERE retired_at IS NULL ORDER BY created_at DESC, rowid DESC LIMIT 1"
        )
        return str(row["kid"]) if row else None

    @staticmethod
    def _insert(conn: sqlite3.Connection, key: SigningKey) -> None:
        conn.execute(
            "INSERT INTO signing_keys (kid, alg, private_pem, public_jwk, created_at, retired_at) VALUES (?,?,?,?,?,NULL)",
            (key["kid"], key["alg"], key["private_pem"], json.dumps(key["public_jwk"]), key["created_at"]),
        )

    async def add_first(self, key: SigningKey) -> bool:
        async with self._db.awrite() as conn:
            if conn.execute("SELECT 1 FROM signing_keys WHERE retired_at IS NULL").fetchone():
                return False
            self._insert(conn, key)
            return True

    async def rotate(self, key: SigningKey, now: int) -> list[str]:
        async with self._db.awrite() as conn:
            retired = conn.execute(
                "UPDATE signing_keys SET retired_at = ?, private_pem = '' WHERE retired_at IS NULL RETURNING kid", (now,)
            ).fetchall()
            self._insert(conn, key)
        return [str(r[0]) for r in retired]

    async def drop_retired_before(self, cutoff: int) -> int:
        async with self._db.awrite() as conn:
            return int(
                conn.execute("DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < ?", (cutoff,)).rowcount
            )

    async def revoke(self, kid: str, now: int) -> bool:
        async with self._db.awrite() as conn:
            return int(conn.execute("DELETE FROM signing_keys WHERE kid = ?", (kid,)).rowcount) == 1


def _grant(row: dict[str, Any]) -> Grant:
    row["request"] = json.loads(row["request"]) if isinstance(row["request"], str) else row["request"]
    return cast(Grant, row)


def _record_event(conn: sqlite3.Connection, event: str, row: dict[str, Any], now: int) -> None:
    """One grant event, in the caller's transaction; ``seq`` grows in commit order (BEGIN IMMEDIATE
    serialises writers, AUTOINCREMENT never reuses a number)."""
    snapshot = {k: row[k] for k in GRANT_COLUMNS}
    if isinstance(snapshot["request"], str):
        snapshot["request"] = json.loads(snapshot["request"])
    conn.execute(
        "INSERT INTO grant_events (event, grant_id, requester, grant_json, created_at) VALUES (?, ?, ?, ?, ?)",
        (event, row["id"], row["requester"], _json(snapshot), now),
    )


class SQLiteAgents:
    def __init__(self, db: _Database):
        self._db = db

    @staticmethod
    def _check_people(conn: sqlite3.Connection, owner: str | None, approver: str | None) -> None:
        """Owners and approvers are persons: never an agent's e-mail (D11)."""
        for field, email in (("owner", owner), ("approver", approver)):
            if email is not None and conn.execute("SELECT 1 FROM agents WHERE email = ?", (email.lower(),)).fetchone():
                raise Conflict(field)

    @staticmethod
    def _check_key(conn: sqlite3.Connection, key_id: str, agent_id: str) -> None:
        if conn.execute("SELECT 1 FROM agents WHERE key_id = ? AND agent_id != ?", (key_id, agent_id)).fetchone():
            raise Conflict("publicKey")

    async def create(self, agent: Agent, reserved_emails: frozenset[str]) -> Agent:
        row: dict[str, Any] = {c: agent.get(c) for c in AGENT_COLUMNS}
        row["key_generation"] = row["key_generation"] or 1
        email = str(row["email"])
        if email.lower() in {e.lower() for e in reserved_emails}:
            raise Conflict("email")
        async with self._db.awrite() as conn:
            if conn.execute(
                """SELECT 1 FROM agents WHERE email = :email OR owner = :email OR approver = :email
                   UNION ALL SELECT 1 FROM delegations WHERE delegator = :email LIMIT 1""",
                {"email": email},
            ).fetchone():
                raise Conflict("email")
            self._check_key(conn, row["key_id"], row["agent_id"])
            self._check_people(conn, row["owner"], row["approver"])
            try:
                conn.execute(
                    f"INSERT INTO agents ({', '.join(AGENT_COLUMNS)}) VALUES ({', '.join(':' + c for c in AGENT_COLUMNS)})",  # noqa: S608 - fixed column list
                    row,
                )
            except sqlite3.IntegrityError as exc:
                raise Conflict("email" if "agents.email" in str(exc) else "id") from None
        return cast(Agent, row)

    async def get(self, ident: str) -> Agent | None:
        return cast(Agent | None, self._db.one("SELECT * FROM agents WHERE agent_id = ? OR email = ?", (ident, ident.lower())))

    async def get_by_id(self, agent_id: str) -> Agent | None:
        return cast(Agent | None, self._db.one("SELECT * FROM agents WHERE agent_id = ?", (agent_id,)))

    async def list(self, page: PageRequest) -> tuple[list[Agent], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        _after(page, "agent_id", where, params)
        rows = self._db.all(
            f"SELECT * FROM agents WHERE {' AND '.join(where)} ORDER BY created_at DESC, agent_id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return cast(list[Agent], found), more

    async def update(self, agent_id: str, changes: dict[str, Any]) -> Agent | None:
        cols = [c for c in AGENT_CHANGEABLE if c in changes]
        async with self._db.awrite() as conn:
            current = conn.execute("SELECT * FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
            if current is None:
                return None
            self._check_people(conn, changes.get("owner"), changes.get("approver"))
            if "key_id" in changes:
                self._check_key(conn, changes["key_id"], agent_id)
            if not cols:
                return cast(Agent, dict(current))
            new_key = "public_key" in changes and changes["public_key"] != current["public_key"]
            sets = [f"{c} = :set_{c}" for c in cols]
            if new_key:
                sets.append("key_generation = key_generation + 1")  # tokens of the old key stop working (D11)
            row = conn.execute(
                f"UPDATE agents SET {', '.join(sets)} WHERE agent_id = :agent_id RETURNING *",  # noqa: S608 - column names from a fixed set
                {**{f"set_{c}": changes[c] for c in cols}, "agent_id": agent_id},
            ).fetchone()
        return cast(Agent, dict(row))

    async def retire(
        self, agent_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Agent, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        async with self._db.awrite() as conn:
            found = conn.execute("SELECT * FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
            if found is None or (found["status"] == "disabled" and not delete):
                return None
            agent = dict(found)
            revoked = [
                dict(r)
                for r in conn.execute(
                    f"""UPDATE grants SET status = 'revoked', revoked_by = :by, revoked_at = :now,
                           decision_reason = :reason, version = version + 1
                        WHERE requester_id = :agent_id AND status IN ('pending', 'approved') AND {live}
                        RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                    {**params, "by": by, "now": now, "reason": reason, "agent_id": agent_id},
                ).fetchall()
            ]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            for grant in revoked:
                _record_event(conn, "grant.revoked", grant, now)
            conn.execute(
                "UPDATE delegations SET status = 'revoked', revoked_by = ?, revoked_at = ? WHERE delegate = ? AND status = 'active'",
                (by, now, agent["email"]),
            )
            conn.execute("DELETE FROM challenges WHERE agent_id = ?", (agent_id,))
            if delete:
                conn.execute("DELETE FROM agents WHERE agent_id = ?", (agent_id,))
            else:
                conn.execute("UPDATE agents SET status = 'disabled', key_generation = key_generation + 1, updated_at = ? WHERE agent_id = ?", (now, agent_id))
        return cast(Agent, agent), [_grant(g) for g in revoked]

    async def decidable_by(self, email: str) -> builtins.list[str]:
        rows = self._db.all(
            "SELECT agent_id FROM agents WHERE owner = ? OR approver = ? ORDER BY created_at, agent_id", (email, email)
        )
        return [str(r["agent_id"]) for r in rows]


class SQLiteChallenges:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, challenge: str, agent_id: str, expires_at: int, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM challenges WHERE expires_at < ?", (now,))  # index range
            conn.execute(
                "INSERT INTO challenges (challenge, agent_id, expires_at) VALUES (?, ?, ?)", (challenge, agent_id, expires_at)
            )

    async def take(self, challenge: str, agent_id: str) -> int | None:
        # The DELETE decides who wins: of any number of concurrent takers in any process,
        # exactly one sees the row.
        async with self._db.awrite() as conn:
            row = conn.execute(
                "DELETE FROM challenges WHERE challenge = ? AND agent_id = ? RETURNING expires_at", (challenge, agent_id)
            ).fetchone()
        return int(row[0]) if row else None


class SQLiteGrants:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, grant: Grant, events: Sequence[str]) -> Grant:
        row: dict[str, Any] = {k: grant.get(k) for k in GRANT_COLUMNS}
        row["version"] = 1
        stored = {**row, "request": _json(row["request"])}
        async with self._db.awrite() as conn:
            try:
                conn.execute(
                    f"INSERT INTO grants ({', '.join(GRANT_COLUMNS)}) VALUES ({', '.join(':' + c for c in GRANT_COLUMNS)})",  # noqa: S608 - fixed column list
                    stored,
                )
            except sqlite3.IntegrityError:
                raise Conflict("id") from None
            for event in events:
                _record_event(conn, event, row, int(row["created_at"]))
        return cast(Grant, row)

    async def get(self, grant_id: str) -> Grant | None:
        row = self._db.one("SELECT * FROM grants WHERE id = ?", (grant_id,))
        return _grant(row) if row else None

    async def find_reusable(self, requester_id: str, reuse_key: str, lapse: Lapse) -> Grant | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        row = self._db.one(
            f"""SELECT * FROM grants WHERE requester_id = :requester_id AND reuse_key = :reuse_key
                AND status = 'approved' AND {live} ORDER BY created_at DESC, id DESC LIMIT 1""",  # noqa: S608 - generated from the Lapse
            {**params, "requester_id": requester_id, "reuse_key": reuse_key},
        )
        return _grant(row) if row else None

    async def list(
        self,
        *,
        lapse: Lapse,
        page: PageRequest,
        status: str | None = None,
        requester: str | None = None,
        requester_ids: Sequence[str] | None = None,
    ) -> tuple[list[Grant], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        if status:
            clause, extra = status_sql(lapse, status, GRANT_COLUMNS)
            where.append(clause)
            params.update(extra)
        if requester:
            where.append("requester = :requester")
            params["requester"] = requester
        if requester_ids is not None:
            ids = list(dict.fromkeys(requester_ids))
            if not ids:
                return [], False
            where.append(f"requester_id IN ({', '.join(f':rid_{i}' for i in range(len(ids)))})")
            params.update({f"rid_{i}": v for i, v in enumerate(ids)})
        _after(page, "id", where, params)
        rows = self._db.all(
            f"SELECT * FROM grants WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608 - generated clauses, values bound
            params,
        )
        found, more = _page(rows, page.limit)
        return [_grant(r) for r in found], more

    async def update_if(
        self, grant_id: str, *, expect: Sequence[str], changes: dict[str, Any], event: str, lapse: Lapse, now: int
    ) -> Grant | None:
        """The conditional UPDATE and its RETURNING decide between concurrent callers in any process."""
        if not expect:
            return None
        cols = [c for c in changes if c in GRANT_CHANGEABLE]
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        sets = ", ".join([*(f"{c} = :set_{c}" for c in cols), "version = version + 1"])
        marks = ", ".join(f":expect_{i}" for i in range(len(expect)))
        params.update({f"set_{c}": (_json(changes[c]) if c == "request" else changes[c]) for c in cols})
        params.update({f"expect_{i}": s for i, s in enumerate(expect)})
        params["id"] = grant_id
        async with self._db.awrite() as conn:
            row = conn.execute(
                f"UPDATE grants SET {sets} WHERE id = :id AND status IN ({marks}) AND {live} RETURNING *",  # noqa: S608 - column names from a fixed set
                params,
            ).fetchone()
            if row is None:
                return None
            updated = dict(row)
            _record_event(conn, event, updated, now)
        return _grant(updated)

    async def expire(self, lapse: Lapse, now: int, events_before: int) -> builtins.list[Grant]:
        # Each lapse term is an index range (grants_lapse on (status, expires_at), grants_status on
        # (status, created_at)), so a sweep costs nothing while nothing lapsed, however many grants
        # exist; the write lock is taken only when there is something to write.
        lapsed, params = lapsed_sql(lapse, GRANT_COLUMNS)
        found = self._db.one(f"SELECT 1 AS x FROM grants WHERE {lapsed} LIMIT 1", params)  # noqa: S608 - generated from the Lapse
        old_events = self._db.one("SELECT 1 AS x FROM grant_events WHERE created_at < ? LIMIT 1", (events_before,))
        if found is None and old_events is None:
            return []
        async with self._db.awrite() as conn:
            rows = [
                dict(r)
                for r in conn.execute(
                    f"UPDATE grants SET status = :expired, version = version + 1 WHERE {lapsed} RETURNING *",  # noqa: S608 - generated from the Lapse
                    {**params, "expired": EXPIRED},
                ).fetchall()
            ]
            rows.sort(key=lambda g: (g["created_at"], g["id"]))
            for row in rows:
                _record_event(conn, "grant.expired", row, now)
            conn.execute("DELETE FROM grant_events WHERE created_at < ?", (events_before,))
        return [_grant(r) for r in rows]

    async def events_after(self, seq: int, limit: int) -> builtins.list[GrantEvent]:
        rows = self._db.all("SELECT * FROM grant_events WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit))
        events: list[GrantEvent] = []
        for row in rows:
            grant = json.loads(row.pop("grant_json"))
            grant.setdefault("requester_id", grant["requester"])  # events recorded before migration 3
            grant.setdefault("reuse_key", None)
            row["grant"] = grant
            events.append(cast(GrantEvent, row))
        return events

    async def last_event_seq(self) -> int:
        row = self._db.one("SELECT max(seq) AS seq FROM grant_events")
        return int(row["seq"] or 0) if row else 0


class SQLiteRates:
    def __init__(self, db: _Database):
        self._db = db

    async def hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        # The upsert and its RETURNING decide the count inside the write lock: concurrent hits in
        # any process each get a different count. Ended windows go in the same transaction (an
        # index range on ends_at: nothing to do costs nothing).
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM rate_counters WHERE ends_at <= ?", (now,))
            row = conn.execute(
                """INSERT INTO rate_counters (key, window_start, count, ends_at) VALUES (?, ?, 1, ?)
                   ON CONFLICT (key, window_start) DO UPDATE SET count = count + 1 RETURNING count""",
                (key, window_start, window_start + window_ms),
            ).fetchone()
        return int(row[0])

    async def count(self, key: str, window_start: int) -> int:
        row = self._db.one("SELECT count FROM rate_counters WHERE key = ? AND window_start = ?", (key, window_start))
        return int(row["count"]) if row else 0


def _delegation(row: dict[str, Any]) -> Delegation:
    row["scopes"] = json.loads(row["scopes"])
    return cast(Delegation, row)


class SQLiteDelegations:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, delegation: Delegation) -> Delegation:
        row: dict[str, Any] = {k: delegation.get(k) for k in DELEGATION_COLUMNS}
        async with self._db.awrite() as conn:
            if conn.execute("SELECT 1 FROM agents WHERE email = ?", (str(row["delegator"]).lower(),)).fetchone():
                raise Conflict("delegator")  # a delegator is a person (D11)
            try:
                conn.execute(
                    f"INSERT INTO delegations ({', '.join(DELEGATION_COLUMNS)}) VALUES ({', '.join(':' + c for c in DELEGATION_COLUMNS)})",  # noqa: S608 - fixed column list
                    {**row, "scopes": _json(row["scopes"])},
                )
            except sqlite3.IntegrityError:
                raise Conflict("id") from None
        return cast(Delegation, row)

    async def get(self, delegation_id: str) -> Delegation | None:
        row = self._db.one("SELECT * FROM delegations WHERE id = ?", (delegation_id,))
        return _delegation(row) if row else None

    async def list(self, *, party: str | None, page: PageRequest) -> tuple[list[Delegation], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        if party is not None:
            where.append("(delegator = :party OR delegate = :party)")
            params["party"] = party
        _after(page, "id", where, params)
        rows = self._db.all(
            f"SELECT * FROM delegations WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return [_delegation(r) for r in found], more

    async def revoke(self, delegation_id: str, by: str, now: int) -> Delegation | None:
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE delegations SET status = 'revoked', revoked_at = ?, revoked_by = ?
                   WHERE id = ? AND status = 'active' RETURNING *""",
                (now, by, delegation_id),
            ).fetchone()
        return _delegation(dict(row)) if row else None

    async def live_for(self, delegate: str, lapse: Lapse) -> builtins.list[Delegation]:
        live, params = not_lapsed_sql(lapse, DELEGATION_COLUMNS)
        rows = self._db.all(
            f"""SELECT * FROM delegations WHERE delegate = :delegate AND status = 'active' AND {live}
                ORDER BY created_at, id""",  # noqa: S608 - generated from the Lapse
            {**params, "delegate": delegate},
        )
        return [_delegation(r) for r in rows]


class SQLiteStore:
    """``grantd.store.Store`` on one SQLite file; see grantd.store for the contract of each method."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            file = Path(self.path)
            _make_private_dirs(file.parent)
            if not _create_private_file(file):
                _check_private(file)
            for suffix in COMPANIONS:
                _check_private(Path(self.path + suffix))
        self._db = _Database(self.path)
        self.db = sqlite_utils.Database(self._db.conn, execute_plugins=False)
        self.keys = SQLiteKeys(self._db)
        self.agents = SQLiteAgents(self._db)
        self.challenges = SQLiteChallenges(self._db)
        self.grants = SQLiteGrants(self._db)
        self.delegations = SQLiteDelegations(self._db)
        self.rates = SQLiteRates(self._db)
        self._checkpointer: threading.Thread | None = None
        self._stop_checkpoints = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        return self.migrate_sync()

    def migrate_sync(self) -> list[int]:
        """Apply pending migrations in one write transaction: a second process waits for the lock,
        then finds them applied."""
        applied: list[int] = []
        with self._db.write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at INTEGER)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for version, name, migration in MIGRATIONS:
                if version in done:
                    continue
                migration(self.db)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", (version, name, _now_ms())
                )
                applied.append(version)
        return applied

    def schema_version(self) -> int:
        try:
            row = self._db.conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
        except sqlite3.OperationalError:
            return 0  # not migrated yet
        return int(row[0] or 0)

    async def ping(self) -> bool:
        try:
            self._db.conn.execute("SELECT 1 FROM schema_migrations LIMIT 1").fetchall()
        except sqlite3.Error:
            return False
        return True

    def serving(self) -> None:
        """A server process starts: checkpoint the WAL in a background thread instead of inside
        whichever commit crosses the auto-checkpoint threshold (an fsync on the event loop)."""
        if self._checkpointer is not None or self.path == ":memory:":
            return
        for conn in (self._db.conn, self._db.wconn):
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="sqlite-checkpoint", daemon=True)
        self._checkpointer.start()

    def _checkpoint_loop(self) -> None:
        conn = self._db.connect(0)
        try:
            while not self._stop_checkpoints.wait(CHECKPOINT_INTERVAL):
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    continue  # busy with another process's checkpoint: next round
        finally:
            conn.close()

    def close(self) -> None:
        self._stop_checkpoints.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=5)
        if self._db.wconn is not self._db.conn:
            self._db.wconn.close()
        self._db.conn.close()

    async def backup(self, target: str) -> None:
        """``VACUUM INTO`` a new file created 0600 beforehand (SQLite would create it 0644), from a
        connection of its own in a thread: a copy of a large file must not stall the event loop."""
        await asyncio.to_thread(self._backup, Path(target))

    def _backup(self, file: Path) -> None:
        _make_private_dirs(file.parent)
        if not _create_private_file(file):
            if file.stat().st_size:
                raise StoreError(f"backup target {file} exists and is not empty")
            os.chmod(file, FILE_MODE)
        conn = self._db.connect(BUSY_TIMEOUT_MS)
        try:
            conn.execute("VACUUM INTO ?", (str(file),))
        finally:
            conn.close()
        os.chmod(file, FILE_MODE)


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], SQLiteStore]]:
    def open_sqlite(config: Any) -> SQLiteStore:
        return SQLiteStore(config.resolve_path(config.storage.path))

    return {"sqlite": open_sqlite}
