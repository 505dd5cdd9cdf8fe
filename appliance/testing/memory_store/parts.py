"""Keys, agents, challenges, grants, delegations and rate counters of the in-memory example."""

from __future__ import annotations

import builtins
import copy
import heapq
from collections.abc import Sequence
from typing import Any

from grantd.core.lifecycle import EXPIRED, Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict, LimitReached, PendingBound
from grantd.store.notify import OutboxRow
from grantd.store.records import (
    AGENT_CHANGEABLE,
    GRANT_CHANGEABLE,
    Agent,
    Delegation,
    Grant,
    GrantEvent,
    GrantEventRow,
    GrantReview,
    GrantView,
    ReviewGroup,
    SigningKey,
    Vote,
)
from grantd.store.rows import pinned_event_row, to_json
from grantd.store.tlog import agent_event, delegation_event, jwt_key_event

from .data import _Data, _newest_first
from .notify import add_notices
from .tlog import record_event


class MemoryKeys:
    def __init__(self, data: _Data):
        self._d = data

    async def all(self) -> list[SigningKey]:
        return copy.deepcopy(self._d.keys[::-1])

    async def active_kid(self, alg: str = "EdDSA") -> str | None:
        return next(
            (k["kid"] for k in reversed(self._d.keys) if k["alg"] == alg and k["retired_at"] is None), None
        )

    async def add_first(self, key: SigningKey) -> bool:
        async with self._d.tx:  # one algorithm's first key: checked and inserted in one critical section
            if any(k["alg"] == key["alg"] and k["retired_at"] is None for k in self._d.keys):
                return False
            self._d.keys.append({**copy.deepcopy(key), "retired_at": None})
            return True

    async def rotate(self, key: SigningKey, now: int) -> list[str]:
        async with self._d.tx:
            retired = []
            for k in self._d.keys:
                if k["alg"] == key["alg"] and k["retired_at"] is None:  # other algorithms keep their keys
                    k["retired_at"], k["private_pem"] = now, ""  # a retired key never signs again
                    retired.append(k["kid"])
            self._d.keys.append({**copy.deepcopy(key), "retired_at": None})
            record_event(self._d, jwt_key_event(dict(key), now))
            return retired

    async def drop_retired_before(self, cutoff: int) -> int:
        async with self._d.tx:
            keep = [k for k in self._d.keys if k["retired_at"] is None or k["retired_at"] >= cutoff]
            dropped = len(self._d.keys) - len(keep)
            self._d.keys = keep
            return dropped

    async def revoke(self, kid: str, now: int) -> bool:
        async with self._d.tx:
            keep = [k for k in self._d.keys if k["kid"] != kid]
            found = len(keep) != len(self._d.keys)
            self._d.keys = keep
            return found


class MemoryAgents:
    def __init__(self, data: _Data):
        self._d = data

    def _check_people(self, owner: str | None, approver: str | None) -> None:
        for field, email in (("owner", owner), ("approver", approver)):
            if email is not None and self._d.agent_by_email(email):
                raise Conflict(field)

    def _check_key(self, key_id: str, agent_id: str) -> None:
        if any(a["key_id"] == key_id and a["agent_id"] != agent_id for a in self._d.agents.values()):
            raise Conflict("publicKey")

    async def create(
        self, agent: Agent, reserved_emails: frozenset[str], *, max_per_owner: int = 0, by: str | None = None
    ) -> Agent:
        row: Agent = {**copy.deepcopy(agent)}
        row["key_generation"] = row.get("key_generation") or 1
        email = row["email"]
        async with self._d.tx:
            row["owner_id"] = self._d.person_id_of(row["owner"])
            row["approver_id"] = self._d.person_id_of(row["approver"])
            if max_per_owner > 0:
                owned = [
                    a
                    for a in self._d.agents.values()
                    if (
                        a["owner_id"] == row["owner_id"]
                        if row["owner_id"]
                        else a["owner_id"] is None and a["owner"] == row["owner"]
                    )
                ]
                if len(owned) >= max_per_owner:
                    raise LimitReached("agents_per_person", max_per_owner)
            if email.lower() in {e.lower() for e in reserved_emails}:
                raise Conflict("email")
            if any(email in (a["email"], a["owner"], a["approver"]) for a in self._d.agents.values()):
                raise Conflict("email")
            if any(d["delegator"] == email for d in self._d.delegations.values()):
                raise Conflict("email")
            if self._d.person_by_email(email):
                raise Conflict("email")
            self._check_key(row["key_id"], row["agent_id"])
            self._check_people(row["owner"], row["approver"])
            if row["agent_id"] in self._d.agents:
                raise Conflict("id")
            self._d.agents[row["agent_id"]] = row
            record_event(self._d, agent_event("agent.enrolled", dict(row), by, row["created_at"]))
        return copy.deepcopy(row)

    async def get(self, ident: str) -> Agent | None:
        found = self._d.agents.get(ident) or self._d.agent_by_email(ident)
        return copy.deepcopy(found)

    async def get_by_id(self, agent_id: str) -> Agent | None:
        return copy.deepcopy(self._d.agents.get(agent_id))

    async def list(self, page: PageRequest) -> tuple[list[Agent], bool]:
        return _newest_first(list(self._d.agents.values()), "agent_id", page)

    async def update(self, agent_id: str, changes: dict[str, Any], *, by: str | None = None) -> Agent | None:
        async with self._d.tx:
            agent = self._d.agents.get(agent_id)
            if agent is None:
                return None
            self._check_people(changes.get("owner"), changes.get("approver"))
            if "key_id" in changes:
                self._check_key(changes["key_id"], agent_id)
            new_key = "public_key" in changes and changes["public_key"] != agent["public_key"]
            if new_key:
                agent["key_generation"] += 1
            for party in ("owner", "approver"):  # a new e-mail is bound to its person now (D11)
                if party in changes and changes[party] != agent[party]:  # type: ignore[literal-required]
                    agent[f"{party}_id"] = self._d.person_id_of(changes[party])  # type: ignore[literal-required]
            for column in AGENT_CHANGEABLE:
                if column in changes:
                    agent[column] = changes[column]  # type: ignore[literal-required]
            if new_key:
                record_event(self._d, agent_event("agent.key_replaced", dict(agent), by, agent["updated_at"]))
            return copy.deepcopy(agent)

    async def retire(
        self, agent_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Agent, builtins.list[Grant]] | None:
        async with self._d.tx:
            agent = self._d.agents.get(agent_id)
            if agent is None or (agent["status"] == "disabled" and not delete):
                return None
            before = copy.deepcopy(agent)
            revoked: list[Grant] = []
            for grant in sorted(self._d.grants.values(), key=lambda g: (g["created_at"], g["id"])):
                if (
                    grant["requester_id"] == agent_id
                    and grant["status"] in ("pending", "approved")
                    and not lapse.lapsed(grant)
                ):
                    grant.update(
                        {
                            "status": "revoked",
                            "revoked_by": by,
                            "revoked_at": now,
                            "decision_reason": reason,
                            "version": grant["version"] + 1,
                        }
                    )
                    self._d.record("grant.revoked", grant, now)
                    revoked.append(copy.deepcopy(grant))
            for delegation in self._d.delegations.values():
                if delegation["delegate"] == agent["email"] and delegation["status"] == "active":
                    delegation.update({"status": "revoked", "revoked_by": by, "revoked_at": now})
            self._d.challenges = {c: v for c, v in self._d.challenges.items() if v[0] != agent_id}
            record_event(self._d, agent_event("agent.disabled", dict(agent), by, now))
            if delete:
                del self._d.agents[agent_id]
            else:
                agent.update(
                    {"status": "disabled", "key_generation": agent["key_generation"] + 1, "updated_at": now}
                )
            return before, revoked

    async def decidable_by(self, person_id: str) -> builtins.list[str]:
        agents = sorted(self._d.agents.values(), key=lambda a: (a["created_at"], a["agent_id"]))
        return [a["agent_id"] for a in agents if person_id in (a["owner_id"], a["approver_id"])]


class MemoryChallenges:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, challenge: str, agent_id: str, expires_at: int, now: int) -> None:
        async with self._d.tx:
            self._d.challenges = {c: v for c, v in self._d.challenges.items() if v[1] >= now}
            self._d.challenges[challenge] = (agent_id, expires_at)

    async def take(self, challenge: str, agent_id: str) -> int | None:
        async with self._d.tx:  # check and delete in one critical section: exactly one taker wins
            found = self._d.challenges.get(challenge)
            if found is None or found[0] != agent_id:
                return None
            del self._d.challenges[challenge]
            return found[1]

    def _active(self, ident: str) -> Agent | None:
        for agent in self._d.agents.values():
            if agent["agent_id"] == ident or agent["email"] == ident.lower():
                return agent if agent["status"] == "active" else None
        return None

    async def create_for(self, challenge: str, ident: str, expires_at: int, now: int) -> str | None:
        async with self._d.tx:
            agent = self._active(ident)
            if agent is None:
                return None
            self._d.challenges = {c: v for c, v in self._d.challenges.items() if v[1] >= now}
            self._d.challenges[challenge] = (agent["agent_id"], expires_at)
            return agent["agent_id"]

    async def take_for(self, challenge: str, ident: str) -> tuple[Agent, int] | None:
        async with self._d.tx:
            agent = self._active(ident)
            found = self._d.challenges.get(challenge)
            if agent is None or found is None or found[0] != agent["agent_id"]:
                return None
            del self._d.challenges[challenge]
            return copy.deepcopy(agent), found[1]


class MemoryGrants:
    def __init__(self, data: _Data):
        self._d = data

    async def create(
        self,
        grant: Grant,
        events: Sequence[str],
        *,
        bound: PendingBound | None = None,
        review: dict[str, Any] | None = None,
        review_due: int | None = None,
        notices: Sequence[OutboxRow] = (),
    ) -> Grant:
        row: Grant = {**copy.deepcopy(grant), "version": 1}
        async with self._d.tx:
            if row["id"] in self._d.grants:
                raise Conflict("id")
            if bound is not None and bound.counted and row["status"] == "pending":
                self._check_pending_bound(row["requester_id"], bound)
            self._d.grants[row["id"]] = row
            if review is not None:
                self._d.reviews[row["id"]] = {
                    "grant_id": row["id"],
                    "review": copy.deepcopy(review),
                    "escalation_level": 0,
                }
                if review_due is not None:
                    self._d.review_due[row["id"]] = review_due
            for event in events:
                self._d.record(event, pinned_event_row(row, event, review), row["created_at"])  # type: ignore[arg-type]
            add_notices(self._d, notices)
        return copy.deepcopy(row)

    async def review_of(self, grant_id: str) -> GrantReview | None:
        return copy.deepcopy(self._d.reviews.get(grant_id))

    async def votes(self, grant_id: str) -> builtins.list[Vote]:
        return copy.deepcopy(self._d.votes.get(grant_id, []))

    async def reviews_and_votes(
        self, grant_ids: Sequence[str]
    ) -> tuple[dict[str, GrantReview], dict[str, builtins.list[Vote]]]:
        ids = list(dict.fromkeys(grant_ids))
        reviews = {i: copy.deepcopy(self._d.reviews[i]) for i in ids if i in self._d.reviews}
        votes = {i: copy.deepcopy(self._d.votes[i]) for i in ids if self._d.votes.get(i)}
        return reviews, votes

    async def view(self, grant_id: str) -> GrantView | None:
        grant = self._d.grants.get(grant_id)
        if grant is None:
            return None
        return (
            copy.deepcopy(grant),
            copy.deepcopy(self._d.reviews.get(grant_id)),
            copy.deepcopy(self._d.votes.get(grant_id, [])),
            copy.deepcopy(self._d.agents.get(grant["requester_id"])),
        )

    def _add_vote(self, vote: Vote) -> tuple[str, int]:
        """In the caller's critical section: the outcome and how many votes came before it."""
        grant = self._d.grants.get(vote["grant_id"])
        if grant is None or grant["status"] != "pending":
            return "decided", 0
        votes = self._d.votes.setdefault(vote["grant_id"], [])
        if any(v["email"] == vote["email"] for v in votes):
            return "duplicate", 0
        kept = {k: v for k, v in vote.items() if k != "evidence" or v is not None}
        before = len(votes)
        votes.append(copy.deepcopy(kept))  # type: ignore[arg-type]
        # every vote is a grant event (D14: a leaf; live streams see it), in the vote's transaction
        self._d.record("grant.reviewed", {**grant, "vote": dict(kept)}, int(vote["at"]))  # type: ignore[typeddict-unknown-key]
        return "recorded", before

    async def add_vote(self, vote: Vote) -> str:
        async with self._d.tx:
            return self._add_vote(vote)[0]

    async def add_deciding_vote(
        self,
        vote: Vote,
        *,
        seen: int,
        expect: Sequence[str],
        changes: dict[str, Any],
        event: str,
        lapse: Lapse,
        now: int,
        notices: Sequence[OutboxRow] = (),
    ) -> tuple[str, Grant | None]:
        async with self._d.tx:  # the vote, the condition and the change in one critical section
            outcome, before = self._add_vote(vote)
            if outcome != "recorded" or before != seen:
                return outcome, None
            return outcome, self._update(vote["grant_id"], expect, changes, event, lapse, now, notices)

    async def escalate_if(
        self, grant_id: str, seen: int, level: int, now: int, notices: Sequence[OutboxRow] = ()
    ) -> bool:
        async with self._d.tx:
            review = self._d.reviews.get(grant_id)
            grant = self._d.grants.get(grant_id)
            if (
                review is None
                or grant is None
                or grant["status"] != "pending"
                or review["escalation_level"] != seen
            ):
                return False
            review["escalation_level"] = level
            for reached in range(seen + 1, level + 1):
                self._d.record("grant.escalated", {**grant, "escalation_level": reached}, now)  # type: ignore[typeddict-unknown-key]
            add_notices(self._d, notices)
            return True

    async def due_reviews(self, now: int, limit: int) -> builtins.list[GrantReview]:
        due = sorted((at, grant_id) for grant_id, at in self._d.review_due.items() if at <= now)
        return [copy.deepcopy(self._d.reviews[grant_id]) for _, grant_id in due[:limit]]

    async def set_review_due(self, grant_id: str, due: int | None) -> None:
        async with self._d.tx:
            if due is None:
                self._d.review_due.pop(grant_id, None)
            elif grant_id in self._d.reviews:
                self._d.review_due[grant_id] = due

    async def pending_review_groups(self, limit: int) -> builtins.list[ReviewGroup]:
        pending = sorted(
            (g for g in self._d.grants.values() if g["status"] == "pending" and g["id"] in self._d.reviews),
            key=lambda g: (g["created_at"], g["id"]),
        )
        groups: dict[tuple[str, int], ReviewGroup] = {}
        for g in pending[:limit]:
            record = self._d.reviews[g["id"]]
            key = (to_json(record["review"]), record["escalation_level"])
            if key not in groups:
                groups[key] = {
                    "review": copy.deepcopy(record["review"]),
                    "escalation_level": record["escalation_level"],
                    "grant_ids": [],
                }
            groups[key]["grant_ids"].append(g["id"])
        return list(groups.values())

    def _check_pending_bound(self, requester_id: str, bound: PendingBound) -> None:
        agent = self._d.agents.get(requester_id)
        if agent is None:
            return  # a person's own request, or the management token's for someone not enrolled
        if agent["owner_id"]:
            same = {a["agent_id"] for a in self._d.agents.values() if a["owner_id"] == agent["owner_id"]}
        else:
            same = {
                a["agent_id"]
                for a in self._d.agents.values()
                if a["owner_id"] is None and a["owner"] == agent["owner"]
            }
        pending = [
            g
            for g in self._d.grants.values()
            if g["requester_id"] in same and g["status"] == "pending" and not bound.lapse.lapsed(g)
        ]
        bound.check(len(pending), sum(1 for g in pending if g["requester_id"] == requester_id))

    async def get(self, grant_id: str) -> Grant | None:
        return copy.deepcopy(self._d.grants.get(grant_id))

    async def find_reusable(self, requester_id: str, reuse_key: str, lapse: Lapse) -> Grant | None:
        found = [
            g
            for g in self._d.grants.values()
            if g["requester_id"] == requester_id
            and g["reuse_key"] == reuse_key
            and g["status"] == "approved"
            and not lapse.lapsed(g)
        ]
        found.sort(key=lambda g: (g["created_at"], g["id"]))
        return copy.deepcopy(found[-1]) if found else None

    async def list(
        self,
        *,
        lapse: Lapse,
        page: PageRequest,
        status: str | None = None,
        requester: str | None = None,
        requester_ids: Sequence[str] | None = None,
        also_ids: Sequence[str] = (),
    ) -> tuple[list[Grant], bool]:
        rows = [
            g
            for g in self._d.grants.values()
            if (not status or lapse.status_of(g) == status)  # the status as read, not as stored
            and (not requester or g["requester"] == requester)
            and (requester_ids is None or g["requester_id"] in requester_ids or g["id"] in also_ids)
        ]
        return _newest_first(rows, "id", page)

    async def update_if(
        self,
        grant_id: str,
        *,
        expect: Sequence[str],
        changes: dict[str, Any],
        event: str,
        lapse: Lapse,
        now: int,
        notices: Sequence[OutboxRow] = (),
    ) -> Grant | None:
        async with self._d.tx:  # the condition and the change in one critical section
            return self._update(grant_id, expect, changes, event, lapse, now, notices)

    def _update(
        self,
        grant_id: str,
        expect: Sequence[str],
        changes: dict[str, Any],
        event: str,
        lapse: Lapse,
        now: int,
        notices: Sequence[OutboxRow],
    ) -> Grant | None:
        grant = self._d.grants.get(grant_id)
        if grant is None or grant["status"] not in expect or lapse.lapsed(grant):
            return None
        for column, value in changes.items():
            if column in GRANT_CHANGEABLE:
                grant[column] = copy.deepcopy(value)  # type: ignore[literal-required]
        grant["version"] += 1
        self._d.record(event, grant, now)
        add_notices(self._d, notices)
        return copy.deepcopy(grant)

    async def expire(self, lapse: Lapse, now: int, events_before: int) -> builtins.list[Grant]:
        async with self._d.tx:
            expired: list[Grant] = []
            for grant in sorted(self._d.grants.values(), key=lambda g: (g["created_at"], g["id"])):
                if lapse.lapsed(grant):
                    grant["status"], grant["version"] = EXPIRED, grant["version"] + 1
                    self._d.record("grant.expired", grant, now)
                    expired.append(copy.deepcopy(grant))
            self._d.events = [e for e in self._d.events if e["created_at"] >= events_before]
            return expired

    async def events_after(self, seq: int, limit: int) -> builtins.list[GrantEvent]:
        return copy.deepcopy([e for e in self._d.events if e["seq"] > seq][:limit])

    async def event_rows_after(self, seq: int, limit: int) -> builtins.list[GrantEventRow]:
        return [
            (e["seq"], e["event"], e["grant_id"], e["requester"], e["created_at"], to_json(e["grant"]))
            for e in self._d.events
            if e["seq"] > seq
        ][:limit]

    async def last_event_seq(self) -> int:
        return self._d.events[-1]["seq"] if self._d.events else 0

    async def summary(self, lapse: Lapse) -> tuple[dict[str, int], int | None]:
        counts: dict[str, int] = {}
        oldest: int | None = None
        for grant in self._d.grants.values():
            status = lapse.status_of(grant)  # as read, not as stored
            counts[status] = counts.get(status, 0) + 1
            if status == "pending" and (oldest is None or grant["created_at"] < oldest):
                oldest = grant["created_at"]
        return counts, oldest


class MemoryDelegations:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, delegation: Delegation) -> Delegation:
        row: Delegation = copy.deepcopy(delegation)
        async with self._d.tx:
            if self._d.agent_by_email(row["delegator"]):
                raise Conflict("delegator")
            if row["id"] in self._d.delegations:
                raise Conflict("id")
            self._d.delegations[row["id"]] = row
            record_event(
                self._d,
                delegation_event("delegation.created", dict(row), row["delegator"], row["created_at"]),
            )
        return copy.deepcopy(row)

    async def get(self, delegation_id: str) -> Delegation | None:
        return copy.deepcopy(self._d.delegations.get(delegation_id))

    async def list(
        self, *, party: str | None, page: PageRequest, since: int | None = None
    ) -> tuple[list[Delegation], bool]:
        rows = [
            d
            for d in self._d.delegations.values()
            if (party is None or party in (d["delegator"], d["delegate"]))
            and (since is None or d["created_at"] >= since)
        ]
        return _newest_first(rows, "id", page)

    async def revoke(self, delegation_id: str, by: str, now: int) -> Delegation | None:
        async with self._d.tx:
            delegation = self._d.delegations.get(delegation_id)
            if delegation is None or delegation["status"] != "active":
                return None
            delegation.update({"status": "revoked", "revoked_at": now, "revoked_by": by})
            record_event(self._d, delegation_event("delegation.revoked", dict(delegation), by, now))
            return copy.deepcopy(delegation)

    async def live_for(self, delegate: str, lapse: Lapse) -> builtins.list[Delegation]:
        rows = [
            d
            for d in self._d.delegations.values()
            if d["delegate"] == delegate and d["status"] == "active" and not lapse.lapsed(d)
        ]
        return copy.deepcopy(sorted(rows, key=lambda d: (d["created_at"], d["id"])))


class MemoryRates:
    def __init__(self, data: _Data):
        self._d = data

    async def hit(self, key: str, window_start: int, window_ms: int, now: int) -> int:
        async with self._d.tx:  # read and increment in one critical section: each caller its own count
            ends = self._d.rate_ends
            while ends and ends[0][0] <= now:  # drop ended windows, soonest first (a heap: cheap)
                _, old_key, old_start = heapq.heappop(ends)
                self._d.rates.pop((old_key, old_start), None)
            if (key, window_start) not in self._d.rates:
                heapq.heappush(ends, (window_start + window_ms, key, window_start))
            count = self._d.rates.get((key, window_start), 0) + 1
            self._d.rates[(key, window_start)] = count
            return count

    async def count(self, key: str, window_start: int) -> int:
        return self._d.rates.get((key, window_start), 0)
