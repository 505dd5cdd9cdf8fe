"""Who acts: every caller is a Principal with a kind and a stable id (D11).

- ``agent``: an enrolled agent; ``id`` is its ``agent_id`` (never reused), ``email`` its address.
- ``person``: a human; until person records exist (issue "People"), a person is known by e-mail:
  the configured administrators, and the owners and approvers an administrator names.
- ``management``: the management token, acting as ``admin.management_identity``.
- ``client``: an OAuth client (with the OAuth issue).
- ``guest``: a browser session from SP login (``grantd.sp``): another IdP vouched for ``email``;
  ``id`` is ``guest:`` + the session family. Not a person of this grantd, whatever the e-mail:
  ``grantd.core.policy`` refuses guests everything but saying who they are (/api/me) and logging out.
Owners, approvers and delegators are persons or the management identity, never agents, so an agent
can never decide a grant, directly or through a delegation.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grantd.store.records import Person


class Kind(StrEnum):
    AGENT = "agent"
    PERSON = "person"
    MANAGEMENT = "management"
    CLIENT = "client"
    GUEST = "guest"


@dataclass(frozen=True)
class Principal:
    kind: Kind
    id: str
    email: str
    admin: bool = False
    # D16: the RFC 7638 thumbprint of the key the agent's token is DPoP-bound to (None: a bearer).
    dpop_jkt: str | None = None
    # D16: the `act` claim of an exchanged token (an agent acting for this person), None otherwise.
    act: dict[str, object] | None = None
    # D16: the delegation that exchanged token stands on (with ``act``), None otherwise.
    delegation_id: str | None = None

    @property
    def is_agent(self) -> bool:
        return self.kind is Kind.AGENT

    @property
    def is_person(self) -> bool:
        """A human, or the management token acting for the management identity."""
        return self.kind in (Kind.PERSON, Kind.MANAGEMENT)

    @property
    def agent_id(self) -> str | None:
        return self.id if self.kind is Kind.AGENT else None


def management(identity: str) -> Principal:
    return Principal(Kind.MANAGEMENT, "management", identity, admin=True)


def agent(agent_id: str, email: str, *, dpop_jkt: str | None = None) -> Principal:
    return Principal(Kind.AGENT, agent_id, email, dpop_jkt=dpop_jkt)


def guest(family_id: str, email: str) -> Principal:
    """A guest of SP login (never an administrator, whatever its e-mail)."""
    return Principal(Kind.GUEST, "guest:" + family_id, email.lower())


def person(email: str, admin_emails: frozenset[str]) -> Principal:
    return Principal(Kind.PERSON, email, email, admin=email in admin_emails)


def person_is_admin(person: Person, admin_emails: frozenset[str]) -> bool:
    """The one rule for who among people is an administrator: the record says so, or their e-mail
    is one of ``admin_emails`` (config ``admin.emails`` and the management identity)."""
    return bool(person["admin"]) or person["email"].lower() in admin_emails


def for_person(person: Person, admin_emails: frozenset[str]) -> Principal:
    """A signed-in person (a ``Person`` record): id = ``person_id``."""
    return Principal(
        Kind.PERSON, person["person_id"], person["email"].lower(), admin=person_is_admin(person, admin_emails)
    )


ADMIN_SCOPE = "admin"


def for_access_token(person: Person, admin_emails: frozenset[str], scope: str) -> Principal:
    """A person acting through an OAuth access token (``grantd login``, ``grantd tui``, a client with
    API access): the person, with administrator rights only when they are an administrator *and*
    the token's scope names ``admin`` (D12). Only the device grant offers that scope, and only after
    the /device page told the person so; a token without it acts as the person in every other way
    (deciding grants they may decide), so an administrator tricked into approving a stranger's user
    code hands out no administrator rights."""
    principal = for_person(person, admin_emails)
    if principal.admin and ADMIN_SCOPE not in scope.split():
        return Principal(principal.kind, principal.id, principal.email, admin=False)
    return principal
