"""The store as a whole: migrations, health, backups, and (SQLite) the modes of its files (D12)."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat

import pytest

from grantd.plugins import storage_sqlite
from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.store import StoreError

from .factories import NOW, agent, first_page, grant, key, lapse
from .migrated import sqlite_migrated_to

pytestmark = pytest.mark.anyio


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


async def test_migrate_twice_is_a_no_op(store):
    version = store.schema_version()
    assert version > 0
    assert await store.migrate() == []
    assert store.schema_version() == version
    assert await store.ping() is True


async def test_backup_never_overwrites_and_makes_an_empty_target_private(store, tmp_path):
    # grantd.store.files.open_backup_target, shared by every backend: a backup into a file that
    # holds anything is refused and leaves it as it was; an existing empty file ends up 0600.
    full = tmp_path / "full.db"
    full.write_bytes(b"someone else's data")
    with pytest.raises(StoreError, match="exists and is not empty"):
        await store.backup(str(full))
    assert full.read_bytes() == b"someone else's data"
    empty = tmp_path / "empty.db"
    empty.touch()
    os.chmod(empty, 0o644)
    await store.backup(str(empty))
    assert mode(empty) == 0o600 and empty.stat().st_size > 0


async def test_backup_is_a_private_copy(store, backend, tmp_path):
    await store.keys.add_first(key("k1"))
    await store.agents.create(agent("bot"), frozenset())
    target = tmp_path / "backups" / "copy.db"
    target.parent.mkdir()
    await store.backup(str(target))
    assert mode(target) == 0o600
    if backend == "sqlite":
        copy = SQLiteStore(target)
        try:
            assert await copy.agents.get("agt_bot") == agent("bot")
            assert [k["kid"] for k in await copy.keys.all()] == ["k1"]
            assert copy.schema_version() == store.schema_version()
        finally:
            copy.close()


# -- SQLite's files -------------------------------------------------------------------------------------
@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # what most service accounts run with: files would be 0644
    try:
        yield
    finally:
        os.umask(old)


async def test_sqlite_creates_private_files_and_directories(tmp_path, umask_022):
    path = tmp_path / "new" / "deeper" / "grantd.db"
    store = SQLiteStore(path)
    try:
        await store.migrate()
        await store.keys.add_first(key("k1"))
        for name in ("grantd.db", "grantd.db-wal", "grantd.db-shm"):
            assert mode(path.parent / name) == 0o600, name
        assert mode(path.parent) == 0o700 and mode(path.parent.parent) == 0o700
        await store.backup(str(tmp_path / "new" / "b" / "copy.db"))
        assert mode(tmp_path / "new" / "b" / "copy.db") == 0o600 and mode(tmp_path / "new" / "b") == 0o700
    finally:
        store.close()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def test_sqlite_fixes_loose_modes_with_a_warning(tmp_path):
    path = tmp_path / "grantd.db"
    first = SQLiteStore(path)
    await first.migrate()
    for name in ("grantd.db", "grantd.db-wal", "grantd.db-shm"):
        os.chmod(tmp_path / name, 0o644)
    # A handler on the logger itself: an app built earlier in this process may have configured
    # logging so that "grantd" records do not propagate to pytest's capture.
    collect = _Collect()
    logger = logging.getLogger("grantd")
    logger.addHandler(collect)
    try:
        second = SQLiteStore(path)
        second.close()
    finally:
        logger.removeHandler(collect)
        first.close()
    assert mode(path) == 0o600
    warned = collect.messages
    assert any("grantd.db was mode 0o644" in m for m in warned)
    assert any("grantd.db-wal" in m for m in warned) or not (tmp_path / "grantd.db-wal").exists()


async def test_sqlite_refuses_loose_modes_it_cannot_fix(tmp_path, monkeypatch):
    path = tmp_path / "grantd.db"
    SQLiteStore(path).close()
    os.chmod(path, 0o640)

    def refuse(*args, **kwargs):
        raise PermissionError("not the owner")

    monkeypatch.setattr(os, "chmod", refuse)  # the private-files module calls os.chmod
    with pytest.raises(StoreError) as caught:
        SQLiteStore(path)
    assert str(path) in str(caught.value) and f"chmod 600 {path}" in str(caught.value)


async def test_sqlite_backup_refuses_an_existing_file(tmp_path):
    store = SQLiteStore(tmp_path / "grantd.db")
    try:
        await store.migrate()
        (tmp_path / "taken.db").write_text("data")
        with pytest.raises(StoreError):
            await store.backup(str(tmp_path / "taken.db"))
    finally:
        store.close()


async def test_sqlite_migration_3_upgrades_a_released_database(tmp_path):
    """A database of migrations 1 and 2 (as released) gains requester ids, key generations and
    loses retired private keys."""
    path = tmp_path / "grantd.db"
    conn = sqlite3.connect(path, isolation_level=None)
    store = SQLiteStore(path)
    try:
        with store._db.write():
            sqlite_migrated_to(store, 2)
        conn.execute("INSERT INTO signing_keys VALUES ('old', 'EdDSA', 'PRIVATE', '{}', 1, 2)")
        conn.execute("INSERT INTO signing_keys VALUES ('new', 'EdDSA', 'PRIVATE', '{}', 3, NULL)")
        bot = agent("bot")
        conn.execute(
            "INSERT INTO agents VALUES (?,?,?,?,?,?,?,?,?,?)",
            tuple(
                bot[c]
                for c in (
                    "agent_id",
                    "email",
                    "name",
                    "public_key",
                    "key_id",
                    "owner",
                    "approver",
                    "status",
                    "created_at",
                    "updated_at",
                )
            ),
        )
        for gid, requester in (("by_agent", bot["email"]), ("by_person", "pat@example.com")):
            g = grant(gid, requester=requester)
            conn.execute(
                "INSERT INTO grants (id, type, requester, request, grant_type, status, created_at) VALUES (?,?,?,?,?,?,?)",
                (gid, g["type"], requester, json.dumps(g["request"]), g["grant_type"], g["status"], NOW),
            )
        assert store.schema_version() == 2
        latest = storage_sqlite.MIGRATIONS[-1][0]
        assert await store.migrate() == [
            v for v, _, _ in storage_sqlite.MIGRATIONS if v >= 3
        ]  # 3 and every later one
        assert store.schema_version() == latest
        assert (await store.grants.get("by_agent"))["requester_id"] == "agt_bot"
        assert (await store.grants.get("by_person"))["requester_id"] == "pat@example.com"
        assert (await store.agents.get("agt_bot"))["key_generation"] == 1
        assert {k["kid"]: k["private_pem"] for k in await store.keys.all()} == {"old": "", "new": "PRIVATE"}
        rows, _ = await store.grants.list(lapse=lapse(), page=first_page(), requester_ids=["agt_bot"])
        assert [g["id"] for g in rows] == ["by_agent"]
    finally:
        conn.close()
        store.close()
