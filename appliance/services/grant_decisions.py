"""What a vote writes (D13, D14): the vote's record, and the changes and event of the decision a
tally reached, for ``grantd.services.grants.vote`` (whether the decision goes with the vote in one
transaction or after it); and the tally of a grant's recorded votes that its answers, its
AuthZ-JWT and its reviewers show (``review_state``)."""

from __future__ import annotations

from types import EllipsisType
from typing import Any

from grantd.core.fields import field_error
from grantd.core.review import Ballot, People, Review, Tally, tally
from grantd.services import review as reviews
from grantd.services.context import Services
from grantd.services.grant_requests import approval_expiry, reuse_key
from grantd.store.records import Agent, Grant, GrantReview


def via_of(body: dict[str, Any], *, session: bool) -> str:
    """How a vote arrived (its record's ``via``): a browser session is ``web``; a bearer caller may
    say ``tui``; else ``api``."""
    if session:
        return "web"
    return "tui" if body.get("via") == "tui" else "api"


def vote_record(grant_id: str, ballot: Ballot, evidence: dict[str, Any] | None = None) -> Any:
    return {
        "evidence": evidence,
        "grant_id": grant_id,
        "email": ballot.voter.email.lower(),
        "voter_id": ballot.voter.person_id,
        "decision": ballot.decision,
        "via": ballot.via,
        "at": ballot.at,
        "reason": ballot.reason,
        "grant_type": ballot.grant_type,
        "duration": ballot.duration,
        "management": ballot.voter.management,
    }


def decide(
    services: Services,
    grant: Grant,
    review: Review,
    counted: Tally,
    ballot: Ballot,
    votes: list[Any],
    by: str,
) -> tuple[dict[str, Any], str]:
    """The changes and the event of the decision ``counted`` reached by ``votes`` (the last of
    them ``ballot``'s), at ``ballot.at``; ``by``: the voter's e-mail as given (the default policy's
    ``decided_by``)."""
    request = dict(grant["request"])
    now = ballot.at
    if counted.status == "approved":
        if review.is_default:  # the one vote decides, its override as given (today's behaviour)
            new_type = ballot.grant_type or request["grant_type"]
            new_duration = (ballot.duration or request.get("duration")) if new_type == "timed" else None
        else:
            new_type, new_duration = counted.grant_type, counted.duration
        if new_type == "timed":
            if new_duration is None:
                raise field_error("duration", "duration is required for timed grants")
            request["duration"] = new_duration
        request["grant_type"] = new_type
        changes: dict[str, Any] = {
            "status": "approved",
            "decided_by": counted.decided_by if not review.is_default else by,
            "decided_at": now,
            "expires_at": approval_expiry(services, new_type, now, new_duration),
            "grant_type": new_type,
            "request": request,
            "reuse_key": reuse_key(request),
        }
        return changes, "grant.approved"
    decider = counted.decided_by or ballot.voter.email.lower()
    deciding = next((b for b in reviews.ballots(votes)[::-1] if b.voter.email.lower() == decider), None)
    return {
        "status": "denied",
        "decided_by": decider if not review.is_default else by,
        "decided_at": now,
        "decision_reason": deciding.reason if deciding else ballot.reason,
    }, "grant.denied"


def escalation_of(record: GrantReview | None) -> int:
    """The escalation level a grant's review record announced (0: none, or no record)."""
    return record["escalation_level"] if record else 0


async def requesting_agent(services: Services, grant: Grant) -> Agent | None:
    """The agent that asked for the grant (None for a person's request or a deleted agent)."""
    return await services.store.agents.get_by_id(grant["requester_id"])


async def review_state(
    services: Services,
    grant: Grant,
    status: str,
    now_s: int,
    known: tuple[GrantReview | None, list[Any], Agent | None] | None = None,
) -> tuple[Review, int, Tally | None, list[Ballot]]:
    """The pinned review, its announced escalation level, the tally of the recorded votes (None
    when there are none) and the votes, as of now. ``known``: the grant's review record, votes and
    requesting agent when the caller read them with the grant (``grants.view``); else read here."""
    if known is not None:
        record, votes, agent = known
        return await count_votes(services, grant, record, votes, status, now_s, agent)
    record = await services.store.grants.review_of(grant["id"])
    votes = await services.store.grants.votes(grant["id"])
    return await count_votes(services, grant, record, votes, status, now_s)


async def count_votes(
    services: Services,
    grant: Grant,
    record: GrantReview | None,
    votes: list[Any],
    status: str,
    now_s: int,
    agent: Agent | None | EllipsisType = ...,
    review: Review | None = None,
    people: People | None = None,
) -> tuple[Review, int, Tally | None, list[Ballot]]:
    """``review_state`` of a review record and votes already read (``agent``: the requesting
    agent when the caller has read it, None for none; ``review``: the record's pinned review,
    when the caller has it; ``people``: ``reviews.people`` of the votes' e-mails, when the caller
    has read them)."""
    if review is None:
        review = reviews.pinned(record)
    level = escalation_of(record)
    ballots = reviews.ballots(votes)
    if not ballots:
        return review, level, None, ballots
    if agent is ...:
        agent = await requesting_agent(services, grant)
    if people is None:
        people = await reviews.people(services, review, [b.voter.email for b in ballots])
    counted = tally(review, reviews.grant_facts(grant, agent, status), people, ballots, now_s)
    return review, level, counted, ballots
