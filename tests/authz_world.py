"""The world the authorisation matrix runs in: an in-process server with one agent, token and
person of every kind the matrix's columns name (tests/system/test_authz_matrix.py). Other attack
tests build the same world; the servers of these tests count no abuse limits (NO_LIMITS)."""

from __future__ import annotations

import base64
import itertools
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SESSION_COOKIE = "grantd_session"

# The matrix is about who may do what, not about how often (D12 limits have their own tests): the
# servers of these files count nothing, or the many refused bearers from 127.0.0.1 would be 429s.
NO_LIMITS = """
[limits]
authenticate_per_agent = 0
authenticate_per_address = 0
enroll_per_address = 0
failed_bearer_per_address = 0
grants_per_agent = 0
pending_per_agent = 0
pending_per_owner = 0
agents_per_person = 0
verify_per_address = 0
streams_per_principal = 0
passkey_per_address = 0
device_code_per_address = 0
token_per_address = 0
sp_login_per_address = 0
"""

PERSON_COLUMNS = ("person", "owner", "approver", "admin", "otherperson")


# -- the world the requests run in ------------------------------------------------------------------


def new_public_key() -> tuple[Ed25519PrivateKey, str]:
    private = Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode() + " matrix"


_serial = itertools.count()


def fresh_email(prefix: str) -> str:
    return f"{prefix}+{os.getpid()}-{next(_serial)}-{time.monotonic_ns() % 1_000_000}@example.com"


@dataclass
class Enrolled:
    email: str
    agent_id: str
    key: Ed25519PrivateKey
    token: str = ""


def b64url_json(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value, separators=(",", ":")).encode()).rstrip(b"=").decode()


def unverified(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


@dataclass
class World:
    """A running in-process server with one agent of every kind the columns name."""

    srv: Any
    kid: str = ""
    agents: dict[str, Enrolled] = field(default_factory=dict)
    authz_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # column -> (AuthZ-JWT, grant id)
    bearers: dict[str, str | None] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)  # column -> session cookie (the person columns)
    persons: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- plumbing
    def http(self, bearer: str | None = None) -> httpx.Client:
        return self.srv.client(bearer)

    def http_for(self, column: str) -> httpx.Client:
        """A client presenting the column's credential: its bearer, or its session cookie."""
        if column in self.cookies:
            return httpx.Client(
                base_url=self.srv.url, cookies={SESSION_COOKIE: self.cookies[column]}, timeout=10
            )
        return self.http(self.bearer(column))

    def person(self, prefix: str, *, admin: bool = False, email: str | None = None) -> dict[str, Any]:
        r = self.admin(
            "POST", "/api/admin/users", json={"email": email or fresh_email(prefix), "admin": admin}
        )
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    def throwaway_session_family(self) -> str:
        person = self.person("throwaway")
        self.session(person)
        r = self.admin("GET", "/api/admin/sessions", params={"user": person["email"]})
        return str(r.json()["data"][0]["family_id"])

    def throwaway_registration(self) -> str:
        r = self.admin("POST", "/api/admin/registration-urls", json={"email": fresh_email("throwaway")})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def guest_session(self) -> str:
        """A guest session of SP login whose IdP vouched for the ``admin`` column's e-mail."""
        from grantd.services import sessions

        value, _ = self.srv.call(
            sessions.start_guest(
                self.srv.services,
                idp="https://idp.elsewhere.example",
                email=self.persons["admin"]["email"],
                name="Guest",
                user_agent="authz-matrix",
            )
        )
        return str(value)

    def session(self, person: dict[str, Any]) -> str:
        """A signed-in session of the person (started on the server's loop: no WebAuthn needed)."""
        from grantd.services import sessions

        record = self.srv.call(self.srv.services.store.people.get(person["person_id"]))
        value, _ = self.srv.call(sessions.start(self.srv.services, record, "authz-matrix"))
        return str(value)

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self.srv.admin() as http:
            return http.request(method, path, **kwargs)

    def sign(self, claims: dict[str, Any]) -> str:
        """Any claims, signed with the server's own key (to forge what a test needs)."""
        return self.srv.call(self.srv.services.tokens._sign(claims))  # type: ignore[no-any-return]

    def foreign_sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(
            claims, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": self.kid, "typ": "JWT"}
        )

    def enroll(self, prefix: str, **fields: Any) -> Enrolled:
        key, public = new_public_key()
        email = fields.pop("email", None) or fresh_email(prefix)
        r = self.admin(
            "POST", "/api/agent/enroll", json={"email": email, "name": prefix, "publicKey": public, **fields}
        )
        assert r.status_code == 201, r.text
        return Enrolled(email, r.json()["agent_id"], key)

    def sign_in(self, agent: Enrolled) -> str:
        with self.http() as http:
            challenge = http.post("/api/agent/challenge", json={"agent_id": agent.agent_id}).json()[
                "challenge"
            ]
            signature = base64.b64encode(agent.key.sign(challenge.encode())).decode()
            r = http.post(
                "/api/agent/authenticate",
                json={"agent_id": agent.agent_id, "challenge": challenge, "signature": signature},
            )
        assert r.status_code == 200, r.text
        agent.token = r.json()["token"]
        return agent.token

    def signed_in(self, prefix: str, **fields: Any) -> Enrolled:
        agent = self.enroll(prefix, **fields)
        self.sign_in(agent)
        return agent

    def grant(self, agent: Enrolled, **fields: Any) -> dict[str, Any]:
        body = {
            "target_host": "web-1",
            "audience": "escapes",
            "command": ["systemctl", "restart", "nginx"],
            "grant_type": "once",
            **fields,
        }
        with self.http(agent.token) as http:
            r = http.post("/api/grants", json=body)
        assert r.status_code in (200, 201), r.text
        return r.json()  # type: ignore[no-any-return]

    def approved(self, agent: Enrolled, **fields: Any) -> tuple[str, str]:
        """(AuthZ-JWT, grant id) of a freshly approved grant of the agent."""
        grant = self.grant(agent, **fields)
        r = self.admin("POST", f"/api/grants/{grant['id']}/approve")
        assert r.status_code == 200, r.text
        return r.json()["authz_jwt"], grant["id"]

    def delegation(self, delegate: Enrolled) -> dict[str, Any]:
        r = self.admin(
            "POST",
            "/api/delegations",
            json={
                "delegate": delegate.email,
                "audience": "matrix-only",
                "approval": "once",
                "duration": 3600,
            },
        )
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]

    # -- the columns
    def bearer(self, column: str) -> str | None:
        return self.bearers[column]

    def authz(self, column: str) -> tuple[str | None, str]:
        """(token presented, grant id of the path) for consume and verify."""
        self_token, self_grant = self.approved(self.agents["self"])
        if column == "self":
            return self_token, self_grant
        if column in self.authz_tokens:
            token, grant_id = self.authz_tokens[column]
            return token, (self_grant if column in ("other", "foreign") else grant_id)
        if column == "expired":
            claims = unverified(self_token)
            return self.sign({**claims, "iat": claims["iat"] - 7200, "exp": claims["iat"] - 3600}), self_grant
        if column == "forged":
            return self.foreign_sign(unverified(self_token)), self_grant
        return self.bearers[column], self_grant  # none, garbage, mgmt: what they would send anyway


def build_world(srv: Any) -> World:
    w = World(srv)
    with w.http() as http:
        w.kid = http.get("/.well-known/jwks.json").json()["keys"][0]["kid"]
    w.persons = {
        "person": w.person("person"),
        "owner": w.person("owner"),
        "approver": w.person("approver"),
        "admin": w.person("admin", admin=True),
        "otherperson": w.person("carol", email="carol@example.com"),
    }
    w.cookies = {column: w.session(person) for column, person in w.persons.items()}
    w.cookies["guest"] = w.guest_session()
    parties = {"owner": w.persons["owner"]["email"], "approver": w.persons["approver"]["email"]}
    requester = w.signed_in("self", **parties)
    w.agents["self"] = requester
    w.agents["other"] = w.signed_in("other", **parties)
    w.agents["foreign"] = w.signed_in("foreign", owner="carol@example.com", approver="carol@example.com")
    for column in ("other", "foreign"):
        w.authz_tokens[column] = w.approved(w.agents[column], grant_type="timed", duration=3600)

    def doomed(column: str) -> Enrolled:
        agent = w.signed_in(column)
        w.agents[column] = agent
        w.authz_tokens[column] = w.approved(agent, grant_type="timed", duration=3600)
        return agent

    agent = doomed("disabled")
    assert (
        w.admin("PUT", f"/api/admin/agents/{agent.agent_id}", json={"status": "disabled"}).status_code == 200
    )
    agent = doomed("deleted")
    assert w.admin("DELETE", f"/api/admin/agents/{agent.agent_id}").status_code == 200
    agent = doomed("reenrolled")
    assert w.admin("DELETE", f"/api/admin/agents/{agent.agent_id}").status_code == 200
    w.signed_in("reenrolled", email=agent.email)
    agent = doomed("rekeyed")
    _, public = new_public_key()
    assert (
        w.admin("PUT", f"/api/admin/agents/{agent.agent_id}", json={"publicKey": public}).status_code == 200
    )

    now = srv.clock.now_s()
    identity = unverified(requester.token)
    w.bearers = {
        "none": None,
        "garbage": "not-a-token",
        "expired": w.sign({**identity, "iat": now - 7200, "exp": now - 3600}),
        "forged": w.foreign_sign(identity),
        "mgmt": srv.token,
        **{
            c: w.agents[c].token
            for c in ("disabled", "deleted", "reenrolled", "rekeyed", "self", "other", "foreign")
        },
        **dict.fromkeys(PERSON_COLUMNS),
        "guest": None,
    }
    return w
