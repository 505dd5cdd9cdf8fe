"""May this principal do that? Every authorisation question of the routes and services is answered
here, from principal facts and records handed in; nothing else re-implements a rule. Pure: no I/O.

The facts a rule may need beyond the principal are passed explicitly: ``agent`` is the record of the
agent a grant or delegation concerns (its owner and approver), ``admin_emails`` the administrators'
addresses (``admin.emails`` and ``admin.management_identity``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grantd.core.errors import bad_request, forbidden, unauthorized
from grantd.core.principals import Kind, Principal


def identify(principal: Principal | None) -> Principal:
    """Any credential, a guest's too (only /api/me: who am I): none is a 401."""
    if principal is None:
        raise unauthorized()
    return principal


def require(principal: Principal | None) -> Principal:
    """Any credential that may act here: none is a 401; a guest of SP login is a 403 for everything
    (D9: another IdP's word makes nobody an owner, approver or administrator here, even when the
    e-mail it vouched for is a local person's)."""
    principal = identify(principal)
    if principal.kind is Kind.GUEST:
        raise forbidden("a guest signed in through another identity provider has no rights here")
    return principal


def require_admin(principal: Principal | None) -> Principal:
    principal = require(principal)
    if not principal.admin:
        raise forbidden("administrator rights required")
    return principal


# -- deciding -----------------------------------------------------------------------------------


def is_party(person_id: str | None, agent: Mapping[str, Any] | None) -> bool:
    """Is the person with this id the agent's owner or approver? By the stable id only (D11): the
    e-mail an agent names is never enough, so a person created later with a deleted owner's e-mail
    inherits nothing. An owner/approver bound to no person (None) is nobody's."""
    if person_id is None or agent is None:
        return False
    return person_id in (agent.get("owner_id"), agent.get("approver_id"))


def person_may_decide(
    person_id: str | None, email: str, agent: Mapping[str, Any] | None, admin_emails: frozenset[str]
) -> bool:
    """A person may decide an agent's grants: an administrator (by ``admin_emails``), or the agent's
    owner or approver by id. Used for a person acting now and for a delegator whose delegation is used.

    ``person_id`` None is a delegator the management token named who has no person record: it
    stands for the agent's owner/approver only where that party is the same e-mail and is bound to
    no person either (an address nobody has registered yet; once someone registers it, the agent is
    bound to them and only they, by id, decide)."""
    if email in admin_emails:
        return True
    if person_id is None:
        return agent is not None and any(
            agent.get(party + "_id") is None and agent.get(party) == email for party in ("owner", "approver")
        )
    return is_party(person_id, agent)


def may_decide(principal: Principal, agent: Mapping[str, Any] | None, admin_emails: frozenset[str]) -> bool:
    """Approve or deny a grant the agent requested. Never an agent (D11)."""
    if not principal.is_person:
        return False
    return principal.admin or person_may_decide(principal.id, principal.email, agent, admin_emails)


def may_see_grant(
    principal: Principal,
    grant: Mapping[str, Any],
    agent: Mapping[str, Any] | None,
    admin_emails: frozenset[str],
) -> bool:
    """Its requester, and whoever may decide it."""
    if principal.admin or grant["requester_id"] == principal.id:
        return True
    return may_decide(principal, agent, admin_emails)


def may_revoke_grant(
    principal: Principal,
    grant: Mapping[str, Any],
    agent: Mapping[str, Any] | None,
    admin_emails: frozenset[str],
) -> bool:
    """The requester withdraws its request or gives up its grant; deciders take it back."""
    return grant["requester_id"] == principal.id or may_decide(principal, agent, admin_emails)


def may_fetch_grant_token(principal: Principal, grant: Mapping[str, Any]) -> bool:
    """Only the requester holds the AuthZ-JWT of its grant."""
    return grant["requester_id"] == principal.id


@dataclass(frozen=True)
class GrantScope:
    """Which grants a principal's list shows: all (None), or those of the given requester ids."""

    requester_ids: tuple[str, ...] | None


def grant_list_scope(principal: Principal, decidable_agent_ids: tuple[str, ...] = ()) -> GrantScope:
    """Agents see their own grants; a person what they asked for and may decide; admins all.
    ``decidable_agent_ids`` are the agents the person owns or approves (a storage fact)."""
    if principal.admin:
        return GrantScope(None)
    if principal.is_agent:
        return GrantScope((principal.id,))
    return GrantScope((principal.id, *decidable_agent_ids))


def may_evaluate_policies(principal: Principal | None) -> Principal:
    """A dry run of the approval policies (D13: `POST /api/policies/evaluate`, `grantd policy
    test`) shows who could approve what: administrators (management token or admin person)."""
    return require_admin(principal)


def may_request_for_someone_else(principal: Principal) -> bool:
    """Deployment tools with the management token may file a request naming its requester."""
    return principal.kind is Kind.MANAGEMENT


# -- agents -------------------------------------------------------------------------------------


def may_manage_agents(principal: Principal | None) -> Principal:
    """Enrol, list, change, delete agents: administrators (management token or admin person)."""
    return require_admin(principal)


AGENT_EMAIL_PREFIX = "agent+"


def may_enrol_agents(principal: Principal | None) -> Principal:
    """``POST /api/agent/enroll``: administrators enrol any agent; a signed-in person enrols their own
    (D8, the /enroll page). Never an agent."""
    principal = require(principal)
    if principal.admin or principal.kind is Kind.PERSON:
        return principal
    raise forbidden("administrator rights required")


def enrolment_owner(principal: Principal, owner: str | None) -> str:
    """Whose agent it becomes: an administrator names anyone (default: themselves); a person's agent
    is always their own (D8), and naming someone else is a 403."""
    if principal.admin:
        return owner or principal.email
    if owner is not None and owner != principal.email:
        raise forbidden("a person enrols agents for themselves only: owner must be your e-mail")
    return principal.email


def may_name_approver(principal: Principal, approver: str) -> bool:
    """D11 (issue 19): a plain person names only themselves as the approver of their agent (or
    leaves it out: then it is themselves, and an administrator may change it); administrators name
    anyone. Naming another person would let anyone flood that person (the first administrator
    included) with approval requests."""
    return principal.admin or approver == principal.email


def may_enrol_as(principal: Principal, agent_email: str) -> bool:
    """The e-mail a new agent gets: administrators choose any; a person's agents are
    ``agent+NAME@<the person's own domain>``, so nobody can take a colleague's address (D11: e-mails
    are unique across agents and persons) or one outside their domain."""
    if principal.admin:
        return True
    local, _, domain = agent_email.rpartition("@")
    own_domain = principal.email.rpartition("@")[2]
    return (
        domain == own_domain and local.startswith(AGENT_EMAIL_PREFIX) and len(local) > len(AGENT_EMAIL_PREFIX)
    )


# -- people -------------------------------------------------------------------------------------


def may_manage_people(principal: Principal | None) -> Principal:
    """Persons, their passkeys and sessions, registration URLs (the admin API and its pages):
    administrators (management token or admin person)."""
    return require_admin(principal)


def may_delete_person(principal: Principal | None, person_id: str) -> Principal:
    """An administrator may delete anyone but themselves (so the last admin cannot lock everybody
    out by a slip; another administrator or `grantd users delete` can): 400 for oneself."""
    principal = may_manage_people(principal)
    if principal.id == person_id:
        raise bad_request("you cannot delete yourself; another administrator can")
    return principal


def may_manage_own_sessions(principal: Principal | None) -> Principal:
    """A person's own browser sessions (/account, ``/api/sessions``): the person themselves only
    (an agent, the management token or a guest has none)."""
    principal = require(principal)
    if principal.kind is not Kind.PERSON:
        raise forbidden("only a signed-in person has sessions")
    return principal


def may_manage_own_consents(principal: Principal | None) -> Principal:
    """A person's remembered OAuth consents (/account, ``/api/account/consents``): the person
    themselves only."""
    principal = require(principal)
    if principal.kind is not Kind.PERSON:
        raise forbidden("only a signed-in person has consents")
    return principal


def may_manage_own_notifications(principal: Principal | None) -> Principal:
    """A person's notification settings and Web Push subscriptions (/account,
    ``/api/account/notifications``, ``/api/push/subscriptions``; D15): the person themselves only."""
    principal = require(principal)
    if principal.kind is not Kind.PERSON:
        raise forbidden("only a signed-in person has notification settings")
    return principal


def may_follow_review_link(principal: Principal | None) -> Principal:
    """A review link (``/r/<token>``, D15) is followed by a signed-in person; which person is the
    link's own rule (grantd.services.review_links.check_person)."""
    principal = require(principal)
    if principal.kind is not Kind.PERSON:
        raise forbidden("a review link is for a signed-in person")
    return principal


def may_decide_device_sign_in(principal: Principal | None, *, in_this_browser: bool) -> Principal:
    """A terminal's sign-in (device grant, RFC 8628) is approved by a person signed in in the browser
    that shows the code (a session cookie), never by a bearer token: whoever holds a token is not
    necessarily looking at the terminal's code."""
    principal = require(principal)
    if principal.kind is not Kind.PERSON or not in_this_browser:
        raise forbidden("only a person signed in in this browser may approve a terminal's sign-in")
    return principal


def may_end_session(principal: Principal, session: Mapping[str, Any]) -> bool:
    """A person may end any of their own sessions (this browser's or another's), nobody else's."""
    return principal.kind is Kind.PERSON and session.get("person_id") == principal.id


# -- delegations --------------------------------------------------------------------------------


def may_create_delegation(principal: Principal) -> bool:
    """Only people delegate (D7)."""
    return principal.is_person


def may_see_delegation(principal: Principal, delegation: Mapping[str, Any]) -> bool:
    """Its delegator and its delegate (e-mails are unique across agents and persons, D11)."""
    return principal.admin or principal.email in (delegation["delegator"], delegation["delegate"])


def may_delete_delegation(principal: Principal, delegation: Mapping[str, Any]) -> bool:
    return principal.admin or (principal.is_person and principal.email == delegation["delegator"])


def may_validate_delegation(principal: Principal, delegation: Mapping[str, Any]) -> bool:
    """A party to the delegation (or an administrator) may check it; nobody else learns of it."""
    return may_see_delegation(principal, delegation)


# -- tokens that carry an actor (RFC 8693 `act`, D16) ---------------------------------------------

# What a token in which someone acts for someone else may never do: it reads, it never decides,
# reviews, delegates or administers (D16). The wiring asks `refuse_acting_token` on those routes.
# "manage": any other change (the account's passkeys, sessions, agents, settings; a revocation).
ACTIONS = frozenset({"read", "request", "approve", "deny", "review", "delegate", "admin", "manage"})
REFUSED_TO_ACTORS = frozenset({"approve", "deny", "review", "delegate", "admin", "manage"})


def may_act_with_token(claims: Mapping[str, Any], action: str) -> bool:
    """May a token with these claims do ``action``? One that names an actor (an `act` member, whatever
    its value, even null) only reads and requests."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    return "act" not in claims or action not in REFUSED_TO_ACTORS


def refuse_acting_token(claims: Mapping[str, Any], action: str) -> None:
    """403 when a token that carries an actor tries to approve, deny, review, delegate or administer."""
    if not may_act_with_token(claims, action):
        what = "change anything but its grant requests" if action == "manage" else action
        raise forbidden(f"a token in which an agent acts for someone (act) may not {what}")


def _auditor(principal: Principal, auditors: frozenset[str]) -> bool:
    return principal.kind is Kind.PERSON and principal.email.lower() in auditors


def may_read_audit_log(principal: Principal | None, auditors: frozenset[str]) -> Principal:
    """The whole decision log (entries, proofs; D14): administrators, the management token and the
    persons in ``[admin] auditors``. Being an auditor gives no other right: auditors decide nothing."""
    principal = require(principal)
    if principal.admin or _auditor(principal, auditors):
        return principal
    raise forbidden("administrator or auditor rights required")


def may_read_all_grant_audits(principal: Principal, auditors: frozenset[str]) -> bool:
    return principal.admin or _auditor(principal, auditors)


def may_read_grant_audit(
    principal: Principal, grant: Mapping[str, Any] | None, auditors: frozenset[str]
) -> bool:
    """One grant's leaves and proofs: whoever reads the whole log, and an agent its own grants only."""
    if may_read_all_grant_audits(principal, auditors):
        return True
    return principal.is_agent and grant is not None and grant["requester_id"] == principal.id


def may_enrol_hosts(principal: Principal | None) -> Principal:
    """Enrol a target host's key (D14): administrators and the management token."""
    return require_admin(principal)
