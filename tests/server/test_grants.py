"""The grant lifecycle over HTTP against a real server: every transition of the specification's
state table, every error row, and the AuthZ-JWT checked against the JWKS (issue 3)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from inproc import InProcessServer

from conftest import Agent, Server, problem, signed_in
from grants_support import COMMAND, admin_post, approve, consume, decode_authz, grant_body, request_grant

# -- create ---------------------------------------------------------------------------------------


def test_create_answers_201_with_the_stored_request(server: Server, agent: Agent) -> None:
    with server.client(agent.token) as http:
        r = http.post(
            "/api/grants", json=grant_body(requester="someone-else@example.com", cmd_hash="sha256:forged")
        )
    assert r.status_code == 201, r.text
    grant = r.json()
    assert set(grant) >= {"id", "type", "request", "status", "created_at", "requester"}
    assert grant["status"] == "pending" and grant["type"] == "command"
    assert grant["requester"] == agent.email == grant["request"]["requester"]  # from the token, not the body
    expected = "sha256:" + hashlib.sha256(" ".join(COMMAND).encode()).hexdigest()
    assert grant["request"]["cmd_hash"] == expected  # computed by the server (D4); the sent one is ignored
    assert grant["request"]["grant_type"] == "once"
    assert grant["request"]["command"] == COMMAND
    assert abs(grant["created_at"] - time.time() * 1000) < 60_000  # milliseconds (D1)
    assert grant["decided_by"] is None and grant["expires_at"] is None


def test_a_permissions_grant_has_type_permissions(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent, command=None, permissions=["db:read", "db:write"])
    assert grant["type"] == "permissions" and "cmd_hash" not in grant["request"]
    # D6: type is "command" when command is given, else "permissions"; with neither, its
    # permissions are empty (the specification: "may be empty"), as the peer accepts
    bare = request_grant(server, agent, command=None)
    assert bare["type"] == "permissions" and bare["request"]["permissions"] == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"target_host": None}, "target_host"),
        ({"target_host": ""}, "target_host"),
        ({"target_host": "web 1"}, "target_host"),
        ({"target_host": "x" * 256}, "target_host"),
        ({"audience": None}, "audience"),
        ({"audience": 7}, "audience"),
        ({"grant_type": "forever"}, "grant_type"),
        ({"grant_type": "timed"}, "duration"),
        ({"grant_type": "timed", "duration": 0}, "duration"),
        ({"grant_type": "timed", "duration": -5}, "duration"),
        ({"grant_type": "timed", "duration": 1.5}, "duration"),
        ({"grant_type": "timed", "duration": True}, "duration"),
        ({"grant_type": "timed", "duration": "1h"}, "duration"),
        ({"grant_type": "timed", "duration": 10**9}, "duration"),
        ({"command": "ls -l"}, "command"),
        ({"command": []}, "command"),
        ({"command": ["ls", 3]}, "command"),
        ({"command": ["ls", "a\x00b"]}, "command"),
        ({"command": ["x"] * 300}, "command"),
        ({"command": None, "permissions": "db:read"}, "permissions"),
        ({"command": None, "permissions": [""]}, "permissions"),
        ({"run_as": "root; rm -rf /"}, "run_as"),
        ({"reason": "x" * 1001}, "reason"),
    ],
)
def test_invalid_requests_are_400_naming_the_field(
    server: Server, agent: Agent, fields: dict[str, Any], field: str
) -> None:
    body = grant_body()
    body.update(fields)
    body = {k: v for k, v in body.items() if v is not None}
    with server.client(agent.token) as http:
        r = http.post("/api/grants", json=body)
    assert r.status_code == 400, r.text
    details = problem(r)
    assert details["field"] == field and field in details["detail"]


def test_create_needs_a_credential(server: Server) -> None:
    with server.client() as http:
        r = http.post("/api/grants", json=grant_body(requester="agent@example.com"))
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    problem(r)
    with server.client("not-a-token") as http:
        r = http.post("/api/grants", json=grant_body())
    assert r.status_code == 401 and "invalid_token" in r.headers["www-authenticate"]


def test_the_management_token_files_requests_for_a_named_requester(server: Server) -> None:
    r = admin_post(server, "/api/grants", grant_body())
    assert r.status_code == 400 and problem(r)["field"] == "requester"
    r = admin_post(server, "/api/grants", grant_body(requester="Deploy-Bot@Example.com"))
    assert r.status_code == 201 and r.json()["requester"] == "deploy-bot@example.com"


def test_unauthenticated_requests_only_when_the_operator_allows_them(server_factory: Any) -> None:
    srv = server_factory("open", extra="[grants]\nallow_unauthenticated = true\n").start()
    with srv.client() as http:
        r = http.post("/api/grants", json=grant_body(requester="bot@example.com"))
    assert r.status_code == 201 and r.json()["requester"] == "bot@example.com"


def test_malformed_json_is_400(server: Server, agent: Agent) -> None:
    with server.client(agent.token) as http:
        r = http.post("/api/grants", content=b"{nope", headers={"content-type": "application/json"})
    assert r.status_code == 400 and problem(r)["detail"] == "malformed JSON body"


# -- reuse (D6) -----------------------------------------------------------------------------------


@pytest.mark.parametrize("grant_type", ["timed", "always"])
def test_timed_and_always_reuse_a_matching_approved_grant(
    server: Server, agent: Agent, grant_type: str
) -> None:
    fields = {"grant_type": grant_type, "duration": 3600 if grant_type == "timed" else None}
    first = request_grant(server, agent, **fields)
    approve(server, first["id"])
    with server.client(agent.token) as http:
        again = http.post("/api/grants", json=grant_body(reason="another reason", **fields))
    assert (
        again.status_code == 200
        and again.json()["id"] == first["id"]
        and again.json()["status"] == "approved"
    )
    # anything that changes what the grant allows is a new request
    for change in (
        {"command": ["systemctl", "stop", "nginx"]},
        {"run_as": "www-data"},
        {"target_host": "web-2"},
        {"audience": "grantd"},
    ):
        other = request_grant(server, agent, **{**fields, **change})
        assert other["id"] != first["id"] and other["status"] == "pending"


def test_once_is_never_reused_and_nobody_reuses_another_agents_grant(
    server: Server, agent: Agent, tmp_path: Path
) -> None:
    once = request_grant(server, agent)
    approve(server, once["id"])
    assert request_grant(server, agent)["id"] != once["id"]
    always = request_grant(server, agent, grant_type="always")
    approve(server, always["id"])
    other = signed_in(server, tmp_path / "other")
    assert request_grant(server, other, grant_type="always")["id"] != always["id"]


# -- read -----------------------------------------------------------------------------------------


def test_get_has_a_strong_etag_and_answers_304(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent)
    with server.client(agent.token) as http:
        first = http.get(f"/api/grants/{grant['id']}")
        tag = first.headers["etag"]
        assert first.status_code == 200 and first.json() == grant
        assert tag.startswith('"') and not tag.startswith("W/")
        unchanged = http.get(f"/api/grants/{grant['id']}", headers={"If-None-Match": tag})
        assert unchanged.status_code == 304 and unchanged.content == b"" and unchanged.headers["etag"] == tag
        assert (
            http.get(f"/api/grants/{grant['id']}", headers={"If-None-Match": f'W/{tag}, "x"'}).status_code
            == 304
        )
        approve(server, grant["id"])
        changed = http.get(f"/api/grants/{grant['id']}", headers={"If-None-Match": tag})
    assert (
        changed.status_code == 200
        and changed.headers["etag"] != tag
        and changed.json()["status"] == "approved"
    )


def test_get_needs_a_credential_that_may_see_the_grant(server: Server, agent: Agent, tmp_path: Path) -> None:
    grant = request_grant(server, agent)
    other = signed_in(server, tmp_path / "other")
    with server.client(other.token) as http:
        r = http.get(f"/api/grants/{grant['id']}")
    assert r.status_code == 404 and problem(r)["detail"] == "grant not found"
    with server.client() as http:
        assert http.get(f"/api/grants/{grant['id']}").status_code == 401
    with server.admin() as http:
        assert http.get(f"/api/grants/{grant['id']}").status_code == 200
        r = http.get("/api/grants/no-such-grant")
    assert r.status_code == 404 and problem(r)["detail"] == "grant not found"


def test_list_pages_with_a_cursor_and_filters(server: Server, tmp_path: Path) -> None:
    mine = signed_in(server, tmp_path / "lister")
    ids = [request_grant(server, mine, reason=f"n{i}")["id"] for i in range(5)]
    approve(server, ids[0])
    seen: list[str] = []
    cursor = None
    with server.client(mine.token) as http:
        while True:
            page = http.get(
                "/api/grants", params={"limit": 2, **({"cursor": cursor} if cursor else {})}
            ).json()
            assert set(page) == {"data", "pagination"} and len(page["data"]) <= 2
            seen += [g["id"] for g in page["data"]]
            assert all(g["requester"] == mine.email for g in page["data"])  # top-level requester (peer CLI)
            if not page["pagination"]["has_more"]:
                break
            cursor = page["pagination"]["cursor"]
        assert seen == list(reversed(ids))  # newest first, nothing skipped or repeated
        approved = http.get("/api/grants", params={"status": "approved"}).json()["data"]
        assert [g["id"] for g in approved] == [ids[0]]
        many = http.get("/api/grants", params={"limit": 200})
        assert many.status_code == 200 and len(many.json()["data"]) == 5  # clamped, not refused
        for params, field in (
            ({"status": "bogus"}, "status"),
            ({"limit": "ten"}, "limit"),
            ({"cursor": "zz"}, "cursor"),
        ):
            r = http.get("/api/grants", params=params)
            assert r.status_code == 400 and problem(r)["field"] == field
        r = http.get("/api/grants", params={"requester": "someone-else@example.com"})
        assert r.status_code == 403
    with server.admin() as http:
        everyone = http.get("/api/grants", params={"requester": mine.email, "limit": 100}).json()["data"]
    assert {g["id"] for g in everyone} == set(ids)


def test_an_agent_lists_only_its_own_grants(server: Server, agent: Agent, tmp_path: Path) -> None:
    request_grant(server, agent)
    other = signed_in(server, tmp_path / "other")
    with server.client(other.token) as http:
        assert http.get("/api/grants").json()["data"] == []
    with server.client() as http:
        assert http.get("/api/grants").status_code == 401


# -- approve, deny, revoke ------------------------------------------------------------------------


def test_approve_returns_the_grant_and_an_authz_jwt_with_every_claim(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent, run_as="www-data")
    answer = approve(server, grant["id"])
    decided = answer["grant"]
    assert decided["id"] == grant["id"] and decided["status"] == "approved"
    assert decided["decided_by"] == "admin@example.com"  # the management token's identity
    assert abs(decided["decided_at"] - time.time() * 1000) < 60_000
    header = jwt.get_unverified_header(answer["authz_jwt"])
    assert header["alg"] == "EdDSA" and header["typ"] == "JWT" and isinstance(header["kid"], str)
    claims = decode_authz(server, answer["authz_jwt"])
    assert claims["iss"] == server.url
    assert claims["sub"] == agent.email
    assert claims["aud"] == "escapes"  # a single string, never an array (peer elevation tool)
    assert claims["target_host"] == "web-1"
    assert claims["grant_id"] == grant["id"]
    assert claims["grant_type"] == "once"
    assert claims["permissions"] == []
    assert claims["command"] == COMMAND
    assert claims["cmd_hash"] == grant["request"]["cmd_hash"]
    assert claims["decided_by"] == "admin@example.com"
    assert claims["run_as"] == "www-data"
    assert claims["exp"] - claims["iat"] == 300  # once: 5 minutes
    assert isinstance(claims["jti"], str) and len(claims["jti"]) >= 16
    # claim types the peer elevation tool insists on
    for name in ("sub", "aud", "target_host", "jti", "grant_id", "grant_type", "decided_by", "cmd_hash"):
        assert isinstance(claims[name], str), name
    for name in ("iat", "exp"):
        assert type(claims[name]) is int, name


def test_no_agent_may_decide_and_a_decided_grant_stays_decided(
    server: Server, agent: Agent, tmp_path: Path
) -> None:
    grant = request_grant(server, agent)
    other = signed_in(server, tmp_path / "other")
    with server.client(agent.token) as http:  # the requester sees its grant but never decides it
        r = http.post(f"/api/grants/{grant['id']}/approve")
        assert r.status_code == 403 and problem(r)["detail"] == "not authorized to approve"
        assert http.post(f"/api/grants/{grant['id']}/deny").status_code == 403
    with server.client(other.token) as http:  # another agent learns nothing of it (D2: 404)
        assert http.post(f"/api/grants/{grant['id']}/approve").status_code == 404
        assert http.post(f"/api/grants/{grant['id']}/deny").status_code == 404
    approve(server, grant["id"])
    for action in ("approve", "deny"):
        r = admin_post(server, f"/api/grants/{grant['id']}/{action}")
        assert r.status_code == 400 and problem(r)["detail"] == "grant already decided"
    with server.admin() as http:
        r = http.post("/api/grants/missing/approve")
    assert r.status_code == 404


def test_approve_may_override_type_and_duration(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent)
    r = admin_post(server, f"/api/grants/{grant['id']}/approve", {"grant_type": "timed"})
    assert r.status_code == 400 and problem(r)["field"] == "duration"
    answer = approve(server, grant["id"], grant_type="timed", duration=120)
    decided = answer["grant"]
    assert decided["request"]["grant_type"] == "timed" and decided["request"]["duration"] == 120
    assert decided["expires_at"] - decided["decided_at"] == 120_000
    claims = decode_authz(server, answer["authz_jwt"])
    assert claims["grant_type"] == "timed" and claims["exp"] == decided["expires_at"] // 1000


def test_an_always_token_lives_an_hour(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent, grant_type="always", command=["uptime"])
    claims = decode_authz(server, approve(server, grant["id"])["authz_jwt"])
    assert claims["exp"] - claims["iat"] == 3600 and claims["grant_type"] == "always"


def test_an_empty_body_with_a_json_content_type_means_no_override(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent)
    with server.admin() as http:
        r = http.post(
            f"/api/grants/{grant['id']}/approve", content=b"", headers={"content-type": "application/json"}
        )
        assert r.status_code == 200 and r.json()["grant"]["status"] == "approved"
        r = http.post(
            f"/api/grants/{grant['id']}/revoke", content=b"{", headers={"content-type": "application/json"}
        )
    assert r.status_code == 400


def test_deny_records_the_reason_and_nothing_can_be_done_with_the_grant(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent)
    r = admin_post(server, f"/api/grants/{grant['id']}/deny", {"reason": "not today"})
    assert r.status_code == 200
    denied = r.json()["grant"]
    assert denied["status"] == "denied" and denied["decision_reason"] == "not today"
    assert denied["decided_by"] == "admin@example.com"
    with server.client(agent.token) as http:
        r = http.post(f"/api/grants/{grant['id']}/token")
    assert r.status_code == 400 and problem(r)["status"] == 400
    assert admin_post(server, f"/api/grants/{grant['id']}/approve").status_code == 400


def test_revoke_ends_an_approved_grant(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent, grant_type="always")
    token = approve(server, grant["id"])["authz_jwt"]
    r = admin_post(server, f"/api/grants/{grant['id']}/revoke")
    assert r.status_code == 200 and r.json()["grant"]["status"] == "revoked"
    assert r.json()["grant"]["revoked_by"] == "admin@example.com"
    assert consume(server, grant["id"], token).json() == {"error": "revoked", "status": "revoked"}
    with server.client() as http:
        assert http.post("/api/grants/verify", json={"token": token}).json()["valid"] is False
    r = admin_post(server, f"/api/grants/{grant['id']}/revoke")  # revoking twice answers with it (D6)
    assert r.status_code == 200 and r.json()["grant"]["status"] == "revoked"


def test_the_requester_may_withdraw_but_others_may_not_revoke(
    server: Server, agent: Agent, tmp_path: Path
) -> None:
    grant = request_grant(server, agent)
    other = signed_in(server, tmp_path / "other")
    with server.client(other.token) as http:
        assert http.post(f"/api/grants/{grant['id']}/revoke").status_code == 404
    with server.client(agent.token) as http:
        r = http.post(f"/api/grants/{grant['id']}/revoke")
    assert r.status_code == 200 and r.json()["grant"]["status"] == "revoked"
    assert r.json()["grant"]["revoked_by"] == agent.email


# -- token, consume, verify ----------------------------------------------------------------------


def test_token_is_for_the_requester_only_and_fresh_each_time(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent)
    with server.client(agent.token) as http:
        r = http.post(f"/api/grants/{grant['id']}/token")
        assert r.status_code == 400 and "not approved" in problem(r)["detail"]
        approve(server, grant["id"])
        first = http.post(f"/api/grants/{grant['id']}/token").json()
        second = http.post(f"/api/grants/{grant['id']}/token").json()
    assert first["grant"] == {"id": grant["id"], "status": "approved"}
    assert decode_authz(server, first["authz_jwt"])["jti"] != decode_authz(server, second["authz_jwt"])["jti"]
    with server.admin() as http:
        assert http.post(f"/api/grants/{grant['id']}/token").status_code == 403


def test_a_once_grant_is_consumed_exactly_once(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent)
    token = approve(server, grant["id"])["authz_jwt"]
    first = consume(server, grant["id"], token)
    assert first.status_code == 200 and first.json()["status"] == "consumed"
    assert first.json()["grant"]["used_at"] is not None
    again = consume(server, grant["id"], token)
    assert again.status_code == 200 and again.json() == {"error": "already_consumed", "status": "consumed"}
    with server.client(agent.token) as http:
        fresh = http.post(f"/api/grants/{grant['id']}/token")
    assert fresh.status_code == 400  # a consumed grant yields no new token


@pytest.mark.parametrize("grant_type", ["timed", "always"])
def test_timed_and_always_consume_as_valid_and_stay_approved(
    server: Server, agent: Agent, grant_type: str
) -> None:
    grant = request_grant(
        server,
        agent,
        grant_type=grant_type,
        duration=600 if grant_type == "timed" else None,
        command=["journalctl", "-u", grant_type],
    )
    token = approve(server, grant["id"])["authz_jwt"]
    for _ in range(3):
        r = consume(server, grant["id"], token)
        assert r.json()["status"] == "valid" and r.json()["grant"]["status"] == "approved"


def test_consume_checks_the_bearer(server: Server, agent: Agent) -> None:
    a = request_grant(server, agent)
    b = request_grant(server, agent)
    token_a = approve(server, a["id"])["authz_jwt"]
    approve(server, b["id"])
    r = consume(server, b["id"], token_a)
    assert r.status_code == 403 and "another grant" in problem(r)["detail"]
    with server.client() as http:
        assert http.post(f"/api/grants/{a['id']}/consume").status_code == 401
    r = consume(server, a["id"], agent.token)  # an identity token is not a grant token
    assert r.status_code == 401 and "invalid_token" in r.headers["www-authenticate"]
    r = consume(server, a["id"], token_a[:-4] + ("AAAA" if not token_a.endswith("AAAA") else "BBBB"))
    assert r.status_code == 401
    assert consume(server, a["id"], token_a).json()["status"] == "consumed"


def test_consume_of_pending_and_denied_grants_reports_why(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent, grant_type="always", command=["whoami"])
    token = approve(server, grant["id"])["authz_jwt"]
    # A token only exists for approved grants; tokens outlive decisions, so a later state is reported.
    admin_post(server, f"/api/grants/{grant['id']}/revoke")
    assert consume(server, grant["id"], token).json() == {"error": "revoked", "status": "revoked"}


def test_verify_has_no_side_effects(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent)
    token = approve(server, grant["id"])["authz_jwt"]
    with server.client() as http:
        for _ in range(2):
            answer = http.post("/api/grants/verify", json={"token": token}).json()
            assert answer["valid"] is True
            claims = answer["claims"]
            assert {"sub", "aud", "target_host", "grant_type", "cmd_hash", "decided_by"} <= set(claims)
        assert consume(server, grant["id"], token).json()["status"] == "consumed"
        assert http.post("/api/grants/verify", json={"token": token}).json() == {
            "valid": False,
            "error": "already_consumed",
            "status": "consumed",
        }
        for body in ({}, {"token": ""}, {"token": "garbage"}, {"token": agent.token}):
            r = http.post("/api/grants/verify", json=body)
            assert r.status_code == 200 and r.json()["valid"] is False and r.json()["error"]


# -- expiry ---------------------------------------------------------------------------------------


def test_expired_grants_are_expired_everywhere(tmp_path: Path) -> None:
    srv = InProcessServer(
        tmp_path / "expiry", extra="[grants]\npending_ttl = 2\nexpiry_sweep_interval = 3600\n"
    ).start()
    try:
        _expired_everywhere(srv, tmp_path)
    finally:
        srv.stop()


def _expired_everywhere(srv: Any, tmp_path: Path) -> None:
    agent = signed_in(srv, tmp_path / "keys")
    timed = request_grant(srv, agent, grant_type="timed", duration=2)
    token = approve(srv, timed["id"])["authz_jwt"]
    waiting = request_grant(srv, agent, command=["true"])
    srv.clock.advance(2)
    with srv.client(agent.token) as http:
        assert http.get(f"/api/grants/{timed['id']}").json()["status"] == "expired"
        assert http.get(f"/api/grants/{waiting['id']}").json()["status"] == "expired"
        approved = http.get("/api/grants", params={"status": "approved"}).json()["data"]
        assert approved == []  # the peer CLI trusts status=approved to hold no lapsed grant
        expired = {g["id"] for g in http.get("/api/grants", params={"status": "expired"}).json()["data"]}
        assert {timed["id"], waiting["id"]} <= expired
        assert http.post(f"/api/grants/{timed['id']}/token").status_code == 400
        # a new request is not answered with the lapsed grant
        assert http.post("/api/grants", json=grant_body(grant_type="timed", duration=2)).status_code == 201
    assert consume(srv, timed["id"], token).status_code == 401  # its token expired with it
    r = admin_post(srv, f"/api/grants/{waiting['id']}/approve")
    assert r.status_code == 400 and problem(r)["status"] == 400 and "expired" in problem(r)["detail"]


# -- batch ----------------------------------------------------------------------------------------


def test_batch_authorises_and_applies_each_operation_on_its_own(server: Server, agent: Agent) -> None:
    a, b, c = (request_grant(server, agent, reason=f"batch {i}") for i in range(3))
    approve(server, c["id"])
    ops = [
        {"id": a["id"], "action": "approve"},
        {"id": b["id"], "action": "deny", "reason": "no"},
        {"id": c["id"], "action": "revoke"},
        {"id": "missing", "action": "approve"},
        {"id": a["id"], "action": "explode"},
        {"id": a["id"], "action": "deny"},
    ]
    r = admin_post(server, "/api/grants/batch", {"operations": ops})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [(x["id"], x["success"]) for x in results] == [
        (a["id"], True),
        (b["id"], True),
        (c["id"], True),
        ("missing", False),
        (a["id"], False),
        (a["id"], False),
    ]
    assert [x.get("status") for x in results[:3]] == ["approved", "denied", "revoked"]
    assert results[3]["error"]["status"] == 404 and results[3]["error"]["title"]
    assert results[5]["error"]["detail"] == "grant already decided"
    with server.client(agent.token) as http:
        d = request_grant(server, agent, reason="by the agent")
        mine = http.post(
            "/api/grants/batch", json={"operations": [{"id": d["id"], "action": "approve"}]}
        ).json()
    assert mine["results"][0]["success"] is False and mine["results"][0]["error"]["status"] == 403
    r = admin_post(server, "/api/grants/batch", {"operations": [{"id": "x", "action": "deny"}] * 101})
    assert r.status_code == 400 and problem(r)["field"] == "operations"
    assert admin_post(server, "/api/grants/batch", {"operations": []}).status_code == 400


# -- peer compatibility ----------------------------------------------------------------------------


def test_discovery_and_jwks_serve_what_peer_tools_read(server: Server) -> None:
    with server.client() as http:
        doc = http.get("/.well-known/openid-configuration").json()
        keys = http.get("/.well-known/jwks.json").json()["keys"]
    assert doc["openape_grants_endpoint"] == f"{server.url}/api/grants"
    assert doc["openape_delegations_endpoint"] == f"{server.url}/api/delegations"
    for key in keys:
        assert set(key) <= {"kty", "crv", "x", "kid", "alg", "use"}
        assert (
            key["kty"] == "OKP" and key["crv"] == "Ed25519" and key["alg"] == "EdDSA" and key["use"] == "sig"
        )


def test_ids_in_paths_may_be_percent_encoded(server: Server, agent: Agent) -> None:
    with server.admin() as http:
        r = http.get(f"/api/admin/agents/{agent.email.replace('+', '%2B').replace('@', '%40')}")
    assert r.status_code == 200 and r.json()["email"] == agent.email


# -- no input makes a 500 ------------------------------------------------------------------------
