"""Token exchange wired (RFC 8693, D16): a delegation answers a `delegation_token`; the delegate
(private_key_jwt with its enrolled key) exchanges it at /token for `{sub: person, act: {sub: agent}}`,
never longer-lived than the delegation nor 15 minutes, nested for chains (depth <= 4); such a token
reads but never approves, denies, reviews, delegates or administers (403)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from inproc import InProcessServer
from people_support import create_person

from grantd.dpop import make_proof, thumbprint_of_ssh_key

from authz_world import NO_LIMITS
from conftest import Agent, enroll
from server.test_ciba_flow import assertion

EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("exchange"), extra=NO_LIMITS).start()
    yield server
    server.stop()


@pytest.fixture
def world(srv: InProcessServer, tmp_path: Path) -> dict[str, Any]:
    person = create_person(srv)
    agent = enroll(srv, tmp_path / "a", owner=person["email"], approver=person["email"])  # type: ignore[arg-type]
    other = enroll(srv, tmp_path / "b", owner=person["email"], approver=person["email"])  # type: ignore[arg-type]
    return {"person": person, "agent": agent, "other": other}


def delegate(srv: InProcessServer, person: dict[str, Any], agent: Agent, **fields: Any) -> dict[str, Any]:
    with srv.admin() as http:
        r = http.post(
            "/api/delegations",
            json={"delegator": person["email"], "delegate": agent.email, "audience": "escapes", **fields},
        )
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def exchange(
    srv: InProcessServer, agent: Agent, subject: str, headers: dict[str, str] | None = None, **extra: str
):
    data = {
        "grant_type": EXCHANGE,
        "subject_token": subject,
        "subject_token_type": JWT_TYPE,
        **assertion(srv, agent, f"{srv.url}/token"),
        **extra,
    }
    with srv.client() as http:
        return http.post("/token", data=data, headers=headers or {})


def claims(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


def test_a_delegation_token_exchanged_by_its_delegate(srv, world):
    person, agent = world["person"], world["agent"]
    d = delegate(srv, person, agent, duration=3600)
    dt = claims(d["delegation_token"])
    assert (
        dt["sub"] == person["email"]
        and dt["may_act"] == {"sub": agent.email}
        and dt["delegation_id"] == d["id"]
    )
    assert jwt.get_unverified_header(d["delegation_token"])["typ"] == "grantd-delegation+jwt"
    r = exchange(srv, agent, d["delegation_token"])
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    token = claims(answer["access_token"])
    assert token["sub"] == person["email"] and token["act"] == {"sub": agent.email}
    assert token["delegation_id"] == d["id"] and token["aud"] == srv.url
    assert token["exp"] - token["iat"] <= 15 * 60 and answer["expires_in"] <= 15 * 60


def test_never_longer_than_the_delegation(srv, world):
    d = delegate(srv, world["person"], world["agent"], duration=120)
    token = claims(exchange(srv, world["agent"], d["delegation_token"]).json()["access_token"])
    assert token["exp"] <= d["expires_at"] // 1000


def test_only_the_named_delegate_may_exchange(srv, world):
    d = delegate(srv, world["person"], world["agent"])
    r = exchange(srv, world["other"], d["delegation_token"])
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"


def test_a_revoked_delegation_ends_exchange_and_exchanged_tokens(srv, world):
    d = delegate(srv, world["person"], world["agent"])
    token = exchange(srv, world["agent"], d["delegation_token"]).json()["access_token"]
    with srv.client(token) as http:
        me = http.get("/api/me")
        assert me.status_code == 200
        # D16: no path drops act; /api/me names the person and the agent acting for them
        assert me.json()["email"] == world["person"]["email"]
        assert me.json()["act"] == {"sub": world["agent"].email}
    with srv.admin() as http:
        assert http.delete(f"/api/delegations/{d['id']}").status_code == 200
    assert exchange(srv, world["agent"], d["delegation_token"]).json()["error"] == "invalid_grant"
    with srv.client(token) as http:
        assert http.get("/api/me").status_code == 401


def test_chains_nest_act_and_stop_at_four_actors(srv, world):
    d = delegate(srv, world["person"], world["agent"])
    subject = d["delegation_token"]
    depths = []
    for _ in range(4):
        r = exchange(srv, world["agent"], subject)
        assert r.status_code == 200, r.text
        subject = r.json()["access_token"]
        act, depth = claims(subject)["act"], 0
        while act:
            depth, act = depth + 1, act.get("act")
        depths.append(depth)
    assert depths == [1, 2, 3, 4]
    r = exchange(srv, world["agent"], subject)
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/grants/{grant}/approve", {}),
        ("POST", "/api/grants/{grant}/deny", {}),
        ("POST", "/api/grants/{grant}/review", {"decision": "approve"}),
        ("POST", "/api/grants/batch", {"operations": [{"id": "{grant}", "action": "approve"}]}),
        ("POST", "/api/delegations", {"delegate": "x@example.com", "audience": "escapes"}),
        ("DELETE", "/api/delegations/{delegation}", None),
        ("GET", "/api/admin/agents", None),
        ("PUT", "/api/admin/agents/{agent}", {"name": "x"}),
        ("POST", "/api/admin/users", {"email": "new@example.com"}),
        ("POST", "/api//grants/{grant}/approve", {}),  # repeated slashes are the same route
        ("POST", "/api/hosts", {"host": "web-9", "publicKey": "x"}),
        # the person's account (D16 "manage"): an agent acting for them never administers it
        ("DELETE", "/api/webauthn/credentials/cred-x", None),
        ("DELETE", "/api/sessions/fam_x", None),
        ("POST", "/api/webauthn/credentials/add/options", {}),
        ("POST", "/api/agent/enroll", {"name": "zz", "publicKey": "ssh-ed25519 AAAA"}),
        ("PUT", "/api/account/notifications", {"channels": {"mail": False}}),
        ("POST", "/api/push/subscriptions", {}),
        ("DELETE", "/api/account/consents/some-client", None),
        ("POST", "/api/grants/{grant}/revoke", {}),
    ],
)
def test_a_token_with_act_never_decides_delegates_or_administers(srv, world, method, path, body):
    person, agent = world["person"], world["agent"]
    d = delegate(srv, person, agent)
    token = exchange(srv, agent, d["delegation_token"]).json()["access_token"]
    from conftest import sign_in

    sign_in(srv, agent)  # type: ignore[arg-type]
    with srv.client(agent.token) as http:
        grant = http.post(
            "/api/grants", json={"target_host": "web-1", "audience": "x", "command": ["true"]}
        ).json()
    names = {"grant": grant["id"], "delegation": d["id"], "agent": agent.agent_id}
    url = path.format(**names)
    if body is not None and "operations" in body:
        body = {"operations": [{"id": grant["id"], "action": "approve"}]}
    with srv.client(token) as http:
        r = http.request(method, url, json=body)
    assert r.status_code == 403, (url, r.status_code, r.text)
    assert "act" in r.json()["detail"]
    # the person themselves (a session) may; the token with act reads
    with srv.client(token) as http:
        assert http.get(f"/api/grants/{grant['id']}").status_code == 200


def test_a_dpop_proof_binds_the_exchanged_token(srv, world):
    d = delegate(srv, world["person"], world["agent"])
    agent = world["agent"]
    proof = make_proof(
        agent.private_key(),
        method="POST",
        url=f"{srv.url}/token",
        iat=srv.clock.now_s(),
        jti=str(uuid.uuid4()),
    )
    r = exchange(srv, agent, d["delegation_token"], headers={"DPoP": proof})
    assert r.status_code == 200 and r.json()["token_type"] == "DPoP", r.text
    token = r.json()["access_token"]
    assert claims(token)["cnf"]["jkt"] == thumbprint_of_ssh_key(agent.public_key)
    with srv.client(token) as http:
        assert http.get("/api/me").status_code == 401  # bound: Bearer is refused
    me = make_proof(
        agent.private_key(),
        method="GET",
        url=f"{srv.url}/api/me",
        iat=srv.clock.now_s(),
        jti=str(uuid.uuid4()),
        access_token=token,
    )
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        r = http.get("/api/me", headers={"Authorization": f"DPoP {token}", "DPoP": me})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:access_token"}, "invalid_request"),
        ({"actor_token": "x"}, "invalid_request"),
        ({"subject_token": "not.a.token"}, "invalid_grant"),
        ({"resource": "relative/path"}, "invalid_target"),
    ],
)
def test_bad_exchange_requests_get_rfc_8693_codes(srv, world, extra, error):
    d = delegate(srv, world["person"], world["agent"])
    r = exchange(srv, world["agent"], d["delegation_token"], **extra)
    assert r.status_code == 400 and r.json()["error"] == error, r.text


def test_every_acting_route_name_is_a_route_of_the_app(srv):
    """The table of what a token with act may not do names real routes (a rename must not open one)."""
    from grantd.web.api.common import ACTING_MAY, ACTING_ROUTES

    names = {route.name.split(".", 1)[-1] for route in srv.app.router.routes}
    assert set(ACTING_ROUTES) <= names
    assert set(ACTING_MAY) <= names
    assert any(name.startswith("people_admin.") for name in names)


def test_other_tokens_are_not_subject_tokens(srv, world):
    from conftest import sign_in

    agent = world["agent"]
    identity = sign_in(srv, agent)  # type: ignore[arg-type]
    assert exchange(srv, agent, identity).json()["error"] == "invalid_grant"


def test_a_grant_requested_with_an_exchanged_token_keeps_act_to_its_authz_jwt(srv, world):
    """D16: no path drops act. The grant keeps the actor chain and the delegation it stands on, its
    AuthZ-JWT carries both (sub = the person it was requested for)."""
    person, agent = world["person"], world["agent"]
    d = delegate(srv, person, agent, duration=3600)
    token = exchange(srv, agent, d["delegation_token"]).json()["access_token"]
    body = {"target_host": "web-1", "audience": "escapes", "command": ["uptime"], "grant_type": "once"}
    with srv.client(token) as http:
        created = http.post("/api/grants", json=body)
        assert created.status_code == 201, created.text
        grant = created.json()
        assert grant["requester"] == person["email"]
        assert grant["request"]["act"] == {"sub": agent.email}
        assert grant["request"]["delegation"] == {"id": d["id"], "delegator": person["email"]}
        assert http.get(f"/api/grants/{grant['id']}").json()["request"]["act"] == {"sub": agent.email}
    with srv.admin() as http:
        approved = http.post(f"/api/grants/{grant['id']}/approve", json={})
    assert approved.status_code == 200, approved.text
    authz = claims(approved.json()["authz_jwt"])
    assert authz["sub"] == person["email"] and authz["act"] == {"sub": agent.email}
    assert authz["delegation"] == {"id": d["id"], "delegator": person["email"]}


def test_userinfo_answers_an_exchanged_token_with_its_act(srv, world):
    """beyond.md §6: /userinfo accepts act tokens; D16: it keeps their act."""
    person, agent = world["person"], world["agent"]
    d = delegate(srv, person, agent, duration=3600)
    token = exchange(srv, agent, d["delegation_token"]).json()["access_token"]
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        r = http.get("/userinfo", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        assert r.json()["sub"] == person["email"] and r.json()["act"] == {"sub": agent.email}
    with srv.admin() as http:
        assert http.delete(f"/api/delegations/{d['id']}").status_code == 200
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        r = http.get("/userinfo", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401 and r.json()["error"] == "invalid_token", r.text
