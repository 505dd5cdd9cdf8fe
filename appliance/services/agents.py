"""Agents: enrolment, administration, and sign-in by challenge-response (D5)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from grantd.auth import Principal
from grantd.context import Services
from grantd.errors import Problem, bad_request, conflict, forbidden, not_found
from grantd.sshkeys import KeyFormatError, load_public_key, parse_public_key, verify_challenge_signature
from grantd.store import Conflict
from grantd.tokens import mint, new_jti
from grantd.validation import email_field, first_of, string_field

AGENT_STATUSES = ("active", "disabled")


def _now_ms() -> int:
    return int(time.time() * 1000)


def new_agent_id() -> str:
    return "agt_" + secrets.token_urlsafe(16)[:22]


def public_view(agent: dict[str, Any]) -> dict[str, Any]:
    """What clients see of an agent (never the key id internals)."""
    return {
        "agent_id": agent["agent_id"],
        "email": agent["email"],
        "name": agent["name"],
        "owner": agent["owner"],
        "approver": agent["approver"],
        "status": agent["status"],
    }


def admin_view(agent: dict[str, Any]) -> dict[str, Any]:
    return {
        **public_view(agent),
        "publicKey": agent["public_key"],
        "key_fingerprint": agent["key_id"],
        "created_at": agent["created_at"],
        "updated_at": agent["updated_at"],
    }


def _parse_key(body: dict[str, Any]) -> tuple[str, str]:
    raw = body.get("publicKey", body.get("public_key"))
    if raw is None:
        raise Problem(400, "publicKey is required", extra={"field": "publicKey"})
    if not isinstance(raw, str) or len(raw) > 1000:
        raise Problem(400, "publicKey must be an SSH ssh-ed25519 public key", extra={"field": "publicKey"})
    try:
        _, normalized, key_id = parse_public_key(raw)
    except KeyFormatError as exc:
        raise Problem(400, str(exc), extra={"field": "publicKey"}) from None
    return normalized, key_id


def _conflict(exc: Conflict) -> Problem:
    what = "an agent with this email already exists" if exc.field == "email" else "this public key is already enrolled"
    return conflict(what)


async def enroll(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    email = email_field(body, "email")
    name = string_field(body, "name")
    normalized, key_id = _parse_key(body)
    owner = email_field(body, "owner", required=False) or principal.email
    approver = email_field(body, "approver", required=False) or principal.email
    now = _now_ms()
    agent = {
        "agent_id": new_agent_id(),
        "email": email,
        "name": name.strip() if name else name,
        "public_key": normalized,
        "key_id": key_id,
        "owner": owner,
        "approver": approver,
        "status": "active",
        "created_at": now,
        "updated_at": now,
    }
    try:
        await services.store.create_agent(agent)
    except Conflict as exc:
        raise _conflict(exc) from None
    return agent


async def find_agent(services: Services, ident: str) -> dict[str, Any]:
    agent = await services.store.get_agent(ident)
    if agent is None:
        raise not_found("agent not found")
    return agent


def _agent_ident(body: dict[str, Any]) -> str:
    field, value = first_of(body, "agent_id", "id")
    if value is None:
        raise Problem(400, "agent_id is required", extra={"field": "agent_id"})
    if not isinstance(value, str) or not value.strip() or len(value) > 254:
        raise Problem(400, f"{field} must be a non-empty string", extra={"field": field})
    return value.strip()


async def issue_challenge(services: Services, body: dict[str, Any]) -> str:
    agent = await find_agent(services, _agent_ident(body))
    if agent["status"] != "active":
        raise forbidden("agent is disabled")
    challenge = secrets.token_hex(32)
    expires_at = _now_ms() + services.config.tokens.challenge_ttl * 1000
    await services.store.create_challenge(challenge, agent["agent_id"], expires_at)
    return challenge


async def authenticate(services: Services, body: dict[str, Any]) -> dict[str, Any]:
    agent = await find_agent(services, _agent_ident(body))
    challenge = string_field(body, "challenge", max_len=128)
    signature = body.get("signature")
    if not isinstance(signature, str) or not signature.strip():
        raise Problem(400, "signature is required (base64)", extra={"field": "signature"})
    if agent["status"] != "active":
        raise forbidden("agent is disabled")
    # Taking the challenge first means every attempt burns it, a failed one included (D5).
    expires_at = await services.store.take_challenge(challenge, agent["agent_id"])  # type: ignore[arg-type]
    if expires_at is None or expires_at < _now_ms():
        raise Problem(401, "expired challenge", headers={"WWW-Authenticate": 'Bearer realm="grantd"'})
    key = load_public_key(agent["public_key"])
    if not verify_challenge_signature(key, challenge, signature):  # type: ignore[arg-type]
        raise Problem(401, "invalid signature", headers={"WWW-Authenticate": 'Bearer realm="grantd"'})
    ttl = services.config.tokens.agent_token_ttl
    now = int(time.time())
    token = await mint(
        services.keyring,
        {
            "iss": services.issuer,
            "sub": agent["email"],
            "act": "agent",
            "aud": services.config.tokens.agent_audience,
            "iat": now,
            "exp": now + ttl,
            "jti": new_jti(),
        },
    )
    return {"token": token, "agent_id": agent["agent_id"], "email": agent["email"], "name": agent["name"], "expires_in": ttl}


async def update(services: Services, ident: str, body: dict[str, Any]) -> dict[str, Any]:
    agent = await find_agent(services, ident)
    changes: dict[str, Any] = {}
    if "name" in body:
        changes["name"] = string_field(body, "name")
    for field in ("owner", "approver"):
        if field in body:
            changes[field] = email_field(body, field)
    if "status" in body:
        status = body["status"]
        if status not in AGENT_STATUSES:
            raise Problem(400, f"status must be one of {', '.join(AGENT_STATUSES)}", extra={"field": "status"})
        changes["status"] = status
    if "isActive" in body:  # the peer's admin API shape
        if not isinstance(body["isActive"], bool):
            raise Problem(400, "isActive must be true or false", extra={"field": "isActive"})
        changes["status"] = "active" if body["isActive"] else "disabled"
    if "publicKey" in body or "public_key" in body:
        changes["public_key"], changes["key_id"] = _parse_key(body)
    unknown = set(body) - {"name", "owner", "approver", "status", "isActive", "publicKey", "public_key"}
    if unknown:
        raise bad_request(f"unknown field: {sorted(unknown)[0]}", field=sorted(unknown)[0])
    if not changes:
        return agent
    changes["updated_at"] = _now_ms()
    try:
        updated = await services.store.update_agent(agent["agent_id"], changes)
    except Conflict as exc:
        raise _conflict(exc) from None
    if updated is None:
        raise not_found("agent not found")
    return updated


async def delete(services: Services, ident: str) -> dict[str, Any]:
    agent = await find_agent(services, ident)
    if not await services.store.delete_agent(agent["agent_id"]):
        raise not_found("agent not found")
    return agent


async def list_agents(services: Services, limit_raw: str | None, cursor: str | None) -> dict[str, Any]:
    try:
        limit = min(max(int(limit_raw), 1), 100) if limit_raw else 50
    except ValueError:
        raise Problem(400, "limit must be an integer", extra={"field": "limit"}) from None
    rows, has_more = await services.store.list_agents(limit, cursor)
    return {
        "data": [admin_view(a) for a in rows],
        "pagination": {"cursor": rows[-1]["email"] if rows and has_more else None, "has_more": has_more},
    }
