"""What an agent may ask for, checked before anything is stored (D6): a grant request's fields and
their bounds, the requester (from the credential, or named by the management token), the reuse key
of timed/always grants, and when an approval ends. Pure of storage but for the requester lookup;
``grantd.services.grants`` builds on it, and CIBA's ``grantd_command`` goes through the same
``parse_request`` (one way to validate a command)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from grantd.commands import cmd_hash
from grantd.core import policy
from grantd.core.errors import unauthorized
from grantd.core.fields import (
    MAX_TEXT,
    check_identifier,
    field_error,
    identifier_field,
    seconds_field,
    string_field,
)
from grantd.core.lifecycle import GRANT_TYPES
from grantd.core.principals import Principal
from grantd.services.agents import agent_or_email_field
from grantd.services.context import Services

MAX_REASON = 1000
MAX_ARGS = 256
MAX_ARG = 4096
MAX_COMMAND_BYTES = 32_768
MAX_PERMISSIONS = 100
MAX_BATCH = 100
MAX_EXTENSION_BYTES = 16_384  # authorization_details + execution_context together (D6)
_RUN_AS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?")  # fullmatch: "root\n" is not a user name
_HOST = re.compile(r"[^\s/]{1,255}")  # fullmatch, after check_identifier refused control characters


def grant_type_field(body: dict[str, Any], default: str | None) -> str | None:
    value = body.get("grant_type")
    if value is None:  # null means absent
        return default
    if not isinstance(value, str) or value not in GRANT_TYPES:
        raise field_error("grant_type", "grant_type must be one of once, timed, always")
    return value


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
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            raise field_error(name, f"{name} must be valid Unicode text") from None
    return list(value)


def _extensions(body: dict[str, Any]) -> dict[str, Any]:
    """The peer CLI's ``authorization_details`` (RFC 9396 array of objects) and ``execution_context``
    (an object): stored verbatim, bounded, never part of cmd_hash or reuse (D6)."""
    found: dict[str, Any] = {}
    details = body.get("authorization_details")
    if details is not None:
        if not isinstance(details, list) or not all(isinstance(d, dict) for d in details):
            raise field_error("authorization_details", "authorization_details must be an array of objects")
        found["authorization_details"] = details
    context = body.get("execution_context")
    if context is not None:
        if not isinstance(context, dict):
            raise field_error("execution_context", "execution_context must be an object")
        found["execution_context"] = context
    if found:
        try:
            size = len(json.dumps(found, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
        except (UnicodeEncodeError, ValueError):
            raise field_error(
                "authorization_details", "authorization_details must be valid Unicode JSON"
            ) from None
        if size > MAX_EXTENSION_BYTES:
            raise field_error(
                "authorization_details",
                f"authorization_details and execution_context exceed {MAX_EXTENSION_BYTES} bytes",
            )
    return found


async def _requester(
    services: Services, principal: Principal | None, body: dict[str, Any]
) -> tuple[str, str]:
    """(e-mail, id) of whoever the grant is for: the credential's principal; the management token
    (or an unauthenticated request, when allowed) names it in ``requester``."""
    if principal is not None and not policy.may_request_for_someone_else(
        policy.require(principal)
    ):  # guests: 403
        return principal.email, principal.id
    if principal is None and not services.config.grants.allow_unauthenticated:
        raise unauthorized("a grant request needs an agent token or a session")
    email = await agent_or_email_field(services, body, "requester")  # D1: or the agent's agent_id
    assert email is not None
    agent = await services.store.agents.get(email)
    return email, agent["agent_id"] if agent is not None else email


async def parse_request(
    services: Services, principal: Principal | None, body: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """The stored grant request and its requester id: validated, requester from the credential,
    cmd_hash computed (D4, D6)."""
    requester, requester_id = await _requester(services, principal, body)
    target_host = identifier_field(body, "target_host", required=True)
    audience = identifier_field(body, "audience", required=True)
    assert target_host is not None and audience is not None
    if not _HOST.fullmatch(target_host):
        raise field_error(
            "target_host", "target_host must not contain whitespace, slashes or control characters"
        )
    grant_type = grant_type_field(body, "once")
    duration = seconds_field(body, "duration", services.config.grants.max_duration)
    command = _string_list(body, "command", max_items=MAX_ARGS, max_len=MAX_ARG)
    if command is not None:
        if not command:
            raise field_error("command", "command must name a program")
        if not command[0]:
            raise field_error("command", "command[0] must not be empty")
        if sum(len(a.encode("utf-8")) + 1 for a in command) > MAX_COMMAND_BYTES:
            raise field_error("command", f"command is longer than {MAX_COMMAND_BYTES} bytes")
    permissions = _string_list(body, "permissions", max_items=MAX_PERMISSIONS, max_len=MAX_TEXT)
    if permissions is not None:
        if any(not p.strip() for p in permissions):
            raise field_error("permissions", "permissions must be non-empty strings")
        for permission in permissions:
            check_identifier("permissions", permission)
    if command is None and permissions is None:
        permissions = []  # D6: a "permissions" grant, for the audience on the host (its list may be empty)
    reason = string_field(body, "reason", required=False, max_len=MAX_REASON)
    run_as = identifier_field(body, "run_as", required=False, max_len=64)
    if run_as is not None and not _RUN_AS.fullmatch(run_as):
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
    request.update(_extensions(body))
    if principal is not None and principal.dpop_jkt is not None:
        # D16: requested with a DPoP-bound token, so its AuthZ-JWT is bound to that key (cnf.jkt)
        request["cnf"] = {"jkt": principal.dpop_jkt}
    if principal is not None and principal.act is not None:
        # D16: requested with an exchanged token (an agent acting for this person): no path drops
        # act. The grant keeps the actor chain and the delegation it stands on, and so does its
        # AuthZ-JWT (and the decision log's grant.created leaf, which holds the request)
        request["act"] = principal.act
        request["delegation"] = {"id": principal.delegation_id, "delegator": principal.email}
    return request, requester_id


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
    if request.get("cnf"):
        parts.append(request["cnf"])  # a bound request never reuses an unbound grant (nor another key's)
    if request.get("act"):
        parts.append({"act": request["act"]})  # an agent acting for the person is another requester
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def approval_expiry(services: Services, grant_type: str, decided_at: int, duration: int | None) -> int | None:
    """``expires_at`` of an approval (D6): timed -> its duration; once -> ``grants.once_ttl`` (an
    approval nobody uses must not stay good for ever); always -> no end."""
    if grant_type == "timed":
        assert duration is not None
        return decided_at + duration * 1000
    if grant_type == "once":
        return decided_at + services.config.grants.once_ttl * 1000
    return None
