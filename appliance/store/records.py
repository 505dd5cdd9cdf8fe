"""The records storage keeps, as typed dictionaries (JSON-ready: ints are ms since the epoch)."""

from __future__ import annotations

from typing import Any, TypedDict


class SigningKey(TypedDict):
    kid: str
    alg: str
    private_pem: str  # "" once the key retired: a retired key only verifies, it never signs again
    public_jwk: dict[str, Any]
    created_at: int
    retired_at: int | None


class Agent(TypedDict):
    agent_id: str
    email: str
    name: str
    public_key: str
    key_id: str  # SHA-256 fingerprint of the key
    key_generation: int  # grows with every new key; identity tokens carry it (D11)
    owner: str
    approver: str
    status: str  # active | disabled
    created_at: int
    updated_at: int


class Grant(TypedDict):
    id: str
    type: str  # command | permissions
    requester: str  # e-mail
    requester_id: str  # agent_id of an agent, else the person's e-mail; stable across re-enrolment
    request: dict[str, Any]
    grant_type: str  # once | timed | always
    status: str  # stored: pending | approved | denied | revoked | consumed | expired
    created_at: int
    decided_by: str | None
    decided_at: int | None
    expires_at: int | None
    used_at: int | None
    decision_reason: str | None
    delegation_id: str | None
    revoked_by: str | None
    revoked_at: int | None
    reuse_key: str | None
    version: int


class GrantEvent(TypedDict):
    seq: int
    event: str  # grant.created | approved | denied | revoked | consumed | expired
    grant_id: str
    requester: str
    grant: Grant  # the grant as the change left it
    created_at: int


class Delegation(TypedDict):
    id: str
    delegator: str
    delegate: str
    audience: str
    scopes: list[str]
    approval: str
    duration: int | None
    created_at: int
    expires_at: int | None
    status: str  # active | revoked (expired is read through Lapse)
    revoked_at: int | None
    revoked_by: str | None
