"""Grants: request, decide, hand out AuthZ-JWTs, consume, verify (specification + D3, D4, D6).

The rules of grants live here; routes (appliance/web/api/grants.py) only parse and answer, who may
do what is asked of grantd.core.policy, and when a grant lapses of grantd.core.lifecycle. Every
state change is one conditional write in storage (``grants.update_if``), so of any number of
concurrent approvers, deniers or consumers in any process exactly one wins; the others get the
answer that matches what actually happened. Every change tells the event hub (``events.changed``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from types import EllipsisType
from typing import Any

from grantd.core import json_codec, policy
from grantd.core.errors import Problem, forbidden, not_found
from grantd.core.fields import (
    field_error,
    seconds_field,
    string_field,
)
from grantd.core.lifecycle import Lapse
from grantd.core.principals import Kind, Principal
from grantd.core.review import (
    AUTO_APPROVE,
    AUTO_DENY,
    Ballot,
    People,
    Review,
    Tally,
    Voter,
    cast_vote,
    evaluate,
    tally,
)
from grantd.core.review.votes import ALREADY_DECIDED, ALREADY_REVIEWED
from grantd.services import notify
from grantd.services import review as reviews
from grantd.services.authn import Credentials
from grantd.services.context import Services
from grantd.services.delegations import covering_delegation
from grantd.services.grant_decisions import (
    count_votes,
    decide,
    escalation_of,
    requesting_agent,
    review_state,
    vote_record,
)
from grantd.services.grant_requests import (
    MAX_BATCH,
    MAX_REASON,
    approval_expiry,
    grant_type_field,
    parse_request,
    reuse_key,
)
from grantd.store import LimitReached
from grantd.store.records import Agent, Grant, GrantReview, GrantView, Vote

STATUSES = ("pending", "approved", "denied", "revoked", "consumed", "expired")
STATUS_ALIASES = {"used": "consumed"}  # the peer CLI's name for a consumed grant (D6)


# What a consume/verify of a grant in each state answers (D2).
UNUSABLE = {
    "consumed": "already_consumed",
    "revoked": "revoked",
    "denied": "denied",
    "expired": "expired",
    "pending": "not_approved",
}


def view(grant: Grant, status: str) -> dict[str, Any]:
    """The Grant JSON every endpoint and event returns."""
    return {
        "id": grant["id"],
        "type": grant["type"],
        "requester": grant["requester"],
        "request": grant["request"],
        "status": status,
        "created_at": grant["created_at"],
        "decided_by": grant.get("decided_by"),
        "decided_at": grant.get("decided_at"),
        "expires_at": grant.get("expires_at"),
        "used_at": grant.get("used_at"),
        "decision_reason": grant.get("decision_reason"),
        "delegation_id": grant.get("delegation_id"),
        "revoked_by": grant.get("revoked_by"),
        "revoked_at": grant.get("revoked_at"),
    }


def etag(grant: Grant, status: str, extra: str = "") -> str:
    """Strong validator: changes with every stored change and with expiry at read time (``extra``:
    what else the answer shows, e.g. the votes and escalation level of D13)."""
    digest = hashlib.sha256(f"{grant['id']}\0{grant['version']}\0{status}\0{extra}".encode()).hexdigest()[:32]
    return f'"{digest}"'


class Reader:
    """Reads grants with lapse applied at one instant (one per request)."""

    def __init__(self, services: Services):
        self.now = services.clock.now_ms()
        self.lapse: Lapse = services.grant_lapse()

    def status(self, grant: Grant) -> str:
        return self.lapse.status_of(grant)

    def view(self, grant: Grant) -> dict[str, Any]:
        return view(grant, self.status(grant))


async def may_see(
    services: Services, principal: Principal, grant: Grant, agent: Agent | None | EllipsisType = ...
) -> bool:
    """``agent``: the grant's requesting agent when the caller has read it (else read here if needed)."""
    if principal.admin or grant["requester_id"] == principal.id:
        return True
    if agent is ...:
        agent = await requesting_agent(services, grant)
    return policy.may_see_grant(principal, grant, agent, services.admin_emails)


async def _visible_grant(services: Services, principal: Principal, grant_id: str) -> Grant:
    grant = await services.store.grants.get(grant_id)
    if grant is None or not (
        await may_see(services, principal, grant) or await _named_reviewer(services, principal, grant)
    ):
        # Someone who may not see a grant learns nothing about it, not even that it exists.
        raise not_found("grant not found")
    return grant


# What grants.view read besides the grant: its review record, its votes, its requesting agent.
Known = tuple[GrantReview | None, list[Vote], Agent | None]


async def view_ahead(
    services: Services, credentials: Credentials, grant_id: str
) -> GrantView | None | EllipsisType:
    """The grant's ``view``, read before the authentication chain when the bearer is an identity
    token verified before (issue 27: GET and the token route, an agent polling its own grant). The
    view carries the requesting agent as it is now; when that agent is the bearer's, the chain
    checks it from there (``Credentials.agents_read``) instead of reading it in a statement of its
    own. D11 is kept: the agent is read in this request, and the chain still verifies the token and
    refuses a disabled, re-enrolled or re-keyed agent first. ``...`` for any other bearer (or none):
    the route reads after the chain, as before, so an unknown token costs no grant read."""
    if credentials.bearer is None:
        return ...
    agent_id = services.tokens.remembered_agent_id(credentials.bearer, credentials.digest)
    if agent_id is None:
        return ...
    found = await services.store.grants.view(grant_id)
    if found is not None and found[3] is not None and found[3]["agent_id"] == agent_id:
        credentials.agents_read[agent_id] = found[3]
    return found


async def _visible_view(
    services: Services, principal: Principal, grant_id: str, read: GrantView | None | EllipsisType = ...
) -> GrantView:
    """``_visible_grant`` with the grant's review and votes, read with it (one statement); ``read``:
    ``view_ahead``'s answer when the route read it before authenticating."""
    found = await services.store.grants.view(grant_id) if read is ... else read
    if found is None or not (
        await may_see(services, principal, found[0], found[3])
        or await _named_reviewer(services, principal, found[0], found[1:])
    ):
        raise not_found("grant not found")  # as _visible_grant
    return found


async def _named_reviewer(
    services: Services,
    principal: Principal,
    grant: Grant,
    known: Known | None = None,
) -> bool:
    """A person the grant's pinned policy names as an approver (or who voted on it) sees it (D13).
    ``known``: the grant's review record, votes and requesting agent, when the caller read them
    with the grant (``grants.view``)."""
    if not principal.is_person:
        return False
    record = await services.store.grants.review_of(grant["id"]) if known is None else known[0]
    if record is None:
        return False
    review = reviews.pinned(record)
    email = principal.email.lower()
    votes = await services.store.grants.votes(grant["id"]) if known is None else known[1]
    people = await reviews.people(services, review, [email])
    agent = await requesting_agent(services, grant) if known is None else known[2]
    facts = reviews.grant_facts(grant, agent, "pending")
    return reviews.may_review(
        review, facts, people, email, services.clock.now_ms() // 1000, any(v["email"] == email for v in votes)
    )


async def visible(services: Services, principal: Principal, grant: Grant) -> bool:
    """Who sees a grant: its requester, who may decide it by default, and the approvers its pinned
    policy names (or who voted on it, D13). The event stream asks this per event."""
    return await may_see(services, principal, grant) or await _named_reviewer(services, principal, grant)


# -- operations ---------------------------------------------------------------------------------


async def create(
    services: Services,
    principal: Principal | None,
    body: dict[str, Any],
    parsed: Any = None,
    *,
    policy_id: str | None = None,
    agents_read: Mapping[str, Agent] | None = None,
) -> tuple[dict[str, Any], int]:
    """(response body, HTTP status): 201 new, 200 reused. ``parsed``: validated already (CIBA);
    ``policy_id``: the policy that reviews it (``reviews.pinned_review``); ``agents_read``: agents
    this request read already (``Credentials.agents_read``: the requesting agent, as it is now)."""
    request, requester_id = parsed or await parse_request(services, principal, body)

    async def requesting_agent() -> Agent | None:
        known = agents_read.get(requester_id) if agents_read else None
        return known if known is not None else await services.store.agents.get_by_id(requester_id)

    reader = Reader(services)
    key = reuse_key(request)
    if request["grant_type"] in ("timed", "always"):
        existing = await services.store.grants.find_reusable(requester_id, key, reader.lapse)
        if existing is not None:
            return {**reader.view(existing), "reused": True}, 200
    if request["grant_type"] == "timed" and request.get("duration") is None:
        # Checked after the reuse lookup: a request for an approved timed grant need not repeat its
        # duration (the duration is not part of what makes two requests the same grant).
        raise field_error("duration", "duration is required for a new timed grant")
    grant: Grant = {
        "id": str(uuid.uuid4()),
        "type": "command" if "command" in request else "permissions",
        "requester": request["requester"],
        "requester_id": requester_id,
        "request": request,
        "grant_type": request["grant_type"],
        "status": "pending",
        "created_at": reader.now,
        "decided_by": None,
        "decided_at": None,
        "expires_at": None,
        "used_at": None,
        "decision_reason": None,
        "delegation_id": None,
        "revoked_by": None,
        "revoked_at": None,
        "reuse_key": key,
        "version": 1,
    }
    events = ["grant.created"]
    config = reviews.review_config(services)
    evaluation = None
    if config is not None:
        evaluation = evaluate(config, reviews.request_facts(request, request["requester"], requester_id))
    pinned = reviews.pinned_review(config, evaluation, policy_id)
    delegation = await covering_delegation(services, request, requester_id)
    if delegation is not None and not pinned.allow_delegation:
        delegation = None  # D13: a delegation counts only where every matched policy allows it
    if evaluation is not None and evaluation.outcome == AUTO_DENY:
        delegation = None
        grant["status"], grant["decided_by"], grant["decided_at"] = (
            "denied",
            evaluation.decided_by,
            reader.now,
        )
        grant["decision_reason"] = evaluation.reason
        events.append("grant.denied")
    elif evaluation is not None and evaluation.outcome == AUTO_APPROVE:
        delegation = None
        grant["status"], grant["decided_by"], grant["decided_at"] = (
            "approved",
            evaluation.decided_by,
            reader.now,
        )
        grant["decision_reason"] = evaluation.reason
        grant["expires_at"] = approval_expiry(
            services, request["grant_type"], reader.now, request.get("duration")
        )
        events.append("grant.approved")
    delegated_vote = None
    if delegation is not None and not pinned.is_default:
        # Under a policy a delegation is one vote by its delegator, counted like any other (D13).
        delegated_vote = Ballot(
            Voter(delegation["delegator"], delegation["delegator"]),
            "approve",
            "delegation",
            reader.now,
            f"delegation {delegation['id']}",
        )
        agent = await requesting_agent()
        facts = reviews.grant_facts(grant, agent, "pending")
        people = await reviews.people(services, pinned, [delegation["delegator"]])
        result = cast_vote(pinned, facts, people, [], delegated_vote, reader.now // 1000)
        if not result.accepted:
            delegated_vote, delegation = None, None
        elif result.tally.status != "approved":
            delegation = None  # recorded below as a vote; the grant waits for the rest of its quorum
    if delegation is not None:
        expires_at = approval_expiry(services, request["grant_type"], reader.now, request.get("duration"))
        delegation_ends = delegation["expires_at"]
        if expires_at is not None and delegation_ends is not None:
            expires_at = min(expires_at, delegation_ends)
        grant["status"] = "approved"
        grant["decided_by"] = delegation["delegator"]
        grant["decided_at"] = reader.now
        grant["expires_at"] = expires_at
        grant["delegation_id"] = delegation["id"]
        grant["decision_reason"] = f"delegation {delegation['id']}"
        events.append("grant.approved")
    bound = services.limits.pending_bound(principal, reader.lapse)
    agent = await requesting_agent() if services.notify_channels else None
    notices = await notify.requested(services, grant, pinned, agent)  # D15: in the grant's transaction
    try:
        stored = await services.store.grants.create(
            grant,
            events,
            bound=bound if grant["status"] == "pending" else None,
            review=pinned.as_dict() if not pinned.is_default else None,
            review_due=reviews.review_due(pinned, grant, 0),
            notices=notices,
        )
    except LimitReached as reached:
        raise services.limits.pending_refused(reached) from None
    if delegated_vote is not None and delegation is None:
        await services.store.grants.add_vote(vote_record(stored["id"], delegated_vote))
    services.events.changed()
    if notices:
        notify.wake(services, notices)
    answer = reader.view(stored)
    if delegation is not None:
        answer.update(approved_automatically=True, auto_approval_kind="delegation")
    if delegated_vote is not None:
        answer.update(await review_view(services, stored, reader))
    else:  # nothing recorded yet: no need to read it back
        answer.update(
            review=reviews.review_json(pinned, stored, None, 0, reader.now // 1000),
            approvals=reviews.approvals_json(stored, None, pinned),
        )
    if evaluation is not None:
        if evaluation.outcome == AUTO_APPROVE:
            answer.update(approved_automatically=True, auto_approval_kind="rule")
            answer["authz_jwt"] = await mint(services, stored)
    return answer, 201


async def get(
    services: Services, principal: Principal, grant_id: str, read: GrantView | None | EllipsisType = ...
) -> tuple[dict[str, Any], str]:
    """``read``: ``view_ahead``'s answer, when the route read the grant before authenticating."""
    reader = Reader(services)
    grant, record, votes, agent = await _visible_view(services, principal, grant_id, read)
    status = reader.status(grant)
    answer = view(grant, status)
    answer.update(await review_view(services, grant, reader, (record, votes, agent)))
    shown = answer["review"]
    # orjson (grantd.core.json_codec): the tag is opaque, its text only has to change with what it covers
    extra = (
        f"{len(answer['approvals'])}:{shown['escalation_level']}:{json_codec.dumps(shown['requirements'])}"
    )
    return answer, etag(grant, status, extra)


def _not_pending(status: str) -> Problem:
    if status == "expired":
        return Problem(400, "grant expired before it was decided", extra={"grant_status": status})
    return Problem(400, "grant already decided", extra={"grant_status": status})


async def _transition(
    services: Services,
    grant: Grant,
    *,
    expect: tuple[str, ...],
    changes: dict[str, Any],
    event: str,
    reader: Reader,
    refuse: Callable[[str], Problem],
) -> Grant:
    """Apply a conditional transition; if another caller got there first, refuse with the state they left."""
    status = reader.status(grant)
    if status not in expect:
        raise refuse(status)
    # a decision of a pending grant replaces the notices that asked for it (D15)
    notices = await notify.resolved(services, grant, reader.now) if status == "pending" else []
    updated = await services.store.grants.update_if(
        grant["id"],
        expect=expect,
        changes=changes,
        event=event,
        lapse=reader.lapse,
        now=reader.now,
        notices=notices,
    )
    if updated is None:
        latest = await services.store.grants.get(grant["id"])
        raise refuse(reader.status(latest) if latest else "revoked")
    services.events.changed()
    if notices:
        notify.wake(services, notices)
    return updated


async def review_view(
    services: Services,
    grant: Grant,
    reader: Reader,
    known: Known | None = None,
) -> dict[str, Any]:
    """The grant JSON's ``review`` and ``approvals`` (D13); ``known``: the grant's review record,
    votes and requesting agent, when the caller read them with the grant (``grants.view``)."""
    now_s = reader.now // 1000
    status = reader.status(grant)
    review, level, counted, _ = await review_state(services, grant, status, now_s, known)
    return {
        "review": reviews.review_json(review, grant, counted, level, now_s),
        "approvals": reviews.approvals_json(grant, counted, review),
    }


async def mint(services: Services, grant: Grant, known: Known | None = None) -> str:
    """The AuthZ-JWT of an approved grant, with the approvals, policy and quorum of D13 (``known``:
    as ``review_view``'s)."""
    now_s = services.clock.now_ms() // 1000
    review, _, counted, _ = await review_state(services, grant, "approved", now_s, known)
    return await services.tokens.mint_authz(grant, reviews.jwt_claims(review, grant, counted))


def _refused(reason: str, status: str) -> Problem:
    if reason == ALREADY_DECIDED:
        return _not_pending(status)
    if reason == ALREADY_REVIEWED:
        return Problem(409, "already reviewed", extra={"reason": reason})
    return Problem(403, reason, extra={"reason": reason})


async def vote(
    services: Services,
    principal: Principal,
    grant_id: str,
    body: dict[str, Any],
    *,
    decision: str | None = None,
    via: str = "api",
    evidence: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Every vote (approve, deny, review, batch; pages and the TUI call these routes) goes through
    grantd.core.review.cast_vote; the vote is recorded (one per person per grant, only while the
    grant is pending) and the tally of the votes up to it decides; finalising is the conditional
    update on ``pending``, so of concurrent final votes exactly one wins (D13)."""
    if decision is None:
        decision = body.get("decision")
        if decision not in ("approve", "deny"):
            raise field_error("decision", "decision must be approve or deny")
    verb = "approve" if decision == "approve" else "deny"
    found = await services.store.grants.view(grant_id)  # the grant, its review, its votes: one read
    if found is None:
        raise not_found("grant not found")
    grant, record, recorded, agent = found
    reader = Reader(services)
    now_s = reader.now // 1000
    status = reader.status(grant)
    review = reviews.pinned(record)
    facts = reviews.grant_facts(grant, agent, status)
    email = principal.email.lower()
    people = await reviews.people(services, review, [email, *(v["email"] for v in recorded)])
    visible = await may_see(services, principal, grant, agent) or reviews.may_review(
        review, facts, people, email, now_s, any(v["email"] == email for v in recorded)
    )
    if not visible:
        raise not_found("grant not found")  # D6: who may not see it learns nothing
    counting = people  # whom the answer's tally counts as GET's does (review_state's people)
    if review.is_default:
        if not policy.may_decide(principal, agent, services.admin_emails):
            raise forbidden(f"not authorized to {verb}")
        # The default policy's approvers are exactly those grantd.core.policy lets decide (owner or
        # approver by their bound person id, an administrator, the management token).
        if email not in people.admins:
            people = replace(people, admins=people.admins | {email})
    # a blank reason is no reason: under require_reason it is 403 "reason required" (D13), not a 400
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON, blank_is_absent=True)
    grant_type = grant_type_field(body, None) if decision == "approve" else None
    duration = (
        seconds_field(body, "duration", services.config.grants.max_duration)
        if decision == "approve"
        else None
    )
    if decision == "approve":
        effective = grant_type or grant["request"]["grant_type"]
        if effective == "timed" and (duration or grant["request"].get("duration")) is None:
            raise field_error("duration", "duration is required for timed grants")
    ballot = Ballot(
        Voter(
            principal.id, email, management=principal.kind is Kind.MANAGEMENT, agent=not principal.is_person
        ),
        decision,
        via,
        reader.now,
        reason,
        grant_type,
        duration,
    )
    result = cast_vote(review, facts, people, reviews.ballots(recorded), ballot, now_s)
    if not result.accepted:
        assert result.refusal is not None
        raise _refused(result.refusal.reason, status)
    recording = vote_record(grant_id, ballot, evidence)
    decided: Grant | None = None
    if result.tally.status != "pending":
        # The tally of the votes read and this one decides: the vote, the decision and their events
        # go in one transaction, if no other vote came in between (issue 27; else tallied again below).
        changes, event = decide(
            services, grant, review, result.tally, ballot, [*recorded, recording], principal.email
        )
        notices = await notify.resolved(services, grant, reader.now)
        outcome, decided = await services.store.grants.add_deciding_vote(
            recording,
            seen=len(recorded),
            expect=("pending",),
            changes=changes,
            event=event,
            lapse=reader.lapse,
            now=reader.now,
            notices=notices,
        )
        if decided is not None and notices:
            notify.wake(services, notices)
    else:
        outcome = await services.store.grants.add_vote(recording)
    if outcome != "recorded":
        latest = await services.store.grants.get(grant_id)
        raise _refused(
            ALREADY_REVIEWED if outcome == "duplicate" else ALREADY_DECIDED,
            reader.status(latest) if latest else "revoked",
        )
    services.events.changed()
    if decided is not None:
        # Every vote is those read and this one (nothing came between; a decided grant takes no more).
        # The deciding tally is the answer's when it counted with the people GET counts with (the
        # same votes, review, agent and time; the decision changes no fact a count depends on).
        votes = [*recorded, recording]
        if counting is people:
            return await _vote_answer(services, decided, review, record, votes, agent, reader, result.tally)
        return await _vote_answer(services, decided, review, record, votes, agent, reader, people=counting)
    # Finalisation: the votes up to and including this one, re-checked against today's facts (the
    # agent's owner and approver, group members, administrators) by the same tally.
    again = await services.store.grants.view(grant_id)
    if again is None:
        raise _not_pending("revoked")
    latest, record, votes, _ = again
    mine = next(i for i, v in enumerate(votes) if v["email"] == email)
    facts = reviews.grant_facts(grant, agent, "pending")
    people = await reviews.people(services, review, [v["email"] for v in votes])
    counted = tally(review, facts, people, reviews.ballots(votes[: mine + 1]), now_s)
    if counted.status == "pending":
        # no vote after this one: the finalising tally is the answer's (same votes, people, time)
        known = counted if mine == len(votes) - 1 else ...
        return await _vote_answer(services, latest, review, record, votes, agent, reader, known)
    changes, event = decide(services, grant, review, counted, ballot, votes[: mine + 1], principal.email)
    updated = await _transition(
        services, grant, expect=("pending",), changes=changes, event=event, reader=reader, refuse=_not_pending
    )
    # the votes as the decision left them (another may have come in before it)
    votes = await services.store.grants.votes(grant_id)
    return await _vote_answer(services, updated, review, record, votes, agent, reader)


async def _vote_answer(
    services: Services,
    grant: Grant,
    review: Review,
    record: GrantReview | None,
    votes: list[Any],
    agent: Agent | None,
    reader: Reader,
    tallied: Tally | EllipsisType = ...,
    people: People | None = None,
) -> dict[str, Any]:
    """A vote's answer: the grant, its review and approvals as GET shows them, and the AuthZ-JWT of
    an approved grant (one tally for both; ``tallied``: that tally, when the caller made it of
    these ``votes`` at ``reader.now`` with the people ``count_votes`` reads; ``people``: those
    people, when the caller has them)."""
    now_s = reader.now // 1000
    # a grant approved at reader.now is "approved" then (no lapse yet), the status mint() assumes
    status = reader.status(grant)
    counted: Tally | None
    if tallied is ...:
        _, level, counted, _ = await count_votes(
            services, grant, record, votes, status, now_s, agent, review, people
        )
    else:
        level, counted = escalation_of(record), tallied
    shown = reviews.review_json(review, grant, counted, level, now_s)
    approvals = reviews.approvals_json(grant, counted, review)
    # the grant as GET shows it (D13: grant JSON has review and approvals); the top-level review
    # also carries the approvals, as it always has (the TUI and older clients read them there)
    answer: dict[str, Any] = {
        "grant": {**view(grant, status), "review": shown, "approvals": approvals},
        "review": {**shown, "approvals": approvals},
    }
    if grant["status"] == "approved":
        answer["authz_jwt"] = await services.tokens.mint_authz(
            grant, reviews.jwt_claims(review, grant, counted, approvals)
        )
    return answer


async def approve(
    services: Services, principal: Principal, grant_id: str, body: dict[str, Any], via: str = "api"
) -> dict[str, Any]:
    return await vote(services, principal, grant_id, body, decision="approve", via=via)


async def deny(
    services: Services, principal: Principal, grant_id: str, body: dict[str, Any], via: str = "api"
) -> dict[str, Any]:
    return await vote(services, principal, grant_id, body, decision="deny", via=via)


async def review(
    services: Services, principal: Principal, grant_id: str, body: dict[str, Any], via: str = "api"
) -> dict[str, Any]:
    """``POST /api/grants/:id/review {decision, reason?, grant_type?, duration?}`` (D13)."""
    return await vote(services, principal, grant_id, body, via=via)


def _not_revocable(status: str) -> Problem:
    return Problem(400, f"grant cannot be revoked: it is {status}", extra={"grant_status": status})


async def revoke(
    services: Services, principal: Principal, grant_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    grant = await _visible_grant(services, principal, grant_id)
    if not policy.may_revoke_grant(
        principal, grant, await requesting_agent(services, grant), services.admin_emails
    ):
        raise forbidden("not authorized to revoke")
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON)
    reader = Reader(services)
    if reader.status(grant) == "revoked":
        return {"grant": reader.view(grant)}  # revoking twice answers with the revoked grant (D6)
    changes: dict[str, Any] = {"status": "revoked", "revoked_by": principal.email, "revoked_at": reader.now}
    if reason is not None:
        changes["decision_reason"] = reason
    try:
        updated = await _transition(
            services,
            grant,
            expect=("approved", "pending"),
            changes=changes,
            event="grant.revoked",
            reader=reader,
            refuse=_not_revocable,
        )
    except Problem as problem:
        if problem.extra.get("grant_status") == "revoked":  # a concurrent revoke won
            latest = await services.store.grants.get(grant_id)
            if latest is not None:
                return {"grant": reader.view(latest)}
        raise
    return {"grant": reader.view(updated)}


Operation = Callable[[Services, Principal, str, dict[str, Any]], Awaitable[dict[str, Any]]]
VoteOperation = Callable[[Services, Principal, str, dict[str, Any], str], Awaitable[dict[str, Any]]]


async def batch(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """Each operation is authorised and applied on its own (D6)."""
    operations = body.get("operations")
    if not isinstance(operations, list) or not operations:
        raise field_error("operations", "operations must be a non-empty array")
    if len(operations) > MAX_BATCH:
        raise field_error("operations", f"at most {MAX_BATCH} operations per batch")
    actions: dict[str, Operation] = {"approve": approve, "deny": deny, "revoke": revoke}
    results = []
    for op in operations:
        ident = op.get("id") if isinstance(op, dict) else None
        action = op.get("action") if isinstance(op, dict) else None
        result: dict[str, Any] = {
            "id": ident if isinstance(ident, str) else None,
            "action": action if isinstance(action, str) else None,
        }
        try:
            if not isinstance(ident, str) or not ident:
                raise field_error("id", "each operation needs an id")
            if not isinstance(action, str) or action not in actions:
                raise field_error("action", "action must be approve, deny or revoke")
            assert isinstance(op, dict)
            extra = {k: v for k, v in op.items() if k not in ("id", "action")}
            answer = await actions[action](services, principal, ident, extra)
            result.update(status=answer["grant"]["status"], success=True)
            if "authz_jwt" in answer:
                result["authz_jwt"] = answer["authz_jwt"]
        except Problem as problem:
            result.update(status=problem.extra.get("grant_status"), success=False, error=problem.body())
        results.append(result)
    return {"results": results}
