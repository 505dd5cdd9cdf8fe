"""store.agents: unique e-mails across principals, key generations, retirement (D5, D11)."""

from __future__ import annotations

import pytest

from grantd.store import Conflict

from .factories import HOUR, NOW, agent, delegation, first_page, grant, lapse, person, walk

pytestmark = pytest.mark.anyio

ADMINS = frozenset({"root@example.com", "admin@example.com"})


async def test_create_and_get_by_id_or_email(store):
    created = await store.agents.create(agent("bot"), ADMINS)
    assert created == agent("bot")
    assert created["key_generation"] == 1
    assert await store.agents.get("agt_bot") == created
    assert await store.agents.get("bot@agents.example.com") == created
    assert await store.agents.get("Bot@Agents.Example.COM") == created
    assert await store.agents.get_by_id("agt_bot") == created
    assert await store.agents.get_by_id("bot@agents.example.com") is None
    assert await store.agents.get("nobody") is None


async def _setup_people(store):
    await store.agents.create(agent("bot", owner="olivia@example.com", approver="amir@example.com"), ADMINS)
    await store.delegations.create(delegation("d1", delegator="dora@example.com"))


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (agent("other", email="bot@agents.example.com"), "email"),
        (agent("other", key_id=agent("bot")["key_id"]), "publicKey"),
        (agent("other", email="root@example.com"), "email"),
        (agent("other", email="admin@example.com"), "email"),
        (agent("other", email="olivia@example.com"), "email"),  # a person: an agent's owner
        (agent("other", email="amir@example.com"), "email"),  # a person: an agent's approver
        (agent("other", email="dora@example.com"), "email"),  # a person: a delegator
        (agent("other", owner="bot@agents.example.com"), "owner"),
        (agent("other", approver="bot@agents.example.com"), "approver"),
        (agent("bot", email="fresh@agents.example.com", key_id="fresh"), "id"),
    ],
)
async def test_create_conflicts(store, record, field):
    await _setup_people(store)
    with pytest.raises(Conflict) as caught:
        await store.agents.create(record, ADMINS)
    assert caught.value.field == field
    rows, _ = await store.agents.list(first_page())
    assert [a["agent_id"] for a in rows] == ["agt_bot"]  # nothing of the failed create stays


async def test_list_newest_first_with_paging(store):
    names = [f"a{i}" for i in range(7)]
    for i, name in enumerate(names):
        await store.agents.create(agent(name, created_at=NOW + i // 3), ADMINS)  # ties on created_at
    pages = await walk(store.agents.list, 3, "agent_id")
    assert [len(p) for p in pages] == [3, 3, 1]
    listed = [a["agent_id"] for p in pages for a in p]
    assert listed == sorted(
        (f"agt_{n}" for n in names), key=lambda i: (NOW + int(i[5:]) // 3, i), reverse=True
    )
    rows, more = await store.agents.list(first_page(7))
    assert len(rows) == 7 and more is False


async def test_update_bumps_key_generation_only_on_a_new_key(store):
    await store.agents.create(agent("bot"), ADMINS)
    renamed = await store.agents.update("agt_bot", {"name": "Bot", "updated_at": NOW + 1})
    assert renamed["name"] == "Bot" and renamed["updated_at"] == NOW + 1 and renamed["key_generation"] == 1
    same = await store.agents.update("agt_bot", {"public_key": agent("bot")["public_key"]})
    assert same["key_generation"] == 1
    rekeyed = await store.agents.update("agt_bot", {"public_key": "ssh-ed25519 NEW", "key_id": "SHA256:new"})
    assert rekeyed["key_generation"] == 2 and rekeyed["public_key"] == "ssh-ed25519 NEW"
    again = await store.agents.update(
        "agt_bot", {"public_key": "ssh-ed25519 NEWER", "key_id": "SHA256:newer"}
    )
    assert again["key_generation"] == 3
    assert await store.agents.get("agt_bot") == again
    assert await store.agents.update("agt_nobody", {"name": "x"}) is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"owner": "other@agents.example.com"}, "owner"),
        ({"approver": "other@agents.example.com"}, "approver"),
        ({"public_key": "ssh-ed25519 KEYother", "key_id": agent("other")["key_id"]}, "publicKey"),
    ],
)
async def test_update_conflicts(store, changes, field):
    await store.agents.create(agent("bot"), ADMINS)
    await store.agents.create(agent("other"), ADMINS)
    with pytest.raises(Conflict) as caught:
        await store.agents.update("agt_bot", changes)
    assert caught.value.field == field
    assert await store.agents.get("agt_bot") == agent("bot")


async def _agent_with_history(store):
    bot = "bot@agents.example.com"
    await store.agents.create(agent("bot"), ADMINS)
    mine = {"requester": bot, "requester_id": "agt_bot"}
    await store.grants.create(grant("pending", **mine), ["grant.created"])
    await store.grants.create(
        grant("approved", status="approved", expires_at=NOW + HOUR, **mine), ["grant.created"]
    )
    await store.grants.create(grant("always", status="approved", **mine), ["grant.created"])
    await store.grants.create(
        grant("lapsed_approved", status="approved", expires_at=NOW, **mine), ["grant.created"]
    )
    await store.grants.create(grant("lapsed_pending", created_at=NOW - HOUR, **mine), ["grant.created"])
    await store.grants.create(grant("denied", status="denied", **mine), ["grant.created"])
    await store.grants.create(grant("someone_else", requester="x@example.com"), ["grant.created"])
    await store.delegations.create(delegation("as_delegate", delegate=bot))
    await store.delegations.create(delegation("unrelated", delegate="x@example.com"))
    await store.challenges.create("c1", "agt_bot", NOW + 60_000, NOW)
    return await store.grants.last_event_seq()


@pytest.mark.parametrize("delete", [False, True])
async def test_retire_revokes_ends_and_forgets(store, delete):
    seq = await _agent_with_history(store)
    result = await store.agents.retire(
        "agt_bot", delete=delete, by="admin@example.com", reason="compromised", now=NOW + 5, lapse=lapse(NOW)
    )
    assert result is not None
    before, revoked = result
    assert before == agent("bot")
    assert sorted(g["id"] for g in revoked) == ["always", "approved", "pending"]
    for g in revoked:
        assert (g["status"], g["revoked_by"], g["revoked_at"], g["decision_reason"], g["version"]) == (
            "revoked",
            "admin@example.com",
            NOW + 5,
            "compromised",
            2,
        )
        assert await store.grants.get(g["id"]) == g
    events = await store.grants.events_after(seq, 100)
    assert sorted((e["event"], e["grant_id"]) for e in events) == [
        ("grant.revoked", "always"),
        ("grant.revoked", "approved"),
        ("grant.revoked", "pending"),
    ]
    assert all(e["grant"]["status"] == "revoked" and e["created_at"] == NOW + 5 for e in events)
    # lapsed, decided and other requesters' grants are untouched
    for gid, status in [
        ("lapsed_approved", "approved"),
        ("lapsed_pending", "pending"),
        ("denied", "denied"),
        ("someone_else", "pending"),
    ]:
        assert (await store.grants.get(gid))["status"] == status
    ended = await store.delegations.get("as_delegate")
    assert (ended["status"], ended["revoked_by"], ended["revoked_at"]) == (
        "revoked",
        "admin@example.com",
        NOW + 5,
    )
    assert (await store.delegations.get("unrelated"))["status"] == "active"
    assert await store.challenges.take("c1", "agt_bot") is None
    if delete:
        assert await store.agents.get("agt_bot") is None
    else:
        disabled = await store.agents.get("agt_bot")
        # a new key generation: tokens issued before the disable never come back
        assert disabled["status"] == "disabled" and disabled["key_generation"] == before["key_generation"] + 1
        enabled = await store.agents.update("agt_bot", {"status": "active", "updated_at": NOW + 6})
        assert enabled["status"] == "active" and enabled["key_generation"] == before["key_generation"] + 1
    # a deleted agent's grants stay in history under its old id
    kept, _ = await store.grants.list(lapse=lapse(NOW), page=first_page(), requester_ids=["agt_bot"])
    assert len(kept) == 6


async def test_retire_twice_and_unknown(store):
    await store.agents.create(agent("bot"), ADMINS)
    assert (
        await store.agents.retire("agt_nobody", delete=False, by="a", reason="r", now=NOW, lapse=lapse())
        is None
    )
    assert (
        await store.agents.retire("agt_bot", delete=False, by="a", reason="r", now=NOW, lapse=lapse())
        is not None
    )
    assert (
        await store.agents.retire("agt_bot", delete=False, by="a", reason="r", now=NOW, lapse=lapse()) is None
    )
    deleted = await store.agents.retire("agt_bot", delete=True, by="a", reason="r", now=NOW, lapse=lapse())
    assert deleted is not None and deleted[0]["status"] == "disabled" and deleted[1] == []
    assert await store.agents.get("agt_bot") is None
    # the e-mail and the key are free again: re-enrolment under the same e-mail is a new agent
    await store.agents.create(agent("bot", agent_id="agt_bot2"), ADMINS)


async def test_decidable_by(store):
    """By the person's id (D11), never by the e-mail."""
    await store.people.create(person("amir"))
    await store.people.create(person("olivia"))
    await store.agents.create(agent("a", owner="olivia@example.com", approver="amir@example.com"), ADMINS)
    await store.agents.create(agent("b", owner="amir@example.com", created_at=NOW + 1), ADMINS)
    await store.agents.create(agent("c", owner="zoe@example.com"), ADMINS)
    assert sorted(await store.agents.decidable_by("usr_amir")) == ["agt_a", "agt_b"]
    assert await store.agents.decidable_by("usr_olivia") == ["agt_a"]
    assert await store.agents.decidable_by("amir@example.com") == []  # an e-mail is not an id
    assert await store.agents.decidable_by("usr_nobody") == []
