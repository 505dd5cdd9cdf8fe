"""store.challenges: single use, bound to the agent, decided inside the database (D5)."""

from __future__ import annotations

import asyncio

import pytest

from .factories import NOW, agent

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


async def test_create_for_and_take_for_an_active_agent_by_id_or_email(store):
    """Sign-in in one statement each (issue 27): the agent found as agents.get finds it (its id, or
    its e-mail in any case), only while active; single use and bound to that agent as take."""
    await store.agents.create(agent("a"), frozenset())
    await store.agents.create(agent("b"), frozenset())
    await store.agents.create(agent("off", status="disabled"), frozenset())
    assert await store.challenges.create_for("c1", "agt_a", NOW + 60_000, NOW) == "agt_a"
    assert await store.challenges.create_for("c2", "A@Agents.Example.com", NOW + 60_000, NOW) == "agt_a"
    assert await store.challenges.create_for("c3", "nobody", NOW + 60_000, NOW) is None
    assert await store.challenges.create_for("c4", "agt_off", NOW + 60_000, NOW) is None
    assert await store.challenges.take_for("c1", "agt_b") is None  # another agent's: not taken
    assert await store.challenges.take_for("c1", "nobody") is None
    found = await store.challenges.take_for("c1", "a@agents.example.com")
    assert found == (await store.agents.get("agt_a"), NOW + 60_000)
    assert await store.challenges.take_for("c1", "agt_a") is None  # single use
    assert await store.challenges.take("c2", "agt_a") == NOW + 60_000  # the same challenges as create's
    assert await store.challenges.take("c4", "agt_off") is None  # nothing stored for an inactive agent


async def test_take_for_refuses_an_agent_that_is_not_active_and_keeps_the_challenge(store):
    await store.agents.create(agent("a"), frozenset())
    await store.challenges.create("c1", "agt_a", NOW + 60_000, NOW)
    await store.agents.update("agt_a", {"status": "disabled", "updated_at": NOW})
    assert await store.challenges.take_for("c1", "agt_a") is None
    assert await store.challenges.take("c1", "agt_a") == NOW + 60_000  # it was not taken


async def test_create_for_drops_challenges_expired_before_now(store):
    await store.agents.create(agent("a"), frozenset())
    await store.challenges.create("old", "agt_a", NOW - 1, NOW - 60_000)
    assert await store.challenges.create_for("new", "agt_a", NOW + 60_000, NOW) == "agt_a"
    assert await store.challenges.take("old", "agt_a") is None


async def test_exactly_one_of_many_concurrent_take_for(store):
    await store.agents.create(agent("a"), frozenset())
    await store.challenges.create("c1", "agt_a", NOW + 60_000, NOW)
    results = await asyncio.gather(*(store.challenges.take_for("c1", "agt_a") for _ in range(20)))
    assert [r[1] for r in results if r is not None] == [NOW + 60_000]
