"""The SQLite log's multi-row inserts (issue 23): every row lands, in order, and steps of every size
use a handful of statement texts, so they never crowd the connection's statement cache (128 texts),
where the request path's own statements live."""

from __future__ import annotations

import sqlite3

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
