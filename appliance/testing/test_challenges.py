"""store.challenges: single use, bound to the agent, decided inside the database (D5)."""

from __future__ import annotations

import asyncio

import pytest

from .factories import NOW

pytestmark = pytest.mark.anyio


async def test_take_once(store):
    await store.challenges.create("c1", "agt_a", NOW + 60_000, NOW)
    assert await store.challenges.take("c1", "agt_a") == NOW + 60_000
    assert await store.challenges.take("c1", "agt_a") is None
    assert await store.challenges.take("unknown", "agt_a") is None


async def test_bound_to_its_agent(store):
    await store.challenges.create("c1", "agt_a", NOW + 60_000, NOW)
    assert await store.challenges.take("c1", "agt_b") is None
    assert await store.challenges.take("c1", "agt_a") == NOW + 60_000


async def test_exactly_one_of_many_concurrent_takers(store):
    await store.challenges.create("c1", "agt_a", NOW + 60_000, NOW)
    results = await asyncio.gather(*(store.challenges.take("c1", "agt_a") for _ in range(20)))
    assert [r for r in results if r is not None] == [NOW + 60_000]


async def test_create_drops_challenges_expired_before_now(store):
    await store.challenges.create("old", "agt_a", NOW - 1, NOW - 60_000)
    await store.challenges.create("edge", "agt_a", NOW, NOW - 60_000)
    await store.challenges.create("new", "agt_a", NOW + 60_000, NOW)
    assert await store.challenges.take("old", "agt_a") is None
    assert await store.challenges.take("edge", "agt_a") == NOW
    assert await store.challenges.take("new", "agt_a") == NOW + 60_000
