"""Who may still approve a grant, and what a would-be voter is told (D13): the answers of
``GET /api/grants/:id/reviewers``, the approval page's and the TUI's review panel, and
``POST /api/policies/evaluate`` (what a request would meet, creating nothing). Read-only: every
vote goes through ``grantd.services.grants.vote``."""

from __future__ import annotations

from typing import Any

from grantd.core import policy
from grantd.core.errors import not_found
from grantd.core.fields import field_error, identifier_field
from grantd.core.principals import Kind, Principal, management
from grantd.core.review import DEFAULT_REVIEW, NEEDS_REVIEW, Ballot, Review, Voter, eligible_people, evaluate
from grantd.core.review.evaluate import RULE_PREFIX
from grantd.core.review.votes import ALREADY_DECIDED, ALREADY_REVIEWED, check_voter, escalation_level
from grantd.services import review as reviews
from grantd.services.context import Services
from grantd.services.grant_decisions import review_state
from grantd.services.grant_requests import parse_request
from grantd.services.grants import Reader, _visible_grant, requesting_agent


async def eligible_names(
    services: Services, review: Review, facts: Any, now_s: int, votes: list[Ballot]
) -> list[list[dict[str, str]]]:
    """For each requirement, who may still vote for it now, with their names."""
    people = await reviews.people_with_admins(services, review)
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
    review, level, counted, votes = await review_state(services, grant, status, now_s)
    facts = reviews.grant_facts(grant, await requesting_agent(services, grant), status)
    shown = reviews.review_json(review, grant, counted, level, now_s)
    eligible = (
        await eligible_names(services, review, facts, now_s, votes)
        if status == "pending"
        else [[] for _ in review.requirements]
    )
    for requirement, people in zip(shown["requirements"], eligible, strict=True):
        requirement["missing"] = max(0, requirement["approve"] - len(requirement["approvals"]))
        requirement["eligible"] = people
    return {
        "grant_id": grant["id"],
        "status": status,
        "requirements": shown["requirements"],
        "escalation_level": shown["escalation_level"],
        "next_escalation_at": shown["next_escalation_at"],
    }


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
        probe = Ballot(
            Voter(
                principal.id,
                email,
                management=principal.kind is Kind.MANAGEMENT,
                agent=not principal.is_person,
            ),
            "approve",
            "web",
            reader.now,
            "(probe)",
        )
        found = check_voter(
            review, facts, people, probe, escalation_level(review, grant["created_at"] // 1000, now_s)
        )
        refusal = found.reason if found is not None else None
    decided_by = str(grant.get("decided_by") or "")
    return {
        "grant": reader.view(grant),
        "policy": not review.is_default,
        "policy_ids": list(review.policy_ids),
        "requirements": shown["requirements"],
        "escalation_level": shown["escalation_level"],
        "votes": [
            {
                "email": v["email"],
                "decision": v["decision"],
                "at": v["at"],
                "via": v["via"],
                "reason": v["reason"],
            }
            for v in recorded
        ],
        "rule": reviews.rule_approval(grant)
        or (
            {"rule": decided_by[len(RULE_PREFIX) :], "reason": grant.get("decision_reason")}
            if status == "denied" and decided_by.startswith(RULE_PREFIX)
            else None
        ),
        "reason_required": review.require_reason,
        "may_vote": refusal is None,
        "refusal": refusal,
    }


async def evaluate_policies(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """``POST /api/policies/evaluate`` (D13): what a grant request would meet, creating nothing."""
    policy.may_evaluate_policies(principal)
    requester = identifier_field(body, "requester", required=True)
    assert requester is not None
    agent = await services.store.agents.get(requester.strip().lower()) or await services.store.agents.get(
        requester
    )
    email = agent["email"] if agent is not None else requester.strip().lower()
    if agent is None and "@" not in email:
        raise field_error("requester", "requester must be an agent's e-mail or id, or a person's e-mail")
    if (
        agent is None
        and email != services.config.admin.management_identity.lower()
        and await services.store.people.get(email) is None
    ):
        raise not_found("agent not found")  # D2: an unknown agent is 404 (a person may be named too)
    request, requester_id = await parse_request(
        services, management(services.config.admin.management_identity), {**body, "requester": email}
    )
    config = reviews.review_config(services)
    facts_request = reviews.request_facts(request, email, requester_id)
    found = evaluate(config, facts_request) if config is not None else None
    review = found.review if found is not None else DEFAULT_REVIEW
    now = services.clock.now_ms()
    grant: Any = {"requester_id": requester_id, "requester": email, "created_at": now, "request": request}
    facts = reviews.grant_facts(grant, agent, "pending")
    eligible = await eligible_names(services, review, facts, now // 1000, [])
    return {
        "outcome": found.outcome if found is not None else NEEDS_REVIEW,
        "rules_matched": list(found.rules_matched) if found is not None else [],
        "policies_matched": list(found.policies_matched) if found is not None else [],
        "reason": found.reason if found is not None else None,
        "policy_hash": review.policy_hash,
        "requirements": [
            {"id": r.id, "approve": r.approve, "deny": r.deny, "groups": list(r.groups)}
            for r in review.requirements
        ],
        "eligible_approvers": [
            {"requirement": r.id, "eligible": people}
            for r, people in zip(review.requirements, eligible, strict=True)
        ],
    }
