"""CIBA wired end to end (D16): POST /bc-authorize with private_key_jwt, the grant it makes (routed
like any grant, binding message kept), and the /token poll with every answer CIBA names. A real
server in this process with a clock the test moves (slow_down, expiry) and real HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from inproc import InProcessServer

from grantd.dpop import make_proof, thumbprint_of_ssh_key

from authz_world import NO_LIMITS
from conftest import Agent, enroll

CIBA = "urn:openid:params:grant-type:ciba"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
COMMAND = ["systemctl", "restart", "nginx"]


def assertion(
    srv: InProcessServer, agent: Agent, aud: str | None = None, *, client: str | None = None
) -> dict[str, str]:
    now = srv.clock.now_s()
    who = client or agent.email
    token = jwt.encode(
        {
            "iss": who,
            "sub": who,
            "aud": aud or srv.url,
            "exp": now + 60,
            "iat": now,
            "jti": str(uuid.uuid4()),
        },
        agent.private_key(),
        algorithm="EdDSA",
    )
    return {"client_assertion_type": JWT_BEARER, "client_assertion": token}


def detail(**fields: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "type": "grantd_command",
        "locations": ["web-1"],
        "actions": ["execute"],
        "command": COMMAND,
        "audience": "escapes",
        "grant_type": "once",
    }
    d.update(fields)
    return d


def bc_authorize(
    srv: InProcessServer, agent: Agent, *, as_json: bool = False, **params: Any
) -> httpx.Response:
    body: dict[str, Any] = {
        "scope": "openid",
        "login_hint": "policy",
        "binding_message": "deploy 42",
        "authorization_details": json.dumps([detail()]),
        **assertion(srv, agent, f"{srv.url}/bc-authorize"),
    }
    body.update(params)
    body = {k: v for k, v in body.items() if v is not None}
    with srv.client() as http:
        if as_json:
            return http.post("/bc-authorize", json=body)
        return http.post("/bc-authorize", data=body)


def poll(srv: InProcessServer, agent: Agent, auth_req_id: str, **headers: str) -> httpx.Response:
    with srv.client() as http:
        return http.post(
            "/token",
            data={
                "grant_type": CIBA,
                "auth_req_id": auth_req_id,
                **assertion(srv, agent, f"{srv.url}/token"),
            },
            headers=headers,
        )


def pending_grant(srv: InProcessServer, agent: Agent) -> dict[str, Any]:
    with srv.admin() as http:
        r = http.get("/api/grants", params={"requester": agent.email, "status": "pending"})
    assert r.status_code == 200, r.text
    return r.json()["data"][0]  # type: ignore[no-any-return]


def decide(srv: InProcessServer, grant_id: str, action: str = "approve") -> None:
    with srv.admin() as http:
        r = http.post(f"/api/grants/{grant_id}/{action}", json={})
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("ciba"), extra=NO_LIMITS).start()
    yield server
    server.stop()


@pytest.fixture
def agent(srv: InProcessServer, tmp_path: Path) -> Agent:
    return enroll(srv, tmp_path)  # type: ignore[arg-type]


def test_the_poll_flow_from_request_to_authz_jwt(srv, agent):
    r = bc_authorize(srv, agent)
    assert r.status_code == 200, r.text
    ack = r.json()
    assert set(ack) == {"auth_req_id", "expires_in", "interval"} and ack["interval"] == 5
    grant = pending_grant(srv, agent)
    assert grant["id"] != ack["auth_req_id"]
    assert grant["request"]["binding_message"] == "deploy 42"
    assert grant["request"]["command"] == COMMAND and grant["request"]["target_host"] == "web-1"
    r = poll(srv, agent, ack["auth_req_id"])
    assert r.status_code == 400 and r.json()["error"] == "authorization_pending", r.text
    decide(srv, grant["id"])
    srv.clock.advance(6)
    r = poll(srv, agent, ack["auth_req_id"])
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["token_type"] == "Bearer"
    claims = jwt.decode(answer["access_token"], options={"verify_signature": False})
    assert claims["grant_id"] == grant["id"] and claims["command"] == COMMAND and claims["sub"] == agent.email
    assert claims["authorization_details"][0]["type"] == "grantd_command"
    id_token = jwt.decode(answer["id_token"], options={"verify_signature": False})
    assert id_token["sub"] == "admin@example.com" and id_token["aud"] == agent.email
    [enriched] = answer["authorization_details"]
    assert enriched["grant_id"] == grant["id"] and enriched["cmd_hash"].startswith("sha256:")
    # single use: the auth_req_id is redeemed
    srv.clock.advance(6)
    r = poll(srv, agent, ack["auth_req_id"])
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant"
    # and the access token is an ordinary AuthZ-JWT: consume takes it
    with srv.client(answer["access_token"]) as http:
        assert http.post(f"/api/grants/{grant['id']}/consume").json()["status"] == "consumed"


def test_json_body_with_the_details_as_an_array(srv, agent):
    r = bc_authorize(srv, agent, as_json=True, authorization_details=[detail()])
    assert r.status_code == 200, r.text


def test_slow_down_adds_five_seconds_and_the_first_poll_is_never_too_soon(srv, agent):
    ack = bc_authorize(srv, agent).json()
    assert poll(srv, agent, ack["auth_req_id"]).json()["error"] == "authorization_pending"  # at once
    r = poll(srv, agent, ack["auth_req_id"])  # sooner than 5 s after the previous poll
    assert r.json()["error"] == "slow_down", r.text
    srv.clock.advance(6)  # 6 s is now too soon: the interval is 10 s
    assert poll(srv, agent, ack["auth_req_id"]).json()["error"] == "slow_down"
    srv.clock.advance(16)
    assert poll(srv, agent, ack["auth_req_id"]).json()["error"] == "authorization_pending"
    # too soon is too soon once it is decided too; the interval is now 15 s
    decide(srv, pending_grant(srv, agent)["id"])
    srv.clock.advance(11)
    assert poll(srv, agent, ack["auth_req_id"]).json()["error"] == "slow_down"
    srv.clock.advance(21)
    assert "access_token" in poll(srv, agent, ack["auth_req_id"]).json()


def test_denied_is_access_denied_with_who(srv, agent):
    ack = bc_authorize(srv, agent).json()
    decide(srv, pending_grant(srv, agent)["id"], "deny")
    r = poll(srv, agent, ack["auth_req_id"])
    assert r.json()["error"] == "access_denied" and "admin@example.com" in r.json()["error_description"]


def test_an_expired_request_is_expired_token(srv, agent):
    ack = bc_authorize(srv, agent, requested_expiry="30").json()
    assert ack["expires_in"] == 30
    srv.clock.advance(31)
    assert poll(srv, agent, ack["auth_req_id"]).json()["error"] == "expired_token"


def test_unknown_and_another_clients_auth_req_id_are_invalid_grant(srv, agent, tmp_path):
    ack = bc_authorize(srv, agent).json()
    other = enroll(srv, tmp_path / "other")  # type: ignore[arg-type]
    assert poll(srv, other, ack["auth_req_id"]).json()["error"] == "invalid_grant"
    # another client's poll is not the owner's: its first poll is still never too soon (D16)
    assert poll(srv, agent, ack["auth_req_id"]).json()["error"] == "authorization_pending"
    assert poll(srv, agent, "nope").json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"scope": "email"}, "invalid_scope"),
        ({"login_hint": None}, "invalid_request"),
        ({"id_token_hint": "x.y.z"}, "invalid_request"),  # two hints
        ({"login_hint": "nobody@example.com"}, "unknown_user_id"),
        ({"login_hint": "group:nope"}, "unknown_user_id"),
        ({"binding_message": "approve\u0007now"}, "invalid_binding_message"),
        ({"binding_message": "x" * 65}, "invalid_binding_message"),
        ({"authorization_details": None}, "invalid_authorization_details"),
        ({"authorization_details": json.dumps([detail(type="other")])}, "invalid_authorization_details"),
        ({"authorization_details": json.dumps([detail(command="bad")])}, "invalid_authorization_details"),
        (
            {"authorization_details": json.dumps([detail(grant_type="timed")])},
            "invalid_authorization_details",
        ),
        ({"authorization_details": "not json"}, "invalid_authorization_details"),
        ({"user_code": "1234"}, "invalid_request"),
        ({"request": "a.b.c"}, "request_not_supported"),
        ({"requested_expiry": "0"}, "invalid_request"),
    ],
)
def test_every_bad_request_gets_cibas_error_code(srv, agent, params, error):
    r = bc_authorize(srv, agent, **params)
    assert r.status_code == 400, r.text
    assert r.json()["error"] == error, r.json()
    assert r.json()["error_description"]


def test_client_authentication_is_the_agents_key_and_single_use(srv, agent, tmp_path):
    other = enroll(srv, tmp_path / "o")  # type: ignore[arg-type]
    forged = assertion(srv, other, f"{srv.url}/bc-authorize", client=agent.email)  # other key, agent's name
    r = bc_authorize(srv, agent, **forged)
    assert r.status_code == 401 and r.json()["error"] == "invalid_client"
    once = assertion(srv, agent, f"{srv.url}/bc-authorize")
    assert bc_authorize(srv, agent, **once).status_code == 200
    r = bc_authorize(srv, agent, **once)  # the same assertion again
    assert r.status_code == 401 and "jti" in r.json()["error_description"]
    r = bc_authorize(srv, agent, client_assertion=None, client_assertion_type=None)
    assert r.status_code == 401
    wrong_aud = assertion(srv, agent, "https://elsewhere.example.com/bc-authorize")
    assert bc_authorize(srv, agent, **wrong_aud).status_code == 401


def test_a_person_hint_must_be_someone_who_may_decide(srv, agent):
    assert bc_authorize(srv, agent, login_hint="admin@example.com").status_code == 200


def test_a_dpop_proof_at_bc_authorize_binds_the_grant(srv, agent):
    proof = make_proof(
        agent.private_key(),
        method="POST",
        url=f"{srv.url}/bc-authorize",
        iat=srv.clock.now_s(),
        jti=str(uuid.uuid4()),
    )
    with srv.client() as http:
        body = {
            "scope": "openid",
            "login_hint": "policy",
            "authorization_details": json.dumps([detail()]),
            **assertion(srv, agent, f"{srv.url}/bc-authorize"),
        }
        r = http.post("/bc-authorize", data=body, headers={"DPoP": proof})
    assert r.status_code == 200, r.text
    decide(srv, pending_grant(srv, agent)["id"])
    answer = poll(srv, agent, r.json()["auth_req_id"]).json()
    assert answer["token_type"] == "DPoP"
    claims = jwt.decode(answer["access_token"], options={"verify_signature": False})
    assert claims["cnf"]["jkt"] == thumbprint_of_ssh_key(agent.public_key)


def test_discovery_advertises_ciba_and_dpop(srv):
    with srv.client() as http:
        doc = http.get("/.well-known/openid-configuration").json()
    assert doc["backchannel_authentication_endpoint"] == f"{srv.url}/bc-authorize"
    assert doc["backchannel_token_delivery_modes_supported"] == ["poll", "ping"]
    assert doc["backchannel_user_code_parameter_supported"] is False
    assert CIBA in doc["grant_types_supported"]
    assert "urn:ietf:params:oauth:grant-type:token-exchange" in doc["grant_types_supported"]
    assert doc["dpop_signing_alg_values_supported"] == ["EdDSA", "Ed25519"]
    assert "grantd_command" in doc["authorization_details_types_supported"]


def test_the_binding_message_is_shown_quoted_on_the_approval_page_and_in_the_tui(srv, agent):
    r = bc_authorize(srv, agent, binding_message="<b>urgent</b> fix")
    assert r.status_code == 200, r.text
    grant = pending_grant(srv, agent)
    from people_support import signed_in_person

    _, http = signed_in_person(srv, admin=True)
    with http:
        page = http.get(f"/grant-approval?grant_id={grant['id']}")
        inbox = http.get("/grants")
    assert page.status_code == 200, page.status_code
    assert "from the agent:" in page.text and "&lt;b&gt;urgent&lt;/b&gt; fix" in page.text
    assert "<b>urgent</b>" not in page.text
    assert "message from the agent: “&lt;b&gt;urgent&lt;/b&gt; fix”" in inbox.text
    from grantd.tui.models import Grant
    from grantd.tui.widgets.grant_detail import GrantDetail

    detail = GrantDetail()
    detail.grant = Grant.from_json(grant)
    text = detail.render_text().plain
    assert "from the agent: “<b>urgent</b> fix”" in text
