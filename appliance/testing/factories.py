"""Records for the contract suite, at a fixed clock (ms): no sleeps, no wall clock."""

from __future__ import annotations

import hashlib
from typing import Any

from grantd.core.lifecycle import Lapse, delegation_lapse, grant_lapse
from grantd.core.paging import Cursor, PageRequest
from grantd.store.records import (
    Agent,
    Consent,
    Delegation,
    DeviceCode,
    Grant,
    PasskeyCredential,
    Person,
    RefreshToken,
    RegistrationUrl,
    Session,
    SigningKey,
    WebAuthnChallenge,
)

NOW = 1_700_000_000_000
PENDING_TTL_S = 3600
HOUR = 3_600_000


def lapse(now: int = NOW) -> Lapse:
    return grant_lapse(now, PENDING_TTL_S)


def dlapse(now: int = NOW) -> Lapse:
    return delegation_lapse(now)


def first_page(limit: int = 20) -> PageRequest:
    return PageRequest(limit, None)


def next_page(rows: list[Any], limit: int, id_key: str = "id") -> PageRequest:
    return PageRequest(limit, Cursor(rows[-1]["created_at"], rows[-1][id_key]))


async def walk(list_page: Any, limit: int, id_key: str = "id") -> list[list[Any]]:
    """Every page of a list call, following cursors; checks has_more on the way."""
    pages: list[list[Any]] = []
    page = first_page(limit)
    while True:
        rows, more = await list_page(page)
        pages.append(rows)
        if not more:
            return pages
        assert len(rows) == limit
        page = next_page(rows, limit, id_key)


def key(kid: str, created_at: int = NOW, alg: str = "EdDSA") -> SigningKey:
    return {
        "kid": kid,
        "alg": alg,
        "private_pem": f"-----PRIVATE {kid}-----",
        "public_jwk": {"kid": kid, "x": kid},
        "created_at": created_at,
        "retired_at": None,
    }


def agent(
    name: str,
    *,
    created_at: int = NOW,
    owner: str = "owner@example.com",
    approver: str | None = None,
    **changes: Any,
) -> Agent:
    record: Agent = {
        "agent_id": f"agt_{name}",
        "email": f"{name}@agents.example.com",
        "name": name,
        "public_key": f"ssh-ed25519 KEY{name}",
        "key_id": "SHA256:" + hashlib.sha256(name.encode()).hexdigest(),
        "key_generation": 1,
        "owner": owner,
        "approver": approver or owner,
        "status": "active",
        "created_at": created_at,
        "updated_at": created_at,
        "owner_id": None,
        "approver_id": None,  # the store binds them to persons (D11)
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def grant(
    gid: str,
    *,
    requester: str = "bot@agents.example.com",
    requester_id: str | None = None,
    status: str = "pending",
    created_at: int = NOW,
    **changes: Any,
) -> Grant:
    record: Grant = {
        "id": gid,
        "type": "command",
        "requester": requester,
        "requester_id": requester_id or requester,
        "request": {"command": ["ls", gid], "audience": "host"},
        "grant_type": "once",
        "status": status,
        "created_at": created_at,
        "decided_by": None,
        "decided_at": None,
        "expires_at": None,
        "used_at": None,
        "decision_reason": None,
        "delegation_id": None,
        "revoked_by": None,
        "revoked_at": None,
        "reuse_key": None,
        "version": 1,
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def delegation(
    did: str,
    *,
    delegator: str = "alice@example.com",
    delegate: str = "bot@agents.example.com",
    created_at: int = NOW,
    expires_at: int | None = None,
    status: str = "active",
) -> Delegation:
    return {
        "id": did,
        "delegator": delegator,
        "delegate": delegate,
        "audience": "host",
        "scopes": ["read", "write"],
        "approval": "once",
        "duration": None,
        "created_at": created_at,
        "expires_at": expires_at,
        "status": status,
        "revoked_at": None,
        "revoked_by": None,
    }


def person(slug: str, *, created_at: int = NOW, **changes: Any) -> Person:
    record: Person = {
        "person_id": f"usr_{slug}",
        "email": f"{slug}@example.com",
        "name": slug.title(),
        "admin": False,
        "status": "active",
        "created_at": created_at,
        "updated_at": created_at,
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def credential(
    cid: str, person_id: str = "usr_alice", *, created_at: int = NOW, **changes: Any
) -> PasskeyCredential:
    record: PasskeyCredential = {
        "credential_id": cid,
        "person_id": person_id,
        "rp_id": "grantd.example.com",
        "public_key": f"pk-{cid}",
        "sign_count": 0,
        "transports": ["internal", "hybrid"],
        "aaguid": "00000000-0000-0000-0000-000000000000",
        "name": f"Passkey {cid}",
        "backed_up": True,
        "created_at": created_at,
        "last_used_at": None,
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def session(
    sid: str,
    person_id: str = "usr_alice",
    *,
    family_id: str | None = None,
    created_at: int = NOW,
    expires_at: int = NOW + HOUR,
    **changes: Any,
) -> Session:
    record: Session = {
        "session_id": sid,
        "family_id": family_id or f"fam_{sid}",
        "person_id": person_id,
        "created_at": created_at,
        "expires_at": expires_at,
        "last_seen_at": created_at,
        "user_agent": "Firefox",
        "revoked_at": None,
        "idp": None,
        "email": None,
        "name": None,
        "credential_id": None,
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def registration(
    rid: str,
    email: str = "alice@example.com",
    *,
    purpose: str = "register",
    created_at: int = NOW,
    expires_at: int = NOW + HOUR,
    **changes: Any,
) -> RegistrationUrl:
    record: RegistrationUrl = {
        "id": rid,
        "token_hash": hashlib.sha256(rid.encode()).hexdigest(),
        "email": email,
        "admin": False,
        "purpose": purpose,
        "rp_id": "grantd.example.com",
        "created_by": "root@example.com",
        "created_at": created_at,
        "expires_at": expires_at,
        "used_at": None,
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def token_hash(rid: str) -> str:
    """The token hash of ``registration(rid)``."""
    return hashlib.sha256(rid.encode()).hexdigest()


def webauthn_challenge(
    value: str, purpose: str = "login", *, expires_at: int = NOW + 300_000, **changes: Any
) -> WebAuthnChallenge:
    record: WebAuthnChallenge = {
        "challenge": value,
        "purpose": purpose,
        "rp_id": "grantd.example.com",
        "person_id": None,
        "registration_id": None,
        "expires_at": expires_at,
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


# -- OAuth (grantd.store.oauth) --------------------------------------------------------------------------
DAY = 24 * HOUR


def sha(secret: str) -> str:
    """How callers key secrets: SHA-256 hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def refresh_token(
    secret: str,
    *,
    family_id: str = "rtf_one",
    person_id: str = "usr_alice",
    client_id: str = "apes-cli",
    created_at: int = NOW,
    expires_at: int = NOW + 30 * DAY,
    **changes: Any,
) -> RefreshToken:
    record: RefreshToken = {
        "token_hash": sha(secret),
        "family_id": family_id,
        "client_id": client_id,
        "person_id": person_id,
        "scope": "openid email offline_access",
        "auth_time": created_at // 1000,
        "created_at": created_at,
        "expires_at": expires_at,
        "used_at": None,
        "revoked_at": None,
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def next_token(old: RefreshToken, secret: str, created_at: int) -> RefreshToken:
    """The token a rotation of ``old`` stores: same family, client, person and family end."""
    return {**old, "token_hash": sha(secret), "created_at": created_at, "used_at": None, "revoked_at": None}


def device_code(
    secret: str,
    user_code: str = "BCDFGHJK",
    *,
    created_at: int = NOW,
    expires_at: int = NOW + 600_000,
    **changes: Any,
) -> DeviceCode:
    record: DeviceCode = {
        "device_code_hash": sha(secret),
        "user_code": user_code,
        "client_id": "grantd-cli",
        "scope": "openid",
        "created_at": created_at,
        "expires_at": expires_at,
        "interval": 5,
        "last_polled_at": None,
        "status": "pending",
        "person_id": None,
        "decided_at": None,
        "client_address": "192.0.2.10",
    }
    record.update(changes)  # type: ignore[typeddict-item]
    return record


def consent(
    client_id: str = "sp.example.com",
    person_id: str = "usr_alice",
    *,
    scope: str = "openid email",
    at: int = NOW,
) -> Consent:
    return {
        "person_id": person_id,
        "client_id": client_id,
        "scope": scope,
        "created_at": at,
        "updated_at": at,
    }


def guest_session(sid: str, *, created_at: int = NOW, **changes: Any) -> Session:
    """A guest: signed in through SP login at another IdP, no person here."""
    return session(
        sid,
        None,  # type: ignore[arg-type]
        created_at=created_at,
        **{  # type: ignore[arg-type]
            "idp": "https://idp.example.org",
            "email": "guest@example.org",
            "name": "Guest",
            **changes,
        },
    )


def notice(
    rid: str,
    grant_id: str | None = "g1",
    *,
    recipient: str = "alice@example.com",
    channel: str = "mail",
    kind: str = "review_requested",
    created_at: int = NOW,
    **changes: Any,
) -> Any:
    """An outbox row (grantd.store.notify.OutboxRow), due at ``created_at``."""
    row: dict[str, Any] = {
        "id": rid,
        "grant_id": grant_id,
        "channel": channel,
        "recipient": recipient,
        "person_id": None,
        "kind": kind,
        "level": 0,
        "status": "pending",
        "attempts": 0,
        "next_at": created_at,
        "claimed_by": None,
        "claimed_until": None,
        "error": None,
        "created_at": created_at,
        "sent_at": None,
        "payload": {},
    }
    row.update(changes)
    return row
