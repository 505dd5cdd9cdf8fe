"""Vote counting (D13): the one function that decides every vote, its refusals with their exact
reasons, quorum, the most restrictive override, eligibility re-checked at finalisation, and the
escalation and timeout schedule."""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import replace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from grantd.core.review import (
    DEFAULT_REVIEW,
    Ballot,
    GrantFacts,
    People,
    RequestFacts,
    Review,
    Voter,
    cast_vote,
    eligible_people,
    escalation_level,
    escalations_due,
    evaluate,
    next_escalation_at,
    parse_review_config,
    tally,
    timeout_at,
    timeout_outcome,
)

OWNER, APPROVER, ADMIN, MGMT = (
    "owner@example.com",
    "approver@example.com",
    "admin@example.com",
    "mgmt@example.com",
)
SRE = ("alice@example.com", "bob@example.com", "carol@example.com", OWNER)
SECURITY = ("sec@example.com", "alice@example.com")

CONFIG = f"""
[[groups]]
id = "sre"
members = {list(SRE)!r}
[[groups]]
id = "security"
members = {list(SECURITY)!r}
[[groups]]
id = "managers"
members = ["boss@example.com"]

[[policies]]
id = "prod-root"
match.target_host = ["prod-*"]
forbid = ["owner", "approver"]
max_duration = "4h"
pending_ttl = "2h"
on_timeout = "deny"
[[policies.require]]
id = "sre"
groups = ["sre"]
approve = 2
[[policies.require]]
id = "security"
groups = ["security"]
approve = 1
[[policies.escalate]]
after = "15m"
notify = ["@owner", "sre"]
[[policies.escalate]]
after = "45m"
notify = ["managers"]
add_approvers = ["managers"]

[[policies]]
id = "staging"
match.target_host = ["staging-*"]
allow_self_approval = true
allow_management_token = true
allow_delegation = true
require_reason = false
[[policies.require]]
id = "any"
groups = ["sre", "@admins"]
approve = 1
deny = 2
"""

CFG = parse_review_config(tomllib.loads(CONFIG)).config
PEOPLE = People(CFG.members, frozenset({ADMIN, MGMT}))
CREATED = 1_000_000


def review_for(host: str) -> Review:
    return evaluate(CFG, RequestFacts(host, "escapes", "agent+ci@example.com", "agt_1", "always")).review


PROD, STAGING = review_for("prod-1"), review_for("staging-1")


def facts(**changes) -> GrantFacts:
    base = {
        "requester_id": "agt_1",
        "requester_email": "agent+ci@example.com",
        "owner": OWNER,
        "approver": APPROVER,
        "created_at": CREATED,
        "grant_type": "always",
        "duration": None,
    }
    return GrantFacts(**{**base, **changes})


def ballot(
    email: str,
    decision: str = "approve",
    *,
    via: str = "api",
    reason: str | None = None,
    management: bool = False,
    agent: bool = False,
    grant_type: str | None = None,
    duration: int | None = None,
    at: int = CREATED + 60,
) -> Ballot:
    return Ballot(
        Voter("prs_" + email.split("@")[0], email, management=management, agent=agent),
        decision,
        via,
        at,
        reason,
        grant_type,
        duration,
    )


def run(
    review: Review, ballots, grant: GrantFacts | None = None, people: People = PEOPLE, now: int = CREATED + 60
):
    """Cast ``ballots`` one after the other; -> the results and the votes recorded."""
    grant, votes, results = grant or facts(), [], []
    for b in ballots:
        result = cast_vote(review, grant, people, votes, b, now)
        results.append(result)
        if result.accepted:
            votes.append(b)
    return results, votes


def test_two_of_sre_and_one_of_security_not_the_owner():
    results, votes = run(
        PROD,
        [
            ballot("bob@example.com"),
            ballot(OWNER),
            ballot("bob@example.com"),
            ballot("carol@example.com"),
            ballot("sec@example.com"),
            ballot("alice@example.com"),
        ],
    )
    first, owner, again, second, security, late = results
    assert first.accepted and first.tally.status == "pending"
    assert [(r.id, r.missing) for r in first.tally.requirements] == [
        ("prod-root/sre", 1),
        ("prod-root/security", 1),
    ]
    assert (owner.accepted, owner.refusal.status, owner.refusal.reason) == (False, 403, "owner excluded")
    assert (again.refusal.status, again.refusal.reason) == (409, "already reviewed")
    assert second.tally.status == "pending" and second.tally.quorum == "2/3"
    assert security.tally.status == "approved" and security.tally.decided_by == "sec@example.com"
    assert security.tally.quorum == "3/3"
    assert [c.requirement for c in security.tally.counted] == [
        "prod-root/sre",
        "prod-root/sre",
        "prod-root/security",
    ]
    assert (late.refusal.status, late.refusal.reason) == (400, "grant already decided")


def test_one_person_never_fills_two_blocks_and_order_never_wastes_a_vote():
    """Alice is in sre and security. Her vote counts once; if she votes first, the matching still
    lets two others complete sre while she covers security."""
    results, _ = run(PROD, [ballot("alice@example.com")])
    assert results[0].tally.quorum == "1/3"
    results, _ = run(
        PROD, [ballot("alice@example.com"), ballot("bob@example.com"), ballot("carol@example.com")]
    )
    final = results[-1].tally
    assert final.status == "approved"
    assert {r.id: r.approvals for r in final.requirements} == {
        "prod-root/sre": ("bob@example.com", "carol@example.com"),
        "prod-root/security": ("alice@example.com",),
    }
    results, _ = run(PROD, [ballot("alice@example.com"), ballot("bob@example.com")])
    assert results[-1].tally.status == "pending"  # alice + bob: sre 2 would need alice, security too


@pytest.mark.parametrize(
    ("voter", "kwargs", "status", "reason"),
    [
        (OWNER, {}, 403, "owner excluded"),
        (APPROVER, {}, 403, "approver excluded"),
        ("stranger@example.com", {}, 403, "not an eligible approver"),
        (ADMIN, {}, 403, "not an eligible approver"),  # @admins is not in prod-root's blocks
        (MGMT, {"management": True}, 403, "management token not allowed"),
        ("agent+ci@example.com", {"agent": True}, 403, "agents never vote"),
        ("bob@example.com", {"via": "delegation"}, 403, "delegation not allowed"),
    ],
)
def test_refusals_have_d13s_reasons_for_approve_and_deny_alike(voter, kwargs, status, reason):
    for decision in ("approve", "deny"):
        results, votes = run(PROD, [ballot(voter, decision, **kwargs)])
        assert (results[0].accepted, results[0].refusal.status, results[0].refusal.reason) == (
            False,
            status,
            reason,
        )
        assert votes == [] and results[0].tally.status == "pending"


def test_self_approval_is_refused_unless_allowed_and_then_needs_a_reason():
    person_request = facts(
        requester_id="prs_alice", requester_email="alice@example.com", owner=None, approver=None
    )
    results, _ = run(PROD, [ballot("alice@example.com")], person_request)
    assert results[0].refusal.reason == "self approval not allowed"
    results, _ = run(PROD, [ballot("alice@example.com", "deny")], person_request)
    assert results[0].refusal.reason == "self approval not allowed"  # exclusions bind denials too
    results, _ = run(STAGING, [ballot("alice@example.com")], person_request)
    assert (results[0].refusal.status, results[0].refusal.reason) == (403, "reason required")
    results, _ = run(
        STAGING, [ballot("alice@example.com", reason="fixing the outage, INC-7")], person_request
    )
    assert results[0].accepted and results[0].tally.status == "approved"
    assert results[0].tally.counted[0].self_approved  # flagged for the JWT and the log
    assert not run(STAGING, [ballot("bob@example.com")], person_request)[0][0].tally.counted[0].self_approved
    # who may still vote leaves the requester out where self approval is refused
    assert "alice@example.com" not in eligible_people(PROD, person_request, PEOPLE, CREATED)[0]
    assert "alice@example.com" in eligible_people(STAGING, person_request, PEOPLE, CREATED)[0]


def test_require_reason():
    review = replace(STAGING, require_reason=True)
    assert run(review, [ballot("bob@example.com", reason="  ")])[0][0].refusal.reason == "reason required"
    assert run(review, [ballot("bob@example.com", reason="ok")])[0][0].accepted


def test_management_token_and_delegation_where_allowed_count_as_one_vote():
    results, votes = run(
        STAGING, [ballot(MGMT, "deny", management=True), ballot(MGMT, "deny", management=True)]
    )
    assert results[0].accepted and results[0].tally.status == "pending"  # deny = 2 in that block
    assert results[1].refusal.reason == "already reviewed"  # the token cannot fill two slots
    results, _ = run(STAGING, [ballot("bob@example.com", via="delegation"), ballot("bob@example.com")])
    assert results[0].tally.status == "approved"
    results, _ = run(
        STAGING, [ballot("bob@example.com", "deny", via="delegation"), ballot("bob@example.com", "deny")]
    )
    assert results[1].refusal.reason == "already reviewed"  # a delegation is the delegator's one vote


def test_one_denial_meeting_a_blocks_deny_count_denies():
    results, _ = run(PROD, [ballot("bob@example.com"), ballot("sec@example.com", "deny")])
    assert results[-1].tally.status == "denied" and results[-1].tally.decided_by == "sec@example.com"
    results, _ = run(STAGING, [ballot("bob@example.com", "deny"), ballot(ADMIN, "deny")])
    assert [r.tally.status for r in results] == ["pending", "denied"]


def test_overrides_under_quorum_the_most_restrictive_wins():
    grant = facts(grant_type="always")
    results, _ = run(
        PROD,
        [
            ballot("bob@example.com", grant_type="timed", duration=3600),
            ballot("carol@example.com", grant_type="once"),
            ballot("sec@example.com", duration=600),
        ],
        grant,
    )
    final = results[-1].tally
    assert (final.status, final.grant_type, final.duration) == ("approved", "once", 600)
    # max_duration caps an always grant to timed for 4 h, and a longer duration to 4 h
    results, _ = run(
        PROD, [ballot("bob@example.com"), ballot("carol@example.com"), ballot("sec@example.com")], grant
    )
    assert (results[-1].tally.grant_type, results[-1].tally.duration) == ("timed", 4 * 3600)
    results, _ = run(
        PROD,
        [ballot("bob@example.com"), ballot("carol@example.com"), ballot("sec@example.com")],
        facts(grant_type="timed", duration=86400),
    )
    assert (results[-1].tally.grant_type, results[-1].tally.duration) == ("timed", 4 * 3600)
    # an override never widens: a vote asking for always on a timed request changes nothing
    results, _ = run(
        STAGING,
        [ballot("bob@example.com", grant_type="always", duration=99999)],
        facts(grant_type="timed", duration=60),
    )
    assert (results[-1].tally.grant_type, results[-1].tally.duration) == ("timed", 60)


def test_eligibility_is_rechecked_at_finalisation():
    """Bob voted, then left the sre group; carol became the agent's owner after voting."""
    _, votes = run(PROD, [ballot("bob@example.com"), ballot("carol@example.com")])
    assert len(votes) == 2
    people_now = People({**CFG.members, "sre": frozenset(SRE) - {"bob@example.com"}}, PEOPLE.admins)
    result = cast_vote(
        PROD, facts(owner="carol@example.com"), people_now, votes, ballot("sec@example.com"), CREATED + 120
    )
    assert result.accepted and result.tally.status == "pending"
    assert [(b.voter.email, why) for b, why in result.tally.dropped] == [
        ("bob@example.com", "not an eligible approver"),
        ("carol@example.com", "owner excluded"),
    ]
    assert result.tally.requirements[0].approvals == ()
    # the finalisation tally, re-run on the recorded votes, gives the same answer
    again = tally(
        PROD, facts(owner="carol@example.com"), people_now, [*votes, ballot("sec@example.com")], CREATED + 120
    )
    assert again == result.tally
    # and a dropped voter still cannot vote a second time
    retry = cast_vote(
        PROD, facts(owner="carol@example.com"), people_now, votes, ballot("bob@example.com"), CREATED + 120
    )
    assert retry.refusal.reason == "already reviewed"


def test_escalation_schedule_and_add_approvers():
    assert [escalation_level(PROD, CREATED, CREATED + s) for s in (0, 899, 900, 2699, 2700, 99999)] == [
        0,
        0,
        1,
        1,
        2,
        2,
    ]
    assert next_escalation_at(PROD, CREATED, CREATED) == CREATED + 900
    assert next_escalation_at(PROD, CREATED, CREATED + 900) == CREATED + 2700
    assert next_escalation_at(PROD, CREATED, CREATED + 2700) is None
    assert [e.level for e in escalations_due(PROD, CREATED, CREATED + 3000, 0)] == [1, 2]
    assert [e.level for e in escalations_due(PROD, CREATED, CREATED + 3000, 1)] == [2]
    assert escalations_due(PROD, CREATED, CREATED + 3000, 2) == ()
    assert escalations_due(PROD, CREATED, CREATED + 100, 0) == ()
    assert PROD.escalations[1].notify == ("managers",)
    # the boss may vote from level 2 on, not before
    early = cast_vote(PROD, facts(), PEOPLE, [], ballot("boss@example.com"), CREATED + 2699)
    late = cast_vote(PROD, facts(), PEOPLE, [], ballot("boss@example.com"), CREATED + 2700)
    assert early.refusal.reason == "not an eligible approver" and late.accepted
    assert timeout_at(PROD, CREATED) == CREATED + 7200 and timeout_outcome(PROD) == (
        "denied",
        "no quorum before timeout",
    )
    assert timeout_at(DEFAULT_REVIEW, CREATED) is None and timeout_outcome(DEFAULT_REVIEW) == (
        "expired",
        None,
    )


def test_eligible_people_says_who_may_still_vote():
    grant = facts()
    assert eligible_people(PROD, grant, PEOPLE, CREATED) == (
        ("alice@example.com", "bob@example.com", "carol@example.com"),  # not the owner (forbid)
        ("alice@example.com", "sec@example.com"),
    )
    _, votes = run(PROD, [ballot("bob@example.com")])
    assert eligible_people(PROD, grant, PEOPLE, CREATED + 3000, votes)[0] == (
        "alice@example.com",
        "boss@example.com",
        "carol@example.com",
    )  # level 2 adds managers; bob voted
    assert eligible_people(DEFAULT_REVIEW, grant, PEOPLE, CREATED) == ((ADMIN, APPROVER, MGMT, OWNER),)


def test_the_default_policy_is_todays_behaviour():
    """One vote by the owner, the approver, an administrator or the management token decides."""
    for voter, kwargs in (
        (OWNER, {}),
        (APPROVER, {}),
        (ADMIN, {}),
        (MGMT, {"management": True}),
        (OWNER, {"via": "delegation"}),
    ):
        for decision, status in (("approve", "approved"), ("deny", "denied")):
            results, _ = run(DEFAULT_REVIEW, [ballot(voter, decision, **kwargs)])
            assert results[0].accepted and results[0].tally.status == status, (voter, decision)
            assert results[0].tally.decided_by == voter
    for voter, kwargs, reason in (
        ("bob@example.com", {}, "not an eligible approver"),
        ("agent+ci@example.com", {"agent": True}, "agents never vote"),
    ):
        assert run(DEFAULT_REVIEW, [ballot(voter, **kwargs)])[0][0].refusal.reason == reason
    # today an administrator may decide what they asked for themselves
    own = facts(requester_id="prs_admin", requester_email=ADMIN, owner=None, approver=None)
    assert run(DEFAULT_REVIEW, [ballot(ADMIN)], own)[0][0].tally.status == "approved"
    # the grant type and duration as requested, or as the one approver overrode them
    assert run(DEFAULT_REVIEW, [ballot(OWNER)])[0][0].tally.grant_type == "always"
    assert run(DEFAULT_REVIEW, [ballot(OWNER, grant_type="timed", duration=60)])[0][0].tally.duration == 60


# -- properties -----------------------------------------------------------------------------------

VOTERS = st.sampled_from(
    [
        "alice@example.com",
        "bob@example.com",
        "carol@example.com",
        "sec@example.com",
        OWNER,
        APPROVER,
        ADMIN,
        "stranger@example.com",
    ]
)
BALLOTS = st.lists(
    st.tuples(
        VOTERS,
        st.sampled_from(["approve", "approve", "deny"]),
        st.sampled_from([None, "once", "timed", "always"]),
        st.sampled_from([None, 60, 3600, 99999]),
    ),
    max_size=10,
)


def _ballots(drawn):
    return [
        ballot(v, d, grant_type=gt if d == "approve" else None, duration=du if d == "approve" else None)
        for v, d, gt, du in drawn
    ]


@given(BALLOTS, st.sampled_from(["prod", "staging", "default"]))
def test_quorum_counting(drawn, which):
    review = {"prod": PROD, "staging": STAGING, "default": DEFAULT_REVIEW}[which]
    results, votes = run(review, _ballots(drawn))
    final = tally(review, facts(), PEOPLE, votes, CREATED + 60)
    # one vote per person, and nothing is accepted after a decision
    assert len({b.voter.email for b in votes}) == len(votes)
    decided_at = next((i for i, r in enumerate(results) if r.accepted and r.tally.status != "pending"), None)
    if decided_at is not None:
        assert all(
            not r.accepted and r.refusal.reason == "grant already decided" for r in results[decided_at + 1 :]
        )
    # approved iff every block has its approvals from distinct eligible people, each counted once
    approvers = [c.ballot.voter.email for c in final.counted if c.ballot.decision == "approve"]
    counted = [e for r in final.requirements for e in r.approvals]
    assert sorted(counted) == sorted(approvers)
    if final.status == "approved":
        assert all(len(r.approvals) >= r.approve for r in final.requirements)
        assert len(set(approvers)) >= sum(r.approve for r in final.requirements)
        assert not any(len(r.denials) >= r.deny for r in final.requirements)
    if final.status == "pending":
        assert not any(len(r.denials) >= r.deny for r in final.requirements)
        assert any(len(r.approvals) < r.approve for r in final.requirements)
    # excluded people never count
    for c in final.counted:
        if review is PROD:
            assert c.ballot.voter.email not in (OWNER, APPROVER)


@given(st.lists(VOTERS, unique=True, max_size=5))
def test_the_approval_is_the_same_whatever_order_people_vote_in(approvals):
    """Every order of the same approvals gives the same outcome (a greedy count would not: alice,
    in sre and security, voting first must not use up an sre seat that bob and carol can fill)."""
    outcomes = set()
    for order in itertools.permutations(approvals):
        results, votes = run(PROD, [ballot(v) for v in order])
        outcomes.add(tally(PROD, facts(), PEOPLE, votes, CREATED + 60).status)
    assert len(outcomes) <= 1


QUORUM_OF_THREE = replace(STAGING, requirements=(replace(STAGING.requirements[0], approve=3, deny=3),))


@given(BALLOTS)
def test_overrides_are_the_most_restrictive(drawn):
    grant = facts(grant_type="always", duration=None)
    results, votes = run(QUORUM_OF_THREE, _ballots(drawn), grant)
    final = tally(QUORUM_OF_THREE, grant, PEOPLE, votes, CREATED + 60)
    approvals = [c.ballot for c in final.counted if c.ballot.decision == "approve"]
    rank = {"once": 0, "timed": 1, "always": 2}
    expected_type = min(
        [grant.grant_type] + [b.grant_type for b in approvals if b.grant_type], key=rank.__getitem__
    )
    durations = [b.duration for b in approvals if b.duration is not None]
    assert final.grant_type == expected_type
    assert final.duration == (min(durations) if durations else None)
    for b in approvals:  # never wider than any single approver allowed
        if b.grant_type:
            assert rank[final.grant_type] <= rank[b.grant_type]
        if b.duration is not None:
            assert final.duration <= b.duration


def test_a_callers_bad_value_is_a_programming_error_not_a_silent_vote():
    """The routes validate decision, via and grant_type (400 naming the field) before calling;
    here a bad value raises instead of counting as something else."""
    for bad in (
        ballot("bob@example.com", "abstain"),
        ballot("bob@example.com", via="email"),
        ballot("bob@example.com", grant_type="forever"),
    ):
        with pytest.raises(ValueError):
            cast_vote(STAGING, facts(), PEOPLE, [], bad, CREATED)


def test_the_denial_that_decided_names_the_decider():
    """Carol (sre) denies the sre block with its default deny = 1 after sec approved: carol decided."""
    results, _ = run(PROD, [ballot("sec@example.com"), ballot("carol@example.com", "deny")])
    assert results[-1].tally.status == "denied" and results[-1].tally.decided_by == "carol@example.com"
    # with deny = 2, the second denier of the block decides, not a later one of another block
    review = replace(
        PROD, requirements=(replace(PROD.requirements[0], deny=2), replace(PROD.requirements[1], deny=5))
    )
    votes = [
        ballot("bob@example.com", "deny"),
        ballot("carol@example.com", "deny"),
        ballot("sec@example.com", "deny"),
    ]
    final = tally(review, facts(), PEOPLE, votes, CREATED + 60)
    assert final.status == "denied" and final.decided_by == "carol@example.com"


ESCALATED_BALLOTS = st.lists(
    st.tuples(
        st.sampled_from(["boss@example.com", "alice@example.com", "sec@example.com", OWNER, ADMIN]),
        st.sampled_from(["approve", "approve", "deny"]),
        st.sampled_from([None, "once", "timed", "always"]),
        st.sampled_from([None, 60, 3600, 99999]),
    ),
    max_size=6,
)


@given(
    st.one_of(BALLOTS, ESCALATED_BALLOTS),
    st.sampled_from(["prod", "staging", "default"]),
    st.sampled_from([60, 20 * 60, 50 * 60]),
)
@example(
    [("boss@example.com", "approve", None, None), ("sec@example.com", "deny", None, None)], "prod", 50 * 60
)
@example([("alice@example.com", "approve", "once", 60), (OWNER, "approve", None, None)], "prod", 60)
def test_cast_vote_judges_each_ballot_once_and_tallies_exactly_as_tally_does(drawn, which, after):
    """cast_vote judges the recorded votes and the ballot once and counts those judgements twice
    (before and after the ballot): the tallies it returns are ``tally``'s of the same votes, and a
    refusal is ``check_voter``'s (at every escalation level)."""
    from grantd.core.review.votes import check_voter

    review = {"prod": PROD, "staging": STAGING, "default": DEFAULT_REVIEW}[which]
    grant, now, votes = facts(), CREATED + after, []
    level = escalation_level(review, grant.created_at, now)
    for b in _ballots(drawn):
        result = cast_vote(review, grant, PEOPLE, votes, b, now)
        before = tally(review, grant, PEOPLE, votes, now)
        if result.accepted:
            votes.append(b)
            assert result.tally == tally(review, grant, PEOPLE, votes, now)
            assert check_voter(review, grant, PEOPLE, b, level) is None
        else:
            assert result.tally == before
            judged = check_voter(review, grant, PEOPLE, b, level)
            if before.status == "pending" and not any(v.voter.email == b.voter.email for v in votes):
                assert result.refusal == judged
