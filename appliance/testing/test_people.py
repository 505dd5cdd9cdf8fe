"""store.people, store.credentials, store.sessions, store.registrations, store.webauthn_challenges:
every promise of grantd.store.people, per backend (issue "People"; D11)."""

from __future__ import annotations

import asyncio

import pytest

from grantd.store import Conflict

from .factories import (
    HOUR,
    NOW,
    agent,
    credential,
    first_page,
    person,
    registration,
    session,
    token_hash,
    walk,
    webauthn_challenge,
)

pytestmark = pytest.mark.anyio

ADMINS = frozenset({"root@example.com"})
RACERS = 12


async def _people(store):
    rows, _ = await store.people.list(first_page(100))
    return [p["person_id"] for p in rows]


# -- people ---------------------------------------------------------------------------------------------
async def test_person_create_and_get_by_id_or_email(store):
    created = await store.people.create(person("alice", admin=True))
    assert created == person("alice", admin=True)
    assert await store.people.get("usr_alice") == created
    assert await store.people.get("alice@example.com") == created
    assert await store.people.get("ALICE@Example.com") == created
    assert await store.people.get("nobody@example.com") is None
    assert await store.people.get("usr_nobody") is None


async def test_person_email_is_stored_lowercased(store):
    created = await store.people.create(person("bob", email="Bob@Example.COM"))
    assert created["email"] == "bob@example.com"
    assert (await store.people.get("usr_bob"))["email"] == "bob@example.com"
    with pytest.raises(Conflict) as caught:
        await store.people.create(person("bob2", email="bob@example.com"))
    assert caught.value.field == "email"


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (person("other", email="alice@example.com"), "email"),  # another person's
        (person("other", email="ALICE@example.com"), "email"),
        (person("other", email="bot@agents.example.com"), "email"),  # an agent's (D11)
        (person("alice", email="fresh@example.com"), "id"),
    ],
)
async def test_person_create_conflicts(store, record, field):
    await store.agents.create(agent("bot"), ADMINS)
    await store.people.create(person("alice"))
    with pytest.raises(Conflict) as caught:
        await store.people.create(record)
    assert caught.value.field == field
    assert await _people(store) == ["usr_alice"]  # nothing of the failed create stays


async def test_agent_create_refuses_a_persons_email(store):
    await store.people.create(person("alice"))
    for email in ("alice@example.com", "Alice@Example.com"):
        with pytest.raises(Conflict) as caught:
            await store.agents.create(agent("bot", email=email), ADMINS)
        assert caught.value.field == "email"
    rows, _ = await store.agents.list(first_page())
    assert rows == []


async def test_a_person_may_own_and_approve_an_agent_but_an_agent_may_not(store):
    await store.people.create(person("alice"))
    await store.people.create(person("amir"))
    created = await store.agents.create(
        agent("bot", owner="alice@example.com", approver="amir@example.com"), ADMINS
    )
    assert created["owner"] == "alice@example.com"
    for field in ("owner", "approver"):
        with pytest.raises(Conflict) as caught:
            await store.agents.create(agent("bot2", **{field: "bot@agents.example.com"}), ADMINS)
        assert caught.value.field == field


async def test_people_list_newest_first_with_paging(store):
    names = [f"p{i}" for i in range(7)]
    for i, name in enumerate(names):
        await store.people.create(person(name, created_at=NOW + i // 3))  # ties on created_at
    pages = await walk(store.people.list, 3, "person_id")
    assert [len(p) for p in pages] == [3, 3, 1]
    listed = [p["person_id"] for page in pages for p in page]
    assert listed == sorted(
        (f"usr_{n}" for n in names), key=lambda i: (NOW + int(i[5:]) // 3, i), reverse=True
    )
    rows, more = await store.people.list(first_page(7))
    assert len(rows) == 7 and more is False
    assert all(isinstance(p["admin"], bool) for p in rows)


async def test_people_search_is_a_literal_case_insensitive_substring(store):
    await store.people.create(person("alice", name="Alice Liddell"))
    await store.people.create(person("bob", email="bob_smith@example.com", name="Bob 100%"))
    await store.people.create(person("carol", email="carolxsmith@example.com", name="Carol 1000"))
    await store.people.create(person("dave", name="Ünal Dave"))

    async def found(search):
        rows, _ = await store.people.list(first_page(), search)
        return sorted(p["person_id"] for p in rows)

    assert await found("LIDDELL") == ["usr_alice"]  # the name
    assert await found("ALICE@") == ["usr_alice"]  # the e-mail
    assert await found("example") == ["usr_alice", "usr_bob", "usr_carol", "usr_dave"]
    assert await found("b_s") == ["usr_bob"]
    assert await found("l_s") == []  # "_" is not a wildcard (it would match carol's "lxs")
    assert await found("_") == ["usr_bob"]
    assert await found("100%") == ["usr_bob"]  # "%" is not a wildcard (it would match carol's "1000")
    assert await found("%") == ["usr_bob"]
    assert await found("ünal") == ["usr_dave"]  # not only ASCII
    assert await found("zzz") == []
    assert await found(None) == ["usr_alice", "usr_bob", "usr_carol", "usr_dave"]


async def test_people_search_pages(store):
    for i in range(5):
        await store.people.create(person(f"match{i}", created_at=NOW + i))
        await store.people.create(person(f"other{i}", created_at=NOW + i))
    pages = await walk(lambda page: store.people.list(page, "MATCH"), 2, "person_id")
    assert [p["person_id"] for page in pages for p in page] == [f"usr_match{i}" for i in range(4, -1, -1)]


async def test_admins_are_the_active_administrators_oldest_first_and_bounded(store):
    await store.people.create(person("zed", created_at=NOW + 3, admin=True))
    await store.people.create(person("amy", created_at=NOW + 1, admin=True))
    await store.people.create(person("bob", created_at=NOW + 1, admin=True))  # a tie: by person_id
    await store.people.create(person("off", created_at=NOW, admin=True, status="disabled"))
    await store.people.create(person("joe", created_at=NOW))
    assert await store.people.admins(10) == ["amy@example.com", "bob@example.com", "zed@example.com"]
    assert await store.people.admins(2) == ["amy@example.com", "bob@example.com"]
    # what an update changes, the next answer shows (a partial index must follow its rows)
    await store.people.update("usr_amy", {"status": "disabled", "updated_at": NOW + 5})
    await store.people.update("usr_joe", {"admin": True, "updated_at": NOW + 5})
    await store.people.update("usr_off", {"status": "active", "updated_at": NOW + 5})
    assert await store.people.admins(10) == [
        "joe@example.com",
        "off@example.com",
        "bob@example.com",
        "zed@example.com",
    ]
    await store.people.delete("usr_bob", NOW + 6)
    assert await store.people.admins(10) == ["joe@example.com", "off@example.com", "zed@example.com"]


async def test_get_many_finds_people_by_email_in_one_answer(store):
    await store.people.create(person("amy"))
    await store.people.create(person("off", status="disabled", admin=True))
    found = await store.people.get_many(
        ["AMY@example.com", "off@example.com", "nobody@example.com", "amy@example.com"]
    )
    assert found == {
        "amy@example.com": person("amy"),
        "off@example.com": person("off", status="disabled", admin=True),
    }
    assert await store.people.get_many([]) == {}
    many = [f"p{i}@example.com" for i in range(1200)] + [
        "off@example.com"
    ]  # more than one statement may hold
    assert list(await store.people.get_many(many)) == ["off@example.com"]


async def test_person_update(store):
    await store.people.create(person("alice"))
    updated = await store.people.update(
        "usr_alice", {"name": "Alice L.", "admin": True, "status": "disabled", "updated_at": NOW + 5}
    )
    assert updated == {
        **person("alice"),
        "name": "Alice L.",
        "admin": True,
        "status": "disabled",
        "updated_at": NOW + 5,
    }
    assert await store.people.get("usr_alice") == updated
    # only the documented fields change
    same = await store.people.update("usr_alice", {"email": "eve@example.com", "person_id": "usr_eve"})
    assert same == updated
    assert await store.people.get("eve@example.com") is None
    assert await store.people.update("usr_nobody", {"name": "x"}) is None


async def _person_with_everything(store, name, *, passkeys=2):
    await store.people.create(person(name))
    pid = f"usr_{name}"
    for i in range(passkeys):
        await store.credentials.add(credential(f"{name}-c{i}", pid, created_at=NOW + i))
    await store.sessions.create(session(f"{name}-s1", pid))
    await store.sessions.create(session(f"{name}-s2", pid, revoked_at=NOW))
    await store.registrations.create(
        registration(f"{name}-unused", f"{name}@example.com", purpose="add-device")
    )
    await store.registrations.create(
        registration(f"{name}-expired", f"{name}@example.com", expires_at=NOW - 1)
    )
    await store.registrations.create(registration(f"{name}-used", f"{name}@example.com", used_at=NOW - 5))
    await store.webauthn_challenges.create(webauthn_challenge(f"{name}-ch", "add", person_id=pid), NOW)


async def test_person_delete_takes_passkeys_sessions_and_unused_registration_urls(store):
    await _person_with_everything(store, "alice")
    await _person_with_everything(store, "bob")
    deleted = await store.people.delete("usr_alice", NOW)
    assert deleted == person("alice")
    assert await store.people.get("usr_alice") is None
    assert await store.credentials.list_for("usr_alice") == []
    assert await store.credentials.get("alice-c0") is None
    assert await store.sessions.get("alice-s1", NOW) is None
    assert (await store.sessions.list(first_page(), "usr_alice", NOW))[0] == []
    assert await store.registrations.get_by_token_hash(token_hash("alice-unused")) is None
    assert await store.registrations.get_by_token_hash(token_hash("alice-expired")) is None
    assert (await store.registrations.get_by_token_hash(token_hash("alice-used")))[
        "used_at"
    ] == NOW - 5  # history
    assert await store.webauthn_challenges.take("alice-ch", "add", NOW) is None
    # bob's things are untouched
    assert len(await store.credentials.list_for("usr_bob")) == 2
    assert await store.sessions.get("bob-s1", NOW) is not None
    assert await store.registrations.get_by_token_hash(token_hash("bob-unused")) is not None
    assert await store.webauthn_challenges.take("bob-ch", "add", NOW) is not None
    # gone for good; the e-mail is free again (for an agent too)
    assert await store.people.delete("usr_alice", NOW) is None
    assert await store.people.delete("usr_nobody", NOW) is None
    await store.agents.create(agent("alice", email="alice@example.com"), ADMINS)


# -- credentials ----------------------------------------------------------------------------------------
async def test_credential_add_get_and_list_oldest_first(store):
    await store.people.create(person("alice"))
    added = [await store.credentials.add(credential(f"c{i}", created_at=NOW - i)) for i in range(3)]
    assert added[0] == credential("c0")
    assert await store.credentials.get("c1") == credential("c1", created_at=NOW - 1)
    assert [c["credential_id"] for c in await store.credentials.list_for("usr_alice")] == ["c2", "c1", "c0"]
    listed = await store.credentials.list_for("usr_alice")
    assert listed[0]["transports"] == ["internal", "hybrid"] and listed[0]["backed_up"] is True
    assert await store.credentials.list_for("usr_bob") == []
    assert await store.credentials.get("nope") is None


async def test_credential_add_conflict(store):
    await store.credentials.add(credential("c1"))
    with pytest.raises(Conflict) as caught:
        await store.credentials.add(credential("c1", "usr_bob", public_key="other"))
    assert caught.value.field == "credential_id"
    assert await store.credentials.get("c1") == credential("c1")
    assert await store.credentials.list_for("usr_bob") == []


async def test_credential_use_only_moves_the_counter_forward(store):
    await store.credentials.add(credential("c1", sign_count=5))
    used = await store.credentials.use("c1", 6, NOW + 1)
    assert used["sign_count"] == 6 and used["last_used_at"] == NOW + 1
    assert await store.credentials.use("c1", 6, NOW + 2) is None  # a replay
    assert await store.credentials.use("c1", 3, NOW + 3) is None  # a cloned authenticator
    assert await store.credentials.use("c1", 0, NOW + 4) is None  # a counter cannot go back to 0
    stored = await store.credentials.get("c1")
    assert stored["sign_count"] == 6 and stored["last_used_at"] == NOW + 1
    assert (await store.credentials.use("c1", 100, NOW + 5))["sign_count"] == 100
    assert await store.credentials.use("nope", 1, NOW) is None


async def test_credential_use_without_counters(store):
    await store.credentials.add(credential("c1", sign_count=0))
    assert (await store.credentials.use("c1", 0, NOW + 1))["last_used_at"] == NOW + 1  # 0/0: no counter
    assert (await store.credentials.use("c1", 0, NOW + 2))["last_used_at"] == NOW + 2
    assert (await store.credentials.use("c1", 1, NOW + 3))["sign_count"] == 1  # it starts counting
    assert await store.credentials.use("c1", 0, NOW + 4) is None


async def test_concurrent_uses_of_one_count_have_one_winner(store):
    await store.credentials.add(credential("c1", sign_count=7))
    results = await asyncio.gather(*(store.credentials.use("c1", 8, NOW + i) for i in range(RACERS)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0]["sign_count"] == 8
    assert (await store.credentials.get("c1"))["last_used_at"] == winners[0]["last_used_at"]


async def test_credential_delete_never_deletes_the_last_one(store):
    for cid in ("c1", "c2"):
        await store.credentials.add(credential(cid))
    await store.credentials.add(credential("b1", "usr_bob"))
    assert await store.credentials.delete("usr_alice", "nope", NOW) is None
    assert await store.credentials.delete("usr_alice", "b1", NOW) is None  # not hers
    assert await store.credentials.get("b1") is not None
    assert await store.credentials.delete("usr_alice", "c1", NOW) is True
    assert await store.credentials.get("c1") is None
    assert await store.credentials.delete("usr_alice", "c1", NOW) is None
    assert await store.credentials.delete("usr_alice", "c2", NOW) is False  # the last one: kept
    assert [c["credential_id"] for c in await store.credentials.list_for("usr_alice")] == ["c2"]
    assert await store.credentials.delete("usr_bob", "b1", NOW) is False


async def test_deleting_a_passkey_revokes_the_sessions_it_started_and_only_those(store):
    """Issue 19: a session records the passkey that started it; deleting that passkey ends it in
    the same transaction. Sessions of the person's other passkeys, of other ways in (None) and of
    other people stay; a session already revoked keeps its time."""
    for cid in ("c1", "c2"):
        await store.credentials.add(credential(cid))
    await store.credentials.add(credential("b1", "usr_bob"))
    await store.credentials.add(credential("b2", "usr_bob"))
    await store.sessions.create(session("by-c1", credential_id="c1"))
    await store.sessions.create(session("by-c1-too", credential_id="c1", family_id="fam_other"))
    await store.sessions.create(session("by-c1-revoked", credential_id="c1", revoked_at=NOW - 5))
    await store.sessions.create(session("by-c2", credential_id="c2"))
    await store.sessions.create(session("federated"))
    await store.sessions.create(session("bob-by-b1", "usr_bob", credential_id="b1"))
    assert (await store.sessions.get("by-c1", NOW))["credential_id"] == "c1"
    assert (await store.sessions.get("federated", NOW))["credential_id"] is None
    assert await store.credentials.delete("usr_bob", "c1", NOW + 1) is None  # not his: nothing ends
    assert await store.sessions.get("by-c1", NOW + 1) is not None
    assert await store.credentials.delete("usr_alice", "c1", NOW + 1) is True
    assert await store.sessions.get("by-c1", NOW + 1) is None
    assert await store.sessions.get("by-c1-too", NOW + 1) is None
    live = {s["session_id"] for s in (await store.sessions.list(first_page(), None, NOW + 1))[0]}
    assert {"by-c2", "federated", "bob-by-b1"} <= live and not {"by-c1", "by-c1-too"} & live
    # the last passkey is kept, and so are its sessions
    assert await store.credentials.delete("usr_alice", "c2", NOW + 2) is False
    assert await store.sessions.get("by-c2", NOW + 2) is not None


async def test_concurrent_deletes_of_the_last_two_keep_one(store):
    for round_ in range(5):
        pid = f"usr_p{round_}"
        await store.credentials.add(credential(f"{pid}-a", pid))
        await store.credentials.add(credential(f"{pid}-b", pid))
        results = await asyncio.gather(
            store.credentials.delete(pid, f"{pid}-a", NOW),
            store.credentials.delete(pid, f"{pid}-b", NOW),
            store.credentials.delete(pid, f"{pid}-a", NOW),
            store.credentials.delete(pid, f"{pid}-b", NOW),
        )
        assert results.count(True) == 1
        assert len(await store.credentials.list_for(pid)) == 1


# -- sessions -------------------------------------------------------------------------------------------
async def test_session_create_and_get_only_while_live(store):
    created = await store.sessions.create(session("s1", expires_at=NOW + HOUR))
    assert created == session("s1")
    assert await store.sessions.get("s1", NOW) == created
    assert await store.sessions.get("s1", NOW + HOUR - 1) == created
    assert await store.sessions.get("s1", NOW + HOUR) is None  # expired at its expiry
    assert await store.sessions.get("nope", NOW) is None
    await store.sessions.create(session("s2", revoked_at=NOW))
    assert await store.sessions.get("s2", NOW) is None
    with pytest.raises(Conflict) as caught:
        await store.sessions.create(session("s1", "usr_mallory"))
    assert caught.value.field == "session_id"
    assert (await store.sessions.get("s1", NOW))["person_id"] == "usr_alice"


async def test_session_touch_records_activity(store):
    await store.sessions.create(session("s1"))
    await store.sessions.touch("s1", NOW + 60_000)
    assert (await store.sessions.get("s1", NOW + 60_000))["last_seen_at"] == NOW + 60_000
    await store.sessions.touch("s1", NOW + 1)  # never backwards
    assert (await store.sessions.get("s1", NOW))["last_seen_at"] == NOW + 60_000
    await store.sessions.touch("nope", NOW)  # nothing to do


async def test_sessions_list_live_newest_first_with_paging(store):
    for i in range(7):
        await store.sessions.create(
            session(f"s{i}", "usr_alice" if i % 2 else "usr_bob", created_at=NOW + i // 3)
        )
    await store.sessions.create(session("revoked", revoked_at=NOW))
    await store.sessions.create(session("expired", created_at=NOW - HOUR, expires_at=NOW))
    pages = await walk(lambda page: store.sessions.list(page, None, NOW), 3, "session_id")
    assert [len(p) for p in pages] == [3, 3, 1]
    listed = [s["session_id"] for page in pages for s in page]
    assert listed == sorted(
        (f"s{i}" for i in range(7)), key=lambda s: (NOW + int(s[1:]) // 3, s), reverse=True
    )
    alice, more = await store.sessions.list(first_page(), "usr_alice", NOW)
    assert [s["session_id"] for s in alice] == ["s5", "s3", "s1"] and more is False
    later, _ = await store.sessions.list(first_page(), None, NOW + HOUR)
    assert later == []


async def test_revoke_family_and_person(store):
    await store.sessions.create(session("a1", family_id="fam_a"))
    await store.sessions.create(session("a2", family_id="fam_a"))
    await store.sessions.create(session("a3", family_id="fam_a", expires_at=NOW))  # already expired
    await store.sessions.create(session("b1", family_id="fam_b"))
    await store.sessions.create(session("c1", "usr_carol", family_id="fam_c"))
    assert await store.sessions.revoke_family("fam_a", NOW) == 2
    assert await store.sessions.get("a1", NOW) is None and await store.sessions.get("a2", NOW) is None
    assert await store.sessions.revoke_family("fam_a", NOW + 1) == 0
    assert await store.sessions.revoke_family("fam_nope", NOW) == 0
    assert await store.sessions.get("b1", NOW) is not None
    assert await store.sessions.revoke_person("usr_alice", NOW) == 1  # b1; the family a ones are gone
    assert await store.sessions.get("b1", NOW) is None
    assert await store.sessions.revoke_person("usr_alice", NOW) == 0
    assert await store.sessions.get("c1", NOW) is not None


async def test_expired_sessions_never_return(store):
    await store.sessions.create(session("old", created_at=NOW - 2 * HOUR, expires_at=NOW - HOUR))
    await store.sessions.create(session("new"))  # may drop the expired one
    assert await store.sessions.get("old", NOW) is None
    assert [s["session_id"] for s in (await store.sessions.list(first_page(), None, NOW))[0]] == ["new"]


# -- registration URLs ----------------------------------------------------------------------------------
async def test_registration_create_get_list_delete(store):
    created = await store.registrations.create(registration("r1", admin=True))
    assert created == registration("r1", admin=True)
    assert await store.registrations.get_by_token_hash(token_hash("r1")) == created
    assert await store.registrations.get_by_token_hash(token_hash("nope")) is None
    await store.registrations.create(
        registration("r2", "bob@example.com", created_at=NOW + 1, used_at=NOW + 2)
    )
    await store.registrations.create(
        registration("r3", "carol@example.com", created_at=NOW + 1, expires_at=NOW)
    )
    rows, more = await store.registrations.list(first_page())
    assert [r["id"] for r in rows] == ["r3", "r2", "r1"] and more is False  # used and expired included
    assert rows[2]["admin"] is True
    pages = await walk(store.registrations.list, 2)
    assert [[r["id"] for r in p] for p in pages] == [["r3", "r2"], ["r1"]]
    assert await store.registrations.delete("r2") is True
    assert await store.registrations.delete("r2") is False
    assert await store.registrations.get_by_token_hash(token_hash("r2")) is None


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (registration("other", token_hash=token_hash("r1")), "token_hash"),
        (registration("r1", token_hash="fresh"), "id"),
    ],
)
async def test_registration_create_conflicts(store, record, field):
    await store.registrations.create(registration("r1"))
    with pytest.raises(Conflict) as caught:
        await store.registrations.create(record)
    assert caught.value.field == field
    rows, _ = await store.registrations.list(first_page())
    assert rows == [registration("r1")]


async def test_complete_creates_the_person_with_their_first_passkey(store):
    await store.registrations.create(registration("r1", admin=True))
    new = person("alice", admin=True, created_at=NOW + 5)
    got, added = await store.registrations.complete(
        token_hash("r1"), new, credential("c1", "usr_alice"), NOW + 5
    )
    assert got == new and added == credential("c1", "usr_alice")
    assert await store.people.get("alice@example.com") == new
    assert await store.credentials.list_for("usr_alice") == [added]
    assert (await store.registrations.get_by_token_hash(token_hash("r1")))["used_at"] == NOW + 5


async def test_complete_is_single_use(store):
    await store.registrations.create(registration("r1"))
    await store.registrations.complete(token_hash("r1"), person("alice"), credential("c1"), NOW)
    with pytest.raises(Conflict) as caught:
        await store.registrations.complete(token_hash("r1"), person("alice"), credential("c2"), NOW + 1)
    assert caught.value.field == "token"
    assert [c["credential_id"] for c in await store.credentials.list_for("usr_alice")] == ["c1"]
    assert (await store.registrations.get_by_token_hash(token_hash("r1")))["used_at"] == NOW


@pytest.mark.parametrize("rid", ["unknown", "expired"])
async def test_complete_refuses_unknown_and_expired_urls(store, rid):
    await store.registrations.create(registration("expired", expires_at=NOW))
    with pytest.raises(Conflict) as caught:
        await store.registrations.complete(token_hash(rid), person("alice"), credential("c1"), NOW)
    assert caught.value.field == "token"
    assert await store.people.get("alice@example.com") is None
    assert await store.credentials.get("c1") is None
    assert (await store.registrations.get_by_token_hash(token_hash("expired")))["used_at"] is None


async def test_complete_uses_an_existing_person_without_passkeys(store):
    existing = await store.people.create(person("alice", name="Alice Admin-made", admin=True))
    await store.registrations.create(registration("r1"))
    got, added = await store.registrations.complete(
        token_hash("r1"),
        person("alice", person_id="usr_other", name="Other"),
        credential("c1", "usr_other"),
        NOW,
    )
    assert got == existing  # the stored person, not the record handed in
    assert added["person_id"] == "usr_alice"
    assert await store.people.get("usr_other") is None
    assert [c["credential_id"] for c in await store.credentials.list_for("usr_alice")] == ["c1"]


async def test_a_register_url_never_grafts_a_passkey_onto_an_account_with_one(store):
    await store.people.create(person("alice"))
    await store.credentials.add(credential("victim-key"))
    await store.registrations.create(registration("r1"))
    with pytest.raises(Conflict) as caught:
        await store.registrations.complete(token_hash("r1"), person("alice"), credential("attacker-key"), NOW)
    assert caught.value.field == "credential"
    assert [c["credential_id"] for c in await store.credentials.list_for("usr_alice")] == ["victim-key"]
    assert await store.credentials.get("attacker-key") is None
    assert (await store.registrations.get_by_token_hash(token_hash("r1")))[
        "used_at"
    ] is None  # all rolled back


async def test_the_graft_rule_counts_per_rp(store):
    await store.people.create(person("alice"))
    await store.credentials.add(credential("old-rp-key", rp_id="old.example.com"))
    await store.registrations.create(registration("r1"))  # for grantd.example.com
    got, added = await store.registrations.complete(token_hash("r1"), person("alice"), credential("c1"), NOW)
    assert got["person_id"] == "usr_alice" and added["rp_id"] == "grantd.example.com"
    assert len(await store.credentials.list_for("usr_alice")) == 2


async def test_an_add_device_url_adds_a_passkey_to_an_account_with_one(store):
    await store.people.create(person("alice"))
    await store.credentials.add(credential("c1"))
    await store.registrations.create(registration("r1", purpose="add-device"))
    _, added = await store.registrations.complete(token_hash("r1"), person("alice"), credential("c2"), NOW)
    assert added["person_id"] == "usr_alice"
    assert [c["credential_id"] for c in await store.credentials.list_for("usr_alice")] == ["c1", "c2"]


async def test_an_add_device_url_creates_a_missing_person(store):
    await store.registrations.create(registration("r1", purpose="add-device"))
    got, _ = await store.registrations.complete(token_hash("r1"), person("alice"), credential("c1"), NOW)
    assert got == person("alice") and await store.people.get("usr_alice") == got


@pytest.mark.parametrize(
    ("case", "field"),
    [
        ("agent-email", "email"),  # D11: the URL's e-mail became an agent's meanwhile
        ("taken-credential", "credential_id"),
        ("other-email", "email"),  # the record handed in is not for the URL's e-mail
    ],
)
async def test_complete_rolls_back_on_conflict(store, case, field):
    if case == "agent-email":
        await store.agents.create(agent("alice", email="alice@example.com"), ADMINS)
    await store.credentials.add(credential("c1", "usr_bob"))
    await store.registrations.create(registration("r1"))
    new = person("mallory") if case == "other-email" else person("alice")
    cred = credential("c1" if case == "taken-credential" else "c2", new["person_id"])
    with pytest.raises(Conflict) as caught:
        await store.registrations.complete(token_hash("r1"), new, cred, NOW)
    assert caught.value.field == field
    assert await _people(store) == []
    assert await store.credentials.get("c2") is None
    assert (await store.credentials.get("c1"))["person_id"] == "usr_bob"
    assert (await store.registrations.get_by_token_hash(token_hash("r1")))["used_at"] is None


async def test_concurrent_completes_of_one_url_have_one_winner(store):
    await store.registrations.create(registration("r1"))

    async def redeem(i):
        try:
            return await store.registrations.complete(
                token_hash("r1"),
                person("alice", person_id=f"usr_a{i}"),
                credential(f"c{i}", f"usr_a{i}"),
                NOW + i,
            )
        except Conflict as exc:
            return exc.field

    results = await asyncio.gather(*(redeem(i) for i in range(RACERS)))
    winners = [r for r in results if not isinstance(r, str)]
    assert len(winners) == 1
    assert sorted(r for r in results if isinstance(r, str)) == ["token"] * (RACERS - 1)
    got, added = winners[0]
    assert await _people(store) == [got["person_id"]]
    assert await store.credentials.list_for(got["person_id"]) == [added]


# -- WebAuthn challenges --------------------------------------------------------------------------------
async def test_webauthn_challenge_is_taken_once_for_its_purpose(store):
    record = webauthn_challenge("ch1", "register", person_id="usr_alice", registration_id="r1")
    await store.webauthn_challenges.create(record, NOW)
    assert await store.webauthn_challenges.take("ch1", "login", NOW) is None  # another ceremony's
    assert await store.webauthn_challenges.take("ch1", "register", NOW) == record
    assert await store.webauthn_challenges.take("ch1", "register", NOW) is None
    assert await store.webauthn_challenges.take("nope", "login", NOW) is None


async def test_an_expired_webauthn_challenge_is_not_taken(store):
    await store.webauthn_challenges.create(webauthn_challenge("ch1", expires_at=NOW + 300_000), NOW)
    await store.webauthn_challenges.create(webauthn_challenge("ch2", expires_at=NOW + 300_000), NOW)
    assert (
        await store.webauthn_challenges.take("ch1", "login", NOW + 300_000) is None
    )  # expired at its expiry
    assert await store.webauthn_challenges.take("ch2", "login", NOW + 299_999) is not None
    await store.webauthn_challenges.create(webauthn_challenge("ch3", expires_at=NOW + 900_000), NOW + 600_000)
    assert await store.webauthn_challenges.take("ch1", "login", NOW) is None


async def test_concurrent_takers_of_a_webauthn_challenge_have_one_winner(store):
    await store.webauthn_challenges.create(webauthn_challenge("ch1"), NOW)
    results = await asyncio.gather(
        *(store.webauthn_challenges.take("ch1", "login", NOW) for _ in range(RACERS))
    )
    assert [r["challenge"] for r in results if r is not None] == ["ch1"]


async def test_a_webauthn_challenge_is_stored_once(store):
    await store.webauthn_challenges.create(webauthn_challenge("ch1", "login"), NOW)
    with pytest.raises(Conflict) as caught:
        await store.webauthn_challenges.create(
            webauthn_challenge("ch1", "register", person_id="usr_mallory"), NOW
        )
    assert caught.value.field == "challenge"
    assert await store.webauthn_challenges.take("ch1", "register", NOW) is None
    assert await store.webauthn_challenges.take("ch1", "login", NOW) == webauthn_challenge("ch1", "login")
