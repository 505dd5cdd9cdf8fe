"""Who is told what about a grant (D15): the outbox rows a grant change writes in its own
transaction. Delivery is grantd.services.notify_delivery, off the request path.

- ``requested``: when a grant waits for a decision, each approver eligible now (D13:
  ``eligible_people`` of its pinned review; the management identity is no mailbox) on each channel
  the matching ``[[notify.routes]]`` names (grantd.core.notify_routes);
- ``escalated``: when escalation levels are reached, the targets of their ``notify`` and the
  approvers their ``add_approvers`` bring in, on the channels routed for that level;
- ``resolved``: when the grant is decided (approved, denied, revoked, timed out), everyone who was
  told it waited, on the same channel, so the pending notice is replaced (Web Push ``Topic``, the
  mail thread).

A person's settings (``PUT /api/account/notifications``) may opt out of a channel; a channel that
needs something of the person (an ntfy topic, a Web Push subscription) gets rows only for people
who have it. Over a route's ``per_approver_limit`` a pending notice is written ``held``: the
delivery worker sends one digest per person and channel instead once the window has passed
(push bombing, MFA fatigue).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from grantd.core.notify_routes import Route, pick
from grantd.core.review import Review, eligible_people
from grantd.core.review.votes import GrantFacts, People
from grantd.services import ciba_pings
from grantd.services import review as reviews
from grantd.services.context import Services
from grantd.store.notify import OutboxRow
from grantd.store.records import Agent, Grant

PENDING_KINDS = ("review_requested", "escalated")
_SEQUENCE = itertools.count()
NEEDS_TOPIC = ("ntfy",)  # channel types that reach a person only at a topic they set
NEEDS_SUBSCRIPTION = ("webpush",)  # ... only through a Web Push subscription


def row(
    grant_id: str | None,
    channel: str,
    recipient: str,
    person_id: str | None,
    kind: str,
    level: int,
    now: int,
    *,
    status: str = "pending",
    payload: dict[str, Any] | None = None,
) -> OutboxRow:
    return {
        # ordered like the rows are written, also within one millisecond (lists sort by created_at, id)
        "id": f"{now:013d}{next(_SEQUENCE) % 10**8:08d}{uuid.uuid4().hex[:11]}",
        "grant_id": grant_id,
        "channel": channel,
        "recipient": recipient.lower(),
        "person_id": person_id,
        "kind": kind,
        "level": level,
        "status": status,
        "attempts": 0,
        "next_at": now,
        "claimed_by": None,
        "claimed_until": None,
        "error": None,
        "created_at": now,
        "sent_at": None,
        "payload": payload or {},
    }


def _refs(refs: Iterable[str], facts: GrantFacts, people: People) -> set[str]:
    """The e-mails behind group references (``@owner``, ``@approver``, ``@admins``, a group id)."""
    found: set[str] = set()
    for ref in refs:
        if ref == "@owner" and facts.owner:
            found.add(facts.owner.lower())
        elif ref == "@approver" and facts.approver:
            found.add(facts.approver.lower())
        elif ref == "@admins":
            found |= people.admins
        else:
            found |= people.members.get(ref, frozenset())
    return found


async def _reachable(
    services: Services, emails: Iterable[str]
) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """For each e-mail that is not the management identity: (person id or None, their settings)."""
    management = services.config.admin.management_identity.lower()
    wanted = sorted({e.lower() for e in emails} - {management})
    found = await services.store.people.get_many(wanted) if wanted else {}
    persons: dict[str, str | None] = {}
    for email in wanted:
        person = found.get(email)
        if person is not None and person["status"] != "active":
            continue  # a disabled person is told nothing
        persons[email] = person["person_id"] if person is not None else None
    prefs = await services.store.notify.prefs([p for p in persons.values() if p])
    return {email: (pid, prefs.get(pid, {}) if pid else {}) for email, pid in persons.items()}


async def _subscribed(services: Services, person_id: str | None) -> bool:
    return person_id is not None and bool(await services.store.notify.subscriptions(person_id))


async def _rows_for(
    services: Services,
    grant: Grant,
    route: Route,
    recipients: dict[str, tuple[str | None, dict[str, Any]]],
    kind: str,
    level: int,
    now: int,
) -> list[OutboxRow]:
    rows: list[OutboxRow] = []
    for email, (person_id, prefs) in recipients.items():
        for channel_id in route.channels:
            channel = services.notify_channels.get(channel_id)
            setting = prefs.get(channel_id, True)
            if channel is None or setting is False:
                continue
            if channel.type in NEEDS_TOPIC and not (isinstance(setting, dict) and setting.get("topic")):
                continue
            if channel.type in NEEDS_SUBSCRIPTION and not await _subscribed(services, person_id):
                continue
            status = "pending"
            if route.limit and kind in PENDING_KINDS:
                told = await services.store.notify.recent(email, channel_id, now - route.window * 1000)
                told += sum(1 for r in rows if r["recipient"] == email and r["channel"] == channel_id)
                if told >= route.limit:
                    status = "held"
            rows.append(
                row(
                    grant["id"],
                    channel_id,
                    email,
                    person_id,
                    kind,
                    level,
                    now,
                    status=status,
                    payload={"window": route.window} if status == "held" else None,
                )
            )
    return rows


def _route(services: Services, review: Review, level: int) -> Route:
    every = list(services.notify_channels)
    return pick(services.config.notify.routes, review.policy_ids, level, every)


async def requested(services: Services, grant: Grant, review: Review, agent: Agent | None) -> list[OutboxRow]:
    """The rows of a grant that now waits for a decision (module docstring)."""
    if not services.notify_channels or grant["status"] != "pending":
        return []
    now = grant["created_at"]
    facts = reviews.grant_facts(grant, agent, "pending")
    people = await reviews.people_with_admins(services, review)
    emails = {e for each in eligible_people(review, facts, people, now // 1000) for e in each}
    recipients = await _reachable(services, emails)
    return await _rows_for(
        services, grant, _route(services, review, 0), recipients, "review_requested", 0, now
    )


async def escalated(
    services: Services, grant: Grant, review: Review, agent: Agent | None, seen: int, level: int, now: int
) -> list[OutboxRow]:
    """The rows of escalation levels ``seen + 1`` to ``level`` reached (module docstring)."""
    reached = [e for e in review.escalations if seen < e.level <= level]
    if not services.notify_channels or not reached:
        return []
    facts = reviews.grant_facts(grant, agent, "pending")
    people = await reviews.people_with_admins(services, review)
    emails = _refs((ref for e in reached for ref in (*e.notify, *e.add_approvers)), facts, people)
    recipients = await _reachable(services, emails)
    return await _rows_for(
        services, grant, _route(services, review, level), recipients, "escalated", level, now
    )


async def resolved(services: Services, grant: Grant, now: int) -> list[OutboxRow]:
    """The rows a decision of a pending grant writes with it: a ``resolved`` row for each person and
    channel that was told the grant waited, and the CIBA ping of a grant a ping-mode request made
    (D16: pings go through the outbox too)."""
    grant_id = grant["id"]
    rows = await _ciba_ping(services, grant, now)
    if not services.notify_channels:
        return rows
    told: dict[tuple[str, str], OutboxRow] = {}
    for earlier in await services.store.notify.for_grant(grant_id):
        if earlier["kind"] in PENDING_KINDS and earlier["status"] not in ("held", "dropped"):
            told.setdefault((earlier["channel"], earlier["recipient"]), earlier)
    return rows + [
        row(grant_id, channel, email, earlier["person_id"], "resolved", earlier["level"], now)
        for (channel, email), earlier in told.items()
        if channel in services.notify_channels
    ]


async def _ciba_ping(services: Services, grant: Grant, now: int) -> list[OutboxRow]:
    """One ``ciba_ping`` row (to the requesting agent) when a live ping-mode CIBA request made the
    grant. Only a grant with ``authorization_details`` can have come from ``/bc-authorize``, so no
    other decision reads the CIBA requests."""
    if "authorization_details" not in grant["request"]:
        return []
    for record in await services.store.ciba.for_grant(grant["id"]):
        if (
            ciba_pings.ping_token(record) is not None
            and record["redeemed_at"] is None
            and record["expires_at"] > now
        ):
            return [row(grant["id"], ciba_pings.PING_CHANNEL, record["agent_id"], None, "ciba_ping", 0, now)]
    return []


def digests(held: Sequence[OutboxRow], now: int) -> list[OutboxRow]:
    """One digest row per person and channel for the held rows released together."""
    by: dict[tuple[str, str], list[OutboxRow]] = {}
    for each in held:
        by.setdefault((each["channel"], each["recipient"]), []).append(each)
    return [
        row(
            None,
            channel,
            email,
            rows[0]["person_id"],
            "digest",
            0,
            now,
            payload={"grants": list(dict.fromkeys(r["grant_id"] for r in rows if r["grant_id"]))},
        )
        for (channel, email), rows in by.items()
    ]


def wake(services: Services, rows: Sequence[OutboxRow] | None = None) -> None:
    """Tell this process's delivery worker that ``rows`` were written (it also polls); ``None``:
    rows of any channel may have been."""
    services.notify_wake(None if rows is None else {r["channel"] for r in rows})


__all__ = ["digests", "escalated", "requested", "resolved", "row", "wake"]
