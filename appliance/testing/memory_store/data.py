"""The in-memory example's data: every record kind in dicts, one lock standing in for the transaction."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from grantd.core.paging import PageRequest
from grantd.store import Conflict
from grantd.store.ciba import CibaClient, CibaRequest
from grantd.store.records import (
    Agent,
    Consent,
    Delegation,
    DeviceCode,
    Grant,
    GrantEvent,
    GrantReview,
    PasskeyCredential,
    Person,
    RefreshToken,
    RegistrationUrl,
    Session,
    SigningKey,
    Vote,
    WebAuthnChallenge,
)
from grantd.store.rows import page_rows
from grantd.store.tlog import credential_event

from .tlog import record_event


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
        self.reviews: dict[str, GrantReview] = {}  # grant id -> its pinned review (D13)
        self.review_due: dict[str, int] = {}  # grant id -> when the sweep looks at its review next
        self.votes: dict[str, list[Vote]] = {}  # grant id -> its votes, in order
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
        self.onetime: dict[
            tuple[str, str], tuple[dict[str, Any], int]
        ] = {}  # (kind, key) -> (data, expires_at)
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.device_codes: dict[str, DeviceCode] = {}
        self.outbox: dict[str, Any] = {}  # outbox row id -> grantd.store.notify.OutboxRow
        self.notify_prefs: dict[str, dict[str, Any]] = {}  # person id -> channel settings
        self.review_links: dict[str, Any] = {}  # token hash -> grantd.store.notify.ReviewLink
        self.push_subscriptions: dict[str, Any] = {}  # id -> grantd.store.notify.PushSubscription
        self.ciba_requests: dict[str, CibaRequest] = {}
        self.ciba_clients: dict[str, CibaClient] = {}
        self.consents: dict[tuple[str, str], Consent] = {}  # (person_id, client_id) -> consent

    def record(self, event: str, grant: Grant, now: int) -> None:
        self.seq += 1
        self.events.append(
            {
                "seq": self.seq,
                "event": event,
                "grant_id": grant["id"],
                "requester": grant["requester"],
                "grant": copy.deepcopy(grant),
                "created_at": now,
            }
        )

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
        row: Person = {
            **copy.deepcopy(person),
            "email": person["email"].lower(),
            "admin": bool(person["admin"]),
        }
        self.check_person(row)
        email = row["email"]
        if unnamed and (
            any(email in (a["owner"], a["approver"]) for a in self.agents.values())
            or any(
                d["status"] == "active" and email in (d["delegator"], d["delegate"])
                for d in self.delegations.values()
            )
        ):
            raise Conflict("named")
        self.people[row["person_id"]] = row
        self.bind(email, row["person_id"])
        return copy.deepcopy(row)

    def credentials_of(self, person_id: str) -> list[PasskeyCredential]:
        found = [c for c in self.credentials.values() if c["person_id"] == person_id]
        return sorted(found, key=lambda c: (c["created_at"], c["credential_id"]))

    def insert_credential(self, credential: PasskeyCredential) -> PasskeyCredential:
        row: PasskeyCredential = {
            **copy.deepcopy(credential),
            "transports": list(credential["transports"] or []),
            "backed_up": bool(credential["backed_up"]),
        }
        if row["credential_id"] in self.credentials:
            raise Conflict("credential_id")
        self.credentials[row["credential_id"]] = row
        owner = self.people.get(row["person_id"])
        record_event(self, credential_event(dict(row), owner["email"] if owner else None))
        return copy.deepcopy(row)
