"""An agent without a browser asks for a grant-gated MCP scope through CIBA (issue 26; D16 with D17;
grantd.oauth.mcp_ciba): POST /bc-authorize with ``resource`` (RFC 8707) and the gated scope (or an
``mcp_tool_call`` detail) makes the grant a person's consent would make, routed by the policies,
with the agent as requester; once approved, the CIBA /token answers an RFC 9068 token for the
resource instead of an AuthZ-JWT, which the resource consumes like a person's. A real server in
this process, real HTTP, an enrolled Ed25519 agent signing its private_key_jwt."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inproc import InProcessServer
from mcp_support import MCP_SECRET, OTHER_RESOURCE, RESOURCE, mcp_config, prepare

from grantd.oauth.mcp_ciba import DETAIL_MEMBERS

from conftest import Agent, enroll
from server.test_ciba_flow import assertion, decide, poll


def bc(srv: InProcessServer, agent: Agent, **params: Any) -> httpx.Response:
    body: dict[str, Any] = {
        "scope": "openid tools:deploy",
        "resource": RESOURCE,
        "login_hint": "policy",
        "binding_message": "deploy web",
        **assertion(srv, agent, f"{srv.url}/bc-authorize"),
    }
    body.update(params)
    body = {k: v for k, v in body.items() if v is not None}
    with srv.client() as http:
        return http.post("/bc-authorize", data=body)


def error_of(r: httpx.Response) -> str:
    assert r.status_code in (400, 401), (r.status_code, r.text)
    return str(r.json()["error"])


def grant_of(srv: InProcessServer, agent: Agent) -> dict[str, Any]:
    with srv.admin() as http:
        r = http.get("/api/grants", params={"requester": agent.email})
    assert r.status_code == 200, r.text
    (grant,) = r.json()["data"]
    return grant  # type: ignore[no-any-return]


def consume(srv: InProcessServer, grant_id: str, token: str) -> httpx.Response:
    with srv.client() as http:
        return http.post(f"/api/grants/{grant_id}/consume", headers={"Authorization": f"Bearer {token}"})


def introspect(srv: InProcessServer, token: str) -> dict[str, Any]:
    basic = base64.b64encode(f"{RESOURCE}:{MCP_SECRET}".encode()).decode()
    with srv.client() as http:
        r = http.post("/introspect", data={"token": token}, headers={"Authorization": f"Basic {basic}"})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    directory = tmp_path_factory.mktemp("mcpciba")
    prepare(directory)
    server = InProcessServer(directory, extra=mcp_config()).start()
    yield server
    server.stop()


@pytest.fixture
def agent(srv: InProcessServer, tmp_path: Path) -> Agent:
    return enroll(srv, tmp_path)  # type: ignore[arg-type]


def test_an_agent_gets_a_resource_token_for_a_gated_scope_and_its_once_grant_works_once(srv, agent):
    r = bc(srv, agent)
    assert r.status_code == 200, r.text
    auth_req_id = r.json()["auth_req_id"]
    grant = grant_of(srv, agent)
    # the grant a person's consent would make, for the agent
    assert grant["status"] == "pending" and grant["requester"] == agent.email
    assert grant["request"]["grant_type"] == "once"
    request = grant["request"]
    assert request["audience"] == RESOURCE and request["permissions"] == ["tools:deploy"]
    assert request["binding_message"] == "deploy web"
    (detail,) = request["authorization_details"]
    assert detail == {
        "type": "mcp_tool_call",
        "locations": [RESOURCE],
        "actions": ["tools/call"],
        "scope": "tools:deploy",
        "client_id": agent.agent_id,
    }
    assert error_of(poll(srv, agent, auth_req_id)) == "authorization_pending"
    decide(srv, grant["id"])
    srv.clock.advance(10)
    answer = poll(srv, agent, auth_req_id)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    token = body["access_token"]
    assert jwt.get_unverified_header(token)["typ"] == "at+jwt"
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == RESOURCE and claims["scope"] == "tools:deploy" == body["scope"]
    assert claims["grant_id"] == grant["id"] == body["grant_id"]
    assert claims["sub"] == agent.email and claims["act"] == "agent"
    assert claims["agent_id"] == agent.agent_id == claims["client_id"]
    assert "person_id" not in claims and "cnf" not in claims and "command" not in claims
    assert claims["authorization_details"] == [detail]
    assert body["token_type"] == "Bearer" and 0 < body["expires_in"] <= 600
    assert body["authorization_details"][0]["grant_id"] == grant["id"]
    assert jwt.decode(body["id_token"], options={"verify_signature": False})["aud"] == agent.email
    # grantd's own API never takes it; the resource learns about it at /introspect
    with srv.client() as http:
        assert http.get("/api/grants", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    seen = introspect(srv, token)
    assert seen["active"] is True and seen["act"] == "agent" and seen["grant_id"] == grant["id"]
    assert seen["authorization_details"] == [detail]
    # the resource consumes the once grant with the token: once
    first = consume(srv, grant["id"], token)
    assert first.status_code == 200 and first.json()["status"] == "consumed", first.text
    second = consume(srv, grant["id"], token)
    assert second.json().get("error"), second.text
    assert introspect(srv, token) == {"active": False}
    # and the request is redeemed: single use
    assert error_of(poll(srv, agent, auth_req_id)) == "invalid_grant"


def test_an_mcp_tool_call_detail_asks_for_the_scope_and_names_the_tool(srv, agent):
    detail = {"type": "mcp_tool_call", "locations": [RESOURCE], "scope": "tools:deploy", "tool": "deploy"}
    r = bc(srv, agent, scope="openid tools:read", authorization_details=json.dumps([detail]))
    assert r.status_code == 200, r.text
    grant = grant_of(srv, agent)
    assert grant["request"]["permissions"] == ["tools:read", "tools:deploy"]
    (stored,) = grant["request"]["authorization_details"]
    assert stored["tool"] == "deploy" and stored["actions"] == ["tools/call"]
    decide(srv, grant["id"])
    answer = poll(srv, agent, r.json()["auth_req_id"])
    assert answer.status_code == 200, answer.text
    assert answer.json()["scope"] == "tools:read tools:deploy"


def test_a_denied_request_gets_no_token(srv, agent):
    r = bc(srv, agent)
    assert r.status_code == 200, r.text
    decide(srv, grant_of(srv, agent)["id"], "deny")
    assert error_of(poll(srv, agent, r.json()["auth_req_id"])) == "access_denied"


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"resource": "https://unknown.example.com/mcp"}, "invalid_target"),
        ({"resource": "not a uri"}, "invalid_target"),
        ({"resource": ""}, "invalid_target"),
        ({"resource": None}, "invalid_scope"),  # a gated scope without a resource
        ({"scope": "openid tools:read"}, "invalid_scope"),  # nothing to grant
        ({"scope": "openid other:read"}, "invalid_scope"),  # another resource's scope
        ({"scope": "tools:deploy"}, "invalid_scope"),  # CIBA needs openid
        ({"login_hint": None}, "invalid_request"),
        ({"binding_message": "x" * 65}, "invalid_binding_message"),
        ({"authorization_details": "[{"}, "invalid_authorization_details"),
        ({"authorization_details": "{}"}, "invalid_authorization_details"),
        (
            {"authorization_details": json.dumps([{"type": "grantd_command", "locations": ["h"]}])},
            "invalid_authorization_details",
        ),
        (
            {"authorization_details": json.dumps([{"type": "mcp_tool_call", "scope": "tools:read"}])},
            "invalid_authorization_details",
        ),
        (
            {
                "authorization_details": json.dumps(
                    [{"type": "mcp_tool_call", "scope": "tools:deploy", "locations": [OTHER_RESOURCE]}]
                )
            },
            "invalid_authorization_details",
        ),
        (
            {
                "authorization_details": json.dumps(
                    [{"type": "mcp_tool_call", "scope": "tools:deploy", "x": 1}]
                )
            },
            "invalid_authorization_details",
        ),
        (
            {
                "authorization_details": json.dumps(
                    [{"type": "mcp_tool_call", "scope": "tools:deploy", "tool": 7}]
                )
            },
            "invalid_authorization_details",
        ),
    ],
)
def test_bad_requests_for_a_resource_are_refused_with_the_right_code(srv, agent, params, error):
    assert error_of(bc(srv, agent, **params)) == error
    with srv.admin() as http:
        assert http.get("/api/grants", params={"requester": agent.email}).json()["data"] == []


def test_one_resource_per_request(srv, agent):
    body = {
        "scope": "openid tools:deploy",
        "login_hint": "policy",
        **assertion(srv, agent, f"{srv.url}/bc-authorize"),
    }
    form = (
        urlencode(body)
        + "&"
        + urlencode({"resource": RESOURCE})
        + "&"
        + urlencode({"resource": OTHER_RESOURCE})
    )
    with srv.client() as http:
        r = http.post(
            "/bc-authorize", content=form, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
    assert error_of(r) == "invalid_request" and "resource" in r.json()["error_description"]


def test_an_mcp_tool_call_without_a_resource_is_invalid_target(srv, agent):
    detail = {"type": "mcp_tool_call", "scope": "tools:deploy"}
    r = bc(srv, agent, resource=None, scope="openid", authorization_details=json.dumps([detail]))
    assert error_of(r) == "invalid_target"


def test_an_agent_resource_token_is_good_only_for_its_own_grant_and_agent(srv, agent, tmp_path):
    r = bc(srv, agent)
    grant = grant_of(srv, agent)
    decide(srv, grant["id"])
    token = poll(srv, agent, r.json()["auth_req_id"]).json()["access_token"]
    other = enroll(srv, tmp_path / "other")
    r2 = bc(srv, other)
    other_grant = grant_of(srv, other)
    decide(srv, other_grant["id"])
    # another agent's grant, named by this agent's token: refused, and that grant stays approved
    assert consume(srv, other_grant["id"], token).status_code == 403  # the token names its own grant (D2)
    own = consume(srv, other_grant["id"], poll(srv, other, r2.json()["auth_req_id"]).json()["access_token"])
    assert own.json()["status"] == "consumed"  # its own agent's token consumes it
    # disabling the agent ends its token at /introspect
    with srv.admin() as http:
        assert http.put(f"/api/admin/agents/{agent.agent_id}", json={"status": "disabled"}).status_code == 200
    assert introspect(srv, token) == {"active": False}


_values = st.one_of(
    st.none(),
    st.text(max_size=30),
    st.integers(),
    st.sampled_from(
        [
            RESOURCE,
            RESOURCE.upper(),
            RESOURCE + "/",
            OTHER_RESOURCE,
            "openid tools:deploy",
            "openid tools:read",
            "tools:deploy",
            "mcp_tool_call",
            "grantd_command",
            ["tools/call"],
            [RESOURCE],
            "deploy",
        ]
    ),
)
_detail = st.dictionaries(st.sampled_from(sorted(DETAIL_MEMBERS | {"command", "x"})), _values, max_size=6)
_details = st.one_of(
    st.lists(_detail, max_size=3).map(json.dumps),
    st.just('[{"type":"mcp_tool_call","scope":"tools:deploy"}]'),
    st.text(max_size=20),
    st.none(),
)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    resource=st.one_of(st.none(), st.sampled_from([RESOURCE, OTHER_RESOURCE, "https://x/", "", "\x00"])),
    scope=st.one_of(st.none(), st.sampled_from(["openid tools:deploy", "openid", "openid tools:read", "x"])),
    details=_details,
)
def test_any_resource_request_of_an_authenticated_agent_is_answered_below_500(
    srv, agent, resource, scope, details
):
    r = bc(srv, agent, resource=resource, scope=scope, authorization_details=details)
    assert r.status_code < 500, r.text
    if r.status_code != 200:
        assert r.json()["error"] in {
            "invalid_request",
            "invalid_scope",
            "invalid_target",
            "invalid_authorization_details",
        }, r.text


def test_a_grant_scope_naming_a_policy_routes_the_agents_request_to_it(tmp_path: Path) -> None:
    """D13 routes the agent's grant as a person's: the scope's named policy reviews it (its match
    would not pick it), so the management token may not decide and a member of its group may."""
    from oauth_support import Person

    from server.test_mcp_grants import POLICY

    prepare(tmp_path)
    config = mcp_config(POLICY).replace(
        '"tools:deploy" = { grant_type = "once" }',
        '"tools:deploy" = { grant_type = "once", policy = "prod-deploy" }',
    )
    server = InProcessServer(tmp_path, extra=config).start()
    try:
        deployer = Person(server, "deployer@example.com")
        agent = enroll(server, tmp_path / "agent")
        r = bc(server, agent)
        assert r.status_code == 200, r.text
        grant = grant_of(server, agent)
        with server.admin() as http:
            refused = http.post(f"/api/grants/{grant['id']}/approve", json={})
            assert refused.status_code in (403, 404), refused.text
            assert http.get(f"/api/grants/{grant['id']}").json()["review"]["policy_ids"] == ["prod-deploy"]
        assert error_of(poll(server, agent, r.json()["auth_req_id"])) == "authorization_pending"
        with deployer.http() as http:
            ok = http.post(f"/api/grants/{grant['id']}/approve", json={}, headers={"Origin": server.url})
        assert ok.status_code == 200, ok.text
        server.clock.advance(10)
        answer = poll(server, agent, r.json()["auth_req_id"])
        assert answer.status_code == 200, answer.text
        assert (
            jwt.decode(answer.json()["id_token"], options={"verify_signature": False})["sub"]
            == deployer.email
        )
    finally:
        server.stop()


def test_a_dpop_proof_authenticates_but_does_not_bind_a_resource_grant(srv, agent):
    """Resource tokens are bearer tokens (the MCP SDK sends Bearer, the resource consumes with the
    token): a bound grant would give a token the resource could not consume."""
    import uuid

    from grantd.dpop import make_proof

    proof = make_proof(
        agent.private_key(),
        method="POST",
        url=f"{srv.url}/bc-authorize",
        iat=srv.clock.now_s(),
        jti=str(uuid.uuid4()),
    )
    body = {
        "scope": "openid tools:deploy",
        "resource": RESOURCE,
        "login_hint": "policy",
        **assertion(srv, agent, f"{srv.url}/bc-authorize"),
    }
    with srv.client() as http:
        r = http.post("/bc-authorize", data=body, headers={"DPoP": proof})
    assert r.status_code == 200, r.text
    grant = grant_of(srv, agent)
    assert "cnf" not in grant["request"]
    decide(srv, grant["id"])
    answer = poll(srv, agent, r.json()["auth_req_id"]).json()
    assert answer["token_type"] == "Bearer"
    assert "cnf" not in jwt.decode(answer["access_token"], options={"verify_signature": False})
    assert consume(srv, grant["id"], answer["access_token"]).json()["status"] == "consumed"


def test_an_agent_gets_its_own_resource_token_by_client_credentials_for_the_open_scopes(srv, agent):
    """D17: `resource` at /token names a configured resource (else invalid_target), client credentials
    included: the agent's own at+jwt for that resource holds the scopes no grant stands behind; a
    grant-gated one is invalid_scope (it comes through CIBA, as above)."""

    def token(**params: Any) -> httpx.Response:
        body = {"grant_type": "client_credentials", **assertion(srv, agent, f"{srv.url}/token"), **params}
        with srv.client() as http:
            return http.post("/token", data=body)

    r = token(resource=RESOURCE)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["scope"] == "tools:read" and answer["token_type"] == "Bearer"
    assert jwt.get_unverified_header(answer["access_token"])["typ"] == "at+jwt"
    claims = jwt.decode(answer["access_token"], options={"verify_signature": False})
    assert (claims["aud"], claims["sub"], claims["act"]) == (RESOURCE, agent.email, "agent")
    assert "grant_id" not in claims
    found = introspect(srv, answer["access_token"])
    assert found["active"] is True and found["scope"] == "tools:read", found
    # grantd's own /api never takes it
    with srv.client() as http:
        assert (
            http.get("/api/me", headers={"Authorization": f"Bearer {answer['access_token']}"}).status_code
            == 401
        )
    assert error_of(token(resource=RESOURCE, scope="tools:deploy")) == "invalid_scope"
    assert error_of(token(resource="https://unknown.example.com/mcp")) == "invalid_target"
    other = token(resource=OTHER_RESOURCE)
    assert other.status_code == 200 and other.json()["scope"] == "other:read", other.text
    assert introspect(srv, other.json()["access_token"]) == {"active": False}  # not this resource's
    # bound by a DPoP proof (D16): introspection says so (RFC 9449 §6.2), so a resource that only
    # introspects still demands the proof
    from grantd.dpop import thumbprint_of_ssh_key

    from server.test_dpop_api import proof

    with srv.client() as http:
        bound = http.post(
            "/token",
            data={
                "grant_type": "client_credentials",
                "resource": RESOURCE,
                **assertion(srv, agent, f"{srv.url}/token"),
            },
            headers={"DPoP": proof(srv, agent, "POST", "/token")},
        )
    assert bound.status_code == 200 and bound.json()["token_type"] == "DPoP", bound.text
    seen = introspect(srv, bound.json()["access_token"])
    assert seen["active"] is True and seen["token_type"] == "DPoP", seen
    assert seen["cnf"] == {"jkt": thumbprint_of_ssh_key(agent.public_key)}, seen
    assert introspect(srv, answer["access_token"])["token_type"] == "Bearer"
    # without a resource: the agent's identity token, as before
    plain = token()
    assert plain.status_code == 200 and "scope" not in plain.json(), plain.text
