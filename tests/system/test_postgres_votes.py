"""Deciding votes racing on PostgreSQL (issue 27: a deciding vote and its decision are one
transaction, ``grants.add_deciding_vote``): votes on one grant from several connections at once
(two stores, as two processes or nodes would) end with one decision and no deadlock — each
deciding vote locks the grant's row for its update before it writes, so two of them never hold a
shared lock each and wait for the other's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from grantd.testing.factories import NOW, grant, lapse

pytest.importorskip("psycopg")
pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # a PostgreSQL server of its own


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _vote(email: str, grant_id: str) -> Any:
    return {
        "grant_id": grant_id,
        "email": email,
        "voter_id": "usr_" + email.split("@")[0],
        "decision": "approve",
        "via": "api",
        "at": NOW,
        "reason": None,
        "grant_type": None,
        "duration": None,
        "management": False,
    }


async def test_deciding_votes_from_several_connections_decide_once_without_a_deadlock(pg_dsn: str):
    from grantd.plugins.storage_postgres import PostgresStore

    stores = [PostgresStore(pg_dsn, pool_size=4) for _ in range(2)]
    await stores[0].migrate()
    try:
        for round_ in range(5):
            gid = f"g{round_}"
            await stores[0].grants.create(grant(gid), [])
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(
                        stores[i % 2].grants.add_deciding_vote(
                            _vote(f"v{i}@example.com", gid),
                            seen=0,
                            expect=("pending",),
                            changes={
                                "status": "approved",
                                "decided_by": f"v{i}@example.com",
                                "decided_at": NOW,
                            },
                            event="grant.approved",
                            lapse=lapse(NOW),
                            now=NOW,
                        )
                        for i in range(8)
                    )
                ),
                30,
            )  # a deadlock hangs: fail instead
            assert [u for _, u in results if u is not None].__len__() == 1, results
            assert (await stores[1].grants.get(gid))["status"] == "approved"
        events = [e["event"] for e in await stores[1].grants.events_after(0, 1000)]
        assert events.count("grant.approved") == 5
    finally:
        for store in stores:
            store.close()
