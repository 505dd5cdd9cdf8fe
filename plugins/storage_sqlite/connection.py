"""The SQLite file's connections: one for reads, one for writes (``BEGIN IMMEDIATE``), paging."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from grantd.store.rows import fold

BUSY_TIMEOUT_MS = 10_000
CHECKPOINT_INTERVAL = 0.5  # seconds between WAL checkpoints of a serving process
# Under a steady stream of writes a PASSIVE checkpoint copies the log into the database but never
# finds it fully copied with no writer in between, so the log never starts over and the -wal file
# grows without end (7.8 GB in a few minutes of the bench's writes), and it never shrinks. Past
# WAL_RESTART_BYTES the checkpointer waits up to RESTART_WAIT_MS for readers and writers to step
# aside and copies the whole log (RESTART), so the next writer starts the log over; a log started
# over keeps at most WAL_SIZE_LIMIT bytes of file (reused, not allocated again). Not at every
# checkpoint: restarting every 0.5 s made writers wait (+8-15 % CPU per write answer, measured).
WAL_RESTART_BYTES = 512 * 1024 * 1024
WAL_SIZE_LIMIT = 256 * 1024 * 1024
RESTART_WAIT_MS = 200
SPILL_AFTER_PAGES = 4096
COMPANIONS = ("-wal", "-shm")


def _switch_to_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode = WAL``, waiting while another process opens the same new file. Two
    processes switching a fresh file at once can each hold the shared lock the other's switch must
    upgrade past; SQLite then answers "database is locked" at once instead of calling the busy
    handler (deadlock avoidance), so the timeout given to ``connect`` never applies. Seen in CI:
    two processes migrating one new file (the contract's ``test_concurrent_migrations``)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


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
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        conn.row_factory = sqlite3.Row
        _switch_to_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        # 512 KiB of page cache per connection instead of SQLite's 2 MiB: each server process holds
        # three connections, and the pages grantd reads per request (an index path and a row) stay
        # hot in either; the rest come from the OS page cache. Peak RSS -4 MiB per process, CPU per
        # answer unchanged within the bench's noise (issue 14, docs/performance.md).
        conn.execute("PRAGMA cache_size = -512")
        # ...but a write transaction that dirties more pages than that (the decision log's sequencer
        # writes up to 4,000 leaves in one step: ~2.5 MiB of new pages) would spill them to the WAL
        # before its commit, and write many of them there again at the commit: twice the page
        # writes, 6 % of the sequencer's CPU in the server (issue 23, docs/performance.md). Dirty
        # pages are kept up to SPILL_AFTER_PAGES (16 MiB of 4 KiB pages), so such a step writes each
        # page once; an unbounded transaction (a purge of old events) still spills past that, so its
        # memory stays bounded. Clean pages are freed back to ``cache_size`` as before.
        conn.execute(f"PRAGMA cache_spill = {SPILL_AFTER_PAGES}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.create_function("grantd_fold", 1, fold, deterministic=True)
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


def _insert(conn: sqlite3.Connection, table: str, columns: Sequence[str], row: dict[str, Any]) -> None:
    conn.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})",  # noqa: S608 - fixed table and column lists
        row,
    )
