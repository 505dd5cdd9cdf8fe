"""Issue 19 (D11): persons retire like agents, owners and approvers are bound to the person's id,
and the per-owner bounds are decided in the database — every backend, the same promises."""

from __future__ import annotations

import asyncio

import pytest

from grantd.store import Conflict, LimitReached, PendingBound

from .factories import NOW, agent, delegation, first_page, grant, lapse, person, refresh_token, session

pytestmark = pytest.mark.anyio

ADMINS = frozenset({"root@example.com"})
RACERS = 12


# -- binding owners and approvers to ids -------------------------------------------------------------
async def test_enrolment_binds_the_persons_that_exist_and_person_creation_binds_the_rest(store):
    await store.people.create(person("olivia"))
    created = await store.agents.create(
        agent(
            "a",
            owner="olivia@example.com",
            approver="amir@example.com",
            owner_id="forged",
            approver_id="forged",
        ),
        ADMINS,
    )
    # the caller's ids are ignored: the store binds what the e-mails name now
    assert (created["owner_id"], created["approver_id"]) == ("usr_olivia", None)
    assert (await store.agents.get("agt_a"))["owner_id"] == "usr_olivia"
    await store.people.create(person("amir"))  # named before they existed: bound when created
    assert (await store.agents.get("agt_a"))["approver_id"] == "usr_amir"
    changed = await store.agents.update("agt_a", {"approver": "olivia@example.com", "updated_at": NOW + 1})
    assert changed["approver_id"] == "usr_olivia"
    changed = await store.agents.update("agt_a", {"owner": "nobody@example.com", "updated_at": NOW + 2})
    assert changed["owner_id"] is None


@pytest.mark.parametrize("delete", [False, True])
async def test_a_person_retired_keeps_their_id_on_agents_and_a_recreated_one_gets_nothing(store, delete):
    await store.people.create(person("olivia"))
    await store.agents.create(agent("a", owner="olivia@example.com"), ADMINS)
    assert (
        await store.people.retire(
            "usr_olivia", delete=delete, by="root@example.com", reason="left", now=NOW + 1, lapse=lapse()
        )
        is not None
    )
    if delete:
        # the same e-mail, a new person: the agent stays bound to the old id
        await store.people.create(person("olivia", person_id="usr_olivia2"))
        assert await store.agents.decidable_by("usr_olivia2") == []
    found = await store.agents.get("agt_a")
    assert (found["owner_id"], found["approver_id"]) == ("usr_olivia", "usr_olivia")


async def test_retire_binds_an_email_left_unbound_so_nobody_inherits_it(store):
    """An agent enrolled before its owner existed, whose binding was lost (rows migrated from before
    ids): retiring the person binds it to them, never to whoever takes the e-mail next."""
    await store.agents.create(agent("a", owner="olivia@example.com"), ADMINS)
    await store.people.create(person("olivia"))
    assert (await store.agents.get("agt_a"))["owner_id"] == "usr_olivia"
    await store.people.retire(
        "usr_olivia", delete=True, by="root@example.com", reason="left", now=NOW, lapse=lapse()
    )
    await store.people.create(person("olivia", person_id="usr_new"))
    assert (await store.agents.get("agt_a"))["owner_id"] == "usr_olivia"


async def test_an_unnamed_person_is_refused_while_their_email_is_named(store):
    await store.agents.create(agent("a", owner="owner@example.com", approver="appr@example.com"), ADMINS)
    await store.delegations.create(
        delegation("d1", delegator="root@example.com", delegate="deleg@example.com")
    )
    await store.delegations.create(
        delegation("d2", delegator="gone@example.com", delegate="agt@example.com", status="revoked")
    )
    for slug in ("owner", "appr", "deleg"):
        with pytest.raises(Conflict) as refused:
            await store.people.create(person(slug), unnamed=True)
        assert refused.value.field == "named"
        assert await store.people.get(f"{slug}@example.com") is None
    # a revoked delegation names nobody any more; an e-mail nothing names is fine
    assert (await store.people.create(person("gone"), unnamed=True))["person_id"] == "usr_gone"
    assert (await store.people.create(person("fresh"), unnamed=True))["person_id"] == "usr_fresh"
    # an administrator's creation binds instead
    assert (await store.people.create(person("owner")))["person_id"] == "usr_owner"
    assert (await store.agents.get("agt_a"))["owner_id"] == "usr_owner"


# -- retiring a person -----------------------------------------------------------------------------
@pytest.mark.parametrize("delete", [False, True])
async def test_people_retire_revokes_and_ends_everything_they_could_use(store, delete):
    await store.people.create(person("alice"))
    await store.people.create(person("bob"))
    for g in (
        grant("mine_pending", requester="alice@example.com", requester_id="usr_alice"),
        grant(
            "mine_approved",
            requester="alice@example.com",
            requester_id="usr_alice",
            status="approved",
            expires_at=NOW + 3_600_000,
        ),
        grant(
            "mine_lapsed",
            requester="alice@example.com",
            requester_id="usr_alice",
            status="approved",
            expires_at=NOW - 1,
        ),
        grant("mine_denied", requester="alice@example.com", requester_id="usr_alice", status="denied"),
        grant("bobs", requester="bob@example.com", requester_id="usr_bob"),
    ):
        await store.grants.create(g, ["grant.created"])
    seq = await store.grants.last_event_seq()
    await store.delegations.create(
        delegation("made", delegator="alice@example.com", delegate="bot@agents.example.com")
    )
    await store.delegations.create(
        delegation("names", delegator="root@example.com", delegate="alice@example.com")
    )
    await store.delegations.create(
        delegation("other", delegator="bob@example.com", delegate="bot@agents.example.com")
    )
    await store.sessions.create(session("s_alice", "usr_alice", expires_at=NOW + 3_600_000))
    await store.sessions.create(session("s_bob", "usr_bob", expires_at=NOW + 3_600_000))
    await store.refresh_tokens.create(refresh_token("rt_alice", family_id="rtf_alice", person_id="usr_alice"))
    await store.refresh_tokens.create(refresh_token("rt_bob", family_id="rtf_bob", person_id="usr_bob"))

    result = await store.people.retire(
        "usr_alice",
        delete=delete,
        by="root@example.com",
        reason="person disabled",
        now=NOW + 5,
        lapse=lapse(NOW),
    )
    assert result is not None
    before, revoked = result
    assert before == person("alice")
    assert sorted(g["id"] for g in revoked) == ["mine_approved", "mine_pending"]
    for g in revoked:
        assert (g["status"], g["revoked_by"], g["revoked_at"], g["decision_reason"]) == (
            "revoked",
            "root@example.com",
            NOW + 5,
            "person disabled",
        )
        assert await store.grants.get(g["id"]) == g
    events = await store.grants.events_after(seq, 100)
    assert sorted((e["event"], e["grant_id"]) for e in events) == [
        ("grant.revoked", "mine_approved"),
        ("grant.revoked", "mine_pending"),
    ]
    for gid, status in (("mine_lapsed", "approved"), ("mine_denied", "denied"), ("bobs", "pending")):
        assert (await store.grants.get(gid))["status"] == status
    for did in ("made", "names"):
        ended = await store.delegations.get(did)
        assert (ended["status"], ended["revoked_by"], ended["revoked_at"]) == (
            "revoked",
            "root@example.com",
            NOW + 5,
        )
    assert (await store.delegations.get("other"))["status"] == "active"
    assert await store.sessions.get("s_alice", NOW + 6) is None
    assert await store.sessions.get("s_bob", NOW + 6) is not None
    assert not await store.refresh_tokens.family_live("rtf_alice", NOW + 6)
    assert await store.refresh_tokens.family_live("rtf_bob", NOW + 6)
    if delete:
        assert await store.people.get("usr_alice") is None
    else:
        disabled = await store.people.get("usr_alice")
        assert (disabled["status"], disabled["updated_at"]) == ("disabled", NOW + 5)
    assert (
        await store.people.retire("usr_nobody", delete=delete, by="x", reason="r", now=NOW, lapse=lapse())
        is None
    )


# -- the per-owner bounds, decided in the database -------------------------------------------------
async def test_agents_per_owner_bound_holds_for_concurrent_enrolments(store):
    await store.people.create(person("olivia"))

    async def enrol(i: int) -> str:
        try:
            await store.agents.create(agent(f"bot{i}", owner="olivia@example.com"), ADMINS, max_per_owner=3)
        except LimitReached as exc:
            return exc.limit
        return "created"

    results = await asyncio.gather(*(enrol(i) for i in range(RACERS)))
    assert results.count("created") == 3 and results.count("agents_per_person") == RACERS - 3
    # another owner, and an owner bound to no person (counted by e-mail), have their own bounds
    await store.agents.create(agent("other", owner="zoe@example.com"), ADMINS, max_per_owner=3)
    for i in range(3):
        await store.agents.create(agent(f"nobody{i}", owner="nobody@example.com"), ADMINS, max_per_owner=3)
    with pytest.raises(LimitReached):
        await store.agents.create(agent("nobody3", owner="nobody@example.com"), ADMINS, max_per_owner=3)
    # 0 turns it off
    await store.agents.create(agent("nobody4", owner="nobody@example.com"), ADMINS, max_per_owner=0)


@pytest.mark.parametrize("per_owner", [0, 100], ids=["agent-alone", "with-the-owners"])
async def test_pending_per_agent_bound_holds_for_concurrent_requests_of_one_agent(store, per_owner):
    await store.people.create(person("olivia"))
    for name in ("a", "b"):
        await store.agents.create(agent(name, owner="olivia@example.com"), ADMINS)
    bound = PendingBound(per_owner, lapse(NOW), per_agent=3)
    # a lapsed pending grant and a decided one do not count
    await store.grants.create(
        grant("old", requester_id="agt_a", created_at=NOW - 49 * 3_600_000), ["grant.created"], bound=bound
    )
    await store.grants.create(
        grant("auto", requester_id="agt_a", status="approved"), ["grant.created"], bound=bound
    )

    async def request(i: int) -> str:
        try:
            await store.grants.create(grant(f"g{i}", requester_id="agt_a"), ["grant.created"], bound=bound)
        except LimitReached as exc:
            return exc.limit
        return "created"

    results = await asyncio.gather(*(request(i) for i in range(RACERS)))
    assert results.count("created") == 3 and results.count("pending_per_agent") == RACERS - 3
    # the owner's other agent has its own three places
    for i in range(3):
        await store.grants.create(grant(f"b{i}", requester_id="agt_b"), ["grant.created"], bound=bound)
    with pytest.raises(LimitReached) as refused:
        await store.grants.create(grant("b3", requester_id="agt_b"), ["grant.created"], bound=bound)
    assert refused.value.limit == "pending_per_agent" and refused.value.bound == 3


async def test_the_agents_bound_is_named_before_the_owners(store):
    await store.people.create(person("olivia"))
    await store.agents.create(agent("a", owner="olivia@example.com"), ADMINS)
    for i in range(2):
        await store.grants.create(grant(f"g{i}", requester_id="agt_a"), ["grant.created"])
    # both bounds reached: the agent's is named; only the owner's: the owner's
    for per_agent, named in ((2, "pending_per_agent"), (5, "pending_per_owner")):
        with pytest.raises(LimitReached) as refused:
            await store.grants.create(
                grant("g2", requester_id="agt_a"),
                ["grant.created"],
                bound=PendingBound(2, lapse(NOW), per_agent=per_agent),
            )
        assert refused.value.limit == named


async def test_pending_per_owner_bound_holds_across_the_owners_agents(store):
    await store.people.create(person("olivia"))
    for name in ("a", "b"):
        await store.agents.create(agent(name, owner="olivia@example.com"), ADMINS)
    await store.agents.create(agent("c", owner="zoe@example.com"), ADMINS)
    bound = PendingBound(4, lapse(NOW))
    # a lapsed pending grant does not count
    await store.grants.create(
        grant("old", requester_id="agt_a", created_at=NOW - 49 * 3_600_000), ["grant.created"], bound=bound
    )

    async def request(i: int) -> str:
        try:
            await store.grants.create(
                grant(f"g{i}", requester_id="agt_a" if i % 2 else "agt_b"), ["grant.created"], bound=bound
            )
        except LimitReached as exc:
            return exc.limit
        return "created"

    results = await asyncio.gather(*(request(i) for i in range(RACERS)))
    assert results.count("created") == 4 and results.count("pending_per_owner") == RACERS - 4
    # another owner's agent, a person's own request and an approved (delegated) grant are not held back
    await store.grants.create(grant("zoe", requester_id="agt_c"), ["grant.created"], bound=bound)
    await store.grants.create(grant("person", requester_id="usr_olivia"), ["grant.created"], bound=bound)
    await store.grants.create(
        grant("auto", requester_id="agt_a", status="approved"), ["grant.created"], bound=bound
    )
    # a decision frees a place
    pending, _ = await store.grants.list(
        lapse=lapse(NOW), page=first_page(), status="pending", requester_ids=["agt_a", "agt_b"]
    )
    await store.grants.update_if(
        pending[0]["id"],
        expect=["pending"],
        changes={"status": "denied"},
        event="grant.denied",
        lapse=lapse(NOW),
        now=NOW,
    )
    await store.grants.create(grant("freed", requester_id="agt_a"), ["grant.created"], bound=bound)
    with pytest.raises(LimitReached):
        await store.grants.create(grant("over", requester_id="agt_b"), ["grant.created"], bound=bound)
