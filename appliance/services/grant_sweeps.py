"""The sweeps every server process runs (grantd.web.app): expiries, and the approval policies'
schedule (D13) — escalation levels that came due, with their notices (D15), and pinned timeouts."""

from __future__ import annotations

from typing import Any

from grantd.core.review import Review, escalations_due, timeout_at, timeout_outcome
from grantd.services import notify
from grantd.services import review as reviews
from grantd.services.context import Services
from grantd.services.grants import Reader, requesting_agent
from grantd.store.records import Grant

SWEEP_REVIEWS = 1000  # pinned reviews that came due looked at per sweep (the earliest due first)


async def sweep_expired(services: Services) -> list[Grant]:
    """Persist expiries (each with a grant.expired event) and trim old events; then the approval
    policies' schedule (D13): escalation levels that came due and pinned ``pending_ttl`` timeouts."""
    now = services.clock.now_ms()
    expired = await services.store.grants.expire(
        services.grant_lapse(), now, now - services.config.grants.events_retention * 1000
    )
    if expired:
        services.events.changed()
        # D15: a pending grant that lapsed is over too; those told it waited are told so (written
        # after the expiry's transaction: the store's expire changes many grants at once; only the
        # process whose expire changed a grant gets it back, so each is told once)
        # Only grants that lapsed undecided: an approved grant that ran out was resolved at its approval.
        undecided = [g for g in expired if g.get("decided_at") is None]
        notices = [n for g in undecided for n in await notify.resolved(services, g, now)]
        if notices:
            await services.store.notify.add(notices)
            notify.wake(services, notices)
    await sweep_reviews(services)  # also without policies now: grants pinned before a reload still time out
    return expired


async def sweep_reviews(services: Services) -> int:
    """Escalate and time out pending grants under a policy. Every process sweeps; the conditional
    updates (``escalate_if``, ``update_if`` on pending) make each level and each timeout happen once,
    across processes and nodes. Only the reviews that came due are read (``due_reviews``); each then
    gets its next due time, or none once its grant is no longer pending. Returns the number of
    changes this process won."""
    reader = Reader(services)
    now_s = reader.now // 1000
    won = 0
    for record in await services.store.grants.due_reviews(reader.now, SWEEP_REVIEWS):
        review = reviews.pinned(record)
        grant = await services.store.grants.get(record["grant_id"])
        next_due: int | None = None  # no longer pending (or timed out now): never looked at again
        if grant is not None and reader.status(grant) == "pending":
            ends = timeout_at(review, grant["created_at"] // 1000)
            if ends is not None and now_s >= ends:
                won += await _time_out(services, reader, grant, review)
            else:
                level, escalated = await _escalate(
                    services, reader, grant, review, record["escalation_level"]
                )
                won += escalated
                # a sweep that lost the escalation to another keeps the level it read: due again
                # sooner, never later
                next_due = reviews.review_due(review, grant, level)
        await services.store.grants.set_review_due(record["grant_id"], next_due)
    if won:
        services.events.changed()
        notify.wake(services)
    return won


async def _escalate(
    services: Services, reader: Reader, grant: Grant, review: Review, seen: int
) -> tuple[int, bool]:
    """Announce the levels past ``seen`` that came due (once, of any sweeps): (the level the grant
    is known to be at, whether this sweep announced it)."""
    due = escalations_due(review, grant["created_at"] // 1000, reader.now // 1000, seen)
    if not due:
        return seen, False
    level = due[-1].level
    agent = await requesting_agent(services, grant) if services.notify_channels else None
    notices = await notify.escalated(services, grant, review, agent, seen, level, reader.now)
    if await services.store.grants.escalate_if(grant["id"], seen, level, reader.now, notices=notices):
        return level, True
    return seen, False


async def _time_out(services: Services, reader: Reader, grant: Grant, review: Review) -> bool:
    """The pinned ``pending_ttl`` passed: the grant is denied or expires (once, of any sweeps)."""
    status, reason = timeout_outcome(review)
    changes: dict[str, Any] = {"status": status, "decision_reason": reason}
    if status == "denied":
        changes["decided_at"] = reader.now  # decided by nobody: decided_by stays null
    updated = await services.store.grants.update_if(
        grant["id"],
        expect=("pending",),
        changes=changes,
        event=f"grant.{status}",
        lapse=reader.lapse,
        now=reader.now,
        notices=await notify.resolved(services, grant, reader.now),
    )
    return updated is not None
