"""store.grants.view (a grant with its review and votes, read together) and add_deciding_vote (a
deciding vote and the decision in one transaction, D13/D14): issue 27's fewer statements per read
and per approve, with the same answers as the separate methods."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .factories import HOUR, NOW, agent, grant, lapse

pytestmark = pytest.mark.anyio


def _vote(email: str, decision: str = "approve", **fields: Any) -> Any:
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


def _decide(seen: int, **changes: Any) -> dict[str, Any]:
    return {
        "seen": seen,
        "expect": ["pending"],
        "changes": {"status": "approved", "decided_by": "a@example.com", "decided_at": NOW, **changes},
        "event": "grant.approved",
        "lapse": lapse(NOW),
        "now": NOW,
    }


async def test_view_is_the_grant_its_review_its_votes_and_its_agent(store):
    await store.agents.create(agent("bot", approver="appr@example.com"), frozenset())
    mine = {"requester": "bot@agents.example.com", "requester_id": "agt_bot"}
    review = {"policy_ids": ["prod"], "requirements": [{"id": "prod/sre", "approve": 2}]}
    await store.grants.create(grant("g1", **mine), [], review=review)
    await store.grants.create(grant("g2", status="approved"), [])  # a requester that is no agent
    bot = await store.agents.get_by_id("agt_bot")
    assert bot is not None
    assert await store.grants.view("g1") == (
        await store.grants.get("g1"),
        await store.grants.review_of("g1"),
        [],
        bot,
    )
    evidence = {"webauthn": {"credential_id": "c1", "sign_count": 3}}
    await store.grants.add_vote(_vote("b@example.com", reason="ok", grant_type="timed", duration=60))
    await store.grants.add_vote(_vote("a@example.com", "deny", management=True, evidence=evidence))
    found, pinned, votes, requester = await store.grants.view("g1")
    assert found == await store.grants.get("g1")
    assert pinned == {"grant_id": "g1", "review": review, "escalation_level": 0}
    assert votes == await store.grants.votes("g1")  # the same records, in recorded order
    assert [v["email"] for v in votes] == ["b@example.com", "a@example.com"]
    assert votes[1]["management"] is True and votes[1]["evidence"] == evidence
    assert "evidence" not in votes[0] and votes[0]["duration"] == 60
    assert requester == bot
    assert await store.grants.escalate_if("g1", 0, 2, NOW)
    assert (await store.grants.view("g1"))[1]["escalation_level"] == 2
    # the agent as it is now (D11): a change shows at once
    await store.agents.update("agt_bot", {"approver": "other@example.com", "updated_at": NOW + 1})
    assert (await store.grants.view("g1"))[3] == await store.agents.get_by_id("agt_bot")
    assert (await store.grants.view("g1"))[3]["approver"] == "other@example.com"
    assert await store.grants.view("g2") == (await store.grants.get("g2"), None, [], None)
    assert await store.grants.view("nope") is None


async def test_a_deciding_vote_and_its_decision_are_one_transaction(store):
    await store.grants.create(grant("g1"), [])
    start = await store.grants.last_event_seq()
    outcome, updated = await store.grants.add_deciding_vote(_vote("a@example.com"), **_decide(0))
    assert outcome == "recorded" and updated is not None
    assert updated == await store.grants.get("g1")
    assert (updated["status"], updated["decided_by"], updated["version"]) == ("approved", "a@example.com", 2)
    assert [v["email"] for v in await store.grants.votes("g1")] == ["a@example.com"]
    events = await store.grants.events_after(start, 10)
    assert [e["event"] for e in events] == ["grant.reviewed", "grant.approved"]
    assert (
        events[0]["grant"]["status"] == "pending" and events[0]["grant"]["vote"]["email"] == "a@example.com"
    )
    assert events[1]["grant"] == updated
    # decided: a later vote is refused and changes nothing
    assert await store.grants.add_deciding_vote(_vote("b@example.com"), **_decide(1)) == ("decided", None)
    assert await store.grants.add_deciding_vote(_vote("c@example.com", grant_id="nope"), **_decide(0)) == (
        "decided",
        None,
    )
    assert await store.grants.last_event_seq() == events[-1]["seq"]


async def test_a_deciding_vote_after_votes_it_did_not_count_decides_nothing(store):
    """Another vote came in after the caller read the votes: this one is recorded (with its event),
    the grant stays pending, and the caller tallies again."""
    await store.grants.create(grant("g1"), [])
    assert await store.grants.add_vote(_vote("b@example.com")) == "recorded"
    start = await store.grants.last_event_seq()
    assert await store.grants.add_deciding_vote(_vote("a@example.com"), **_decide(0)) == ("recorded", None)
    assert (await store.grants.get("g1"))["status"] == "pending"
    assert [e["event"] for e in await store.grants.events_after(start, 10)] == ["grant.reviewed"]
    assert [v["email"] for v in await store.grants.votes("g1")] == ["b@example.com", "a@example.com"]
    assert await store.grants.add_deciding_vote(_vote("a@example.com"), **_decide(2)) == ("duplicate", None)
    outcome, updated = await store.grants.add_deciding_vote(_vote("c@example.com"), **_decide(2))
    assert outcome == "recorded" and updated is not None and updated["status"] == "approved"


async def test_a_deciding_vote_on_a_lapsed_grant_is_recorded_without_a_decision(store):
    await store.grants.create(grant("g1", created_at=NOW - HOUR), [])  # pending past its TTL at NOW
    start = await store.grants.last_event_seq()
    assert await store.grants.add_deciding_vote(_vote("a@example.com"), **_decide(0)) == ("recorded", None)
    stored = await store.grants.get("g1")
    assert (stored["status"], stored["version"]) == ("pending", 1)
    assert [e["event"] for e in await store.grants.events_after(start, 10)] == ["grant.reviewed"]


async def test_concurrent_deciding_votes_have_exactly_one_winner(store):
    await store.grants.create(grant("g1"), [])
    results = await asyncio.gather(
        *(store.grants.add_deciding_vote(_vote(f"v{i}@example.com"), **_decide(0)) for i in range(10))
    )
    winners = [u for _, u in results if u is not None]
    assert len(winners) == 1 and winners[0]["version"] == 2
    recorded = [o for o, _ in results if o == "recorded"]
    assert len(await store.grants.votes("g1")) == len(recorded)
    events = [e["event"] for e in await store.grants.events_after(0, 100)]
    assert events.count("grant.approved") == 1 and events.count("grant.reviewed") == len(recorded)
