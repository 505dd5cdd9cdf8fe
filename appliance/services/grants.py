"""Grants: request, decide, hand out AuthZ-JWTs, consume, verify (specification + D3, D4, D6).

Rules live here; the routes in appliance/api/grants.py only parse and answer. Every state
change is one conditional write in storage (``update_grant_if``), so of any number of
concurrent approvers, deniers or consumers in any process exactly one wins; the others get
the answer that matches what actually happened.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from typing import Any

from grantd.auth import Principal, bearer_token
from grantd.commands import cmd_hash
from grantd.context import Services
from grantd.errors import Problem, bad_request, forbidden, not_found, unauthorized
from grantd.tokens import TokenError, mint, new_jti, verify
from grantd.validation import email_field, field_error, string_field

GRANT_TYPES = ("once", "timed", "always")
STATUSES = ("pending", "approved", "denied", "revoked", "consumed", "expired")
ONCE_TOKEN_TTL = 300
ALWAYS_TOKEN_TTL = 3600

MAX_TEXT = 255
MAX_REASON = 1000
MAX_ARGS = 256
MAX_ARG = 4096
MAX_COMMAND_BYTES = 32_768
MAX_PERMISSIONS = 100
MAX_BATCH = 100
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_RUN_AS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?$")
_HOST = re.compile(r"^[^\s\x00-\x1f\x7f/]{1,255}$")

# What a consume/verify of a grant in each state answers (D2).
UNUSABLE = {
    "consumed": "already_consumed",
    "revoked": "revoked",
    "denied": "denied",
    "expired": "expired",
    "pending": "not_approved",
}


def now_ms() -> int:
    return int(time.time() * 1000)


def pending_cutoff(services: Services, now: int) -> int:
    return now - services.config.grants.pending_ttl * 1000


def effective_status(grant: dict[str, Any], now: int, cutoff: int) -> str:
    """The status as anyone reading the grant at ``now`` must see it (D6: expiry first)."""
    status = str(grant["status"])
    if status == "approved" and grant.get("expires_at") is not None and grant["expires_at"] <= now:
        return "expired"
    if status == "pending" and grant["created_at"] <= cutoff:
        return "expired"
    return status


def view(grant: dict[str, Any], status: str) -> dict[str, Any]:
    """The Grant JSON every endpoint and event returns."""
    return {
        "id": grant["id"],
        "type": grant["type"],
        "requester": grant["requester"],
        "request": grant["request"],
        "status": status,
        "created_at": grant["created_at"],
        "decided_by": grant.get("decided_by"),
        "decided_at": grant.get("decided_at"),
        "expires_at": grant.get("expires_at"),
        "used_at": grant.get("used_at"),
        "decision_reason": grant.get("decision_reason"),
        "delegation_id": grant.get("delegation_id"),
        "revoked_by": grant.get("revoked_by"),
        "revoked_at": grant.get("revoked_at"),
    }


def etag(grant: dict[str, Any], status: str) -> str:
    """Strong validator: changes with every stored change and with expiry at read time."""
    digest = hashlib.sha256(f"{grant['id']}\0{grant['version']}\0{status}".encode()).hexdigest()[:32]
    return f'"{digest}"'


class Reader:
    """Reads grants with expiry applied at one instant (one per request)."""

    def __init__(self, services: Services):
        self.now = now_ms()
        self.cutoff = pending_cutoff(services, self.now)

    def status(self, grant: dict[str, Any]) -> str:
        return effective_status(grant, self.now, self.cutoff)

    def view(self, grant: dict[str, Any]) -> dict[str, Any]:
        return view(grant, self.status(grant))


# -- who may do what ----------------------------------------------------------------------------


def is_admin_email(services: Services, email: str) -> bool:
    admin = services.config.admin
    return email == admin.management_identity or email in admin.emails


async def person_may_decide(services: Services, email: str, requester: str) -> bool:
    """An administrator (by e-mail), or the requesting agent's owner or approver."""
    if is_admin_email(services, email):
        return True
    agent = await services.store.get_agent(requester)
    return agent is not None and email in (agent["owner"], agent["approver"])


async def may_decide(services: Services, principal: Principal, requester: str) -> bool:
    """Management token, admins, and the requesting agent's owner or approver. Never an agent."""
    if principal.kind == "agent":
        return False
    return principal.is_admin or await person_may_decide(services, principal.email, requester)


async def may_see(services: Services, principal: Principal, grant: dict[str, Any]) -> bool:
    if principal.is_admin:
        return True
    if principal.email == grant["requester"]:
        return True
    return principal.kind != "agent" and await may_decide(services, principal, grant["requester"])


async def _visible_grant(services: Services, principal: Principal, grant_id: str) -> dict[str, Any]:
    grant = await services.store.get_grant(grant_id)
    if grant is None or not await may_see(services, principal, grant):
        # Someone who may not see a grant learns nothing about it, not even that it exists.
        raise not_found("grant not found")
    return grant


# -- validation of a request --------------------------------------------------------------------


def seconds_field(body: dict[str, Any], name: str, maximum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise field_error(name, f"{name} must be a whole number of seconds")
    if value <= 0:
        raise field_error(name, f"{name} must be positive")
    if value > maximum:
        raise field_error(name, f"{name} must be at most {maximum} seconds")
    return value


def _grant_type(body: dict[str, Any], default: str | None) -> str | None:
    value = body.get("grant_type", default)
    if value is None:
        return None
    if value not in GRANT_TYPES:
        raise field_error("grant_type", "grant_type must be one of once, timed, always")
    return str(value)


def _string_list(body: dict[str, Any], name: str, *, max_items: int, max_len: int) -> list[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise field_error(name, f"{name} must be an array of strings")
    if len(value) > max_items:
        raise field_error(name, f"{name} has more than {max_items} items")
    for item in value:
        if len(item) > max_len:
            raise field_error(name, f"an item of {name} is longer than {max_len} characters")
        if "\x00" in item:
            raise field_error(name, f"{name} must not contain NUL characters")
    return list(value)


def parse_request(services: Services, principal: Principal | None, body: dict[str, Any]) -> dict[str, Any]:
    """The stored grant request: validated, requester from the credential, cmd_hash computed (D4, D6)."""
    if principal is None:
        if not services.config.grants.allow_unauthenticated:
            raise unauthorized("a grant request needs an agent token or a session")
        requester = email_field(body, "requester")
    elif principal.kind == "management":
        # Deployment tools may file a request on someone's behalf; they must say for whom.
        requester = email_field(body, "requester")
    else:
        requester = principal.email
    assert requester is not None
    target_host = string_field(body, "target_host", required=True)
    audience = string_field(body, "audience", required=True)
    assert target_host is not None and audience is not None
    if not _HOST.match(target_host):
        raise field_error("target_host", "target_host must not contain whitespace, slashes or control characters")
    if _CONTROL.search(audience):
        raise field_error("audience", "audience must not contain control characters")
    grant_type = _grant_type(body, "once")
    duration = seconds_field(body, "duration", services.config.grants.max_duration)
    if grant_type == "timed" and duration is None:
        raise field_error("duration", "duration is required for timed grants")
    command = _string_list(body, "command", max_items=MAX_ARGS, max_len=MAX_ARG)
    if command is not None:
        if not command:
            raise field_error("command", "command must name a program")
        if not command[0]:
            raise field_error("command", "command[0] must not be empty")
        if sum(len(a.encode("utf-8", "surrogatepass")) + 1 for a in command) > MAX_COMMAND_BYTES:
            raise field_error("command", f"command is longer than {MAX_COMMAND_BYTES} bytes")
    permissions = _string_list(body, "permissions", max_items=MAX_PERMISSIONS, max_len=MAX_TEXT)
    if permissions is not None and any(not p.strip() or _CONTROL.search(p) for p in permissions):
        raise field_error("permissions", "permissions must be non-empty strings without control characters")
    if not command and not permissions:
        raise field_error("command", "a grant needs a command or permissions")
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON)
    run_as = string_field(body, "run_as", required=False, max_len=64)
    if run_as is not None and not _RUN_AS.match(run_as):
        raise field_error("run_as", "run_as must be a user name")
    request: dict[str, Any] = {
        "requester": requester,
        "target_host": target_host,
        "audience": audience,
        "grant_type": grant_type,
    }
    if command is not None:
        request["command"] = command
        request["cmd_hash"] = cmd_hash(command)  # a client-sent value is ignored (D4)
    if permissions is not None:
        request["permissions"] = permissions
    if duration is not None:
        request["duration"] = duration
    if reason is not None:
        request["reason"] = reason
    if run_as is not None:
        request["run_as"] = run_as
    return request


def reuse_key(request: dict[str, Any]) -> str:
    """What makes two timed/always requests the same grant (D6)."""
    parts = [
        request["target_host"],
        request["audience"],
        request.get("run_as"),
        request["grant_type"],
        request.get("cmd_hash"),
        sorted(request.get("permissions") or []),
    ]
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


# -- operations ---------------------------------------------------------------------------------


async def create(services: Services, principal: Principal | None, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Returns (response body, HTTP status): 201 for a new grant, 200 for a reused one."""
    from grantd.idp.delegations import covering_delegation

    request = parse_request(services, principal, body)
    reader = Reader(services)
    key = reuse_key(request)
    if request["grant_type"] in ("timed", "always"):
        existing = await services.store.find_reusable_grant(request["requester"], key, reader.now)
        if existing is not None:
            return {**reader.view(existing), "reused": True}, 200
    grant: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "type": "command" if "command" in request else "permissions",
        "requester": request["requester"],
        "request": request,
        "grant_type": request["grant_type"],
        "status": "pending",
        "created_at": reader.now,
        "reuse_key": key,
    }
    events = ["grant.created"]
    delegation = await covering_delegation(services, request, reader.now)
    if delegation is not None:
        expires_at = None
        if request["grant_type"] == "timed":
            expires_at = reader.now + request["duration"] * 1000
            if delegation.get("expires_at") is not None:
                expires_at = min(expires_at, delegation["expires_at"])
        grant.update(
            status="approved",
            decided_by=delegation["delegator"],
            decided_at=reader.now,
            expires_at=expires_at,
            delegation_id=delegation["id"],
            decision_reason=f"delegation {delegation['id']}",
        )
        events.append("grant.approved")
    stored = await services.store.create_grant(grant, events)
    answer = reader.view(stored)
    if delegation is not None:
        answer.update(approved_automatically=True, auto_approval_kind="delegation")
    return answer, 201


async def get(services: Services, principal: Principal, grant_id: str) -> tuple[dict[str, Any], str]:
    reader = Reader(services)
    grant = await _visible_grant(services, principal, grant_id)
    status = reader.status(grant)
    return view(grant, status), etag(grant, status)


def cursor_of(grant: dict[str, Any]) -> str:
    return f"{grant['created_at']}_{grant['id']}"


def parse_cursor(value: str | None) -> tuple[int, str] | None:
    if not value:
        return None
    at, sep, ident = value.partition("_")
    if not sep or not at.isdigit() or not ident or len(value) > 128:
        raise field_error("cursor", "cursor is not valid")
    return int(at), ident


def parse_limit(value: str | None) -> int:
    if value is None or value == "":
        return DEFAULT_LIMIT
    try:
        limit = int(value)
    except ValueError:
        raise field_error("limit", "limit must be a whole number") from None
    return max(1, min(limit, MAX_LIMIT))  # larger values are clamped (D6; the peer CLI sends 200)


async def list_grants(services: Services, principal: Principal, args: Any) -> dict[str, Any]:
    status = args.get("status") or None
    if status is not None and status not in STATUSES:
        raise field_error("status", f"status must be one of {', '.join(STATUSES)}")
    requester = args.get("requester") or None
    if requester is not None:
        requester = requester.strip().lower()
    limit = parse_limit(args.get("limit"))
    cursor = parse_cursor(args.get("cursor"))
    scope: dict[str, str] = {}
    if principal.kind == "agent":
        if requester is not None and requester != principal.email:
            raise forbidden("an agent may list only its own grants")
        scope["only_requester"] = principal.email
    elif not principal.is_admin and not is_admin_email(services, principal.email):
        scope["decider"] = principal.email
    reader = Reader(services)
    rows, has_more = await services.store.list_grants(
        now=reader.now, pending_cutoff=reader.cutoff, limit=limit, status=status, requester=requester,
        cursor=cursor, **scope,
    )
    return {
        "data": [reader.view(r) for r in rows],
        "pagination": {"cursor": cursor_of(rows[-1]) if has_more and rows else None, "has_more": has_more},
    }


def _not_pending(status: str) -> Problem:
    if status == "expired":
        return Problem(400, "grant expired before it was decided", extra={"grant_status": status})
    return Problem(400, "grant already decided", extra={"grant_status": status})


async def _transition(
    services: Services, grant: dict[str, Any], *, expect: tuple[str, ...], changes: dict[str, Any], event: str,
    reader: Reader, refuse: Any,
) -> dict[str, Any]:
    """Apply a conditional transition; if another caller got there first, refuse with the state they left."""
    status = reader.status(grant)
    if status not in expect:
        raise refuse(status)
    updated = await services.store.update_grant_if(
        grant["id"], expect=expect, changes=changes, event=event, now=reader.now, pending_cutoff=reader.cutoff
    )
    if updated is None:
        latest = await services.store.get_grant(grant["id"])
        raise refuse(reader.status(latest) if latest else "revoked")
    return updated


async def _grant_to_decide(services: Services, principal: Principal, grant_id: str, verb: str) -> dict[str, Any]:
    grant = await services.store.get_grant(grant_id)
    if grant is None:
        raise not_found("grant not found")
    if not await may_decide(services, principal, grant["requester"]):
        raise forbidden(f"not authorized to {verb}")
    return grant


async def approve(services: Services, principal: Principal, grant_id: str, body: dict[str, Any]) -> dict[str, Any]:
    grant = await _grant_to_decide(services, principal, grant_id, "approve")
    request = dict(grant["request"])
    grant_type = _grant_type(body, None) or request["grant_type"]
    duration = seconds_field(body, "duration", services.config.grants.max_duration)
    if grant_type == "timed":
        duration = duration or request.get("duration")
        if duration is None:
            raise field_error("duration", "duration is required for timed grants")
        request["duration"] = duration
    request["grant_type"] = grant_type
    reader = Reader(services)
    changes = {
        "status": "approved",
        "decided_by": principal.email,
        "decided_at": reader.now,
        "expires_at": reader.now + duration * 1000 if grant_type == "timed" and duration else None,
        "grant_type": grant_type,
        "request": request,
        "reuse_key": reuse_key(request),  # an approver's override changes what the grant is reusable for
    }
    updated = await _transition(
        services, grant, expect=("pending",), changes=changes, event="grant.approved", reader=reader, refuse=_not_pending
    )
    return {"grant": reader.view(updated), "authz_jwt": await mint_authz(services, updated)}


async def deny(services: Services, principal: Principal, grant_id: str, body: dict[str, Any]) -> dict[str, Any]:
    grant = await _grant_to_decide(services, principal, grant_id, "deny")
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON)
    reader = Reader(services)
    changes = {"status": "denied", "decided_by": principal.email, "decided_at": reader.now, "decision_reason": reason}
    updated = await _transition(
        services, grant, expect=("pending",), changes=changes, event="grant.denied", reader=reader, refuse=_not_pending
    )
    return {"grant": reader.view(updated)}


def _not_revocable(status: str) -> Problem:
    return Problem(400, f"grant cannot be revoked: it is {status}", extra={"grant_status": status})


async def revoke(services: Services, principal: Principal, grant_id: str, body: dict[str, Any]) -> dict[str, Any]:
    grant = await _visible_grant(services, principal, grant_id)
    # The requester may withdraw its own request or give up its grant; deciders may take it back.
    if principal.email != grant["requester"] and not await may_decide(services, principal, grant["requester"]):
        raise forbidden("not authorized to revoke")
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON)
    reader = Reader(services)
    changes: dict[str, Any] = {"status": "revoked", "revoked_by": principal.email, "revoked_at": reader.now}
    if reason is not None:
        changes["decision_reason"] = reason
    updated = await _transition(
        services, grant, expect=("approved", "pending"), changes=changes, event="grant.revoked", reader=reader,
        refuse=_not_revocable,
    )
    return {"grant": reader.view(updated)}


async def token(services: Services, principal: Principal, grant_id: str) -> dict[str, Any]:
    grant = await _visible_grant(services, principal, grant_id)
    if principal.email != grant["requester"]:
        raise forbidden("only the requester may fetch the grant's token")
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        raise Problem(400, f"grant is not approved (it is {status})", extra={"grant_status": status})
    return {"authz_jwt": await mint_authz(services, grant), "grant": {"id": grant["id"], "status": status}}


async def mint_authz(services: Services, grant: dict[str, Any]) -> str:
    """The AuthZ-JWT of an approved grant (specification claims + D3)."""
    request = grant["request"]
    now = int(time.time())
    grant_type = grant["grant_type"]
    if grant_type == "once":
        exp = now + ONCE_TOKEN_TTL
    elif grant_type == "timed":
        exp = int(grant["expires_at"] // 1000)
    else:
        exp = now + ALWAYS_TOKEN_TTL
    claims: dict[str, Any] = {
        "iss": services.issuer,
        "sub": grant["requester"],
        "aud": request["audience"],
        "target_host": request["target_host"],
        "grant_id": grant["id"],
        "grant_type": grant_type,
        "approval": grant_type,
        "permissions": list(request.get("permissions") or []),
        "decided_by": grant["decided_by"],
        "iat": now,
        "exp": exp,
        "jti": new_jti(),
    }
    if "command" in request:
        claims["command"] = list(request["command"])
        claims["cmd_hash"] = request["cmd_hash"]
    if request.get("run_as"):
        claims["run_as"] = request["run_as"]
    if grant.get("delegation_id"):
        claims["delegation_id"] = grant["delegation_id"]
    return await mint(services.keyring, claims)


async def _authz_claims(services: Services, token_value: str) -> dict[str, Any]:
    """Signature, issuer and expiry of an AuthZ-JWT of ours (the audience is the grant's own)."""
    claims = await verify(services.keyring, token_value, issuer=services.issuer, audience=None)
    if not isinstance(claims.get("grant_id"), str):
        raise TokenError("not a grant token")
    return claims


async def consume(services: Services, authorization: str | None, grant_id: str) -> dict[str, Any]:
    presented = bearer_token(authorization)
    if presented is None:
        raise unauthorized("the grant's AuthZ-JWT is required as bearer token")
    try:
        claims = await _authz_claims(services, presented)
    except TokenError as exc:
        raise unauthorized(f"invalid token: {exc}", invalid_token=True) from None
    if claims["grant_id"] != grant_id:
        raise bad_request("the token belongs to another grant")
    grant = await services.store.get_grant(grant_id)
    if grant is None:
        raise not_found("grant not found")
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        return {"error": UNUSABLE.get(status, "not_approved"), "status": status}
    if grant["grant_type"] != "once":
        return {"status": "valid", "grant": reader.view(grant)}
    updated = await services.store.update_grant_if(
        grant_id, expect=("approved",), changes={"status": "consumed", "used_at": reader.now},
        event="grant.consumed", now=reader.now, pending_cutoff=reader.cutoff,
    )
    if updated is None:  # someone else consumed (or revoked) it between our read and our write
        latest = await services.store.get_grant(grant_id)
        status = reader.status(latest) if latest else "revoked"
        return {"error": UNUSABLE.get(status, "not_approved"), "status": status}
    return {"status": "consumed", "grant": reader.view(updated)}


async def verify_token(services: Services, body: dict[str, Any]) -> dict[str, Any]:
    """No side effects: valid only for a well-signed, unexpired token whose grant is still usable."""
    presented = body.get("token")
    if not isinstance(presented, str) or not presented.strip():
        return {"valid": False, "error": "token is required"}
    try:
        claims = await _authz_claims(services, presented.strip())
    except TokenError as exc:
        return {"valid": False, "error": str(exc)}
    grant = await services.store.get_grant(claims["grant_id"])
    if grant is None:
        return {"valid": False, "error": "grant not found"}
    reader = Reader(services)
    status = reader.status(grant)
    if status != "approved":
        return {"valid": False, "error": UNUSABLE.get(status, "not_approved"), "status": status}
    return {"valid": True, "claims": claims, "grant": reader.view(grant)}


async def batch(services: Services, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """Each operation is authorised and applied on its own (D6)."""
    operations = body.get("operations")
    if not isinstance(operations, list) or not operations:
        raise field_error("operations", "operations must be a non-empty array")
    if len(operations) > MAX_BATCH:
        raise field_error("operations", f"at most {MAX_BATCH} operations per batch")
    actions = {"approve": approve, "deny": deny, "revoke": revoke}
    results = []
    for op in operations:
        ident = op.get("id") if isinstance(op, dict) else None
        action = op.get("action") if isinstance(op, dict) else None
        result: dict[str, Any] = {"id": ident, "action": action}
        try:
            if not isinstance(ident, str) or not ident:
                raise field_error("id", "each operation needs an id")
            if action not in actions:
                raise field_error("action", "action must be approve, deny or revoke")
            extra = {k: v for k, v in op.items() if k not in ("id", "action")}
            answer = await actions[action](services, principal, ident, extra)
            result.update(status=answer["grant"]["status"], success=True)
            if "authz_jwt" in answer:
                result["authz_jwt"] = answer["authz_jwt"]
        except Problem as problem:
            result.update(status=problem.extra.get("grant_status"), success=False, error=problem.body())
        results.append(result)
    return {"results": results}


async def sweep_expired(services: Services) -> list[dict[str, Any]]:
    """Persist expiries (each with a grant.expired event) and trim old events."""
    now = now_ms()
    return await services.store.expire_grants(
        now, pending_cutoff(services, now), now - services.config.grants.events_retention * 1000
    )
