"""Grants: request, decide, hand out AuthZ-JWTs, consume, verify (specification + D3, D4, D6).

The rules of grants live here; routes (appliance/web/api/grants.py) only parse and answer, who may
do what is asked of grantd.core.policy, and when a grant lapses of grantd.core.lifecycle. Every
state change is one conditional write in storage (``grants.update_if``), so of any number of
concurrent approvers, deniers or consumers in any process exactly one wins; the others get the
answer that matches what actually happened. Every change tells the event hub (``events.changed``).
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from grantd.commands import cmd_hash
from grantd.core import policy
from grantd.core.errors import Problem, bad_request, forbidden, not_found, unauthorized
from grantd.core.fields import (
    MAX_TEXT,
    check_identifier,
    email_field,
    field_error,
    identifier_field,
    seconds_field,
    string_field,
)
from grantd.core.lifecycle import GRANT_TYPES, Lapse
from grantd.core.paging import PageRequest, page, page_request
from grantd.core.principals import Kind, Principal, management
from grantd.core.review import (
    AUTO_APPROVE,
    AUTO_DENY,
    DEFAULT_REVIEW,
    NEEDS_REVIEW,
    Ballot,
    Review,
    Tally,
    Voter,
    cast_vote,
    eligible_people,
    escalations_due,
    evaluate,
    tally,
    timeout_at,
    timeout_outcome,
)
from grantd.core.review.votes import ALREADY_DECIDED, ALREADY_REVIEWED, check_voter, escalation_level
from grantd.services import review as reviews
from grantd.services.context import Services
from grantd.services.delegations import covering_delegation
from grantd.services.limits import PENDING_RETRY_AFTER, too_many
from grantd.services.tokens import TokenError
from grantd.store import LimitReached, OwnerBound
from grantd.store.records import Agent, Grant

STATUSES = ("pending", "approved", "denied", "revoked", "consumed", "expired")
STATUS_ALIASES = {"used": "consumed"}  # the peer CLI's name for a consumed grant (D6)

MAX_REASON = 1000
MAX_ARGS = 256
MAX_ARG = 4096
MAX_COMMAND_BYTES = 32_768
MAX_PERMISSIONS = 100
MAX_BATCH = 100
MAX_EXTENSION_BYTES = 16_384  # authorization_details + execution_context together (D6)
_RUN_AS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?")  # fullmatch: "root\n" is not a user name
_HOST = re.compile(r"[^\s/]{1,255}")  # fullmatch, after check_identifier refused control characters

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


async def requesting_agent(services: Services, grant: Grant) -> Agent | None:
    """The agent that asked for the grant (None for a person's request or a deleted agent)."""
    return await services.store.agents.get_by_id(grant["requester_id"])


async def may_see(services: Services, principal: Principal, grant: Grant) -> bool:
    if principal.admin or grant["requester_id"] == principal.id:
        return True
    return policy.may_see_grant(principal, grant, await requesting_agent(services, grant), services.admin_emails)


async def _visible_grant(services: Services, principal: Principal, grant_id: str) -> Grant:
    grant = await services.store.grants.get(grant_id)
    if grant is None or not (await may_see(services, principal, grant) or await _named_reviewer(services, principal, grant)):
        # Someone who may not see a grant learns nothing about it, not even that it exists.
        raise not_found("grant not found")
    return grant


async def _named_reviewer(services: Services, principal: Principal, grant: Grant) -> bool:
    """A person the grant's pinned policy names as an approver (or who voted on it) sees it (D13)."""
    if not principal.is_person:
        return False
    record = await services.store.grants.review_of(grant["id"])
    if record is None:
        return False
    review = reviews.pinned(record)
    email = principal.email.lower()
    votes = await services.store.grants.votes(grant["id"])
    people = await reviews.people(services, review, [email])
    facts = reviews.grant_facts(grant, await requesting_agent(services, grant), "pending")
    return reviews.may_review(review, facts, people, email, services.clock.now_ms() // 1000,
                              any(v["email"] == email for v in votes))


# -- validation of a request --------------------------------------------------------------------


def _grant_type(body: dict[str, Any], default: str | None) -> str | None:
    value = body.get("grant_type")
    if value is None:  # null means absent
        return default
    if not isinstance(value, str) or value not in GRANT_TYPES:
        raise field_error("grant_type", "grant_type must be one of once, timed, always")
    return value


def _string_list(body: dict[str, Any], name: str, *, max_items: int, max_len: int) -> list[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise field_error(name, f"{name} must be an array of strings")
    if len(value) > max_items:
        raise field_error(name, f"{name} has more than {max_items} items")
    for item in value:
        if len(item) > max_len:
            raise field_error(name, f"an item of {name} is longer than {max_len} characters")
        if "\x00" in item:
            raise field_error(name, f"{name} must not contain NUL characters")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise field_error(name, f"{name} must be valid Unicode text") from None
    return list(value)


def _extensions(body: dict[str, Any]) -> dict[str, Any]:
    """The peer CLI's ``authorization_details`` (RFC 9396 array of objects) and ``execution_context``
    (an object): stored verbatim, bounded, never part of cmd_hash or reuse (D6)."""
    found: dict[str, Any] = {}
    details = body.get("authorization_details")
    if details is not None:
        if not isinstance(details, list) or not all(isinstance(d, dict) for d in details):
            raise field_error("authorization_details", "authorization_details must be an array of objects")
        found["authorization_details"] = details
    context = body.get("execution_context")
    if context is not None:
        if not isinstance(context, dict):
            raise field_error("execution_context", "execution_context must be an object")
        found["execution_context"] = context
    if found:
        try:
            size = len(json.dumps(found, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        except (UnicodeEncodeError, ValueError):
            raise field_error("authorization_details", "authorization_details must be valid Unicode JSON") from None
        if size > MAX_EXTENSION_BYTES:
            raise field_error("authorization_details",
                              f"authorization_details and execution_context exceed {MAX_EXTENSION_BYTES} bytes")
    return found


async def _requester(services: Services, principal: Principal | None, body: dict[str, Any]) -> tuple[str, str]:
    """(e-mail, id) of whoever the grant is for: the credential's principal; the management token
    (or an unauthenticated request, when allowed) names it in ``requester``."""
    if principal is not None and not policy.may_request_for_someone_else(policy.require(principal)):  # guests: 403
        return principal.email, principal.id
    if principal is None and not services.config.grants.allow_unauthenticated:
        raise unauthorized("a grant request needs an agent token or a session")
    email = email_field(body, "requester")
    assert email is not None
    agent = await services.store.agents.get(email)
    return email, agent["agent_id"] if agent is not None else email


async def parse_request(services: Services, principal: Principal | None, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The stored grant request and its requester id: validated, requester from the credential,
    cmd_hash computed (D4, D6)."""
    requester, requester_id = await _requester(services, principal, body)
    target_host = identifier_field(body, "target_host", required=True)
    audience = identifier_field(body, "audience", required=True)
    assert target_host is not None and audience is not None
    if not _HOST.fullmatch(target_host):
        raise field_error("target_host", "target_host must not contain whitespace, slashes or control characters")
    grant_type = _grant_type(body, "once")
    duration = seconds_field(body, "duration", services.config.grants.max_duration)
    command = _string_list(body, "command", max_items=MAX_ARGS, max_len=MAX_ARG)
    if command is not None:
        if not command:
            raise field_error("command", "command must name a program")
        if not command[0]:
            raise field_error("command", "command[0] must not be empty")
        if sum(len(a.encode("utf-8")) + 1 for a in command) > MAX_COMMAND_BYTES:
            raise field_error("command", f"command is longer than {MAX_COMMAND_BYTES} bytes")
    permissions = _string_list(body, "permissions", max_items=MAX_PERMISSIONS, max_len=MAX_TEXT)
    if permissions is not None:
        if any(not p.strip() for p in permissions):
            raise field_error("permissions", "permissions must be non-empty strings")
        for permission in permissions:
            check_identifier("permissions", permission)
    if not command and not permissions:
        raise field_error("command", "a grant needs a command or permissions")
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON)
    run_as = identifier_field(body, "run_as", required=False, max_len=64)
    if run_as is not None and not _RUN_AS.fullmatch(run_as):
        raise field_error("run_as", "run_as must be a user name")
    request: dict[str, Any] = {
        "requester": requester,
        "target_host": target_host,
        "audience": audience,
        "grant_type": grant_type,
    }
    if command is not None:
        request["command"] = command
        request["cmd_hash"] = cmd_hash(command)  # a client-sent value is ignored (D4)
    if permissions is not None:
        request["permissions"] = permissions
    if duration is not None:
        request["duration"] = duration
    if reason is not None:
        request["reason"] = reason
    if run_as is not None:
        request["run_as"] = run_as
    request.update(_extensions(body))
    return request, requester_id


def reuse_key(request: dict[str, Any]) -> str:
    """What makes two timed/always requests the same grant (D6)."""
    parts = [
        request["target_host"],
        request["audience"],
        request.get("run_as"),
        request["grant_type"],
        request.get("cmd_hash"),
        sorted(request.get("permissions") or []),
    ]
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def approval_expiry(services: Services, grant_type: str, decided_at: int, duration: int | None) -> int | None:
    """``expires_at`` of an approval (D6): timed -> its duration; once -> ``grants.once_ttl`` (an
    approval nobody uses must not stay good for ever); always -> no end."""
    if grant_type == "timed":
        assert duration is not None
        return decided_at + duration * 1000
    if grant_type == "once":
        return decided_at + services.config.grants.once_ttl * 1000
    return None


# -- operations ---------------------------------------------------------------------------------


async def create(services: Services, principal: Principal | None, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Returns (response body, HTTP status): 201 for a new grant, 200 for a reused one."""
    request, requester_id = await parse_request(services, principal, body)
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
    pinned = evaluation.review if evaluation is not None else DEFAULT_REVIEW
    delegation = await covering_delegation(services, request, requester_id)
    if delegation is not None and not pinned.allow_delegation:
        delegation = None  # D13: a delegation counts only where every matched policy allows it
    if evaluation is not None and evaluation.outcome == AUTO_DENY:
        delegation = None
        grant["status"], grant["decided_by"], grant["decided_at"] = "denied", evaluation.decided_by, reader.now
        grant["decision_reason"] = evaluation.reason
        events.append("grant.denied")
    elif evaluation is not None and evaluation.outcome == AUTO_APPROVE:
        delegation = None
        grant["status"], grant["decided_by"], grant["decided_at"] = "approved", evaluation.decided_by, reader.now
        grant["decision_reason"] = evaluation.reason
        grant["expires_at"] = approval_expiry(services, request["grant_type"], reader.now, request.get("duration"))
        events.append("grant.approved")
    delegated_vote = None
    if delegation is not None and not pinned.is_default:
        # Under a policy a delegation is one vote by its delegator, counted like any other (D13).
        delegated_vote = Ballot(Voter(delegation["delegator"], delegation["delegator"]), "approve", "delegation",
                                reader.now, f"delegation {delegation['id']}")
        agent = await services.store.agents.get_by_id(requester_id)
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
    bound = OwnerBound(services.config.limits.pending_per_owner, reader.lapse)
    try:
        stored = await services.store.grants.create(
            grant, events, bound=bound if grant["status"] == "pending" else None,
            review=pinned.as_dict() if not pinned.is_default else None)
    except LimitReached:
        services.limits.on_refused("pending.owner")
        raise too_many(f"too many pending grants across this agent's owner's agents (at most {bound.limit}): "
                       "wait for decisions or withdraw some", PENDING_RETRY_AFTER) from None
    if delegated_vote is not None and delegation is None:
        await services.store.grants.add_vote(_vote_record(stored["id"], delegated_vote))
    services.events.changed()
    answer = reader.view(stored)
    if delegation is not None:
        answer.update(approved_automatically=True, auto_approval_kind="delegation")
    if delegated_vote is not None:
        answer.update(await review_view(services, stored, reader))
    else:  # nothing recorded yet: no need to read it back
        answer.update(review=reviews.review_json(pinned, stored, None, 0, reader.now // 1000),
                      approvals=reviews.approvals_json(stored, None, pinned))
    if evaluation is not None:
        if evaluation.outcome == AUTO_APPROVE:
            answer.update(approved_automatically=True, auto_approval_kind="rule")
            answer["authz_jwt"] = await mint(services, stored)
    return answer, 201


async def get(services: Services, principal: Principal, grant_id: str) -> tuple[dict[str, Any], str]:
    reader = Reader(services)
    grant = await _visible_grant(services, principal, grant_id)
    status = reader.status(grant)
    answer = view(grant, status)
    answer.update(await review_view(services, grant, reader))
    shown = answer["review"]
    extra = f"{len(answer['approvals'])}:{shown['escalation_level']}:{json.dumps(shown['requirements'])}"
    return answer, etag(grant, status, extra)


async def views_with_review(services: Services, rows: list[Grant], reader: Reader) -> list[dict[str, Any]]:
    """List items with the grant JSON's ``review`` and ``approvals`` (D13), as ``GET /api/grants/:id``
    answers them: the page's pinned reviews and votes in one batched read; the agent (for the
    tally's exclusions) is read once per requester among the grants that have votes."""
    found_reviews, found_votes = await services.store.grants.reviews_and_votes([r["id"] for r in rows])
    now_s = reader.now // 1000
    agents: dict[str, Agent | None] = {}
    out = []
    for row in rows:
        status = reader.status(row)
        record = found_reviews.get(row["id"])
        review = reviews.pinned(record)
        ballots = reviews.ballots(found_votes.get(row["id"], []))
        counted = None
        if ballots:
            if row["requester_id"] not in agents:
                agents[row["requester_id"]] = await requesting_agent(services, row)
            people = await reviews.people(services, review, [b.voter.email for b in ballots])
            counted = tally(review, reviews.grant_facts(row, agents[row["requester_id"]], status), people, ballots, now_s)
        level = record["escalation_level"] if record else 0
        out.append({**view(row, status), "review": reviews.review_json(review, row, counted, level, now_s),
                    "approvals": reviews.approvals_json(row, counted, review)})
    return out


REVIEWABLE_SCAN = 1000  # pending pinned reviews read per list to find those naming the caller (D13)


async def reviewable_ids(services: Services, principal: Principal) -> tuple[str, ...]:
    """The pending grants whose pinned policy names this person an approver through a group (at
    the escalation level announced so far): one read of the pending reviews, at most
    ``REVIEWABLE_SCAN`` of them, oldest first. The lists (GET /api/grants, the inbox) add them to
    the person's scope; a grant beyond that bound is still reachable by id and in the stream."""
    if not principal.is_person or principal.admin or reviews.review_config(services) is None:
        return ()
    email = principal.email.lower()
    found = []
    for record in await services.store.grants.pending_reviews(REVIEWABLE_SCAN):
        review = reviews.pinned(record)
        people = await reviews.people(services, review, [email])
        if reviews.named_in_groups(review, people, email, record["escalation_level"]):
            found.append(record["grant_id"])
    return tuple(found)


async def visible(services: Services, principal: Principal, grant: Grant) -> bool:
    """Who sees a grant: its requester, who may decide it by default, and the approvers its pinned
    policy names (or who voted on it, D13). The event stream asks this per event."""
    return await may_see(services, principal, grant) or await _named_reviewer(services, principal, grant)


async def list_grants(services: Services, principal: Principal, args: Any) -> dict[str, Any]:
    status = args.get("status") or None
    if status is not None:
        status = STATUS_ALIASES.get(status, status)
        if status not in STATUSES:
            raise field_error("status", f"status must be one of {', '.join(STATUSES)} (or used)")
    requester = args.get("requester") or None
    if requester is not None:
        requester = requester.strip().lower()
        if principal.is_agent and requester != principal.email:
            raise forbidden("an agent may list only its own grants")
    request = page_request(args)
    decidable = () if principal.admin or principal.is_agent else tuple(await services.store.agents.decidable_by(principal.id))
    scope = policy.grant_list_scope(principal, decidable)
    reader = Reader(services)
    also = await reviewable_ids(services, principal) if scope.requester_ids is not None else ()
    rows, has_more = await services.store.grants.list(
        lapse=reader.lapse, page=request, status=status, requester=requester, requester_ids=scope.requester_ids,
        also_ids=also,
    )
    listed = page(rows, has_more, lambda r: r)
    listed["data"] = await views_with_review(services, rows, reader)
    return listed


async def inbox(services: Services, principal: Principal, limit: int) -> dict[str, Any]:
    """The grants waiting for this person's decision (those of the agents they own or approve; all
    of them for an administrator), at most ``limit``, and the latest decided ones they could see:
    the /grants page. The same scope as GET /api/grants (``policy.grant_list_scope``)."""
    decidable = () if principal.admin else tuple(await services.store.agents.decidable_by(principal.id))
    scope = policy.grant_list_scope(principal, decidable).requester_ids
    also = await reviewable_ids(services, principal) if scope is not None else ()
    reader = Reader(services)
    pending: list[Grant] = []
    more = False
    recent: list[Grant] = []
    if scope is None or scope or also:
        pending, more = await services.store.grants.list(
            lapse=reader.lapse, page=PageRequest(limit, None), status="pending", requester_ids=scope, also_ids=also
        )
        latest, _ = await services.store.grants.list(lapse=reader.lapse, page=PageRequest(20, None), requester_ids=scope)
        recent = [g for g in latest if reader.status(g) != "pending"][:10]
    return {"pending": await views_with_review(services, pending, reader), "more_pending": more,
            "recent": [reader.view(g) for g in recent]}


def _not_pending(status: str) -> Problem:
    if status == "expired":
        return Problem(400, "grant expired before it was decided", extra={"grant_status": status})
    return Problem(400, "grant already decided", extra={"grant_status": status})


async def _transition(
    services: Services, grant: Grant, *, expect: tuple[str, ...], changes: dict[str, Any], event: str,
    reader: Reader, refuse: Callable[[str], Problem],
) -> Grant:
    """Apply a conditional transition; if another caller got there first, refuse with the state they left."""
    status = reader.status(grant)
    if status not in expect:
        raise refuse(status)
    updated = await services.store.grants.update_if(
        grant["id"], expect=expect, changes=changes, event=event, lapse=reader.lapse, now=reader.now
    )
    if updated is None:
        latest = await services.store.grants.get(grant["id"])
        raise refuse(reader.status(latest) if latest else "revoked")
    services.events.changed()
    return updated


def _vote_record(grant_id: str, ballot: Ballot) -> Any:
    return {"grant_id": grant_id, "email": ballot.voter.email.lower(), "voter_id": ballot.voter.person_id,
            "decision": ballot.decision, "via": ballot.via, "at": ballot.at, "reason": ballot.reason,
            "grant_type": ballot.grant_type, "duration": ballot.duration, "management": ballot.voter.management}


async def _review_state(services: Services, grant: Grant, status: str, now_s: int,
                        agent: Agent | None = None) -> tuple[Review, int, Tally | None, list[Ballot]]:
    """The pinned review, its announced escalation level, the tally of the recorded votes (None
    when there are none) and the votes, as of now."""
    record = await services.store.grants.review_of(grant["id"])
    review = reviews.pinned(record)
    votes = reviews.ballots(await services.store.grants.votes(grant["id"]))
    if not votes:
        return review, record["escalation_level"] if record else 0, None, votes
    if agent is None:
        agent = await requesting_agent(services, grant)
    people = await reviews.people(services, review, [b.voter.email for b in votes])
    counted = tally(review, reviews.grant_facts(grant, agent, status), people, votes, now_s)
    return review, record["escalation_level"] if record else 0, counted, votes


async def review_view(services: Services, grant: Grant, reader: Reader) -> dict[str, Any]:
    """The grant JSON's ``review`` and ``approvals`` (D13)."""
    now_s = reader.now // 1000
    review, level, counted, _ = await _review_state(services, grant, reader.status(grant), now_s)
    return {"review": reviews.review_json(review, grant, counted, level, now_s),
            "approvals": reviews.approvals_json(grant, counted, review)}


async def mint(services: Services, grant: Grant) -> str:
    """The AuthZ-JWT of an approved grant, with the approvals, policy and quorum of D13."""
    review, _, counted, _ = await _review_state(services, grant, "approved", services.clock.now_ms() // 1000)
    return await services.tokens.mint_authz(grant, reviews.jwt_claims(review, grant, counted))


def _refused(reason: str, status: str) -> Problem:
    if reason == ALREADY_DECIDED:
        return _not_pending(status)
    if reason == ALREADY_REVIEWED:
        return Problem(409, "already reviewed", extra={"reason": reason})
    return Problem(403, reason, extra={"reason": reason})


def via_of(principal: Principal, body: dict[str, Any], *, session: bool) -> str:
    """How a vote arrived: a browser session is ``web``; a bearer caller may say ``tui``."""
    if session:
        return "web"
    return "tui" if body.get("via") == "tui" else "api"


async def vote(services: Services, principal: Principal, grant_id: str, body: dict[str, Any], *,
               decision: str | None = None, via: str = "api") -> dict[str, Any]:
    """Every vote (approve, deny, review, batch; pages and the TUI call these routes) goes through
    grantd.core.review.cast_vote; the vote is recorded (one per person per grant, only while the
    grant is pending) and the tally of the votes up to it decides; finalising is the conditional
    update on ``pending``, so of concurrent final votes exactly one wins (D13)."""
    if decision is None:
        decision = body.get("decision")
        if decision not in ("approve", "deny"):
            raise field_error("decision", "decision must be approve or deny")
    verb = "approve" if decision == "approve" else "deny"
    grant = await services.store.grants.get(grant_id)
    if grant is None:
        raise not_found("grant not found")
    agent = await requesting_agent(services, grant)
    reader = Reader(services)
    now_s = reader.now // 1000
    status = reader.status(grant)
    record = await services.store.grants.review_of(grant_id)
    review = reviews.pinned(record)
    recorded = await services.store.grants.votes(grant_id)
    facts = reviews.grant_facts(grant, agent, status)
    email = principal.email.lower()
    people = await reviews.people(services, review, [email, *(v["email"] for v in recorded)])
    visible = await may_see(services, principal, grant) or reviews.may_review(
        review, facts, people, email, now_s, any(v["email"] == email for v in recorded))
    if not visible:
        raise not_found("grant not found")  # D6: who may not see it learns nothing
    if review.is_default:
        if not policy.may_decide(principal, agent, services.admin_emails):
            raise forbidden(f"not authorized to {verb}")
        # The default policy's approvers are exactly those grantd.core.policy lets decide (owner or
        # approver by their bound person id, an administrator, the management token).
        people = replace(people, admins=people.admins | {email})
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON)
    grant_type = _grant_type(body, None) if decision == "approve" else None
    duration = seconds_field(body, "duration", services.config.grants.max_duration) if decision == "approve" else None
    if decision == "approve":
        effective = grant_type or grant["request"]["grant_type"]
        if effective == "timed" and (duration or grant["request"].get("duration")) is None:
            raise field_error("duration", "duration is required for timed grants")
    ballot = Ballot(Voter(principal.id, email, management=principal.kind is Kind.MANAGEMENT,
                          agent=not principal.is_person), decision, via, reader.now, reason, grant_type, duration)
    result = cast_vote(review, facts, people, reviews.ballots(recorded), ballot, now_s)
    if not result.accepted:
        assert result.refusal is not None
        raise _refused(result.refusal.reason, status)
    outcome = await services.store.grants.add_vote(_vote_record(grant_id, ballot))
    if outcome != "recorded":
        latest = await services.store.grants.get(grant_id)
        raise _refused(ALREADY_REVIEWED if outcome == "duplicate" else ALREADY_DECIDED,
                       reader.status(latest) if latest else "revoked")
    services.events.changed()
    # Finalisation: the votes up to and including this one, re-checked against today's facts (the
    # agent's owner and approver, group members, administrators) by the same tally.
    votes = await services.store.grants.votes(grant_id)
    mine = next(i for i, v in enumerate(votes) if v["email"] == email)
    agent = await requesting_agent(services, grant)
    facts = reviews.grant_facts(grant, agent, "pending")
    people = await reviews.people(services, review, [v["email"] for v in votes])
    counted = tally(review, facts, people, reviews.ballots(votes[: mine + 1]), now_s)
    if counted.status == "pending":
        latest = await services.store.grants.get(grant_id) or grant
        return {"grant": reader.view(latest), "review": await _review_answer(services, latest, reader)}
    request = dict(grant["request"])
    if counted.status == "approved":
        if review.is_default:  # the one vote decides, its override as given (today's behaviour)
            new_type = grant_type or request["grant_type"]
            new_duration = (duration or request.get("duration")) if new_type == "timed" else None
        else:
            new_type, new_duration = counted.grant_type, counted.duration
        if new_type == "timed":
            if new_duration is None:
                raise field_error("duration", "duration is required for timed grants")
            request["duration"] = new_duration
        request["grant_type"] = new_type
        changes: dict[str, Any] = {
            "status": "approved", "decided_by": counted.decided_by if not review.is_default else principal.email,
            "decided_at": reader.now, "expires_at": approval_expiry(services, new_type, reader.now, new_duration),
            "grant_type": new_type, "request": request, "reuse_key": reuse_key(request),
        }
        event = "grant.approved"
    else:
        decider = counted.decided_by or email
        deciding = next((b for b in reviews.ballots(votes[: mine + 1])[::-1] if b.voter.email.lower() == decider), None)
        changes = {"status": "denied", "decided_by": decider if not review.is_default else principal.email,
                   "decided_at": reader.now, "decision_reason": deciding.reason if deciding else reason}
        event = "grant.denied"
    updated = await _transition(services, grant, expect=("pending",), changes=changes, event=event, reader=reader,
                                refuse=_not_pending)
    answer: dict[str, Any] = {"grant": reader.view(updated), "review": await _review_answer(services, updated, reader)}
    if updated["status"] == "approved":
        answer["authz_jwt"] = await mint(services, updated)
    return answer


async def _review_answer(services: Services, grant: Grant, reader: Reader) -> dict[str, Any]:
    found = await review_view(services, grant, reader)
    return {**found["review"], "approvals": found["approvals"]}


async def _eligible(services: Services, review: Review, facts: Any, now_s: int,
                    votes: list[Ballot]) -> list[list[dict[str, str]]]:
    """For each requirement, who may still vote for it now, with their names."""
    people = await reviews.people(services, review, await reviews.admin_people(services, review))
    lists = eligible_people(review, facts, people, now_s, votes)
    named: dict[str, str] = {}
    out = []
    for emails in lists:
        row = []
        for email in emails:
            if email not in named:
                person = await services.store.people.get(email)
                named[email] = person["name"] if person is not None else ""
            row.append({"email": email, "name": named[email]})
        out.append(row)
    return out


async def reviewers(services: Services, principal: Principal, grant_id: str) -> dict[str, Any]:
    """``GET /api/grants/:id/reviewers`` (D13): each requirement with who may still vote for it."""
    grant = await _visible_grant(services, principal, grant_id)  # 404 to who may not see it
    reader = Reader(services)
    now_s = reader.now // 1000
    status = reader.status(grant)
    review, level, counted, votes = await _review_state(services, grant, status, now_s)
    facts = reviews.grant_facts(grant, await requesting_agent(services, grant), status)
    shown = reviews.review_json(review, grant, counted, level, now_s)
    eligible = await _eligible(services, review, facts, now_s, votes) if status == "pending" else [
        [] for _ in review.requirements]
    for requirement, people in zip(shown["requirements"], eligible, strict=True):
        requirement["missing"] = max(0, requirement["approve"] - len(requirement["approvals"]))
        requirement["eligible"] = people
    return {"grant_id": grant["id"], "status": status, "requirements": shown["requirements"],
            "escalation_level": shown["escalation_level"], "next_escalation_at": shown["next_escalation_at"]}


async def approval_panel(services: Services, principal: Principal, grant_id: str) -> dict[str, Any]:
    """What the approval page (and the TUI's detail view) shows about a grant's review (D13): the
    grant, its requirements with the votes so far and who may still approve (as
    ``GET /api/grants/:id/reviewers``), every recorded vote, a rule's decision, and whether this
    viewer may vote now, else why not: the reason ``cast_vote`` would answer with its 403/409, so
    the page shows it instead of buttons that would fail. 404 to who may not see the grant."""
    grant = await _visible_grant(services, principal, grant_id)
    reader = Reader(services)
    now_s = reader.now // 1000
    status = reader.status(grant)
    agent = await requesting_agent(services, grant)
    review = reviews.pinned(await services.store.grants.review_of(grant["id"]))
    recorded = await services.store.grants.votes(grant["id"])
    shown = await reviewers(services, principal, grant_id)
    email = principal.email.lower()
    refusal: str | None = None
    if status != "pending":
        refusal = ALREADY_DECIDED
    elif review.is_default:
        if not policy.may_decide(principal, agent, services.admin_emails):
            refusal = "only the agent's owner or approver, or an administrator, may decide it"
    elif any(v["email"] == email for v in recorded):
        refusal = ALREADY_REVIEWED
    else:
        facts = reviews.grant_facts(grant, agent, status)
        people = await reviews.people(services, review, [email])
        probe = Ballot(Voter(principal.id, email, management=principal.kind is Kind.MANAGEMENT,
                             agent=not principal.is_person), "approve", "web", reader.now, "(probe)")
        found = check_voter(review, facts, people, probe, escalation_level(review, grant["created_at"] // 1000, now_s))
        refusal = found.reason if found is not None else None
    decided_by = str(grant.get("decided_by") or "")
    return {
        "grant": reader.view(grant), "policy": not review.is_default, "policy_ids": list(review.policy_ids),
        "requirements": shown["requirements"], "escalation_level": shown["escalation_level"],
        "votes": [{"email": v["email"], "decision": v["decision"], "at": v["at"], "via": v["via"],
                   "reason": v["reason"]} for v in recorded],
        "rule": reviews.rule_approval(grant) or (
            {"rule": decided_by[len(reviews.RULE_PREFIX):], "reason": grant.get("decision_reason")}
            if status == "denied" and decided_by.startswith(reviews.RULE_PREFIX) else None),
        "reason_required": review.require_reason,
        "may_vote": refusal is None, "refusal": refusal,
    }


async def evaluate_policies(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /api/policies/evaluate`` (D13): what a grant request would meet, creating nothing."""
    policy.may_evaluate_policies(principal)
    requester = identifier_field(body, "requester", required=True)
    assert requester is not None
    agent = await services.store.agents.get(requester.strip().lower()) or await services.store.agents.get(requester)
    email = agent["email"] if agent is not None else requester.strip().lower()
    if agent is None and "@" not in email:
        raise field_error("requester", "requester must be an agent's e-mail or id, or a person's e-mail")
    request, requester_id = await parse_request(services, management(services.config.admin.management_identity),
                                                {**body, "requester": email})
    config = reviews.review_config(services)
    facts_request = reviews.request_facts(request, email, requester_id)
    found = evaluate(config, facts_request) if config is not None else None
    review = found.review if found is not None else DEFAULT_REVIEW
    now = services.clock.now_ms()
    grant: Any = {"requester_id": requester_id, "requester": email, "created_at": now, "request": request}
    facts = reviews.grant_facts(grant, agent, "pending")
    eligible = await _eligible(services, review, facts, now // 1000, [])
    return {
        "outcome": found.outcome if found is not None else NEEDS_REVIEW,
        "rules_matched": list(found.rules_matched) if found is not None else [],
        "policies_matched": list(found.policies_matched) if found is not None else [],
        "reason": found.reason if found is not None else None,
        "policy_hash": review.policy_hash,
        "requirements": [{"id": r.id, "approve": r.approve, "deny": r.deny, "groups": list(r.groups)}
                         for r in review.requirements],
        "eligible_approvers": [{"requirement": r.id, "eligible": people}
                               for r, people in zip(review.requirements, eligible, strict=True)],
    }


async def approve(services: Services, principal: Principal, grant_id: str, body: dict[str, Any],
                  via: str = "api") -> dict[str, Any]:
    return await vote(services, principal, grant_id, body, decision="approve", via=via)


async def deny(services: Services, principal: Principal, grant_id: str, body: dict[str, Any],
               via: str = "api") -> dict[str, Any]:
    return await vote(services, principal, grant_id, body, decision="deny", via=via)


async def review(services: Services, principal: Principal, grant_id: str, body: dict[str, Any],
                 via: str = "api") -> dict[str, Any]:
    """``POST /api/grants/:id/review {decision, reason?, grant_type?, duration?}`` (D13)."""
    return await vote(services, principal, grant_id, body, via=via)


def _not_revocable(status: str) -> Problem:
    return Problem(400, f"grant cannot be revoked: it is {status}", extra={"grant_status": status})


async def revoke(services: Services, principal: Principal, grant_id: str, body: dict[str, Any]) -> dict[str, Any]:
    grant = await _visible_grant(services, principal, grant_id)
    if not policy.may_revoke_grant(principal, grant, await requesting_agent(services, grant), services.admin_emails):
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
            services, grant, expect=("approved", "pending"), changes=changes, event="grant.revoked", reader=reader,
            refuse=_not_revocable,
        )
    except Problem as problem:
        if problem.extra.get("grant_status") == "revoked":  # a concurrent revoke won
            latest = await services.store.grants.get(grant_id)
            if latest is not None:
                return {"grant": reader.view(latest)}
        raise
    return {"grant": reader.view(updated)}


async def token(services: Services, principal: Principal, grant_id: str) -> dict[str, Any]:
    grant = await _visible_grant(services, principal, grant_id)
    if not policy.may_fetch_grant_token(principal, grant):
        raise forbidden("only the requester may fetch the grant's token")
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        raise Problem(400, f"grant is not approved (it is {status})", extra={"grant_status": status})
    return {"authz_jwt": await mint(services, grant), "grant": {"id": grant["id"], "status": status}}


def token_matches_grant(claims: dict[str, Any], grant: Grant) -> bool:
    """An AuthZ-JWT speaks for its grant only with the grant's own audience, host and requester."""
    request = grant["request"]
    return (claims.get("aud") == request["audience"] and claims.get("target_host") == request["target_host"]
            and claims.get("sub") == grant["requester"])


async def consume(services: Services, presented: str | None, grant_id: str) -> dict[str, Any]:
    if presented is None:
        raise unauthorized("the grant's AuthZ-JWT is required as bearer token")
    try:
        claims = await services.tokens.verify_authz(presented)
    except TokenError as exc:
        raise unauthorized(f"invalid token: {exc}", invalid_token=True) from None
    if claims["grant_id"] != grant_id:
        raise bad_request("the token belongs to another grant")
    grant = await services.store.grants.get(grant_id)
    if grant is None:
        raise not_found("grant not found")
    if not token_matches_grant(claims, grant):
        raise unauthorized("invalid token: it does not match the grant", invalid_token=True)
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        return {"error": UNUSABLE.get(status, "not_approved"), "status": status}
    if grant["grant_type"] != "once":
        return {"status": "valid", "grant": reader.view(grant)}
    updated = await services.store.grants.update_if(
        grant_id, expect=("approved",), changes={"status": "consumed", "used_at": reader.now},
        event="grant.consumed", lapse=reader.lapse, now=reader.now,
    )
    if updated is None:  # someone else consumed (or revoked) it between our read and our write
        latest = await services.store.grants.get(grant_id)
        status = reader.status(latest) if latest else "revoked"
        return {"error": UNUSABLE.get(status, "not_approved"), "status": status}
    services.events.changed()
    services.tokens.forget_authz(presented)
    return {"status": "consumed", "grant": reader.view(updated)}


async def verify_token(services: Services, body: dict[str, Any]) -> dict[str, Any]:
    """No side effects: valid only for a well-signed, unexpired token whose grant is still usable."""
    presented = body.get("token")
    if not isinstance(presented, str) or not presented.strip():
        return {"valid": False, "error": "token is required"}
    try:
        claims = await services.tokens.verify_authz(presented.strip())
    except TokenError as exc:
        return {"valid": False, "error": str(exc)}
    grant = await services.store.grants.get(claims["grant_id"])
    if grant is None:
        return {"valid": False, "error": "grant not found"}
    if not token_matches_grant(claims, grant):
        return {"valid": False, "error": "token does not match the grant"}
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        return {"valid": False, "error": UNUSABLE.get(status, "not_approved"), "status": status}
    return {"valid": True, "claims": claims, "grant": reader.view(grant)}


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
        result: dict[str, Any] = {"id": ident if isinstance(ident, str) else None,
                                  "action": action if isinstance(action, str) else None}
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


SWEEP_REVIEWS = 1000  # pending grants under a policy looked at per sweep (oldest first)


async def sweep_expired(services: Services) -> list[Grant]:
    """Persist expiries (each with a grant.expired event) and trim old events; then the approval
    policies' schedule (D13): escalation levels that came due and pinned ``pending_ttl`` timeouts."""
    now = services.clock.now_ms()
    expired = await services.store.grants.expire(
        services.grant_lapse(), now, now - services.config.grants.events_retention * 1000
    )
    if expired:
        services.events.changed()
    await sweep_reviews(services)  # also without policies now: grants pinned before a reload still time out
    return expired


async def sweep_reviews(services: Services) -> int:
    """Escalate and time out pending grants under a policy. Every process sweeps; the conditional
    updates (``escalate_if``, ``update_if`` on pending) make each level and each timeout happen once,
    across processes and nodes. Returns the number of changes this process won."""
    reader = Reader(services)
    now_s = reader.now // 1000
    won = 0
    for record in await services.store.grants.pending_reviews(SWEEP_REVIEWS):
        review = reviews.pinned(record)
        if not review.escalations and review.pending_ttl is None:
            continue
        grant = await services.store.grants.get(record["grant_id"])
        if grant is None or reader.status(grant) != "pending":
            continue
        created_s = grant["created_at"] // 1000
        ends = timeout_at(review, created_s)
        if ends is not None and now_s >= ends:
            status, reason = timeout_outcome(review)
            changes: dict[str, Any] = {"status": status, "decision_reason": reason}
            if status == "denied":
                changes["decided_at"] = reader.now  # decided by nobody: decided_by stays null
            updated = await services.store.grants.update_if(
                grant["id"], expect=("pending",), changes=changes, event=f"grant.{status}", lapse=reader.lapse,
                now=reader.now)
            won += updated is not None
            continue
        due = escalations_due(review, created_s, now_s, record["escalation_level"])
        if due and await services.store.grants.escalate_if(grant["id"], record["escalation_level"], due[-1].level,
                                                           reader.now):
            won += 1
    if won:
        services.events.changed()
    return won
