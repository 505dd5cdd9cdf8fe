"""store.rates: abuse-limit counters (D12). Exactly one increment per call, decided in the database,
so every process and node counts the same attempts; ended windows are dropped as counting goes on."""

from __future__ import annotations

import asyncio

import pytest

from .factories import NOW

pytestmark = pytest.mark.anyio

MINUTE = 60_000
WINDOW = NOW - NOW % MINUTE


async def test_hit_counts_up_from_one(store):
    assert [await store.rates.hit("auth:10.0.0.1", WINDOW, MINUTE, NOW) for _ in range(3)] == [1, 2, 3]
    assert await store.rates.count("auth:10.0.0.1", WINDOW) == 3


async def test_count_does_not_change_the_counter(store):
    assert await store.rates.count("auth:10.0.0.1", WINDOW) == 0
    await store.rates.hit("auth:10.0.0.1", WINDOW, MINUTE, NOW)
    assert await store.rates.count("auth:10.0.0.1", WINDOW) == 1
    assert await store.rates.count("auth:10.0.0.1", WINDOW) == 1


async def test_keys_and_windows_count_apart(store):
    await store.rates.hit("auth:10.0.0.1", WINDOW, MINUTE, NOW)
    await store.rates.hit("auth:10.0.0.1", WINDOW, MINUTE, NOW)
    assert await store.rates.hit("auth:10.0.0.2", WINDOW, MINUTE, NOW) == 1
    assert await store.rates.hit("verify:10.0.0.1", WINDOW, MINUTE, NOW) == 1
    assert await store.rates.hit("auth:10.0.0.1", WINDOW + MINUTE, MINUTE, NOW + MINUTE) == 1
    assert await store.rates.count("auth:10.0.0.1", WINDOW + MINUTE) == 1


async def test_n_concurrent_hits_get_1_to_n_each_once(store):
    counts = await asyncio.gather(*(store.rates.hit("auth:agt_a", WINDOW, MINUTE, NOW) for _ in range(50)))
    assert sorted(counts) == list(range(1, 51))
    assert await store.rates.count("auth:agt_a", WINDOW) == 50


async def test_ended_windows_are_dropped_while_counting(store):
    await store.rates.hit("auth:10.0.0.1", WINDOW, MINUTE, NOW)
    await store.rates.hit("auth:10.0.0.2", WINDOW, MINUTE, NOW)
    # a hit after the first window ended (any key) drops it; its counters read 0 again
    assert await store.rates.hit("other", WINDOW + MINUTE, MINUTE, WINDOW + MINUTE) == 1
    assert await store.rates.count("auth:10.0.0.1", WINDOW) == 0
    assert await store.rates.count("auth:10.0.0.2", WINDOW) == 0
    assert await store.rates.count("other", WINDOW + MINUTE) == 1


async def test_a_window_that_has_not_ended_is_kept(store):
    await store.rates.hit("auth:10.0.0.1", WINDOW, 2 * MINUTE, NOW)
    await store.rates.hit("other", WINDOW + MINUTE, MINUTE, WINDOW + MINUTE)  # the first window runs on
    assert await store.rates.count("auth:10.0.0.1", WINDOW) == 1
