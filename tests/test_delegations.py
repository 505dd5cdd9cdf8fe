"""Delegations (D7) over HTTP, and who may decide what (including people, checked on a real store)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from grantd.auth import Principal
from grantd.config import load
from grantd.context import open_services
from grantd.idp import grants
from grantd.plugin_manager import build_plugin_manager

from conftest import Agent, Server, enroll, problem, sign_in, signed_in, toml_config
from grants_support import admin_post, request_grant


def delegate(server: Server, agent: Agent, expect: int = 201, **fields: Any) -> dict[str, Any]:
    body = {"delegate": agent.email, "audience": "escapes", "approval": "always", **fields}
    r = admin_post(server, "/api/delegations", body)
    assert r.status_code == expect, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_covered_request_is_approved_at_once_by_the_delegator(server: Server, agent: Agent) -> None:
    d = delegate(server, agent)
    assert d["delegator"] == "admin@example.com" and d["status"] == "active" and d["scopes"] == []
    grant = request_grant(server, agent)
    assert grant["status"] == "approved" and grant["decided_by"] == "admin@example.com"
    assert grant["approved_automatically"] is True and grant["auto_approval_kind"] == "delegation"
    assert grant["delegation_id"] == d["id"]
    with server.client(agent.token) as http:
        token = http.post(f"/api/grants/{grant['id']}/token").json()["authz_jwt"]
        assert http.post(f"/api/grants/{grant['id']}/consume", headers={"Authorization": f"Bearer {token}"}).json()[
            "status"] == "consumed"
    # deleting it ends the automatic approvals
    r = admin_post(server, "/api/delegations", None)
    assert r.status_code == 400
    with server.admin() as http:
        deleted = http.delete(f"/api/delegations/{d['id']}")
        assert deleted.status_code == 200 and deleted.json()["status"] == "revoked"
        assert http.delete(f"/api/delegations/{d['id']}").json()["status"] == "revoked"  # idempotent
    assert request_grant(server, agent, reason="after")["status"] == "pending"


def test_scopes_audience_and_approval_limit_what_is_covered(server: Server, agent: Agent) -> None:
    delegate(server, agent, scopes=["command:systemctl", "db:read"], approval="timed", audience="escapes")
    assert request_grant(server, agent)["status"] == "approved"  # systemctl ...
    assert request_grant(server, agent, command=["rm", "-rf", "/srv"])["status"] == "pending"
    assert request_grant(server, agent, command=None, permissions=["db:read"])["status"] == "approved"
    assert request_grant(server, agent, command=None, permissions=["db:read", "db:drop"])["status"] == "pending"
    assert request_grant(server, agent, audience="grantd")["status"] == "pending"
    assert request_grant(server, agent, grant_type="always", command=["systemctl", "reload", "x"])["status"] == "pending"
    timed = request_grant(server, agent, grant_type="timed", duration=60, command=["systemctl", "status"])
    assert timed["status"] == "approved" and timed["expires_at"] - timed["decided_at"] == 60_000


def test_an_expired_delegation_covers_nothing(server: Server, agent: Agent) -> None:
    d = delegate(server, agent, duration=1)
    time.sleep(1.2)
    assert request_grant(server, agent)["status"] == "pending"
    with server.admin() as http:
        listed = {x["id"]: x for x in http.get("/api/delegations", params={"limit": 100}).json()["data"]}
    assert listed[d["id"]]["status"] == "expired"


def test_iso_expiry_from_the_peer_cli_and_the_grant_type_alias(server: Server, agent: Agent) -> None:
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    d = delegate(server, agent, approval=None, grant_type="once", expires_at=at)
    assert d["approval"] == "once" and abs(d["expires_at"] - (time.time() + 3600) * 1000) < 5_000


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"delegate": "not-an-email"}, "delegate"), ({"audience": ""}, "audience"), ({"approval": "sometimes"}, "approval"),
     ({"scopes": "all"}, "scopes"), ({"duration": -1}, "duration"), ({"expires_at": "yesterday"}, "expires_at"),
     ({"expires_at": 1000}, "expires_at")],
)
def test_invalid_delegations_are_400(server: Server, agent: Agent, fields: dict[str, Any], field: str) -> None:
    body = {"delegate": agent.email, "audience": "escapes", "approval": "always", **fields}
    r = admin_post(server, "/api/delegations", body)
    assert r.status_code == 400 and problem(r)["field"] == field


def test_agents_cannot_delegate_and_nobody_lends_rights_they_lack(server: Server, agent: Agent, tmp_path: Path) -> None:
    with server.client(agent.token) as http:
        r = http.post("/api/delegations", json={"delegate": agent.email, "audience": "escapes"})
    assert r.status_code == 403
    owned = enroll(server, tmp_path / "owned", owner="alice@example.com", approver="alice@example.com")
    r = admin_post(server, "/api/delegations", {"delegator": "mallory@example.com", "delegate": owned.email,
                                                "audience": "escapes"})
    assert r.status_code == 403 and "may not decide" in problem(r)["detail"]
    d = admin_post(server, "/api/delegations", {"delegator": "alice@example.com", "delegate": owned.email,
                                                "audience": "*", "approval": "once"}).json()
    sign_in(server, owned)
    assert request_grant(server, owned)["decided_by"] == "alice@example.com"
    # alice stops being the agent's owner/approver: her delegation stops working
    with server.admin() as http:
        assert http.put(f"/api/admin/agents/{owned.agent_id}", json={"owner": "bob@example.com",
                                                                     "approver": "bob@example.com"}).status_code == 200
        check = http.post(f"/api/delegations/{d['id']}/validate", json={"delegate": owned.email, "audience": "escapes"})
    assert check.json()["valid"] is False
    assert request_grant(server, owned, reason="later")["status"] == "pending"


def test_list_validate_and_delete_rules(server: Server, agent: Agent, tmp_path: Path) -> None:
    d = delegate(server, agent, scopes=["db:read"])
    with server.client(agent.token) as http:  # the delegate sees it, cannot delete it
        assert d["id"] in [x["id"] for x in http.get("/api/delegations").json()["data"]]
        assert http.delete(f"/api/delegations/{d['id']}").status_code == 403
    other = signed_in(server, tmp_path / "other")
    with server.client(other.token) as http:
        assert http.get("/api/delegations").json()["data"] == []
        assert http.delete(f"/api/delegations/{d['id']}").status_code == 404
    with server.client() as http:
        ok = http.post(f"/api/delegations/{d['id']}/validate", json={"delegate": agent.email, "audience": "escapes",
                                                                     "scope": "db:read"}).json()
        assert ok["valid"] is True and ok["delegation"]["id"] == d["id"]
        for body, error in (({"delegate": other.email}, "delegate"), ({"audience": "grantd"}, "audience"),
                            ({"scope": "db:write"}, "scope")):
            answer = http.post(f"/api/delegations/{d['id']}/validate", json=body).json()
            assert answer["valid"] is False and error in answer["error"]
        assert http.post("/api/delegations/missing/validate", json={}).status_code == 404
        assert http.get("/api/delegations").status_code == 401


# -- people as deciders, on a real store (human sign-in is a later capability) -----------------------


def test_owner_and_approver_may_decide_others_may_not(tmp_path: Path) -> None:
    (tmp_path / "management-token").write_text("x" * 32)
    (tmp_path / "grantd.toml").write_text(toml_config(8000))
    config = load(str(tmp_path / "grantd.toml"))

    async def check() -> None:
        services = await open_services(config, build_plugin_manager(config))
        now = int(time.time() * 1000)
        await services.store.create_agent({
            "agent_id": "agt_1", "email": "agent+x@example.com", "name": "x", "public_key": "k", "key_id": "k",
            "owner": "owner@example.com", "approver": "approver@example.com", "status": "active",
            "created_at": now, "updated_at": now})
        cases = {
            Principal("user", "owner@example.com"): True,
            Principal("user", "approver@example.com"): True,
            Principal("user", "root@example.com"): True,  # listed in admin.emails
            Principal("user", "stranger@example.com"): False,
            Principal("agent", "agent+x@example.com", "agt_1"): False,  # never its own approver
            Principal("management", "admin@example.com"): True,
        }
        for principal, allowed in cases.items():
            assert await grants.may_decide(services, principal, "agent+x@example.com") is allowed, principal
        services.store.close()

    asyncio.run(check())
