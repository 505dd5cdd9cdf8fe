"""The SQLite store's abuse-limit counters in shared memory (plugins/storage_sqlite/counter_table.py):
what the contract suite cannot see from outside — a full table stays exact, counters counted in
the database before the table existed go on, the file is private, and a file of another layout
starts over. (Exactness across processes: the contract's test_processes.)"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from grantd.plugins.storage_sqlite import SQLiteStore, counter_table

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path):
    opened = SQLiteStore(tmp_path / "g.db")
    await opened.migrate()
    yield opened
    opened.close()


def database_count(store: SQLiteStore, key: str) -> int | None:
    row = store._db.one("SELECT count FROM rate_counters WHERE key = ?", (key,))
    return None if row is None else int(row["count"])


async def test_a_hit_is_not_a_database_write_and_the_file_is_private(store, tmp_path):
    assert [await store.rates.hit("verify.address:10.0.0.1", 0, 60_000, 10) for _ in range(3)] == [1, 2, 3]
    assert database_count(store, "verify.address:10.0.0.1") is None
    mode = stat.S_IMODE((tmp_path / "g.db-limits").stat().st_mode)
    assert mode == 0o600, oct(mode)


async def test_a_full_table_counts_in_the_database_and_no_flood_resets_a_counter(store, monkeypatch):
    monkeypatch.setattr(counter_table, "SLOTS", counter_table.PROBE)  # every key shares one probe window
    for n in range(counter_table.PROBE):  # a flood of keys whose windows end at 1,000
        assert await store.rates.hit(f"flood:{n}", 0, 1_000, 500) == 1
    victim = "authenticate.agent:agt_victim"
    assert await store.rates.hit(victim, 0, 60_000, 600) == 1  # no free slot: the database counts it
    assert await store.rates.hit(victim, 0, 60_000, 700) == 2
    assert database_count(store, victim) == 2
    assert await store.rates.count(victim, 0) == 2
    # the flood's windows end: the victim gets a slot and goes on from its database count
    assert await store.rates.hit(victim, 0, 60_000, 1_500) == 3
    assert await store.rates.hit(victim, 0, 60_000, 1_600) == 4
    assert await store.rates.count(victim, 0) == 4
    assert database_count(store, victim) == 2  # counted in the table from then on


async def test_counters_counted_in_the_database_before_the_table_existed_go_on(store, tmp_path):
    with store._db.write() as conn:
        conn.execute(
            "INSERT INTO rate_counters (key, window_start, count, ends_at) VALUES ('verify.address:10.0.0.9', 0, 5, 60000)"
        )
    assert not (tmp_path / "g.db-limits").exists()
    assert await store.rates.count("verify.address:10.0.0.9", 0) == 5
    assert await store.rates.hit("verify.address:10.0.0.9", 0, 60_000, 100) == 6
    assert await store.rates.hit("verify.address:10.0.0.1", 0, 60_000, 100) == 1


async def test_a_loose_file_is_made_private_and_one_of_another_layout_starts_over(tmp_path):
    limits = tmp_path / "g.db-limits"
    limits.write_bytes(b"not a counter table")
    os.chmod(limits, 0o644)
    store = SQLiteStore(tmp_path / "g.db")
    await store.migrate()
    try:
        assert await store.rates.hit("k", 0, 60_000, 1) == 1
        assert stat.S_IMODE(limits.stat().st_mode) == 0o600
        assert limits.read_bytes().startswith(counter_table.MAGIC)
    finally:
        store.close()
    again = SQLiteStore(tmp_path / "g.db")  # a second opening maps the same counters
    try:
        assert await again.rates.hit("k", 0, 60_000, 2) == 2
    finally:
        again.close()


async def test_a_file_of_another_layout_is_replaced_under_its_name_while_mapped_ones_go_on(
    store, tmp_path, monkeypatch
):
    assert await store.rates.hit("k", 0, 60_000, 1) == 1  # this process maps the table of 65,536 slots
    monkeypatch.setattr(counter_table, "SLOTS", counter_table.PROBE)
    other = SQLiteStore(tmp_path / "g.db")  # "another version": another layout under the same name
    try:
        assert await other.rates.hit("k", 0, 60_000, 2) == 1  # a new table, the counters start over
        assert (
            tmp_path / "g.db-limits"
        ).stat().st_size == counter_table.HEADER_SIZE + 32 * counter_table.SLOT.size
        # the first process's map was not shrunk under it (that would be SIGBUS): it goes on counting
        assert await store.rates.hit("k", 0, 60_000, 3) == 2
    finally:
        other.close()
    assert not list(tmp_path.glob("*.new"))


async def test_a_table_that_cannot_be_opened_leaves_the_counting_to_the_database(tmp_path, grantd_log):
    (tmp_path / "g.db-limits").mkdir()  # not a file
    store = SQLiteStore(tmp_path / "g.db")
    await store.migrate()
    try:
        assert [await store.rates.hit("k", 0, 60_000, 1) for _ in range(2)] == [1, 2]
        assert database_count(store, "k") == 2
        assert await store.rates.count("k", 0) == 2
        assert "cannot use" in grantd_log.text and "g.db-limits" in grantd_log.text
    finally:
        store.close()


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(30)
"""


async def test_a_process_stuck_holding_the_table_does_not_freeze_the_event_loop(store, tmp_path):
    assert await store.rates.hit("k", 0, 60_000, 1) == 1  # the table exists
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "g.db-limits")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            for _ in range(30):
                await asyncio.sleep(0.01)
                ticks += 1

        waiting = asyncio.ensure_future(store.rates.hit("k", 0, 60_000, 2))
        await tick()  # the loop runs while the hit waits for the lock
        assert ticks == 30 and not waiting.done()
        holder.kill()  # a dead holder's lock is released by the kernel
        holder.wait()
        assert await asyncio.wait_for(waiting, 5) == 2
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
