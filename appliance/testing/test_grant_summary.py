"""``grants.summary``: counts by status as read (lapsed ones are expired) and the oldest live pending
grant, for GET /metrics. Every backend."""

from __future__ import annotations

import pytest

from .factories import NOW, grant, lapse

pytestmark = pytest.mark.anyio

DAY_MS = 86_400_000


async def test_an_empty_store_has_nothing_pending(store):
    counts, oldest = await store.grants.summary(lapse())
    assert {k: v for k, v in counts.items() if v} == {} and oldest is None


async def test_counts_are_statuses_as_read_and_the_oldest_pending_is_live(store):
    pending_ttl_cutoff = lapse().cutoffs["pending"][1]  # pending grants created at or before it have lapsed
    await store.grants.create(grant("old-pending", created_at=pending_ttl_cutoff - 1), ["grant.created"])
    await store.grants.create(grant("p1", created_at=NOW - 5_000), ["grant.created"])
    await store.grants.create(grant("p2", created_at=NOW - 1_000), ["grant.created"])
    await store.grants.create(
        grant("a-live", status="approved", created_at=NOW - 9_000, expires_at=NOW + DAY_MS), ["grant.created"]
    )
    await store.grants.create(
        grant("a-lapsed", status="approved", created_at=NOW - 9_000, expires_at=NOW - 1), ["grant.created"]
    )
    await store.grants.create(grant("d", status="denied", created_at=NOW - 8_000), ["grant.created"])
    await store.grants.create(grant("e", status="expired", created_at=NOW - 7_000), ["grant.created"])
    counts, oldest = await store.grants.summary(lapse())
    assert {k: v for k, v in counts.items() if v} == {"pending": 2, "approved": 1, "denied": 1, "expired": 3}
    assert oldest == NOW - 5_000  # the lapsed pending grant does not count as waiting


async def test_a_later_instant_moves_grants_to_expired(store):
    await store.grants.create(grant("p", created_at=NOW), ["grant.created"])
    far = lapse(NOW + 365 * DAY_MS)
    counts, oldest = await store.grants.summary(far)
    assert {k: v for k, v in counts.items() if v} == {"expired": 1} and oldest is None
