"""The peer agent CLI (`apes` 1.35.4) against grantd, replayed byte for byte over a socket.

Nothing here is built from the peer's source: tests/fixtures/peer_cli/*.json record, by hand from
peer-facts.md, the requests `apes` sends when its IdP is given as `http://host:port/` (so every path
starts with `//`): method, exact path, Node fetch headers (User-Agent `node`, Content-Type
`application/json` on every call, body-less POSTs included) and body. They go out through
http.client, which sends the request line exactly as written, to a fresh real `grantd serve`.
See docs/compat.md for what differs and why.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from inproc import InProcessServer
from oauth_support import Person, authorize_params, exchange, pkce

from grantd.web.app import collapse_slashes

from conftest import Agent, Server, enroll, make_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "peer_cli"
PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("peer")).start()
    yield srv
    srv.stop()


def fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: names[m[1]], value)
    if isinstance(value, list):
        return [fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    return value


def send(
    server: Server | InProcessServer, method: str, path: str, headers: dict[str, str], body: Any
) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    form = headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded")
    try:
        data = (
            None
            if body is None
            else urllib.parse.urlencode(body).encode()
            if form
            else json.dumps(body).encode()
        )
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"127.0.0.1:{server.port}")
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(data or b"")))  # undici sends 0 for a body-less POST
        conn.endheaders(data)
        response = conn.getresponse()
        raw = response.read()
        parsed = json.loads(raw) if raw else None
        return response.status, {k.lower(): v for k, v in response.getheaders()}, parsed
    finally:
        conn.close()


def replay(server: Server | InProcessServer, name: str, names: dict[str, str]) -> list[Any]:
    """Send every request of one fixture in order; returns the parsed answers. Each answer must have
    the recorded status and, for a 2xx, a JSON body (apes parses every success). A step with
    ``path_from_discovery`` goes to the path of that member of the discovery document (apes uses
    those URLs as they are, so they keep grantd's single slashes)."""
    fixture = json.loads((FIXTURES / name).read_text())
    answers = []
    for step in fixture["requests"]:
        if "path_from_discovery" in step:
            url = json.loads(names["DISCOVERY"])[step["path_from_discovery"]]
            assert url.startswith(server.url + "/"), url
            path = url.removeprefix(server.url)
        else:
            path = fill(step["path"], names)
            assert path.startswith("//"), "the fixtures replay apes with a trailing-slash IdP"
        status, headers, body = send(
            server, step["method"], path, fill(step["headers"], names), fill(step["body"], names)
        )
        assert status == step["status"], (step["name"], status, body)
        if 200 <= status < 300:
            assert headers["content-type"].startswith("application/json") and body is not None, step["name"]
        for var, member in step.get("capture", {}).items():
            names[var] = body[member]
        answers.append(body)
    return answers


@pytest.fixture(scope="module")
def peer(server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`apes login`: an enrolled agent signs in through the replayed challenge/authenticate."""
    agent: Agent = enroll(server, tmp_path_factory.mktemp("peer-keys"))
    names = {
        "EMAIL": agent.email,
        "EMAIL_Q": urllib.parse.quote(agent.email, safe=""),
        "MGMT_TOKEN": server.token,
    }
    fixture = json.loads((FIXTURES / "login.json").read_text())
    discovery, challenge, authenticate = fixture["requests"]
    status, _, document = send(server, discovery["method"], discovery["path"], discovery["headers"], None)
    assert status == 200, document
    names["DISCOVERY"] = json.dumps(document)
    status, _, body = send(
        server, challenge["method"], challenge["path"], challenge["headers"], fill(challenge["body"], names)
    )
    assert status == 200, body
    # apes signs the 64-char challenge string's UTF-8 bytes: a raw Ed25519 signature, standard base64 with padding
    names["SIGNATURE"] = base64.b64encode(agent.private_key().sign(body["challenge"].encode())).decode()
    names["CHALLENGE"] = body["challenge"]
    status, _, body = send(
        server,
        authenticate["method"],
        authenticate["path"],
        authenticate["headers"],
        fill(authenticate["body"], names),
    )
    assert status == 200, body
    names["AGENT_TOKEN"] = body["token"]
    assert body["expires_in"] == 3600
    return names


# -- repeated slashes -----------------------------------------------------------------------------


def raw_request(server: Server, request_line: str, token: str) -> tuple[str, bytes]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            f"{request_line}\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode().split("\r\n")[0], body


def test_repeated_slashes_collapse_over_a_real_socket(server: Server) -> None:
    status, body = raw_request(server, "GET //api//grants///?limit=1 HTTP/1.1", server.token)
    assert status == "HTTP/1.1 200 OK", body
    assert "data" in json.loads(body)
    status, _ = raw_request(server, "GET ////.well-known//jwks.json HTTP/1.1", server.token)
    assert status == "HTTP/1.1 200 OK"


def test_the_query_string_is_never_changed(server: Server) -> None:
    # a cursor is opaque: two slashes in it stay two slashes (a changed one would be refused or mean something else)
    status, body = raw_request(
        server, "GET //api/grants?status=pending&requester=a//b%40example.com HTTP/1.1", server.token
    )
    assert status == "HTTP/1.1 200 OK", body
    assert json.loads(body)["data"] == []
    # the function the request class applies before routing, byte for byte
    assert collapse_slashes(b"//api//grants/?cursor=a//b&x=//#//") == b"/api/grants/?cursor=a//b&x=//#//"
    assert collapse_slashes(b"/api/grants?requester=a//b") == b"/api/grants?requester=a//b"
    assert collapse_slashes(b"///") == b"/"
    assert collapse_slashes(b"/a/b") == b"/a/b"
    assert collapse_slashes(b"http://h//api") == b"http://h//api"  # absolute-form: left to Sanic as sent


def test_collapsing_opens_nothing_new(server: Server) -> None:
    # the collapsed path is routed and authorised exactly like the clean one
    status, _ = raw_request(server, "GET //api//grants HTTP/1.1", "not-a-token")
    assert status.startswith("HTTP/1.1 401")
    status, _ = raw_request(server, "GET //api/admin//agents HTTP/1.1", "not-a-token")
    assert status.startswith("HTTP/1.1 401")
    status, _ = raw_request(server, "GET //no//such HTTP/1.1", server.token)
    assert status.startswith("HTTP/1.1 404")


# -- the replays ------------------------------------------------------------------------------------


def test_login_with_a_trailing_slash_idp(server: Server, peer: dict[str, str]) -> None:
    document = json.loads(peer["DISCOVERY"])
    assert (
        document["issuer"] == server.url
    )  # no trailing slash: what escapes and the SP compare byte for byte
    assert document["ddisa_auth_challenge_endpoint"] == f"{server.url}/api/auth/challenge"
    claims = jwt.decode(peer["AGENT_TOKEN"], options={"verify_signature": False})
    assert claims["sub"] == peer["EMAIL"] and claims["aud"] == "apes-cli"


def test_grants_request_run_status_and_list_used(server: Server, peer: dict[str, str]) -> None:
    names = dict(peer)
    created, approved, read, token, consumed, status, listed = replay(
        server, "grants_request_shapes.json", names
    )
    sent = json.loads((FIXTURES / "grants_request_shapes.json").read_text())["requests"][0]["body"]
    assert created["status"] == "pending" and created["requester"] == peer["EMAIL"]
    # the shapes fields come back verbatim, in the grant and in the AuthZ-JWT
    for answer in (created["request"], read["request"]):
        assert answer["authorization_details"] == sent["authorization_details"]
        assert answer["execution_context"] == sent["execution_context"]
        assert answer["command"] == sent["command"]  # `grants run ID` takes argv from here, unchanged
    assert approved["grant"]["status"] == "approved"
    claims = jwt.decode(token["authz_jwt"], options={"verify_signature": False})
    assert claims["authorization_details"] == sent["authorization_details"]
    assert claims["execution_context"] == sent["execution_context"]
    assert claims["command"] == sent["command"] and claims["aud"] == "shapes"
    assert claims["cmd_hash"].startswith("sha256:")  # D4 keeps the prefix (docs/compat.md)
    assert consumed["status"] == "consumed" and "error" not in consumed
    # `grants status`: milliseconds (the specification); apes shows them as seconds (docs/compat.md)
    assert status["status"] == "consumed"
    assert status["created_at"] > 10**12 and abs(status["created_at"] - time.time() * 1000) < 120_000
    assert status["used_at"] >= status["decided_at"] >= status["created_at"]
    # `grants list --status used`: the alias of consumed, with the top-level requester apes filters on
    assert [g["id"] for g in listed["data"] if g["id"] == names["GRANT_ID"]] == [names["GRANT_ID"]]
    assert all(g["status"] == "consumed" and g["requester"] == peer["EMAIL"] for g in listed["data"])
    assert isinstance(listed["pagination"]["has_more"], bool)


def test_grants_revoke_a_b_sends_a_twice_and_both_succeed(server: Server, peer: dict[str, str]) -> None:
    names = dict(peer)
    *_, first, second, batch = replay(server, "grants_revoke.json", names)
    assert first["grant"]["status"] == "revoked" and first["grant"]["id"] == names["A"]
    assert second["grant"]["status"] == "revoked" and second["grant"]["id"] == names["A"]
    assert [r["success"] for r in batch["results"]] == [True, True]
    assert all(r["id"] == names["A"] and r["status"] == "revoked" for r in batch["results"])
    # B was never revoked (the peer's bug is the peer's): it is still approved
    status, _, b = send(server, "GET", f"//api/grants/{names['B']}", fill(dict(AGENT_HEADERS), names), None)
    assert status == 200 and b["status"] == "approved"


AGENT_HEADERS = {
    "User-Agent": "node",
    "Content-Type": "application/json",
    "Authorization": "Bearer {{AGENT_TOKEN}}",
}


def test_delegation_with_an_iso_expiry(server: Server, peer: dict[str, str]) -> None:
    names = dict(peer)
    expires = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    names["EXPIRES_ISO"] = expires.isoformat().replace("+00:00", "Z")
    created, listed, deleted = replay(server, "delegation_create.json", names)
    assert created["approval"] == "always" and created["scopes"] == ["deploy", "logs"]
    assert created["expires_at"] == int(expires.timestamp() * 1000)
    assert created["id"] in [d["id"] for d in listed["data"]]
    assert deleted["id"] == created["id"]  # delegation-revoke needs the top-level id back


def test_run_approval_timed_without_duration_is_refused(server: Server, peer: dict[str, str]) -> None:
    names = dict(peer)
    reuse, refused = replay(server, "run_timed.json", names)
    assert isinstance(reuse["data"], list)
    assert refused["status"] == 400 and refused["detail"].startswith(
        "duration is required"
    )  # kept: the specification requires it


# -- the browser login's silent refresh ---------------------------------------------------------------


@pytest.fixture(scope="module")
def browser_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path_factory.mktemp("peer-browser")).start()
    yield srv
    srv.stop()


def test_silent_refresh_after_a_browser_login_omits_client_id(browser_server: InProcessServer) -> None:
    """`apes login --browser`, then 15 minutes later the silent refresh: form-encoded grant_type and
    refresh_token only. Before D9's rule grantd answered 400 (client_id is required) and apes deleted
    its refresh token: the person was logged out after one access-token lifetime."""
    srv = browser_server
    person = Person(srv)
    status, _, document = send(srv, "GET", "//.well-known/openid-configuration", {"User-Agent": "node"}, None)
    assert status == 200
    verifier, challenge = pkce()
    code = person.code_for(authorize_params("apes-cli", challenge=challenge))
    tokens = exchange(srv, code, verifier, as_json=True)  # apes exchanges the code with a JSON body
    assert tokens.status_code == 200, tokens.text
    names = {"DISCOVERY": json.dumps(document), "REFRESH_TOKEN": tokens.json()["refresh_token"]}
    srv.clock.advance(16 * 60)  # the access token (15 minutes) has expired
    first, second, listed = replay(srv, "refresh_token.json", names)
    for answer in (first, second):
        assert answer["token_type"] == "Bearer" and answer["refresh_token"] and answer["expires_in"] > 0
        assert jwt.decode(answer["access_token"], options={"verify_signature": False})["aud"] == "apes-cli"
    assert first["refresh_token"] != second["refresh_token"] != tokens.json()["refresh_token"]
    assert isinstance(listed["data"], list)
