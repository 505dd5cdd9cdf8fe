"""Migration "bound parties" (issue 19, D11) on a database released before it: existing agents get
``owner_id``/``approver_id`` from the persons their e-mails name today, e-mails that name nobody stay
unbound (and are bound when that person is created), and the per-owner bounds work on the old rows.
SQLite (migration 9) and PostgreSQL (migration 6)."""

from __future__ import annotations

import pytest

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.store import LimitReached, PendingBound

from .factories import NOW, grant, lapse, person
from .migrated import postgres_migrated_to, sqlite_migrated_to
from .postgres import schemas as postgres_server

pytestmark = pytest.mark.anyio

PEOPLE = [("usr_olivia", "olivia@example.com"), ("usr_amir", "amir@example.com")]
# agent_id, email, owner, approver
AGENTS = [
    ("agt_a", "a@agents.example.com", "olivia@example.com", "amir@example.com"),
    ("agt_b", "b@agents.example.com", "olivia@example.com", "nobody@example.com"),
    ("agt_c", "c@agents.example.com", "later@example.com", "later@example.com"),
    ("agt_d", "d@agents.example.com", "gone@example.com", "olivia@example.com"),
]
# gone@ redeemed a registration URL and was deleted before the migration: a person once
USED_URL = (
    "reg_gone",
    "hash-gone",
    "gone@example.com",
    0,
    "register",
    "localhost",
    "admin",
    NOW,
    NOW + 1,
    NOW,
)
# id, delegator, delegate
DELEGATIONS = [
    ("d_by_gone", "gone@example.com", "a@agents.example.com"),
    ("d_to_gone", "root@example.com", "gone@example.com"),
    ("d_later", "root@example.com", "later@example.com"),
]


def _agent_row(agent_id: str, email: str, owner: str, approver: str) -> dict[str, object]:
    return {
        "agent_id": agent_id,
        "email": email,
        "name": agent_id,
        "public_key": "ssh-ed25519 K" + agent_id,
        "key_id": "SHA256:" + agent_id,
        "owner": owner,
        "approver": approver,
        "status": "active",
        "created_at": NOW,
        "updated_at": NOW,
    }


async def _check_upgraded(store) -> None:
    bound = {
        a: (r["owner_id"], r["approver_id"])
        for a in ("agt_a", "agt_b", "agt_c", "agt_d")
        for r in [await store.agents.get(a)]
    }
    assert bound == {
        "agt_a": ("usr_olivia", "usr_amir"),
        "agt_b": ("usr_olivia", None),
        "agt_c": (None, None),
        "agt_d": ("usr_deleted:gone@example.com", "usr_olivia"),
    }
    # the deleted person's delegations end; one naming an address nobody ever registered stays
    for did, status in (("d_by_gone", "revoked"), ("d_to_gone", "revoked"), ("d_later", "active")):
        assert (await store.delegations.get(did))["status"] == status
    await store.people.create(person("gone"))
    assert await store.agents.decidable_by("usr_gone") == []
    assert sorted(await store.agents.decidable_by("usr_olivia")) == ["agt_a", "agt_b", "agt_d"]
    await store.people.create(person("later"))
    assert (await store.agents.get("agt_c"))["owner_id"] == "usr_later"
    bound_pending = PendingBound(1, lapse(NOW))
    await store.grants.create(grant("g1", requester_id="agt_a"), ["grant.created"], bound=bound_pending)
    with pytest.raises(LimitReached):
        await store.grants.create(grant("g2", requester_id="agt_b"), ["grant.created"], bound=bound_pending)


async def test_sqlite_migration_9_binds_existing_agents(tmp_path):
    store = SQLiteStore(tmp_path / "grantd.db")
    try:
        with store._db.write():
            conn = store._db.conn
            sqlite_migrated_to(store, 6)
            for person_id, email in PEOPLE:
                conn.execute(
                    "INSERT INTO people VALUES (?, ?, 'x', 0, 'active', ?, ?)", (person_id, email, NOW, NOW)
                )
            for row in AGENTS:
                values = _agent_row(*row)
                conn.execute(
                    f"INSERT INTO agents ({', '.join(values)}) VALUES ({', '.join(':' + k for k in values)})",  # noqa: S608 - test data
                    values,
                )
            conn.execute("INSERT INTO registration_urls VALUES (?,?,?,?,?,?,?,?,?,?)", USED_URL)
            for did, delegator, delegate in DELEGATIONS:
                conn.execute(
                    "INSERT INTO delegations VALUES (?, ?, ?, 'host', '[]', 'once', NULL, ?, NULL, 'active', NULL, NULL)",
                    (did, delegator, delegate, NOW),
                )
        assert store.schema_version() == 6
        assert 9 in await store.migrate()
        await _check_upgraded(store)
    finally:
        store.close()


async def test_postgres_migration_6_binds_existing_agents():
    from grantd.plugins.storage_postgres import PostgresStore

    server = postgres_server()
    dsn = server.create_schema()
    store = PostgresStore(dsn)
    try:
        await postgres_migrated_to(store, 3)

        async def seed() -> None:
            async with store._db.tx() as cur:
                for person_id, email in PEOPLE:
                    await cur.execute(
                        """INSERT INTO people (person_id, email, name, admin, status, created_at, updated_at,
                                               email_fold, name_fold)
                           VALUES (%s, %s, 'x', false, 'active', %s, %s, %s, 'x')""",
                        (person_id, email, NOW, NOW, email),
                    )
                for row in AGENTS:
                    values = _agent_row(*row)
                    await cur.execute(
                        f"INSERT INTO agents ({', '.join(values)}) VALUES ({', '.join(f'%({k})s' for k in values)})",  # noqa: S608 - test data
                        values,
                    )
                await cur.execute(
                    """INSERT INTO registration_urls (id, token_hash, email, admin, purpose, rp_id, created_by, created_at,
                                                      expires_at, used_at)
                       VALUES (%s, %s, %s, %s::int::boolean, %s, %s, %s, %s, %s, %s)""",
                    USED_URL,
                )
                for did, delegator, delegate in DELEGATIONS:
                    await cur.execute(
                        """INSERT INTO delegations (id, delegator, delegate, audience, scopes, approval, created_at, status)
                           VALUES (%s, %s, %s, 'host', '[]', 'once', %s, 'active')""",
                        (did, delegator, delegate, NOW),
                    )

        await store._db.loop.run(seed())
        assert 6 in await store.migrate()
        await _check_upgraded(store)
    finally:
        store.close()
        server.drop_schema(dsn)
