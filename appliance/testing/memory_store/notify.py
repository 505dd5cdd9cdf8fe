"""The notification outbox and channel settings in memory (``grantd.store.notify``)."""

from __future__ import annotations

import builtins
import copy
from collections.abc import Sequence
from typing import Any

from grantd.store.notify import LINKS_KEPT_MS, OutboxRow, PushSubscription, ReviewLink

from .data import _Data

PENDING_KINDS = ("review_requested", "escalated")


def add_notices(data: _Data, rows: Sequence[OutboxRow]) -> None:
    """Outbox rows inside the caller's critical section (a grant's create, decision or escalation)."""
    for row in rows:
        data.outbox[row["id"]] = copy.deepcopy(row)


class MemoryNotify:
    def __init__(self, data: _Data):
        self._d = data

    async def add(self, rows: Sequence[OutboxRow]) -> None:
        async with self._d.tx:
            add_notices(self._d, rows)

    async def claim(
        self, worker: str, now: int, lease_ms: int, limit: int, busy: Sequence[str] = ()
    ) -> builtins.list[OutboxRow]:
        async with self._d.tx:
            due = sorted(
                (
                    r
                    for r in self._d.outbox.values()
                    if r["status"] == "pending"
                    and r["next_at"] <= now
                    and (r["claimed_until"] is None or r["claimed_until"] <= now)
                    and r["channel"] not in busy
                ),
                key=lambda r: (r["next_at"], r["id"]),
            )[:limit]
            for row in due:
                row["claimed_by"], row["claimed_until"] = worker, now + lease_ms
            return copy.deepcopy(due)

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
        async with self._d.tx:
            row = self._d.outbox.get(row_id)
            if row is None or row["claimed_by"] != worker:
                return False
            row.update(
                status=status,
                attempts=attempts,
                next_at=next_at,
                error=error,
                sent_at=at,
                claimed_by=None,
                claimed_until=None,
            )
            return True

    async def for_grant(self, grant_id: str) -> builtins.list[OutboxRow]:
        rows = [r for r in self._d.outbox.values() if r["grant_id"] == grant_id]
        return copy.deepcopy(sorted(rows, key=lambda r: (r["created_at"], r["id"])))

    async def recent(self, recipient: str, channel: str, since: int) -> int:
        return sum(
            1
            for r in self._d.outbox.values()
            if r["recipient"] == recipient
            and r["channel"] == channel
            and r["created_at"] >= since
            and r["kind"] in PENDING_KINDS
            and r["status"] not in ("held", "dropped")
        )

    async def release_held(self, before: int, limit: int) -> builtins.list[OutboxRow]:
        async with self._d.tx:
            due = sorted(
                (r for r in self._d.outbox.values() if r["status"] == "held" and r["created_at"] < before),
                key=lambda r: (r["created_at"], r["id"]),
            )[:limit]
            groups = {(r["recipient"], r["channel"]) for r in due}
            held = sorted(
                (
                    r
                    for r in self._d.outbox.values()
                    if r["status"] == "held" and (r["recipient"], r["channel"]) in groups
                ),
                key=lambda r: (r["created_at"], r["id"]),
            )
            for row in held:
                row["status"] = "dropped"
            return copy.deepcopy(held)

    async def add_link(self, link: ReviewLink, now: int) -> None:
        async with self._d.tx:
            for key in [k for k, v in self._d.review_links.items() if v["expires_at"] < now - LINKS_KEPT_MS]:
                del self._d.review_links[key]
            self._d.review_links[link["token_hash"]] = copy.deepcopy(link)

    async def link(self, token_hash: str) -> ReviewLink | None:
        return copy.deepcopy(self._d.review_links.get(token_hash))

    async def use_link(self, token_hash: str, now: int) -> ReviewLink | None:
        async with self._d.tx:
            link = self._d.review_links.get(token_hash)
            if link is None or link["used_at"] is not None or link["expires_at"] <= now:
                return None
            link["used_at"] = now
            return copy.deepcopy(link)

    async def add_subscription(self, subscription: PushSubscription) -> PushSubscription:
        async with self._d.tx:
            for existing in self._d.push_subscriptions.values():
                if (existing["person_id"], existing["endpoint"]) == (
                    subscription["person_id"],
                    subscription["endpoint"],
                ):
                    existing.update(
                        p256dh=subscription["p256dh"],
                        auth=subscription["auth"],
                        expiration_time=subscription["expiration_time"],
                    )
                    return copy.deepcopy(existing)
            self._d.push_subscriptions[subscription["id"]] = copy.deepcopy(subscription)
            return copy.deepcopy(subscription)

    async def subscriptions(self, person_id: str) -> builtins.list[PushSubscription]:
        found = [s for s in self._d.push_subscriptions.values() if s["person_id"] == person_id]
        return copy.deepcopy(sorted(found, key=lambda s: (s["created_at"], s["id"])))

    async def delete_subscription(self, person_id: str, subscription_id: str) -> bool:
        async with self._d.tx:
            found = self._d.push_subscriptions.get(subscription_id)
            if found is None or found["person_id"] != person_id:
                return False
            del self._d.push_subscriptions[subscription_id]
            return True

    async def prefs(self, person_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return {i: copy.deepcopy(self._d.notify_prefs[i]) for i in person_ids if i in self._d.notify_prefs}

    async def set_prefs(self, person_id: str, prefs: dict[str, Any], now: int) -> None:
        async with self._d.tx:
            self._d.notify_prefs[person_id] = copy.deepcopy(prefs)
