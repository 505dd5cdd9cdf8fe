"""store.onetime, store.refresh_tokens, store.device_codes, store.consents and guest sessions: every
promise of grantd.store.oauth (and the guest side of grantd.store.people), per backend (issue
"OAuth"; D9). Races between OS processes are in test_processes.py."""

from __future__ import annotations

import asyncio

import pytest

from grantd.store import Conflict

from .factories import (
    HOUR,
    NOW,
    consent,
    device_code,
    first_page,
    guest_session,
    next_token,
    person,
    refresh_token,
    session,
    sha,
)

pytestmark = pytest.mark.anyio

RACERS = 12


# -- onetime ----------------------------------------------------------------------------------------------
async def test_onetime_put_then_take_once(store):
    data = {"client_id": "apes-cli", "scope": "openid", "nested": {"n": 1, "list": [1, "a", None]}}
    await store.onetime.put("code", sha("c1"), data, NOW + 60_000, NOW)
    assert await store.onetime.take("code", sha("c1"), NOW + 1) == data
    assert await store.onetime.take("code", sha("c1"), NOW + 2) is None  # single use


async def test_onetime_kinds_are_separate(store):
    await store.onetime.put("sp", "k", {"v": "sp"}, NOW + 60_000, NOW)
    await store.onetime.put(
        "federation", "k", {"v": "fed"}, NOW + 60_000, NOW
    )  # same key, other kind: no Conflict
    assert await store.onetime.take("code", "k", NOW) is None
    assert await store.onetime.take("federation", "k", NOW) == {"v": "fed"}
    assert await store.onetime.take("sp", "k", NOW) == {"v": "sp"}


async def test_onetime_expiry_boundary(store):
    await store.onetime.put("code", "a", {"n": 1}, NOW + 60_000, NOW)
    await store.onetime.put("code", "b", {"n": 2}, NOW + 60_000, NOW)
    assert await store.onetime.take("code", "a", NOW + 59_999) == {"n": 1}  # expires_at > now: still good
    assert await store.onetime.take("code", "b", NOW + 60_000) is None  # expires_at == now: expired
    # the expired record was deleted by that take: putting the key again is no Conflict, even at an earlier now
    await store.onetime.put("code", "b", {"n": 3}, NOW + 120_000, NOW)
    assert await store.onetime.take("code", "b", NOW + 1) == {"n": 3}


async def test_onetime_put_conflicts_on_a_live_key_and_replaces_an_expired_one(store):
    await store.onetime.put("jti", "j1", {}, NOW + 1000, NOW)
    with pytest.raises(Conflict) as caught:
        await store.onetime.put(
            "jti", "j1", {"again": True}, NOW + 5000, NOW + 999
        )  # a replayed assertion id
    assert caught.value.field == "key"
    await store.onetime.put(
        "jti", "j1", {"new": True}, NOW + 5000, NOW + 1000
    )  # expired at NOW+1000: replaced
    assert await store.onetime.take("jti", "j1", NOW + 1001) == {"new": True}


async def test_onetime_take_has_exactly_one_winner(store):
    await store.onetime.put("code", "race", {"n": 1}, NOW + 60_000, NOW)
    results = await asyncio.gather(*(store.onetime.take("code", "race", NOW) for _ in range(RACERS)))
    assert [r for r in results if r is not None] == [{"n": 1}]


async def test_onetime_put_has_exactly_one_winner(store):
    async def put() -> bool:
        try:
            await store.onetime.put("jti", "once", {}, NOW + 60_000, NOW)
        except Conflict:
            return False
        return True

    assert (await asyncio.gather(*(put() for _ in range(RACERS)))).count(True) == 1


async def test_onetime_dpop_replay_rows_one_winner_and_swept(store):
    """D16: DPoP proofs' ``<jkt>:<jti>`` are first-used once (concurrent inserts: one wins), a
    replay is a Conflict until the row expires, and an expired row is swept by the next insert."""

    async def put(key: str, now: int) -> bool:
        try:
            await store.onetime.put("dpop", key, {}, now + 70_000, now)
        except Conflict:
            return False
        return True

    assert (await asyncio.gather(*(put("jkt:j1", NOW) for _ in range(RACERS)))).count(True) == 1
    assert not await put("jkt:j1", NOW + 69_999)  # replayed inside the window
    assert await put("jkt:j2", NOW + 70_000)  # another jti; this insert sweeps j1 (expired)
    assert await store.onetime.take("dpop", "jkt:j1", NOW) is None  # swept: gone even for an earlier clock
    assert await store.onetime.take("jti", "jkt:j2", NOW + 70_001) is None  # kinds stay apart


# -- refresh tokens ---------------------------------------------------------------------------------------
async def test_refresh_create_get_and_conflict(store):
    first = refresh_token("r1")
    assert await store.refresh_tokens.create(first) == first
    assert await store.refresh_tokens.get(sha("r1")) == first
    assert await store.refresh_tokens.get(sha("nope")) is None
    with pytest.raises(Conflict) as caught:
        await store.refresh_tokens.create(refresh_token("r1", family_id="rtf_other"))
    assert caught.value.field == "token_hash"


async def test_refresh_rotate_inside_the_family(store):
    first = await store.refresh_tokens.create(refresh_token("r1"))
    second = next_token(first, "r2", NOW + 10)
    outcome, old = await store.refresh_tokens.rotate(sha("r1"), second, NOW + 10)
    assert outcome == "rotated"
    assert old == first  # as it was: unused
    assert (await store.refresh_tokens.get(sha("r1")))["used_at"] == NOW + 10
    assert await store.refresh_tokens.get(sha("r2")) == second
    third = next_token(second, "r3", NOW + 20)
    assert await store.refresh_tokens.rotate(sha("r2"), third, NOW + 20) == ("rotated", second)
    assert await store.refresh_tokens.family_live("rtf_one", NOW + 20)


async def test_refresh_reuse_revokes_the_whole_family(store):
    first = await store.refresh_tokens.create(refresh_token("r1"))
    other = await store.refresh_tokens.create(refresh_token("o1", family_id="rtf_two"))
    second = next_token(first, "r2", NOW + 10)
    await store.refresh_tokens.rotate(sha("r1"), second, NOW + 10)
    # r1 again: a replay (a stolen copy, or the legitimate client after a thief rotated it)
    outcome, old = await store.refresh_tokens.rotate(sha("r1"), next_token(first, "r2b", NOW + 20), NOW + 20)
    assert outcome == "reused"
    assert old is not None and old["token_hash"] == sha("r1") and old["used_at"] == NOW + 10
    assert await store.refresh_tokens.get(sha("r2b")) is None  # the new one was not stored
    assert (await store.refresh_tokens.get(sha("r1")))["revoked_at"] == NOW + 20
    assert (await store.refresh_tokens.get(sha("r2")))["revoked_at"] == NOW + 20
    assert not await store.refresh_tokens.family_live("rtf_one", NOW + 20)
    # the live token of the family no longer works either
    outcome, old = await store.refresh_tokens.rotate(sha("r2"), next_token(second, "r3", NOW + 30), NOW + 30)
    assert outcome == "revoked" and old is not None and old["token_hash"] == sha("r2")
    assert await store.refresh_tokens.get(sha("r3")) is None
    # a used token stays a replay after the revocation (and changes nothing more)
    outcome, old = await store.refresh_tokens.rotate(sha("r1"), next_token(first, "r4", NOW + 40), NOW + 40)
    assert outcome == "reused" and old is not None and old["revoked_at"] == NOW + 20
    assert (await store.refresh_tokens.get(sha("r2")))["revoked_at"] == NOW + 20
    # another family of the same person is untouched
    assert await store.refresh_tokens.family_live("rtf_two", NOW + 30)
    assert await store.refresh_tokens.get(sha("o1")) == other


async def test_refresh_rotate_of_a_revoked_family_changes_nothing(store):
    first = await store.refresh_tokens.create(refresh_token("r1"))
    assert await store.refresh_tokens.revoke_family("rtf_one", NOW + 5) == 1
    revoked = await store.refresh_tokens.get(sha("r1"))
    assert revoked == {**first, "revoked_at": NOW + 5}
    assert await store.refresh_tokens.rotate(sha("r1"), next_token(first, "r2", NOW + 10), NOW + 10) == (
        "revoked",
        revoked,
    )
    assert await store.refresh_tokens.get(sha("r1")) == revoked  # not marked used
    assert await store.refresh_tokens.get(sha("r2")) is None


async def test_refresh_rotate_of_an_expired_family(store):
    first = await store.refresh_tokens.create(refresh_token("r1", expires_at=NOW + 1000))
    # expires_at > now is live
    second = next_token(first, "r2", NOW + 999)
    assert (await store.refresh_tokens.rotate(sha("r1"), second, NOW + 999))[0] == "rotated"
    assert await store.refresh_tokens.family_live("rtf_one", NOW + 999)
    assert not await store.refresh_tokens.family_live("rtf_one", NOW + 1000)  # expires_at == now: expired
    assert await store.refresh_tokens.rotate(sha("r2"), next_token(second, "r3", NOW + 1000), NOW + 1000) == (
        "expired",
        second,
    )
    assert await store.refresh_tokens.get(sha("r2")) == second  # nothing changed
    assert await store.refresh_tokens.get(sha("r3")) is None
    # a used token of an expired family is "expired" too, and revokes nothing
    outcome, _ = await store.refresh_tokens.rotate(sha("r1"), next_token(first, "r4", NOW + 2000), NOW + 2000)
    assert outcome == "expired"
    assert (await store.refresh_tokens.get(sha("r2")))["revoked_at"] is None


async def test_refresh_rotate_of_an_unknown_token(store):
    assert await store.refresh_tokens.rotate(sha("nope"), refresh_token("r2"), NOW) == ("unknown", None)
    assert await store.refresh_tokens.get(sha("r2")) is None


async def test_refresh_rotate_with_a_colliding_new_token_changes_nothing(store):
    first = await store.refresh_tokens.create(refresh_token("r1"))
    other = await store.refresh_tokens.create(refresh_token("o1", family_id="rtf_two"))
    with pytest.raises(Conflict) as caught:
        await store.refresh_tokens.rotate(sha("r1"), next_token(first, "o1", NOW + 10), NOW + 10)
    assert caught.value.field == "token_hash"
    assert await store.refresh_tokens.get(sha("r1")) == first  # still unused: the redemption rolled back
    assert await store.refresh_tokens.get(sha("o1")) == other


async def test_refresh_rotate_has_exactly_one_winner(store):
    first = await store.refresh_tokens.create(refresh_token("r1"))
    results = await asyncio.gather(
        *(
            store.refresh_tokens.rotate(sha("r1"), next_token(first, f"n{i}", NOW + 10), NOW + 10)
            for i in range(RACERS)
        )
    )
    outcomes = [o for o, _ in results]
    assert outcomes.count("rotated") == 1
    # the losers presented a token that was already used: each is a replay, and the family is revoked
    assert outcomes.count("reused") == RACERS - 1
    winner = outcomes.index("rotated")
    assert await store.refresh_tokens.get(sha(f"n{winner}")) is not None
    assert [i for i in range(RACERS) if await store.refresh_tokens.get(sha(f"n{i}")) is not None] == [winner]
    assert not await store.refresh_tokens.family_live("rtf_one", NOW + 10)


async def test_family_live(store):
    assert not await store.refresh_tokens.family_live("rtf_none", NOW)
    await store.refresh_tokens.create(refresh_token("r1", expires_at=NOW + HOUR))
    assert await store.refresh_tokens.family_live("rtf_one", NOW)
    assert await store.refresh_tokens.family_live("rtf_one", NOW + HOUR - 1)
    assert not await store.refresh_tokens.family_live("rtf_one", NOW + HOUR)
    await store.refresh_tokens.revoke_family("rtf_one", NOW + 1)
    assert not await store.refresh_tokens.family_live("rtf_one", NOW + 1)


async def test_revoke_family_counts_live_tokens(store):
    first = await store.refresh_tokens.create(refresh_token("r1"))
    await store.refresh_tokens.rotate(sha("r1"), next_token(first, "r2", NOW + 1), NOW + 1)
    await store.refresh_tokens.create(refresh_token("o1", family_id="rtf_two"))
    assert await store.refresh_tokens.revoke_family("rtf_one", NOW + 2) == 1  # r2 (r1 was used)
    assert (await store.refresh_tokens.get(sha("r1")))["revoked_at"] == NOW + 2  # the used one too
    assert await store.refresh_tokens.revoke_family("rtf_one", NOW + 3) == 0
    assert (await store.refresh_tokens.get(sha("r1")))["revoked_at"] == NOW + 2  # kept
    assert await store.refresh_tokens.revoke_family("rtf_none", NOW + 3) == 0
    assert await store.refresh_tokens.family_live("rtf_two", NOW + 3)


async def test_revoke_person_all_clients_or_one(store):
    await store.refresh_tokens.create(refresh_token("a1", family_id="rtf_a1", client_id="apes-cli"))
    await store.refresh_tokens.create(refresh_token("a2", family_id="rtf_a2", client_id="sp.example.com"))
    await store.refresh_tokens.create(refresh_token("a3", family_id="rtf_a3", client_id="sp.example.com"))
    await store.refresh_tokens.create(refresh_token("b1", family_id="rtf_b1", person_id="usr_bob"))
    assert await store.refresh_tokens.revoke_person("usr_alice", NOW + 1, client_id="sp.example.com") == 2
    assert await store.refresh_tokens.family_live("rtf_a1", NOW + 1)
    assert not await store.refresh_tokens.family_live("rtf_a2", NOW + 1)
    assert not await store.refresh_tokens.family_live("rtf_a3", NOW + 1)
    assert await store.refresh_tokens.revoke_person("usr_alice", NOW + 2) == 1  # only a1 was still live
    assert not await store.refresh_tokens.family_live("rtf_a1", NOW + 2)
    assert await store.refresh_tokens.family_live("rtf_b1", NOW + 2)  # another person's
    assert await store.refresh_tokens.revoke_person("usr_nobody", NOW + 2) == 0


async def test_list_families_one_record_each_newest_first(store):
    a = await store.refresh_tokens.create(refresh_token("a1", family_id="rtf_a", created_at=NOW))
    b = await store.refresh_tokens.create(
        refresh_token("b1", family_id="rtf_b", created_at=NOW + 1, client_id="sp.example.com")
    )
    await store.refresh_tokens.create(refresh_token("c1", family_id="rtf_c", created_at=NOW + 2))
    await store.refresh_tokens.create(
        refresh_token("d1", family_id="rtf_d", created_at=NOW + 3, expires_at=NOW + 50)
    )
    await store.refresh_tokens.create(
        refresh_token("x1", family_id="rtf_x", person_id="usr_bob", created_at=NOW + 4)
    )
    a2 = next_token(a, "a2", NOW + 10)
    await store.refresh_tokens.rotate(sha("a1"), a2, NOW + 10)
    await store.refresh_tokens.revoke_family("rtf_c", NOW + 11)
    families = await store.refresh_tokens.list_families("usr_alice", NOW + 100)
    # a (its newest token, rotated last), then b; c revoked, d expired, x another person's
    assert families == [a2, b]
    assert await store.refresh_tokens.list_families("usr_nobody", NOW) == []


# -- device codes -----------------------------------------------------------------------------------------
async def test_device_create_and_get_by_user_code(store):
    created = await store.device_codes.create(device_code("d1"))
    assert created == device_code("d1")
    assert await store.device_codes.get_by_user_code("BCDFGHJK", NOW) == created
    assert await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 599_999) == created
    assert await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 600_000) is None  # expired
    assert await store.device_codes.get_by_user_code("ZZZZZZZZ", NOW) is None


async def test_device_create_conflicts(store):
    await store.device_codes.create(device_code("d1", "BCDFGHJK"))
    with pytest.raises(Conflict) as caught:
        await store.device_codes.create(device_code("d2", "BCDFGHJK", created_at=NOW + 1))
    assert caught.value.field == "user_code"
    with pytest.raises(Conflict) as caught:
        await store.device_codes.create(device_code("d1", "MNPQRSTV", created_at=NOW + 1))
    assert caught.value.field == "device_code_hash"
    # once the first request has expired, its user code may be drawn again
    again = await store.device_codes.create(
        device_code("d3", "BCDFGHJK", created_at=NOW + 600_000, expires_at=NOW + 1_200_000)
    )
    assert await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 600_001) == again


async def test_device_create_conflicts_on_a_decided_live_request(store):
    await store.device_codes.create(device_code("d1"))
    await store.device_codes.decide("BCDFGHJK", "usr_alice", False, NOW + 1)
    with pytest.raises(Conflict) as caught:
        await store.device_codes.create(device_code("d2", created_at=NOW + 2))
    assert caught.value.field == "user_code"


async def test_device_decide_approve_and_deny_once(store):
    await store.device_codes.create(device_code("d1", "BCDFGHJK"))
    await store.device_codes.create(device_code("d2", "MNPQRSTV"))
    approved = await store.device_codes.decide("BCDFGHJK", "usr_alice", True, NOW + 5)
    assert approved == {
        **device_code("d1"),
        "status": "approved",
        "person_id": "usr_alice",
        "decided_at": NOW + 5,
    }
    assert await store.device_codes.decide("BCDFGHJK", "usr_bob", False, NOW + 6) is None  # decided already
    assert await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 7) == approved
    denied = await store.device_codes.decide("MNPQRSTV", "usr_alice", False, NOW + 8)
    assert denied is not None and denied["status"] == "denied" and denied["decided_at"] == NOW + 8
    assert await store.device_codes.decide("MNPQRSTV", "usr_alice", True, NOW + 9) is None
    assert await store.device_codes.decide("ZZZZZZZZ", "usr_alice", True, NOW + 9) is None


async def test_device_decide_refuses_an_expired_request(store):
    await store.device_codes.create(device_code("d1", expires_at=NOW + 1000))
    assert await store.device_codes.decide("BCDFGHJK", "usr_alice", True, NOW + 1000) is None
    assert (await store.device_codes.poll(sha("d1"), NOW + 1001))["status"] == "pending"


async def test_device_decide_has_exactly_one_winner(store):
    await store.device_codes.create(device_code("d1"))
    results = await asyncio.gather(
        *(store.device_codes.decide("BCDFGHJK", f"usr_{i}", i % 2 == 0, NOW + 1) for i in range(RACERS))
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 2) == winners[0]


async def test_device_poll_returns_the_previous_record_and_records_the_poll(store):
    created = await store.device_codes.create(device_code("d1"))
    assert await store.device_codes.poll(sha("d1"), NOW + 5000) == created  # last_polled_at None: as it was
    second = await store.device_codes.poll(sha("d1"), NOW + 10_000)
    assert second == {**created, "last_polled_at": NOW + 5000}
    assert (await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 10_001))[
        "last_polled_at"
    ] == NOW + 10_000
    assert await store.device_codes.poll(sha("nope"), NOW) is None


async def test_device_poll_returns_expired_requests_as_they_are(store):
    created = await store.device_codes.create(device_code("d1", expires_at=NOW + 1000))
    assert await store.device_codes.poll(sha("d1"), NOW + 5000) == created


async def test_device_take_only_approved_and_once(store):
    await store.device_codes.create(device_code("d1", "BCDFGHJK"))
    await store.device_codes.create(device_code("d2", "MNPQRSTV"))
    assert await store.device_codes.take(sha("d1"), NOW + 1) is None  # pending: nothing changes
    assert (await store.device_codes.poll(sha("d1"), NOW + 2))["status"] == "pending"
    approved = await store.device_codes.decide("BCDFGHJK", "usr_alice", True, NOW + 3)
    taken = await store.device_codes.take(sha("d1"), NOW + 4)
    assert taken == {**approved, "last_polled_at": NOW + 2}
    assert await store.device_codes.take(sha("d1"), NOW + 5) is None
    assert await store.device_codes.poll(sha("d1"), NOW + 5) is None  # gone
    await store.device_codes.decide("MNPQRSTV", "usr_alice", False, NOW + 6)
    assert await store.device_codes.take(sha("d2"), NOW + 7) is None  # denied
    assert (await store.device_codes.poll(sha("d2"), NOW + 8))["status"] == "denied"


async def test_device_take_refuses_an_expired_approval(store):
    await store.device_codes.create(device_code("d1", expires_at=NOW + 1000))
    await store.device_codes.decide("BCDFGHJK", "usr_alice", True, NOW + 1)
    assert await store.device_codes.take(sha("d1"), NOW + 1000) is None
    assert (await store.device_codes.poll(sha("d1"), NOW + 1001))["status"] == "approved"  # nothing changed


async def test_device_take_has_exactly_one_winner(store):
    await store.device_codes.create(device_code("d1"))
    await store.device_codes.decide("BCDFGHJK", "usr_alice", True, NOW + 1)
    results = await asyncio.gather(*(store.device_codes.take(sha("d1"), NOW + 2) for _ in range(RACERS)))
    assert len([r for r in results if r is not None]) == 1


# -- consents ---------------------------------------------------------------------------------------------
async def test_consent_remember_unions_scopes_and_keeps_created_at(store):
    first = await store.consents.remember(consent(scope="openid email", at=NOW))
    assert first == consent(scope="openid email", at=NOW)
    assert await store.consents.get("usr_alice", "sp.example.com") == first
    again = await store.consents.remember(consent(scope="profile email", at=NOW + 10))
    assert again == {
        "person_id": "usr_alice",
        "client_id": "sp.example.com",
        "scope": "openid email profile",
        "created_at": NOW,
        "updated_at": NOW + 10,
    }
    assert await store.consents.get("usr_alice", "sp.example.com") == again
    # fewer scopes never take any away
    assert (await store.consents.remember(consent(scope="openid", at=NOW + 20)))[
        "scope"
    ] == "openid email profile"
    assert await store.consents.get("usr_alice", "other.example.com") is None
    assert await store.consents.get("usr_bob", "sp.example.com") is None


async def test_consent_list_for_newest_updated_first(store):
    await store.consents.remember(consent("a.example.com", at=NOW))
    await store.consents.remember(consent("b.example.com", at=NOW + 1))
    await store.consents.remember(consent("c.example.com", at=NOW + 2))
    await store.consents.remember(consent("a.example.com", scope="profile", at=NOW + 3))
    await store.consents.remember(consent("z.example.com", person_id="usr_bob", at=NOW + 4))
    assert [c["client_id"] for c in await store.consents.list_for("usr_alice")] == [
        "a.example.com",
        "c.example.com",
        "b.example.com",
    ]
    assert await store.consents.list_for("usr_nobody") == []


async def test_consent_remember_concurrently_keeps_every_scope(store):
    await asyncio.gather(
        *(store.consents.remember(consent(scope=f"s{i}", at=NOW + i)) for i in range(RACERS))
    )
    stored = await store.consents.get("usr_alice", "sp.example.com")
    assert sorted(stored["scope"].split()) == sorted(f"s{i}" for i in range(RACERS))


async def test_consent_withdraw_revokes_that_clients_families_only(store):
    await store.consents.remember(consent("sp.example.com"))
    await store.consents.remember(consent("other.example.com"))
    await store.refresh_tokens.create(refresh_token("s1", family_id="rtf_s1", client_id="sp.example.com"))
    await store.refresh_tokens.create(refresh_token("s2", family_id="rtf_s2", client_id="sp.example.com"))
    await store.refresh_tokens.create(refresh_token("o1", family_id="rtf_o1", client_id="other.example.com"))
    await store.refresh_tokens.create(
        refresh_token("b1", family_id="rtf_b1", client_id="sp.example.com", person_id="usr_bob")
    )
    assert await store.consents.withdraw("usr_alice", "sp.example.com", NOW + 5) is True
    assert await store.consents.get("usr_alice", "sp.example.com") is None
    assert not await store.refresh_tokens.family_live("rtf_s1", NOW + 5)
    assert not await store.refresh_tokens.family_live("rtf_s2", NOW + 5)
    assert (await store.refresh_tokens.get(sha("s1")))["revoked_at"] == NOW + 5
    assert await store.refresh_tokens.family_live("rtf_o1", NOW + 5)  # another client
    assert await store.refresh_tokens.family_live("rtf_b1", NOW + 5)  # another person
    assert await store.consents.get("usr_alice", "other.example.com") is not None
    assert await store.consents.withdraw("usr_alice", "sp.example.com", NOW + 6) is False


async def test_deleting_a_person_deletes_their_refresh_tokens_and_consents(store):
    await store.people.create(person("alice"))
    await store.refresh_tokens.create(refresh_token("r1"))
    await store.refresh_tokens.create(refresh_token("b1", family_id="rtf_b", person_id="usr_bob"))
    await store.consents.remember(consent())
    await store.consents.remember(consent(person_id="usr_bob"))
    assert await store.people.delete("usr_alice", NOW + 1) is not None
    assert await store.refresh_tokens.get(sha("r1")) is None
    assert not await store.refresh_tokens.family_live("rtf_one", NOW + 1)
    assert await store.consents.list_for("usr_alice") == []
    assert await store.refresh_tokens.family_live("rtf_b", NOW + 1)
    assert await store.consents.get("usr_bob", "sp.example.com") is not None


# -- guest sessions (SP login: person_id None) -------------------------------------------------------------
async def test_guest_session_round_trip(store):
    guest = await store.sessions.create(guest_session("g1"))
    assert guest["person_id"] is None and guest["idp"] == "https://idp.example.org"
    assert await store.sessions.get("g1", NOW + 1) == guest
    member = await store.sessions.create(session("m1", created_at=NOW + 1))
    assert member["idp"] is None and member["email"] is None and member["name"] is None
    assert await store.sessions.get("m1", NOW + 2) == member
    rows, more = await store.sessions.list(first_page(), None, NOW + 2)
    assert [s["session_id"] for s in rows] == ["m1", "g1"] and not more
    rows, _ = await store.sessions.list(first_page(), "usr_alice", NOW + 2)
    assert [s["session_id"] for s in rows] == ["m1"]


async def test_revoke_person_never_matches_guests(store):
    await store.sessions.create(guest_session("g1"))
    await store.sessions.create(session("m1"))
    assert await store.sessions.revoke_person("usr_alice", NOW + 1) == 1
    assert await store.sessions.get("g1", NOW + 2) is not None
    assert await store.sessions.revoke_person("", NOW + 2) == 0
    assert await store.sessions.get("g1", NOW + 2) is not None


async def test_guest_session_revoke_family_and_touch(store):
    await store.sessions.create(guest_session("g1", family_id="fam_g"))
    await store.sessions.touch("g1", NOW + 100)
    assert (await store.sessions.get("g1", NOW + 101))["last_seen_at"] == NOW + 100
    assert await store.sessions.revoke_family("fam_g", NOW + 200) == 1
    assert await store.sessions.get("g1", NOW + 201) is None


async def test_device_slow_down_raises_the_interval_only(store):
    await store.device_codes.create(device_code("d1"))
    await store.device_codes.slow_down(sha("d1"), 10, NOW + 1)
    assert (await store.device_codes.poll(sha("d1"), NOW + 2))["interval"] == 10
    await store.device_codes.slow_down(sha("d1"), 7, NOW + 3)  # never lowered
    assert (await store.device_codes.poll(sha("d1"), NOW + 4))["interval"] == 10
    await store.device_codes.slow_down(sha("nope"), 10, NOW + 5)  # unknown: nothing
    await asyncio.gather(*(store.device_codes.slow_down(sha("d1"), 10 + i, NOW + 6) for i in range(RACERS)))
    assert (await store.device_codes.get_by_user_code("BCDFGHJK", NOW + 7))["interval"] == 10 + RACERS - 1
