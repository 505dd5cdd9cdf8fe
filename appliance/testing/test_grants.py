"""store.grants and their events (D6): lapse as data, single winners, events with their change."""

from __future__ import annotations

import asyncio
import json

import pytest

from grantd.store.rows import grant_event

from .factories import HOUR, NOW, first_page, grant, lapse, walk

pytestmark = pytest.mark.anyio


async def test_create_records_its_events_in_order(store):
    assert await store.grants.last_event_seq() == 0
    created = await store.grants.create(grant("g1", version=7), ["grant.created", "grant.approved"])
    assert created == grant("g1")  # version 1, whatever was handed in
    assert await store.grants.get("g1") == created
    assert await store.grants.get("nope") is None
    events = await store.grants.events_after(0, 10)
    assert [e["event"] for e in events] == ["grant.created", "grant.approved"]
    assert events[0]["seq"] < events[1]["seq"] == await store.grants.last_event_seq()
    assert all(
        e["grant_id"] == "g1"
        and e["requester"] == created["requester"]
        and e["created_at"] == NOW
        and e["grant"] == created
        for e in events
    )


async def test_events_after_orders_and_limits(store):
    for i in range(5):
        await store.grants.create(grant(f"g{i}"), ["grant.created"])
    every = await store.grants.events_after(0, 100)
    assert [e["grant_id"] for e in every] == [f"g{i}" for i in range(5)]
    seqs = [e["seq"] for e in every]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert [e["grant_id"] for e in await store.grants.events_after(seqs[1], 2)] == ["g2", "g3"]
    assert await store.grants.events_after(seqs[-1], 10) == []


async def test_event_rows_are_the_events_with_their_snapshots_as_stored_text(store):
    """``event_rows_after`` is ``events_after`` with each snapshot left undecoded (the decision
    log's sequencer decodes each row just before it makes its leaves)."""
    for i in range(4):
        await store.grants.create(grant(f"r{i}"), ["grant.created"])
    every = await store.grants.events_after(0, 100)
    rows = await store.grants.event_rows_after(0, 100)
    assert all(isinstance(row[5], str) for row in rows)
    assert [grant_event(row) for row in rows] == every
    after = every[1]["seq"]
    assert [grant_event(row) for row in await store.grants.event_rows_after(after, 2)] == every[2:4]
    assert await store.grants.event_rows_after(every[-1]["seq"], 10) == []


async def test_find_reusable_honours_lapse(store):
    mine = {"requester_id": "agt_bot", "reuse_key": "rk"}
    await store.grants.create(grant("old", status="approved", created_at=NOW - 2, **mine), [])
    await store.grants.create(
        grant("new", status="approved", created_at=NOW - 1, expires_at=NOW + HOUR, **mine), []
    )
    await store.grants.create(grant("pending", created_at=NOW, **mine), [])
    await store.grants.create(grant("other", status="approved", requester_id="agt_other", reuse_key="rk"), [])
    assert (await store.grants.find_reusable("agt_bot", "rk", lapse(NOW)))["id"] == "new"
    assert (await store.grants.find_reusable("agt_bot", "rk", lapse(NOW + HOUR)))[
        "id"
    ] == "old"  # "new" lapsed
    assert await store.grants.find_reusable("agt_bot", "other-key", lapse(NOW)) is None
    assert await store.grants.find_reusable("agt_nobody", "rk", lapse(NOW)) is None


async def _statuses(store):
    rows = [
        grant("P1"),
        grant("P2", created_at=NOW - HOUR),  # pending; P2 is pending_ttl old: lapsed
        grant("A1", status="approved"),
        grant("A2", status="approved", expires_at=NOW + 1),
        grant("A3", status="approved", expires_at=NOW),  # lapsed exactly at its expiry
        grant("E1", status="expired"),
        grant("D1", status="denied"),
        grant("C1", status="consumed"),
        grant("R1", status="revoked", expires_at=NOW - HOUR),  # no lapse rule for revoked
    ]
    for row in rows:
        await store.grants.create(row, ["grant.created"])


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("pending", {"P1"}),
        ("approved", {"A1", "A2"}),
        ("expired", {"P2", "A3", "E1"}),
        ("denied", {"D1"}),
        ("consumed", {"C1"}),
        ("revoked", {"R1"}),
        ("unknown", set()),
        (None, {"P1", "P2", "A1", "A2", "A3", "E1", "D1", "C1", "R1"}),
    ],
)
async def test_list_filters_on_the_status_as_read(store, status, expected):
    await _statuses(store)
    rows, more = await store.grants.list(lapse=lapse(NOW), page=first_page(), status=status)
    assert {g["id"] for g in rows} == expected and more is False
    for g in rows:  # rows carry the stored status; readers apply the lapse
        assert g == grant(g["id"], **{k: v for k, v in g.items() if k != "id"})


async def test_list_under_a_later_lapse(store):
    await _statuses(store)
    later = lapse(NOW + 1)
    assert {
        g["id"] for g in (await store.grants.list(lapse=later, page=first_page(), status="approved"))[0]
    } == {"A1"}
    assert {
        g["id"] for g in (await store.grants.list(lapse=later, page=first_page(), status="expired"))[0]
    } == {"P2", "A2", "A3", "E1"}


async def test_list_by_requester_and_scope(store):
    await store.grants.create(grant("b1", requester="bot@e.com", requester_id="agt_bot"), [])
    await store.grants.create(grant("b2", requester="bot@e.com", requester_id="agt_bot_old"), [])
    await store.grants.create(grant("p1", requester="pat@e.com"), [])
    await store.grants.create(grant("q1", requester="quinn@e.com"), [])

    async def ids(**kw):
        rows, _ = await store.grants.list(lapse=lapse(), page=first_page(), **kw)
        return {g["id"] for g in rows}

    assert await ids(requester="bot@e.com") == {"b1", "b2"}
    assert await ids(requester_ids=["agt_bot"]) == {"b1"}
    assert await ids(requester_ids=["agt_bot", "pat@e.com"]) == {"b1", "p1"}
    assert await ids(requester_ids=[]) == set()
    assert await ids(requester_ids=None) == {"b1", "b2", "p1", "q1"}
    assert await ids(requester="bot@e.com", requester_ids=["pat@e.com"]) == set()
    assert await ids(status="pending", requester_ids=["quinn@e.com"]) == {"q1"}


async def test_list_scope_widened_by_grant_ids(store):
    """A pinned policy's approver sees those grants in lists besides their own scope (D13)."""
    await store.grants.create(grant("b1", requester="bot@e.com", requester_id="agt_bot"), [])
    await store.grants.create(grant("b2", requester="bot@e.com", requester_id="agt_bot"), [])
    await store.grants.create(grant("p1", requester="pat@e.com"), [])
    await store.grants.create(grant("q1", requester="quinn@e.com", status="denied"), [])

    async def ids(**kw):
        rows, _ = await store.grants.list(lapse=lapse(), page=first_page(), **kw)
        return {g["id"] for g in rows}

    assert await ids(requester_ids=["pat@e.com"], also_ids=["b2"]) == {"p1", "b2"}
    assert await ids(requester_ids=[], also_ids=["b1", "b1"]) == {"b1"}  # no scope but the named grants
    assert await ids(requester_ids=[], also_ids=[]) == set()
    assert await ids(requester_ids=[], also_ids=["nope"]) == set()
    assert await ids(requester_ids=None, also_ids=["b1"]) == {
        "b1",
        "b2",
        "p1",
        "q1",
    }  # None: everyone already
    assert await ids(status="pending", requester_ids=[], also_ids=["b1", "q1"]) == {
        "b1"
    }  # filters still apply
    assert await ids(requester="pat@e.com", requester_ids=[], also_ids=["b1"]) == set()
    pages = await walk(
        lambda p: store.grants.list(
            lapse=lapse(), page=p, requester_ids=["pat@e.com"], also_ids=["b1", "b2"]
        ),
        2,
    )
    assert sorted(g["id"] for p in pages for g in p) == ["b1", "b2", "p1"]


async def test_list_pages_newest_first(store):
    for i in range(8):
        await store.grants.create(grant(f"g{i}", created_at=NOW - 10 + i // 3), [])  # ties on created_at
    pages = await walk(lambda p: store.grants.list(lapse=lapse(), page=p), 3)
    assert [len(p) for p in pages] == [3, 3, 2]
    listed = [(g["created_at"], g["id"]) for p in pages for g in p]
    assert listed == sorted(listed, reverse=True) and len(set(listed)) == 8
    expired_pages = await walk(
        lambda p: store.grants.list(lapse=lapse(NOW + HOUR), page=p, status="expired"), 5
    )
    assert [len(p) for p in expired_pages] == [5, 3]


async def test_update_if(store):
    await store.grants.create(grant("g1"), ["grant.created"])
    seq = await store.grants.last_event_seq()
    kwargs = {
        "changes": {
            "status": "approved",
            "decided_by": "amir@example.com",
            "decided_at": NOW,
            "expires_at": NOW + HOUR,
            "version": 99,
            "id": "evil",
        },
        "event": "grant.approved",
        "lapse": lapse(NOW),
        "now": NOW,
    }
    assert await store.grants.update_if("g1", expect=["approved"], **kwargs) is None
    assert await store.grants.update_if("nope", expect=["pending"], **kwargs) is None
    assert await store.grants.last_event_seq() == seq
    updated = await store.grants.update_if("g1", expect=["pending", "approved"], **kwargs)
    assert updated == grant(
        "g1",
        status="approved",
        decided_by="amir@example.com",
        decided_at=NOW,
        expires_at=NOW + HOUR,
        version=2,
    )
    assert await store.grants.get("g1") == updated
    [event] = await store.grants.events_after(seq, 10)
    assert (event["event"], event["grant"], event["created_at"]) == ("grant.approved", updated, NOW)
    consumed = await store.grants.update_if(
        "g1",
        expect=["approved"],
        changes={"status": "consumed", "used_at": NOW},
        event="grant.consumed",
        lapse=lapse(NOW),
        now=NOW,
    )
    assert consumed["version"] == 3 and consumed["status"] == "consumed"


async def test_update_if_refuses_lapsed_grants(store):
    await store.grants.create(grant("old_pending", created_at=NOW - HOUR), [])
    await store.grants.create(grant("over", status="approved", expires_at=NOW), [])
    for gid, expect in [("old_pending", ["pending"]), ("over", ["approved"])]:
        assert (
            await store.grants.update_if(
                gid,
                expect=expect,
                changes={"status": "revoked"},
                event="grant.revoked",
                lapse=lapse(NOW),
                now=NOW,
            )
            is None
        )
        assert (await store.grants.get(gid))["version"] == 1
    assert await store.grants.last_event_seq() == 0
    # a second earlier, neither had lapsed
    assert (
        await store.grants.update_if(
            "over",
            expect=["approved"],
            changes={"status": "revoked"},
            event="grant.revoked",
            lapse=lapse(NOW - 1),
            now=NOW - 1,
        )
        is not None
    )


async def test_update_if_has_exactly_one_winner(store):
    await store.grants.create(grant("g1", status="approved", grant_type="once", expires_at=NOW + HOUR), [])
    results = await asyncio.gather(
        *(
            store.grants.update_if(
                "g1",
                expect=["approved"],
                changes={"status": "consumed", "used_at": NOW + i},
                event="grant.consumed",
                lapse=lapse(NOW),
                now=NOW + i,
            )
            for i in range(20)
        )
    )
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0]["version"] == 2
    assert await store.grants.get("g1") == winners[0]
    assert [e["event"] for e in await store.grants.events_after(0, 100)] == ["grant.consumed"]


async def test_expire_stores_lapsed_grants_and_drops_old_events(store):
    await store.grants.create(
        grant("old_event", status="denied", created_at=NOW - 2 * HOUR), ["grant.created"]
    )
    await _statuses(store)
    seq = await store.grants.last_event_seq()
    expired = await store.grants.expire(lapse(NOW), NOW, events_before=NOW - HOUR)
    assert sorted(g["id"] for g in expired) == ["A3", "P2"]
    for g in expired:
        assert g["status"] == "expired" and g["version"] == 2
        assert await store.grants.get(g["id"]) == g
    events = await store.grants.events_after(seq, 100)
    assert sorted((e["event"], e["grant_id"]) for e in events) == [
        ("grant.expired", "A3"),
        ("grant.expired", "P2"),
    ]
    assert all(e["created_at"] == NOW and e["grant"]["status"] == "expired" for e in events)
    remaining = await store.grants.events_after(0, 100)
    assert "old_event" not in {e["grant_id"] for e in remaining}  # older than events_before: dropped
    assert len(remaining) == 9 + 2
    # the stored status now reads the same under the lapse
    rows, _ = await store.grants.list(lapse=lapse(NOW), page=first_page(), status="expired")
    assert {g["id"] for g in rows} == {"P2", "A3", "E1"}


async def test_expire_is_a_no_op_when_nothing_lapsed(store):
    await _statuses(store)
    await store.grants.expire(lapse(NOW), NOW, events_before=0)
    seq = await store.grants.last_event_seq()
    assert await store.grants.expire(lapse(NOW), NOW, events_before=0) == []
    assert await store.grants.last_event_seq() == seq
    assert (await store.grants.get("A2"))["version"] == 1


# -- approval policies (D13): the pinned review, votes, escalation levels ---------------------------


def _vote(email, decision="approve", **fields):
    return {
        "grant_id": "g1",
        "email": email,
        "voter_id": "usr_" + email.split("@")[0],
        "decision": decision,
        "via": "api",
        "at": NOW,
        "reason": None,
        "grant_type": None,
        "duration": None,
        "management": False,
        **fields,
    }


async def test_a_pinned_review_is_kept_with_its_grant(store):
    review = {
        "policy_ids": ["prod-root"],
        "policy_hash": "sha256:ab",
        "requirements": [{"id": "prod-root/sre"}],
    }
    await store.grants.create(grant("g1"), ["grant.created"], review=review)
    await store.grants.create(grant("g2"), ["grant.created"])
    assert await store.grants.review_of("g1") == {"grant_id": "g1", "review": review, "escalation_level": 0}
    assert await store.grants.review_of("g2") is None  # the default policy
    assert await store.grants.review_of("nope") is None
    assert await store.grants.votes("g2") == []


async def test_reviews_and_votes_of_a_page_at_once(store):
    review = {
        "policy_ids": ["prod-root"],
        "policy_hash": "sha256:ab",
        "requirements": [{"id": "prod-root/sre"}],
    }
    await store.grants.create(grant("g1"), [], review=review)
    await store.grants.create(grant("g2"), [], review={"policy_ids": ["other"]})
    await store.grants.create(grant("g3"), [])
    for email in ("b@e.com", "a@e.com"):
        assert await store.grants.add_vote(_vote(email)) == "recorded"
    assert await store.grants.add_vote(_vote("c@e.com", grant_id="g3", decision="deny")) == "recorded"
    reviews, votes = await store.grants.reviews_and_votes(["g1", "g2", "g3", "nope", "g1"])
    assert reviews == {
        "g1": {"grant_id": "g1", "review": review, "escalation_level": 0},
        "g2": {"grant_id": "g2", "review": {"policy_ids": ["other"]}, "escalation_level": 0},
    }
    assert {k: [v["email"] for v in vs] for k, vs in votes.items()} == {
        "g1": ["b@e.com", "a@e.com"],
        "g3": ["c@e.com"],
    }
    assert votes["g1"] == await store.grants.votes("g1")  # the same records as one at a time, in order
    assert await store.grants.reviews_and_votes([]) == ({}, {})
    assert await store.grants.reviews_and_votes(["g2"]) == ({"g2": reviews["g2"]}, {})


async def test_votes_one_per_person_in_order_and_only_while_pending(store):
    await store.grants.create(grant("g1"), [], review={"policy_ids": ["p"]})
    first = _vote("a@example.com", reason="fine", grant_type="once", duration=60)
    assert await store.grants.add_vote(first) == "recorded"
    assert await store.grants.add_vote(_vote("b@example.com", "deny", management=True)) == "recorded"
    assert await store.grants.add_vote(_vote("a@example.com", "deny")) == "duplicate"
    votes = await store.grants.votes("g1")
    assert votes[0] == first and [v["email"] for v in votes] == ["a@example.com", "b@example.com"]
    assert votes[1]["management"] is True and votes[1]["decision"] == "deny"
    assert (
        await store.grants.update_if(
            "g1",
            expect=["pending"],
            changes={"status": "denied"},
            event="grant.denied",
            lapse=lapse(NOW),
            now=NOW,
        )
        is not None
    )
    assert await store.grants.add_vote(_vote("c@example.com")) == "decided"
    assert await store.grants.add_vote(_vote("d@example.com", grant_id="nope")) == "decided"
    assert len(await store.grants.votes("g1")) == 2


async def test_concurrent_votes_by_one_person_record_one(store):
    await store.grants.create(grant("g1"), [], review={"policy_ids": ["p"]})
    outcomes = await asyncio.gather(*(store.grants.add_vote(_vote("a@example.com")) for _ in range(20)))
    assert sorted(outcomes) == ["duplicate"] * 19 + ["recorded"]


async def test_escalate_if_has_exactly_one_winner_per_level(store):
    await store.grants.create(grant("g1"), [], review={"policy_ids": ["p"]})
    await store.grants.create(grant("g0", created_at=NOW - 1), [], review={"policy_ids": ["p"]})
    await store.grants.create(grant("g3", status="approved"), [], review={"policy_ids": ["p"]})
    await store.grants.create(grant("g4"), [])
    assert _grouped(await store.grants.pending_review_groups(10)) == [
        ({"policy_ids": ["p"]}, 0, ["g0", "g1"])
    ]
    assert _grouped(await store.grants.pending_review_groups(1)) == [({"policy_ids": ["p"]}, 0, ["g0"])]
    assert await store.grants.escalate_if("g2", 0, 1, NOW) is False
    assert await store.grants.escalate_if("g3", 0, 1, NOW) is False  # decided: nothing to escalate
    wins = await asyncio.gather(*(store.grants.escalate_if("g1", 0, 1, NOW) for _ in range(10)))
    assert wins.count(True) == 1
    assert await store.grants.escalate_if("g1", 0, 2, NOW) is False  # someone else's level already
    assert await store.grants.escalate_if("g1", 1, 3, NOW + 1) is True
    assert (await store.grants.review_of("g1"))["escalation_level"] == 3
    events = await store.grants.events_after(0, 100)
    assert [(e["event"], e["grant"]["escalation_level"], e["created_at"]) for e in events] == [
        ("grant.escalated", 1, NOW),
        ("grant.escalated", 2, NOW + 1),
        ("grant.escalated", 3, NOW + 1),
    ]
    assert all(e["grant_id"] == "g1" and e["grant"]["status"] == "pending" for e in events)


async def test_due_reviews_are_the_ones_due_earliest_first_whatever_their_grant(store):
    """The sweep's reviews (issue 27): only those whose due time came, through their own index, so
    a sweep with nothing due reads nothing however many grants wait."""
    await store.grants.create(grant("late"), [], review={"policy_ids": ["p"]}, review_due=NOW + HOUR)
    await store.grants.create(grant("b"), [], review={"policy_ids": ["p"]}, review_due=NOW - 5)
    await store.grants.create(grant("a"), [], review={"policy_ids": ["p"]}, review_due=NOW - 5)
    await store.grants.create(grant("first"), [], review={"policy_ids": ["q"]}, review_due=NOW - 60)
    await store.grants.create(grant("never"), [], review={"policy_ids": ["p"]})
    await store.grants.create(
        grant("decided", status="approved"), [], review={"policy_ids": ["p"]}, review_due=NOW
    )
    await store.grants.create(grant("default"), [])

    def ids(records):
        return [r["grant_id"] for r in records]

    due = await store.grants.due_reviews(NOW, 10)
    assert ids(due) == ["first", "a", "b", "decided"]  # a decided grant too: the sweep clears it
    assert due[0] == {"grant_id": "first", "review": {"policy_ids": ["q"]}, "escalation_level": 0}
    assert ids(await store.grants.due_reviews(NOW, 2)) == ["first", "a"]
    assert ids(await store.grants.due_reviews(NOW - 61, 10)) == []
    await store.grants.set_review_due("first", NOW + 2 * HOUR)  # moved on
    await store.grants.set_review_due("decided", None)  # never again
    await store.grants.set_review_due("never", NOW - 1)
    await store.grants.set_review_due("nope", NOW)  # no such review: nothing to set
    assert ids(await store.grants.due_reviews(NOW, 10)) == ["a", "b", "never"]
    assert ids(await store.grants.due_reviews(NOW + 2 * HOUR, 10)) == ["a", "b", "never", "late", "first"]
    assert await store.grants.escalate_if("a", 0, 1, NOW) is True  # escalating leaves the due time as it is
    assert [(r["grant_id"], r["escalation_level"]) for r in await store.grants.due_reviews(NOW, 1)] == [
        ("a", 1)
    ]


def _grouped(groups):
    """The groups in a fixed order, each one's ids sorted (the contract gives neither order)."""
    return sorted(
        ((g["review"], g["escalation_level"], sorted(g["grant_ids"])) for g in groups),
        key=lambda t: (json.dumps(t[0], sort_keys=True), t[1]),
    )


async def test_pending_review_groups_are_the_oldest_pending_grants_by_review_and_level(store):
    p, q = {"policy_ids": ["p"], "requirements": [{"id": "p/sre"}]}, {"policy_ids": ["q"]}
    for i, review in enumerate([p, q, p, p, q]):
        await store.grants.create(grant(f"g{i}", created_at=NOW + i), [], review=review)
    await store.grants.create(grant("old-default", created_at=NOW - 10), [])  # the default policy
    await store.grants.create(grant("done", status="denied", created_at=NOW - 5), [], review=p)
    assert await store.grants.escalate_if("g2", 0, 1, NOW) is True
    assert _grouped(await store.grants.pending_review_groups(10)) == [
        (p, 0, ["g0", "g3"]),
        (p, 1, ["g2"]),
        (q, 0, ["g1", "g4"]),
    ]
    # the bound is on grants, oldest first, before they are grouped
    assert _grouped(await store.grants.pending_review_groups(3)) == [
        (p, 0, ["g0"]),
        (p, 1, ["g2"]),
        (q, 0, ["g1"]),
    ]
    assert await store.grants.pending_review_groups(0) == []


async def test_every_recorded_vote_is_a_grant_event_with_the_vote(store):
    """D14: every vote, final or not, is a ``grant.reviewed`` event in the vote's own transaction (a
    leaf of the decision log; live streams see it); a refused vote records nothing."""
    await store.grants.create(grant("g1"), [], review={"policy_ids": ["p"]})
    start = await store.grants.last_event_seq()
    assert await store.grants.add_vote(_vote("a@example.com", reason="ok")) == "recorded"
    assert await store.grants.add_vote(_vote("a@example.com")) == "duplicate"
    assert await store.grants.add_vote(_vote("b@example.com", grant_id="nope")) == "decided"
    events = await store.grants.events_after(start, 10)
    assert [(e["event"], e["grant_id"], e["created_at"]) for e in events] == [("grant.reviewed", "g1", NOW)]
    vote = events[0]["grant"]["vote"]
    assert (vote["email"], vote["decision"], vote["via"], vote["reason"]) == (
        "a@example.com",
        "approve",
        "api",
        "ok",
    )
    assert events[0]["grant"]["status"] == "pending"


async def test_grant_created_carries_the_pinned_review(store):
    review = {"policy_ids": ["prod-root"], "policy_hash": "sha256:ab", "requirements": []}
    start = await store.grants.last_event_seq()
    await store.grants.create(grant("g1"), ["grant.created"], review=review)
    await store.grants.create(grant("g2"), ["grant.created"])
    events = await store.grants.events_after(start, 10)
    assert events[0]["grant"]["pinned_review"] == review
    assert "pinned_review" not in events[1]["grant"]


async def test_a_use_is_an_event_only_while_the_grant_is_usable(store):
    """``grant.used`` (a timed/always consume) is a conditional write with no change but the event."""
    await store.grants.create(grant("g1", status="approved", grant_type="timed"), [])
    start = await store.grants.last_event_seq()
    used = await store.grants.update_if(
        "g1", expect=("approved",), changes={}, event="grant.used", lapse=lapse(NOW), now=NOW
    )
    assert used is not None and used["status"] == "approved"
    await store.grants.update_if(
        "g1",
        expect=("approved",),
        changes={"status": "revoked"},
        event="grant.revoked",
        lapse=lapse(NOW),
        now=NOW,
    )
    again = await store.grants.update_if(
        "g1", expect=("approved",), changes={}, event="grant.used", lapse=lapse(NOW), now=NOW
    )
    assert again is None
    assert [e["event"] for e in await store.grants.events_after(start, 10)] == ["grant.used", "grant.revoked"]


async def test_writes_after_a_refused_one_still_work(store):
    """A write refused inside a transaction (here: an agent whose e-mail is taken, a Conflict) must
    leave the next writes working. On PostgreSQL, psycopg's rollback of a failed transaction
    deallocates every statement prepared on that connection, also those a backend prepared itself
    for its one-round-trip writes; a backend that still believed them prepared answered the next
    grant write with an error (a 500 at the HTTP level). The same below for a conditional update
    that finds nothing to change (a rolled-back write of its own)."""
    from grantd.store import Conflict

    from .factories import agent

    for i in range(8):  # enough uses of each statement for a driver to prepare them
        await store.agents.create(agent(f"a{i}"), frozenset())
        await store.grants.create(grant(f"g{i}"), ["grant.created"])
    for round_ in range(3):
        with pytest.raises(Conflict):
            await store.agents.create(agent(f"dup{round_}", email="a0@agents.example.com"), frozenset())
        await store.grants.create(grant(f"after{round_}"), ["grant.created"])
        assert (await store.grants.get(f"after{round_}"))["status"] == "pending"


async def test_writes_after_a_conditional_update_that_changed_nothing_still_work(store):
    """See above: a conditional update whose expectation fails (a grant consumed twice, say)."""
    from .factories import agent

    for i in range(8):
        await store.agents.create(agent(f"a{i}"), frozenset())
        await store.grants.create(grant(f"g{i}"), ["grant.created"])
        await store.grants.get(f"g{i}")
    changes = {"status": "revoked", "revoked_by": "amir@example.com", "revoked_at": NOW}
    for round_ in range(3):
        kwargs = {"changes": changes, "event": "grant.revoked", "lapse": lapse(NOW), "now": NOW}
        assert await store.grants.update_if("g0", expect=["approved"], **kwargs) is None
        await store.grants.create(grant(f"after{round_}"), ["grant.created"])
        await store.agents.create(agent(f"b{round_}"), frozenset())
        assert await store.grants.update_if(f"after{round_}", expect=["pending"], **kwargs) is not None
