"""The PostgreSQL store on the loop a server serves requests on (issue 14).

``serving()`` called on a running loop makes the store's calls from that loop run there, on a pool
of their own (no hop to the store's thread), with a LISTEN connection read by that loop; ``close()``
(synchronous) closes all of it from within that loop, as a server's after_server_stop does. Writes
with events are batched (``BEGIN; UPDATE``, then ``events; COMMIT``): a lost race, a conflict and a
broken connection must leave nothing half done and the pool usable. Each test runs its own event
loop, as a server worker does; the other "node" is a second store on the same database.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from support import postgres as pg

from grantd.store import Conflict
from grantd.testing.factories import NOW, grant, lapse

pytest.importorskip("psycopg")


def _open(dsn: str, pool_size: int = 4) -> Any:
    from grantd.plugins.storage_postgres import PostgresStore

    return PostgresStore(dsn, pool_size=pool_size)


def _sessions(server: pg.Postgres, app_name: str, like: str = "%") -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(server.dsn("contract"), autocommit=True) as conn:
        return conn.execute(
            "SELECT pid, query FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s",
            (app_name, like),
        ).fetchall()


def _gone(server: pg.Postgres, app_name: str) -> bool:
    """No session of ``app_name`` left (a backend leaves pg_stat_activity a moment after its client
    disconnected: wait for that, a few seconds at most)."""
    deadline = time.monotonic() + 5
    while _sessions(server, app_name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _terminate(server: pg.Postgres, app_name: str, like: str = "%") -> int:
    import psycopg

    with psycopg.connect(server.dsn("contract"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s",
            (app_name, like),
        ).fetchall()
    return len(rows)


def _events(store: Any) -> list[Any]:
    async def read() -> list[Any]:
        return list(await store.grants.events_after(0, 1000))

    return asyncio.run(read())


def test_calls_on_the_serving_loop_use_its_own_connections_and_close_closes_them_there(
    own_postgres: pg.Postgres, pg_dsn: str
) -> None:
    store = _open(pg_dsn)
    app_name = store._db.app_name

    async def serve() -> None:
        await store.migrate()
        store.serving()
        await store.grants.create(grant("g1"), ["grant.created"])
        assert (await store.grants.get("g1"))["id"] == "g1"
        await asyncio.gather(*(store.grants.get("g1") for _ in range(8)))
        assert await store.ping()
        assert store._db.served._idle, "the serving loop's calls ran on its own pool"
        assert len(store._db.pool._idle) <= 1, "and not on the store's thread"
        store.close()  # synchronous, from within the loop: as after_server_stop calls it

    asyncio.run(serve())
    assert _gone(own_postgres, app_name)  # every connection closed for real
    store.close()  # twice is harmless


def test_a_store_used_from_other_loops_still_works_after_serving_elsewhere(pg_dsn: str) -> None:
    """The CLI's several asyncio.run and tests call from loops that are not the serving one."""
    store = _open(pg_dsn)
    try:
        asyncio.run(store.migrate())

        async def serve() -> None:
            store.serving()
            await store.grants.create(grant("g1"), ["grant.created"])

        asyncio.run(serve())  # that loop is gone now

        async def later() -> Any:
            return await store.grants.get("g1")

        assert asyncio.run(later())["id"] == "g1"
        assert store.schema_version() > 0
    finally:
        store.close()


def test_exactly_one_of_concurrent_transitions_wins_on_the_serving_loop_and_across_stores(
    pg_dsn: str,
) -> None:
    store, other = _open(pg_dsn, pool_size=6), _open(pg_dsn, pool_size=6)
    try:
        asyncio.run(store.migrate())

        async def race() -> list[Any]:
            store.serving()
            await store.grants.create(grant("g1"), ["grant.created"])
            calls = [
                s.grants.update_if(
                    "g1",
                    expect=("pending",),
                    changes={"status": "approved", "decided_at": NOW},
                    event="grant.approved",
                    lapse=lapse(),
                    now=NOW,
                )
                for s in [store] * 12 + [other] * 6
            ]
            return list(await asyncio.gather(*calls))

        results = asyncio.run(race())
        assert sum(r is not None for r in results) == 1
        events = [e["event"] for e in _events(other)]
        assert events == ["grant.created", "grant.approved"]
    finally:
        store.close()
        other.close()


def test_a_conflict_or_a_lost_race_leaves_nothing_behind_and_the_connections_usable(pg_dsn: str) -> None:
    store = _open(pg_dsn, pool_size=1)  # one connection: a transaction left open would show at once
    try:
        asyncio.run(store.migrate())

        async def serve() -> None:
            store.serving()
            await store.grants.create(grant("g1"), ["grant.created"])
            with pytest.raises(Conflict):
                await store.grants.create(
                    grant("g1", requester="other@agents.example.com"), ["grant.created"]
                )
            lost = await store.grants.update_if(
                "g1",
                expect=("approved",),
                changes={"status": "consumed"},
                event="grant.consumed",
                lapse=lapse(),
                now=NOW,
            )
            assert lost is None
            assert (await store.grants.get("g1"))["requester"] == "bot@agents.example.com"
            won = await store.grants.update_if(
                "g1",
                expect=("pending",),
                changes={"status": "denied"},
                event="grant.denied",
                lapse=lapse(),
                now=NOW,
            )
            assert won is not None and won["status"] == "denied" and won["version"] == 2
            conns = store._db.served._idle
            assert (
                len(conns) == 1 and conns[0].pgconn.transaction_status == 0
            )  # idle: no transaction left open
            store.close()

        asyncio.run(serve())
        reader = _open(pg_dsn)
        try:
            assert [e["event"] for e in _events(reader)] == ["grant.created", "grant.denied"]
        finally:
            reader.close()
    finally:
        store.close()


def test_broken_connections_are_replaced(own_postgres: pg.Postgres, pg_dsn: str) -> None:
    store = _open(pg_dsn, pool_size=2)
    try:
        asyncio.run(store.migrate())

        async def serve() -> None:
            store.serving()
            await store.grants.create(grant("g1"), [])
            await asyncio.gather(store.grants.get("g1"), store.grants.get("g1"))
            assert _terminate(own_postgres, store._db.app_name) >= 2  # the database restarted, say
            await asyncio.sleep(0.2)
            failures = 0
            for _ in range(6):
                try:
                    assert (await store.grants.get("g1"))["id"] == "g1"
                except Exception:
                    failures += (
                        1  # a dead idle connection fails its first statement (as psycopg_pool's would)
                    )
            assert failures <= 2
            assert (await store.grants.get("g1"))["id"] == "g1"
            store.close()

        asyncio.run(serve())
    finally:
        store.close()


def test_events_of_another_node_wake_the_serving_loop_at_once_also_after_the_listener_reconnects(
    own_postgres: pg.Postgres, pg_dsn: str
) -> None:
    store, other = _open(pg_dsn), _open(pg_dsn)
    try:
        asyncio.run(store.migrate())

        async def write(gid: str) -> None:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(asyncio.run, other.grants.create(grant(gid), ["grant.created"]))

        async def woken_by(gid: str) -> float:
            started = time.monotonic()
            await asyncio.gather(store.grants.wait_for_events(30), write(gid))
            return time.monotonic() - started

        async def serve() -> None:
            store.serving()
            await store.grants.wait_for_events(30)  # connected: returns at once (anything may have happened)
            assert await woken_by("g1") < 5
            assert _sessions(own_postgres, store._db.app_name, "LISTEN%"), "the serving loop listens"
            assert _terminate(own_postgres, store._db.app_name, "LISTEN%") == 1
            await store.grants.wait_for_events(30)  # the lost connection wakes it (the hub looks, then polls)
            await store.grants.wait_for_events(30)  # and so does the new one, within LISTEN_RETRY
            assert await woken_by("g2") < 5
            store.close()

        asyncio.run(serve())
        assert _gone(own_postgres, store._db.app_name)
    finally:
        store.close()
        other.close()
