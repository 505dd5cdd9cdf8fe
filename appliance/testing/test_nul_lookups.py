"""A lookup by a value with a NUL character finds nothing, on every backend (PostgreSQL's text cannot
hold NUL; the database must not be asked, or it answers with an error that would become a 500)."""

from __future__ import annotations

import pytest

from .factories import refresh_token, sha

pytestmark = pytest.mark.anyio

NUL = "a\x00b"


async def test_lookups_with_nul_find_nothing(store):
    assert await store.agents.get(NUL) is None
    assert await store.agents.get_by_id(NUL) is None
    assert await store.challenges.take(NUL, NUL) is None
    assert await store.grants.get(NUL) is None
    assert await store.delegations.get(NUL) is None
    assert await store.people.get(NUL) is None
    assert await store.people.get_many([NUL, "x@example.com"]) == {}
    assert await store.credentials.get(NUL) is None
    assert await store.registrations.get_by_token_hash(NUL) is None
    assert await store.sessions.get(NUL, 0) is None


async def test_oauth_lookups_with_nul_find_nothing(store):
    # user codes, client ids and family ids come from requests (forms, a token's sid claim)
    assert await store.onetime.take("code", NUL, 0) is None
    assert await store.refresh_tokens.get(NUL) is None
    assert await store.refresh_tokens.rotate(NUL, refresh_token("next"), 0) == ("unknown", None)
    assert await store.refresh_tokens.get(sha("next")) is None
    assert await store.refresh_tokens.family_live(NUL, 0) is False
    assert await store.refresh_tokens.revoke_family(NUL, 0) == 0
    assert await store.refresh_tokens.revoke_person(NUL, 0, client_id=NUL) == 0
    assert await store.refresh_tokens.list_families(NUL, 0) == []
    assert await store.device_codes.get_by_user_code(NUL, 0) is None
    assert await store.device_codes.decide(NUL, "usr_alice", True, 0) is None
    assert await store.device_codes.poll(NUL, 0) is None
    assert await store.device_codes.take(NUL, 0) is None
    assert await store.consents.get("usr_alice", NUL) is None
    assert await store.consents.list_for(NUL) == []
    assert await store.consents.withdraw("usr_alice", NUL, 0) is False
    assert await store.keys.active_kid(NUL) is None
