"""Agents: enrolment, administration, their lifecycle (D11) and sign-in by challenge-response (D5)."""

from __future__ import annotations

import re
import secrets
from typing import Any

from grantd.core import policy
from grantd.core.errors import Problem, bad_request, conflict, forbidden, not_found
from grantd.core.fields import (
    check_identifier,
    email_field,
    field_error,
    first_of,
    identifier_field,
    string_field,
)
from grantd.core.paging import page, page_request
from grantd.core.principals import Kind, Principal
from grantd.dpop import DpopError
from grantd.services import dpop
from grantd.services.context import Services
from grantd.services.dpop import ProofRequest
from grantd.services.limits import PENDING_RETRY_AFTER, too_many
from grantd.sshkeys import KeyFormatError, load_public_key, parse_public_key, verify_challenge_signature
from grantd.store import Conflict, LimitReached
from grantd.store.records import Agent

AGENT_STATUSES = ("active", "disabled")
AGENT_ID_PREFIX = "agt_"  # D1: an agent_id is agt_ + 22 url-safe characters
UPDATABLE = {"name", "owner", "approver", "status", "isActive", "publicKey", "public_key"}


def new_agent_id() -> str:
    return AGENT_ID_PREFIX + secrets.token_urlsafe(16)[:22]


def public_view(agent: Agent) -> dict[str, Any]:
    """What clients see of an agent (never the key id internals)."""
    return {
        "agent_id": agent["agent_id"],
        "email": agent["email"],
        "name": agent["name"],
        "owner": agent["owner"],
        "approver": agent["approver"],
        "status": agent["status"],
    }


def admin_view(agent: Agent, parties: dict[str, str]) -> dict[str, Any]:
    """What administrators see; ``parties`` (from :func:`party_states`) gives ``owner_state``,
    ``approver_state`` and ``ownerless`` (D11)."""
    owner_state = parties[_party_key(agent, "owner")]
    approver_state = parties[_party_key(agent, "approver")]
    extra = {
        "owner_state": owner_state,
        "approver_state": approver_state,
        # nobody but an administrator can decide its grants
        "ownerless": not ({owner_state, approver_state} & DECIDING_STATES),
    }
    return {
        **public_view(agent),
        "owner_id": agent.get("owner_id"),
        "approver_id": agent.get("approver_id"),
        **extra,
        "publicKey": agent["public_key"],
        "key_fingerprint": agent["key_id"],
        "key_generation": agent["key_generation"],
        "created_at": agent["created_at"],
        "updated_at": agent["updated_at"],
    }


# What an owner/approver e-mail stands for now (D11): a live person ("person"), a disabled one, a
# deleted one (its id names nobody any more), an administrator by configuration without a person
# record (admin.emails, the management identity), or an address that names nobody yet.
DECIDING_STATES = frozenset({"person", "administrator"})


def _party_key(agent: Agent, party: str) -> str:
    return f"{agent.get(party + '_id') or ''}|{agent[party]}"  # type: ignore[literal-required]


async def party_states(services: Services, agents: list[Agent]) -> dict[str, str]:
    """``owner_state``/``approver_state`` of each agent's owner and approver, keyed by id and e-mail."""
    states: dict[str, str] = {}
    for agent in agents:
        for party in ("owner", "approver"):
            key = _party_key(agent, party)
            if key in states:
                continue
            person_id = agent.get(party + "_id")  # type: ignore[misc]
            email = agent[party]  # type: ignore[literal-required]
            if person_id:
                person = await services.store.people.get(str(person_id))
                states[key] = (
                    "deleted" if person is None else "person" if person["status"] == "active" else "disabled"
                )
            elif email in services.admin_emails:
                states[key] = "administrator"
            else:
                states[key] = "unregistered"
    return states


def _parse_key(body: dict[str, Any]) -> tuple[str, str]:
    raw = body.get("publicKey")
    if raw is None:  # null means absent
        raw = body.get("public_key")
    if raw is None:
        raise field_error("publicKey", "publicKey is required")
    if not isinstance(raw, str) or len(raw) > 1000:
        raise field_error("publicKey", "publicKey must be an SSH ssh-ed25519 public key")
    try:
        _, normalized, key_id = parse_public_key(raw)
    except KeyFormatError as exc:
        raise field_error("publicKey", str(exc)) from None
    return normalized, key_id


def _conflict(exc: Conflict) -> Problem:
    messages = {
        "email": "this email already belongs to an agent or a person",
        "publicKey": "this public key is already enrolled",
        "owner": "the owner must be a person, not an agent",
        "approver": "the approver must be a person, not an agent",
    }
    return conflict(messages.get(exc.field, f"duplicate {exc.field}"))


def default_agent_email(person_email: str, name: str) -> str:
    """``agent+<name as a slug>@<the person's domain>``: the e-mail a person's agent gets when the
    enrolment names none (the peer CLI's ``/enroll?name=&key=`` page has only a name)."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.strip().lower()).strip("-.")[:64].strip("-.")
    if not slug:
        raise field_error("name", "name needs a letter or digit to make the agent's e-mail (or send email)")
    return f"{policy.AGENT_EMAIL_PREFIX}{slug}@{person_email.rpartition('@')[2]}"


def _enrolment_parties(principal: Principal, body: dict[str, Any]) -> tuple[str, str]:
    """(owner, approver) of a new agent, by grantd.core.policy: administrators name anyone; a person's
    agent is their own, approved by them (D11, issue 19)."""
    owner = policy.enrolment_owner(principal, email_field(body, "owner", required=False))
    approver = email_field(body, "approver", required=False) or principal.email
    if not policy.may_name_approver(principal, approver):
        raise forbidden(
            "a person names only themselves as the approver of their agents; an administrator may name another"
        )
    return owner, approver


async def enroll(services: Services, principal: Principal, body: dict[str, Any]) -> Agent:
    """Enrol an agent. Administrators (and the management token) name every field; a signed-in
    person (D8) enrols their own agent: owner = the person, e-mail ``agent+NAME@<their domain>``
    (default from ``name`` when ``email`` is absent), approver themselves or another person."""
    email = email_field(body, "email", required=principal.kind is not Kind.PERSON)
    name = identifier_field(body, "name")
    assert name is not None
    if email is None:
        email = default_agent_email(principal.email, name)
    if not policy.may_enrol_as(principal, email):
        raise forbidden(
            f"a person's agents have e-mails {policy.AGENT_EMAIL_PREFIX}NAME@{principal.email.rpartition('@')[2]}"
        )
    normalized, key_id = _parse_key(body)
    owner, approver = _enrolment_parties(principal, body)
    now = services.clock.now_ms()
    agent: Agent = {
        "agent_id": new_agent_id(),
        "email": email,
        "name": name.strip(),
        "public_key": normalized,
        "key_id": key_id,
        "key_generation": 1,
        "owner": owner,
        "approver": approver,
        "status": "active",
        "created_at": now,
        "updated_at": now,
        "owner_id": None,  # bound by the store (D11)
        "approver_id": None,
    }
    bound = services.config.limits.agents_per_person
    try:
        return await services.store.agents.create(
            agent, services.admin_emails, max_per_owner=bound, by=principal.email
        )
    except Conflict as exc:
        raise _conflict(exc) from None
    except LimitReached:
        services.limits.on_refused("agents.owner")
        raise too_many(
            f"{owner} already owns {bound} agents (limits.agents_per_person): delete some first",
            PENDING_RETRY_AFTER,
        ) from None


async def agent_or_email_field(
    services: Services, body: dict[str, Any], name: str, *, required: bool = True
) -> str | None:
    """A field that names an agent or a person by e-mail, where an agent may also be named by its
    ``agent_id`` (D1): the e-mail (an unknown agent_id is 404 ``agent not found``)."""
    value = body.get(name)
    if isinstance(value, str) and value.strip().startswith(AGENT_ID_PREFIX):
        email = await email_of_agent_id(services, value)
        if email is None:
            raise not_found("agent not found")
        return email
    return email_field(body, name, required=required)


async def email_of_agent_id(services: Services, value: str) -> str | None:
    """The e-mail of the agent whose ``agent_id`` ``value`` is (D1), None when it names none."""
    named = value.strip()
    if not named.startswith(AGENT_ID_PREFIX):
        return None
    agent = await services.store.agents.get_by_id(named)
    return str(agent["email"]) if agent is not None else None


async def find_agent(services: Services, ident: str) -> Agent:
    agent = await services.store.agents.get(ident)
    if agent is None:
        raise not_found("agent not found")
    return agent


def _agent_ident(body: dict[str, Any]) -> str:
    field, value = first_of(body, "agent_id", "id")
    if value is None:
        raise field_error("agent_id", "agent_id is required")
    if not isinstance(value, str) or not value.strip() or len(value) > 254:
        raise field_error(field, f"{field} must be a non-empty string")
    return check_identifier(field, value).strip()


async def issue_challenge(services: Services, body: dict[str, Any]) -> str:
    ident = _agent_ident(body)
    challenge = secrets.token_hex(32)
    now = services.clock.now_ms()
    # One statement: the active agent found and the challenge stored (issue 27); the agent is read
    # apart only to say why there is none.
    if await services.store.challenges.create_for(
        challenge, ident, now + services.config.tokens.challenge_ttl * 1000, now
    ):
        return challenge
    await _refuse_agent(services, ident)
    raise forbidden("agent is disabled")  # not active a moment ago, active now: as it was read


async def _refuse_agent(services: Services, ident: str) -> None:
    """The refusal for an agent that is not there (404) or not active (403)."""
    agent = await find_agent(services, ident)
    if agent["status"] != "active":
        raise forbidden("agent is disabled")


async def authenticate(
    services: Services, body: dict[str, Any], proof: ProofRequest | None = None
) -> dict[str, Any]:
    """An identity token for a signed challenge (D5); bound to the agent's key (``cnf.jkt``, D16)
    when the request carries a DPoP proof made with it (or must, under ``agent_dpop = "required"``)."""
    ident = _agent_ident(body)
    try:
        challenge = string_field(body, "challenge", max_len=128)
        signature = body.get("signature")
        if not isinstance(signature, str) or not signature.strip():
            raise field_error("signature", "signature is required (base64)")
    except Problem:
        await find_agent(services, ident)  # an unknown agent is a 404 before a bad field
        raise
    assert challenge is not None
    # Taking the challenge first means every attempt burns it, a failed one included (D5). The
    # active agent is found and its challenge taken in one statement (issue 27); the agent is read
    # apart only to say why nothing was taken.
    taken = await services.store.challenges.take_for(challenge, ident)
    if taken is None:
        await _refuse_agent(services, ident)
        raise Problem(401, "expired challenge", headers={"WWW-Authenticate": 'Bearer realm="grantd"'})
    agent, expires_at = taken
    if expires_at < services.clock.now_ms():
        raise Problem(401, "expired challenge", headers={"WWW-Authenticate": 'Bearer realm="grantd"'})
    key = load_public_key(agent["public_key"])
    if not verify_challenge_signature(key, challenge, signature):
        raise Problem(401, "invalid signature", headers={"WWW-Authenticate": 'Bearer realm="grantd"'})
    try:
        jkt = await dpop.bind_for_agent(services, proof, agent["public_key"])
    except DpopError as exc:
        raise await dpop.api_refusal(services, exc) from None
    token, ttl = await services.tokens.mint_identity(agent, jkt=jkt)
    answer: dict[str, Any] = {
        "token": token,
        "agent_id": agent["agent_id"],
        "email": agent["email"],
        "name": agent["name"],
        "expires_in": ttl,
    }
    if jkt is not None:
        answer["token_type"] = "DPoP"  # noqa: S105 - a token type, not a secret
    return answer


async def update(services: Services, principal: Principal, ident: str, body: dict[str, Any]) -> Agent:
    agent = await find_agent(services, ident)
    unknown = set(body) - UPDATABLE
    if unknown:
        raise bad_request(f"unknown field: {sorted(unknown)[0]}", field=sorted(unknown)[0])
    body = {name: value for name, value in body.items() if value is not None}  # null means "leave as it is"
    changes: dict[str, Any] = {}
    if "name" in body:
        changes["name"] = identifier_field(body, "name")
    for field in ("owner", "approver"):
        if field in body:
            changes[field] = email_field(body, field)
    status = None
    if "status" in body:
        status = body["status"]
        if status not in AGENT_STATUSES:
            raise field_error("status", f"status must be one of {', '.join(AGENT_STATUSES)}")
    if "isActive" in body:  # the peer's admin API shape
        if not isinstance(body["isActive"], bool):
            raise field_error("isActive", "isActive must be true or false")
        status = "active" if body["isActive"] else "disabled"
    if "publicKey" in body or "public_key" in body:
        changes["public_key"], changes["key_id"] = _parse_key(body)
    if changes:
        changes["updated_at"] = services.clock.now_ms()
        try:
            updated = await services.store.agents.update(agent["agent_id"], changes, by=principal.email)
        except Conflict as exc:
            raise _conflict(exc) from None
        if updated is None:
            raise not_found("agent not found")
        agent = updated
    if status == "disabled" and agent["status"] == "active":
        agent = await _retire(services, principal, agent, delete=False, reason="agent disabled")
    elif status == "active" and agent["status"] == "disabled":
        reactivated = await services.store.agents.update(
            agent["agent_id"], {"status": "active", "updated_at": services.clock.now_ms()}
        )
        agent = reactivated or agent
    return agent


async def _retire(
    services: Services, principal: Principal, agent: Agent, *, delete: bool, reason: str
) -> Agent:
    """D11: disabling or deleting an agent revokes its grants, ends its delegations as delegate and
    its event streams."""
    retired = await services.store.agents.retire(
        agent["agent_id"],
        delete=delete,
        by=principal.email,
        reason=reason,
        now=services.clock.now_ms(),
        lapse=services.grant_lapse(),
    )
    services.events.changed()
    services.events.end_streams_of(agent["agent_id"])
    if retired is None:
        return agent
    before, _revoked = retired
    return {**before, "status": "disabled"} if not delete else before


async def delete(services: Services, principal: Principal, ident: str) -> Agent:
    agent = await find_agent(services, ident)
    return await _retire(services, principal, agent, delete=True, reason="agent deleted")


async def described(services: Services, agent: Agent) -> dict[str, Any]:
    """One agent as administrators see it, with the state of its owner and approver (D11)."""
    return admin_view(agent, await party_states(services, [agent]))


async def list_agents(services: Services, args: Any) -> dict[str, Any]:
    rows, has_more = await services.store.agents.list(page_request(args))
    states = await party_states(services, rows)
    return page(rows, has_more, lambda a: admin_view(a, states), id_key="agent_id")
