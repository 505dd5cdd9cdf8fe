"""problem+json everywhere (D2): every malformed request is a clear 4xx, never a 500.

The property test that drives every route with hypothesis lives in test_no_5xx.py."""

from __future__ import annotations

import re

import pytest

from conftest import problem


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"{not json", "malformed JSON body"),
        (b"[1, 2]", "request body must be a JSON object"),
        (b'"string"', "request body must be a JSON object"),
        (b"", "request body required: a JSON object"),
        (b"\xff\xfe\x00garbage", "malformed JSON body"),
    ],
)
def test_malformed_or_missing_json_is_400(server, body, detail):
    with server.client() as http:
        r = http.post("/api/agent/challenge", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert problem(r)["detail"] == detail


def test_unknown_route_is_404_problem(server):
    with server.client() as http:
        r = http.get("/api/does-not-exist")
    assert r.status_code == 404
    assert problem(r)["title"] == "Not Found"


def test_wrong_method_is_405_problem(server):
    with server.client() as http:
        r = http.get("/api/agent/challenge")
    assert r.status_code == 405
    problem(r)


def test_oversized_body_is_413_problem(server):
    with server.client() as http:
        r = http.post("/api/agent/challenge", content=b"x" * (2 * 1024 * 1024))
    assert r.status_code == 413
    assert problem(r)["detail"] == "request body too large"


def test_no_credentials_is_401_with_www_authenticate(server):
    with server.client() as http:
        r = http.get("/api/admin/agents")
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    problem(r)


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "Bearer", "token abc", "Bearer a b"])
def test_malformed_authorization_header_is_401(server, header):
    with server.client() as http:
        r = http.get("/api/admin/agents", headers={"Authorization": header})
    assert r.status_code == 401
    problem(r)


def test_credentials_without_the_right_are_403(server, agent):
    with server.client(agent.token) as http:
        r = http.get("/api/admin/agents")
    assert r.status_code == 403
    problem(r)


def test_every_response_has_a_request_id_and_security_headers(server):
    with server.client() as http:
        r = http.get("/healthz", headers={"X-Request-ID": "trace-123"})
        assert r.headers["x-request-id"] == "trace-123"
        r = http.get("/healthz", headers={"X-Request-ID": "bad id with spaces<script>"})
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])  # replaced, not echoed
        assert r.headers["x-content-type-options"] == "nosniff"
        assert problem(http.get("/nope")) and http.get("/nope").headers["x-request-id"]
        assert http.post("/api/agent/challenge", json={}).headers["cache-control"] == "no-store"


def test_management_token_and_agent_tokens_never_reach_the_log(server, agent):
    with server.admin() as http:
        http.get("/api/admin/agents", params={"token": server.token})
        http.get("/api/admin/agents", headers={"Authorization": "Bearer " + server.token + "wrong"})
    log = server.log()
    assert "GET /api/admin/agents" in log
    assert server.token not in log
    assert agent.token not in log
