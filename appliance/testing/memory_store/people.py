"""Persons, passkeys, sessions, registration URLs and WebAuthn challenges of the in-memory example."""

from __future__ import annotations

import builtins
import copy
from collections.abc import Sequence
from typing import Any

from grantd.core.lifecycle import Lapse
from grantd.core.paging import PageRequest
from grantd.store import Conflict
from grantd.store.records import (
    PERSON_CHANGEABLE,
    Grant,
    PasskeyCredential,
    Person,
    RegistrationUrl,
    Session,
    WebAuthnChallenge,
)
from grantd.store.rows import fold

from .data import _Data, _newest_first


# -- people (grantd.store.people) ----------------------------------------------------------------------
class MemoryPeople:
    def __init__(self, data: _Data):
        self._d = data

    async def create(self, person: Person, *, unnamed: bool = False) -> Person:
        async with self._d.tx:
            return self._d.insert_person(person, unnamed=unnamed)

    async def get(self, ident: str) -> Person | None:
        return copy.deepcopy(self._d.people.get(ident) or self._d.person_by_email(ident))

    async def get_many(self, emails: Sequence[str]) -> dict[str, Person]:
        wanted = {e.lower() for e in emails}
        return {p["email"]: copy.deepcopy(p) for p in self._d.people.values() if p["email"] in wanted}

    async def list(self, page: PageRequest, search: str | None = None) -> tuple[builtins.list[Person], bool]:
        needle = fold(search) if search else None  # a literal substring: no wildcards
        rows = [
            p
            for p in self._d.people.values()
            if needle is None or needle in fold(p["email"]) or needle in fold(p["name"])
        ]
        return _newest_first(rows, "person_id", page)

    async def admins(self, limit: int) -> builtins.list[str]:
        found = [p for p in self._d.people.values() if p["admin"] and p["status"] == "active"]
        found.sort(key=lambda p: (p["created_at"], p["person_id"]))
        return [p["email"] for p in found[:limit]]

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
            d.registrations = {
                k: r
                for k, r in d.registrations.items()
                if not (r["email"] == person["email"] and r["used_at"] is None)
            }
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
                if (
                    grant["requester_id"] == person_id
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
                    d.record("grant.revoked", grant, now)
                    revoked.append(copy.deepcopy(grant))
            for delegation in d.delegations.values():
                if delegation["status"] == "active" and email in (
                    delegation["delegator"],
                    delegation["delegate"],
                ):
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
                d.registrations = {
                    k: r
                    for k, r in d.registrations.items()
                    if not (r["email"] == email and r["used_at"] is None)
                }
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
            if found is None or not (
                found["sign_count"] < sign_count or found["sign_count"] == sign_count == 0
            ):
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
            self._d.sessions = {
                k: s for k, s in self._d.sessions.items() if s["expires_at"] > row["created_at"]
            }
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

    async def list(
        self, page: PageRequest, person_id: str | None, now: int
    ) -> tuple[builtins.list[Session], bool]:
        rows = [
            s
            for s in self._d.sessions.values()
            if self._live(s, now) and (person_id is None or s["person_id"] == person_id)
        ]
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
        row: RegistrationUrl = {
            **copy.deepcopy(registration),
            "email": registration["email"].lower(),
            "admin": bool(registration["admin"]),
        }
        async with self._d.tx:
            if any(r["token_hash"] == row["token_hash"] for r in self._d.registrations.values()):
                raise Conflict("token_hash")
            if row["id"] in self._d.registrations:
                raise Conflict("id")
            self._d.registrations[row["id"]] = row
        return copy.deepcopy(row)

    async def get_by_token_hash(self, token_hash: str) -> RegistrationUrl | None:
        return copy.deepcopy(
            next((r for r in self._d.registrations.values() if r["token_hash"] == token_hash), None)
        )

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
            if url["purpose"] == "register" and any(
                c["rp_id"] == url["rp_id"] for c in d.credentials_of(owner_id)
            ):
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
