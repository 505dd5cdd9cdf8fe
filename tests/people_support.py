"""Helpers for the People tests: persons through the admin API, sessions started on the server's own
loop (``grantd.services.sessions.start``: no WebAuthn needed), passkeys written straight to the
store, agents and grants over HTTP."""

from __future__ import annotations

import base64
import itertools
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SESSION_COOKIE = "grantd_session"
_serial = itertools.count()


def fresh(prefix: str, domain: str = "example.com") -> str:
    return f"{prefix}-{os.getpid()}-{next(_serial)}-{time.monotonic_ns() % 1_000_000}@{domain}"


def create_person(
    srv: Any, email: str | None = None, *, admin: bool = False, **fields: Any
) -> dict[str, Any]:
    email = email or fresh("person")
    with srv.admin() as http:
        r = http.post("/api/admin/users", json={"email": email, "admin": admin, **fields})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def start_session(srv: Any, email: str) -> str:
    """A signed-in session of the person: the cookie value."""
    from grantd.services import sessions

    person = srv.call(srv.services.store.people.get(email))
    assert person is not None, email
    value, _ = srv.call(sessions.start(srv.services, person, "pytest"))
    return str(value)


def cookie_client(srv: Any, cookie: str) -> httpx.Client:
    return httpx.Client(base_url=srv.url, cookies={SESSION_COOKIE: cookie}, timeout=10)


def signed_in_person(
    srv: Any, email: str | None = None, *, admin: bool = False
) -> tuple[dict[str, Any], httpx.Client]:
    person = create_person(srv, email, admin=admin)
    return person, cookie_client(srv, start_session(srv, person["email"]))


def add_passkey(srv: Any, person_id: str, rp_id: str = "127.0.0.1") -> dict[str, Any]:
    """A passkey record straight into the store (the ceremony is the sessions engineer's to test)."""
    now = srv.clock.now_ms()
    credential = {
        "credential_id": base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode(),
        "person_id": person_id,
        "rp_id": rp_id,
        "public_key": "cHVibGlj",
        "sign_count": 0,
        "transports": ["internal"],
        "aaguid": "00000000-0000-0000-0000-000000000000",
        "name": "Test key",
        "backed_up": False,
        "created_at": now,
        "last_used_at": None,
    }
    return srv.call(srv.services.store.credentials.add(credential))  # type: ignore[no-any-return]


def new_public_key() -> tuple[Ed25519PrivateKey, str]:
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode() + " test"


def agent_token(srv: Any, ident: str, key: Ed25519PrivateKey) -> str:
    with srv.client() as http:
        challenge = http.post("/api/agent/challenge", json={"agent_id": ident}).json()["challenge"]
        signature = base64.b64encode(key.sign(challenge.encode())).decode()
        r = http.post(
            "/api/agent/authenticate",
            json={"agent_id": ident, "challenge": challenge, "signature": signature},
        )
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def enrol_agent(srv: Any, *, owner: str, approver: str | None = None) -> tuple[dict[str, Any], str]:
    """An agent enrolled by the management token for ``owner``: (record, identity token)."""
    key, public = new_public_key()
    body = {
        "email": fresh("agent+bot"),
        "name": "bot",
        "publicKey": public,
        "owner": owner,
        "approver": approver or owner,
    }
    with srv.admin() as http:
        r = http.post("/api/agent/enroll", json=body)
    assert r.status_code == 201, r.text
    return r.json(), agent_token(srv, r.json()["agent_id"], key)


def request_grant(srv: Any, token: str, **fields: Any) -> dict[str, Any]:
    body = {
        "target_host": "web-1",
        "audience": "escapes",
        "command": ["systemctl", "restart", "nginx"],
        "grant_type": "once",
        **fields,
    }
    with srv.client(token) as http:
        r = http.post("/api/grants", json=body)
    assert r.status_code in (200, 201), r.text
    return r.json()  # type: ignore[no-any-return]


def server_with_people(directory: Path, extra: str, emails: Iterable[str]) -> Iterator[Any]:
    """A fixture body: an in-process server with ``extra`` config and these people, stopped after."""
    from inproc import InProcessServer

    server = InProcessServer(directory, extra=extra).start()
    try:
        for email in emails:
            create_person(server, email)
        yield server
    finally:
        server.stop()
