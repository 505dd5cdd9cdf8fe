"""Approval policies at run time (D13): the loaded `[[groups]]`, `[[rules]]`, `[[policies]]`
(``config.extra["review"]``), the facts grantd.core.review needs, gathered from the store, and the
JSON the grant, the vote answers and the AuthZ-JWT carry. The decisions themselves are
grantd.core.review's (``evaluate``, ``cast_vote``, ``tally``): this module only feeds them.

Times: grantd.core.review counts seconds (``after``, ``pending_ttl``), grants store milliseconds;
the facts handed in are in seconds, the votes' ``at`` in milliseconds as every other time in JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grantd.core.review import (
    DEFAULT_REVIEW,
    Ballot,
    GrantFacts,
    People,
    RequestFacts,
    Review,
    ReviewConfig,
    Tally,
    Voter,
    next_escalation_at,
    next_review_due,
    review_from_dict,
)
from grantd.core.review.evaluate import RULE_PREFIX, Evaluation, pin
from grantd.core.review.votes import eligible_for
from grantd.services.context import Services
from grantd.store.records import Agent, Grant, GrantReview, Vote


def review_config(services: Services) -> ReviewConfig | None:
    """The loaded policies, or None when there are no rules and no policies: then every grant
    follows the default policy and grant creation does not evaluate anything (nothing changes)."""
    config = services.config.extra.get("review")
    if not isinstance(config, ReviewConfig) or not (config.rules or config.policies):
        return None
    return config


def pinned_review(
    config: ReviewConfig | None, evaluation: Evaluation | None, policy_id: str | None
) -> Review:
    """The review a new grant is pinned to: the matched policies (or the default one); the policy
    ``policy_id`` names instead, whatever matches (an MCP resource's grant scope names one, D17;
    deny and approve rules still apply)."""
    named = tuple(p for p in config.policies if p.id == policy_id) if config is not None and policy_id else ()
    if named:
        return pin(named)
    return evaluation.review if evaluation is not None else DEFAULT_REVIEW


def request_facts(request: dict[str, Any], agent_email: str, agent_id: str) -> RequestFacts:
    command = request.get("command")
    facts: dict[str, Any] = {
        "target_host": request["target_host"],
        "audience": request["audience"],
        "agent_email": agent_email,
        "agent_id": agent_id,
        "grant_type": request["grant_type"],
        "argv": tuple(command) if command is not None else None,
        "duration": request.get("duration"),
    }
    if request.get("run_as"):
        facts["run_as"] = request["run_as"]
    return RequestFacts(**facts)


def pinned(record: GrantReview | None) -> Review:
    return review_from_dict(record["review"]) if record is not None else DEFAULT_REVIEW


def review_due(review: Review, grant: Grant, level: int) -> int | None:
    """When (ms) the sweep must next look at ``grant``, pinned to ``review`` with its levels up to
    ``level`` announced (``GrantStore.due_reviews``): None once it is no longer pending or nothing
    is left to escalate or time out. Whole seconds, as the sweep counts them: never later."""
    if grant["status"] != "pending":
        return None
    due = next_review_due(review, grant["created_at"] // 1000, level)
    return None if due is None else due * 1000


def grant_facts(grant: Grant, agent: Agent | None, status: str) -> GrantFacts:
    request = grant["request"]
    return GrantFacts(
        requester_id=grant["requester_id"],
        requester_email=grant["requester"],
        owner=agent["owner"] if agent is not None else None,
        approver=agent["approver"] if agent is not None else None,
        created_at=grant["created_at"] // 1000,
        grant_type=request["grant_type"],
        duration=request.get("duration"),
        status=status,
    )


def names_admins(review: Review) -> bool:
    """Whether the review names `@admins` (in a block or an escalation's ``add_approvers``): then
    ``people`` reads whether the voters are people marked admin."""
    return any("@admins" in r.groups for r in review.requirements) or any(
        "@admins" in e.add_approvers for e in review.escalations
    )


def _members(services: Services) -> Mapping[str, frozenset[str]]:
    config = services.config.extra.get("review")
    return config.members if isinstance(config, ReviewConfig) else {}


async def people(services: Services, review: Review, emails: Iterable[str]) -> People:
    """Group members from today's config, and the administrators among ``emails`` (admin.emails,
    the management identity, people marked admin): the voters whose eligibility is checked."""
    admins = set(services.admin_emails)
    others = sorted({e.lower() for e in emails} - admins) if names_admins(review) else []
    if others:
        found = await services.store.people.get_many(others)
        admins.update(e for e, p in found.items() if p["admin"] and p["status"] == "active")
    return People(members=_members(services), admins=frozenset(admins))


ADMIN_SCAN = 2000  # administrators read for `@admins` in a reviewers list or a grant's notices


async def people_with_admins(services: Services, review: Review) -> People:
    """``people`` with every administrator, for whom may approve at all (a grant's notices, its
    reviewers list): the active people marked admin, read once (bounded) when the review names
    `@admins`."""
    admins = set(services.admin_emails)
    if names_admins(review):
        admins.update(await services.store.people.admins(ADMIN_SCAN))
    return People(members=_members(services), admins=frozenset(admins))


def ballot_of(vote: Vote) -> Ballot:
    return Ballot(
        Voter(vote["voter_id"], vote["email"], management=vote["management"]),
        vote["decision"],
        vote["via"],
        vote["at"],
        vote["reason"],
        vote["grant_type"],
        vote["duration"],
    )


def ballots(votes: Sequence[Vote]) -> list[Ballot]:
    return [ballot_of(v) for v in votes]


def may_review(
    review: Review, grant: GrantFacts, people_now: People, email: str, now_s: int, voted: bool
) -> bool:
    """Someone a pinned policy names as an approver (or who voted) sees the grant, so they can vote
    and see why (exclusions aside: they are told why with a 403, D13)."""
    if review.is_default:
        return False
    if voted:
        return True
    from grantd.core.review import escalation_level

    return bool(
        eligible_for(review, grant, people_now, email, escalation_level(review, grant.created_at, now_s))
    )


def named_in_groups(review: Review, people_now: People, email: str, level: int) -> bool:
    """Whether a pinned review names ``email`` through a ``[[groups]]`` id (or ``@admins``) in a
    block, at the escalation ``level``: the lists' question "which other grants may this person
    approve" (D13). ``@owner``/``@approver`` need the grant's agent and are already the person's
    own scope (the agents they own or approve)."""
    if review.is_default:
        return False
    nobody = GrantFacts(
        requester_id="", requester_email="", owner=None, approver=None, created_at=0, grant_type="once"
    )
    return bool(eligible_for(review, nobody, people_now, email, level))


def rule_approval(grant: Grant) -> dict[str, Any] | None:
    """A rule's decision as ``approvals`` show it (D13: ``{kind: "rule", rule, reason}``, for an
    approve rule and a deny rule alike), or None when no rule decided the grant."""
    decided_by = grant.get("decided_by") or ""
    if not decided_by.startswith(RULE_PREFIX):
        return None
    return {
        "kind": "rule",
        "rule": decided_by[len(RULE_PREFIX) :],
        "reason": grant.get("decision_reason"),
        "via": "rule",
        "at": grant.get("decided_at"),
    }


def approvals_json(
    grant: Grant, counted: Tally | None, review: Review = DEFAULT_REVIEW
) -> list[dict[str, Any]]:
    """``approvals`` of the grant JSON: the approving votes that count, in order; a rule's decision;
    a delegation's approval under the default policy; the one vote of a default-policy decision."""
    rule = rule_approval(grant)
    if rule is not None:
        return [rule]
    if counted is not None and counted.counted:
        return [
            {
                "sub": c.ballot.voter.email.lower(),
                "at": c.ballot.at,
                "via": c.ballot.via,
                "requirement": c.requirement,
            }
            for c in counted.counted
            if c.ballot.decision == "approve"
        ]
    if grant.get("delegation_id") and grant.get("decided_by"):
        return [
            {
                "sub": str(grant["decided_by"]).lower(),
                "at": grant.get("decided_at"),
                "via": "delegation",
                "requirement": review.requirements[0].id,
            }
        ]
    return []


def review_json(
    review: Review, grant: Grant, counted: Tally | None, level: int, now_s: int
) -> dict[str, Any]:
    states = {s.id: s for s in counted.requirements} if counted is not None else {}
    requirements = []
    for r in review.requirements:
        state = states.get(r.id)
        requirements.append(
            {
                "id": r.id,
                "approve": r.approve,
                "deny": r.deny,
                "approvals": list(state.approvals) if state else [],
                "denials": list(state.denials) if state else [],
            }
        )
    if requirements and grant.get("delegation_id") and grant.get("decided_by"):
        if not any(r["approvals"] for r in requirements):
            # a delegation that approved at creation, under the default policy: its one vote fills the
            # requirement, as approvals_json shows it (no vote row is written for it)
            requirements[0]["approvals"] = [str(grant["decided_by"]).lower()]
    return {
        "policy_ids": list(review.policy_ids),
        "policy_hash": review.policy_hash,
        "requirements": requirements,
        "escalation_level": level,
        "next_escalation_at": _ms(next_escalation_at(review, grant["created_at"] // 1000, now_s)),
    }


def _ms(seconds: int | None) -> int | None:
    return None if seconds is None else seconds * 1000


def jwt_claims(
    review: Review, grant: Grant, counted: Tally | None, shown: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """What the AuthZ-JWT adds (D13): approvals [{sub, at, via, req}], policy {ids, hash}, quorum.
    ``shown``: ``approvals_json(grant, counted, review)``, when the caller made it for its answer."""
    approvals = []
    for item in approvals_json(grant, counted, review) if shown is None else shown:
        if "kind" in item:
            # D13's rule entry ({kind, rule, reason}) with the {sub, at, via, req} every entry has:
            # grantd elevate reads kind and rule (a rule-approved grant runs only where
            # allowed_approvers holds policy:<rule id> or policy:*), other verifiers sub and via
            approvals.append(
                {
                    "kind": "rule",
                    "rule": item["rule"],
                    "sub": f"{RULE_PREFIX}{item['rule']}",
                    "at": _s(item["at"]),
                    "via": "rule",
                    "req": None,
                    "reason": item["reason"],
                }
            )
        else:
            approvals.append(
                {"sub": item["sub"], "at": _s(item["at"]), "via": item["via"], "req": item["requirement"]}
            )
    if not approvals and grant.get("decided_by"):  # a default-policy decision recorded before votes were
        approvals.append(
            {
                "sub": str(grant["decided_by"]).lower(),
                "at": _s(grant.get("decided_at")),
                "via": "api",
                "req": "default",
            }
        )
    need = sum(r.approve for r in review.requirements)
    have = (
        need
        if rule_approval(grant) is not None
        else (
            int(counted.quorum.split("/")[0])
            if counted is not None and counted.counted
            else min(len(approvals), need)
        )
    )
    return {
        "approvals": approvals,
        "policy": {"ids": list(review.policy_ids), "hash": review.policy_hash},
        "quorum": f"{have}/{need}",
    }


def _s(ms: Any) -> int | None:
    return int(ms) // 1000 if isinstance(ms, int) else None
