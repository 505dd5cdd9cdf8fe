"""A worked example of a storage backend: everything in memory, in one process.

Written from docs/plugins.md as a plugin author would, to show two things a backend must get right:

- **Reading a Lapse.** The rules come in as data, ``{stored_status: (column, cutoff)}``; a record
  whose status is a key and whose column is not None and ``<= cutoff`` has lapsed and reads as
  ``expired``. ``Lapse.lapsed(record)`` does exactly that for Python records; a SQL backend writes
  the same test as a WHERE clause (``grantd.store.sql``).
- **Deciding single winners.** Every conditional change checks its condition and applies the change
  inside one critical section (here ``self._tx``, one ``asyncio.Lock`` standing in for "the
  transaction"), so of N concurrent callers exactly one sees the condition hold. A real database
  does the same with a conditional ``UPDATE``/``DELETE`` and its row count, which also holds across
  processes — this backend only serves one process, so it is for tests and examples, not production.

It ships with grantd as ``grantd.testing.memory_store`` and registers like any plugin (a
``storage_backends`` hookimpl): ``[plugins] modules = ["grantd.testing.memory_store"]`` and
``[storage] plugin = "memory"``. The contract suite (``grantd.testing``) runs against it as the
``example`` backend.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import heapq
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grantd.core.lifecycle import EXPIRED, Lapse
from grantd.core.paging import PageRequest
from grantd.hookspecs import hookimpl
from grantd.store import Conflict, LimitReached, OwnerBound, StoreError
from grantd.store.files import open_backup_target
from grantd.store.oauth import union_scope, was_live
from grantd.store.records import (
    AGENT_CHANGEABLE,
    GRANT_CHANGEABLE,
    PERSON_CHANGEABLE,
    Agent,
    Consent,
    Delegation,
    DeviceCode,
    Grant,
    GrantEvent,
    PasskeyCredential,
    Person,
    RefreshToken,
    RegistrationUrl,
    Session,
    SigningKey,
    WebAuthnChallenge,
)
from grantd.store.rows import page_rows


def _newest_first(rows: list[Any], id_key: str, page: PageRequest) -> tuple[list[Any], bool]:
    """Paging as every backend does it: newest first by (created_at, id), after the cursor."""
    rows = sorted(rows, key=lambda r: (r["created_at"], r[id_key]), reverse=True)
    if page.after is not None:
        mark = (page.after.created_at, page.after.id)
        rows = [r for r in rows if (r["created_at"], r[id_key]) < mark]
    return page_rows([copy.deepcopy(r) for r in rows[: page.limit + 1]], page.limit)


class _Data:
    """The whole database: plain dicts, and one lock that every write holds for its whole body."""

    def __init__(self) -> None:
        self.tx = asyncio.Lock()
        self.keys: list[SigningKey] = []  # oldest first
        self.agents: dict[str, Agent] = {}
        self.challenges: dict[str, tuple[str, int]] = {}
        self.grants: dict[str, Grant] = {}
        self.events: list[GrantEvent] = []
        self.seq = 0
        self.delegations: dict[str, Delegation] = {}
        self.rates: dict[tuple[str, int], int] = {}  # (key, window_start) -> count
        self.rate_ends: list[tuple[int, str, int]] = []  # heap of (ends_at, key, window_start)
        self.people: dict[str, Person] = {}
        self.credentials: dict[str, PasskeyCredential] = {}
        self.sessions: dict[str, Session] = {}
        self.registrations: dict[str, RegistrationUrl] = {}
        self.webauthn: dict[str, WebAuthnChallenge] = {}
        self.onetime: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}  # (kind, key) -> (data, expires_at)
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.device_codes: dict[str, DeviceCode] = {}
        self.consents: dict[tuple[str, str], Consent] = {}  # (person_id, client_id) -> consent

    def record(self, event: str, grant: Grant, now: int) -> None:
        self.seq += 1
        self.events.append({"seq": self.seq, "event": event, "grant_id": grant["id"], "requester": grant["requester"],
                            "grant": copy.deepcopy(grant), "created_at": now})

    def agent_by_email(self, email: str) -> Agent | None:
        return next((a for a in self.agents.values() if a["email"] == email.lower()), None)

    def person_by_email(self, email: str) -> Person | None:
        return next((p for p in self.people.values() if p["email"] == email.lower()), None)

    def check_person(self, person: Person) -> None:
        """An e-mail is unique across persons and agents (D11); call it inside ``tx``."""
        if self.agent_by_email(person["email"]) or self.person_by_email(person["email"]):
            raise Conflict("email")
        if person["person_id"] in self.people:
            raise Conflict("id")

    def person_id_of(self, email: str | None) -> str | None:
        """The person an owner/approver e-mail names now (D11); call it inside ``tx``."""
        found = self.person_by_email(email) if email else None
        return found["person_id"] if found else None

    def bind(self, email: str, person_id: str) -> None:
        """Agents naming ``email`` without an id are bound to ``person_id`` (D11); inside ``tx``."""
        for agent in self.agents.values():
            for party in ("owner", "approver"):
                if agent[party] == email and agent[f"{party}_id"] is None:  # type: ignore[literal-required]
                    agent[f"{party}_id"] = person_id  # type: ignore[literal-required]

    def insert_person(self, person: Person, *, unnamed: bool = False) -> Person:
        row: Person = {**copy.deepcopy(person), "email": person["email"].lower(), "admin": bool(person["admin"])}
        self.check_person(row)
        email = row["email"]
        if unnamed and (
            any(email in (a["owner"], a["approver"]) for a in self.agents.values())
            or any(d["status"] == "active" and email in (d["delegator"], d["delegate"]) for d in self.delegations.values())
        ):
            raise Conflict("named")
        self.people[row["person_id"]] = row
        self.bind(email, row["person_id"])
        return copy.deepcopy(row)

    def credentials_of(self, person_id: str) -> list[PasskeyCredential]:
        found = [c for c in self.credentials.values() if c["person_id"] == person_id]
        return sorted(found, key=lambda c: (c["created_at"], c["credential_id"]))

    def insert_credential(self, credential: PasskeyCredential) -> PasskeyCredential:
        row: PasskeyCredential = {**copy.deepcopy(credential), "transports": list(credential["transports"] or []),
                                  "backed_up": bool(credential["backed_up"])}
        if row["credential_id"] in self.credentials:
            raise Conflict("credential_id")
        self.credentials[row["credential_id"]] = row
        return copy.deepcopy(row)


class MemoryKeys:
    def __init__(self, data: _Data):
        self._d = data

    async def all(self) -> list[SigningKey]:
        return copy.deepcopy(self._d.keys[::-1])

    async def active_kid(self, alg: str = "EdDSA") -> str | None:
        return next((k["kid"] for k in reversed(self._d.keys) if k["alg"] == alg and k["retired_at"] is None), None)

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

    async def create(self, agent: Agent, reserved_emails: frozenset[str], *, max_per_owner: int = 0) -> Agent:
        row: Agent = {**copy.deepcopy(agent)}
        row["key_generation"] = row.get("key_generation") or 1
        email = row["email"]
        async with self._d.tx:
            row["owner_id"] = self._d.person_id_of(row["owner"])
            row["approver_id"] = self._d.person_id_of(row["approver"])
            if max_per_owner > 0:
                owned = [a for a in self._d.agents.values()
                         if (a["owner_id"] == row["owner_id"] if row["owner_id"]
                             else a["owner_id"] is None and a["owner"] == row["owner"])]
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
        return copy.deepcopy(row)

    async def get(self, ident: str) -> Agent | None:
        found = self._d.agents.get(ident) or self._d.agent_by_email(ident)
        return copy.deepcopy(found)

    async def get_by_id(self, agent_id: str) -> Agent | None:
        return copy.deepcopy(self._d.agents.get(agent_id))

    async def list(self, page: PageRequest) -> tuple[list[Agent], bool]:
        return _newest_first(list(self._d.agents.values()), "agent_id", page)

    async def update(self, agent_id: str, changes: dict[str, Any]) -> Agent | None:
        async with self._d.tx:
            agent = self._d.agents.get(agent_id)
            if agent is None:
                return None
            self._check_people(changes.get("owner"), changes.get("approver"))
            if "key_id" in changes:
                self._check_key(changes["key_id"], agent_id)
            if "public_key" in changes and changes["public_key"] != agent["public_key"]:
                agent["key_generation"] += 1
            for party in ("owner", "approver"):  # a new e-mail is bound to its person now (D11)
                if party in changes and changes[party] != agent[party]:  # type: ignore[literal-required]
                    agent[f"{party}_id"] = self._d.person_id_of(changes[party])  # type: ignore[literal-required]
            for column in AGENT_CHANGEABLE:
                if column in changes:
                    agent[column] = changes[column]  # type: ignore[literal-required]
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
                if (grant["requester_id"] == agent_id and grant["status"] in ("pending", "approved")
                        and not lapse.lapsed(grant)):
                    grant.update({"status": "revoked", "revoked_by": by, "revoked_at": now,
                                  "decision_reason": reason, "version": grant["version"] + 1})
                    self._d.record("grant.revoked", grant, now)
                    revoked.append(copy.deepcopy(grant))
            for delegation in self._d.delegations.values():
                if delegation["delegate"] == agent["email"] and delegation["status"] == "active":
                    delegation.update({"status": "revoked", "revoked_by": by, "revoked_at": now})
            self._d.challenges = {c: v for c, v in self._d.challenges.items() if v[0] != agent_id}
            if delete:
                del self._d.agents[agent_id]
            else:
                agent.update({"status": "disabled", "key_generation": agent["key_generation"] + 1, "updated_at": now})
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


class MemoryGrants:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, grant: Grant, events: Sequence[str], *, bound: OwnerBound | None = None) -> Grant:
        row: Grant = {**copy.deepcopy(grant), "version": 1}
        async with self._d.tx:
            if row["id"] in self._d.grants:
                raise Conflict("id")
            if bound is not None and bound.limit > 0 and row["status"] == "pending":
                self._check_owner_bound(row["requester_id"], bound)
            self._d.grants[row["id"]] = row
            for event in events:
                self._d.record(event, row, row["created_at"])
        return copy.deepcopy(row)

    def _check_owner_bound(self, requester_id: str, bound: OwnerBound) -> None:
        agent = self._d.agents.get(requester_id)
        if agent is None:
            return  # a person's own request, or the management token's for someone not enrolled
        if agent["owner_id"]:
            same = {a["agent_id"] for a in self._d.agents.values() if a["owner_id"] == agent["owner_id"]}
        else:
            same = {a["agent_id"] for a in self._d.agents.values() if a["owner_id"] is None and a["owner"] == agent["owner"]}
        pending = sum(1 for g in self._d.grants.values()
                      if g["requester_id"] in same and g["status"] == "pending" and not bound.lapse.lapsed(g))
        if pending >= bound.limit:
            raise LimitReached("pending_per_owner", bound.limit)

    async def get(self, grant_id: str) -> Grant | None:
        return copy.deepcopy(self._d.grants.get(grant_id))

    async def find_reusable(self, requester_id: str, reuse_key: str, lapse: Lapse) -> Grant | None:
        found = [g for g in self._d.grants.values()
                 if g["requester_id"] == requester_id and g["reuse_key"] == reuse_key
                 and g["status"] == "approved" and not lapse.lapsed(g)]
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
    ) -> tuple[list[Grant], bool]:
        rows = [g for g in self._d.grants.values()
                if (not status or lapse.status_of(g) == status)  # the status as read, not as stored
                and (not requester or g["requester"] == requester)
                and (requester_ids is None or g["requester_id"] in requester_ids)]
        return _newest_first(rows, "id", page)

    async def update_if(
        self, grant_id: str, *, expect: Sequence[str], changes: dict[str, Any], event: str, lapse: Lapse, now: int
    ) -> Grant | None:
        async with self._d.tx:  # the condition and the change in one critical section
            grant = self._d.grants.get(grant_id)
            if grant is None or grant["status"] not in expect or lapse.lapsed(grant):
                return None
            for column, value in changes.items():
                if column in GRANT_CHANGEABLE:
                    grant[column] = copy.deepcopy(value)  # type: ignore[literal-required]
            grant["version"] += 1
            self._d.record(event, grant, now)
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
        return copy.deepcopy(row)

    async def get(self, delegation_id: str) -> Delegation | None:
        return copy.deepcopy(self._d.delegations.get(delegation_id))

    async def list(self, *, party: str | None, page: PageRequest) -> tuple[list[Delegation], bool]:
        rows = [d for d in self._d.delegations.values() if party is None or party in (d["delegator"], d["delegate"])]
        return _newest_first(rows, "id", page)

    async def revoke(self, delegation_id: str, by: str, now: int) -> Delegation | None:
        async with self._d.tx:
            delegation = self._d.delegations.get(delegation_id)
            if delegation is None or delegation["status"] != "active":
                return None
            delegation.update({"status": "revoked", "revoked_at": now, "revoked_by": by})
            return copy.deepcopy(delegation)

    async def live_for(self, delegate: str, lapse: Lapse) -> builtins.list[Delegation]:
        rows = [d for d in self._d.delegations.values()
                if d["delegate"] == delegate and d["status"] == "active" and not lapse.lapsed(d)]
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


# -- people (grantd.store.people) ----------------------------------------------------------------------
class MemoryPeople:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, person: Person, *, unnamed: bool = False) -> Person:
        async with self._d.tx:
            return self._d.insert_person(person, unnamed=unnamed)

    async def get(self, ident: str) -> Person | None:
        return copy.deepcopy(self._d.people.get(ident) or self._d.person_by_email(ident))

    async def list(self, page: PageRequest, search: str | None = None) -> tuple[builtins.list[Person], bool]:
        needle = search.casefold() if search else None  # a literal substring: no wildcards
        rows = [p for p in self._d.people.values()
                if needle is None or needle in p["email"].casefold() or needle in p["name"].casefold()]
        return _newest_first(rows, "person_id", page)

    async def update(self, person_id: str, changes: dict[str, Any]) -> Person | None:
        async with self._d.tx:
            person = self._d.people.get(person_id)
            if person is None:
                return None
            for column in PERSON_CHANGEABLE:
                if column in changes:
                    value = bool(changes[column]) if column == "admin" else changes[column]
                    person[column] = value  # type: ignore[literal-required]
            return copy.deepcopy(person)

    async def delete(self, person_id: str, now: int) -> Person | None:
        async with self._d.tx:  # the person and everything of theirs in one critical section
            person = self._d.people.pop(person_id, None)
            if person is None:
                return None
            d = self._d
            d.credentials = {k: c for k, c in d.credentials.items() if c["person_id"] != person_id}
            d.sessions = {k: s for k, s in d.sessions.items() if s["person_id"] != person_id}
            d.webauthn = {k: c for k, c in d.webauthn.items() if c["person_id"] != person_id}
            d.registrations = {k: r for k, r in d.registrations.items()
                               if not (r["email"] == person["email"] and r["used_at"] is None)}
            d.refresh_tokens = {k: t for k, t in d.refresh_tokens.items() if t["person_id"] != person_id}
            d.consents = {k: c for k, c in d.consents.items() if c["person_id"] != person_id}
            return person

    async def retire(
        self, person_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Person, builtins.list[Grant]] | None:
        async with self._d.tx:  # everything of the person in one critical section
            d = self._d
            person = d.people.get(person_id)
            if person is None:
                return None
            before = copy.deepcopy(person)
            email = person["email"]
            revoked: list[Grant] = []
            for grant in sorted(d.grants.values(), key=lambda g: (g["created_at"], g["id"])):
                if (grant["requester_id"] == person_id and grant["status"] in ("pending", "approved")
                        and not lapse.lapsed(grant)):
                    grant.update({"status": "revoked", "revoked_by": by, "revoked_at": now,
                                  "decision_reason": reason, "version": grant["version"] + 1})
                    d.record("grant.revoked", grant, now)
                    revoked.append(copy.deepcopy(grant))
            for delegation in d.delegations.values():
                if delegation["status"] == "active" and email in (delegation["delegator"], delegation["delegate"]):
                    delegation.update({"status": "revoked", "revoked_by": by, "revoked_at": now})
            for session in d.sessions.values():
                if session["person_id"] == person_id and session["revoked_at"] is None:
                    session["revoked_at"] = now
            for token in d.refresh_tokens.values():
                if token["person_id"] == person_id and token["revoked_at"] is None:
                    token["revoked_at"] = now
            d.bind(email, person_id)
            if delete:
                del d.people[person_id]
                d.credentials = {k: c for k, c in d.credentials.items() if c["person_id"] != person_id}
                d.sessions = {k: s for k, s in d.sessions.items() if s["person_id"] != person_id}
                d.webauthn = {k: c for k, c in d.webauthn.items() if c["person_id"] != person_id}
                d.registrations = {k: r for k, r in d.registrations.items()
                                   if not (r["email"] == email and r["used_at"] is None)}
                d.refresh_tokens = {k: t for k, t in d.refresh_tokens.items() if t["person_id"] != person_id}
                d.consents = {k: c for k, c in d.consents.items() if c["person_id"] != person_id}
            else:
                person.update({"status": "disabled", "updated_at": now})
            return before, revoked


class MemoryCredentials:
    def __init__(self, data: _Data):
        self._d = data

    async def get(self, credential_id: str) -> PasskeyCredential | None:
        return copy.deepcopy(self._d.credentials.get(credential_id))

    async def list_for(self, person_id: str) -> builtins.list[PasskeyCredential]:
        return copy.deepcopy(self._d.credentials_of(person_id))

    async def add(self, credential: PasskeyCredential) -> PasskeyCredential:
        async with self._d.tx:
            return self._d.insert_credential(credential)

    async def use(self, credential_id: str, sign_count: int, now: int) -> PasskeyCredential | None:
        async with self._d.tx:  # compare and set in one critical section: one winner per count
            found = self._d.credentials.get(credential_id)
            if found is None or not (found["sign_count"] < sign_count or found["sign_count"] == sign_count == 0):
                return None
            found["sign_count"], found["last_used_at"] = int(sign_count), now
            return copy.deepcopy(found)

    async def delete(self, person_id: str, credential_id: str, now: int) -> bool | None:
        async with self._d.tx:  # counted and deleted together: the last passkey always stays
            found = self._d.credentials.get(credential_id)
            if found is None or found["person_id"] != person_id:
                return None
            if len(self._d.credentials_of(person_id)) <= 1:
                return False
            del self._d.credentials[credential_id]
            for session in self._d.sessions.values():  # its sessions end with it, in the same step
                if session.get("credential_id") == credential_id and session["revoked_at"] is None:
                    session["revoked_at"] = now
            return True


class MemorySessions:
    def __init__(self, data: _Data):
        self._d = data

    @staticmethod
    def _live(session: Session, now: int) -> bool:
        return session["revoked_at"] is None and session["expires_at"] > now

    async def create(self, session: Session) -> Session:
        row: Session = copy.deepcopy(session)
        async with self._d.tx:
            self._d.sessions = {k: s for k, s in self._d.sessions.items() if s["expires_at"] > row["created_at"]}
            if row["session_id"] in self._d.sessions:
                raise Conflict("session_id")
            self._d.sessions[row["session_id"]] = row
        return copy.deepcopy(row)

    async def get(self, session_id: str, now: int) -> Session | None:
        found = self._d.sessions.get(session_id)
        return copy.deepcopy(found) if found is not None and self._live(found, now) else None

    async def touch(self, session_id: str, now: int) -> None:
        async with self._d.tx:
            found = self._d.sessions.get(session_id)
            if found is not None and found["last_seen_at"] < now:
                found["last_seen_at"] = now

    async def list(self, page: PageRequest, person_id: str | None, now: int) -> tuple[builtins.list[Session], bool]:
        rows = [s for s in self._d.sessions.values()
                if self._live(s, now) and (person_id is None or s["person_id"] == person_id)]
        return _newest_first(rows, "session_id", page)

    async def _revoke(self, column: str, value: str, now: int) -> int:
        async with self._d.tx:
            hits = [s for s in self._d.sessions.values() if s[column] == value and self._live(s, now)]  # type: ignore[literal-required]
            for session in hits:
                session["revoked_at"] = now
            return len(hits)

    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke("family_id", family_id, now)

    async def revoke_person(self, person_id: str, now: int) -> int:
        return await self._revoke("person_id", person_id, now)


class MemoryRegistrations:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, registration: RegistrationUrl) -> RegistrationUrl:
        row: RegistrationUrl = {**copy.deepcopy(registration), "email": registration["email"].lower(),
                                "admin": bool(registration["admin"])}
        async with self._d.tx:
            if any(r["token_hash"] == row["token_hash"] for r in self._d.registrations.values()):
                raise Conflict("token_hash")
            if row["id"] in self._d.registrations:
                raise Conflict("id")
            self._d.registrations[row["id"]] = row
        return copy.deepcopy(row)

    async def get_by_token_hash(self, token_hash: str) -> RegistrationUrl | None:
        return copy.deepcopy(next((r for r in self._d.registrations.values() if r["token_hash"] == token_hash), None))

    async def list(self, page: PageRequest) -> tuple[builtins.list[RegistrationUrl], bool]:
        return _newest_first(list(self._d.registrations.values()), "id", page)

    async def delete(self, registration_id: str) -> bool:
        async with self._d.tx:
            return self._d.registrations.pop(registration_id, None) is not None

    async def complete(
        self, token_hash: str, person: Person, credential: PasskeyCredential, now: int
    ) -> tuple[Person, PasskeyCredential]:
        d = self._d
        async with d.tx:  # every check before any change: a Conflict leaves everything as it was
            url = next((r for r in d.registrations.values() if r["token_hash"] == token_hash), None)
            if url is None or url["used_at"] is not None or url["expires_at"] <= now:
                raise Conflict("token")
            if person["email"].lower() != url["email"]:
                raise Conflict("email")
            found = d.person_by_email(url["email"])
            if found is None:
                d.check_person(person)
            owner_id = found["person_id"] if found is not None else person["person_id"]
            if url["purpose"] == "register" and any(c["rp_id"] == url["rp_id"] for c in d.credentials_of(owner_id)):
                raise Conflict("credential")
            if credential["credential_id"] in d.credentials:
                raise Conflict("credential_id")
            owner = copy.deepcopy(found) if found is not None else d.insert_person(person)
            added = d.insert_credential({**credential, "person_id": owner_id})
            url["used_at"] = now
            return owner, added


class MemoryWebAuthnChallenges:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, challenge: WebAuthnChallenge, now: int) -> None:
        async with self._d.tx:
            self._d.webauthn = {k: c for k, c in self._d.webauthn.items() if c["expires_at"] > now}
            if challenge["challenge"] in self._d.webauthn:
                raise Conflict("challenge")
            self._d.webauthn[challenge["challenge"]] = copy.deepcopy(challenge)

    async def take(self, challenge: str, purpose: str, now: int) -> WebAuthnChallenge | None:
        async with self._d.tx:  # check and delete in one critical section: exactly one taker wins
            found = self._d.webauthn.get(challenge)
            if found is None or found["purpose"] != purpose:
                return None
            del self._d.webauthn[challenge]
            return found if found["expires_at"] > now else None


# -- OAuth (grantd.store.oauth) --------------------------------------------------------------------------
class MemoryOneTime:
    def __init__(self, data: _Data):
        self._d = data

    async def put(self, kind: str, key: str, data: dict[str, Any], expires_at: int, now: int) -> None:
        async with self._d.tx:
            self._d.onetime = {k: v for k, v in self._d.onetime.items() if v[1] > now}  # an expired twin goes too
            if (kind, key) in self._d.onetime:
                raise Conflict("key")
            self._d.onetime[(kind, key)] = (copy.deepcopy(data), expires_at)

    async def take(self, kind: str, key: str, now: int) -> dict[str, Any] | None:
        async with self._d.tx:  # check and delete in one critical section: exactly one taker wins
            found = self._d.onetime.pop((kind, key), None)
        if found is None or found[1] <= now:
            return None
        return found[0]


class MemoryRefreshTokens:
    def __init__(self, data: _Data):
        self._d = data

    @staticmethod
    def _live(token: RefreshToken, now: int) -> bool:
        return token["used_at"] is None and token["revoked_at"] is None and token["expires_at"] > now

    async def create(self, token: RefreshToken) -> RefreshToken:
        row: RefreshToken = copy.deepcopy(token)
        async with self._d.tx:
            self._d.refresh_tokens = {k: t for k, t in self._d.refresh_tokens.items()
                                      if t["expires_at"] > row["created_at"]}  # families that ended before
            if row["token_hash"] in self._d.refresh_tokens:
                raise Conflict("token_hash")
            self._d.refresh_tokens[row["token_hash"]] = row
        return copy.deepcopy(row)

    async def rotate(self, token_hash: str, new: RefreshToken, now: int) -> tuple[str, RefreshToken | None]:
        async with self._d.tx:  # the check, the use and the insert in one critical section
            tokens = self._d.refresh_tokens
            old = tokens.get(token_hash)
            if old is None:
                return "unknown", None
            before = copy.deepcopy(old)
            if old["expires_at"] <= now:
                return "expired", before
            if old["revoked_at"] is not None and old["used_at"] is None:
                return "revoked", before
            if old["used_at"] is not None:  # a replay: the whole family goes (if it has not yet)
                for t in tokens.values():
                    if t["family_id"] == old["family_id"] and t["revoked_at"] is None:
                        t["revoked_at"] = now
                return "reused", before
            if new["token_hash"] in tokens:
                raise Conflict("token_hash")  # nothing changed
            old["used_at"] = now
            tokens[new["token_hash"]] = copy.deepcopy(new)
            return "rotated", before

    async def get(self, token_hash: str) -> RefreshToken | None:
        return copy.deepcopy(self._d.refresh_tokens.get(token_hash))

    async def family_live(self, family_id: str, now: int) -> bool:
        return any(t["family_id"] == family_id and t["revoked_at"] is None and t["expires_at"] > now
                   for t in self._d.refresh_tokens.values())

    async def _revoke(self, match: Callable[[RefreshToken], bool], now: int) -> int:
        async with self._d.tx:
            ended = [t for t in self._d.refresh_tokens.values() if match(t) and t["revoked_at"] is None]
            for t in ended:
                t["revoked_at"] = now
            return was_live(ended, now)

    async def revoke_family(self, family_id: str, now: int) -> int:
        return await self._revoke(lambda t: t["family_id"] == family_id, now)

    async def revoke_person(self, person_id: str, now: int, client_id: str | None = None) -> int:
        return await self._revoke(
            lambda t: t["person_id"] == person_id and (client_id is None or t["client_id"] == client_id), now
        )

    async def list_families(self, person_id: str, now: int) -> builtins.list[RefreshToken]:
        # a live family has exactly one unused token, its newest
        rows = [t for t in self._d.refresh_tokens.values() if t["person_id"] == person_id and self._live(t, now)]
        return copy.deepcopy(sorted(rows, key=lambda t: (t["created_at"], t["token_hash"]), reverse=True))


class MemoryDeviceCodes:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, device: DeviceCode) -> DeviceCode:
        row: DeviceCode = copy.deepcopy(device)
        async with self._d.tx:
            self._d.device_codes = {k: c for k, c in self._d.device_codes.items() if c["expires_at"] > row["created_at"]}
            if any(c["user_code"] == row["user_code"] for c in self._d.device_codes.values()):
                raise Conflict("user_code")
            if row["device_code_hash"] in self._d.device_codes:
                raise Conflict("device_code_hash")
            self._d.device_codes[row["device_code_hash"]] = row
        return copy.deepcopy(row)

    async def get_by_user_code(self, user_code: str, now: int) -> DeviceCode | None:
        found = next((c for c in self._d.device_codes.values()
                      if c["user_code"] == user_code and c["expires_at"] > now), None)
        return copy.deepcopy(found)

    async def decide(self, user_code: str, person_id: str, approved: bool, now: int) -> DeviceCode | None:
        async with self._d.tx:  # compare and set in one critical section: one decider wins
            found = next((c for c in self._d.device_codes.values() if c["user_code"] == user_code), None)
            if found is None or found["status"] != "pending" or found["expires_at"] <= now:
                return None
            found.update({"status": "approved" if approved else "denied", "person_id": person_id, "decided_at": now})
            return copy.deepcopy(found)

    async def poll(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._d.tx:
            found = self._d.device_codes.get(device_code_hash)
            if found is None:
                return None
            before = copy.deepcopy(found)
            found["last_polled_at"] = now
            return before

    async def take(self, device_code_hash: str, now: int) -> DeviceCode | None:
        async with self._d.tx:  # check and delete in one critical section: exactly one taker wins
            found = self._d.device_codes.get(device_code_hash)
            if found is None or found["status"] != "approved" or found["expires_at"] <= now:
                return None
            return self._d.device_codes.pop(device_code_hash)

    async def slow_down(self, device_code_hash: str, interval: int, now: int) -> None:
        async with self._d.tx:
            found = self._d.device_codes.get(device_code_hash)
            if found is not None and found["interval"] < interval:
                found["interval"] = int(interval)


class MemoryConsents:
    def __init__(self, data: _Data):
        self._d = data

    async def remember(self, consent: Consent) -> Consent:
        async with self._d.tx:
            key = (consent["person_id"], consent["client_id"])
            found = self._d.consents.get(key)
            row: Consent = {**copy.deepcopy(consent), "scope": union_scope("", consent["scope"])}
            if found is not None:
                row["scope"] = union_scope(found["scope"], row["scope"])
                row["created_at"] = found["created_at"]
            self._d.consents[key] = row
            return copy.deepcopy(row)

    async def get(self, person_id: str, client_id: str) -> Consent | None:
        return copy.deepcopy(self._d.consents.get((person_id, client_id)))

    async def list_for(self, person_id: str) -> builtins.list[Consent]:
        rows = sorted((c for c in self._d.consents.values() if c["person_id"] == person_id),
                      key=lambda c: c["client_id"])
        return copy.deepcopy(sorted(rows, key=lambda c: c["updated_at"], reverse=True))

    async def withdraw(self, person_id: str, client_id: str, now: int) -> bool:
        async with self._d.tx:  # the consent and the client's refresh families together
            found = self._d.consents.pop((person_id, client_id), None)
            for t in self._d.refresh_tokens.values():
                if t["person_id"] == person_id and t["client_id"] == client_id and t["revoked_at"] is None:
                    t["revoked_at"] = now
            return found is not None


class MemoryStore:
    """``grantd.store.Store`` in memory (one process; lost on exit)."""

    def __init__(self) -> None:
        data = _Data()
        self.keys = MemoryKeys(data)
        self.agents = MemoryAgents(data)
        self.challenges = MemoryChallenges(data)
        self.grants = MemoryGrants(data)
        self.delegations = MemoryDelegations(data)
        self.rates = MemoryRates(data)
        self.people = MemoryPeople(data)
        self.credentials = MemoryCredentials(data)
        self.sessions = MemorySessions(data)
        self.registrations = MemoryRegistrations(data)
        self.webauthn_challenges = MemoryWebAuthnChallenges(data)
        self.onetime = MemoryOneTime(data)
        self.refresh_tokens = MemoryRefreshTokens(data)
        self.device_codes = MemoryDeviceCodes(data)
        self.consents = MemoryConsents(data)
        self._migrated = False

    async def migrate(self) -> list[int]:
        if self._migrated:
            return []
        self._migrated = True
        return [1]

    async def ping(self) -> bool:
        return True

    def schema_version(self) -> int:
        return 1 if self._migrated else 0

    def serving(self) -> None:
        """Nothing to start: an in-memory store has no files to checkpoint (the contract allows none)."""

    def close(self) -> None:
        pass

    async def backup(self, target: str) -> None:
        """A JSON dump, created mode 0600 like every file that holds keys (D12)."""
        data = self.keys._d
        dump = {"keys": data.keys, "agents": data.agents, "grants": data.grants, "events": data.events,
                "delegations": data.delegations, "people": data.people, "credentials": data.credentials,
                "sessions": data.sessions, "registrations": data.registrations,
                "refresh_tokens": data.refresh_tokens, "device_codes": data.device_codes,
                # JSON objects have string keys: the pairs keyed ones are stored as lists
                "onetime": [[k, v] for k, v in data.onetime.items()], "consents": list(data.consents.values())}
        with os.fdopen(open_backup_target(Path(target)), "w") as f:
            json.dump(dump, f)

    async def restore(self, source: str) -> str:
        """Load a dump written by ``backup``; the current contents are first dumped beside it."""
        try:
            with open(source) as f:
                dump = json.load(f)
        except (OSError, ValueError) as exc:
            raise StoreError(f"{source} is not a backup of the memory store ({exc})") from None
        if not isinstance(dump, dict) or not {"keys", "agents", "grants", "events"} <= set(dump):
            raise StoreError(f"{source} is not a backup of the memory store")
        keep = f"{source}.before-restore"
        if os.path.exists(keep):
            raise StoreError(f"{keep} exists (the copy an earlier restore kept): move it away first")
        await self.backup(keep)
        data = self.keys._d
        dump["onetime"] = {tuple(k): tuple(v) for k, v in dump.get("onetime", [])}
        dump["consents"] = {(c["person_id"], c["client_id"]): c for c in dump.get("consents", [])}
        async with data.tx:
            for name, value in dump.items():
                if hasattr(data, name):
                    setattr(data, name, value)
        return keep


@hookimpl
def storage_backends() -> dict[str, Callable[[Any], MemoryStore]]:
    return {"memory": lambda config: MemoryStore()}
