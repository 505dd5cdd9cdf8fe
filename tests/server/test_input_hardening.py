"""Break it before others do (D2, D12): inputs an attacker found that answered 500, identifiers with
control and format characters, and request lines and values that reached the log unescaped.

Every case runs against a real `grantd serve` process; the module's server log must hold no
traceback after each test (``no_traceback``)."""

from __future__ import annotations

import json
import logging
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from grantd.core.fields import MAX_DEPTH, json_body
from grantd.logs import JsonFormatter, TextFormatter

from conftest import Agent, Server, problem, signed_in, unique_email
from grants_support import grant_body, request_grant


@pytest.fixture(scope="module")
def agent(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Agent:
    """One signed-in agent for the whole module (its tokens outlive every test here)."""
    return signed_in(server, tmp_path_factory.mktemp("keys"))


@pytest.fixture(autouse=True)
def no_traceback(server: Server) -> Iterator[None]:
    yield
    log = server.log()
    assert "Traceback" not in log, log[-4000:]


def post(server: Server, path: str, raw: bytes | str, token: str | None = None) -> httpx.Response:
    with server.client(token) as http:
        return http.post(path, content=raw, headers={"content-type": "application/json"})


def bad_request(response: httpx.Response, *, field: str | None = None, says: str = "") -> dict[str, Any]:
    assert response.status_code == 400, response.text
    body = problem(response)
    if field is not None:
        assert body.get("field") == field, body
    assert says in body["detail"], body
    return body


# -- 1. the sixteen inputs that answered 500 --------------------------------------------------------

BODY_ROUTES = [
    "/api/agent/challenge",
    "/api/agent/authenticate",
    "/api/auth/challenge",
    "/api/auth/authenticate",
    "/api/agent/enroll",
    "/api/admin/agents",
    "/api/grants",
    "/api/grants/verify",
    "/api/grants/batch",
    "/api/delegations",
]


@pytest.mark.parametrize("path", BODY_ROUTES)
@pytest.mark.parametrize("credential", ["none", "management"])
@pytest.mark.parametrize("shape", ["array", "object"])
def test_deep_nesting_is_400_on_every_route(server: Server, path: str, credential: str, shape: str) -> None:
    depth = 100_000 if shape == "array" else 5_000
    raw = "[" * depth + "]" * depth if shape == "array" else '{"a":' * depth + "1" + "}" * depth
    token = server.token if credential == "management" else None
    r = post(server, path, raw, token)
    if r.status_code == 401 and token is None:  # a route that asks for a credential first
        return
    bad_request(r, says="nested more than")


def test_nesting_up_to_the_bound_parses_and_one_more_level_is_refused() -> None:
    def nested(levels: int) -> bytes:
        return ('{"a":' + "[" * (levels - 1) + "]" * (levels - 1) + "}").encode()

    assert json_body(nested(MAX_DEPTH))
    with pytest.raises(Exception, match="nested more than"):
        json_body(nested(MAX_DEPTH + 1))


SURROGATE = '"\\ud800"'


@pytest.mark.parametrize(
    ("path", "template", "field"),
    [
        ("/api/agent/challenge", '{"agent_id": %s}', "agent_id"),
        ("/api/agent/challenge", '{"id": %s}', "id"),
        ("/api/agent/authenticate", '{"agent_id": %s, "challenge": "c", "signature": "s"}', "agent_id"),
        (
            "/api/agent/authenticate",
            '{"agent_id": "a@example.com", "challenge": %s, "signature": "s"}',
            "challenge",
        ),
        (
            "/api/agent/authenticate",
            '{"agent_id": "a@example.com", "challenge": "c", "signature": %s}',
            "signature",
        ),
        ("/api/grants/verify", '{"token": %s}', "token"),
        ("/api/grants/verify", '{"token": "x", "extra": [1, {"deep": %s}]}', "extra"),
    ],
)
def test_lone_surrogates_without_credentials_are_400(
    server: Server, path: str, template: str, field: str
) -> None:
    bad_request(post(server, path, template % SURROGATE), field=field, says="surrogate")


def test_a_lone_surrogate_in_a_key_is_400(server: Server) -> None:
    bad_request(post(server, "/api/agent/challenge", '{"\\udc00": 1, "agent_id": "x"}'), says="surrogate")


def test_a_surrogate_pair_is_one_character_and_fine(server: Server) -> None:
    r = post(server, "/api/agent/challenge", '{"agent_id": "\\ud83d\\ude00@example.com"}')
    assert r.status_code == 404, r.text  # a valid (if unknown) identifier: looked up, not refused


@pytest.mark.parametrize(
    ("path", "fields", "field"),
    [
        ("/api/agent/enroll", {"email": "a\ud800@example.com", "name": "n", "publicKey": "k"}, "email"),
        ("/api/admin/agents", {"email": "a@example.com", "name": "n\udfff", "publicKey": "k"}, "name"),
        (
            "/api/agent/enroll",
            {"email": "a@example.com", "name": "n", "publicKey": "k", "owner": "\ud800@x.y"},
            "owner",
        ),
        ("/api/delegations", {"delegate": "\ud800@example.com", "audience": "x"}, "delegate"),
        ("/api/delegations", {"delegate": "a@example.com", "audience": "\ud800"}, "audience"),
        ("/api/delegations", {"delegate": "a@example.com", "audience": "x", "scopes": ["\ud800"]}, "scopes"),
        ("/api/grants", grant_body(requester="a@example.com", command=["ls", "\ud800"]), "command"),
        ("/api/grants", grant_body(requester="a@example.com", target_host="\ud800"), "target_host"),
    ],
)
def test_lone_surrogates_under_the_management_token_are_400(
    server: Server, path: str, fields: dict[str, Any], field: str
) -> None:
    # json.dumps writes a lone surrogate as the \ud800 escape the attacker sent
    bad_request(post(server, path, json.dumps(fields), server.token), field=field, says="surrogate")


def test_a_surrogate_in_an_agents_command_is_400(server: Server, agent: Agent) -> None:
    bad_request(
        post(
            server,
            "/api/grants",
            '{"target_host": "h", "audience": "a", "command": ["ls", SURROGATE]}'.replace(
                "SURROGATE", SURROGATE
            ),
            agent.token,
        ),
        field="command",
        says="surrogate",
    )


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"])
def test_numbers_that_are_not_finite_are_400(server: Server, literal: str) -> None:
    bad_request(
        post(server, "/api/grants/verify", '{"token": "x", "n": LITERAL}'.replace("LITERAL", literal))
    )


def test_grant_type_null_means_absent(server: Server, agent: Agent) -> None:
    r = post(
        server,
        "/api/grants",
        json.dumps(grant_body(requester=agent.email, grant_type=None) | {"grant_type": None}),
        server.token,
    )
    assert r.status_code == 201, r.text
    assert r.json()["request"]["grant_type"] == "once"
    grant = request_grant(server, agent)
    with server.admin() as http:
        r = http.post(f"/api/grants/{grant['id']}/approve", json={"grant_type": None, "duration": None})
    assert r.status_code == 200, r.text
    assert r.json()["grant"]["status"] == "approved"


def test_null_optional_delegation_fields_mean_absent(server: Server, agent: Agent) -> None:
    with server.admin() as http:
        r = http.post(
            "/api/delegations",
            json={
                "delegate": agent.email,
                "audience": "nowhere",
                "approval": None,
                "grant_type": None,
                "scopes": None,
                "duration": None,
                "expires_at": None,
                "delegator": None,
            },
        )
    assert r.status_code == 201, r.text
    assert r.json()["approval"] == "once" and r.json()["scopes"] == []


def test_null_in_an_agent_update_leaves_the_field_as_it_is(server: Server, tmp_path: Path) -> None:
    other = signed_in(server, tmp_path, name="Keep me")
    with server.admin() as http:
        r = http.put(
            f"/api/admin/agents/{other.agent_id}",
            json={
                "name": None,
                "owner": None,
                "approver": None,
                "status": None,
                "isActive": None,
                "publicKey": None,
            },
        )
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "Keep me" and r.json()["status"] == "active"
    with server.client(other.token) as http:
        assert http.get("/api/me").status_code == 200  # the key was not replaced


@pytest.mark.parametrize("path", ["/api/grants", "/api/delegations", "/api/admin/agents"])
@pytest.mark.parametrize("cursor", ["1" * 23 + "_x", "9" * 400 + "_x", "\u00b2_x", "1_\x1b"])
def test_absurd_cursors_are_400(server: Server, path: str, cursor: str) -> None:
    with server.admin() as http:
        bad_request(http.get(path, params={"cursor": cursor}), field="cursor")


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "1" * 19, "-1", "1e3"])
def test_a_last_event_id_that_is_not_an_event_id_is_400(server: Server, value: str) -> None:
    with server.admin() as http:
        bad_request(http.get("/api/grants/events", params={"last_event_id": value}), field="Last-Event-ID")
    with server.admin() as http:  # the header, as raw latin-1 and as UTF-8 bytes
        for header in (value.encode("latin-1", errors="ignore"), value.encode()):
            if header:
                bad_request(
                    http.get("/api/grants/events", headers={"Last-Event-ID": header}), field="Last-Event-ID"
                )


@pytest.mark.parametrize("action", [{}, [], ["approve"], {"approve": True}, None, 1, True])
def test_a_batch_action_of_the_wrong_type_fails_that_operation_only(
    server: Server, agent: Agent, action: Any
) -> None:
    grant = request_grant(server, agent)
    with server.admin() as http:
        r = http.post(
            "/api/grants/batch",
            json={
                "operations": [{"id": grant["id"], "action": action}, {"id": grant["id"], "action": "deny"}]
            },
        )
    assert r.status_code == 200, r.text
    failed, denied = r.json()["results"]
    assert failed["success"] is False and failed["error"]["field"] == "action" and failed["action"] is None
    assert denied["success"] is True and denied["status"] == "denied"


@pytest.mark.parametrize(
    "expires_at", [1e30, 10**30, -(10**30), 1.5, "9" * 5000, "+275760-09-13T00:00:00Z", [], {}]
)
def test_absurd_delegation_expiries_are_400(server: Server, agent: Agent, expires_at: Any) -> None:
    with server.admin() as http:
        r = http.post(
            "/api/delegations", json={"delegate": agent.email, "audience": "x", "expires_at": expires_at}
        )
    bad_request(r, field="expires_at")


# -- 2. identifiers refuse control and format characters (D12) -------------------------------------

BAD_CHARACTERS = {
    "NUL": "\x00",
    "ESC": "\x1b",
    "BEL": "\x07",
    "LF": "\n",
    "CR": "\r",
    "TAB": "\t",
    "DEL": "\x7f",
    "NEL": "\x85",
    "RLO": "\u202e",
    "ZWSP": "\u200b",
    "BOM": "\ufeff",
    "LRI": "\u2066",
    "SHY": "\u00ad",
    "LSEP": "\u2028",
}


def _with(value: str, char: str, where: str) -> str:
    return {"end": value + char, "start": char + value, "middle": value[:2] + char + value[2:]}[where]


IDENTIFIER_CASES = [
    # (route, field, a good value, the body around it, credential)
    ("POST /api/agent/enroll", "email", "x@example.com", {"name": "n"}, "management"),
    ("POST /api/agent/enroll", "name", "Deploy bot", {"email": "x@example.com"}, "management"),
    (
        "POST /api/agent/enroll",
        "owner",
        "owner@example.com",
        {"email": "x@example.com", "name": "n", "publicKey": "{key}"},
        "management",
    ),
    (
        "POST /api/admin/agents",
        "approver",
        "appr@example.com",
        {"email": "x@example.com", "name": "n", "publicKey": "{key}"},
        "management",
    ),
    ("PUT /api/admin/agents/{agent}", "name", "Renamed", {}, "management"),
    ("PUT /api/admin/agents/{agent}", "owner", "owner@example.com", {}, "management"),
    ("PUT /api/admin/agents/{agent}", "approver", "appr@example.com", {}, "management"),
    ("POST /api/grants", "target_host", "web-1", grant_body(), "agent"),
    ("POST /api/grants", "audience", "escapes", grant_body(), "agent"),
    ("POST /api/grants", "run_as", "root", grant_body(), "agent"),
    ("POST /api/grants", "permissions", ["deploy:web"], grant_body(command=None), "agent"),
    ("POST /api/grants", "requester", "{email}", grant_body(), "management"),
    ("POST /api/delegations", "delegate", "{email}", {"audience": "x"}, "management"),
    (
        "POST /api/delegations",
        "delegator",
        "admin@example.com",
        {"audience": "x", "delegate": "{email}"},
        "management",
    ),
    ("POST /api/delegations", "audience", "escapes", {"delegate": "{email}"}, "management"),
    (
        "POST /api/delegations",
        "scopes",
        ["command:ls"],
        {"delegate": "{email}", "audience": "x"},
        "management",
    ),
    ("POST /api/agent/challenge", "agent_id", "{email}", {}, "none"),
    ("POST /api/agent/challenge", "id", "{email}", {}, "none"),
]


def _fill(value: Any, agent: Agent) -> Any:
    if isinstance(value, str):
        return (
            value.replace("{email}", agent.email)
            .replace("{agent}", agent.agent_id)
            .replace("{key}", agent.public_key)
        )
    if isinstance(value, list):
        return [_fill(v, agent) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, agent) for k, v in value.items()}
    return value


@pytest.mark.parametrize(
    ("route", "field", "good", "around", "credential"),
    IDENTIFIER_CASES,
    ids=[f"{c[0].split()[1]}:{c[1]}" for c in IDENTIFIER_CASES],
)
@pytest.mark.parametrize("char", list(BAD_CHARACTERS.values()), ids=list(BAD_CHARACTERS))
def test_identifiers_refuse_control_and_format_characters(
    server: Server,
    agent: Agent,
    route: str,
    field: str,
    good: Any,
    around: dict[str, Any],
    credential: str,
    char: str,
) -> None:
    method, path = route.split()
    good = _fill(good, agent)
    where = (
        "end" if char in "\n\r\t" else "middle"
    )  # "root\n": a trailing newline must not slip past a pattern
    bad = [_with(good[0], char, where)] if isinstance(good, list) else _with(good, char, where)
    body = {**_fill(around, agent), field: bad}
    token = {"management": server.token, "agent": agent.token, "none": None}[credential]
    with server.client(token) as http:
        r = http.request(method, _fill(path, agent), json=body)
    body = bad_request(r, field=field)
    assert "control or format characters" in body["detail"] or (char == "\x00" and "NUL" in body["detail"]), (
        body
    )


def test_identifiers_without_such_characters_still_pass(server: Server, agent: Agent, tmp_path: Path) -> None:
    email = unique_email("Ünïcode")
    other = signed_in(server, tmp_path, email=email, name="Dépl😀y bot — ✓")
    assert other.token
    request_grant(server, agent, run_as="www-data", target_host="web-1.example.com", audience="escapes:ünï")
    with server.admin() as http:
        r = http.post(
            "/api/delegations",
            json={"delegate": agent.email, "audience": "nowhere", "scopes": ["command:ls"]},
        )
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("run_as", ["root\n", "root\r\n", "\nroot", "ro ot", "root$$", "root;id"])
def test_run_as_must_be_a_user_name_as_a_whole(server: Server, agent: Agent, run_as: str) -> None:
    with server.client(agent.token) as http:
        bad_request(http.post("/api/grants", json=grant_body(run_as=run_as)), field="run_as")


@pytest.mark.parametrize("email", ["a@example.com\n", "a@b@c", "a b@example.com", "@example.com", "a@"])
def test_e_mails_must_match_as_a_whole(server: Server, agent: Agent, email: str) -> None:
    with server.admin() as http:
        bad_request(
            http.post("/api/agent/enroll", json={"email": email, "name": "n", "publicKey": agent.public_key}),
            field="email",
        )


def test_reasons_keep_newlines_and_tabs_but_nothing_else(server: Server, agent: Agent) -> None:
    grant = request_grant(server, agent, reason="line one\nline two\tindented")
    assert grant["request"]["reason"] == "line one\nline two\tindented"
    for char in ("\x1b", "\x00", "\r", "\u202e", "\u200b", "\x07"):
        with server.client(agent.token) as http:
            bad_request(http.post("/api/grants", json=grant_body(reason=f"deploy{char}now")), field="reason")
        grant = request_grant(server, agent)
        with server.admin() as http:
            bad_request(
                http.post(f"/api/grants/{grant['id']}/deny", json={"reason": f"no{char}"}), field="reason"
            )


# -- 3. logs are escaped -------------------------------------------------------------------------


def raw_request(port: int, data: bytes) -> bytes:
    """Send bytes as they are (no client library would send these) and read the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        answer = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            answer += chunk
            head, sep, body = answer.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                None,
            )
            if sep and length is not None and len(body) >= length:
                break
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


HOSTILE_REQUESTS = [
    (b"GET /\x1b[31mred HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /api/grants/\x1b[2J\x1b[H HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /healthz\x00 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /a\x07b\x08c\x7f HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"GET /\xe2\x80\xaeevil HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    (b"G\x1b[31mET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", None),
    (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-ID: a\x1b[31mb\r\nX-Forwarded-For: 1.2.3.4\x1b\r\n\r\n",
        200,
    ),
    (b"GET /api/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \x1b[31m\x07\xff\r\n\r\n", 401),
    (
        b"GET /api/grants/%1b%5b31m HTTP/1.1\r\nHost: x\r\nLast-Event-ID: \x1b\r\nIf-None-Match: \x1b\r\n\r\n",
        401,
    ),
    (
        b'POST /api/agent/challenge HTTP/1.1\r\nHost: x\r\nContent-Type: \x1b\r\nContent-Length: 16\r\n\r\n{"agent_id":"\x1b"}',
        400,
    ),
    (b"garbage\x1b[31m\r\n\r\n", 400),
]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_hostile_request_lines_get_4xx_and_an_escaped_log(server_factory: Any, log_format: str) -> None:
    srv = server_factory(log_format=log_format).start()
    for data, expected in HOSTILE_REQUESTS:
        answer = raw_request(srv.port, data)
        assert answer.startswith(b"HTTP/1.1 "), (data, answer)
        status = status_of(answer)
        assert status < 500 and (expected is None or status == expected), (data, answer)
        if status >= 400:
            assert b"application/problem+json" in answer, answer
    time.sleep(0.2)
    log = srv.log()
    assert "Traceback" not in log, log
    for char in ("\x1b", "\x00", "\x07", "\x08", "\x7f", "\u202e"):
        assert char not in log, (char, log)
    assert "/\\x1b[31mred" in log or "/%1B[31mred" in log, log  # the path is there, escaped
    if log_format == "json":
        for line in log.splitlines():
            if line.startswith("{"):
                json.loads(line)
        assert "G\\u001b[31mET" in log, log
    else:
        assert "G\\x1b[31mET /healthz" in log, log
    access = [line for line in log.splitlines() if "grantd.access" in line]
    assert len(access) >= len(HOSTILE_REQUESTS), log  # every request got its one access line


def test_the_text_log_escapes_messages_and_tracebacks_but_keeps_traceback_lines() -> None:
    try:
        raise ValueError("boom \x1b[31m\u202e")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "grantd",
        logging.ERROR,
        __file__,
        1,
        "unhandled error on %s %s",
        ("G\x1bET", "/a\nb\x00\ud800"),
        exc_info,
    )
    record.request_id = "rid\x1b"
    text = TextFormatter().format(record)
    assert "G\\x1bET /a\\nb\\x00\\ud800" in text and "rid=rid\\x1b" in text
    assert "boom \\x1b[31m\\u202e" in text
    assert "\nTraceback" in text  # the traceback keeps its lines
    assert all(c.isprintable() or c == "\n" for c in text)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "unhandled error on G\x1bET /a\nb\x00\ud800"
    assert all(c.isprintable() for c in JsonFormatter().format(record))
