"""PostgreSQL connections: the pool, the LISTEN connection and the notifications it wakes."""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grantd.store import StoreError

from .constants import _IDLE, CHANNEL, CONNECT_TIMEOUT, LISTEN_RETRY, MAX_LIFETIME

if TYPE_CHECKING:
    import psycopg

    from .connection import _Database

log = logging.getLogger("grantd")


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
                raise StoreError(
                    f"no PostgreSQL connection free within {wait:g} s (pool_size {self._db.pool_size})"
                ) from None
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
                self._db.dsn,
                autocommit=True,
                connect_timeout=int(CONNECT_TIMEOUT),
                application_name=self._db.app_name,
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
