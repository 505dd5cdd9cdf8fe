"""The agent's side of issue 26 with real parts: an enrolled agent (Ed25519 key, private_key_jwt), no
browser, asks grantd through CIBA for the grant-gated scope of a real MCP server (the official SDK's
``MCPServer`` on uvicorn, protected by ``grantd.resource_server``); an approver approves; the agent
polls /token, calls the gated tool with the SDK's ``ClientSession`` once (it works), and a second
call is refused: the MCP server consumed the ``once`` grant at grantd."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from inproc import InProcessServer
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import Agent, enroll
from server.test_ciba_flow import assertion, decide, poll
from server.test_mcp_e2e import _leaves, world  # noqa: F401 - the fixture: grantd + the MCP server


def ask(srv: InProcessServer, agent: Agent, resource: str) -> str:
    body = {
        "scope": "openid tools:read tools:deploy",
        "resource": resource,
        "login_hint": "policy",
        "binding_message": "deploy web",
        "authorization_details": (
            f'[{{"type": "mcp_tool_call", "locations": ["{resource}"], "scope": "tools:deploy", "tool": "deploy"}}]'
        ),
        **assertion(srv, agent, f"{srv.url}/bc-authorize"),
    }
    with srv.client() as http:
        r = http.post("/bc-authorize", data=body)
    assert r.status_code == 200, r.text
    return str(r.json()["auth_req_id"])


async def deploy(resource: str, token: str, service: str) -> str:
    import httpx2

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with streamable_http_client(resource, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("deploy", {"service": service})
                return str(result.content[0].text)  # type: ignore[union-attr]


def test_an_agent_without_a_browser_gets_the_grant_through_ciba_and_uses_it_once(
    world: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    srv, app = world["srv"], world["app"]
    agent = enroll(srv, tmp_path / "agent")
    auth_req_id = ask(srv, agent, app.resource)
    pending = poll(srv, agent, auth_req_id)
    assert pending.json()["error"] == "authorization_pending"
    with srv.admin() as http:
        (grant,) = http.get("/api/grants", params={"requester": agent.email}).json()["data"]
    assert grant["request"]["authorization_details"][0]["tool"] == "deploy"
    decide(srv, grant["id"])
    srv.clock.advance(6)  # a poll sooner than the interval is slow_down, decided or not (D16)
    answer = poll(srv, agent, auth_req_id)
    assert answer.status_code == 200, answer.text
    token = answer.json()["access_token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == app.resource and claims["act"] == "agent" and claims["sub"] == agent.email

    # a call the SDK refuses (no MCP session) uses up nothing: the grant is used as the tool runs
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "deploy", "arguments": {}}}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    sessionless = httpx.post(app.resource, json=call, headers=headers, timeout=10)
    assert sessionless.status_code == 400, sessionless.text
    with srv.admin() as http:
        assert http.get(f"/api/grants/{grant['id']}").json()["status"] == "approved"
    assert asyncio.run(deploy(app.resource, token, "web")) == "deployed web"
    assert app.deployed == ["web"]
    with srv.admin() as http:
        assert http.get(f"/api/grants/{grant['id']}").json()["status"] == "consumed"

    # the second call with the same token: the MCP server refuses it (403 insufficient_scope, so the
    # agent knows to ask for a new grant), and the tool does not run
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the SDK's transport fails in a task group
        asyncio.run(deploy(app.resource, token, "db"))
    leaves = list(_leaves(raised.value))
    assert any(isinstance(e, MCPError) and "error response" in str(e) for e in leaves), leaves
    assert app.deployed == ["web"]
    refused = httpx.post(app.resource, json=call, headers=headers, timeout=10)
    assert refused.status_code == 403, refused.text
    challenge = refused.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and "tools:deploy" in challenge
    assert app.deployed == ["web"]
