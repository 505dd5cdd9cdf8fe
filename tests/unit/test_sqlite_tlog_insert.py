"""The SQLite log's multi-row inserts (issue 23): every row lands, in order, and steps of every size
use a handful of statement texts, so they never crowd the connection's statement cache (128 texts),
where the request path's own statements live."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.plugins.storage_sqlite.tlog import _insert


class Recording:
    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.texts: set[str] = set()

    def execute(self, sql: str, params: list[object]) -> sqlite3.Cursor:
        self.texts.add(sql)
        return self.conn.execute(sql, params)


def test_every_row_lands_in_order_whatever_the_count() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    total = 0
    for count in (0, 1, 2, 3, 127, 128, 129, 200, 255, 256, 451, 1000):
        rows = [(total + i, f"r{total + i}") for i in range(count)]
        _insert(conn, "INSERT INTO t (a, b) VALUES ", 2, rows)  # type: ignore[arg-type]
        total += count
    assert [r[0] for r in conn.execute("SELECT a FROM t ORDER BY rowid")] == list(range(total))
    assert conn.execute("SELECT count(DISTINCT b) FROM t").fetchone()[0] == total


def test_steps_of_every_size_use_at_most_eight_statement_texts() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER)")
    recording = Recording(conn)
    for count in range(1, 600):
        _insert(recording, "INSERT INTO t (a) VALUES ", 1, [(i,) for i in range(count)])  # type: ignore[arg-type]
    assert len(recording.texts) <= 8
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == sum(range(1, 600))


def test_blob_columns_are_stored_as_the_same_blobs() -> None:
    """``blobs`` binds those columns as ``bytearray`` (the sqlite3 module's fast path): SQLite keeps
    the same BLOB, typed as one, and it reads back as the same bytes."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INTEGER, b BLOB, c TEXT, d BLOB)")
    rows = [(i, bytes([i % 256]) * (i % 7), f"r{i}", b"\x00\xff" * i) for i in range(300)]
    _insert(conn, "INSERT INTO t (a, b, c, d) VALUES ", 4, rows, blobs=(1, 3))  # type: ignore[arg-type]
    stored = conn.execute("SELECT a, b, c, d, typeof(b), typeof(d) FROM t ORDER BY a").fetchall()
    assert [tuple(r[:4]) for r in stored] == rows
    assert {(r[4], r[5]) for r in stored} == {("blob", "blob")}


def _writes() -> int:
    """Write system calls this thread made so far (``syscw`` of proc(5)'s ``/proc/thread-self/io``):
    the append runs on the calling thread, and another test's store checkpointing in a thread of
    this process is not counted."""
    for line in Path("/proc/thread-self/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    raise AssertionError("no syscw in /proc/thread-self/io")


def test_a_step_of_four_thousand_leaves_writes_each_page_once(tmp_path: Path) -> None:
    """The write connection keeps a large transaction's dirty pages (up to ``SPILL_AFTER_PAGES``)
    instead of spilling them to the WAL once they pass the 512 KiB page cache and writing them
    there again at the commit: a sequencer step's append makes about two write calls per page it
    adds (a WAL frame's header, then its page), where spilling made about four."""

    async def run() -> tuple[int, int]:
        store = SQLiteStore(tmp_path / "g.db")
        await store.migrate()
        conn = store._db.wconn
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages_before = conn.execute("PRAGMA page_count").fetchone()[0]
        assert await store.tlog.lease("me", 1, 60_000)
        leaves = [
            (i, b"{" + b"x" * 400 + b"}", bytes(32), f"gr_{i:08d}", 1_700_000_000_000 + i)
            for i in range(4000)
        ]
        writes = _writes()
        assert await store.tlog.append(
            holder="me", now=2, expect_size=0, leaves=leaves, nodes=[], grant_seq=0, event_seq=0
        )
        writes = _writes() - writes
        grown = conn.execute("PRAGMA page_count").fetchone()[0] - pages_before
        store.close()
        return writes, grown

    writes, grown = asyncio.run(run())
    assert grown > 128  # far more than the 512 KiB page cache holds
    assert writes < grown * 2.5 + 40, (writes, grown)
