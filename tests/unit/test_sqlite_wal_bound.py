"""A serving SQLite store keeps its -wal file bounded under a steady stream of writes and reads.

A PASSIVE checkpoint copies the log into the database but never starts the log over while writes
keep coming, so the -wal file grew without end (7.8 GB in a few minutes of the bench's load). The
checkpointer copies the whole log so that the next writer starts it over once the file passes a bound, and a restarted log keeps at most
``journal_size_limit`` bytes of file. Here the bounds are made small and a writer and a reader run
flat out for 2.5 seconds beside the checkpointer (the -wal file of the old
checkpointer passed 100 MiB in that time; bounded it stays under 10)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.plugins.storage_sqlite import connection as sqlite_connection
from grantd.plugins.storage_sqlite import store as sqlite_store

MIB = 1024 * 1024


def _hammer(path: Path, stop: threading.Event, *, write: bool) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute(
        "PRAGMA wal_autocheckpoint = 0"
    )  # as a serving process's connections: the checkpointer's job
    try:
        if write:
            conn.execute("CREATE TABLE IF NOT EXISTS scratch (n INTEGER PRIMARY KEY, body BLOB)")
        n = 0
        while not stop.is_set():
            if write:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO scratch (body) VALUES (randomblob(2000))")
                conn.execute("DELETE FROM scratch WHERE n < ?", (n - 50,))
                conn.execute("COMMIT")
            else:
                conn.execute("SELECT count(*) FROM scratch").fetchone()
            n += 1
            time.sleep(0.0002)  # as requests come: flat out, but not one transaction straight after another
    finally:
        conn.close()


def test_the_wal_file_stays_bounded_under_steady_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_connection, "WAL_SIZE_LIMIT", MIB // 2)
    monkeypatch.setattr(sqlite_store, "WAL_RESTART_BYTES", 2 * MIB)
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_INTERVAL", 0.05)
    path = tmp_path / "grantd.db"
    store = SQLiteStore(path)
    asyncio.run(store.migrate())
    store.serving()
    stop = threading.Event()
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("CREATE TABLE scratch (n INTEGER PRIMARY KEY, body BLOB)")
    setup.close()
    workers = [
        threading.Thread(target=_hammer, args=(path, stop), kwargs={"write": w}) for w in (True, False, False)
    ]
    wal = Path(f"{path}-wal")
    largest = 0
    try:
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            largest = max(largest, wal.stat().st_size if wal.exists() else 0)
            time.sleep(0.01)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        store.close()
    assert largest < 32 * MIB, f"the -wal file grew to {largest / MIB:.1f} MiB"
