"""The PostgreSQL database of one store: transactions, batches, advisory locks, events, paging."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Concatenate, cast

from grantd.store import StoreError
from grantd.store.records import (
    GRANT_COLUMNS,
)
from grantd.store.rows import event_json

from .constants import _IDLE, _TUPLES_OK, CHANNEL, CLOSE_TIMEOUT, CONNECT_TIMEOUT, EVENTS_LOCK, P, R
from .loop import _LoopThread
from .pool import _Notifications, _Pool

if TYPE_CHECKING:
    import psycopg

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


# Results after which psycopg deallocates every statement prepared on the connection
# (psycopg._preparing.PrepareManager._should_discard), those of ``_Batch`` included.
_CLEARS_PREPARED = re.compile(r"^(?:DROP|ALTER|ROLLBACK|DISCARD ALL|DEALLOCATE ALL)\b")


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
        self.untrusted = False  # what is prepared on the connection is not known: do not reuse it

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
        cleared = bool(_CLEARS_PREPARED.match(cur.statusmessage or ""))
        while cur.nextset():
            cleared = cleared or bool(_CLEARS_PREPARED.match(cur.statusmessage or ""))
        result = cur.pgresult
        row = await cur.fetchone() if result is not None and result.status == _TUPLES_OK else None
        if cleared and not await _recount_prepared(cur.connection, self._prepared):
            self.untrusted = True
        return row


class _Part:
    def __init__(self, db: _Database):
        self._db = db


def _on_store_loop(
    fn: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Any, P], Awaitable[R]]:
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
            self.dsn,
            autocommit=autocommit,
            row_factory=dict_row,
            connect_timeout=int(CONNECT_TIMEOUT),
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
        discard = False
        try:
            async with conn.transaction(), conn.cursor() as cur:
                yield cur
        except Exception:
            discard = not await _recount_prepared(conn, pool.prepared.get(conn))
            raise
        except BaseException:
            discard = True  # cancelled: what is still prepared there is not known
            raise
        finally:
            pool.put(conn, discard=discard)

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
                batch = _Batch(cur, pool.prepared.setdefault(conn, set()))
                yield batch
            failed = batch.untrusted
        finally:
            pool.put(conn, discard=failed)

    async def one(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, rows: bool = True
    ) -> dict[str, Any] | None:
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


async def _recount_prepared(conn: psycopg.AsyncConnection[Any], known: set[str] | None) -> bool:
    """Keep the batches' record of what is prepared on ``conn`` (``_Batch``) true after psycopg
    may have dropped it. psycopg deallocates every statement prepared on a connection (DEALLOCATE
    ALL, when it had prepared some of its own) after a result it takes for a rollback: its own
    rollback of a failed transaction (``_Database.tx``), or a ROLLBACK a batch sent. The batches'
    statements went with them, and the next batch executed one that no longer existed (a 500).
    One read of the catalog, on those paths only. False: not known (do not reuse the connection)."""
    if not known:
        return True
    if conn.closed or conn.pgconn.transaction_status != _IDLE:
        return False
    try:
        cur = await conn.execute("SELECT name FROM pg_prepared_statements")
        still = {row["name"] for row in await cur.fetchall()}
    except Exception:  # noqa: BLE001 - the connection is not trusted any more either way
        return False
    known &= still
    return True


async def _lock(cur: psycopg.AsyncCursor[Any], key: int) -> None:
    """A transaction-scoped advisory lock: held until this transaction commits or rolls back."""
    await cur.execute("SELECT pg_advisory_xact_lock(%s)", (key,))


async def _record_events(
    cur: psycopg.AsyncCursor[Any], events: Sequence[tuple[str, dict[str, Any], int]]
) -> None:
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
    return (event, row["id"], row["requester"], event_json(row, GRANT_COLUMNS), now)


def _add_events(batch: _Batch, events: Sequence[tuple[str, dict[str, Any], int]]) -> None:
    """``_record_events`` in a batch: the same statements in the same order, to go before COMMIT
    (none without events)."""
    if not events:
        return
    batch.add(EVENTS_LOCK_SQL, (EVENTS_LOCK, CHANNEL))
    for event, row, now in events:
        batch.add(EVENT_INSERT, _event_row(event, row, now))


def _unique_violation() -> type[Exception]:
    import psycopg.errors

    return psycopg.errors.UniqueViolation


def _constraint(exc: Exception) -> str:
    diag = getattr(exc, "diag", None)
    return str(getattr(diag, "constraint_name", "") or "")
