"""Delegations (D7) over HTTP, and who may decide what (grantd.core.policy)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from inproc import InProcessServer

from grantd.core import policy, principals

from conftest import Agent, Server, enroll, problem, sign_in, signed_in
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
    # D13: the delegation counts as one vote, in approvals and in the requirement it fills
    assert [(a["sub"], a["via"]) for a in grant["approvals"]] == [("admin@example.com", "delegation")]
    assert grant["review"]["requirements"][0]["approvals"] == ["admin@example.com"]
    with server.client(agent.token) as http:
        token = http.post(f"/api/grants/{grant['id']}/token").json()["authz_jwt"]
        assert (
            http.post(
                f"/api/grants/{grant['id']}/consume", headers={"Authorization": f"Bearer {token}"}
            ).json()["status"]
            == "consumed"
        )
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
    assert (
        request_grant(server, agent, command=None, permissions=["db:read", "db:drop"])["status"] == "pending"
    )
    assert request_grant(server, agent, audience="grantd")["status"] == "pending"
    assert (
        request_grant(server, agent, grant_type="always", command=["systemctl", "reload", "x"])["status"]
        == "pending"
    )
    timed = request_grant(server, agent, grant_type="timed", duration=60, command=["systemctl", "status"])
    assert timed["status"] == "approved" and timed["expires_at"] - timed["decided_at"] == 60_000


def test_an_expired_delegation_covers_nothing(tmp_path: Path) -> None:
    srv = InProcessServer(tmp_path / "srv").start()  # its clock moves when told to
    try:
        agent = signed_in(srv, tmp_path / "keys")
        d = delegate(srv, agent, duration=60)
        assert request_grant(srv, agent)["status"] == "approved"
        srv.clock.advance(60)
        assert request_grant(srv, agent)["status"] == "pending"
        with srv.admin() as http:
            listed = {x["id"]: x for x in http.get("/api/delegations", params={"limit": 100}).json()["data"]}
        assert listed[d["id"]]["status"] == "expired"
    finally:
        srv.stop()


def test_iso_expiry_from_the_peer_cli_and_the_grant_type_alias(server: Server, agent: Agent) -> None:
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    d = delegate(server, agent, approval=None, grant_type="once", expires_at=at)
    assert d["approval"] == "once" and abs(d["expires_at"] - (time.time() + 3600) * 1000) < 5_000


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"delegate": "not-an-email"}, "delegate"),
        ({"audience": ""}, "audience"),
        ({"approval": "sometimes"}, "approval"),
        ({"scopes": "all"}, "scopes"),
        ({"duration": -1}, "duration"),
        ({"expires_at": "yesterday"}, "expires_at"),
        ({"expires_at": 1000}, "expires_at"),
    ],
)
def test_invalid_delegations_are_400(
    server: Server, agent: Agent, fields: dict[str, Any], field: str
) -> None:
    body = {"delegate": agent.email, "audience": "escapes", "approval": "always", **fields}
    r = admin_post(server, "/api/delegations", body)
    assert r.status_code == 400 and problem(r)["field"] == field


def test_agents_cannot_delegate_and_nobody_lends_rights_they_lack(
    server: Server, agent: Agent, tmp_path: Path
) -> None:
    with server.client(agent.token) as http:
        r = http.post("/api/delegations", json={"delegate": agent.email, "audience": "escapes"})
    assert r.status_code == 403
    owned = enroll(server, tmp_path / "owned", owner="alice@example.com", approver="alice@example.com")
    r = admin_post(
        server,
        "/api/delegations",
        {"delegator": "mallory@example.com", "delegate": owned.email, "audience": "escapes"},
    )
    assert r.status_code == 403 and "may not decide" in problem(r)["detail"]
    d = admin_post(
        server,
        "/api/delegations",
        {"delegator": "alice@example.com", "delegate": owned.email, "audience": "*", "approval": "once"},
    ).json()
    sign_in(server, owned)
    assert request_grant(server, owned)["decided_by"] == "alice@example.com"
    # alice stops being the agent's owner/approver: her delegation stops working
    with server.admin() as http:
        assert (
            http.put(
                f"/api/admin/agents/{owned.agent_id}",
                json={"owner": "bob@example.com", "approver": "bob@example.com"},
            ).status_code
            == 200
        )
        check = http.post(
            f"/api/delegations/{d['id']}/validate", json={"delegate": owned.email, "audience": "escapes"}
        )
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
    with server.client() as http:  # validate tells only a party to the delegation (or an admin) about it
        assert http.post(f"/api/delegations/{d['id']}/validate", json={}).status_code == 401
    with server.client(other.token) as http:
        assert http.post(f"/api/delegations/{d['id']}/validate", json={}).status_code == 404
    with server.client(agent.token) as http:
        ok = http.post(
            f"/api/delegations/{d['id']}/validate",
            json={"delegate": agent.email, "audience": "escapes", "scope": "db:read"},
        ).json()
        assert ok["valid"] is True and ok["delegation"]["id"] == d["id"]
        asked = {"delegate": agent.email, "audience": "escapes"}
        for body, error in (
            ({**asked, "delegate": other.email}, "delegate"),
            ({**asked, "audience": "grantd"}, "audience"),
            ({**asked, "scope": "db:write"}, "scope"),
        ):
            answer = http.post(f"/api/delegations/{d['id']}/validate", json=body).json()
            assert answer["valid"] is False and error in answer["error"]
        # D1: the delegate may be named by its agent_id too
        by_id = http.post(f"/api/delegations/{d['id']}/validate", json={**asked, "delegate": agent.agent_id})
        assert by_id.json()["valid"] is True, by_id.text
        # D7/D2: the body and both names are required (a missing one is no "anything")
        for body in ({}, {"delegate": agent.email}, {"audience": "escapes"}):
            missing = http.post(f"/api/delegations/{d['id']}/validate", json=body)
            assert missing.status_code == 400, (body, missing.text)
        assert http.post(f"/api/delegations/{d['id']}/validate").status_code == 400
        assert http.post("/api/delegations/missing/validate", json={}).status_code == 404
    with server.client() as http:
        assert http.get("/api/delegations").status_code == 401


# -- people as deciders, on a real store (human sign-in is a later capability) -----------------------


def test_owner_and_approver_may_decide_others_may_not() -> None:
    agent = {
        "agent_id": "agt_1",
        "email": "agent+x@example.com",
        "owner": "owner@example.com",
        "approver": "approver@example.com",
        "owner_id": "usr_owner",
        "approver_id": "usr_approver",
    }
    admins = frozenset({"root@example.com", "admin@example.com"})
    cases = {
        principals.Principal(principals.Kind.PERSON, "usr_owner", "owner@example.com"): True,
        principals.Principal(principals.Kind.PERSON, "usr_approver", "approver@example.com"): True,
        # D11 (issue 19): decided by the stable id; a later person with the owner's e-mail is nobody here
        principals.Principal(principals.Kind.PERSON, "usr_recreated", "owner@example.com"): False,
        principals.person("owner@example.com", admins): False,  # known by e-mail only: not the bound owner
        principals.person("root@example.com", admins): True,  # listed in admin.emails
        principals.person("stranger@example.com", admins): False,
        principals.agent("agt_1", "agent+x@example.com"): False,  # never its own approver
        principals.agent("agt_2", "owner@example.com"): False,  # an agent never decides, whatever its e-mail
        principals.management("admin@example.com"): True,
    }
    for principal, allowed in cases.items():
        assert policy.may_decide(principal, agent, admins) is allowed, principal


def test_an_agent_is_named_by_its_agent_id_as_well_as_its_email(server: Server, agent: Agent) -> None:
    """D1: every route that takes an agent identifier accepts the agent_id or the e-mail: a
    delegation's delegate, a grant's requester (the management token asks for someone), the
    requester filter of the grant list; an unknown agent_id is 404."""
    d = delegate(server, agent, delegate=agent.agent_id)
    assert d["delegate"] == agent.email
    with server.admin() as http:
        made = http.post(
            "/api/grants",
            json={
                "requester": agent.agent_id,
                "target_host": "web-1",
                "audience": "escapes",
                "command": ["id"],
            },
        )
        assert made.status_code == 201 and made.json()["requester"] == agent.email, made.text
        listed = http.get("/api/grants", params={"requester": agent.agent_id}).json()["data"]
        assert listed and {g["requester"] for g in listed} == {agent.email}
        unknown = http.get("/api/grants", params={"requester": "agt_" + "x" * 22})
        assert unknown.status_code == 404 and problem(unknown)["detail"] == "agent not found"
    with server.client(agent.token) as http:  # an agent lists its own grants by either name
        assert http.get("/api/grants", params={"requester": agent.agent_id}).status_code == 200
