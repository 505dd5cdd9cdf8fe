"""The grant lists: ``GET /api/grants`` and the /grants page's inbox, each item the grant JSON
with its ``review`` and ``approvals`` (D13) as ``GET /api/grants/:id`` shows them. Split from
``grantd.services.grants``, whose reading and visibility rules they use."""

from __future__ import annotations

from typing import Any

from grantd.core import policy
from grantd.core.errors import forbidden
from grantd.core.fields import field_error
from grantd.core.paging import PageRequest, page, page_request
from grantd.core.principals import Principal
from grantd.core.review import People, review_from_dict, tally
from grantd.services import review as reviews
from grantd.services.agents import agent_or_email_field
from grantd.services.context import Services
from grantd.services.grant_decisions import requesting_agent
from grantd.services.grants import STATUS_ALIASES, STATUSES, Reader, view
from grantd.store.records import Agent, Grant


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
            counted = tally(
                review, reviews.grant_facts(row, agents[row["requester_id"]], status), people, ballots, now_s
            )
        level = record["escalation_level"] if record else 0
        out.append(
            {
                **view(row, status),
                "review": reviews.review_json(review, row, counted, level, now_s),
                "approvals": reviews.approvals_json(row, counted, review),
            }
        )
    return out


REVIEWABLE_SCAN = 1000  # pending pinned grants looked through per list for those naming the caller (D13)


async def reviewable_ids(services: Services, principal: Principal) -> tuple[str, ...]:
    """The pending grants whose pinned policy names this person an approver through a group (at
    the escalation level announced so far): the ``REVIEWABLE_SCAN`` oldest pending pinned grants,
    read grouped by their review and level (``pending_review_groups``). The lists (GET
    /api/grants, the inbox) add them to the person's scope; a grant beyond that bound is still
    reachable by id and in the stream.

    Grants pinned to the same policy set carry the same review: each group is judged once, and
    the person is read once per kind of review (issue 27: 500 pending grants under one policy set
    cost a person's list 28 ms when each was judged apart)."""
    if not principal.is_person or principal.admin or reviews.review_config(services) is None:
        return ()
    email = principal.email.lower()
    people: dict[bool, People] = {}  # by whether the review names @admins: all a review asks of them
    found: list[str] = []
    for group in await services.store.grants.pending_review_groups(REVIEWABLE_SCAN):
        review = review_from_dict(group["review"])
        names_admins = reviews.names_admins(review)
        if names_admins not in people:
            people[names_admins] = await reviews.people(services, review, [email])
        if reviews.named_in_groups(review, people[names_admins], email, group["escalation_level"]):
            found.extend(group["grant_ids"])
    return tuple(found)


async def list_grants(services: Services, principal: Principal, args: Any) -> dict[str, Any]:
    status = args.get("status") or None
    if status is not None:
        status = STATUS_ALIASES.get(status, status)
        if status not in STATUSES:
            raise field_error("status", f"status must be one of {', '.join(STATUSES)} (or used)")
    requester = args.get("requester") or None
    if requester is not None:
        requester = await agent_or_email_field(services, {"requester": requester.strip()}, "requester")
        if principal.is_agent and requester != principal.email:
            raise forbidden("an agent may list only its own grants")
    request = page_request(args)
    decidable = (
        ()
        if principal.admin or principal.is_agent
        else tuple(await services.store.agents.decidable_by(principal.id))
    )
    scope = policy.grant_list_scope(principal, decidable)
    reader = Reader(services)
    also = await reviewable_ids(services, principal) if scope.requester_ids is not None else ()
    rows, has_more = await services.store.grants.list(
        lapse=reader.lapse,
        page=request,
        status=status,
        requester=requester,
        requester_ids=scope.requester_ids,
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
            lapse=reader.lapse,
            page=PageRequest(limit, None),
            status="pending",
            requester_ids=scope,
            also_ids=also,
        )
        latest, _ = await services.store.grants.list(
            lapse=reader.lapse, page=PageRequest(20, None), requester_ids=scope
        )
        recent = [g for g in latest if reader.status(g) != "pending"][:10]
    return {
        "pending": await views_with_review(services, pending, reader),
        "more_pending": more,
        "recent": [reader.view(g) for g in recent],
    }
