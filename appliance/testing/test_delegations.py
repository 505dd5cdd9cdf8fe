"""store.delegations (D7, D11)."""

from __future__ import annotations

import asyncio

import pytest

from grantd.store import Conflict

from .factories import HOUR, NOW, agent, delegation, dlapse, first_page, walk

pytestmark = pytest.mark.anyio


async def test_create_and_get(store):
    created = await store.delegations.create(delegation("d1"))
    assert created == delegation("d1")
    assert await store.delegations.get("d1") == delegation("d1")
    assert await store.delegations.get("nope") is None


async def test_a_delegator_is_never_an_agent(store):
    await store.agents.create(agent("bot"), frozenset())
    with pytest.raises(Conflict) as caught:
        await store.delegations.create(delegation("d1", delegator="bot@agents.example.com"))
    assert caught.value.field == "delegator"
    assert await store.delegations.get("d1") is None


async def test_list_by_party_newest_first_with_paging(store):
    for i in range(5):
        await store.delegations.create(
            delegation(f"a{i}", delegator="alice@example.com", delegate="x@e.com", created_at=NOW + i // 2)
        )
    await store.delegations.create(
        delegation("b0", delegator="bob@example.com", delegate="alice@example.com", created_at=NOW + 10)
    )
    await store.delegations.create(delegation("c0", delegator="carol@example.com", delegate="y@e.com"))
    pages = await walk(lambda p: store.delegations.list(party="alice@example.com", page=p), 2)
    ids = [d["id"] for page in pages for d in page]
    assert ids == ["b0", "a4", "a3", "a2", "a1", "a0"]
    assert [len(p) for p in pages] == [2, 2, 2]
    everyone, more = await store.delegations.list(party=None, page=first_page(10))
    assert not more and {d["id"] for d in everyone} == {"a0", "a1", "a2", "a3", "a4", "b0", "c0"}


async def test_list_since_leaves_out_what_was_made_before(store):
    """D11: a person created later with an e-mail that named an earlier one inherits nothing: the
    list of a party can start at the time that party was created."""
    for i in range(4):
        await store.delegations.create(
            delegation(f"d{i}", delegator="alice@example.com", delegate="x@e.com", created_at=NOW + i)
        )
    pages = await walk(lambda p: store.delegations.list(party="alice@example.com", page=p, since=NOW + 2), 1)
    assert [d["id"] for page in pages for d in page] == ["d3", "d2"]
    found, more = await store.delegations.list(party=None, page=first_page(10), since=NOW + 4)
    assert (found, more) == ([], False)


async def test_revoke_has_exactly_one_winner(store):
    await store.delegations.create(delegation("d1"))
    results = await asyncio.gather(
        *(store.delegations.revoke("d1", f"admin{i}@example.com", NOW + i) for i in range(10))
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert winners[0]["status"] == "revoked"
    stored = await store.delegations.get("d1")
    assert stored == winners[0]
    assert stored["revoked_by"].startswith("admin") and stored["revoked_at"] >= NOW
    assert await store.delegations.revoke("d1", "x", NOW) is None
    assert await store.delegations.revoke("nope", "x", NOW) is None


async def test_live_for_honours_lapse(store):
    bot = "bot@agents.example.com"
    await store.delegations.create(delegation("forever", delegate=bot, created_at=NOW - 3))
    await store.delegations.create(
        delegation("later", delegate=bot, created_at=NOW - 2, expires_at=NOW + HOUR)
    )
    await store.delegations.create(delegation("lapsed", delegate=bot, created_at=NOW - 1, expires_at=NOW))
    await store.delegations.create(delegation("revoked", delegate=bot, created_at=NOW - 4, status="revoked"))
    await store.delegations.create(delegation("other", delegate="other@example.com"))
    assert [d["id"] for d in await store.delegations.live_for(bot, dlapse(NOW))] == ["forever", "later"]
    assert [d["id"] for d in await store.delegations.live_for(bot, dlapse(NOW - 1))] == [
        "forever",
        "later",
        "lapsed",
    ]
    assert [d["id"] for d in await store.delegations.live_for(bot, dlapse(NOW + HOUR))] == ["forever"]
