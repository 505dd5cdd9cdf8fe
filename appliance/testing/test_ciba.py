"""store.ciba: every promise of grantd.store.ciba, per backend (issue 25, D16). The redemption race
between OS processes is in test_processes.py."""

from __future__ import annotations

import asyncio

import pytest

from grantd.store import Conflict
from grantd.store.ciba import CibaClient, CibaRequest

from .factories import NOW, sha

pytestmark = pytest.mark.anyio

RACERS = 12


def ciba_request(secret: str, **fields: object) -> CibaRequest:
    row: dict[str, object] = {
        "auth_req_hash": sha(secret),
        "grant_id": "g-" + secret,
        "agent_id": "agt_a",
        "created_at": NOW,
        "expires_at": NOW + 600_000,
        "poll_interval": 5,
        "last_polled_at": None,
        "redeemed_at": None,
        "notification_token": None,
    }
    row.update(fields)
    return row  # type: ignore[return-value]


async def test_ciba_create_poll_and_conflict(store):
    first = await store.ciba.create(ciba_request("r1", notification_token="tok"))
    assert first == ciba_request("r1", notification_token="tok")
    with pytest.raises(Conflict) as caught:
        await store.ciba.create(ciba_request("r1"))
    assert caught.value.field == "auth_req_hash"
    assert await store.ciba.poll(sha("r1"), NOW + 10, "agt_a") == first  # as it was before this poll
    assert (await store.ciba.poll(sha("r1"), NOW + 20, "agt_a"))["last_polled_at"] == NOW + 10
    assert await store.ciba.poll(sha("nope"), NOW, "agt_a") is None
    # another agent's poll finds nothing and records nothing
    assert await store.ciba.poll(sha("r1"), NOW + 15, "agt_b") is None
    assert await store.ciba.for_grant("g-r1") == [{**first, "last_polled_at": NOW + 20}]
    assert await store.ciba.for_grant("g-none") == []


async def test_ciba_slow_down_only_raises(store):
    await store.ciba.create(ciba_request("r1"))
    await store.ciba.slow_down(sha("r1"), 10)
    await store.ciba.slow_down(sha("r1"), 7)
    assert (await store.ciba.poll(sha("r1"), NOW, "agt_a"))["poll_interval"] == 10
    await store.ciba.slow_down(sha("unknown"), 10)  # nothing, no error


async def test_ciba_redeem_once_and_never_after_expiry(store):
    await store.ciba.create(ciba_request("r1"))
    await store.ciba.create(ciba_request("r2"))
    redeemed = await store.ciba.redeem(sha("r1"), NOW + 5)
    assert redeemed is not None and redeemed["redeemed_at"] == NOW + 5
    assert await store.ciba.redeem(sha("r1"), NOW + 6) is None  # single use
    assert (await store.ciba.poll(sha("r1"), NOW + 7, "agt_a"))["redeemed_at"] == NOW + 5
    assert await store.ciba.redeem(sha("r2"), NOW + 600_000) is None  # expired: expires_at == now
    assert await store.ciba.redeem(sha("unknown"), NOW) is None


async def test_ciba_redeem_has_exactly_one_winner(store):
    await store.ciba.create(ciba_request("race"))
    results = await asyncio.gather(*(store.ciba.redeem(sha("race"), NOW + 1) for _ in range(RACERS)))
    assert len([r for r in results if r is not None]) == 1


async def test_ciba_expired_requests_are_swept_by_the_next_create(store):
    await store.ciba.create(ciba_request("old", expires_at=NOW + 1000))
    await store.ciba.create(ciba_request("new", created_at=NOW + 1000))
    assert await store.ciba.poll(sha("old"), NOW, "agt_a") is None
    assert await store.ciba.poll(sha("new"), NOW + 1000, "agt_a") is not None


async def test_ciba_clients_set_replace_and_forget(store):
    assert await store.ciba.get_client("agt_a") is None
    ping: CibaClient = {
        "agent_id": "agt_a",
        "mode": "ping",
        "notification_endpoint": "https://agents.example.com/cb",
        "updated_at": NOW,
    }
    await store.ciba.set_client(ping, "agt_a")
    assert await store.ciba.get_client("agt_a") == ping
    moved = {**ping, "notification_endpoint": "https://agents.example.com/other", "updated_at": NOW + 1}
    await store.ciba.set_client(moved, "agt_a")  # type: ignore[arg-type]
    assert await store.ciba.get_client("agt_a") == moved
    assert await store.ciba.get_client("agt_b") is None
    await store.ciba.set_client(None, "agt_a")
    assert await store.ciba.get_client("agt_a") is None
