"""Token exchange for an MCP resource (D16 with D17): the `resource` (or `audience`) must name a
configured resource, else `invalid_target`; the token is an RFC 9068 `at+jwt` with `aud` = the
resource that keeps `act` and `delegation_id`, the resource's introspection knows it (with its
`act`) while the delegation is active, and `grantd.resource_server` accepts it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from inproc import InProcessServer
from mcp_support import MCP_SECRET, OTHER_RESOURCE, RESOURCE, mcp_config, prepare
from people_support import create_person

from conftest import enroll
from server.test_token_exchange_flow import delegate, exchange


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    directory = tmp_path_factory.mktemp("exchange-resource")
    prepare(directory)
    server = InProcessServer(directory, extra=mcp_config()).start()
    yield server
    server.stop()


@pytest.fixture
def world(srv: InProcessServer, tmp_path: Path) -> dict[str, Any]:
    person = create_person(srv)
    agent = enroll(srv, tmp_path / "a", owner=person["email"], approver=person["email"])  # type: ignore[arg-type]
    return {"person": person, "agent": agent}


def introspect(srv: InProcessServer, token: str) -> dict[str, Any]:
    r = httpx.post(f"{srv.url}/introspect", data={"token": token}, auth=(RESOURCE, MCP_SECRET), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_an_exchanged_token_for_a_resource_is_its_at_jwt_and_keeps_act(srv, world):
    person, agent = world["person"], world["agent"]
    d = delegate(srv, person, agent, duration=3600)
    r = exchange(srv, agent, d["delegation_token"], resource=RESOURCE, scope="tools:read")
    assert r.status_code == 200, r.text
    answer = r.json()
    token = answer["access_token"]
    assert jwt.get_unverified_header(token)["typ"] == "at+jwt" and answer["scope"] == "tools:read"
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == RESOURCE and claims["sub"] == person["email"]
    assert claims["act"] == {"sub": agent.email} and claims["delegation_id"] == d["id"]
    assert claims["client_id"] == agent.email and claims["scope"] == "tools:read"
    # the resource's introspection knows it, act included (D17)
    found = introspect(srv, token)
    assert found["active"] is True and found["act"] == {"sub": agent.email}, found
    # grantd.resource_server, as an MCP server runs it, accepts it
    from grantd.resource_server import ResourceServer

    server = ResourceServer(srv.url, RESOURCE, scopes=["tools:read"])
    verified = asyncio.run(server.verify(token))
    assert verified["act"] == {"sub": agent.email}
    # grantd's own /api never takes a resource's token
    assert (
        httpx.get(f"{srv.url}/api/me", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code
        == 401
    )
    # revoking the delegation ends it at once
    with srv.admin() as http:
        assert http.delete(f"/api/delegations/{d['id']}").status_code in (200, 204)
    assert introspect(srv, token) == {"active": False}


def test_the_target_of_an_exchange_must_be_a_configured_resource_or_grantd(srv, world):
    person, agent = world["person"], world["agent"]
    d = delegate(srv, person, agent, duration=3600)
    for target in (
        {"resource": "https://unconfigured.example.com/x"},
        {"audience": "https://elsewhere.example"},
    ):
        r = exchange(srv, agent, d["delegation_token"], **target)
        assert r.status_code == 400 and r.json()["error"] == "invalid_target", (target, r.text)
    # grantd itself is a fine audience: the plain exchanged token
    plain = exchange(srv, agent, d["delegation_token"], audience=srv.url)
    assert plain.status_code == 200, plain.text
    assert jwt.get_unverified_header(plain.json()["access_token"])["typ"] == "grantd-act+jwt"
    # a grant-gated scope is a person's grant, not a delegation; an unknown scope is no scope of it
    for scope in ("tools:deploy", "other:read"):
        r = exchange(srv, agent, d["delegation_token"], resource=RESOURCE, scope=scope)
        assert r.status_code == 400 and r.json()["error"] == "invalid_scope", (scope, r.text)
    # by default: the resource's scopes without a grant behind them; another resource's token is not this one's
    r = exchange(srv, agent, d["delegation_token"], resource=OTHER_RESOURCE)
    assert r.status_code == 200 and r.json()["scope"] == "other:read", r.text
    assert introspect(srv, r.json()["access_token"]) == {"active": False}
