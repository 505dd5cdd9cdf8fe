"""PostgreSQL storage: ``grantd.store.Store`` on one database shared by any number of grantd nodes.

``[storage] plugin = "postgres"`` with ``dsn`` (a libpq connection string or URI; a secret, so
``file:PATH`` or ``env:NAME``) and ``pool_size``. Needs the ``postgres`` extras (psycopg 3;
its connections are pooled here, ``_Pool``), imported only when this backend is opened: a SQLite-only install does without them.

How it keeps the contract (``grantd.store``):

- **One call, one transaction**: every method takes a pooled connection and runs in one
  transaction (READ COMMITTED), committed when the method returns, rolled back when it raises: a
  single statement in autocommit, several between BEGIN and COMMIT (``_Database.tx``).
- **Exactly one winner**: conditional writes are single statements whose row locks decide between
  callers on every node: ``UPDATE ... WHERE status IN (...) RETURNING``, ``DELETE ... RETURNING``,
  ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING``. Checks that span rows (the first signing key,
  e-mail uniqueness across agents, persons and delegators) take a transaction-scoped advisory lock
  first, as SQLite's single writer does for everything.
- **Events in commit order**: ``grant_events.seq`` comes from a sequence, and a sequence alone
  hands out numbers in *start* order, not commit order (a reader could see 6 before 5 commits and
  skip 5 for ever). So every transaction that records events takes one advisory lock just before
  it inserts them and holds it until it commits: numbers are taken in commit order. The same
  transaction sends ``NOTIFY grantd_events``; ``grants.wait_for_events`` LISTENs on a connection
  of its own, so the event hub of every node wakes as soon as a change commits (polling stays as
  a safety net, and takes over while the listening connection is down).
- **Migrations** are numbered and recorded in ``schema_migrations``; ``migrate`` holds a session
  advisory lock, so nodes starting together migrate once.

Where the connections live: the store has an event loop of its own, in a thread, with a pool
that outlives the caller's loops (the CLI runs several ``asyncio.run``); a call from any loop is
one hop there and back. Once ``serving()`` is called on the loop a server serves requests on,
calls from that loop use a second pool on that loop itself, and its LISTEN connection is read by
that loop too: no hop, no thread wake-ups (issue 14). The pools are small and have no background
tasks, so ``close()`` — synchronous in the contract — closes every connection for real, also
when called on the serving loop itself (a server's after_server_stop).

Round trips: connections are in autocommit, so a method that is one statement is one round trip
(its own READ COMMITTED transaction); a method of several statements runs them between BEGIN and
COMMIT. The grant writes with events send theirs in batches (``_Batch``: ``BEGIN; UPDATE``, then
``lock; INSERT event; COMMIT``) as server-side prepared statements: the same statements in the
same order, in two round trips instead of five.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

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
    KEY_COLUMNS,
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
    import psycopg

log = logging.getLogger("grantd")

CHANNEL = "grantd_events"
# Advisory lock keys (bigint), "grantd" in ASCII plus a number: one namespace for this application.
MIGRATE_LOCK = 0x6772616E7464_0001
EVENTS_LOCK = 0x6772616E7464_0002
KEYS_LOCK = 0x6772616E7464_0003
PRINCIPALS_LOCK = 0x6772616E7464_0004
# Per-person locks of refresh families: pg_advisory_xact_lock(REFRESH_LOCKS, hashtext(person_id)),
# the two-int4 key space (it never meets the bigint keys above).
REFRESH_LOCKS = 0x67726E74
# Per-owner locks of the pending-grant bound (pending_per_owner): (OWNER_LOCKS, hashtext(owner key)).
OWNER_LOCKS = 0x676F776E
CONNECT_TIMEOUT = 10.0  # seconds to wait for a pooled connection
PING_TIMEOUT = 2.0
CLOSE_TIMEOUT = 10.0
MAX_LIFETIME = 3600.0  # seconds a pooled connection lives (then it is replaced as it comes back)
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE: no transaction open, no query in flight
_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK: a result with rows
LISTEN_RETRY = 1.0  # seconds between attempts to re-open the LISTEN connection
RATE_SWEEP_LIMIT = 1000  # ended rate windows one hit deletes at most
FILE_MODE = 0o600
DIR_MODE = 0o700

P = ParamSpec("P")
R = TypeVar("R")

# Text compares byte-wise, as in SQLite: ids page and sort the same on every backend and locale.
T = 'TEXT COLLATE "C"'

# A deleted person's e-mail (migration 6): no person or agent has it, a registration URL was redeemed for it.
_GONE = """(NOT EXISTS (SELECT 1 FROM people p WHERE p.email = lower({email}))
            AND NOT EXISTS (SELECT 1 FROM agents a WHERE a.email = lower({email}))
            AND EXISTS (SELECT 1 FROM registration_urls r WHERE r.email = lower({email}) AND r.used_at IS NOT NULL))"""

# Numbered migrations, each a list of statements run in one transaction. Never edit a released one.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "signing keys, agents, challenges, grants, grant events, delegations, rate counters", [
        f"""CREATE TABLE signing_keys (
            kid {T} PRIMARY KEY,
            alg {T} NOT NULL,
            private_pem {T} NOT NULL,
            public_jwk {T} NOT NULL,
            created_at BIGINT NOT NULL,
            retired_at BIGINT,
            seq BIGSERIAL NOT NULL
        )""",
        f"""CREATE TABLE agents (
            agent_id {T} PRIMARY KEY,
            email {T} NOT NULL CONSTRAINT agents_email_key UNIQUE,
            name {T} NOT NULL,
            public_key {T} NOT NULL,
            key_id {T} NOT NULL CONSTRAINT agents_key_id_key UNIQUE,
            key_generation INTEGER NOT NULL DEFAULT 1,
            owner {T} NOT NULL,
            approver {T} NOT NULL,
            status {T} NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL
        )""",
        "CREATE INDEX agents_created ON agents (created_at DESC, agent_id DESC)",
        "CREATE INDEX agents_owner ON agents (owner)",
        "CREATE INDEX agents_approver ON agents (approver)",
        f"""CREATE TABLE challenges (
            challenge {T} PRIMARY KEY,
            agent_id {T} NOT NULL,
            expires_at BIGINT NOT NULL
        )""",
        "CREATE INDEX challenges_expires ON challenges (expires_at)",
        "CREATE INDEX challenges_agent ON challenges (agent_id)",
        f"""CREATE TABLE grants (
            id {T} PRIMARY KEY,
            type {T} NOT NULL,
            requester {T} NOT NULL,
            requester_id {T},
            request {T} NOT NULL,
            grant_type {T} NOT NULL,
            status {T} NOT NULL,
            created_at BIGINT NOT NULL,
            decided_by {T},
            decided_at BIGINT,
            expires_at BIGINT,
            used_at BIGINT,
            decision_reason {T},
            delegation_id {T},
            revoked_by {T},
            revoked_at BIGINT,
            reuse_key {T},
            version INTEGER NOT NULL DEFAULT 1
        )""",
        "CREATE INDEX grants_requester ON grants (requester, created_at DESC)",
        "CREATE INDEX grants_requester_id ON grants (requester_id, created_at DESC)",
        "CREATE INDEX grants_created ON grants (created_at DESC, id DESC)",
        "CREATE INDEX grants_status ON grants (status, created_at)",
        "CREATE INDEX grants_lapse ON grants (status, expires_at)",
        "CREATE INDEX grants_reuse ON grants (requester_id, reuse_key, status)",
        f"""CREATE TABLE grant_events (
            seq BIGSERIAL PRIMARY KEY,
            event {T} NOT NULL,
            grant_id {T} NOT NULL,
            requester {T} NOT NULL,
            grant_json {T} NOT NULL,
            created_at BIGINT NOT NULL
        )""",
        "CREATE INDEX grant_events_created ON grant_events (created_at)",
        f"""CREATE TABLE delegations (
            id {T} PRIMARY KEY,
            delegator {T} NOT NULL,
            delegate {T} NOT NULL,
            audience {T} NOT NULL,
            scopes {T} NOT NULL,
            approval {T} NOT NULL,
            duration BIGINT,
            created_at BIGINT NOT NULL,
            expires_at BIGINT,
            status {T} NOT NULL,
            revoked_at BIGINT,
            revoked_by {T}
        )""",
        "CREATE INDEX delegations_delegate ON delegations (delegate, audience, status)",
        "CREATE INDEX delegations_delegator ON delegations (delegator, created_at)",
        f"""CREATE TABLE rate_counters (
            key {T} NOT NULL,
            window_start BIGINT NOT NULL,
            count INTEGER NOT NULL,
            ends_at BIGINT NOT NULL,
            PRIMARY KEY (key, window_start)
        )""",
        "CREATE INDEX rate_counters_ends ON rate_counters (ends_at)",
    ]),
    (2, "people, passkeys, sessions, registration URLs, WebAuthn challenges", [
        # email_fold/name_fold: Python's casefold() of each, for a search that folds exactly as
        # every backend does whatever the database's locale (lower() under "C" is ASCII-only).
        f"""CREATE TABLE people (
            person_id {T} PRIMARY KEY,
            email {T} NOT NULL CONSTRAINT people_email_key UNIQUE,
            name {T} NOT NULL,
            admin BOOLEAN NOT NULL,
            status {T} NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            email_fold {T} NOT NULL,
            name_fold {T} NOT NULL
        )""",
        "CREATE INDEX people_created ON people (created_at DESC, person_id DESC)",
        f"""CREATE TABLE passkey_credentials (
            credential_id {T} PRIMARY KEY,
            person_id {T} NOT NULL,
            rp_id {T} NOT NULL,
            public_key {T} NOT NULL,
            sign_count BIGINT NOT NULL,
            transports {T} NOT NULL,
            aaguid {T} NOT NULL,
            name {T} NOT NULL,
            backed_up BOOLEAN NOT NULL,
            created_at BIGINT NOT NULL,
            last_used_at BIGINT
        )""",
        "CREATE INDEX passkey_credentials_person ON passkey_credentials (person_id, created_at)",
        f"""CREATE TABLE sessions (
            session_id {T} PRIMARY KEY,
            family_id {T} NOT NULL,
            person_id {T} NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            last_seen_at BIGINT NOT NULL,
            user_agent {T} NOT NULL,
            revoked_at BIGINT
        )""",
        "CREATE INDEX sessions_family ON sessions (family_id)",
        "CREATE INDEX sessions_person ON sessions (person_id, created_at DESC)",
        "CREATE INDEX sessions_created ON sessions (created_at DESC, session_id DESC)",
        "CREATE INDEX sessions_expires ON sessions (expires_at)",
        f"""CREATE TABLE registration_urls (
            id {T} PRIMARY KEY,
            token_hash {T} NOT NULL CONSTRAINT registration_urls_token_hash_key UNIQUE,
            email {T} NOT NULL,
            admin BOOLEAN NOT NULL,
            purpose {T} NOT NULL,
            rp_id {T} NOT NULL,
            created_by {T} NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            used_at BIGINT
        )""",
        "CREATE INDEX registration_urls_email ON registration_urls (email)",
        "CREATE INDEX registration_urls_created ON registration_urls (created_at DESC, id DESC)",
        f"""CREATE TABLE webauthn_challenges (
            challenge {T} PRIMARY KEY,
            purpose {T} NOT NULL,
            rp_id {T} NOT NULL,
            person_id {T},
            registration_id {T},
            expires_at BIGINT NOT NULL
        )""",
        "CREATE INDEX webauthn_challenges_expires ON webauthn_challenges (expires_at)",
        "CREATE INDEX webauthn_challenges_person ON webauthn_challenges (person_id)",
    ]),
    (3, "OAuth one-time records, refresh tokens, device codes, consents; guest sessions; keys per algorithm", [
        f"""CREATE TABLE oauth_onetime (
            kind {T} NOT NULL,
            key {T} NOT NULL,
            data {T} NOT NULL,
            expires_at BIGINT NOT NULL,
            PRIMARY KEY (kind, key)
        )""",
        "CREATE INDEX oauth_onetime_expires ON oauth_onetime (expires_at)",
        f"""CREATE TABLE refresh_tokens (
            token_hash {T} PRIMARY KEY,
            family_id {T} NOT NULL,
            client_id {T} NOT NULL,
            person_id {T} NOT NULL,
            scope {T} NOT NULL,
            auth_time BIGINT NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            used_at BIGINT,
            revoked_at BIGINT
        )""",
        "CREATE INDEX refresh_tokens_family ON refresh_tokens (family_id)",
        "CREATE INDEX refresh_tokens_person ON refresh_tokens (person_id, client_id)",
        "CREATE INDEX refresh_tokens_expires ON refresh_tokens (expires_at)",
        f"""CREATE TABLE device_codes (
            device_code_hash {T} PRIMARY KEY,
            user_code {T} NOT NULL CONSTRAINT device_codes_user_code_key UNIQUE,
            client_id {T} NOT NULL,
            scope {T} NOT NULL,
            created_at BIGINT NOT NULL,
            expires_at BIGINT NOT NULL,
            "interval" INTEGER NOT NULL,
            last_polled_at BIGINT,
            status {T} NOT NULL,
            person_id {T},
            decided_at BIGINT
        )""",
        "CREATE INDEX device_codes_expires ON device_codes (expires_at)",
        f"""CREATE TABLE consents (
            person_id {T} NOT NULL,
            client_id {T} NOT NULL,
            scope {T} NOT NULL,
            created_at BIGINT NOT NULL,
            updated_at BIGINT NOT NULL,
            PRIMARY KEY (person_id, client_id)
        )""",
        # guest sessions of SP login: no person here, the IdP that vouched and what it asserted
        "ALTER TABLE sessions ALTER COLUMN person_id DROP NOT NULL",
        f"ALTER TABLE sessions ADD COLUMN idp {T}",
        f"ALTER TABLE sessions ADD COLUMN email {T}",
        f"ALTER TABLE sessions ADD COLUMN name {T}",
        # D3: keys of several algorithms coexist; the active key is looked up per algorithm
        "CREATE INDEX signing_keys_alg ON signing_keys (alg, retired_at)",
    ]),
    (4, "device codes remember the client address that asked", [
        f"ALTER TABLE device_codes ADD COLUMN client_address {T}",  # D12: the /device page says where
    ]),
    (5, "the passkey that started each session", [
        # Issue 19: a session records the passkey that started it; deleting the passkey ends it.
        f"ALTER TABLE sessions ADD COLUMN credential_id {T}",
        "CREATE INDEX sessions_credential ON sessions (credential_id)",
    ]),
    (6, "owners and approvers bound to person ids; pending grants per requester", [
        # Issue 19 (D11): existing rows are bound to the persons their e-mails name today; e-mails
        # that name no person stay unbound until that person is created.
        f"ALTER TABLE agents ADD COLUMN owner_id {T}",
        f"ALTER TABLE agents ADD COLUMN approver_id {T}",
        "UPDATE agents SET owner_id = (SELECT person_id FROM people WHERE people.email = lower(agents.owner))",
        "UPDATE agents SET approver_id = (SELECT person_id FROM people WHERE people.email = lower(agents.approver))",
        # An e-mail that names no person now but redeemed a registration URL once was a person
        # deleted before this migration: a tombstone id (nobody's), and their delegations end.
        f"UPDATE agents SET owner_id = 'usr_deleted:' || owner WHERE owner_id IS NULL AND {_GONE.format(email='agents.owner')}",  # noqa: S608 - fixed names
        f"""UPDATE agents SET approver_id = 'usr_deleted:' || approver
            WHERE approver_id IS NULL AND {_GONE.format(email='agents.approver')}""",  # noqa: S608 - fixed names
        f"""UPDATE delegations SET status = 'revoked', revoked_by = 'grantd migration 6',
                revoked_at = (extract(epoch from clock_timestamp()) * 1000)::bigint
            WHERE status = 'active' AND ({_GONE.format(email='delegations.delegator')}
                                         OR {_GONE.format(email='delegations.delegate')})""",  # noqa: S608 - fixed names
        "CREATE INDEX agents_owner_id ON agents (owner_id)",
        "CREATE INDEX agents_approver_id ON agents (approver_id)",
        "CREATE INDEX grants_pending_requester ON grants (requester_id) WHERE status = 'pending'",
    ]),
]

# Column allow-lists (grantd.store.records): the only names that ever reach SQL text.
PERSON_SELECT = f"SELECT {', '.join(PERSON_COLUMNS)} FROM people"  # noqa: S608 - fixed columns (not the fold columns)
PG = "pyformat"  # psycopg's placeholders: %(name)s
# Lists newest first by (created_at, id); the cursor is the last row of the previous page.
AFTER = "(created_at < %(after_at)s OR (created_at = %(after_at)s AND {id} < %(after_id)s))"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _cols(columns: Sequence[str]) -> str:
    return ", ".join(columns)


def _marks(columns: Sequence[str]) -> str:
    return ", ".join(f"%({c})s" for c in columns)


def _insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({_cols(columns)}) VALUES ({_marks(columns)})"  # noqa: S608 - fixed column lists


# -- the store's own event loop ---------------------------------------------------------------------------
class _LoopThread:
    """An asyncio loop in a daemon thread: the store's connections for callers on any loop but the
    one it serves on (the CLI's several ``asyncio.run``, tests), and the LISTEN connection."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name="grantd-postgres", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, R]) -> Future[R]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Await ``coro`` on the store's loop from any other loop (cancelling the caller cancels it)."""
        return await asyncio.wrap_future(self.submit(coro))

    def run_sync(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=CLOSE_TIMEOUT)
        if not self.thread.is_alive():
            self.loop.close()


def _close_now(conn: psycopg.AsyncConnection[Any]) -> None:
    """Close a connection synchronously, from any thread, its loop running or not:
    ``AsyncConnection.close`` of a connection no psycopg pool owns awaits nothing (it ends the
    libpq connection), so it runs to its end in one step."""
    closing = conn.close()
    try:
        closing.send(None)
    except StopIteration:
        return
    except Exception:  # noqa: S110 - closing either way
        pass
    closing.close()
    conn.pgconn.finish()


class _Pool:
    """The connections of one event loop: autocommit connections (a single statement is its own
    transaction, one round trip; ``_Database.tx`` sends BEGIN/COMMIT where a method needs
    several), handed out newest first, at most ``size`` in use. No background tasks, so
    ``close_now`` closes every idle connection synchronously, after its loop stopped or from
    within it (``close()`` is synchronous in the contract); one in use closes when it comes back.
    A connection comes back into the pool only when it is idle (no transaction open or in error, no
    query in flight: say, a caller cancelled mid-query) and younger than MAX_LIFETIME."""

    def __init__(self, db: _Database, size: int):
        self._db = db
        self._slots = asyncio.Semaphore(size)
        self._idle: list[psycopg.AsyncConnection[dict[str, Any]]] = []
        self._born: dict[int, float] = {}
        # names of the statements PREPAREd on each connection (``_Batch``)
        self.prepared: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
        self.closed = False

    async def get(self, wait: float) -> psycopg.AsyncConnection[dict[str, Any]]:
        if self.closed:
            raise StoreError("the PostgreSQL store is closed")
        if self._slots.locked():
            try:
                async with asyncio.timeout(wait):
                    await self._slots.acquire()
            except TimeoutError:
                raise StoreError(f"no PostgreSQL connection free within {wait:g} s (pool_size {self._db.pool_size})") from None
        else:
            await self._slots.acquire()  # a slot is free: returns at once
        try:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
                self._born.pop(id(conn), None)
            conn = await self._db.connect(autocommit=True)
            self._born[id(conn)] = time.monotonic()
            return conn
        except BaseException:
            self._slots.release()
            raise

    def put(self, conn: psycopg.AsyncConnection[dict[str, Any]], *, discard: bool = False) -> None:
        try:
            if (
                discard
                or self.closed
                or conn.pgconn.transaction_status != _IDLE
                or time.monotonic() - self._born.get(id(conn), 0.0) > MAX_LIFETIME
            ):
                self._born.pop(id(conn), None)
                _close_now(conn)
            else:
                self._idle.append(conn)
        finally:
            self._slots.release()

    def adopt(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        """An open idle connection joins the pool."""
        self._born[id(conn)] = time.monotonic()
        self._idle.append(conn)

    def close_now(self) -> None:
        self.closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            self._born.pop(id(conn), None)
            _close_now(conn)


class _Listener:
    """LISTEN read by one loop without a task of its own: the connection's socket is watched with
    ``add_reader`` and its notifications are drained in the callback (each one calls ``wake``), so
    closing is synchronous (remove the reader, close the connection). Only (re)connecting runs as a
    short task; while the connection is down it retries every LISTEN_RETRY seconds and the hub
    polls meanwhile."""

    def __init__(self, db: _Database, loop: asyncio.AbstractEventLoop, wake: Callable[[], None]):
        self._db = db
        self._loop = loop
        self._wake = wake
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._fd: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False

    def ensure(self) -> None:
        if self._conn is None and self._task is None and self._retry is None and not self._closed:
            self._task = self._loop.create_task(self._connect(), name="grantd-listen")

    async def _connect(self) -> None:
        import psycopg

        try:
            conn = await psycopg.AsyncConnection.connect(
                self._db.dsn, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT), application_name=self._db.app_name
            )
        except Exception as exc:
            self._task = None
            self._again(f"listening for grant events failed ({exc}); retrying")
            return
        try:
            await conn.execute(f"LISTEN {CHANNEL}")
        except Exception as exc:
            _close_now(conn)
            self._task = None
            self._again(f"listening for grant events failed ({exc}); retrying")
            return
        self._task = None
        if self._closed:
            _close_now(conn)
            return
        self._conn, self._fd = conn, conn.pgconn.socket
        self._loop.add_reader(self._fd, self._readable)
        self._wake()  # (re)connected: anything may have happened meanwhile

    def _again(self, why: str) -> None:
        if not self._closed:
            log.warning("%s", why)
            self._retry = self._loop.call_later(LISTEN_RETRY, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self.ensure()

    def _readable(self) -> None:
        conn = self._conn
        if conn is None:
            return
        pgconn = conn.pgconn
        woke = False
        try:
            pgconn.consume_input()
            while pgconn.notifies() is not None:
                woke = True
        except Exception as exc:
            self._drop()
            self._again(f"listening for grant events failed ({exc}); retrying")
            self._wake()  # the hub looks once, then polls until we are back
            return
        if conn.closed:
            self._drop()
            self._again("listening for grant events: the connection closed; retrying")
            return
        if woke:
            self._wake()

    def _drop(self) -> None:
        if self._fd is not None:
            self._loop.remove_reader(self._fd)
            self._fd = None
        if self._conn is not None:
            _close_now(self._conn)
            self._conn = None

    def close_now(self) -> None:
        """From the serving loop's thread (after_server_stop), or after that loop stopped."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._loop.is_closed():
            self._fd = None
        self._drop()


class _Notifications:
    """Grant-event wake-ups for the waiters on one loop (the store's own, or the serving loop): a
    count of notifications, the count a waiter last saw, an event, and the LISTEN connection that
    feeds them, read by that same loop (no hop between threads)."""

    def __init__(self, db: _Database, loop: asyncio.AbstractEventLoop):
        self.notified = 0
        self.seen = 0
        self.event = asyncio.Event()
        self.listener = _Listener(db, loop, self.wake)

    def wake(self) -> None:
        self.notified += 1
        self.event.set()

    async def wait(self, seconds: float) -> None:
        self.listener.ensure()
        if self.notified == self.seen:
            self.event.clear()
            try:
                await asyncio.wait_for(self.event.wait(), seconds)
            except TimeoutError:
                pass
        self.seen = self.notified


# Statements a batch runs as server-side prepared statements: SQL -> (name, PREPARE ..., parameter keys).
_PREPARES: dict[str, tuple[str, str, tuple[Any, ...]]] = {}
_MARK = re.compile(r"%\((\w+)\)s|%s")


def _preparable(sql: str) -> tuple[str, str, tuple[Any, ...]]:
    """``sql`` (``%(name)s`` or ``%s`` placeholders) as ``PREPARE name AS ...`` with ``$n``
    parameters, and the keys (names, or positions) of the values in ``$n`` order."""
    found = _PREPARES.get(sql)
    if found is None:
        keys: list[Any] = []

        def number(match: re.Match[str]) -> str:
            key = match.group(1) if match.group(1) is not None else len(keys)
            if key not in keys or match.group(1) is None:
                keys.append(key)
            return f"${keys.index(key) + 1}"

        body = _MARK.sub(number, sql)
        name = "grantd_" + hashlib.sha256(sql.encode()).hexdigest()[:20]
        found = _PREPARES[sql] = (name, f"PREPARE {name} AS {body}", tuple(keys))
    return found


class _Batch:
    """Statements sent together, in one round trip, and run by the server in order: the values are
    bound client-side (psycopg's ClientCursor quotes them), which a single message of several
    statements needs. Each statement runs as a server-side prepared statement (``EXECUTE name(...)``,
    prepared on this connection the first time, in the same message), so the server parses and
    plans it once per connection, as psycopg's own prepared statements do."""

    def __init__(self, cur: psycopg.AsyncClientCursor[dict[str, Any]], prepared: set[str]):
        self.cur = cur
        self._prepared = prepared
        self._parts: list[str] = []
        self._values: list[Any] = []

    def add(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> None:
        name, prepare, keys = _preparable(sql)
        if name not in self._prepared:
            self._parts.append(prepare)
            self._prepared.add(name)  # if this message fails, the connection is closed (``batch``)
        if keys:
            self._parts.append(f"EXECUTE {name}({', '.join(['%s'] * len(keys))})")
            self._values += [params[k] for k in keys]  # type: ignore[call-overload]
        else:
            self._parts.append(f"EXECUTE {name}")

    def plain(self, sql: str) -> None:
        """A statement without values that is not worth preparing (BEGIN, COMMIT, ROLLBACK)."""
        self._parts.append(sql)

    async def send(self) -> dict[str, Any] | None:
        """Send what was added; the first row of the last statement's result, if it has rows."""
        parts, values = self._parts, self._values
        self._parts, self._values = [], []
        cur = self.cur
        await cur.execute("; ".join(parts), values)
        while cur.nextset():
            pass
        result = cur.pgresult
        return await cur.fetchone() if result is not None and result.status == _TUPLES_OK else None


class _Part:
    def __init__(self, db: _Database):
        self._db = db


def _on_store_loop(fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> Callable[Concatenate[Any, P], Awaitable[R]]:
    """Run a part's method where its connections are: on the caller's loop when that is the loop
    the store serves on (no hop: the server's requests), else on the store's own loop."""

    @functools.wraps(fn)
    async def call(self: _Part, *args: P.args, **kwargs: P.kwargs) -> R:
        db = self._db
        if db.served is not None and asyncio.get_running_loop() is db.served_loop:
            return await fn(self, *args, **kwargs)
        return await db.loop.run(fn(self, *args, **kwargs))

    return call


def _nul_finds_nothing(absent: Any) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """A lookup (or a change of one row found by key) whose string arguments hold a NUL character
    answers ``absent`` without asking the database: PostgreSQL text cannot hold NUL, so no stored
    row can match, and psycopg would refuse to send the value at all (an error, and a 500 for a
    request that named, say, ``agent\x00``; SQLite just finds nothing). Writes never get here with
    NUL: identifiers refuse control characters before they are stored (D12)."""

    def wrap(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            if any(isinstance(v, str) and "\x00" in v for v in (*args, *kwargs.values())):
                return cast(R, absent() if callable(absent) else absent)
            return await fn(*args, **kwargs)

        return call

    return wrap


class _Database:
    """The pools, the LISTEN connection and the helpers the parts share.

    Two pools: one on the store's own loop (in its thread), opened now, for callers on any loop;
    and, once ``serve_here`` named the loop this process serves requests on, one on that loop, so
    a request's store calls run on its own loop with no hop to the thread and back. LISTEN is
    likewise read by the loop that waits for events (``_Notifications``, one per loop): the serving
    loop, or the store's loop for waiters on any other loop."""

    def __init__(self, dsn: str, pool_size: int):
        self.dsn = dsn
        self.pool_size = pool_size
        self.app_name = f"grantd {os.getpid()} {uuid.uuid4().hex[:12]}"  # this store's sessions
        self.loop = _LoopThread()
        self.pool: _Pool | None = None  # on the store's loop
        self.served: _Pool | None = None  # on the loop requests are served on
        self.served_loop: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.events: _Notifications | None = None  # waiters on the store's loop
        self.served_events: _Notifications | None = None  # waiters on the serving loop
        try:
            self.loop.run_sync(self._open(), CONNECT_TIMEOUT)
        except BaseException:
            self.loop.stop()
            raise

    async def connect(self, autocommit: bool) -> psycopg.AsyncConnection[dict[str, Any]]:
        import psycopg
        from psycopg.rows import dict_row

        return await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=autocommit, row_factory=dict_row, connect_timeout=int(CONNECT_TIMEOUT),
            application_name=self.app_name,
        )

    async def _open(self) -> None:
        import psycopg

        # One plain connection first: an unreachable or refusing database is one clear error here.
        try:
            probe = await self.connect(autocommit=True)
        except psycopg.Error as exc:
            reason = " ".join(str(exc).split())
            raise StoreError(f"cannot connect to PostgreSQL ({reason})") from None
        self.events = _Notifications(self, self.loop.loop)
        self.pool = _Pool(self, self.pool_size)
        self.pool.adopt(probe)  # the first idle connection

    def serve_here(self) -> None:
        """Requests are served on the running loop from now on: their store calls use a pool of
        their own on it (connections are opened on first use)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on a loop: every call keeps going through the store's loop
        if self.served is None and not self.closed:
            self.served = _Pool(self, self.pool_size)
            self.served_events = _Notifications(self, loop)
            self.served_loop = loop

    def _here(self) -> _Pool:
        """The pool of the running loop (``_on_store_loop`` runs every method on one that has one)."""
        if self.served is not None and asyncio.get_running_loop() is self.served_loop:
            return self.served
        assert self.pool is not None
        return self.pool

    @asynccontextmanager
    async def tx(self, wait: float = CONNECT_TIMEOUT) -> AsyncIterator[psycopg.AsyncCursor[dict[str, Any]]]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        pool = self._here()
        conn = await pool.get(wait)
        try:
            async with conn.transaction(), conn.cursor() as cur:
                yield cur
        finally:
            pool.put(conn)

    @asynccontextmanager
    async def statement(self) -> AsyncIterator[psycopg.AsyncCursor[dict[str, Any]]]:
        """A cursor for ONE statement, its own transaction (autocommit): for a method that is a single
        statement but needs more of the cursor than ``one``/``all`` give (``rowcount``)."""
        pool = self._here()
        conn = await pool.get(CONNECT_TIMEOUT)
        try:
            async with conn.cursor() as cur:
                yield cur
        finally:
            pool.put(conn)

    @asynccontextmanager
    async def batch(self) -> AsyncIterator[_Batch]:
        """Several statements in one round trip (``_Batch``). The caller writes BEGIN and COMMIT (or
        ROLLBACK) itself; if it raises, the connection is closed (which rolls back whatever it left
        open, and forgets the statements it prepared: the next connection prepares them again)."""
        import psycopg

        pool = self._here()
        conn = await pool.get(CONNECT_TIMEOUT)
        failed = True
        try:
            async with psycopg.AsyncClientCursor(conn) as cur:
                yield _Batch(cur, pool.prepared.setdefault(conn, set()))
            failed = False
        finally:
            pool.put(conn, discard=failed)

    async def one(self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, rows: bool = True) -> dict[str, Any] | None:
        """One statement in autocommit: its own READ COMMITTED transaction, one round trip
        (``rows=False``: a statement that returns none)."""
        pool = self._here()
        conn = await pool.get(CONNECT_TIMEOUT)
        try:
            cur = await conn.execute(sql, params)
            return await cur.fetchone() if rows else None
        finally:
            pool.put(conn)

    async def all(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        pool = self._here()
        conn = await pool.get(CONNECT_TIMEOUT)
        try:
            cur = await conn.execute(sql, params)
            return await cur.fetchall()
        finally:
            pool.put(conn)

    async def aclose(self) -> None:
        self.closed = True
        if self.events is not None:
            self.events.listener.close_now()
        if self.pool is not None:
            self.pool.close_now()

    def close(self) -> None:
        self.closed = True
        if self.served_events is not None:
            self.served_events.listener.close_now()
        if self.served is not None:
            self.served.close_now()  # synchronous: its loop may be the caller's (a server's after_server_stop)
        if self.loop.loop.is_closed():
            return
        try:
            self.loop.run_sync(self.aclose(), CLOSE_TIMEOUT + 5)
        finally:
            self.loop.stop()


async def _lock(cur: psycopg.AsyncCursor[Any], key: int) -> None:
    """A transaction-scoped advisory lock: held until this transaction commits or rolls back."""
    await cur.execute("SELECT pg_advisory_xact_lock(%s)", (key,))


async def _record_events(cur: psycopg.AsyncCursor[Any], events: Sequence[tuple[str, dict[str, Any], int]]) -> None:
    """The grant events of this transaction, last in it: the lock makes ``seq`` follow commit order
    (it is held from here to COMMIT, so a later number always commits later), and NOTIFY is sent
    when the transaction commits."""
    if not events:
        return
    # One round trip for both: the notification is queued now and sent at COMMIT either way.
    await cur.execute(EVENTS_LOCK_SQL, (EVENTS_LOCK, CHANNEL))
    rows = [_event_row(event, row, now) for event, row, now in events]
    if len(rows) == 1:
        await cur.execute(EVENT_INSERT, rows[0])
    else:
        await cur.executemany(EVENT_INSERT, rows)


EVENTS_LOCK_SQL = "SELECT pg_advisory_xact_lock(%s), pg_notify(%s, '')"
EVENT_INSERT = "INSERT INTO grant_events (event, grant_id, requester, grant_json, created_at) VALUES (%s, %s, %s, %s, %s)"


def _event_row(event: str, row: dict[str, Any], now: int) -> tuple[Any, ...]:
    snapshot = {k: row[k] for k in GRANT_COLUMNS}
    if isinstance(snapshot["request"], str):
        snapshot["request"] = json.loads(snapshot["request"])
    return (event, row["id"], row["requester"], _json(snapshot), now)


def _add_events(batch: _Batch, events: Sequence[tuple[str, dict[str, Any], int]]) -> None:
    """``_record_events`` in a batch: the same statements in the same order, to go before COMMIT
    (none without events)."""
    if not events:
        return
    batch.add(EVENTS_LOCK_SQL, (EVENTS_LOCK, CHANNEL))
    for event, row, now in events:
        batch.add(EVENT_INSERT, _event_row(event, row, now))


def _page(rows: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    return rows[:limit], len(rows) > limit


def _after(page: PageRequest, id_column: str, where: list[str], params: dict[str, Any]) -> None:
    params["limit"] = page.limit + 1
    if page.after is not None:
        where.append(AFTER.format(id=id_column))
        params["after_at"], params["after_id"] = page.after.created_at, page.after.id


def _unique_violation() -> type[Exception]:
    import psycopg.errors

    return psycopg.errors.UniqueViolation


def _constraint(exc: Exception) -> str:
    diag = getattr(exc, "diag", None)
    return str(getattr(diag, "constraint_name", "") or "")


# -- parts ------------------------------------------------------------------------------------------------
class PostgresKeys(_Part):
    @staticmethod
    def _key(row: dict[str, Any]) -> SigningKey:
        row["public_jwk"] = json.loads(row["public_jwk"])
        return cast(SigningKey, row)

    @_on_store_loop
    async def all(self) -> list[SigningKey]:
        rows = await self._db.all(f"SELECT {_cols(KEY_COLUMNS)} FROM signing_keys ORDER BY created_at DESC, seq DESC")  # noqa: S608 - fixed columns
        return [self._key(r) for r in rows]

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def active_kid(self, alg: str = "EdDSA") -> str | None:
        row = await self._db.one(
            "SELECT kid FROM signing_keys WHERE alg = %s AND retired_at IS NULL ORDER BY created_at DESC, seq DESC LIMIT 1",
            (alg,),
        )
        return str(row["kid"]) if row else None

    @staticmethod
    async def _insert(cur: psycopg.AsyncCursor[Any], key: SigningKey) -> None:
        await cur.execute(
            "INSERT INTO signing_keys (kid, alg, private_pem, public_jwk, created_at, retired_at) VALUES (%s,%s,%s,%s,%s,NULL)",
            (key["kid"], key["alg"], key["private_pem"], json.dumps(key["public_jwk"]), key["created_at"]),
        )

    @_on_store_loop
    async def add_first(self, key: SigningKey) -> bool:
        async with self._db.tx() as cur:
            await _lock(cur, KEYS_LOCK)  # statements after it see what an earlier holder committed
            await cur.execute("SELECT 1 AS x FROM signing_keys WHERE alg = %s AND retired_at IS NULL LIMIT 1", (key["alg"],))
            if await cur.fetchone():
                return False
            await self._insert(cur, key)
            return True

    @_on_store_loop
    async def rotate(self, key: SigningKey, now: int) -> list[str]:
        async with self._db.tx() as cur:
            await _lock(cur, KEYS_LOCK)
            await cur.execute(
                "UPDATE signing_keys SET retired_at = %s, private_pem = '' WHERE alg = %s AND retired_at IS NULL RETURNING kid",
                (now, key["alg"]),
            )
            retired = await cur.fetchall()
            await self._insert(cur, key)
        return [str(r["kid"]) for r in retired]

    @_on_store_loop
    async def drop_retired_before(self, cutoff: int) -> int:
        async with self._db.statement() as cur:
            await cur.execute("DELETE FROM signing_keys WHERE retired_at IS NOT NULL AND retired_at < %s", (cutoff,))
            return int(cur.rowcount)

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def revoke(self, kid: str, now: int) -> bool:
        async with self._db.statement() as cur:
            await cur.execute("DELETE FROM signing_keys WHERE kid = %s", (kid,))
            return int(cur.rowcount) == 1


def _grant(row: dict[str, Any]) -> Grant:
    row["request"] = json.loads(row["request"]) if isinstance(row["request"], str) else row["request"]
    return cast(Grant, row)


async def _email_taken(cur: psycopg.AsyncCursor[Any], email: str) -> bool:
    """Is ``email`` an agent's, a person's, or used as a person's (an owner, approver or delegator)?
    Callers hold PRINCIPALS_LOCK."""
    await cur.execute(
        """SELECT 1 AS x FROM agents WHERE email = %(email)s OR owner = %(email)s OR approver = %(email)s
           UNION ALL SELECT 1 FROM delegations WHERE delegator = %(email)s
           UNION ALL SELECT 1 FROM people WHERE email = %(lower)s LIMIT 1""",
        {"email": email, "lower": email.lower()},
    )
    return await cur.fetchone() is not None


async def _has_table(cur: psycopg.AsyncCursor[Any], name: str) -> bool:
    await cur.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (name,))
    row = await cur.fetchone()
    return bool(row and row["present"])


class PostgresAgents(_Part):
    @staticmethod
    async def _check_people(cur: psycopg.AsyncCursor[Any], owner: str | None, approver: str | None) -> None:
        """Owners and approvers are persons: never an agent's e-mail (D11)."""
        for field, email in (("owner", owner), ("approver", approver)):
            if email is None:
                continue
            await cur.execute("SELECT 1 AS x FROM agents WHERE email = %s", (email.lower(),))
            if await cur.fetchone():
                raise Conflict(field)

    @staticmethod
    async def _check_key(cur: psycopg.AsyncCursor[Any], key_id: str, agent_id: str) -> None:
        await cur.execute("SELECT 1 AS x FROM agents WHERE key_id = %s AND agent_id != %s", (key_id, agent_id))
        if await cur.fetchone():
            raise Conflict("publicKey")

    @_on_store_loop
    async def create(self, agent: Agent, reserved_emails: frozenset[str], *, max_per_owner: int = 0) -> Agent:
        row: dict[str, Any] = {c: agent.get(c) for c in AGENT_COLUMNS}
        row["key_generation"] = row["key_generation"] or 1
        email = str(row["email"])
        if email.lower() in {e.lower() for e in reserved_emails}:
            raise Conflict("email")
        async with self._db.tx() as cur:
            await _lock(cur, PRINCIPALS_LOCK)  # e-mails are unique across tables: one checker at a time
            if await _email_taken(cur, email):
                raise Conflict("email")
            row["owner_id"] = await _person_id_of(cur, row["owner"])
            row["approver_id"] = await _person_id_of(cur, row["approver"])
            if max_per_owner > 0:  # PRINCIPALS_LOCK serialises enrolments: the count holds
                await cur.execute(
                    "SELECT count(*) AS n FROM agents WHERE owner_id = %s" if row["owner_id"] else
                    "SELECT count(*) AS n FROM agents WHERE owner_id IS NULL AND owner = %s",
                    (row["owner_id"] or row["owner"],),
                )
                counted = await cur.fetchone()
                if counted is not None and int(counted["n"]) >= max_per_owner:
                    raise LimitReached("agents_per_person", max_per_owner)
            await self._check_key(cur, row["key_id"], row["agent_id"])
            await self._check_people(cur, row["owner"], row["approver"])
            try:
                await cur.execute(_insert("agents", AGENT_COLUMNS), row)
            except _unique_violation() as exc:
                name = _constraint(exc)
                raise Conflict("email" if name == "agents_email_key" else "publicKey" if name == "agents_key_id_key" else "id") from None
        return cast(Agent, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, ident: str) -> Agent | None:
        row = await self._db.one("SELECT * FROM agents WHERE agent_id = %s OR email = %s", (ident, ident.lower()))
        return cast(Agent | None, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get_by_id(self, agent_id: str) -> Agent | None:
        return cast(Agent | None, await self._db.one("SELECT * FROM agents WHERE agent_id = %s", (agent_id,)))

    @_on_store_loop
    async def list(self, page: PageRequest) -> tuple[list[Agent], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        _after(page, "agent_id", where, params)
        rows = await self._db.all(
            f"SELECT * FROM agents WHERE {' AND '.join(where)} ORDER BY created_at DESC, agent_id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return cast(list[Agent], found), more

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def update(self, agent_id: str, changes: dict[str, Any]) -> Agent | None:
        cols = [c for c in AGENT_CHANGEABLE if c in changes]
        async with self._db.tx() as cur:
            await _lock(cur, PRINCIPALS_LOCK)
            await cur.execute("SELECT * FROM agents WHERE agent_id = %s FOR UPDATE", (agent_id,))
            current = await cur.fetchone()
            if current is None:
                return None
            await self._check_people(cur, changes.get("owner"), changes.get("approver"))
            if "key_id" in changes:
                await self._check_key(cur, changes["key_id"], agent_id)
            if not cols:
                return cast(Agent, current)
            new_key = "public_key" in changes and changes["public_key"] != current["public_key"]
            sets = [f"{c} = %(set_{c})s" for c in cols]
            values = {f"set_{c}": changes[c] for c in cols}
            for party in ("owner", "approver"):  # a new e-mail is bound to its person now (D11)
                if party in changes and changes[party] != current[party]:
                    sets.append(f"{party}_id = %(set_{party}_id)s")
                    values[f"set_{party}_id"] = await _person_id_of(cur, changes[party])
            if new_key:
                sets.append("key_generation = key_generation + 1")  # tokens of the old key stop working (D11)
            try:
                await cur.execute(
                    f"UPDATE agents SET {', '.join(sets)} WHERE agent_id = %(agent_id)s RETURNING *",  # noqa: S608 - column names from a fixed set
                    {**values, "agent_id": agent_id},
                )
            except _unique_violation():
                raise Conflict("publicKey") from None
            row = await cur.fetchone()
        return cast(Agent, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def retire(
        self, agent_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Agent, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        async with self._db.tx() as cur:
            await cur.execute("SELECT * FROM agents WHERE agent_id = %s FOR UPDATE", (agent_id,))
            found = await cur.fetchone()
            if found is None or (found["status"] == "disabled" and not delete):
                return None
            agent = dict(found)
            await cur.execute(
                f"""UPDATE grants SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s,
                       decision_reason = %(reason)s, version = version + 1
                    WHERE requester_id = %(agent_id)s AND status IN ('pending', 'approved') AND {live}
                    RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                {**params, "by": by, "now": now, "reason": reason, "agent_id": agent_id},
            )
            revoked = [dict(r) for r in await cur.fetchall()]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            await cur.execute(
                "UPDATE delegations SET status = 'revoked', revoked_by = %s, revoked_at = %s WHERE delegate = %s AND status = 'active'",
                (by, now, agent["email"]),
            )
            await cur.execute("DELETE FROM challenges WHERE agent_id = %s", (agent_id,))
            if delete:
                await cur.execute("DELETE FROM agents WHERE agent_id = %s", (agent_id,))
            else:
                await cur.execute(
                    "UPDATE agents SET status = 'disabled', key_generation = key_generation + 1, updated_at = %s WHERE agent_id = %s",
                    (now, agent_id),
                )
            await _record_events(cur, [("grant.revoked", g, now) for g in revoked])
        return cast(Agent, agent), [_grant(g) for g in revoked]

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def decidable_by(self, person_id: str) -> builtins.list[str]:
        rows = await self._db.all(
            "SELECT agent_id FROM agents WHERE owner_id = %s OR approver_id = %s ORDER BY created_at, agent_id",
            (person_id, person_id),
        )
        return [str(r["agent_id"]) for r in rows]


class PostgresChallenges(_Part):
    @_on_store_loop
    async def create(self, challenge: str, agent_id: str, expires_at: int, now: int) -> None:
        # One statement: ended challenges go (an index range) as the new one is stored.
        await self._db.one(
            """WITH ended AS (DELETE FROM challenges WHERE expires_at < %s)
               INSERT INTO challenges (challenge, agent_id, expires_at) VALUES (%s, %s, %s)""",
            (now, challenge, agent_id, expires_at), rows=False,
        )

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, challenge: str, agent_id: str) -> int | None:
        # The DELETE decides: a concurrent taker on any node waits for the row lock, then finds no row.
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM challenges WHERE challenge = %s AND agent_id = %s RETURNING expires_at", (challenge, agent_id)
            )
            row = await cur.fetchone()
        return int(row["expires_at"]) if row else None


GRANT_INSERT = f"INSERT INTO grants ({_cols(GRANT_COLUMNS)}) VALUES ({', '.join(['%s'] * len(GRANT_COLUMNS))})"  # noqa: S608 - fixed columns


class PostgresGrants(_Part):
    @_on_store_loop
    async def create(self, grant: Grant, events: Sequence[str], *, bound: OwnerBound | None = None) -> Grant:
        row: dict[str, Any] = {k: grant.get(k) for k in GRANT_COLUMNS}
        row["version"] = 1
        values = [row[k] for k in GRANT_COLUMNS]
        values[GRANT_COLUMNS.index("request")] = _json(row["request"])
        if bound is not None and bound.limit > 0 and row["status"] == "pending":
            owner = await self._db.one("SELECT owner_id, owner FROM agents WHERE agent_id = %s", (row["requester_id"],))
            if owner is not None:
                return await self._create_bounded(row, values, events, owner, bound)
        # One round trip: BEGIN, the grant, its events, COMMIT (a unique violation stops the rest; rolled back).
        async with self._db.batch() as batch:
            batch.plain("BEGIN")
            batch.add(GRANT_INSERT, values)
            _add_events(batch, [(event, row, int(row["created_at"])) for event in events])
            batch.plain("COMMIT")
            try:
                await batch.send()
            except _unique_violation():
                raise Conflict("id") from None
        return cast(Grant, row)

    async def _create_bounded(
        self, row: dict[str, Any], values: builtins.list[Any], events: Sequence[str], owner: dict[str, Any], bound: OwnerBound
    ) -> Grant:
        """An agent's pending grant under ``pending_per_owner``: the per-owner lock serialises the
        count and the insert across processes and nodes (several round trips, only for this case)."""
        key = owner["owner_id"] or owner["owner"]
        same_owner = "owner_id = %(owner)s" if owner["owner_id"] else "owner_id IS NULL AND owner = %(owner)s"
        live, params = not_lapsed_sql(bound.lapse, GRANT_COLUMNS, paramstyle=PG)
        async with self._db.tx() as cur:
            await cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (OWNER_LOCKS, key))
            await cur.execute(
                f"""SELECT count(*) AS n FROM grants WHERE status = 'pending' AND {live}
                    AND requester_id IN (SELECT agent_id FROM agents WHERE {same_owner})""",  # noqa: S608 - generated from the Lapse
                {**params, "owner": key},
            )
            counted = await cur.fetchone()
            if counted is not None and int(counted["n"]) >= bound.limit:
                raise LimitReached("pending_per_owner", bound.limit)
            try:
                await cur.execute(GRANT_INSERT, values)
            except _unique_violation():
                raise Conflict("id") from None
            await _record_events(cur, [(event, row, int(row["created_at"])) for event in events])
        return cast(Grant, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, grant_id: str) -> Grant | None:
        row = await self._db.one("SELECT * FROM grants WHERE id = %s", (grant_id,))
        return _grant(row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def find_reusable(self, requester_id: str, reuse_key: str, lapse: Lapse) -> Grant | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        row = await self._db.one(
            f"""SELECT * FROM grants WHERE requester_id = %(requester_id)s AND reuse_key = %(reuse_key)s
                AND status = 'approved' AND {live} ORDER BY created_at DESC, id DESC LIMIT 1""",  # noqa: S608 - generated from the Lapse
            {**params, "requester_id": requester_id, "reuse_key": reuse_key},
        )
        return _grant(row) if row else None

    @_on_store_loop
    async def list(
        self,
        *,
        lapse: Lapse,
        page: PageRequest,
        status: str | None = None,
        requester: str | None = None,
        requester_ids: Sequence[str] | None = None,
    ) -> tuple[list[Grant], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        if status:
            clause, extra = status_sql(lapse, status, GRANT_COLUMNS, paramstyle=PG)
            where.append(clause)
            params.update(extra)
        if requester:
            where.append("requester = %(requester)s")
            params["requester"] = requester
        if requester_ids is not None:
            ids = builtins.list(dict.fromkeys(requester_ids))
            if not ids:
                return [], False
            where.append("requester_id = ANY(%(requester_ids)s)")
            params["requester_ids"] = ids
        _after(page, "id", where, params)
        rows = await self._db.all(
            f"SELECT * FROM grants WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %(limit)s",  # noqa: S608 - generated clauses, values bound
            params,
        )
        found, more = _page(rows, page.limit)
        return [_grant(r) for r in found], more

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def update_if(
        self, grant_id: str, *, expect: Sequence[str], changes: dict[str, Any], event: str, lapse: Lapse, now: int
    ) -> Grant | None:
        """One conditional UPDATE: a concurrent caller on any node waits for the row lock, re-checks
        the WHERE clause on the row the winner left, and gets no row."""
        if not expect:
            return None
        cols = [c for c in changes if c in GRANT_CHANGEABLE]
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        sets = ", ".join([*(f"{c} = %(set_{c})s" for c in cols), "version = version + 1"])
        params.update({f"set_{c}": (_json(changes[c]) if c == "request" else changes[c]) for c in cols})
        params["expect"] = builtins.list(expect)
        params["id"] = grant_id
        # Two round trips: BEGIN and the UPDATE; then the events and COMMIT (or ROLLBACK: no row).
        async with self._db.batch() as batch:
            batch.plain("BEGIN")
            batch.add(
                f"UPDATE grants SET {sets} WHERE id = %(id)s AND status = ANY(%(expect)s) AND {live} RETURNING *",  # noqa: S608 - column names from a fixed set
                params,
            )
            row = await batch.send()
            if row is None:
                batch.plain("ROLLBACK")
                await batch.send()
                return None
            _add_events(batch, [(event, row, now)])
            batch.plain("COMMIT")
            await batch.send()
        return _grant(dict(row))

    @_on_store_loop
    async def expire(self, lapse: Lapse, now: int, events_before: int) -> builtins.list[Grant]:
        lapsed, params = lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        found = await self._db.one(
            f"""SELECT EXISTS (SELECT 1 FROM grants WHERE {lapsed}) AS lapsed,
                       EXISTS (SELECT 1 FROM grant_events WHERE created_at < %(events_before)s) AS old""",  # noqa: S608 - generated from the Lapse
            {**params, "events_before": events_before},
        )
        if not found or not (found["lapsed"] or found["old"]):
            return []
        async with self._db.tx() as cur:
            # Several nodes may sweep at once: a row another sweep expired first no longer matches
            # (re-checked after its row lock), so each grant expires, with its event, once.
            await cur.execute(
                f"UPDATE grants SET status = %(expired)s, version = version + 1 WHERE {lapsed} RETURNING *",  # noqa: S608 - generated from the Lapse
                {**params, "expired": EXPIRED},
            )
            rows = [dict(r) for r in await cur.fetchall()]
            rows.sort(key=lambda g: (g["created_at"], g["id"]))
            await cur.execute("DELETE FROM grant_events WHERE created_at < %s", (events_before,))
            await _record_events(cur, [("grant.expired", row, now) for row in rows])
        return [_grant(r) for r in rows]

    @_on_store_loop
    async def events_after(self, seq: int, limit: int) -> builtins.list[GrantEvent]:
        rows = await self._db.all("SELECT * FROM grant_events WHERE seq > %s ORDER BY seq LIMIT %s", (seq, limit))
        events: list[GrantEvent] = []
        for row in rows:
            row["grant"] = json.loads(row.pop("grant_json"))
            events.append(cast(GrantEvent, row))
        return events

    @_on_store_loop
    async def last_event_seq(self) -> int:
        row = await self._db.one("SELECT max(seq) AS seq FROM grant_events")
        return int(row["seq"] or 0) if row else 0

    @_on_store_loop
    async def summary(self, lapse: Lapse) -> tuple[dict[str, int], int | None]:
        # One statement: stored counts per status (grants_status), lapsed ones moved to expired
        # (index ranges on grants_lapse / grants_status), the oldest live pending one.
        lapsed, params = lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        pending, extra = status_sql(lapse, "pending", GRANT_COLUMNS, paramstyle=PG)
        async with self._db.tx() as cur:
            await cur.execute("SELECT status, count(*) AS n FROM grants GROUP BY status")
            counts = {str(r["status"]): int(r["n"]) for r in await cur.fetchall()}
            await cur.execute(f"SELECT status, count(*) AS n FROM grants WHERE {lapsed} GROUP BY status", params)  # noqa: S608 - generated from the Lapse
            moved = await cur.fetchall()
            await cur.execute(f"SELECT min(created_at) AS oldest FROM grants WHERE {pending}", extra)  # noqa: S608 - generated from the Lapse
            row = await cur.fetchone()
        for r in moved:
            counts[str(r["status"])] -= int(r["n"])
            counts[EXPIRED] = counts.get(EXPIRED, 0) + int(r["n"])
        oldest = row["oldest"] if row else None
        return {k: v for k, v in counts.items() if v}, (int(oldest) if oldest is not None else None)

    async def wait_for_events(self, seconds: float) -> None:
        """Return when grant events may have been committed by any node (NOTIFY) since the last
        call returned, or after ``seconds``. While the LISTEN connection is down it just
        waits the timeout (the hub then polls)."""
        db = self._db
        if db.served_events is not None and asyncio.get_running_loop() is db.served_loop:
            await db.served_events.wait(seconds)
        else:
            assert db.events is not None
            await db.loop.run(db.events.wait(seconds))


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
        row = await self._db.one("SELECT count FROM rate_counters WHERE key = %s AND window_start = %s", (key, window_start))
        return int(row["count"]) if row else 0


def _delegation(row: dict[str, Any]) -> Delegation:
    row["scopes"] = json.loads(row["scopes"])
    return cast(Delegation, row)


class PostgresDelegations(_Part):
    @_on_store_loop
    async def create(self, delegation: Delegation) -> Delegation:
        row: dict[str, Any] = {k: delegation.get(k) for k in DELEGATION_COLUMNS}
        async with self._db.tx() as cur:
            await _lock(cur, PRINCIPALS_LOCK)  # against an agent enrolled with the delegator's e-mail meanwhile
            await cur.execute("SELECT 1 AS x FROM agents WHERE email = %s", (str(row["delegator"]).lower(),))
            if await cur.fetchone():
                raise Conflict("delegator")  # a delegator is a person (D11)
            try:
                await cur.execute(_insert("delegations", DELEGATION_COLUMNS), {**row, "scopes": _json(row["scopes"])})
            except _unique_violation():
                raise Conflict("id") from None
        return cast(Delegation, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, delegation_id: str) -> Delegation | None:
        row = await self._db.one("SELECT * FROM delegations WHERE id = %s", (delegation_id,))
        return _delegation(row) if row else None

    @_nul_finds_nothing(lambda: ([], False))
    @_on_store_loop
    async def list(self, *, party: str | None, page: PageRequest) -> tuple[list[Delegation], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        if party is not None:
            where.append("(delegator = %(party)s OR delegate = %(party)s)")
            params["party"] = party
        _after(page, "id", where, params)
        rows = await self._db.all(
            f"SELECT * FROM delegations WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return [_delegation(r) for r in found], more

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def revoke(self, delegation_id: str, by: str, now: int) -> Delegation | None:
        async with self._db.statement() as cur:
            await cur.execute(
                """UPDATE delegations SET status = 'revoked', revoked_at = %s, revoked_by = %s
                   WHERE id = %s AND status = 'active' RETURNING *""",
                (now, by, delegation_id),
            )
            row = await cur.fetchone()
        return _delegation(dict(row)) if row else None

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def live_for(self, delegate: str, lapse: Lapse) -> builtins.list[Delegation]:
        live, params = not_lapsed_sql(lapse, DELEGATION_COLUMNS, paramstyle=PG)
        rows = await self._db.all(
            f"""SELECT * FROM delegations WHERE delegate = %(delegate)s AND status = 'active' AND {live}
                ORDER BY created_at, id""",  # noqa: S608 - generated from the Lapse
            {**params, "delegate": delegate},
        )
        return [_delegation(r) for r in rows]


# -- people (grantd.store.people) ----------------------------------------------------------------------
def _fold(value: str) -> str:
    return value.casefold()


def _person(row: dict[str, Any]) -> Person:
    person = {c: row[c] for c in PERSON_COLUMNS}
    person["admin"] = bool(person["admin"])
    return cast(Person, person)


def _credential(row: dict[str, Any]) -> PasskeyCredential:
    row["transports"] = json.loads(row["transports"])
    row["backed_up"] = bool(row["backed_up"])
    return cast(PasskeyCredential, row)


def _registration(row: dict[str, Any]) -> RegistrationUrl:
    row["admin"] = bool(row["admin"])
    return cast(RegistrationUrl, row)


async def _person_id_of(cur: psycopg.AsyncCursor[Any], email: Any) -> str | None:
    """The person an owner/approver e-mail names now (D11), in the caller's transaction."""
    if not email:
        return None
    await cur.execute("SELECT person_id FROM people WHERE email = %s", (str(email).lower(),))
    found = await cur.fetchone()
    return str(found["person_id"]) if found else None


async def _bind_parties(cur: psycopg.AsyncCursor[Any], email: str, person_id: str) -> None:
    """Agents that name ``email`` as owner/approver without an id are bound to ``person_id`` (D11)."""
    for party in ("owner", "approver"):
        await cur.execute(
            f"UPDATE agents SET {party}_id = %s WHERE {party} = %s AND {party}_id IS NULL",  # noqa: S608 - fixed names
            (person_id, email),
        )


async def _insert_person(cur: psycopg.AsyncCursor[Any], person: Person, *, unnamed: bool = False) -> Person:
    """In the caller's transaction: an e-mail is unique across persons and agents (D11); agents that
    name the e-mail without an id are bound to the new person, or with ``unnamed`` any naming
    refuses the insert (``Conflict("named")``)."""
    row: dict[str, Any] = {c: person.get(c) for c in PERSON_COLUMNS}
    row["email"] = str(row["email"]).lower()
    row["admin"] = bool(row["admin"])
    await _lock(cur, PRINCIPALS_LOCK)
    await cur.execute("SELECT 1 AS x FROM agents WHERE email = %s", (row["email"],))
    if await cur.fetchone():
        raise Conflict("email")
    if unnamed:
        await cur.execute(
            """SELECT 1 AS x FROM agents WHERE owner = %(email)s OR approver = %(email)s
               UNION ALL SELECT 1 FROM delegations
               WHERE status = 'active' AND (delegator = %(email)s OR delegate = %(email)s) LIMIT 1""",
            {"email": row["email"]},
        )
        if await cur.fetchone():
            raise Conflict("named")
    columns = (*PERSON_COLUMNS, "email_fold", "name_fold")
    try:
        await cur.execute(
            _insert("people", columns), {**row, "email_fold": _fold(row["email"]), "name_fold": _fold(str(row["name"]))}
        )
    except _unique_violation() as exc:
        raise Conflict("email" if _constraint(exc) == "people_email_key" else "id") from None
    await _bind_parties(cur, row["email"], row["person_id"])
    return cast(Person, row)


async def _insert_credential(cur: psycopg.AsyncCursor[Any], credential: PasskeyCredential) -> PasskeyCredential:
    row: dict[str, Any] = {c: credential.get(c) for c in CREDENTIAL_COLUMNS}
    row["transports"] = builtins.list(row["transports"] or [])
    row["backed_up"] = bool(row["backed_up"])
    try:
        await cur.execute(_insert("passkey_credentials", CREDENTIAL_COLUMNS), {**row, "transports": _json(row["transports"])})
    except _unique_violation():
        raise Conflict("credential_id") from None
    return cast(PasskeyCredential, row)


class PostgresPeople(_Part):
    @_on_store_loop
    async def create(self, person: Person, *, unnamed: bool = False) -> Person:
        async with self._db.tx() as cur:
            return await _insert_person(cur, person, unnamed=unnamed)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, ident: str) -> Person | None:
        row = await self._db.one(f"{PERSON_SELECT} WHERE person_id = %s OR email = %s", (ident, ident.lower()))
        return _person(row) if row else None

    @_nul_finds_nothing(lambda: ([], False))
    @_on_store_loop
    async def list(self, page: PageRequest, search: str | None = None) -> tuple[builtins.list[Person], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        if search:
            # strpos(), not LIKE: the search is a literal substring (% and _ are not wildcards)
            where.append("(strpos(email_fold, %(needle)s) > 0 OR strpos(name_fold, %(needle)s) > 0)")
            params["needle"] = _fold(search)
        _after(page, "person_id", where, params)
        rows = await self._db.all(
            f"{PERSON_SELECT} WHERE {' AND '.join(where)} ORDER BY created_at DESC, person_id DESC LIMIT %(limit)s",
            params,
        )
        found, more = _page(rows, page.limit)
        return [_person(r) for r in found], more

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def update(self, person_id: str, changes: dict[str, Any]) -> Person | None:
        cols = [c for c in PERSON_CHANGEABLE if c in changes]
        values: dict[str, Any] = {f"set_{c}": (bool(changes[c]) if c == "admin" else changes[c]) for c in cols}
        sets = [f"{c} = %(set_{c})s" for c in cols]
        if "name" in changes:
            sets.append("name_fold = %(name_fold)s")
            values["name_fold"] = _fold(str(changes["name"]))
        async with self._db.statement() as cur:
            if not cols:
                await cur.execute("SELECT * FROM people WHERE person_id = %s", (person_id,))
            else:
                await cur.execute(
                    f"UPDATE people SET {', '.join(sets)} WHERE person_id = %(person_id)s RETURNING *",  # noqa: S608 - column names from a fixed set
                    {**values, "person_id": person_id},
                )
            row = await cur.fetchone()
        return _person(row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def delete(self, person_id: str, now: int) -> Person | None:
        async with self._db.tx() as cur:
            await cur.execute("DELETE FROM people WHERE person_id = %s RETURNING *", (person_id,))
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute("DELETE FROM passkey_credentials WHERE person_id = %s", (person_id,))
            await cur.execute("DELETE FROM sessions WHERE person_id = %s", (person_id,))
            await cur.execute("DELETE FROM webauthn_challenges WHERE person_id = %s", (person_id,))
            await cur.execute("DELETE FROM registration_urls WHERE email = %s AND used_at IS NULL", (row["email"],))
            await _lock_person_refresh(cur, person_id)
            await cur.execute("DELETE FROM refresh_tokens WHERE person_id = %s", (person_id,))
            await cur.execute("DELETE FROM consents WHERE person_id = %s", (person_id,))
        return _person(row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def retire(
        self, person_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Person, builtins.list[Grant]] | None:
        live, params = not_lapsed_sql(lapse, GRANT_COLUMNS, paramstyle=PG)
        async with self._db.tx() as cur:
            await cur.execute(f"{PERSON_SELECT} WHERE person_id = %s FOR UPDATE", (person_id,))
            found = await cur.fetchone()
            if found is None:
                return None
            person = _person(dict(found))
            email = person["email"]
            await cur.execute(
                f"""UPDATE grants SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s,
                       decision_reason = %(reason)s, version = version + 1
                    WHERE requester_id = %(person_id)s AND status IN ('pending', 'approved') AND {live}
                    RETURNING *""",  # noqa: S608 - generated from the Lapse over a column allow-list
                {**params, "by": by, "now": now, "reason": reason, "person_id": person_id},
            )
            revoked = [dict(r) for r in await cur.fetchall()]
            revoked.sort(key=lambda g: (g["created_at"], g["id"]))
            await cur.execute(
                """UPDATE delegations SET status = 'revoked', revoked_by = %(by)s, revoked_at = %(now)s
                   WHERE status = 'active' AND (delegator = %(email)s OR delegate = %(email)s)""",
                {"by": by, "now": now, "email": email},
            )
            await cur.execute("UPDATE sessions SET revoked_at = %s WHERE person_id = %s AND revoked_at IS NULL", (now, person_id))
            await _lock_person_refresh(cur, person_id)
            await cur.execute(
                "UPDATE refresh_tokens SET revoked_at = %s WHERE person_id = %s AND revoked_at IS NULL", (now, person_id)
            )
            await _bind_parties(cur, email, person_id)
            if delete:
                await cur.execute("DELETE FROM people WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM passkey_credentials WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM sessions WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM webauthn_challenges WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM registration_urls WHERE email = %s AND used_at IS NULL", (email,))
                await cur.execute("DELETE FROM refresh_tokens WHERE person_id = %s", (person_id,))
                await cur.execute("DELETE FROM consents WHERE person_id = %s", (person_id,))
            else:
                await cur.execute("UPDATE people SET status = 'disabled', updated_at = %s WHERE person_id = %s", (now, person_id))
            await _record_events(cur, [("grant.revoked", g, now) for g in revoked])
        return person, [_grant(g) for g in revoked]


class PostgresCredentials(_Part):
    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, credential_id: str) -> PasskeyCredential | None:
        row = await self._db.one("SELECT * FROM passkey_credentials WHERE credential_id = %s", (credential_id,))
        return _credential(row) if row else None

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def list_for(self, person_id: str) -> builtins.list[PasskeyCredential]:
        rows = await self._db.all(
            "SELECT * FROM passkey_credentials WHERE person_id = %s ORDER BY created_at, credential_id", (person_id,)
        )
        return [_credential(r) for r in rows]

    @_on_store_loop
    async def add(self, credential: PasskeyCredential) -> PasskeyCredential:
        async with self._db.statement() as cur:
            return await _insert_credential(cur, credential)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def use(self, credential_id: str, sign_count: int, now: int) -> PasskeyCredential | None:
        # The conditional UPDATE decides: of concurrent users of one count, exactly one moves it.
        async with self._db.statement() as cur:
            await cur.execute(
                """UPDATE passkey_credentials SET sign_count = %(count)s, last_used_at = %(now)s
                   WHERE credential_id = %(id)s AND (sign_count < %(count)s OR (sign_count = 0 AND %(count)s = 0))
                   RETURNING *""",
                {"count": int(sign_count), "now": now, "id": credential_id},
            )
            row = await cur.fetchone()
        return _credential(row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def delete(self, person_id: str, credential_id: str, now: int) -> bool | None:
        async with self._db.tx() as cur:
            # Lock the person's passkeys first: a concurrent delete waits here, then counts what
            # this one left (two deletes of the last two cannot both win).
            await cur.execute(
                "SELECT credential_id FROM passkey_credentials WHERE person_id = %s ORDER BY credential_id FOR UPDATE",
                (person_id,),
            )
            await cur.fetchall()
            await cur.execute(
                "SELECT count(*) AS n, count(*) FILTER (WHERE credential_id = %s) AS mine FROM passkey_credentials WHERE person_id = %s",
                (credential_id, person_id),
            )
            counted = await cur.fetchone()
            if not counted or not counted["mine"]:
                return None
            if counted["n"] <= 1:
                return False
            await cur.execute(
                "DELETE FROM passkey_credentials WHERE person_id = %s AND credential_id = %s", (person_id, credential_id)
            )
            if int(cur.rowcount) != 1:
                return False
            await cur.execute(
                "UPDATE sessions SET revoked_at = %s WHERE credential_id = %s AND revoked_at IS NULL", (now, credential_id)
            )
            return True


class PostgresSessions(_Part):
    @_on_store_loop
    async def create(self, session: Session) -> Session:
        row: dict[str, Any] = {c: session.get(c) for c in SESSION_COLUMNS}
        # One statement: sessions that ended before this one began go (an index range: cheap).
        try:
            await self._db.one(
                f"WITH ended AS (DELETE FROM sessions WHERE expires_at <= %(created_at)s) {_insert('sessions', SESSION_COLUMNS)}",  # noqa: S608 - fixed columns
                row, rows=False,
            )
        except _unique_violation():
            raise Conflict("session_id") from None
        return cast(Session, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, session_id: str, now: int) -> Session | None:
        row = await self._db.one(
            "SELECT * FROM sessions WHERE session_id = %s AND revoked_at IS NULL AND expires_at > %s", (session_id, now)
        )
        return cast(Session, row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def touch(self, session_id: str, now: int) -> None:
        async with self._db.statement() as cur:
            await cur.execute(
                "UPDATE sessions SET last_seen_at = %s WHERE session_id = %s AND last_seen_at < %s", (now, session_id, now)
            )

    @_on_store_loop
    async def list(self, page: PageRequest, person_id: str | None, now: int) -> tuple[builtins.list[Session], bool]:
        where = ["revoked_at IS NULL", "expires_at > %(now)s"]
        params: dict[str, Any] = {"now": now}
        if person_id is not None:
            where.append("person_id = %(person_id)s")
            params["person_id"] = person_id
        _after(page, "session_id", where, params)
        rows = await self._db.all(
            f"SELECT * FROM sessions WHERE {' AND '.join(where)} ORDER BY created_at DESC, session_id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return cast(builtins.list[Session], found), more

    async def _revoke(self, column: str, value: str, now: int) -> int:
        async with self._db.statement() as cur:
            await cur.execute(
                f"UPDATE sessions SET revoked_at = %s WHERE {column} = %s AND revoked_at IS NULL AND expires_at > %s",  # noqa: S608 - column from this class
                (now, value, now),
            )
            return int(cur.rowcount)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke("family_id", family_id, now)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_person(self, person_id: str, now: int) -> int:
        return await self._revoke("person_id", person_id, now)


class PostgresRegistrations(_Part):
    @_on_store_loop
    async def create(self, registration: RegistrationUrl) -> RegistrationUrl:
        row: dict[str, Any] = {c: registration.get(c) for c in REGISTRATION_COLUMNS}
        row["email"] = str(row["email"]).lower()
        row["admin"] = bool(row["admin"])
        async with self._db.statement() as cur:
            try:
                await cur.execute(_insert("registration_urls", REGISTRATION_COLUMNS), row)
            except _unique_violation() as exc:
                raise Conflict("token_hash" if _constraint(exc) == "registration_urls_token_hash_key" else "id") from None
        return cast(RegistrationUrl, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get_by_token_hash(self, token_hash: str) -> RegistrationUrl | None:
        row = await self._db.one("SELECT * FROM registration_urls WHERE token_hash = %s", (token_hash,))
        return _registration(row) if row else None

    @_on_store_loop
    async def list(self, page: PageRequest) -> tuple[builtins.list[RegistrationUrl], bool]:
        where = ["TRUE"]
        params: dict[str, Any] = {}
        _after(page, "id", where, params)
        rows = await self._db.all(
            f"SELECT * FROM registration_urls WHERE {' AND '.join(where)} ORDER BY created_at DESC, id DESC LIMIT %(limit)s",  # noqa: S608 - fixed clauses
            params,
        )
        found, more = _page(rows, page.limit)
        return [_registration(r) for r in found], more

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def delete(self, registration_id: str) -> bool:
        async with self._db.statement() as cur:
            await cur.execute("DELETE FROM registration_urls WHERE id = %s", (registration_id,))
            return int(cur.rowcount) == 1

    @_on_store_loop
    async def complete(
        self, token_hash: str, person: Person, credential: PasskeyCredential, now: int
    ) -> tuple[Person, PasskeyCredential]:
        # One transaction: a Conflict anywhere rolls everything back (the URL stays unused).
        async with self._db.tx() as cur:
            await cur.execute(
                """UPDATE registration_urls SET used_at = %s
                   WHERE token_hash = %s AND used_at IS NULL AND expires_at > %s RETURNING *""",
                (now, token_hash, now),
            )
            used = await cur.fetchone()
            if used is None:
                raise Conflict("token")  # unknown, used (by a concurrent redeemer too) or expired
            email = str(used["email"]).lower()
            if str(person["email"]).lower() != email:
                raise Conflict("email")  # the record must be for the URL's e-mail
            await _lock(cur, PRINCIPALS_LOCK)  # a concurrent redeemer for the same e-mail creates it once
            await cur.execute(f"{PERSON_SELECT} WHERE email = %s", (email,))
            found = await cur.fetchone()
            owner = _person(found) if found else await _insert_person(cur, person)
            if used["purpose"] == "register":
                await cur.execute(
                    "SELECT 1 AS x FROM passkey_credentials WHERE person_id = %s AND rp_id = %s",
                    (owner["person_id"], used["rp_id"]),
                )
                if await cur.fetchone():
                    raise Conflict("credential")  # a register URL never grafts onto an account with a passkey
            added = await _insert_credential(cur, cast(PasskeyCredential, {**credential, "person_id": owner["person_id"]}))
        return owner, added


WEBAUTHN_INSERT = _insert("webauthn_challenges", WEBAUTHN_CHALLENGE_COLUMNS)


class PostgresWebAuthnChallenges(_Part):
    @_on_store_loop
    async def create(self, challenge: WebAuthnChallenge, now: int) -> None:
        row: dict[str, Any] = {c: challenge.get(c) for c in WEBAUTHN_CHALLENGE_COLUMNS}
        # One statement: ended challenges go (an index range) as the new one is stored.
        try:
            await self._db.one(
                f"WITH ended AS (DELETE FROM webauthn_challenges WHERE expires_at <= %(sweep_before)s) {WEBAUTHN_INSERT}",  # noqa: S608 - fixed columns
                {**row, "sweep_before": now}, rows=False,
            )
        except _unique_violation():
            raise Conflict("challenge") from None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, challenge: str, purpose: str, now: int) -> WebAuthnChallenge | None:
        # The DELETE decides: of any number of concurrent takers on any node, one sees the row.
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM webauthn_challenges WHERE challenge = %s AND purpose = %s RETURNING *", (challenge, purpose)
            )
            row = await cur.fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(WebAuthnChallenge, row)


# -- OAuth (grantd.store.oauth) --------------------------------------------------------------------------
async def _lock_person_refresh(cur: psycopg.AsyncCursor[Any], person_id: str) -> None:
    """Serialise the changes of one person's refresh families. A row lock is not enough: under READ
    COMMITTED a revocation's UPDATE does not see the token a concurrent rotation inserts (its
    snapshot is older), so the new token of a just-revoked family would live on. Every writer of
    a person's families takes this lock first; statements after it see what earlier holders
    committed."""
    await cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (REFRESH_LOCKS, person_id))


async def _sweep(cur: psycopg.AsyncCursor[Any], table: str, key: str, cutoff: int) -> None:
    """Drop rows that expired at or before ``cutoff``, at most RATE_SWEEP_LIMIT of them. SKIP LOCKED:
    rows another transaction holds are its business, so concurrent writers never queue behind (or
    deadlock with) each other over rows nobody needs (``table`` and ``key`` are this module's)."""
    await cur.execute(
        f"""DELETE FROM {table} WHERE ({key}) IN (
               SELECT {key} FROM {table} WHERE expires_at <= %s LIMIT %s FOR UPDATE SKIP LOCKED)""",  # noqa: S608 - fixed names
        (cutoff, RATE_SWEEP_LIMIT),
    )


def _was_live(rows: builtins.list[dict[str, Any]], now: int) -> int:
    """How many of the rows a revoking UPDATE returned were live before it."""
    return sum(1 for r in rows if r["used_at"] is None and r["expires_at"] > now)


def _union_scope(stored: str, new: str) -> str:
    """The stored scopes, then the new ones not among them (order kept: the same in every backend)."""
    scopes = stored.split()
    scopes += [s for s in dict.fromkeys(new.split()) if s not in scopes]
    return " ".join(scopes)


REFRESH_SELECT = f"SELECT {_cols(REFRESH_TOKEN_COLUMNS)} FROM refresh_tokens"  # noqa: S608 - fixed columns
DEVICE_COLUMNS_SQL = ", ".join('"interval"' if c == "interval" else c for c in DEVICE_CODE_COLUMNS)


def _device_insert() -> str:
    return f"INSERT INTO device_codes ({DEVICE_COLUMNS_SQL}) VALUES ({_marks(DEVICE_CODE_COLUMNS)})"  # noqa: S608 - fixed column list


class PostgresOneTime(_Part):
    @_on_store_loop
    async def put(self, kind: str, key: str, data: dict[str, Any], expires_at: int, now: int) -> None:
        async with self._db.tx() as cur:
            await cur.execute(  # an expired twin makes way (waiting for whoever holds it)
                "DELETE FROM oauth_onetime WHERE kind = %s AND key = %s AND expires_at <= %s", (kind, key, now)
            )
            await _sweep(cur, "oauth_onetime", "kind, key", now)
            try:
                await cur.execute(
                    "INSERT INTO oauth_onetime (kind, key, data, expires_at) VALUES (%s, %s, %s, %s)",
                    (kind, key, _json(data), expires_at),
                )
            except _unique_violation():
                raise Conflict("key") from None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, kind: str, key: str, now: int) -> dict[str, Any] | None:
        # The DELETE decides: of any number of concurrent takers on any node, one sees the row.
        async with self._db.statement() as cur:
            await cur.execute(
                "DELETE FROM oauth_onetime WHERE kind = %s AND key = %s RETURNING data, expires_at", (kind, key)
            )
            row = await cur.fetchone()
        if row is None or row["expires_at"] <= now:
            return None
        return cast(dict[str, Any], json.loads(row["data"]))


class PostgresRefreshTokens(_Part):
    @_on_store_loop
    async def create(self, token: RefreshToken) -> RefreshToken:
        row: dict[str, Any] = {c: token.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.tx() as cur:
            await _lock_person_refresh(cur, str(row["person_id"]))
            await _sweep(cur, "refresh_tokens", "token_hash", row["created_at"])  # families that ended before
            try:
                await cur.execute(_insert("refresh_tokens", REFRESH_TOKEN_COLUMNS), row)
            except _unique_violation():
                raise Conflict("token_hash") from None
        return cast(RefreshToken, row)

    @_nul_finds_nothing(("unknown", None))
    @_on_store_loop
    async def rotate(self, token_hash: str, new: RefreshToken, now: int) -> tuple[str, RefreshToken | None]:
        row: dict[str, Any] = {c: new.get(c) for c in REFRESH_TOKEN_COLUMNS}
        async with self._db.tx() as cur:
            await cur.execute("SELECT person_id FROM refresh_tokens WHERE token_hash = %s", (token_hash,))
            owner = await cur.fetchone()
            if owner is None:
                return "unknown", None
            await _lock_person_refresh(cur, owner["person_id"])
            # The conditional UPDATE decides: of concurrent redeemers of one token, one marks it used.
            await cur.execute(
                f"""UPDATE refresh_tokens SET used_at = %(now)s
                    WHERE token_hash = %(hash)s AND used_at IS NULL AND revoked_at IS NULL AND expires_at > %(now)s
                    RETURNING {_cols(REFRESH_TOKEN_COLUMNS)}""",  # noqa: S608 - fixed columns
                {"now": now, "hash": token_hash},
            )
            used = await cur.fetchone()
            if used is not None:
                try:
                    await cur.execute(_insert("refresh_tokens", REFRESH_TOKEN_COLUMNS), row)
                except _unique_violation():
                    raise Conflict("token_hash") from None  # rolls the redemption back too
                return "rotated", cast(RefreshToken, {**used, "used_at": None})
            await cur.execute(f"{REFRESH_SELECT} WHERE token_hash = %s", (token_hash,))
            found = await cur.fetchone()
            if found is None:
                return "unknown", None
            old = cast(RefreshToken, found)
            if old["expires_at"] <= now:
                return "expired", old
            if old["revoked_at"] is not None and old["used_at"] is None:
                return "revoked", old
            # used before: a replay (or a stolen copy) — the whole family goes (if it has not yet)
            await cur.execute(
                "UPDATE refresh_tokens SET revoked_at = %s WHERE family_id = %s AND revoked_at IS NULL",
                (now, old["family_id"]),
            )
            return "reused", old

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, token_hash: str) -> RefreshToken | None:
        return cast(RefreshToken | None, await self._db.one(f"{REFRESH_SELECT} WHERE token_hash = %s", (token_hash,)))

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def family_live(self, family_id: str, now: int) -> bool:
        return await self._db.one(
            "SELECT 1 AS x FROM refresh_tokens WHERE family_id = %s AND revoked_at IS NULL AND expires_at > %s LIMIT 1",
            (family_id, now),
        ) is not None

    @staticmethod
    async def _revoke(cur: psycopg.AsyncCursor[Any], where: str, params: dict[str, Any], now: int) -> int:
        await cur.execute(
            f"UPDATE refresh_tokens SET revoked_at = %(now)s WHERE {where} AND revoked_at IS NULL RETURNING used_at, expires_at",  # noqa: S608 - fixed clauses
            {**params, "now": now},
        )
        return _was_live(await cur.fetchall(), now)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_family(self, family_id: str, now: int) -> int:
        async with self._db.tx() as cur:
            await cur.execute("SELECT person_id FROM refresh_tokens WHERE family_id = %s LIMIT 1", (family_id,))
            owner = await cur.fetchone()
            if owner is None:
                return 0
            await _lock_person_refresh(cur, owner["person_id"])
            return await self._revoke(cur, "family_id = %(family_id)s", {"family_id": family_id}, now)

    @_nul_finds_nothing(0)
    @_on_store_loop
    async def revoke_person(self, person_id: str, now: int, client_id: str | None = None) -> int:
        async with self._db.tx() as cur:
            await _lock_person_refresh(cur, person_id)
            if client_id is None:
                return await self._revoke(cur, "person_id = %(person_id)s", {"person_id": person_id}, now)
            return await self._revoke(
                cur, "person_id = %(person_id)s AND client_id = %(client_id)s",
                {"person_id": person_id, "client_id": client_id}, now,
            )

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def list_families(self, person_id: str, now: int) -> builtins.list[RefreshToken]:
        # A live family has exactly one unused token: its newest (a rotation uses the old one and
        # adds the next in one transaction; a reuse revokes the family).
        rows = await self._db.all(
            f"""{REFRESH_SELECT} WHERE person_id = %s AND used_at IS NULL AND revoked_at IS NULL
                AND expires_at > %s ORDER BY created_at DESC, token_hash DESC""",
            (person_id, now),
        )
        return cast(builtins.list[RefreshToken], rows)


class PostgresDeviceCodes(_Part):
    SELECT = f"SELECT {DEVICE_COLUMNS_SQL} FROM device_codes"  # noqa: S608 - fixed columns

    @_on_store_loop
    async def create(self, device: DeviceCode) -> DeviceCode:
        row: dict[str, Any] = {c: device.get(c) for c in DEVICE_CODE_COLUMNS}
        async with self._db.tx() as cur:
            # an expired request with this user code makes way (waiting for whoever holds it); others go as we go
            await cur.execute(
                "DELETE FROM device_codes WHERE user_code = %s AND expires_at <= %s", (row["user_code"], row["created_at"])
            )
            await _sweep(cur, "device_codes", "device_code_hash", row["created_at"])
            try:
                await cur.execute(_device_insert(), row)
            except _unique_violation() as exc:
                raise Conflict("user_code" if _constraint(exc) == "device_codes_user_code_key" else "device_code_hash") from None
        return cast(DeviceCode, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get_by_user_code(self, user_code: str, now: int) -> DeviceCode | None:
        return cast(DeviceCode | None, await self._db.one(
            f"{self.SELECT} WHERE user_code = %s AND expires_at > %s", (user_code, now)
        ))

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def decide(self, user_code: str, person_id: str, approved: bool, now: int) -> DeviceCode | None:
        # The conditional UPDATE decides: of concurrent deciders, exactly one finds it pending.
        async with self._db.statement() as cur:
            await cur.execute(
                f"""UPDATE device_codes SET status = %s, person_id = %s, decided_at = %s
                    WHERE user_code = %s AND status = 'pending' AND expires_at > %s RETURNING {DEVICE_COLUMNS_SQL}""",  # noqa: S608 - fixed columns
                ("approved" if approved else "denied", person_id, now, user_code, now),
            )
            row = await cur.fetchone()
        return cast(DeviceCode, row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def poll(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._db.tx() as cur:
            await cur.execute(f"{self.SELECT} WHERE device_code_hash = %s FOR UPDATE", (device_code_hash,))
            row = await cur.fetchone()
            if row is None:
                return None
            await cur.execute(
                "UPDATE device_codes SET last_polled_at = %s WHERE device_code_hash = %s", (now, device_code_hash)
            )
        return cast(DeviceCode, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def take(self, device_code_hash: str, now: int) -> DeviceCode | None:
        # The DELETE decides: of concurrent token exchanges, exactly one gets the approved request.
        async with self._db.statement() as cur:
            await cur.execute(
                f"""DELETE FROM device_codes WHERE device_code_hash = %s AND status = 'approved' AND expires_at > %s
                    RETURNING {DEVICE_COLUMNS_SQL}""",  # noqa: S608 - fixed columns
                (device_code_hash, now),
            )
            row = await cur.fetchone()
        return cast(DeviceCode, row) if row else None

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def slow_down(self, device_code_hash: str, interval: int, now: int) -> None:
        async with self._db.statement() as cur:
            await cur.execute(
                'UPDATE device_codes SET "interval" = %s WHERE device_code_hash = %s AND "interval" < %s',
                (int(interval), device_code_hash, int(interval)),
            )


class PostgresConsents(_Part):
    SELECT = f"SELECT {_cols(CONSENT_COLUMNS)} FROM consents"  # noqa: S608 - fixed columns

    @_on_store_loop
    async def remember(self, consent: Consent) -> Consent:
        row: dict[str, Any] = {c: consent.get(c) for c in CONSENT_COLUMNS}
        row["scope"] = _union_scope("", str(row["scope"]))
        async with self._db.tx() as cur:
            # One statement inserts the first consent or locks the stored one (a concurrent first
            # insert or withdraw is waited for); then the union is written back under that lock.
            await cur.execute(
                f"""{_insert('consents', CONSENT_COLUMNS)} ON CONFLICT (person_id, client_id)
                    DO UPDATE SET updated_at = EXCLUDED.updated_at RETURNING scope, created_at""",
                row,
            )
            stored = await cur.fetchone()
            assert stored is not None
            row["created_at"] = stored["created_at"]
            merged = _union_scope(stored["scope"], row["scope"])
            if merged != stored["scope"]:
                row["scope"] = merged
                await cur.execute(
                    "UPDATE consents SET scope = %(scope)s WHERE person_id = %(person_id)s AND client_id = %(client_id)s",
                    row,
                )
            row["scope"] = merged
        return cast(Consent, row)

    @_nul_finds_nothing(None)
    @_on_store_loop
    async def get(self, person_id: str, client_id: str) -> Consent | None:
        return cast(Consent | None, await self._db.one(
            f"{self.SELECT} WHERE person_id = %s AND client_id = %s", (person_id, client_id)
        ))

    @_nul_finds_nothing(list)
    @_on_store_loop
    async def list_for(self, person_id: str) -> builtins.list[Consent]:
        rows = await self._db.all(f"{self.SELECT} WHERE person_id = %s ORDER BY updated_at DESC, client_id", (person_id,))
        return cast(builtins.list[Consent], rows)

    @_nul_finds_nothing(False)
    @_on_store_loop
    async def withdraw(self, person_id: str, client_id: str, now: int) -> bool:
        async with self._db.tx() as cur:
            await _lock_person_refresh(cur, person_id)
            await cur.execute("DELETE FROM consents WHERE person_id = %s AND client_id = %s", (person_id, client_id))
            deleted = int(cur.rowcount)
            await cur.execute(
                """UPDATE refresh_tokens SET revoked_at = %s
                   WHERE person_id = %s AND client_id = %s AND revoked_at IS NULL""",
                (now, person_id, client_id),
            )
        return deleted == 1


# -- the store ------------------------------------------------------------------------------------------
def _find_pg_tool(name: str) -> str:
    """pg_dump or pg_restore: on PATH, else the newest of Debian's /usr/lib/postgresql/N/bin."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parent.parent.name))
    if not candidates:
        raise StoreError(f"{name} is not installed (Debian: apt-get install postgresql-client)")
    return str(candidates[-1])


def _tables() -> list[str]:
    """Every table the migrations create (and schema_migrations), for restore to replace."""
    names = ["schema_migrations"]
    for _, _, statements in MIGRATIONS:
        for statement in statements:
            words = statement.split()
            if words[:2] == ["CREATE", "TABLE"]:
                names.append(words[2])
    return names


def _make_private_dirs(directory: Path) -> None:
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


class PostgresStore:
    """``grantd.store.Store`` on one PostgreSQL database; see grantd.store for each method's contract."""

    def __init__(self, dsn: str, pool_size: int = 10):
        if not dsn:
            raise StoreError("storage.dsn is empty")
        self._db = _Database(dsn, pool_size)
        self.keys = PostgresKeys(self._db)
        self.agents = PostgresAgents(self._db)
        self.challenges = PostgresChallenges(self._db)
        self.grants = PostgresGrants(self._db)
        self.delegations = PostgresDelegations(self._db)
        self.rates = PostgresRates(self._db)
        self.people = PostgresPeople(self._db)
        self.credentials = PostgresCredentials(self._db)
        self.sessions = PostgresSessions(self._db)
        self.registrations = PostgresRegistrations(self._db)
        self.webauthn_challenges = PostgresWebAuthnChallenges(self._db)
        self.onetime = PostgresOneTime(self._db)
        self.refresh_tokens = PostgresRefreshTokens(self._db)
        self.device_codes = PostgresDeviceCodes(self._db)
        self.consents = PostgresConsents(self._db)

    # -- lifecycle --------------------------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        return await self._db.loop.run(self._migrate())

    async def _migrate(self) -> list[int]:
        """Under a session advisory lock: a second node waits, then finds the migrations applied."""
        import psycopg

        applied: list[int] = []
        async with await psycopg.AsyncConnection.connect(self._db.dsn, autocommit=True) as conn:
            await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK,))
            try:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT, applied_at BIGINT)"
                )
                cur = await conn.execute("SELECT version FROM schema_migrations")
                done = {r[0] for r in await cur.fetchall()}
                for version, name, statements in MIGRATIONS:
                    if version in done:
                        continue
                    async with conn.transaction():
                        for statement in statements:
                            await conn.execute(statement.encode())
                        await conn.execute(
                            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (%s, %s, (extract(epoch FROM now()) * 1000)::bigint)",
                            (version, name),
                        )
                    applied.append(version)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))
        return applied

    def schema_version(self) -> int:
        return self._db.loop.run_sync(self._schema_version(), CONNECT_TIMEOUT + 5)

    async def _schema_version(self) -> int:
        async with self._db.tx() as cur:
            if not await _has_table(cur, "schema_migrations"):
                return 0  # not migrated yet
            await cur.execute("SELECT max(version) AS v FROM schema_migrations")
            row = await cur.fetchone()
        return int(row["v"] or 0) if row else 0

    async def ping(self) -> bool:
        try:
            return await self._ping()
        except Exception:
            return False

    @_on_store_loop
    async def _ping(self) -> bool:
        async with self._db.tx(PING_TIMEOUT) as cur:
            await cur.execute("SELECT 1 AS x FROM schema_migrations LIMIT 1")
        return True

    def serving(self) -> None:
        """Called on the loop this process serves requests on: from now on the store's calls from
        that loop run on it, with connections of their own (``_Database.serve_here``). Nothing runs
        in the background until the event hub first waits for events (LISTEN)."""
        self._db.serve_here()

    def close(self) -> None:
        self._db.close()

    async def backup(self, target: str) -> None:
        """``pg_dump -Fc`` (a consistent snapshot; restore with ``pg_restore``) into a new file created
        0600 beforehand. The password, if the DSN has one, goes through PGPASSWORD, not argv."""
        await asyncio.to_thread(self._backup, Path(target))

    def _tool_args(self) -> tuple[str, dict[str, str]]:
        """The DSN for pg_dump/pg_restore without its password (that goes in PGPASSWORD, not argv)."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(self._db.dsn)
        password = params.pop("password", None)
        env = dict(os.environ)
        if password is not None:
            env["PGPASSWORD"] = str(password)
        return f"--dbname={make_conninfo('', **params)}", env

    def _backup(self, file: Path) -> None:
        dbname, env = self._tool_args()
        _make_private_dirs(file.parent)
        try:
            fd = os.open(file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
        except FileExistsError:
            if file.stat().st_size:
                raise StoreError(f"backup target {file} exists and is not empty") from None
            fd = os.open(file, os.O_WRONLY)
        try:
            os.fchmod(fd, FILE_MODE)
            result = subprocess.run(  # noqa: S603 - pg_dump with our own arguments
                [_find_pg_tool("pg_dump"), "--format=custom", "--no-password", dbname],
                stdout=fd, stderr=subprocess.PIPE, env=env, check=False, timeout=3600,
            )
        finally:
            os.close(fd)
        if result.returncode != 0:
            file.unlink(missing_ok=True)
            raise StoreError(f"pg_dump failed: {result.stderr.decode(errors='replace').strip()}")


    async def restore(self, source: str) -> str:
        """Check ``source`` is a ``pg_dump -Fc`` archive of a grantd database with a schema version
        this grantd knows; refuse while another session uses the database (every grantd process
        keeps a pooled connection open); keep the current contents as a ``pg_dump`` beside
        ``source`` (``<source>.before-restore``, 0600); drop grantd's tables and ``pg_restore`` the
        archive in one transaction; migrate forward. The migration lock is held throughout, so a
        grantd starting meanwhile waits."""
        return await asyncio.to_thread(self._restore, Path(source))

    def _restore(self, source: Path) -> str:
        version = self._archive_version(source)
        known = max(v for v, _, _ in MIGRATIONS)
        if version > known:
            raise StoreError(f"{source} has schema version {version}, newer than this grantd knows ({known}): "
                             "restore it with the grantd version that wrote it")
        keep = Path(str(source) + ".before-restore")
        if keep.exists():
            raise StoreError(f"{keep} exists (the copy an earlier restore kept): move it away first")
        self._db.loop.run_sync(self._replace(source, keep), None)
        self._db.loop.run_sync(self._migrate(), None)
        return str(keep)

    def _archive_version(self, source: Path) -> int:
        """The highest schema_migrations version in the archive (pg_restore writes its rows as COPY data)."""
        result = subprocess.run(  # noqa: S603 - pg_restore with our own arguments
            [_find_pg_tool("pg_restore"), "--data-only", "--table=schema_migrations", "--file=-", str(source)],
            capture_output=True, check=False, timeout=600,
        )
        if result.returncode != 0:
            raise StoreError(f"{source} is not a PostgreSQL backup of grantd (pg_restore: "
                             f"{result.stderr.decode(errors='replace').strip()})")
        versions, copying = [], False
        for line in result.stdout.decode(errors="replace").splitlines():
            if line.startswith("COPY ") and "schema_migrations" in line:
                copying = True
            elif copying and line == "\\.":
                copying = False
            elif copying and line.split("\t", 1)[0].isdigit():
                versions.append(int(line.split("\t", 1)[0]))
        if not versions:
            raise StoreError(f"{source} is not a backup of a grantd database (no schema_migrations)")
        return max(versions)

    async def _replace(self, source: Path, keep: Path) -> None:
        import psycopg

        async with await psycopg.AsyncConnection.connect(self._db.dsn, autocommit=True) as conn:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATE_LOCK,))
            row = await cur.fetchone()
            if not row or not row[0]:
                raise StoreError("the database is being migrated or restored by another grantd process: try again")
            try:
                cur = await conn.execute(
                    """SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                       AND pid != pg_backend_pid() AND backend_type = 'client backend'
                       AND application_name != %s""",
                    (self._db.app_name,),
                )
                others = await cur.fetchone()
                if others and others[0] > 0:
                    raise StoreError("the database is in use by another session (a running grantd server or command): "
                                     "stop it first (systemctl stop grantd)")
                await asyncio.to_thread(self._backup, keep)
                dbname, env = self._tool_args()
                await conn.execute(("DROP TABLE IF EXISTS " + ", ".join(_tables()) + " CASCADE").encode())
                # The schema the tables live in exists already (a non-public schema is dumped with its
                # CREATE SCHEMA): restore everything of the archive but that entry.
                toc = await asyncio.to_thread(_restore_list_without_schema, source)
                try:
                    result = await asyncio.to_thread(
                        subprocess.run,
                        [_find_pg_tool("pg_restore"), "--single-transaction", "--exit-on-error", "--no-owner",
                         "--no-privileges", "--no-password", f"--use-list={toc}", dbname, str(source)],
                        capture_output=True, env=env, check=False, timeout=3600,
                    )
                finally:
                    toc.unlink(missing_ok=True)
                if result.returncode != 0:
                    raise StoreError(f"pg_restore failed (the previous contents are in {keep}): "
                                     f"{result.stderr.decode(errors='replace').strip()}")
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK,))


def _restore_list_without_schema(source: Path) -> Path:
    """The archive's table of contents (``pg_restore --list``) without SCHEMA entries, in a 0600 file."""
    listing = subprocess.run(  # noqa: S603 - pg_restore with our own arguments
        [_find_pg_tool("pg_restore"), "--list", str(source)], capture_output=True, check=True, timeout=600,
    ).stdout.decode(errors="replace")
    kept = [line for line in listing.splitlines() if " SCHEMA " not in line]
    fd, name = tempfile.mkstemp(prefix="grantd-restore-", suffix=".list")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("\n".join(kept) + "\n")
    return Path(name)


class _PostgresBackend:
    """The ``postgres`` storage backend: opens a PostgresStore. ``check_config`` (``grantd config
    validate``, D18) says what would stop ``serve``: psycopg missing, no DSN, or a database that
    cannot be reached or refuses the DSN (one connection, closed at once; nothing is written)."""

    @staticmethod
    def _preconditions(config: Any) -> list[str]:
        problems = []
        try:
            import psycopg  # noqa: F401
        except ImportError:
            problems.append('storage.plugin: "postgres" needs psycopg 3: pip install "grantd[postgres]" '
                            "(offline: pip install --no-index --find-links DIR \"grantd[postgres]\")")
        if not config.storage.dsn:
            problems.append('storage.dsn: missing (e.g. dsn = "file:postgres-dsn" or "env:GRANTD_DSN")')
        return problems

    def check_config(self, config: Any) -> list[str]:
        problems = self._preconditions(config)
        if problems:
            return problems
        import psycopg

        try:
            psycopg.connect(config.storage.dsn, connect_timeout=int(CONNECT_TIMEOUT),
                            application_name="grantd config validate").close()
        except psycopg.Error as exc:
            return [f"storage.dsn: cannot connect to PostgreSQL ({' '.join(str(exc).split())})"]
        return []

    def __call__(self, config: Any) -> PostgresStore:
        from grantd.config import ConfigError

        problems = self._preconditions(config)
        if problems:
            raise ConfigError(problems, config.path)
        return PostgresStore(config.storage.dsn, config.storage.pool_size)


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], PostgresStore]]:
    return {"postgres": _PostgresBackend()}
