"""A lookup by a value with a NUL character finds nothing, on every backend (PostgreSQL's text cannot
hold NUL; the database must not be asked, or it answers with an error that would become a 500)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio

NUL = "a\x00b"


async def test_lookups_with_nul_find_nothing(store):
    assert await store.agents.get(NUL) is None
    assert await store.agents.get_by_id(NUL) is None
    assert await store.challenges.take(NUL, NUL) is None
    assert await store.grants.get(NUL) is None
    assert await store.delegations.get(NUL) is None
    assert await store.people.get(NUL) is None
    assert await store.credentials.get(NUL) is None
    assert await store.registrations.get_by_token_hash(NUL) is None
    assert await store.sessions.get(NUL, 0) is None
