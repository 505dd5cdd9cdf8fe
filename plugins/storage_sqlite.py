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
import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from grantd.core.lifecycle import EXPIRED, Lapse
from grantd.core.paging import PageRequest
from grantd.hookspecs import hookimpl
from grantd.store import Conflict, LimitReached, OwnerBound, StoreError
from grantd.store.records import (
    AGENT_CHANGEABLE,
    AGENT_COLUMNS,
    CONSENT_COLUMNS,
    CREDENTIAL_COLUMNS,
    DELEGATION_COLUMNS,
    DEVICE_CODE_COLUMNS,
    GRANT_CHANGEABLE,
    GRANT_COLUMNS,
    PERSON_CHANGEABLE,
    PERSON_COLUMNS,
    REFRESH_TOKEN_COLUMNS,
    REGISTRATION_COLUMNS,
    SESSION_COLUMNS,
    WEBAUTHN_CHALLENGE_COLUMNS,
    Agent,
    Consent,
    Delegation,
    DeviceCode,
    Grant,
    GrantEvent,
    PasskeyCredential,
    Person,
    RefreshToken,
    RegistrationUrl,
    Session,
    SigningKey,
    WebAuthnChallenge,
)
from grantd.store.sql import lapsed_sql, not_lapsed_sql, status_sql

if TYPE_CHECKING:
    # sqlite-utils runs the migrations only; a server process on a current schema never imports it
    # (4.5 MiB per process, issue 14).
    import sqlite_utils

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


def _m5_people(db: sqlite_utils.Database) -> None:
    # Issue "People": persons (e-mails unique across persons and agents, D11, checked by both
    # inserts), their passkeys, server-side sessions, registration URLs and WebAuthn challenges.
    db.execute(
        """CREATE TABLE people (
            person_id TEXT PRIMARY KEY,
            email TEXT NOT NULL UNIQUE,
            name TEXT NOT NULL,
            admin INTEGER NOT NULL,
            status TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX people_created ON people (created_at DESC, person_id DESC)")
    db.execute(
        """CREATE TABLE passkey_credentials (
            credential_id TEXT PRIMARY KEY,
            person_id TEXT NOT NULL,
            rp_id TEXT NOT NULL,
            public_key TEXT NOT NULL,
            sign_count INTEGER NOT NULL,
            transports TEXT NOT NULL,
            aaguid TEXT NOT NULL,
            name TEXT NOT NULL,
            backed_up INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            last_used_at INTEGER
        )"""
    )
    db.execute("CREATE INDEX passkey_credentials_person ON passkey_credentials (person_id, created_at)")
    db.execute(
        """CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            family_id TEXT NOT NULL,
            person_id TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            last_seen_at INTEGER NOT NULL,
            user_agent TEXT NOT NULL,
            revoked_at INTEGER
        )"""
    )
    db.execute("CREATE INDEX sessions_family ON sessions (family_id)")
    db.execute("CREATE INDEX sessions_person ON sessions (person_id, created_at DESC)")
    db.execute("CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC)")
    db.execute("CREATE INDEX sessions_expires ON sessions (expires_at)")
    db.execute(
        """CREATE TABLE registration_urls (
            id TEXT PRIMARY KEY,
            token_hash TEXT NOT NULL UNIQUE,
            email TEXT NOT NULL,
            admin INTEGER NOT NULL,
            purpose TEXT NOT NULL,
            rp_id TEXT NOT NULL,
            created_by TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            used_at INTEGER
        )"""
    )
    db.execute("CREATE INDEX registration_urls_email ON registration_urls (email)")
    db.execute("CREATE INDEX registration_urls_created ON registration_urls (created_at DESC, id DESC)")
    db.execute(
        """CREATE TABLE webauthn_challenges (
            challenge TEXT PRIMARY KEY,
            purpose TEXT NOT NULL,
            rp_id TEXT NOT NULL,
            person_id TEXT,
            registration_id TEXT,
            expires_at INTEGER NOT NULL
        )"""
    )
    db.execute("CREATE INDEX webauthn_challenges_expires ON webauthn_challenges (expires_at)")
    db.execute("CREATE INDEX webauthn_challenges_person ON webauthn_challenges (person_id)")


def _m6_oauth(db: sqlite_utils.Database) -> None:
    # Issue "OAuth": one-time records (codes, flow states, used assertion ids), refresh-token
    # families, device codes, remembered consent; guest sessions of SP login (person_id NULL, idp,
    # email, name). SQLite cannot make a column nullable: sessions is rebuilt (the documented
    # 12-step way, inside the migration's transaction), keeping its rows and indexes.
    db.execute(
        """CREATE TABLE oauth_onetime (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            data TEXT NOT NULL,
            expires_at INTEGER NOT NULL,
            PRIMARY KEY (kind, key)
        ) WITHOUT ROWID"""
    )
    db.execute("CREATE INDEX oauth_onetime_expires ON oauth_onetime (expires_at)")
    db.execute(
        """CREATE TABLE refresh_tokens (
            token_hash TEXT PRIMARY KEY,
            family_id TEXT NOT NULL,
            client_id TEXT NOT NULL,
            person_id TEXT NOT NULL,
            scope TEXT NOT NULL,
            auth_time INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            used_at INTEGER,
            revoked_at INTEGER
        )"""
    )
    db.execute("CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id)")
    db.execute("CREATE INDEX refresh_tokens_person ON refresh_tokens (person_id, client_id)")
    db.execute("CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at)")
    db.execute(
        """CREATE TABLE device_codes (
            device_code_hash TEXT PRIMARY KEY,
            user_code TEXT NOT NULL UNIQUE,
            client_id TEXT NOT NULL,
            scope TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            interval INTEGER NOT NULL,
            last_polled_at INTEGER,
            status TEXT NOT NULL,
            person_id TEXT,
            decided_at INTEGER
        )"""
    )
    db.execute("CREATE INDEX device_codes_expires ON device_codes (expires_at)")
    db.execute(
        """CREATE TABLE consents (
            person_id TEXT NOT NULL,
            client_id TEXT NOT NULL,
            scope TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (person_id, client_id)
        ) WITHOUT ROWID"""
    )
    db.execute(
        """CREATE TABLE sessions_new (
            session_id TEXT PRIMARY KEY,
            family_id TEXT NOT NULL,
            person_id TEXT,
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            last_seen_at INTEGER NOT NULL,
            user_agent TEXT NOT NULL,
            revoked_at INTEGER,
            idp TEXT,
            email TEXT,
            name TEXT
        )"""
    )
    db.execute(
        """INSERT INTO sessions_new (session_id, family_id, person_id, created_at, expires_at, last_seen_at,
                                     user_agent, revoked_at)
           SELECT session_id, family_id, person_id, created_at, expires_at, last_seen_at, user_agent, revoked_at
           FROM sessions"""
    )
    db.execute("DROP TABLE sessions")
    db.execute("ALTER TABLE sessions_new RENAME TO sessions")
    db.execute("CREATE INDEX sessions_family ON sessions (family_id)")
    db.execute("CREATE INDEX sessions_person ON sessions (person_id, created_at DESC)")
    db.execute("CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC)")
    db.execute("CREATE INDEX sessions_expires ON sessions (expires_at)")
    # D3: keys of several algorithms coexist; the active key is looked up per algorithm.
    db.execute("CREATE INDEX signing_keys_alg ON signing_keys (alg, retired_at, created_at)")


def _m7_device_address(db: sqlite_utils.Database) -> None:
    # D12: the /device page says where a device sign-in came from.
    db.execute("ALTER TABLE device_codes ADD COLUMN client_address TEXT")


def _m8_session_credentials(db: sqlite_utils.Database) -> None:
    # Issue 19: a session records the passkey that started it; deleting the passkey ends it.
    db.execute("ALTER TABLE sessions ADD COLUMN credential_id TEXT")
    db.execute("CREATE INDEX sessions_credential ON sessions (credential_id)")


# A deleted person's e-mail (migration 9): no person or agent has it, a registration URL was redeemed for it.
_GONE = """(NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower({email}))
            AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower({email}))
            AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower({email}) AND r.used_at IS NOT NULL))"""


def _m9_bound_parties(db: sqlite_utils.Database) -> None:
    # Issue 19 (D11): owners and approvers are bound to the person's id, not the e-mail. Existing
    # rows are bound to the persons their e-mails name today (lowercase, as stored); e-mails that
    # name no person stay unbound until that person is created. Pending grants are counted per
    # owner (pending_per_owner): a partial index keeps the count to the pending rows.
    db.execute("ALTER TABLE agents ADD COLUMN owner_id TEXT")
    db.execute("ALTER TABLE agents ADD COLUMN approver_id TEXT")
    db.execute("UPDATE agents SET owner_id = (SELECT person_id FROM people WHERE people.email = lower(agents.owner))")
    db.execute("UPDATE agents SET approver_id = (SELECT person_id FROM people WHERE people.email = lower(agents.approver))")
    # An e-mail that names no person now but redeemed a registration URL once was a person who was
    # deleted before this migration: bind it to a tombstone id (nobody's), and end the delegations
    # that still name that person, so nobody created later with the e-mail inherits them.
    for party in ("owner", "approver"):
        db.execute(
            f"""UPDATE agents SET {party}_id = 'usr_deleted:' || {party}
                WHERE {party}_id IS NULL AND {_GONE.format(email=f"agents.{party}")}"""  # noqa: S608 - fixed names
        )
    db.execute(
        f"""UPDATE delegations SET status = 'revoked', revoked_by = 'grantd migration 9', revoked_at = ?
            WHERE status = 'active' AND ({_GONE.format(email="delegations.delegator")}
                                         OR {_GONE.format(email="delegations.delegate")})""",  # noqa: S608 - fixed names
        [_now_ms()],
    )
    db.execute("CREATE INDEX agents_owner_id ON agents (owner_id)")
    db.execute("CREATE INDEX agents_approver_id ON agents (approver_id)")
    db.execute("CREATE INDEX grants_pending_requester ON grants (requester_id) WHERE status = 'pending'")


MIGRATIONS: list[tuple[int, str, Callable[[sqlite_utils.Database], None]]] = [
    (1, "signing keys, agents, challenges", _m1_core),
    (2, "grants, grant events, delegations", _m2_grants),
    (3, "key generation, requester ids, agent paging, retired keys without private keys", _m3_principals),
    (4, "rate counters", _m4_rate_counters),
    (5, "people, passkeys, sessions, registration URLs, WebAuthn challenges", _m5_people),
    (6, "OAuth one-time records, refresh tokens, device codes, consents; guest sessions; keys per algorithm", _m6_oauth),
    (7, "device codes remember the client address that asked", _m7_device_address),
    (8, "the passkey that started each session", _m8_session_credentials),
    (9, "owners and approvers bound to person ids; pending grants per requester", _m9_bound_parties),
]

# Column allow-lists (grantd.store.records): the only names that ever reach SQL text.
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
        # 512 KiB of page cache per connection instead of SQLite's 2 MiB: each server process holds
        # three connections, and the pages grantd reads per request (an index path and a row) stay
        # hot in either; the rest come from the OS page cache. Peak RSS -4 MiB per process, CPU per
        # answer unchanged within the bench's noise (issue 14, docs/performance.md).
        conn.execute("PRAGMA cache_size = -512")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.create_function("grantd_fold", 1, _fold, deterministic=True)
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

    async def active_kid(self, alg: str = "EdDSA") -> str | None:
        row = self._db.one(
            "SELECT kid FROM signing_keys WHERE alg = ? AND retired_at IS NULL ORDER BY created_at DESC, rowid DESC LIMIT 1",
            (alg,),
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
            if conn.execute("SELECT 1 FROM signing_keys WHERE alg = ? AND retired_at IS NULL", (key["alg"],)).fetchone():
                return False
            self._insert(conn, key)
            return True

    async def rotate(self, key: SigningKey, now: int) -> list[str]:
        async with self._db.awrite() as conn:
            retired = conn.execute(
                "UPDATE signing_keys SET retired_at = ?, private_pem = '' WHERE alg = ? AND retired_at IS NULL RETURNING kid",
                (now, key["alg"]),
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

    async def create(self, agent: Agent, reserved_emails: frozenset[str], *, max_per_owner: int = 0) -> Agent:
        row: dict[str, Any] = {c: agent.get(c) for c in AGENT_COLUMNS}
        row["key_generation"] = row["key_generation"] or 1
        email = str(row["email"])
        if email.lower() in {e.lower() for e in reserved_emails}:
            raise Conflict("email")
        async with self._db.awrite() as conn:
            row["owner_id"] = _person_id_of(conn, row["owner"])
            row["approver_id"] = _person_id_of(conn, row["approver"])
            if max_per_owner > 0:
                owned = conn.execute(
                    "SELECT count(*) FROM agents WHERE owner_id = ?" if row["owner_id"] else
                    "SELECT count(*) FROM agents WHERE owner_id IS NULL AND owner = ?",
                    (row["owner_id"] or row["owner"],),
                ).fetchone()[0]
                if owned >= max_per_owner:
                    raise LimitReached("agents_per_person", max_per_owner)
            if conn.execute(
                """SELECT 1 FROM agents WHERE email = :email OR owner = :email OR approver = :email
                   UNION ALL SELECT 1 FROM delegations WHERE delegator = :email
                   UNION ALL SELECT 1 FROM people WHERE email = :lower LIMIT 1""",
                {"email": email, "lower": email.lower()},
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
            values = {f"set_{c}": changes[c] for c in cols}
            for party in ("owner", "approver"):  # a new e-mail is bound to its person now (D11)
                if party in changes and changes[party] != current[party]:
                    sets.append(f"{party}_id = :set_{party}_id")
                    values[f"set_{party}_id"] = _person_id_of(conn, changes[party])
            if new_key:
                sets.append("key_generation = key_generation + 1")  # tokens of the old key stop working (D11)
            row = conn.execute(
                f"UPDATE agents SET {', '.join(sets)} WHERE agent_id = :agent_id RETURNING *",  # noqa: S608 - column names from a fixed set
                {**values, "agent_id": agent_id},
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

    async def decidable_by(self, person_id: str) -> builtins.list[str]:
        rows = self._db.all(
            "SELECT agent_id FROM agents WHERE owner_id = ? OR approver_id = ? ORDER BY created_at, agent_id",
            (person_id, person_id),
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

    async def create(self, grant: Grant, events: Sequence[str], *, bound: OwnerBound | None = None) -> Grant:
        row: dict[str, Any] = {k: grant.get(k) for k in GRANT_COLUMNS}
        row["version"] = 1
        stored = {**row, "request": _json(row["request"])}
        async with self._db.awrite() as conn:  # BEGIN IMMEDIATE: one writer at a time, so the count holds
            if bound is not None and bound.limit > 0 and row["status"] == "pending":
                self._check_owner_bound(conn, str(row["requester_id"]), bound)
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

    @staticmethod
    def _check_owner_bound(conn: sqlite3.Connection, requester_id: str, bound: OwnerBound) -> None:
        agent = conn.execute("SELECT owner_id, owner FROM agents WHERE agent_id = ?", (requester_id,)).fetchone()
        if agent is None:
            return  # a person's own request, or the management token's for someone not enrolled
        live, params = not_lapsed_sql(bound.lapse, GRANT_COLUMNS)
        same_owner = "owner_id = :owner" if agent["owner_id"] else "owner_id IS NULL AND owner = :owner"
        count = conn.execute(
            f"""SELECT count(*) FROM grants WHERE status = 'pending' AND {live}
                AND requester_id IN (SELECT agent_id FROM agents WHERE {same_owner})""",  # noqa: S608 - generated from the Lapse
            {**params, "owner": agent["owner_id"] or agent["owner"]},
        ).fetchone()[0]
        if count >= bound.limit:
            raise LimitReached("pending_per_owner", bound.limit)

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

    async def wait_for_events(self, seconds: float) -> None:
        """SQLite cannot tell another process's commit: wait the poll interval (the hub polls)."""
        await asyncio.sleep(seconds)

    async def summary(self, lapse: Lapse) -> tuple[dict[str, int], int | None]:
        # Index-only: the stored counts come from grants_status, each lapse term is an index range
        # (grants_status / grants_lapse), the oldest pending one a range scan's first entry.
        counts = {r["status"]: int(r["n"]) for r in self._db.all("SELECT status, count(*) AS n FROM grants GROUP BY status")}
        for stored in lapse.cutoffs:
            if not counts.get(stored):
                continue
            clause, params = lapsed_sql(lapse, GRANT_COLUMNS, only=stored)
            row = self._db.one(f"SELECT count(*) AS n FROM grants WHERE {clause}", params)  # noqa: S608 - generated from the Lapse
            moved = int(row["n"]) if row else 0
            counts[stored] -= moved
            counts[EXPIRED] = counts.get(EXPIRED, 0) + moved
        clause, params = status_sql(lapse, "pending", GRANT_COLUMNS)
        row = self._db.one(f"SELECT min(created_at) AS oldest FROM grants WHERE {clause}", params)  # noqa: S608 - generated from the Lapse
        oldest = row["oldest"] if row else None
        return {k: v for k, v in counts.items() if v}, (int(oldest) if oldest is not None else None)


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


# -- people (grantd.store.people) ----------------------------------------------------------------------
def _fold(value: Any) -> Any:
    """Case folding for search, the same in SQL as in Python (SQLite's lower() is ASCII-only)."""
    return value.casefold() if isinstance(value, str) else value


def _insert(conn: sqlite3.Connection, table: str, columns: Sequence[str], row: dict[str, Any]) -> None:
    conn.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})",  # noqa: S608 - fixed table and column lists
        row,
    )


def _person(row: Any) -> Person:
    person = dict(row)
    person["admin"] = bool(person["admin"])
    return cast(Person, person)


def _credential(row: Any) -> PasskeyCredential:
    credential = dict(row)
    credential["transports"] = json.loads(credential["transports"])
    credential["backed_up"] = bool(credential["backed_up"])
    return cast(PasskeyCredential, credential)


def _registration(row: Any) -> RegistrationUrl:
    registration = dict(row)
    registration["admin"] = bool(registration["admin"])
    return cast(RegistrationUrl, registration)


def _person_id_of(conn: sqlite3.Connection, email: Any) -> str | None:
    """The person an owner/approver e-mail names now (D11), in the caller's transaction."""
    if not email:
        return None
    found = conn.execute("SELECT person_id FROM people WHERE email = ?", (str(email).lower(),)).fetchone()
    return str(found[0]) if found else None


def _insert_person(conn: sqlite3.Connection, person: Person, *, unnamed: bool = False) -> Person:
    """In the caller's transaction: an e-mail is unique across persons and agents (D11); agents that
    name the e-mail without an id are bound to the new person, or with ``unnamed`` any naming
    refuses the insert (``Conflict("named")``)."""
    row: dict[str, Any] = {c: person.get(c) for c in PERSON_COLUMNS}
    row["email"] = str(row["email"]).lower()
    row["admin"] = bool(row["admin"])
    if conn.execute("SELECT 1 FROM agents WHERE email = ?", (row["email"],)).fetchone():
        raise Conflict("email")
    if unnamed and conn.execute(
        """SELECT 1 FROM agents WHERE owner = :email OR approver = :email
           UNION ALL SELECT 1 FROM delegations WHERE status = 'active' AND (delegator = :email OR delegate = :email)
           LIMIT 1""",
        {"email": row["email"]},
    ).fetchone():
        raise Conflict("named")
    try:
        _insert(conn, "people", PERSON_COLUMNS, row)
    except sqlite3.IntegrityError as exc:
        raise Conflict("email" if "people.email" in str(exc) else "id") from None
    for party in ("owner", "approver"):
        conn.execute(
            f"UPDATE agents SET {party}_id = ? WHERE {party} = ? AND {party}_id IS NULL",  # noqa: S608 - fixed names
            (row["person_id"], row["email"]),
        )
    return cast(Person, row)


def _insert_credential(conn: sqlite3.Connection, credential: PasskeyCredential) -> PasskeyCredential:
    row: dict[str, Any] = {c: credential.get(c) for c in CREDENTIAL_COLUMNS}
    row["transports"] = list(row["transports"] or [])
    row["backed_up"] = bool(row["backed_up"])
    try:
        _insert(conn, "passkey_credentials", CREDENTIAL_COLUMNS, {**row, "transports": _json(row["transports"])})
    except sqlite3.IntegrityError:
        raise Conflict("credential_id") from None
    return cast(PasskeyCredential, row)


class SQLitePeople:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, person: Person, *, unnamed: bool = False) -> Person:
        async with self._db.awrite() as conn:
            return _insert_person(conn, person, unnamed=unnamed)

    async def get(self, ident: str) -> Person | None:
        row = self._db.one("SELECT * FROM people WHERE person_id = ? OR email = ?", (ident, ident.lower()))
        return _person(row) if row else None

    async def list(self, page: PageRequest, search: str | None = None) -> tuple[builtins.list[Person], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        if search:
            # instr(), not LIKE: the search is a literal substring (% and _ are not wildcards)
            where.append("(instr(grantd_fold(email), :needle) > 0 OR instr(grantd_fold(name), :needle) > 0)")
            params["needle"] = _fold(search)
        _after(page, "person_id", where, params)
        rows = self._db.all(
            f"SELECT * FROM people WHERE {' AND '.join(where)} ORDER BY created_at DESC, person_id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return [_person(r) for r in found], more

    async def update(self, person_id: str, changes: dict[str, Any]) -> Person | None:
        cols = [c for c in PERSON_CHANGEABLE if c in changes]
        values = {f"set_{c}": (bool(changes[c]) if c == "admin" else changes[c]) for c in cols}
        async with self._db.awrite() as conn:
            if not cols:
                row = conn.execute("SELECT * FROM people WHERE person_id = ?", (person_id,)).fetchone()
            else:
                row = conn.execute(
                    f"UPDATE people SET {', '.join(f'{c} = :set_{c}' for c in cols)} WHERE person_id = :person_id RETURNING *",  # noqa: S608 - column names from a fixed set
                    {**values, "person_id": person_id},
                ).fetchone()
        return _person(row) if row else None

    async def delete(self, person_id: str, now: int) -> Person | None:
        async with self._db.awrite() as conn:
            row = conn.execute("DELETE FROM people WHERE person_id = ? RETURNING *", (person_id,)).fetchone()
            if row is None:
                return None
            conn.execute("DELETE FROM passkey_credentials WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM sessions WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM webauthn_challenges WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM registration_urls WHERE email = ? AND used_at IS NULL", (row["email"],))
            conn.execute("DELETE FROM refresh_tokens WHERE person_id = ?", (person_id,))
            conn.execute("DELETE FROM consents WHERE person_id = ?", (person_id,))
        return _person(row)

    async def retire(
        self, person_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Person, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS)
        async with self._db.awrite() as conn:
            found = conn.execute("SELECT * FROM people WHERE person_id = ?", (person_id,)).fetchone()
            if found is None:
                return None
            person = _person(found)
            email = person["email"]
            revoked = [
                dict(r)
                for r in conn.execute(
                    f"""UPDATE grants SET status = 'revoked', revoked_by = :by, revoked_at = :now,
                           decision_reason = :reason, version = version + 1
                        WHERE requester_id = :person_id AND status IN ('pending', 'approved') AND {live}
                        RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                    {**params, "by": by, "now": now, "reason": reason, "person_id": person_id},
                ).fetchall()
            ]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            for grant in revoked:
                _record_event(conn, "grant.revoked", grant, now)
            conn.execute(
                """UPDATE delegations SET status = 'revoked', revoked_by = :by, revoked_at = :now
                   WHERE status = 'active' AND (delegator = :email OR delegate = :email)""",
                {"by": by, "now": now, "email": email},
            )
            conn.execute("UPDATE sessions SET revoked_at = ? WHERE person_id = ? AND revoked_at IS NULL", (now, person_id))
            conn.execute("UPDATE refresh_tokens SET revoked_at = ? WHERE person_id = ? AND revoked_at IS NULL", (now, person_id))
            for party in ("owner", "approver"):
                conn.execute(
                    f"UPDATE agents SET {party}_id = ? WHERE {party} = ? AND {party}_id IS NULL",  # noqa: S608 - fixed names
                    (person_id, email),
                )
            if delete:
                conn.execute("DELETE FROM people WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM passkey_credentials WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM sessions WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM webauthn_challenges WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM registration_urls WHERE email = ? AND used_at IS NULL", (email,))
                conn.execute("DELETE FROM refresh_tokens WHERE person_id = ?", (person_id,))
                conn.execute("DELETE FROM consents WHERE person_id = ?", (person_id,))
            else:
                conn.execute("UPDATE people SET status = 'disabled', updated_at = ? WHERE person_id = ?", (now, person_id))
        return person, [_grant(g) for g in revoked]


class SQLiteCredentials:
    def __init__(self, db: _Database):
        self._db = db

    async def get(self, credential_id: str) -> PasskeyCredential | None:
        row = self._db.one("SELECT * FROM passkey_credentials WHERE credential_id = ?", (credential_id,))
        return _credential(row) if row else None

    async def list_for(self, person_id: str) -> builtins.list[PasskeyCredential]:
        rows = self._db.all(
            "SELECT * FROM passkey_credentials WHERE person_id = ? ORDER BY created_at, credential_id", (person_id,)
        )
        return [_credential(r) for r in rows]

    async def add(self, credential: PasskeyCredential) -> PasskeyCredential:
        async with self._db.awrite() as conn:
            return _insert_credential(conn, credential)

    async def use(self, credential_id: str, sign_count: int, now: int) -> PasskeyCredential | None:
        # The conditional UPDATE decides: of concurrent users of one count, exactly one moves it.
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE passkey_credentials SET sign_count = :count, last_used_at = :now
                   WHERE credential_id = :id AND (sign_count < :count OR (sign_count = 0 AND :count = 0))
                   RETURNING *""",
                {"count": int(sign_count), "now": now, "id": credential_id},
            ).fetchone()
        return _credential(row) if row else None

    async def delete(self, person_id: str, credential_id: str, now: int) -> bool | None:
        # Counted and deleted under the write lock: two deletes of the last two cannot both win.
        async with self._db.awrite() as conn:
            if not conn.execute(
                "SELECT 1 FROM passkey_credentials WHERE person_id = ? AND credential_id = ?", (person_id, credential_id)
            ).fetchone():
                return None
            deleted = conn.execute(
                """DELETE FROM passkey_credentials WHERE person_id = :person AND credential_id = :id
                   AND (SELECT count(*) FROM passkey_credentials WHERE person_id = :person) > 1""",
                {"person": person_id, "id": credential_id},
            ).rowcount
            if deleted == 1:
                conn.execute(
                    "UPDATE sessions SET revoked_at = ? WHERE credential_id = ? AND revoked_at IS NULL", (now, credential_id)
                )
        return deleted == 1


class SQLiteSessions:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, session: Session) -> Session:
        row: dict[str, Any] = {c: session.get(c) for c in SESSION_COLUMNS}
        async with self._db.awrite() as conn:
            # sessions that ended before this one began go (an index range: cheap)
            conn.execute("DELETE FROM sessions WHERE expires_at <= ?", (row["created_at"],))
            try:
                _insert(conn, "sessions", SESSION_COLUMNS, row)
            except sqlite3.IntegrityError:
                raise Conflict("session_id") from None
        return cast(Session, row)

    async def get(self, session_id: str, now: int) -> Session | None:
        row = self._db.one(
            "SELECT * FROM sessions WHERE session_id = ? AND revoked_at IS NULL AND expires_at > ?", (session_id, now)
        )
        return cast(Session, row) if row else None

    async def touch(self, session_id: str, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                "UPDATE sessions SET last_seen_at = ? WHERE session_id = ? AND last_seen_at < ?", (now, session_id, now)
            )

    async def list(self, page: PageRequest, person_id: str | None, now: int) -> tuple[builtins.list[Session], bool]:
        where = ["revoked_at IS NULL", "expires_at > :now"]
        params: dict[str, Any] = {"now": now}
        if person_id is not None:
            where.append("person_id = :person_id")
            params["person_id"] = person_id
        _after(page, "session_id", where, params)
        rows = self._db.all(
            f"SELECT * FROM sessions WHERE {' AND '.join(where)} ORDER BY created_at DESC, session_id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return cast(list[Session], found), more

    async def _revoke(self, column: str, value: str, now: int) -> int:
        async with self._db.awrite() as conn:
            return int(conn.execute(
                f"UPDATE sessions SET revoked_at = ? WHERE {column} = ? AND revoked_at IS NULL AND expires_at > ?",  # noqa: S608 - column from this class
                (now, value, now),
            ).rowcount)

    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke("family_id", family_id, now)

    async def revoke_person(self, person_id: str, now: int) -> int:
        return await self._revoke("person_id", person_id, now)


class SQLiteRegistrations:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, registration: RegistrationUrl) -> RegistrationUrl:
        row: dict[str, Any] = {c: registration.get(c) for c in REGISTRATION_COLUMNS}
        row["email"] = str(row["email"]).lower()
        row["admin"] = bool(row["admin"])
        async with self._db.awrite() as conn:
            try:
                _insert(conn, "registration_urls", REGISTRATION_COLUMNS, row)
            except sqlite3.IntegrityError as exc:
                raise Conflict("token_hash" if "token_hash" in str(exc) else "id") from None
        return cast(RegistrationUrl, row)

    async def get_by_token_hash(self, token_hash: str) -> RegistrationUrl | None:
        row = self._db.one("SELECT * FROM registration_urls WHERE token_hash = ?", (token_hash,))
        return _registration(row) if row else None

    async def list(self, page: PageRequest) -> tuple[builtins.list[RegistrationUrl], bool]:
        where = ["1 = 1"]
        params: dict[str, Any] = {}
        _after(page, "id", where, params)
        rows = self._db.all(
            f"SELECT * FROM registration_urls WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT :limit",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return [_registration(r) for r in found], more

    async def delete(self, registration_id: str) -> bool:
        async with self._db.awrite() as conn:
            return int(conn.execute("DELETE FROM registration_urls WHERE id = ?", (registration_id,)).rowcount) == 1

    async def complete(
        self, token_hash: str, person: Person, credential: PasskeyCredential, now: int
    ) -> tuple[Person, PasskeyCredential]:
        # One transaction: a Conflict anywhere rolls everything back (the URL stays unused).
        async with self._db.awrite() as conn:
            used = conn.execute(
                """UPDATE registration_urls SET used_at = ?
                   WHERE token_hash = ? AND used_at IS NULL AND expires_at > ? RETURNING *""",
                (now, token_hash, now),
            ).fetchone()
            if used is None:
                raise Conflict("token")  # unknown, used (by a concurrent redeemer too) or expired
            email = str(used["email"]).lower()
            if str(person["email"]).lower() != email:
                raise Conflict("email")  # the record must be for the URL's e-mail
            found = conn.execute("SELECT * FROM people WHERE email = ?", (email,)).fetchone()
            owner = _person(found) if found else _insert_person(conn, person)
            if used["purpose"] == "register" and conn.execute(
                "SELECT 1 FROM passkey_credentials WHERE person_id = ? AND rp_id = ?", (owner["person_id"], used["rp_id"])
            ).fetchone():
                raise Conflict("credential")  # a register URL never grafts onto an account with a passkey
            added = _insert_credential(conn, {**credential, "person_id": owner["person_id"]})
        return owner, added


class SQLiteWebAuthnChallenges:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, challenge: WebAuthnChallenge, now: int) -> None:
        row: dict[str, Any] = {c: challenge.get(c) for c in WEBAUTHN_CHALLENGE_COLUMNS}
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM webauthn_challenges WHERE expires_at <= ?", (now,))  # index range
            try:
                _insert(conn, "webauthn_challenges", WEBAUTHN_CHALLENGE_COLUMNS, row)
            except sqlite3.IntegrityError:
                raise Conflict("challenge") from None

    async def take(self, challenge: str, purpose: str, now: int) -> WebAuthnChallenge | None:
        # The DELETE decides: of any number of concurrent takers in any process, one sees the row.
        async with self._db.awrite() as conn:
            row = conn.execute(
                "DELETE FROM webauthn_challenges WHERE challenge = ? AND purpose = ? RETURNING *", (challenge, purpose)
            ).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(WebAuthnChallenge, dict(row))


# -- OAuth (grantd.store.oauth) --------------------------------------------------------------------------
def _was_live(rows: builtins.list[Any], now: int) -> int:
    """How many of the rows a revoking UPDATE returned (as they are now) were live before it."""
    return sum(1 for r in rows if r["used_at"] is None and r["expires_at"] > now)


def _union_scope(stored: str, new: str) -> str:
    """The stored scopes, then the new ones not among them (order kept: the same in every backend)."""
    scopes = stored.split()
    scopes += [s for s in dict.fromkeys(new.split()) if s not in scopes]
    return " ".join(scopes)


class SQLiteOneTime:
    def __init__(self, db: _Database):
        self._db = db

    async def put(self, kind: str, key: str, data: dict[str, Any], expires_at: int, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute("DELETE FROM oauth_onetime WHERE expires_at <= ?", (now,))  # index range; an expired twin too
            try:
                conn.execute(
                    "INSERT INTO oauth_onetime (kind, key, data, expires_at) VALUES (?, ?, ?, ?)",
                    (kind, key, _json(data), expires_at),
                )
            except sqlite3.IntegrityError:
                raise Conflict("key") from None

    async def take(self, kind: str, key: str, now: int) -> dict[str, Any] | None:
        # The DELETE decides: of any number of concurrent takers in any process, one sees the row.
        async with self._db.awrite() as conn:
            row = conn.execute(
                "DELETE FROM oauth_onetime WHERE kind = ? AND key = ? RETURNING data, expires_at", (kind, key)
            ).fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(dict[str, Any], json.loads(row["data"]))


class SQLiteRefreshTokens:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, token: RefreshToken) -> RefreshToken:
        row: dict[str, Any] = {c: token.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.awrite() as conn:
            # families that ended before this one began go (an index range: cheap)
            conn.execute("DELETE FROM refresh_tokens WHERE expires_at <= ?", (row["created_at"],))
            try:
                _insert(conn, "refresh_tokens", REFRESH_TOKEN_COLUMNS, row)
            except sqlite3.IntegrityError:
                raise Conflict("token_hash") from None
        return cast(RefreshToken, row)

    async def rotate(self, token_hash: str, new: RefreshToken, now: int) -> tuple[str, RefreshToken | None]:
        row: dict[str, Any] = {c: new.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.awrite() as conn:
            # The conditional UPDATE decides: of concurrent redeemers of one token, one marks it used.
            used = conn.execute(
                """UPDATE refresh_tokens SET used_at = :now
                   WHERE token_hash = :hash AND used_at IS NULL AND revoked_at IS NULL AND expires_at > :now
                   RETURNING *""",
                {"now": now, "hash": token_hash},
            ).fetchone()
            if used is not None:
                try:
                    _insert(conn, "refresh_tokens", REFRESH_TOKEN_COLUMNS, row)
                except sqlite3.IntegrityError:
                    raise Conflict("token_hash") from None  # rolls the redemption back too
                return "rotated", cast(RefreshToken, {**dict(used), "used_at": None})
            found = conn.execute("SELECT * FROM refresh_tokens WHERE token_hash = ?", (token_hash,)).fetchone()
            if found is None:
                return "unknown", None
            old = cast(RefreshToken, dict(found))
            if old["expires_at"] <= now:
                return "expired", old
            if old["revoked_at"] is not None and old["used_at"] is None:
                return "revoked", old
            # used before: a replay (or a stolen copy) — the whole family goes (if it has not yet)
            conn.execute(
                "UPDATE refresh_tokens SET revoked_at = ? WHERE family_id = ? AND revoked_at IS NULL", (now, old["family_id"])
            )
            return "reused", old

    async def get(self, token_hash: str) -> RefreshToken | None:
        return cast(RefreshToken | None, self._db.one("SELECT * FROM refresh_tokens WHERE token_hash = ?", (token_hash,)))

    async def family_live(self, family_id: str, now: int) -> bool:
        return self._db.one(
            "SELECT 1 FROM refresh_tokens WHERE family_id = ? AND revoked_at IS NULL AND expires_at > ? LIMIT 1",
            (family_id, now),
        ) is not None

    async def _revoke(self, where: str, params: dict[str, Any], now: int) -> int:
        async with self._db.awrite() as conn:
            return _was_live(conn.execute(
                f"UPDATE refresh_tokens SET revoked_at = :now WHERE {where} AND revoked_at IS NULL RETURNING used_at, expires_at",  # noqa: S608 - fixed clauses
                {**params, "now": now},
            ).fetchall(), now)

    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke("family_id = :family_id", {"family_id": family_id}, now)

    async def revoke_person(self, person_id: str, now: int, client_id: str | None = None) -> int:
        if client_id is None:
            return await self._revoke("person_id = :person_id", {"person_id": person_id}, now)
        return await self._revoke(
            "person_id = :person_id AND client_id = :client_id", {"person_id": person_id, "client_id": client_id}, now
        )

    async def list_families(self, person_id: str, now: int) -> builtins.list[RefreshToken]:
        # A live family has exactly one unused token: its newest (a rotation uses the old one and
        # adds the next in one transaction; a reuse revokes the family).
        rows = self._db.all(
            """SELECT * FROM refresh_tokens WHERE person_id = ? AND used_at IS NULL AND revoked_at IS NULL
               AND expires_at > ? ORDER BY created_at DESC, token_hash DESC""",
            (person_id, now),
        )
        return cast(builtins.list[RefreshToken], rows)


class SQLiteDeviceCodes:
    def __init__(self, db: _Database):
        self._db = db

    async def create(self, device: DeviceCode) -> DeviceCode:
        row: dict[str, Any] = {c: device.get(c) for c in DEVICE_CODE_COLUMNS}
        async with self._db.awrite() as conn:
            # requests that expired before this one began go, so their user codes are free again
            conn.execute("DELETE FROM device_codes WHERE expires_at <= ?", (row["created_at"],))
            try:
                _insert(conn, "device_codes", DEVICE_CODE_COLUMNS, row)
            except sqlite3.IntegrityError as exc:
                raise Conflict("user_code" if "user_code" in str(exc) else "device_code_hash") from None
        return cast(DeviceCode, row)

    async def get_by_user_code(self, user_code: str, now: int) -> DeviceCode | None:
        return cast(DeviceCode | None, self._db.one(
            "SELECT * FROM device_codes WHERE user_code = ? AND expires_at > ?", (user_code, now)
        ))

    async def decide(self, user_code: str, person_id: str, approved: bool, now: int) -> DeviceCode | None:
        # The conditional UPDATE decides: of concurrent deciders, exactly one finds it pending.
        async with self._db.awrite() as conn:
            row = conn.execute(
                """UPDATE device_codes SET status = ?, person_id = ?, decided_at = ?
                   WHERE user_code = ? AND status = 'pending' AND expires_at > ? RETURNING *""",
                ("approved" if approved else "denied", person_id, now, user_code, now),
            ).fetchone()
        return cast(DeviceCode, dict(row)) if row else None

    async def poll(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._db.awrite() as conn:
            row = conn.execute("SELECT * FROM device_codes WHERE device_code_hash = ?", (device_code_hash,)).fetchone()
            if row is None:
                return None
            conn.execute("UPDATE device_codes SET last_polled_at = ? WHERE device_code_hash = ?", (now, device_code_hash))
        return cast(DeviceCode, dict(row))

    async def take(self, device_code_hash: str, now: int) -> DeviceCode | None:
        # The DELETE decides: of concurrent token exchanges, exactly one gets the approved request.
        async with self._db.awrite() as conn:
            row = conn.execute(
                """DELETE FROM device_codes WHERE device_code_hash = ? AND status = 'approved' AND expires_at > ?
                   RETURNING *""",
                (device_code_hash, now),
            ).fetchone()
        return cast(DeviceCode, dict(row)) if row else None

    async def slow_down(self, device_code_hash: str, interval: int, now: int) -> None:
        async with self._db.awrite() as conn:
            conn.execute(
                "UPDATE device_codes SET interval = ? WHERE device_code_hash = ? AND interval < ?",
                (int(interval), device_code_hash, int(interval)),
            )


class SQLiteConsents:
    def __init__(self, db: _Database):
        self._db = db

    async def remember(self, consent: Consent) -> Consent:
        async with self._db.awrite() as conn:
            found = conn.execute(
                "SELECT * FROM consents WHERE person_id = ? AND client_id = ?", (consent["person_id"], consent["client_id"])
            ).fetchone()
            row: dict[str, Any] = {c: consent.get(c) for c in CONSENT_COLUMNS}
            row["scope"] = _union_scope("", str(row["scope"]))
            if found is not None:
                row["scope"] = _union_scope(found["scope"], row["scope"])
                row["created_at"] = found["created_at"]
            conn.execute(
                f"INSERT OR REPLACE INTO consents ({', '.join(CONSENT_COLUMNS)}) VALUES ({', '.join(':' + c for c in CONSENT_COLUMNS)})",  # noqa: S608 - fixed column list
                row,
            )
        return cast(Consent, row)

    async def get(self, person_id: str, client_id: str) -> Consent | None:
        return cast(Consent | None, self._db.one(
            "SELECT * FROM consents WHERE person_id = ? AND client_id = ?", (person_id, client_id)
        ))

    async def list_for(self, person_id: str) -> builtins.list[Consent]:
        rows = self._db.all(
            "SELECT * FROM consents WHERE person_id = ? ORDER BY updated_at DESC, client_id", (person_id,)
        )
        return cast(builtins.list[Consent], rows)

    async def withdraw(self, person_id: str, client_id: str, now: int) -> bool:
        async with self._db.awrite() as conn:
            deleted = conn.execute(
                "DELETE FROM consents WHERE person_id = ? AND client_id = ?", (person_id, client_id)
            ).rowcount
            conn.execute(
                "UPDATE refresh_tokens SET revoked_at = ? WHERE person_id = ? AND client_id = ? AND revoked_at IS NULL",
                (now, person_id, client_id),
            )
        return int(deleted) == 1


class SQLiteStore:
    """``grantd.store.Store`` on one SQLite file; see grantd.store for the contract of each method."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._use_lock: int | None = None
        try:
            if self.path != ":memory:":
                file = Path(self.path)
                _make_private_dirs(file.parent)
                if not _create_private_file(file):
                    _check_private(file)
                for suffix in COMPANIONS:
                    _check_private(Path(self.path + suffix))
                if not os.access(file, os.R_OK | os.W_OK):  # SQLite would open it read-only, silently
                    raise PermissionError(13, "not writable by this user", str(file))
                self._use_lock = _take_use_lock(file)
            self._db = _Database(self.path)
        except (OSError, sqlite3.Error) as exc:
            if self._use_lock is not None:
                os.close(self._use_lock)
            raise StoreError(_cannot_open(Path(self.path), exc)) from None
        self.keys = SQLiteKeys(self._db)
        self.agents = SQLiteAgents(self._db)
        self.challenges = SQLiteChallenges(self._db)
        self.grants = SQLiteGrants(self._db)
        self.delegations = SQLiteDelegations(self._db)
        self.rates = SQLiteRates(self._db)
        self.people = SQLitePeople(self._db)
        self.credentials = SQLiteCredentials(self._db)
        self.sessions = SQLiteSessions(self._db)
        self.registrations = SQLiteRegistrations(self._db)
        self.webauthn_challenges = SQLiteWebAuthnChallenges(self._db)
        self.onetime = SQLiteOneTime(self._db)
        self.refresh_tokens = SQLiteRefreshTokens(self._db)
        self.device_codes = SQLiteDeviceCodes(self._db)
        self.consents = SQLiteConsents(self._db)
        self._checkpointer: threading.Thread | None = None
        self._stop_checkpoints = threading.Event()

    @cached_property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils over the store's connection, for the migrations."""
        import sqlite_utils

        return sqlite_utils.Database(self._db.conn, execute_plugins=False)

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
        if self._use_lock is not None:
            os.close(self._use_lock)  # releases the shared lock
            self._use_lock = None

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

    async def restore(self, source: str) -> str:
        """Check ``source`` is a grantd database this version knows, keep the current contents as
        ``<database>.before-restore`` (0600), copy ``source`` over the live file with SQLite's
        backup API (through SQLite, so the -wal and -shm files stay consistent) and migrate it
        forward. Refused while any other process has the database open: every ``SQLiteStore``
        holds a shared ``flock`` on the file for its life, and this one must turn its own into an
        exclusive one without waiting."""
        if self.path == ":memory:":
            raise StoreError("an in-memory database has nothing to restore into")
        return await asyncio.to_thread(self._restore, Path(source))

    def _restore(self, source: Path) -> str:
        version = _backup_schema_version(source)
        known = max(v for v, _, _ in MIGRATIONS)
        if version > known:
            raise StoreError(f"{source} has schema version {version}, newer than this grantd knows ({known}): "
                             "restore it with the grantd version that wrote it")
        keep = Path(self.path + ".before-restore")
        if keep.exists():
            raise StoreError(f"{keep} exists (the copy an earlier restore kept): move it away first")
        assert self._use_lock is not None
        try:
            fcntl.flock(self._use_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"{self.path} is in use by another process (a running grantd server or command): "
                             "stop it first (systemctl stop grantd)") from None
        try:
            self._backup(keep)
            with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src:
                src.backup(self._db.conn)
            self._db.conn.execute("PRAGMA journal_mode = WAL")
            self.migrate_sync()
            self._db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            fcntl.flock(self._use_lock, fcntl.LOCK_SH)
        os.chmod(self.path, FILE_MODE)
        return str(keep)


def _take_use_lock(file: Path) -> int:
    """A shared ``flock`` on the database file for the life of the store (SQLite's own locks are
    POSIX record locks, which flock does not touch): ``restore`` needs it exclusively, so a
    restore refuses while a server runs, and a server does not open a file being restored."""
    fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(f"{file} is being restored (grantd db restore); try again when it is done") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _cannot_open(file: Path, exc: BaseException) -> str:
    """One line that says which file or directory is wrong and why."""
    directory = file.parent
    if isinstance(exc, OSError):
        where = exc.filename or file
        reason = exc.strerror or str(exc)
    else:
        where, reason = file, str(exc)
    hint = ""
    if not os.access(directory, os.W_OK | os.X_OK):
        hint = f"; the directory {directory} must be writable by this user (SQLite creates -wal and -shm files there)"
    elif file.exists() and not os.access(file, os.R_OK | os.W_OK):
        hint = f"; {file} must be readable and writable by this user"
    elif "readonly" in reason or "read-only" in reason.lower():
        hint = f"; the file system of {directory} is read-only, or {file} is not writable"
    return f"cannot open the SQLite database {where}: {reason}{hint}"


def _backup_schema_version(source: Path) -> int:
    """The schema version of a grantd SQLite database (a backup), or a StoreError saying why it is not one."""
    if not source.is_file():
        raise StoreError(f"{source}: no such file")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as conn:
            if conn.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise StoreError(f"{source} is a damaged SQLite database (PRAGMA quick_check failed)")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"schema_migrations", "signing_keys", "grants"} <= tables:
                raise StoreError(f"{source} is an SQLite database but not a grantd one (no grantd tables)")
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{source} is not a grantd database ({exc})") from None
    if not row or not row[0]:
        raise StoreError(f"{source} is not a grantd database (no schema version)")
    return int(row[0])


class _SQLiteBackend:
    """The ``sqlite`` storage backend: opens an SQLiteStore; ``check_config`` says, without creating
    anything, what would stop it (``grantd config validate`` and ``serve`` alike, D18)."""

    def check_config(self, config: Any) -> list[str]:
        file = Path(config.resolve_path(config.storage.path))
        try:
            return self._problems(file)
        except OSError as exc:
            return [f"storage.path: {_cannot_open(file, exc)}"]

    @staticmethod
    def _problems(file: Path) -> list[str]:
        if file.exists():
            if file.is_dir():
                return [f"storage.path: {file} is a directory, not a database file"]
            if not os.access(file, os.R_OK | os.W_OK):
                return [f"storage.path: {file} must be readable and writable by this user"]
            return []
        directory = file.parent
        while not directory.exists() and directory != directory.parent:
            directory = directory.parent
        if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
            return [f"storage.path: cannot create {file}: {directory} is not a directory this user may write to"]
        return []

    def __call__(self, config: Any) -> SQLiteStore:
        return SQLiteStore(config.resolve_path(config.storage.path))


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], SQLiteStore]]:
    return {"sqlite": _SQLiteBackend()}
