"""store.notify: the outbox of notices (D15). Rows are written in the grant's own transaction;
``claim`` leases due rows with one winner per row, decided in the database; ``finish`` needs the
lease; a lease that ran out makes the row claimable again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .factories import NOW, grant, lapse, notice

pytestmark = pytest.mark.anyio

LEASE = 30_000


async def test_rows_written_with_the_grant(store):
    g = grant("g1", status="pending")
    await store.grants.create(g, ["grant.created"], notices=[notice("n1"), notice("n2", channel="push")])
    rows = await store.notify.for_grant("g1")
    assert [(r["id"], r["channel"], r["status"], r["attempts"]) for r in rows] == [
        ("n1", "mail", "pending", 0),
        ("n2", "push", "pending", 0),
    ]
    assert rows[0]["payload"] == {}


async def test_no_rows_when_the_grant_is_not_written(store):
    from grantd.store import Conflict

    await store.grants.create(grant("g1", status="pending"), ["grant.created"])
    with pytest.raises(Conflict):
        await store.grants.create(grant("g1", status="pending"), ["grant.created"], notices=[notice("n1")])
    assert await store.notify.for_grant("g1") == []


async def test_rows_written_with_a_decision_only_when_it_wins(store):
    await store.grants.create(grant("g1", status="pending"), ["grant.created"])
    won = await store.grants.update_if(
        "g1",
        expect=["pending"],
        changes={"status": "denied"},
        event="grant.denied",
        lapse=lapse(),
        now=NOW + 1,
        notices=[notice("r1", kind="resolved", created_at=NOW + 1)],
    )
    assert won is not None
    lost = await store.grants.update_if(
        "g1",
        expect=["pending"],
        changes={"status": "approved"},
        event="grant.approved",
        lapse=lapse(),
        now=NOW + 2,
        notices=[notice("r2", kind="resolved", created_at=NOW + 2)],
    )
    assert lost is None
    assert [r["id"] for r in await store.notify.for_grant("g1")] == ["r1"]


async def test_rows_written_with_an_escalation_only_when_it_wins(store):
    await store.grants.create(
        grant("g1", status="pending"), ["grant.created"], review={"policies": ["p"], "escalate": []}
    )
    assert await store.grants.escalate_if(
        "g1", 0, 1, NOW + 1, notices=[notice("e1", kind="escalated", level=1)]
    )
    assert not await store.grants.escalate_if("g1", 0, 1, NOW + 2, notices=[notice("e2", kind="escalated")])
    rows = await store.notify.for_grant("g1")
    assert [(r["id"], r["level"]) for r in rows] == [("e1", 1)]


async def test_claim_takes_due_rows_once(store):
    await store.notify.add([notice("n1"), notice("n2", created_at=NOW + 10_000)])
    first = await store.notify.claim("w1", NOW, LEASE, 10)
    assert [r["id"] for r in first] == ["n1"]
    assert first[0]["claimed_by"] == "w1" and first[0]["claimed_until"] == NOW + LEASE
    assert await store.notify.claim("w2", NOW, LEASE, 10) == []  # leased; n2 is not due yet
    later = await store.notify.claim("w2", NOW + 10_000, LEASE, 10)
    assert [r["id"] for r in later] == ["n2"]


async def test_concurrent_claims_get_disjoint_rows(store):
    await store.notify.add([notice(f"n{i:02}") for i in range(40)])
    claims = await asyncio.gather(*(store.notify.claim(f"w{i}", NOW, LEASE, 7) for i in range(10)))
    ids = [r["id"] for rows in claims for r in rows]
    assert sorted(ids) == [f"n{i:02}" for i in range(40)]  # every row once, none twice


async def test_finish_needs_the_lease(store):
    await store.notify.add([notice("n1")])
    (row,) = await store.notify.claim("w1", NOW, LEASE, 10)
    assert not await store.notify.finish(
        "n1", "w2", status="sent", attempts=1, next_at=NOW, error=None, at=NOW + 5
    )
    assert await store.notify.finish(
        "n1", "w1", status="failed", attempts=1, next_at=NOW, error="boom", at=NOW + 5
    )
    (stored,) = await store.notify.for_grant("g1")
    assert (
        stored["status"],
        stored["attempts"],
        stored["error"],
        stored["claimed_by"],
        stored["sent_at"],
    ) == (
        "failed",
        1,
        "boom",
        None,
        NOW + 5,
    )
    assert not await store.notify.finish(
        "n1", "w1", status="sent", attempts=2, next_at=NOW, error=None, at=NOW + 6
    )  # the lease went with the first finish


async def test_a_retry_is_claimable_at_its_next_at(store):
    await store.notify.add([notice("n1")])
    await store.notify.claim("w1", NOW, LEASE, 10)
    await store.notify.finish(
        "n1", "w1", status="pending", attempts=1, next_at=NOW + 2_000, error="x", at=NOW
    )
    assert await store.notify.claim("w2", NOW + 1_999, LEASE, 10) == []
    (again,) = await store.notify.claim("w2", NOW + 2_000, LEASE, 10)
    assert again["attempts"] == 1 and again["claimed_by"] == "w2"


async def test_a_lapsed_lease_is_claimable_again(store):
    await store.notify.add([notice("n1")])
    await store.notify.claim("w1", NOW, LEASE, 10)
    assert await store.notify.claim("w2", NOW + LEASE - 1, LEASE, 10) == []
    (row,) = await store.notify.claim("w2", NOW + LEASE, LEASE, 10)
    assert row["claimed_by"] == "w2"
    assert not await store.notify.finish(
        "n1", "w1", status="sent", attempts=1, next_at=NOW, error=None, at=NOW
    )  # the first worker lost it


async def test_recent_counts_pending_kinds_not_held(store):
    await store.notify.add(
        [
            notice("a", created_at=NOW),
            notice("b", created_at=NOW + 1, kind="escalated"),
            notice("c", created_at=NOW + 2, kind="resolved"),
            notice("d", created_at=NOW + 3, status="held"),
            notice("e", created_at=NOW + 4, channel="push"),
            notice("f", created_at=NOW + 5, recipient="bob@example.com"),
            notice("g", created_at=NOW - 1),
        ]
    )
    assert await store.notify.recent("alice@example.com", "mail", NOW) == 2


async def test_release_held_hands_each_row_once(store):
    """D15: when a (recipient, channel)'s window ends (its oldest held row is due) everything held
    for it goes into one digest, newer held rows too; a pair with nothing due stays held; each row
    goes to exactly one of concurrent callers."""
    await store.notify.add([notice(f"h{i}", status="held", created_at=NOW + i) for i in range(6)])
    await store.notify.add(
        [
            notice(f"b{i}", status="held", recipient="bob@example.com", created_at=NOW + 5 + i)
            for i in range(2)
        ]
    )
    first, second = await asyncio.gather(
        store.notify.release_held(NOW + 4, 10), store.notify.release_held(NOW + 4, 10)
    )
    assert sorted(r["id"] for r in first + second) == ["h0", "h1", "h2", "h3", "h4", "h5"]
    statuses = {r["id"]: r["status"] for r in await store.notify.for_grant("g1")}
    assert statuses == {**{f"h{i}": "dropped" for i in range(6)}, "b0": "held", "b1": "held"}
    assert [r["id"] for r in await store.notify.release_held(NOW + 6, 10)] == ["b0", "b1"]


async def test_prefs_are_replaced(store):
    assert await store.notify.prefs(["p1"]) == {}
    await store.notify.set_prefs("p1", {"phone": {"topic": "alice-x"}}, NOW)
    await store.notify.set_prefs("p2", {"mail": False}, NOW)
    await store.notify.set_prefs("p1", {"phone": False}, NOW + 1)
    assert await store.notify.prefs(["p1", "p2", "p3"]) == {"p1": {"phone": False}, "p2": {"mail": False}}


def _link(token_hash: str, *, expires_at: int = NOW + 60_000, action: str = "review") -> Any:
    return {
        "token_hash": token_hash,
        "grant_id": "g1",
        "person_id": "p1",
        "email": "alice@example.com",
        "action": action,
        "expires_at": expires_at,
        "used_at": None,
        "created_at": NOW,
    }


async def test_a_link_is_read_without_change_and_used_once(store):
    await store.notify.add_link(_link("h1", action="deny"), NOW)
    assert (await store.notify.link("h1"))["email"] == "alice@example.com"
    assert (await store.notify.link("h1"))["used_at"] is None  # reading changes nothing
    assert await store.notify.link("nope") is None
    used = await asyncio.gather(*(store.notify.use_link("h1", NOW + 1) for _ in range(10)))
    assert [u["token_hash"] for u in used if u] == ["h1"]
    assert (await store.notify.link("h1"))["used_at"] == NOW + 1


async def test_an_expired_link_is_read_but_not_used_then_dropped(store):
    await store.notify.add_link(_link("h1", expires_at=NOW + 10), NOW)
    assert await store.notify.use_link("h1", NOW + 10) is None
    assert (await store.notify.link("h1"))["expires_at"] == NOW + 10  # still there: 410, not 404
    await store.notify.add_link(_link("h2"), NOW + 10 + 86_400_001)
    assert await store.notify.link("h1") is None


async def test_subscriptions_per_person(store):
    def sub(sid: str, person: str, endpoint: str, key: str = "k1") -> Any:
        return {
            "id": sid,
            "person_id": person,
            "endpoint": endpoint,
            "p256dh": key,
            "auth": "a",
            "expiration_time": None,
            "created_at": NOW,
        }

    await store.notify.add_subscription(sub("s1", "p1", "https://push.example/1"))
    again = await store.notify.add_subscription(sub("s9", "p1", "https://push.example/1", "k2"))
    assert (again["id"], again["p256dh"]) == ("s1", "k2")  # the same endpoint: keys replaced
    await store.notify.add_subscription(sub("s2", "p2", "https://push.example/1"))
    assert [s["id"] for s in await store.notify.subscriptions("p1")] == ["s1"]
    assert not await store.notify.delete_subscription("p2", "s1")  # not theirs
    assert await store.notify.delete_subscription("p1", "s1")
    assert await store.notify.subscriptions("p1") == []
    assert [s["id"] for s in await store.notify.subscriptions("p2")] == ["s2"]


async def test_a_votes_evidence_is_kept(store):
    await store.grants.create(grant("g1", status="pending"), ["grant.created"])
    evidence = {"webauthn": {"credential_id": "c1", "signature": "s", "grant_digest": '{"grant_id":"g1"}'}}
    vote = {
        "grant_id": "g1",
        "email": "alice@example.com",
        "voter_id": "p1",
        "decision": "approve",
        "via": "web",
        "at": NOW,
        "reason": None,
        "grant_type": None,
        "duration": None,
        "management": False,
        "evidence": evidence,
    }
    assert await store.grants.add_vote(vote) == "recorded"
    plain = {**vote, "email": "bob@example.com", "voter_id": "p2"}
    del plain["evidence"]  # a vote without evidence (every other way of voting)
    assert await store.grants.add_vote(plain) == "recorded"
    first, second = await store.grants.votes("g1")
    assert first["evidence"] == evidence and second.get("evidence") is None


async def test_claim_leaves_the_busy_channels_rows_alone(store):
    """A worker with enough of a channel's deliveries under way claims none of its rows: the other
    channels' notices are not held up behind a channel that hangs."""
    await store.notify.add(
        [notice(f"s{i}", channel="stuck", created_at=NOW + i) for i in range(3)]
        + [notice(f"m{i}", channel="mail", created_at=NOW + 10 + i) for i in range(2)]
    )
    claimed = await store.notify.claim("w1", NOW + 100, 60_000, 10, ["stuck"])
    assert [r["id"] for r in claimed] == ["m0", "m1"]
    rest = await store.notify.claim("w1", NOW + 100, 60_000, 10)
    assert [r["id"] for r in rest] == ["s0", "s1", "s2"]
