"""Votes on a pending grant (D13): the one function that decides every vote, the tally that is
re-run at finalisation, and the escalation and timeout schedule. Pure: every fact is handed in.

- `cast_vote(review, grant, people, votes, ballot, now)`: accepted or refused with D13's reason
  (400 `grant already decided`, 409 `already reviewed`, 403 `owner excluded`, `approver excluded`,
  `self approval not allowed`, `not an eligible approver`, `management token not allowed`,
  `delegation not allowed`, `reason required`, `agents never vote`), and the tally that results.
- `tally(review, grant, people, votes, now)`: re-checks every recorded vote against today's facts
  (group membership, administrators, the agent's owner and approver, the escalation level) and
  counts the ones that still hold; the dropped ones come back with their reason. The store's
  conditional finalisation runs it again, so eligibility holds at the vote and at finalisation.

Counting: one vote per person per grant. An approval counts toward exactly one requirement: the
assignment is a maximum matching of approvers to the requirements' seats (each person one seat,
votes taken in order, requirements in order), so one person never fills two blocks and the order in
which people vote never leaves a block unmet that the same votes could meet. A denial counts
against every block its voter is eligible for (failing closed); one block's `deny` count denies
the grant. Overrides under quorum: the most restrictive wins (the lower grant type, the shorter
duration), and the pinned `max_duration` caps every approval (an `always` grant becomes `timed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from grantd.core.review.evaluate import GRANT_TYPE_RANK, PinnedEscalation, PinnedRequirement, Review

APPROVE, DENY = "approve", "deny"
PENDING, APPROVED, DENIED, EXPIRED = "pending", "approved", "denied", "expired"
VIAS = ("api", "web", "tui", "delegation", "consent")  # consent: an MCP authorization (D17)
TIMEOUT_REASON = "no quorum before timeout"

# The reasons a vote is refused (D13), with their HTTP status.
ALREADY_DECIDED = "grant already decided"
ALREADY_REVIEWED = "already reviewed"
AGENTS_NEVER_VOTE = "agents never vote"
MANAGEMENT_TOKEN_NOT_ALLOWED = "management token not allowed"  # noqa: S105 (a reason, not a secret)
DELEGATION_NOT_ALLOWED = "delegation not allowed"
SELF_APPROVAL = "self approval not allowed"
OWNER_EXCLUDED = "owner excluded"
APPROVER_EXCLUDED = "approver excluded"
NOT_ELIGIBLE = "not an eligible approver"
REASON_REQUIRED = "reason required"
STATUS = {ALREADY_DECIDED: 400, ALREADY_REVIEWED: 409}  # every other reason: 403


@dataclass(frozen=True)
class Voter:
    """Who votes. ``person_id`` and ``email`` of a person (the management token: its management
    identity, ``management = True``; a delegation: its delegator, with ``via = "delegation"``).
    ``agent``: an agent, or a token that acts for someone (`act`): always refused."""

    person_id: str
    email: str
    management: bool = False
    agent: bool = False


@dataclass(frozen=True)
class Ballot:
    voter: Voter
    decision: str  # approve | deny
    via: str  # api | web | tui | delegation
    at: int
    reason: str | None = None
    grant_type: str | None = None  # approve only: an override (the most restrictive wins)
    duration: int | None = None


@dataclass(frozen=True)
class GrantFacts:
    """The grant and its agent as they are now (the owner or approver may have changed)."""

    requester_id: str  # agent_id of an agent, else the person's id or e-mail
    requester_email: str
    owner: str | None  # the agent's owner's e-mail (None for a person's own request)
    approver: str | None
    created_at: int
    grant_type: str  # as requested
    duration: int | None = None
    status: str = PENDING


@dataclass(frozen=True)
class People:
    """Who is who now: ``members`` of each [[groups]] id (lowercased e-mails, today's config) and
    the ``admins`` (e-mails: `admin.emails`, the management identity, persons marked admin)."""

    members: Mapping[str, frozenset[str]]
    admins: frozenset[str]


@dataclass(frozen=True)
class Refusal:
    reason: str

    @property
    def status(self) -> int:
        return STATUS.get(self.reason, 403)


@dataclass(frozen=True)
class Counted:
    """A recorded vote that still holds, and the requirement it counts for (an approval: the one
    the matching gave it, or, beyond every eligible block's need, its first eligible block; a
    denial: its first eligible block — it counts against all of them)."""

    ballot: Ballot
    requirement: str
    self_approved: bool = (
        False  # the requester's own vote, where a policy allows it (flagged in the JWT and log)
    )


@dataclass(frozen=True)
class RequirementState:
    id: str
    approve: int
    deny: int
    approvals: tuple[str, ...]  # e-mails, in vote order
    denials: tuple[str, ...]

    @property
    def missing(self) -> int:
        return max(0, self.approve - len(self.approvals))

    @property
    def met(self) -> bool:
        return self.missing == 0

    @property
    def denied(self) -> bool:
        return len(self.denials) >= self.deny


@dataclass(frozen=True)
class Tally:
    status: str  # pending | approved | denied
    requirements: tuple[RequirementState, ...]
    counted: tuple[Counted, ...]
    dropped: tuple[tuple[Ballot, str], ...]  # votes that no longer hold, with why
    decided_by: str | None  # the e-mail whose vote completed the decision
    grant_type: str  # effective, after overrides and max_duration
    duration: int | None

    @property
    def quorum(self) -> str:
        """`k/n` for the AuthZ-JWT: approvals counted toward the requirements / approvals needed."""
        need = sum(r.approve for r in self.requirements)
        have = sum(min(len(r.approvals), r.approve) for r in self.requirements)
        return f"{have}/{need}"


@dataclass(frozen=True)
class VoteResult:
    accepted: bool
    refusal: Refusal | None
    tally: Tally  # after the vote when accepted, else as it was


# -- escalation and timeout -----------------------------------------------------------------------


def escalation_level(review: Review, created_at: int, now: int) -> int:
    """How many escalation levels are due at ``now`` (0: none)."""
    return sum(1 for e in review.escalations if created_at + e.after <= now)


def next_escalation_at(review: Review, created_at: int, now: int) -> int | None:
    for e in review.escalations:
        if created_at + e.after > now:
            return created_at + e.after
    return None


def escalations_due(
    review: Review, created_at: int, now: int, done_level: int
) -> tuple[PinnedEscalation, ...]:
    """The levels past ``done_level`` that are due: the sweep emits `grant.escalated` for each, once
    (its conditional update of the stored level is the single winner)."""
    return tuple(e for e in review.escalations if e.level > done_level and created_at + e.after <= now)


def timeout_at(review: Review, created_at: int) -> int | None:
    """When the pinned `pending_ttl` ends (None: the global `grants.pending_ttl` applies)."""
    return None if review.pending_ttl is None else created_at + review.pending_ttl


def next_review_due(review: Review, created_at: int, done_level: int) -> int | None:
    """When the sweep must next look at a pending grant pinned to ``review`` whose levels up to
    ``done_level`` are announced: its next escalation or its pinned timeout, whichever comes first
    (None: nothing is left to do but wait for votes). A lower ``done_level`` never gives a later
    time, so a sweep that read a level another one has raised since only looks again sooner."""
    times = [created_at + e.after for e in review.escalations if e.level > done_level]
    ends = timeout_at(review, created_at)
    if ends is not None:
        times.append(ends)
    return min(times, default=None)


def timeout_outcome(review: Review) -> tuple[str, str | None]:
    """(status, decision_reason) of a grant whose `pending_ttl` passed without a decision."""
    return (DENIED, TIMEOUT_REASON) if review.on_timeout == "deny" else (EXPIRED, None)


# -- eligibility ----------------------------------------------------------------------------------


def _in_ref(email: str, ref: str, grant: GrantFacts, people: People) -> bool:
    if ref == "@owner":
        return grant.owner is not None and email == grant.owner.lower()
    if ref == "@approver":
        return grant.approver is not None and email == grant.approver.lower()
    if ref == "@admins":
        return email in people.admins
    return email in people.members.get(ref, frozenset())  # a group gone from the config: nobody


def requirement_groups(review: Review, requirement: PinnedRequirement, level: int) -> tuple[str, ...]:
    """The block's groups, widened by `add_approvers` of its policy's escalation levels reached."""
    if not review.escalations:
        return requirement.groups
    extra = tuple(
        ref
        for e in review.escalations
        if e.level <= level and e.policy == requirement.policy
        for ref in e.add_approvers
    )
    return requirement.groups + extra


def eligible_for(
    review: Review, grant: GrantFacts, people: People, email: str, level: int
) -> tuple[int, ...]:
    """Indexes of the requirements ``email`` may vote for (exclusions aside)."""
    email = email.lower()
    return tuple(
        i
        for i, r in enumerate(review.requirements)
        if any(_in_ref(email, ref, grant, people) for ref in requirement_groups(review, r, level))
    )


def _is_requester(voter: Voter, grant: GrantFacts) -> bool:
    return voter.person_id == grant.requester_id or voter.email.lower() == grant.requester_email.lower()


def check_voter(
    review: Review, grant: GrantFacts, people: People, ballot: Ballot, level: int
) -> Refusal | None:
    """May this ballot count? The same checks for approve and deny, at the vote and at finalisation."""
    judged = _judge(review, grant, people, ballot, level)
    return judged if isinstance(judged, Refusal) else None


def _judge(
    review: Review, grant: GrantFacts, people: People, ballot: Ballot, level: int
) -> Refusal | tuple[int, ...]:
    """``check_voter``'s refusal, or the indexes of the requirements the ballot may count for
    (``eligible_for``, never empty): the one judgement of a ballot that the checks and the count share."""
    voter, email = ballot.voter, ballot.voter.email.lower()
    if voter.agent:
        return Refusal(AGENTS_NEVER_VOTE)
    if voter.management and not review.allow_management_token:
        return Refusal(MANAGEMENT_TOKEN_NOT_ALLOWED)
    if ballot.via == "delegation" and not review.allow_delegation:
        return Refusal(DELEGATION_NOT_ALLOWED)
    self_vote = _is_requester(voter, grant)
    if self_vote and not review.allow_self_approval:
        return Refusal(SELF_APPROVAL)
    if "owner" in review.forbid and grant.owner is not None and email == grant.owner.lower():
        return Refusal(OWNER_EXCLUDED)
    if "approver" in review.forbid and grant.approver is not None and email == grant.approver.lower():
        return Refusal(APPROVER_EXCLUDED)
    eligible = eligible_for(review, grant, people, email, level)
    if not eligible:
        return Refusal(NOT_ELIGIBLE)
    needs_reason = review.require_reason or (
        self_vote and not review.is_default
    )  # opted-in self approval says why
    if needs_reason and not (ballot.reason or "").strip():
        return Refusal(REASON_REQUIRED)
    return eligible


def _same_person(a: Voter, b: Voter) -> bool:
    return a.person_id == b.person_id or a.email.lower() == b.email.lower()


# -- counting -------------------------------------------------------------------------------------


def _assign(eligibility: list[tuple[int, ...]], capacity: list[int]) -> list[int | None]:
    """A maximum assignment of voters (in order) to requirement seats (augmenting paths)."""
    seats: list[list[int]] = [[] for _ in capacity]
    assigned: list[int | None] = [None] * len(eligibility)

    def place(voter: int, seen: set[int]) -> bool:
        for req in eligibility[voter]:
            if req in seen:
                continue
            seen.add(req)
            if len(seats[req]) < capacity[req]:
                seats[req].append(voter)
                assigned[voter] = req
                return True
            for holder in list(seats[req]):
                if place(holder, seen):
                    seats[req].remove(holder)
                    seats[req].append(voter)
                    assigned[voter] = req
                    return True
        return False

    for voter in range(len(eligibility)):
        place(voter, set())
    return assigned


def _effective(review: Review, grant: GrantFacts, approvals: Sequence[Ballot]) -> tuple[str, int | None]:
    grant_type, duration = grant.grant_type, grant.duration
    for ballot in approvals:
        if ballot.grant_type is not None and GRANT_TYPE_RANK[ballot.grant_type] < GRANT_TYPE_RANK[grant_type]:
            grant_type = ballot.grant_type
        if ballot.duration is not None:
            duration = ballot.duration if duration is None else min(duration, ballot.duration)
    if review.max_duration is not None:
        if grant_type == "always":
            grant_type = "timed"
        if grant_type == "timed":
            duration = review.max_duration if duration is None else min(duration, review.max_duration)
    return grant_type, duration


def tally(review: Review, grant: GrantFacts, people: People, votes: Sequence[Ballot], now: int) -> Tally:
    """Count the recorded votes that still hold (re-checked against today's facts)."""
    level = escalation_level(review, grant.created_at, now)
    return _count(review, grant, votes, [_judge(review, grant, people, b, level) for b in votes])


def _count(
    review: Review, grant: GrantFacts, votes: Sequence[Ballot], judged: Sequence[Refusal | tuple[int, ...]]
) -> Tally:
    """``tally`` of ``votes`` each judged (``_judge``, in the same order) against the same facts."""
    kept: list[tuple[Ballot, tuple[int, ...]]] = []
    dropped: list[tuple[Ballot, str]] = []
    for ballot, judgement in zip(votes, judged, strict=True):
        if isinstance(judgement, Refusal):
            dropped.append((ballot, judgement.reason))
        else:
            kept.append((ballot, judgement))
    approvers = [(b, e) for b, e in kept if b.decision == APPROVE]
    deniers = [(b, e) for b, e in kept if b.decision == DENY]
    assignment = _assign([e for _, e in approvers], [r.approve for r in review.requirements])
    approvals: list[list[str]] = [[] for _ in review.requirements]
    counted: list[Counted] = []
    for (ballot, eligible), seat in zip(approvers, assignment, strict=True):
        index = seat if seat is not None else eligible[0]
        approvals[index].append(ballot.voter.email.lower())
        counted.append(Counted(ballot, review.requirements[index].id, _is_requester(ballot.voter, grant)))
    denials: list[list[str]] = [[] for _ in review.requirements]
    for ballot, eligible in deniers:
        for index in eligible:
            denials[index].append(ballot.voter.email.lower())
        counted.append(
            Counted(ballot, review.requirements[eligible[0]].id, _is_requester(ballot.voter, grant))
        )
    states = tuple(
        RequirementState(r.id, r.approve, r.deny, tuple(a), tuple(d))
        for r, a, d in zip(review.requirements, approvals, denials, strict=True)
    )
    grant_type, duration = _effective(review, grant, [b for b, _ in approvers])
    status, decided_by = PENDING, None
    if any(s.denied for s in states):
        denied = {i for i, s in enumerate(states) if s.denied}
        last = [b for b, eligible in deniers if denied.intersection(eligible)][-1]
        status, decided_by = DENIED, last.voter.email.lower()
    elif states and all(s.met for s in states):
        status, decided_by = APPROVED, approvers[-1][0].voter.email.lower()
    order = {id(b): i for i, b in enumerate(votes)}
    counted.sort(key=lambda c: order[id(c.ballot)])
    return Tally(status, states, tuple(counted), tuple(dropped), decided_by, grant_type, duration)


def cast_vote(
    review: Review, grant: GrantFacts, people: People, votes: Sequence[Ballot], ballot: Ballot, now: int
) -> VoteResult:
    """The one function that decides every vote (approve, deny, review, batch, TUI, pages, delegations).
    Every recorded vote and the ballot are judged once: the tallies before and after the ballot
    count the same judgements (``tally``'s, against the same facts and escalation level)."""
    level = escalation_level(review, grant.created_at, now)
    judged = [_judge(review, grant, people, b, level) for b in votes]
    before = _count(review, grant, votes, judged)
    if grant.status != PENDING or before.status != PENDING:
        return VoteResult(False, Refusal(ALREADY_DECIDED), before)
    if ballot.voter.agent:
        return VoteResult(False, Refusal(AGENTS_NEVER_VOTE), before)
    if any(_same_person(ballot.voter, earlier.voter) for earlier in votes):
        return VoteResult(False, Refusal(ALREADY_REVIEWED), before)
    # The routes validate their fields (400 naming the field); a bad value here is a bug in the caller.
    if ballot.decision not in (APPROVE, DENY):
        raise ValueError(f"decision must be approve or deny, not {ballot.decision!r}")
    if ballot.via not in VIAS:
        raise ValueError(f"via must be one of {', '.join(VIAS)}, not {ballot.via!r}")
    if ballot.grant_type is not None and ballot.grant_type not in GRANT_TYPE_RANK:
        raise ValueError(f"grant_type must be once, timed or always, not {ballot.grant_type!r}")
    if ballot.decision == DENY and (ballot.grant_type is not None or ballot.duration is not None):
        ballot = replace(ballot, grant_type=None, duration=None)  # overrides shape an approval only
    judgement = _judge(review, grant, people, ballot, level)
    if isinstance(judgement, Refusal):
        return VoteResult(False, judgement, before)
    return VoteResult(True, None, _count(review, grant, [*votes, ballot], [*judged, judgement]))


def eligible_people(
    review: Review, grant: GrantFacts, people: People, now: int, votes: Sequence[Ballot] = ()
) -> tuple[tuple[str, ...], ...]:
    """For each requirement, the e-mails who may still vote for it now (group members, the owner or
    approver it names, administrators; minus exclusions and those who voted), sorted."""
    level = escalation_level(review, grant.created_at, now)
    voted = {b.voter.email.lower() for b in votes}
    out = []
    for requirement in review.requirements:
        candidates: set[str] = set()
        for ref in requirement_groups(review, requirement, level):
            if ref == "@owner" and grant.owner:
                candidates.add(grant.owner.lower())
            elif ref == "@approver" and grant.approver:
                candidates.add(grant.approver.lower())
            elif ref == "@admins":
                candidates |= people.admins
            else:
                candidates |= people.members.get(ref, frozenset())
        keep = []
        for email in sorted(candidates - voted):
            probe = Ballot(Voter(email, email), APPROVE, "api", now, reason="(probe)")
            if check_voter(review, grant, people, probe, level) is None:
                keep.append(email)
        out.append(tuple(keep))
    return tuple(out)
