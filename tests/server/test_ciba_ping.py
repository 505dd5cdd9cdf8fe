"""CIBA ping mode (D16): the agent's endpoint set by an administrator through the SSRF rule, and
after the decision one POST of only {auth_req_id} with the client's bearer token; then the client
redeems at /token. A real local receiver, allowed by [ciba] notification_allow."""

from __future__ import annotations

import http.server
import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from inproc import InProcessServer

from authz_world import NO_LIMITS
from conftest import Agent, enroll, free_port
from server.test_ciba_flow import bc_authorize, decide, pending_grant, poll


class Receiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.got: queue.Queue[tuple[str, dict[str, str], bytes]] = queue.Queue()
        self.fail_next = 0  # answer this many of the next POSTs with 500
        got = self.got
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                got.put((self.path, dict(self.headers), body))
                failing = receiver.fail_next > 0
                receiver.fail_next -= failing
                self.send_response(500 if failing else 204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ciba/cb"

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[InProcessServer]:
    extra = NO_LIMITS + f'\n[ciba]\nnotification_allow = ["http://127.0.0.1:{receiver.port}/ciba"]\n'
    server = InProcessServer(tmp_path_factory.mktemp("ciba-ping"), extra=extra).start()
    yield server
    server.stop()


@pytest.fixture
def agent(srv: InProcessServer, tmp_path: Path) -> Agent:
    return enroll(srv, tmp_path)  # type: ignore[arg-type]


def set_ciba(srv: InProcessServer, agent: Agent, value: object) -> tuple[int, dict]:
    with srv.admin() as http:
        r = http.put(f"/api/admin/agents/{agent.agent_id}", json={"ciba": value})
    return r.status_code, r.json()


def test_a_ping_after_the_decision_then_the_token(srv, agent, receiver):
    with srv.admin() as http:  # an agent's CIBA delivery shows on its admin record, poll by default
        assert http.get(f"/api/admin/agents/{agent.agent_id}").json()["ciba"] == {"mode": "poll"}
    status, answer = set_ciba(srv, agent, {"mode": "ping", "notification_endpoint": receiver.url})
    assert status == 200 and answer["ciba"] == {"mode": "ping", "notification_endpoint": receiver.url}, answer
    with srv.admin() as http:
        shown = http.get(f"/api/admin/agents/{agent.email}").json()["ciba"]
        assert shown == {"mode": "ping", "notification_endpoint": receiver.url}
    r = bc_authorize(srv, agent)
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"  # ping needs the client's token
    ack = bc_authorize(srv, agent, client_notification_token="cnt-secret-1").json()
    decide(srv, pending_grant(srv, agent)["id"])
    path, headers, body = receiver.got.get(timeout=10)
    assert path == "/ciba/cb"
    assert headers["Authorization"] == "Bearer cnt-secret-1"
    assert json.loads(body) == {"auth_req_id": ack["auth_req_id"]}  # nothing else
    r = poll(srv, agent, ack["auth_req_id"])
    assert r.status_code == 200, r.text
    time.sleep(0.5)
    assert receiver.got.empty()  # one ping per decision, whatever else happens to the grant


def test_a_denial_is_pinged_too(srv, agent, receiver):
    set_ciba(srv, agent, {"mode": "ping", "notification_endpoint": receiver.url})
    ack = bc_authorize(srv, agent, client_notification_token="cnt-2").json()
    decide(srv, pending_grant(srv, agent)["id"], "deny")
    _, _, body = receiver.got.get(timeout=10)
    assert json.loads(body) == {"auth_req_id": ack["auth_req_id"]}
    assert poll(srv, agent, ack["auth_req_id"]).json()["error"] == "access_denied"


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://agents.example.com/cb",  # not https
        "https://127.0.0.1/cb",  # loopback
        "https://10.1.2.3/cb",  # private
        "https://[::ffff:10.0.0.1]/cb",  # IPv4-mapped private
        "https://localhost/cb",
        "https://2130706433/cb",  # 127.0.0.1 as a number
        "https://user:pw@agents.example.com/cb",
        "https://agents.example.com/cb#x",
        "not a url",
    ],
)
def test_the_ping_endpoint_goes_through_the_ssrf_rule(srv, agent, endpoint):
    status, answer = set_ciba(srv, agent, {"mode": "ping", "notification_endpoint": endpoint})
    assert status == 400, answer
    assert answer["field"].startswith("ciba"), answer


def test_public_https_endpoints_and_poll_are_accepted(srv, agent):
    status, answer = set_ciba(
        srv, agent, {"mode": "ping", "notification_endpoint": "https://agents.example.com/cb"}
    )
    assert status == 200 and answer["ciba"]["mode"] == "ping"
    assert set_ciba(srv, agent, None)[1]["ciba"] == {"mode": "poll"}
    assert set_ciba(srv, agent, {"mode": "push"})[0] == 400


def test_a_failed_ping_is_retried_by_the_outbox_and_listed_with_the_grants_notices(srv, agent, receiver):
    """D16: the ping goes through the outbox (written with the decision): an endpoint that fails once
    gets the ping again after the backoff, and GET /api/grants/:id/notifications says so."""
    receiver.fail_next = 1
    set_ciba(srv, agent, {"mode": "ping", "notification_endpoint": receiver.url})
    ack = bc_authorize(srv, agent, client_notification_token="cnt-3").json()
    grant_id = pending_grant(srv, agent)["id"]
    decide(srv, grant_id)
    first = receiver.got.get(timeout=10)  # answered 500
    assert json.loads(first[2]) == {"auth_req_id": ack["auth_req_id"]}
    with srv.admin() as http:
        deadline = time.monotonic() + 10
        while True:
            (row,) = http.get(f"/api/grants/{grant_id}/notifications").json()["data"]
            if row["attempts"] == 1:
                break
            assert time.monotonic() < deadline, row
            time.sleep(0.1)
    assert row["channel"] == "ciba-ping" and row["kind"] == "ciba_ping" and row["status"] == "pending"
    srv.clock.advance(6)  # past the first backoff (5 s)
    again = receiver.got.get(timeout=10)
    assert json.loads(again[2]) == {"auth_req_id": ack["auth_req_id"]}
    with srv.admin() as http:
        deadline = time.monotonic() + 10
        while http.get(f"/api/grants/{grant_id}/notifications").json()["data"][0]["status"] != "sent":
            assert time.monotonic() < deadline
            time.sleep(0.1)
