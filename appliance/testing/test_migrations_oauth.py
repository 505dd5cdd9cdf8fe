"""Migration "OAuth" on a database released before it: sessions keep their rows and indexes while
person_id becomes nullable and idp/email/name appear (SQLite rebuilds the table, PostgreSQL alters
it), and the new tables work. SQLite (migration 6) and PostgreSQL (migration 3)."""

from __future__ import annotations

import sqlite3

import pytest

from grantd.plugins import storage_sqlite
from grantd.plugins.storage_sqlite import SQLiteStore

from .factories import HOUR, NOW, device_code, first_page, guest_session, refresh_token, sha
from .migrated import postgres_migrated_to, sqlite_migrated_to
from .postgres import schemas as postgres_server

pytestmark = pytest.mark.anyio

OLD_SESSION = ("s_old", "fam_old", "usr_alice", NOW, NOW + HOUR, NOW, "Firefox", None)


async def _check_upgraded(store) -> None:
    old = await store.sessions.get("s_old", NOW + 1)
    assert old == {
        "session_id": "s_old",
        "family_id": "fam_old",
        "person_id": "usr_alice",
        "created_at": NOW,
        "expires_at": NOW + HOUR,
        "last_seen_at": NOW,
        "user_agent": "Firefox",
        "revoked_at": None,
        "idp": None,
        "email": None,
        "name": None,
        "credential_id": None,
    }  # a later migration (issue 19): older sessions name no passkey
    guest = await store.sessions.create(guest_session("g1", created_at=NOW + 1))
    assert await store.sessions.get("g1", NOW + 2) == guest
    rows, _ = await store.sessions.list(first_page(), "usr_alice", NOW + 2)
    assert [s["session_id"] for s in rows] == ["s_old"]
    assert await store.sessions.revoke_person("usr_alice", NOW + 3) == 1
    assert await store.sessions.get("g1", NOW + 4) is not None
    await store.refresh_tokens.create(refresh_token("r1"))
    assert await store.refresh_tokens.get(sha("r1")) is not None
    assert await store.keys.active_kid("EdDSA") == "ed_old"


async def test_sqlite_migration_6_upgrades_a_people_database(tmp_path):
    path = tmp_path / "grantd.db"
    store = SQLiteStore(path)
    try:
        with store._db.write():
            sqlite_migrated_to(store, 5)
            store._db.conn.execute("INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?)", OLD_SESSION)
            store._db.conn.execute("INSERT INTO signing_keys VALUES ('ed_old', 'EdDSA', 'P', '{}', 1, NULL)")
        assert store.schema_version() == 5
        assert 6 in await store.migrate()
        await _check_upgraded(store)
        conn = sqlite3.connect(path)
        try:
            indexes = {
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'sessions'"
                )
            }
            assert {"sessions_family", "sessions_person", "sessions_created", "sessions_expires"} <= indexes
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()
    finally:
        store.close()


async def test_postgres_migration_3_upgrades_a_people_database():
    from grantd.plugins.storage_postgres import PostgresStore

    server = postgres_server()
    dsn = server.create_schema()
    store = PostgresStore(dsn)
    try:
        await postgres_migrated_to(store, 2)

        async def seed() -> None:
            async with store._db.tx() as cur:
                await cur.execute("INSERT INTO sessions VALUES (%s,%s,%s,%s,%s,%s,%s,%s)", OLD_SESSION)
                await cur.execute(
                    "INSERT INTO signing_keys (kid, alg, private_pem, public_jwk, created_at) VALUES ('ed_old', 'EdDSA', 'P', '{}', 1)"
                )

        await store._db.loop.run(seed())
        assert 3 in await store.migrate()
        await _check_upgraded(store)
    finally:
        store.close()
        server.drop_schema(dsn)


# -- device codes remember the client address (issue 19 item 7): SQLite 7, PostgreSQL 4 ------------------

OLD_DEVICE = ("dev_old", "BCDFGHJK", "grantd-cli", "openid", NOW, NOW + HOUR, 5, None, "pending", None, None)


async def _check_device_address(store) -> None:
    old = await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 1)
    assert old is not None and old["client_address"] is None and old["scope"] == "openid"
    fresh = await store.device_codes.create(
        device_code("d_new", "MNPQRSTV", created_at=NOW + 1, client_address="2001:db8::5")
    )
    assert (await store.device_codes.get_by_user_code("MNPQRSTV", NOW + 2)) == fresh
    assert fresh["client_address"] == "2001:db8::5"


async def test_sqlite_migration_7_adds_the_device_client_address(tmp_path):
    store = SQLiteStore(tmp_path / "grantd.db")
    try:
        with store._db.write():
            sqlite_migrated_to(store, 6)
            store._db.conn.execute("INSERT INTO device_codes VALUES (?,?,?,?,?,?,?,?,?,?,?)", OLD_DEVICE)
        assert await store.migrate() == [
            v for v, _, _ in storage_sqlite.MIGRATIONS if v >= 7
        ]  # 7 and every later one
        await _check_device_address(store)
    finally:
        store.close()


async def test_postgres_migration_4_adds_the_device_client_address():
    from grantd.plugins import storage_postgres
    from grantd.plugins.storage_postgres import PostgresStore

    server = postgres_server()
    dsn = server.create_schema()
    store = PostgresStore(dsn)
    try:
        await postgres_migrated_to(store, 3)

        async def seed() -> None:
            async with store._db.tx() as cur:
                await cur.execute(
                    "INSERT INTO device_codes VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", OLD_DEVICE
                )

        await store._db.loop.run(seed())
        assert await store.migrate() == [
            v for v, _, _ in storage_postgres.MIGRATIONS if v >= 4
        ]  # 4 and every later one
        await _check_device_address(store)
    finally:
        store.close()
        server.drop_schema(dsn)
