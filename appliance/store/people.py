"""The storage contract for people (issue "People"): persons, their passkeys, their sessions,
registration URLs and WebAuthn ceremony challenges. Same guarantees as every part (see
``grantd.store``): one call is one transaction; conditional changes have exactly one winner across
processes; uniqueness violations raise ``Conflict`` naming the field.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from grantd.core.lifecycle import Lapse
from grantd.core.paging import PageRequest
from grantd.store.records import Grant, PasskeyCredential, Person, RegistrationUrl, Session, WebAuthnChallenge


@runtime_checkable
class PersonStore(Protocol):
    async def create(self, person: Person, *, unnamed: bool = False) -> Person:
        """Insert (the e-mail lowercased). ``Conflict("email")`` if a person or an agent has the e-mail
        (D11), ``Conflict("id")`` if the ``person_id`` exists; checked in the transaction of the insert.

        D11, in the same transaction: agents whose owner/approver e-mail is this one and is bound to
        no person yet (``owner_id``/``approver_id`` None) become bound to the new person; ids already
        bound (to a deleted person) stay as they are, so a person re-created with an e-mail inherits
        nothing. With ``unnamed`` (federation's ``create_unknown``) ``Conflict("named")`` instead if
        any agent names the e-mail as owner or approver or an active delegation as delegator or
        delegate. Every backend binds the same way when ``registrations.complete`` creates a person."""

    async def get(self, ident: str) -> Person | None:
        """By ``person_id`` or (lowercased) e-mail."""

    async def get_many(self, emails: Sequence[str]) -> dict[str, Person]:
        """The people with these e-mails (compared lowercased), by e-mail; an e-mail nobody has is
        absent. One statement where the backend can: a grant's notices look up everyone they tell
        (issue 27)."""

    async def list(self, page: PageRequest, search: str | None = None) -> tuple[builtins.list[Person], bool]:
        """Newest first by (created_at, person_id); ``search`` is a case-insensitive substring of
        the e-mail or the name (matched literally: ``%`` and ``_`` are not wildcards)."""

    async def admins(self, limit: int) -> builtins.list[str]:
        """The e-mails of the active people marked admin, oldest first by (created_at, person_id),
        at most ``limit``. Its cost follows the administrators, not everyone stored: a grant's
        notices and reviewers ask it (issue 27, item 5)."""

    async def update(self, person_id: str, changes: dict[str, Any]) -> Person | None:
        """Apply ``changes`` (name, admin, status, updated_at). None if the person is gone."""

    async def delete(self, person_id: str, now: int) -> Person | None:
        """Delete the person and, in the same transaction, their passkeys, sessions and WebAuthn
        challenges, and the unused registration URLs for their e-mail (used ones stay as history).
        Returns the person as it was; None if unknown."""

    async def retire(
        self, person_id: str, *, delete: bool, by: str, reason: str, now: int, lapse: Lapse
    ) -> tuple[Person, builtins.list[Grant]] | None:
        """D11, a person disabled or deleted, in one transaction: revoke the grants they requested
        (``requester_id`` = their ``person_id``) that are pending or approved and have not lapsed
        (``status = 'revoked'``, ``revoked_by = by``, ``revoked_at = now``, ``decision_reason =
        reason``, one ``grant.revoked`` event each); revoke every active delegation whose delegator
        or delegate is their e-mail (``revoked_by = by``); revoke their live sessions and refresh
        tokens (``revoked_at = now``); bind agents that still name their e-mail without an id to
        their ``person_id`` (so that nobody created later with it inherits them). Then either set
        ``status = 'disabled'`` (``updated_at = now``) or, with ``delete``, do what ``delete`` does.
        Returns the person as it was and the revoked grants; None if unknown."""


@runtime_checkable
class CredentialStore(Protocol):
    async def get(self, credential_id: str) -> PasskeyCredential | None: ...

    async def list_for(self, person_id: str) -> builtins.list[PasskeyCredential]:
        """Oldest first."""

    async def add(self, credential: PasskeyCredential) -> PasskeyCredential:
        """Insert (a signed-in person adding a passkey). ``Conflict("credential_id")`` if the id exists."""

    async def use(self, credential_id: str, sign_count: int, now: int) -> PasskeyCredential | None:
        """Record a sign-in: set ``sign_count`` and ``last_used_at`` only if the new count is greater
        than the stored one, or both are 0 (authenticators without counters). None otherwise (a
        cloned authenticator or a replay), or if unknown: exactly one of concurrent users of one
        count above 0 wins."""

    async def delete(self, person_id: str, credential_id: str, now: int) -> bool | None:
        """Delete one of the person's passkeys unless it is their last one. True if deleted, False
        if it is the last one (kept), None if the person has no such passkey. Decided in the
        transaction, so two concurrent deletes of a person's last two passkeys cannot both win.
        In the same transaction, every unrevoked session started with it (``credential_id``) is
        revoked at ``now``: a stolen session cannot outlive the passkey it came from."""


@runtime_checkable
class SessionStore(Protocol):
    async def create(self, session: Session) -> Session:
        """Insert. ``Conflict("session_id")`` if the id exists. May drop sessions that expired before
        the new one's ``created_at`` (they are never read again)."""

    async def get(self, session_id: str, now: int) -> Session | None:
        """The session if it exists, is not revoked and has not expired at ``now`` (it has expired
        once ``expires_at <= now``)."""

    async def touch(self, session_id: str, now: int) -> None:
        """Record activity (``last_seen_at``). Cheap; may be skipped by callers within a minute."""

    async def list(
        self, page: PageRequest, person_id: str | None, now: int
    ) -> tuple[builtins.list[Session], bool]:
        """Live (unrevoked, unexpired) sessions, newest first by (created_at, session_id)."""

    async def revoke_family(self, family_id: str, now: int) -> int:
        """Revoke every live session of the family; return how many."""

    async def revoke_person(self, person_id: str, now: int) -> int:
        """Revoke every live session of the person; return how many."""


@runtime_checkable
class RegistrationStore(Protocol):
    async def create(self, registration: RegistrationUrl) -> RegistrationUrl:
        """Insert (the e-mail lowercased). ``Conflict("token_hash")`` or ``Conflict("id")``."""

    async def get_by_token_hash(self, token_hash: str) -> RegistrationUrl | None: ...

    async def list(self, page: PageRequest) -> tuple[builtins.list[RegistrationUrl], bool]:
        """Newest first by (created_at, id), used and expired ones included."""

    async def delete(self, registration_id: str) -> bool:
        """True if it existed (used or not)."""

    async def complete(
        self, token_hash: str, person: Person, credential: PasskeyCredential, now: int
    ) -> tuple[Person, PasskeyCredential]:
        """Redeem a registration URL, in one transaction: mark it used (only if unused and unexpired
        at ``now``: exactly one concurrent redeemer wins, the others get ``Conflict("token")``);
        create ``person`` unless a person with its e-mail exists (then use that one); refuse with
        ``Conflict("credential")`` a ``register`` URL for a person who already has a passkey on the
        URL's RP (the peer's takeover bug); add ``credential`` for the person. Returns both.

        ``person`` must carry the URL's e-mail (else ``Conflict("email")``); an existing person is
        used as stored (``person`` and its ``admin`` only matter when it is created) and the
        credential's ``person_id`` becomes that person's. Creating the person refuses an agent's
        e-mail (``Conflict("email")``, D11); an existing credential id is ``Conflict("credential_id")``.
        Any ``Conflict`` leaves everything as it was: the URL stays unused."""


@runtime_checkable
class WebAuthnChallengeStore(Protocol):
    async def create(self, challenge: WebAuthnChallenge, now: int) -> None:
        """Store a ceremony challenge (and drop expired ones). ``Conflict("challenge")`` if it exists."""

    async def take(self, challenge: str, purpose: str, now: int) -> WebAuthnChallenge | None:
        """Delete and return the challenge if it exists for ``purpose`` and has not expired
        (``expires_at > now``); exactly one concurrent taker gets it. A taker for another purpose
        gets None and leaves it."""
