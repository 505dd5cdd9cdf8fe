"""Migration "the decision log keeps each leaf hash once" (issue 23) on a log written before it:
its level-0 rows in ``tlog_nodes`` go, the same nodes are answered (level 0 from the leaves), the
root is the same and the log grows on. SQLite (migration 14) and PostgreSQL (migration 12). And
"a grant's leaves are found by its creation time" (SQLite 15, PostgreSQL 13): the leaves written
before it are still found by their grant id, beside the new ones."""

from __future__ import annotations

from typing import Any

import pytest

from grantd.core.tlog.merkle import CompactRange, MemoryTree, root
from grantd.core.tlog.sequencer import integrate
from grantd.plugins.storage_sqlite import SQLiteStore

from .factories import NOW
from .migrated import postgres_migrated_to, sqlite_migrated_to
from .postgres import schemas as postgres_server

pytestmark = pytest.mark.anyio

LEAVES = [f"leaf {i}".encode() for i in range(11)]
EVERY = [(level, i) for level in range(5) for i in range(12)]


def _old_rows() -> tuple[list[tuple[int, bytes, bytes, Any]], list[tuple[int, int, bytes]]]:
    """The rows a sequencer wrote before the migration: the leaves, and every node, level 0 too."""
    step = integrate(CompactRange(0, []), LEAVES)
    assert any(level == 0 for level, _, _ in step.node_rows)
    return [(i, leaf, digest, None) for i, leaf, digest in step.leaf_rows], step.node_rows


async def _append_one(
    store: Any, leaf: bytes, grant_id: str | None = None, created_at: int | None = None
) -> None:
    assert await store.tlog.lease("p1", NOW - 1, 60_000)
    head = await store.tlog.head()
    stored = await store.tlog.nodes(CompactRange.coords(head["size"]))
    step = integrate(CompactRange.load(head["size"], lambda coords: stored), [leaf])
    assert await store.tlog.append(
        holder="p1",
        now=NOW,
        expect_size=head["size"],
        leaves=[(i, leaf, digest, grant_id, created_at) for i, leaf, digest in step.leaf_rows],
        nodes=step.node_rows,
        grant_seq=0,
        event_seq=0,
    )


def _seed_sqlite(store: SQLiteStore, version: int, leaves: list[Any], nodes: list[Any]) -> None:
    """The schema of ``version`` with ``leaves`` (without a grant's time) and ``nodes`` written."""
    with store._db.write():
        conn = store._db.conn
        sqlite_migrated_to(store, version)
        conn.executemany(
            "INSERT INTO tlog_leaves (idx, leaf, leaf_hash, grant_id) VALUES (?, ?, ?, ?)", leaves
        )
        conn.executemany("INSERT INTO tlog_nodes (level, idx, hash) VALUES (?, ?, ?)", nodes)
        conn.execute("UPDATE tlog_state SET size = ?", (len(LEAVES),))


async def _seed_postgres(store: Any, version: int, leaves: list[Any], nodes: list[Any]) -> None:
    await postgres_migrated_to(store, version)

    async def seed() -> None:
        async with store._db.tx() as cur:
            await cur.executemany(
                "INSERT INTO tlog_leaves (idx, leaf, leaf_hash, grant_id) VALUES (%s, %s, %s, %s)", leaves
            )
            await cur.executemany("INSERT INTO tlog_nodes (level, idx, hash) VALUES (%s, %s, %s)", nodes)
            await cur.execute("UPDATE tlog_state SET size = %s", (len(LEAVES),))

    await store._db.loop.run(seed())


async def _check_migrated(store: Any) -> None:
    tree = MemoryTree.of_leaves(LEAVES)
    found = await store.tlog.nodes(EVERY)
    assert found == {c: tree.nodes[c] for c in EVERY if c in tree.nodes}
    assert root(len(LEAVES), lambda coords: found) == tree.root()
    await _append_one(store, b"one more")  # and the log grows on from the stored nodes
    grown = await store.tlog.nodes([(lv, i) for lv in range(5) for i in range(13)])
    assert root(len(LEAVES) + 1, lambda coords: grown) == MemoryTree.of_leaves([*LEAVES, b"one more"]).root()


async def test_sqlite_migration_14_keeps_each_leaf_hash_once(tmp_path):
    store = SQLiteStore(tmp_path / "grantd.db")
    try:
        _seed_sqlite(store, 13, *_old_rows())
        assert store.schema_version() == 13
        assert 14 in await store.migrate()
        assert store._db.conn.execute("SELECT count(*) FROM tlog_nodes WHERE level = 0").fetchone()[0] == 0
        await _check_migrated(store)
        assert store._db.conn.execute("SELECT count(*) FROM tlog_nodes WHERE level = 0").fetchone()[0] == 0
    finally:
        store.close()


async def test_postgres_migration_12_keeps_each_leaf_hash_once():
    from grantd.plugins.storage_postgres import PostgresStore

    server = postgres_server()
    dsn = server.create_schema()
    store = PostgresStore(dsn)
    try:
        await _seed_postgres(store, 11, *_old_rows())

        async def level_0_rows() -> int:
            rows = await store._db.all("SELECT count(*) AS n FROM tlog_nodes WHERE level = 0")
            return int(rows[0]["n"])

        assert await store._db.loop.run(level_0_rows()) == len(LEAVES)
        assert 12 in await store.migrate()
        assert await store._db.loop.run(level_0_rows()) == 0
        await _check_migrated(store)
        assert await store._db.loop.run(level_0_rows()) == 0
    finally:
        store.close()
        server.drop_schema(dsn)


# -- "a grant's leaves are found by its creation time" (SQLite 15, PostgreSQL 13) ------------------------


def _rows_by_grant() -> tuple[list[tuple[int, bytes, bytes, Any]], list[tuple[int, int, bytes]]]:
    """Old rows whose even leaves are about grant gr_1, the odd ones about no grant."""
    leaves, nodes = _old_rows()
    return [(i, leaf, digest, "gr_1" if i % 2 == 0 else None) for i, leaf, digest, _ in leaves], nodes


async def test_sqlite_migration_15_finds_old_and_new_leaves_of_a_grant(tmp_path):
    store = SQLiteStore(tmp_path / "grantd.db")
    try:
        leaves, nodes = _rows_by_grant()
        _seed_sqlite(store, 14, leaves, [n for n in nodes if n[0]])
        assert 15 in await store.migrate()
        await _append_one(store, b"after", "gr_1", NOW)
        assert await store.tlog.grant_indexes("gr_1", 12, NOW) == [0, 2, 4, 6, 8, 10, 11]
        assert await store.tlog.grant_indexes("gr_1", 12, None) == [0, 2, 4, 6, 8, 10]
    finally:
        store.close()


async def test_postgres_migration_13_finds_old_and_new_leaves_of_a_grant():
    from grantd.plugins.storage_postgres import PostgresStore

    server = postgres_server()
    dsn = server.create_schema()
    store = PostgresStore(dsn)
    try:
        leaves, nodes = _rows_by_grant()
        await _seed_postgres(store, 12, leaves, [n for n in nodes if n[0]])
        assert 13 in await store.migrate()
        await _append_one(store, b"after", "gr_1", NOW)
        assert await store.tlog.grant_indexes("gr_1", 12, NOW) == [0, 2, 4, 6, 8, 10, 11]
        assert await store.tlog.grant_indexes("gr_1", 12, None) == [0, 2, 4, 6, 8, 10]
    finally:
        store.close()
        server.drop_schema(dsn)
