"""Reaching approvers (D15, issue 24): ``store.notify`` keeps the outbox and each person's channel
settings.

- ``notify_outbox``: one row per notice to one person on one channel (``OutboxRow``). Rows about a
  grant are written in the grant's own transaction (``grants.create``, ``grants.update_if``,
  ``grants.escalate_if`` take ``notices=``), so a grant never exists without the notices it needs
  and a notice never exists for a grant that was not written. Delivery happens later, off the
  request path: ``claim`` hands due rows to one worker at a time, ``finish`` records the outcome.
- ``review_links``: the SHA-256 of each review link's token (``ReviewLink``), bound to one grant
  and one person, with its expiry; a deny link is used once (``use_link``).
- ``push_subscriptions``: a person's Web Push subscriptions (``PushSubscription``).
- ``notify_prefs``: a person's channel settings (``PUT /api/account/notifications``): per channel
  id either ``False`` (opted out) or a table (``{"topic": ...}`` for ntfy).

Rules every backend keeps (``grantd.testing.test_notify`` checks them):

- **One winner per row.** ``claim`` marks due rows (``status = 'pending'``, ``next_at <= now``,
  no live lease) as leased by ``worker`` until ``now + lease_ms`` in one conditional write decided
  by the database: any number of concurrent claimers in any process or node get disjoint rows.
  A lease that ran out (a worker that died mid-send) makes the row claimable again: delivery is at
  least once, receivers de-duplicate (Web Push ``Topic``, mail ``Message-ID``).
- ``finish`` changes a row only while ``worker`` still holds its lease; it clears the lease.
- Rows are listed in the order they were written (``created_at``, then ``id``).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Protocol, TypedDict, runtime_checkable

OUTBOX_COLUMNS = (
    "id",
    "grant_id",
    "channel",
    "recipient",
    "person_id",
    "kind",
    "level",
    "status",
    "attempts",
    "next_at",
    "claimed_by",
    "claimed_until",
    "error",
    "created_at",
    "sent_at",
    "payload",
)
STATUSES = ("pending", "sent", "failed", "held", "dropped")


class OutboxRow(TypedDict):
    id: str
    grant_id: str | None  # None for a digest (``payload["grants"]`` names them)
    channel: str  # the [[notify.channels]] id
    recipient: str  # the person's e-mail (lowercased)
    person_id: str | None
    kind: str  # review_requested | escalated | resolved | digest
    level: int  # the escalation level it announces (0: the first request)
    status: str  # pending | sent | failed | held (over per_approver_limit) | dropped (in a digest)
    attempts: int
    next_at: int  # ms: not before
    claimed_by: str | None
    claimed_until: int | None  # ms
    error: str | None
    created_at: int  # ms
    sent_at: int | None  # ms of the last attempt's outcome
    payload: dict[str, Any]


LINK_COLUMNS = (
    "token_hash",
    "grant_id",
    "person_id",
    "email",
    "action",
    "expires_at",
    "used_at",
    "created_at",
)
SUBSCRIPTION_COLUMNS = ("id", "person_id", "endpoint", "p256dh", "auth", "expiration_time", "created_at")
LINKS_KEPT_MS = 86_400_000  # expired links are kept a day (410 rather than 404), then dropped


class ReviewLink(TypedDict):
    token_hash: str  # hex SHA-256 of the token
    grant_id: str
    person_id: str | None
    email: str  # the intended person (lowercased)
    action: str  # review | deny
    expires_at: int  # ms
    used_at: int | None  # ms; a deny link is used once
    created_at: int


class PushSubscription(TypedDict):
    id: str
    person_id: str
    endpoint: str
    p256dh: str  # base64url
    auth: str  # base64url
    expiration_time: int | None  # ms, as the browser gave it
    created_at: int


def outbox_row(row: dict[str, Any]) -> OutboxRow:
    """A stored row as the record (JSON payload decoded)."""
    import json

    if isinstance(row.get("payload"), str):
        row["payload"] = json.loads(row["payload"])
    return row  # type: ignore[return-value]


@runtime_checkable
class NotifyStore(Protocol):
    async def add(self, rows: Sequence[OutboxRow]) -> None:
        """Insert outbox rows not written with a grant change (digests)."""

    async def claim(
        self, worker: str, now: int, lease_ms: int, limit: int, busy: Sequence[str] = ()
    ) -> builtins.list[OutboxRow]:
        """Lease at most ``limit`` due rows to ``worker`` (module docstring), oldest ``next_at``
        first, none of the channels in ``busy`` (the worker has enough of theirs under way), and
        return them as leased."""

    async def finish(
        self,
        row_id: str,
        worker: str,
        *,
        status: str,
        attempts: int,
        next_at: int,
        error: str | None,
        at: int,
    ) -> bool:
        """Record an attempt's outcome while ``worker`` holds the lease; clear the lease. False when
        the lease was lost (another worker has the row now)."""

    async def for_grant(self, grant_id: str) -> builtins.list[OutboxRow]:
        """The grant's rows, in the order written (digests that name it included)."""

    async def recent(self, recipient: str, channel: str, since: int) -> int:
        """How many pending-kind notices (``review_requested``, ``escalated``) for ``recipient``
        on ``channel`` were written at or after ``since`` and not held (``per_approver_limit``)."""

    async def release_held(self, before: int, limit: int) -> builtins.list[OutboxRow]:
        """The window of a (recipient, channel) ends when its oldest held row was written before
        ``before``: mark every held row of at most ``limit`` such pairs ``dropped`` (they go into one
        digest per pair, D15) and return them; exactly one caller gets each row."""

    async def add_link(self, link: ReviewLink, now: int) -> None:
        """Store a review link (and drop links that expired more than LINKS_KEPT_MS before ``now``)."""

    async def link(self, token_hash: str) -> ReviewLink | None:
        """The link with this hash, expired or used or not; changes nothing."""

    async def use_link(self, token_hash: str, now: int) -> ReviewLink | None:
        """Mark an unused, unexpired link used at ``now`` and return it; exactly one of any number
        of concurrent callers gets it, the others None."""

    async def add_subscription(self, subscription: PushSubscription) -> PushSubscription:
        """Insert, or replace the keys of, the person's subscription with that endpoint; return it
        as stored (an existing one keeps its id)."""

    async def subscriptions(self, person_id: str) -> builtins.list[PushSubscription]:
        """The person's subscriptions, oldest first."""

    async def delete_subscription(self, person_id: str, subscription_id: str) -> bool:
        """Delete one of the person's subscriptions; False if they have none with that id."""

    async def prefs(self, person_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The channel settings of these persons (absent: none set)."""

    async def set_prefs(self, person_id: str, prefs: dict[str, Any], now: int) -> None:
        """Replace the person's channel settings."""


__all__ = [
    "LINKS_KEPT_MS",
    "LINK_COLUMNS",
    "OUTBOX_COLUMNS",
    "STATUSES",
    "SUBSCRIPTION_COLUMNS",
    "NotifyStore",
    "OutboxRow",
    "PushSubscription",
    "ReviewLink",
    "outbox_row",
]
