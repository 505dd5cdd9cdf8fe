"""Abuse limits (D12), over real HTTP: each limit trips with 429 problem+json and Retry-After,
counters are shared by server processes on one database, 0 turns a limit off. (The bounds on
event streams are tests/server/test_stream_limits.py.)

Per-address limits are told apart by trusting 127.0.0.1 as a proxy and sending X-Forwarded-For.
Time-dependent tests use the in-process server's ManualClock to end a window without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from support import postgres as pg

from conftest import Server, enroll, make_server, problem, sign_in, signed_in, ssh_keygen
from grants_support import grant_body, request_grant

ALL_OFF = {
    "authenticate_per_agent": 0,
    "authenticate_per_address": 0,
    "enroll_per_address": 0,
    "enroll_per_principal": 0,
    "token_per_client": 0,
    "passkey_per_person": 0,
    "failed_bearer_per_address": 0,
    "grants_per_agent": 0,
    "pending_per_agent": 0,
    "verify_per_address": 0,
    "streams_per_principal": 0,
    "streams_per_owner": 0,
    "streams_per_process": 0,
}


def limits_table(**limits: int) -> str:
    return "[limits]\n" + "".join(f"{k} = {v}\n" for k, v in {**ALL_OFF, **limits}.items())


def trust_local_proxy(config_path: Path) -> None:
    """127.0.0.1 (the test) is a trusted proxy: X-Forwarded-For names the client address."""
    text = config_path.read_text()
    config_path.write_text(text.replace("[server]\n", '[server]\ntrusted_proxies = ["127.0.0.1"]\n', 1))


def from_(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def assert_limited(r: httpx.Response, detail: str) -> int:
    """A 429 problem naming the limit, with Retry-After in whole seconds; returns Retry-After."""
    assert r.status_code == 429, r.text
    body = problem(r)
    retry_after = int(r.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert body["detail"].startswith(detail), body
    assert body["detail"].endswith(f"retry in {retry_after} s") or "pending" in detail, body
    return retry_after


def client_credentials(srv: InProcessServer, agent: Any, address: str, key: Any = None) -> httpx.Response:
    """POST /token with the agent's client assertion (signed with ``key``, by default its own) from
    ``address``."""
    import uuid

    import jwt

    now = srv.clock.now_s()
    claims = {"iss": agent.email, "sub": agent.email, "aud": f"{srv.url}/token", "iat": now, "exp": now + 60}
    assertion = jwt.encode({**claims, "jti": uuid.uuid4().hex}, key or agent.private_key(), algorithm="EdDSA")
    form = {
        "grant_type": "client_credentials",
        "client_assertion": assertion,
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
    }
    with srv.client() as http:
        return http.post("/token", data=form, headers=from_(address))


@pytest.fixture
def clocked(tmp_path: Path) -> Iterator[Callable[..., InProcessServer]]:
    """In-process servers (ManualClock at .clock) with the given limits, everything else off."""
    started: list[InProcessServer] = []

    def start(extra: str = "", **limits: int) -> InProcessServer:
        srv = InProcessServer(tmp_path / f"srv{len(started)}", extra=limits_table(**limits) + extra)
        trust_local_proxy(srv.config_path)
        started.append(srv)
        return srv.start()

    yield start
    for srv in started:
        srv.stop()


# -- counted limits, one by one ------------------------------------------------------------------------


def test_challenge_is_limited_per_client_address_on_its_failures(clocked, tmp_path):
    srv = clocked(authenticate_per_address=3)
    agent = signed_in(srv, tmp_path / "keys")  # from 127.0.0.1: its own counter
    unknown = {"agent_id": "nobody@example.com"}
    with srv.client() as http:
        for _ in range(3):
            assert (
                http.post("/api/agent/challenge", json=unknown, headers=from_("203.0.113.1")).status_code
                == 404
            )
        r = http.post("/api/agent/challenge", json=unknown, headers=from_("203.0.113.1"))
        retry_after = assert_limited(r, "too many authentication attempts; retry in")
        # malformed requests are failures too
        assert (
            http.post("/api/agent/challenge", content=b"{", headers=from_("203.0.113.1")).status_code == 429
        )
        # a known agent's challenge is no failure: neither counted nor refused (D12)
        for _ in range(5):
            assert (
                http.post(
                    "/api/agent/challenge", json={"agent_id": agent.email}, headers=from_("203.0.113.1")
                ).status_code
                == 200
            )
        assert (
            http.post("/api/agent/challenge", json=unknown, headers=from_("203.0.113.2")).status_code == 404
        )
        srv.clock.advance(retry_after)  # the window ends: the address may fail again
        assert (
            http.post("/api/agent/challenge", json=unknown, headers=from_("203.0.113.1")).status_code == 404
        )


def test_a_valid_credential_is_never_refused_for_other_callers_failures(clocked, tmp_path):
    """D12: behind one NAT, another caller's failures shut the address out for failures only: an
    agent's valid signature at authenticate, and its valid client assertion at /token, still pass
    from that address (and a wrong one from it is 429)."""

    srv = clocked(authenticate_per_address=3, token_per_address=3)
    agent = signed_in(srv, tmp_path / "keys")
    nat = from_("198.51.100.60")
    with srv.client() as http:
        codes = [
            http.post(
                "/api/agent/authenticate",
                json={"agent_id": f"nobody{i}@example.com", "challenge": "0" * 64, "signature": "AAAA"},
                headers=nat,
            ).status_code
            for i in range(5)
        ]
        assert codes == [404, 404, 404, 429, 429]
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}, headers=nat)
        assert challenge.status_code == 200, challenge.text
        nonce = challenge.json()["challenge"]
        wrong = http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": nonce, "signature": agent.sign_raw("other")},
            headers=nat,
        )
        assert_limited(wrong, "too many authentication attempts")
        nonce = http.post("/api/agent/challenge", json={"agent_id": agent.email}, headers=nat).json()[
            "challenge"
        ]
        right = http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": nonce, "signature": agent.sign_raw(nonce)},
            headers=nat,
        )
        assert right.status_code == 200, right.text
        # /token: failed client authentications from the address, then a valid client assertion
        form = {"grant_type": "client_credentials", "client_id": "nobody"}
        codes = [http.post("/token", data=form, headers=nat).status_code for _ in range(5)]
        assert codes[:3] == [401, 401, 401] and codes[3:] == [429, 429]
        valid = client_credentials(srv, agent, "198.51.100.60")
        assert valid.status_code == 200, valid.text


def test_challenge_and_authenticate_are_limited_per_agent(clocked, tmp_path):
    srv = clocked(authenticate_per_agent=2)
    agent = signed_in(srv, tmp_path / "keys")  # one challenge and one authenticate used
    other = signed_in(srv, tmp_path / "keys")
    bad = {"challenge": "0" * 64, "signature": "AAAA"}
    with srv.client() as http:
        # the id and the e-mail name the same agent: one counter, from any address
        assert (
            http.post(
                "/api/agent/authenticate",
                json={"agent_id": agent.agent_id, **bad},
                headers=from_("198.51.100.1"),
            ).status_code
            == 401
        )
        r = http.post(
            "/api/agent/authenticate", json={"id": agent.email.upper(), **bad}, headers=from_("198.51.100.2")
        )
        assert_limited(r, "too many authentication attempts")
        assert http.post("/api/agent/challenge", json={"agent_id": agent.email}).status_code == 200
        assert_limited(
            http.post("/api/agent/challenge", json={"agent_id": agent.agent_id}),
            "too many authentication attempts",
        )
        # another agent is not affected
        assert http.post("/api/agent/challenge", json={"agent_id": other.email}).status_code == 200
        srv.clock.advance(60)
    sign_in(srv, agent)  # a fresh window: the agent signs in again


def test_enrolment_and_token_requests_are_limited_per_authenticated_identity(clocked, tmp_path):
    """D12, per identity: enrolments per enrolling principal and /token requests per agent, counted
    once the identity authenticated, from any address; another identity is not affected, and a
    caller who cannot authenticate as it cannot spend its budget."""

    srv = clocked(enroll_per_principal=2, token_per_client=2)
    with srv.admin() as http:
        codes = []
        for i in range(3):
            _, public = ssh_keygen(tmp_path / "keys", name=f"p{i}")
            codes.append(
                http.post(
                    "/api/agent/enroll",
                    json={"email": f"pbot{i}@example.com", "name": "bot", "publicKey": public},
                    headers=from_(f"192.0.2.{20 + i}"),  # every one from another address
                )
            )
        assert [r.status_code for r in codes[:2]] == [201, 201]
        assert_limited(codes[2], "too many enrolments")
    srv.clock.advance(60)  # a fresh window for the management token's enrolments below
    agent = enroll(srv, tmp_path / "agent")
    other = enroll(srv, tmp_path / "other")

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    forged = [
        client_credentials(srv, agent, f"198.51.100.{i}", Ed25519PrivateKey.generate()).status_code
        for i in range(4)
    ]
    assert forged == [401, 401, 401, 401]  # someone else's failures never spend the agent's budget
    assert [client_credentials(srv, agent, f"198.51.100.{10 + i}").status_code for i in range(2)] == [
        200,
        200,
    ]
    assert_limited(client_credentials(srv, agent, "198.51.100.20"), "too many token requests")
    assert client_credentials(srv, other, "198.51.100.20").status_code == 200


def test_enrolment_is_limited_per_client_address(clocked, tmp_path):
    srv = clocked(enroll_per_address=2)
    with srv.admin() as http:
        for i in range(3):
            _, public = ssh_keygen(tmp_path / "keys", name=f"k{i}")
            r = http.post(
                "/api/agent/enroll",
                json={"email": f"bot{i}@example.com", "name": "bot", "publicKey": public},
                headers=from_("192.0.2.7"),
            )
            if i < 2:
                assert r.status_code == 201, r.text
        assert_limited(r, "too many enrolments")
        r = http.post(
            "/api/agent/enroll",
            json={"email": "bot2@example.com", "name": "bot", "publicKey": public},
            headers=from_("192.0.2.8"),
        )
        assert r.status_code == 201, r.text


def test_grant_requests_are_limited_per_agent(clocked, tmp_path):
    srv = clocked(grants_per_agent=3)
    agent = signed_in(srv, tmp_path / "keys")
    other = signed_in(srv, tmp_path / "keys")
    for _ in range(3):
        request_grant(srv, agent)
    with srv.client(agent.token) as http:
        assert_limited(http.post("/api/grants", json=grant_body()), "too many grant requests")
    request_grant(srv, other)
    with srv.admin() as http:  # the management token asking on an agent's behalf is not an agent
        assert http.post("/api/grants", json={**grant_body(), "requester": agent.email}).status_code == 201
    srv.clock.advance(60)
    request_grant(srv, agent)


def test_pending_grants_of_one_agent_are_bounded(clocked, tmp_path):
    srv = clocked(pending_per_agent=3, extra="[grants]\npending_ttl = 600\n")
    agent = signed_in(srv, tmp_path / "keys")
    ids = [request_grant(srv, agent)["id"] for _ in range(3)]
    with srv.client(agent.token) as http:
        r = http.post("/api/grants", json=grant_body())
        assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
        assert problem(r)["detail"].startswith("too many pending grants (at most 3)")
    with srv.admin() as http:  # a decision frees a place
        assert http.post(f"/api/grants/{ids[0]}/deny", json={}).status_code == 200
    request_grant(srv, agent)
    with srv.client(agent.token) as http:
        assert http.post("/api/grants", json=grant_body()).status_code == 429
    srv.clock.advance(601)  # pending grants lapse (expired): they no longer count
    for _ in range(3):
        request_grant(srv, agent)


@pytest.mark.parametrize("storage", ["sqlite", "postgres"])
def test_one_agents_concurrent_requests_never_pass_its_pending_bound(tmp_path, monkeypatch, storage):
    """The bound is counted in the grant's own transaction (grantd.store.PendingBound): requests
    racing in two server processes cannot all see a free place. (Counted before the transaction,
    as it was before, PostgreSQL let 4 or more of these through.)"""
    if storage == "postgres":
        pg.require()
        monkeypatch.setenv(pg.STORAGE_ENV, "postgres")
    srv = make_server(tmp_path / "srv", workers=2, extra=limits_table(pending_per_agent=3)).start()
    try:
        agent = signed_in(srv, tmp_path / "keys")

        racers = 24
        start = threading.Barrier(racers)

        def request(i: int) -> int:
            with httpx.Client(base_url=srv.url, timeout=30) as http:
                http.get("/healthz")  # connected before the race starts
                start.wait()
                body = grant_body(command=["ls", str(i)])
                return http.post(
                    "/api/grants", json=body, headers={"Authorization": f"Bearer {agent.token}"}
                ).status_code

        with ThreadPoolExecutor(racers) as pool:
            answers = list(pool.map(request, range(racers)))
        assert sorted(answers) == [201] * 3 + [429] * (racers - 3), answers
    finally:
        srv.stop()


def test_verify_is_limited_per_client_address(clocked):
    srv = clocked(verify_per_address=3)
    with srv.client() as http:
        for _ in range(3):
            assert (
                http.post("/api/grants/verify", json={"token": "x"}, headers=from_("203.0.113.9")).json()[
                    "valid"
                ]
                is False
            )
        assert_limited(
            http.post("/api/grants/verify", json={"token": "x"}, headers=from_("203.0.113.9")),
            "too many verification requests",
        )
        assert (
            http.post("/api/grants/verify", json={"token": "x"}, headers=from_("203.0.113.10")).status_code
            == 200
        )


def test_failed_bearers_shut_out_their_address_only(clocked, tmp_path):
    srv = clocked(failed_bearer_per_address=3)
    agent = signed_in(srv, tmp_path / "keys")
    good = {"Authorization": f"Bearer {srv.token}"}
    with srv.client() as http:
        # successes never count; two failures are below the limit
        for _ in range(10):
            assert http.get("/api/me", headers={**good, **from_("192.0.2.3")}).status_code == 200
        for _ in range(2):
            assert (
                http.get(
                    "/api/me", headers={"Authorization": "Bearer wrong", **from_("192.0.2.3")}
                ).status_code
                == 401
            )
        assert http.get("/api/me", headers={**good, **from_("192.0.2.3")}).status_code == 200
        # the attacker: guessing management tokens and forging identity tokens
        for bearer in ("guess-1", "guess-2", agent.token[:-4] + "AAAA"):
            assert (
                http.get(
                    "/api/me", headers={"Authorization": f"Bearer {bearer}", **from_("192.0.2.66")}
                ).status_code
                == 401
            )
        # now every wrong bearer from that address is 429, a forged identity token too
        retry_after = assert_limited(
            http.get("/api/me", headers={"Authorization": "Bearer guess-3", **from_("192.0.2.66")}),
            "too many failed authentication attempts; retry in",
        )
        assert (
            http.get(
                "/api/me", headers={"Authorization": f"Bearer {agent.token[:-4]}BBBB", **from_("192.0.2.66")}
            ).status_code
            == 429
        )
        assert (
            http.post(
                "/api/grants",
                json=grant_body(),
                headers={"Authorization": "Bearer guess-4", **from_("192.0.2.66")},
            ).status_code
            == 429
        )
        # requests without a bearer are not bearer attempts
        assert (
            http.post(
                "/api/agent/challenge", json={"agent_id": agent.email}, headers=from_("192.0.2.66")
            ).status_code
            == 200
        )
        # the management token from another address is never limited by these failures
        assert http.get("/api/admin/agents", headers={**good, **from_("192.0.2.4")}).status_code == 200
        assert http.get("/api/me", headers=good).status_code == 200
        srv.clock.advance(retry_after)
        assert http.get("/api/me", headers={**good, **from_("192.0.2.66")}).status_code == 200


def test_valid_credentials_are_never_locked_out_by_others_failures_at_the_same_address(clocked, tmp_path):
    """Issue 19 item 6: people behind one NAT (or an untrusted proxy) share an address. Someone else's
    failures there must not lock out the management token or a valid token; guesses of the
    management token stay slowed (one per second per connection) and wrong ones are 429."""
    srv = clocked(failed_bearer_per_address=3)
    agent = signed_in(srv, tmp_path / "keys")
    nat = from_("198.51.100.50")
    with srv.client() as http:
        codes = [
            http.get("/api/me", headers={"Authorization": f"Bearer guess-{i}", **nat}).status_code
            for i in range(5)
        ]  # the attacker behind the NAT: over the budget
        assert codes == [401, 401, 401, 429, 429]
        # a valid agent identity token (signed: no guess passes it) is accepted at once
        started = time.monotonic()
        me = http.get("/api/me", headers={"Authorization": f"Bearer {agent.token}", **nat})
        assert me.status_code == 200, me.text
        assert me.json()["email"] == agent.email
        assert time.monotonic() - started < 0.9
        # the management token from the same address still works, after the guessing tarpit
        started = time.monotonic()
        r = http.get("/api/admin/agents", headers={"Authorization": f"Bearer {srv.token}", **nat})
        assert r.status_code == 200, r.text
        assert time.monotonic() - started >= 1.0
        # a wrong guess waits just as long, then is refused 429 (not told apart by its timing)
        started = time.monotonic()
        assert_limited(
            http.get("/api/me", headers={"Authorization": "Bearer guess-x", **nat}),
            "too many failed authentication attempts",
        )
        assert time.monotonic() - started >= 1.0
        # an address under its budget is not slowed at all
        started = time.monotonic()
        assert (
            http.get(
                "/api/me", headers={"Authorization": f"Bearer {srv.token}", **from_("198.51.100.51")}
            ).status_code
            == 200
        )
        assert time.monotonic() - started < 0.9


def test_ipv6_clients_are_counted_per_prefix(clocked):
    """Issue 19 item 6: an IPv6 client owns a /64 and may use a fresh address for every request; it
    still gets one counter. Other /64s are not affected; IPv4-mapped IPv6 counts as its IPv4."""
    srv = clocked(verify_per_address=3)
    with srv.client() as http:

        def verify(address: str) -> httpx.Response:
            return http.post("/api/grants/verify", json={"token": "x"}, headers=from_(address))

        for address in ("2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff:ffff:ffff:ffff"):
            assert verify(address).status_code == 200
        assert_limited(verify("2001:db8:1:2:abcd::9"), "too many verification requests")
        assert verify("2001:db8:1:3::1").status_code == 200  # the next /64: another client
        for _ in range(3):
            assert verify("192.0.2.77").status_code == 200
        assert_limited(verify("::ffff:192.0.2.77"), "too many verification requests")
        assert verify("192.0.2.78").status_code == 200  # IPv4 stays per address
    # the limits of other modules count per prefix too (POST /token: grantd.web.api.oauth)
    srv2 = clocked(token_per_address=3)
    with srv2.client() as http:
        for i in range(3):
            assert (
                http.post(
                    "/token", data={"grant_type": "nope"}, headers=from_(f"2001:db8:9:9::{i + 1}")
                ).status_code
                == 400
            )
        r = http.post("/token", data={"grant_type": "nope"}, headers=from_("2001:db8:9:9:1::5"))
        assert r.status_code == 429, r.text


def test_the_ipv6_prefix_is_configurable(clocked):
    srv = clocked(verify_per_address=2, ipv6_prefix=128)
    with srv.client() as http:
        for i in range(4):  # four addresses of one /64, each its own counter at /128
            for _ in range(2):
                assert (
                    http.post(
                        "/api/grants/verify", json={"token": "x"}, headers=from_(f"2001:db8::{i + 1}")
                    ).status_code
                    == 200
                )
        assert (
            http.post("/api/grants/verify", json={"token": "x"}, headers=from_("2001:db8::1")).status_code
            == 429
        )


def test_limits_are_off_when_zero(clocked, tmp_path):
    srv = clocked()  # every limit 0
    agent = signed_in(srv, tmp_path / "keys")
    with srv.client() as http:
        for _ in range(40):
            assert http.get("/api/me", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert http.post("/api/agent/challenge", json={"agent_id": agent.email}).status_code == 200
            assert http.post("/api/grants/verify", json={"token": "x"}).status_code == 200
    for _ in range(40):
        request_grant(srv, agent)


def test_defaults_are_documented():
    from grantd.config import SCHEMA

    defaults = {name: key.default for name, key in SCHEMA["limits"].items()}
    assert defaults == {
        "authenticate_per_agent": 120,
        "authenticate_per_address": 300,
        "enroll_per_address": 600,
        "enroll_per_principal": 120,
        "failed_bearer_per_address": 50,
        "grants_per_agent": 120,
        "pending_per_agent": 100,
        "verify_per_address": 6000,
        "streams_per_principal": 8,
        "streams_per_process": 1000,
        "passkey_per_person": 30,
        "passkey_per_address": 60,
        "device_code_per_address": 30,
        "token_per_client": 600,
        "token_per_address": 300,
        "sp_login_per_address": 60,
        "ipv6_prefix": 64,
        "streams_per_owner": 32,
        "agents_per_person": 100,
        "pending_per_owner": 200,
    }
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "[limits]" in readme


# -- shared by processes -------------------------------------------------------------------------------


@pytest.mark.slow
def test_counters_are_shared_by_two_servers_on_one_database(tmp_path):
    """Two `grantd serve` processes on one database (SQLite file or PostgreSQL): failures at either count for both."""
    shared = tmp_path / "shared" / "grantd.db"
    servers: list[Server] = []
    try:
        for name in ("a", "b"):
            srv = make_server(tmp_path / name, extra=limits_table(failed_bearer_per_address=4))
            trust_local_proxy(srv.config_path)
            if not (
                servers and pg.share_database(servers[0].directory, srv.directory)
            ):  # PostgreSQL: a's database
                srv.config_path.write_text(
                    srv.config_path.read_text().replace('path = "grantd.db"', f'path = "{shared}"')
                )
            servers.append(srv)
        a, b = (s.start() for s in servers)
        for attempt in range(3):  # the wall clock may cross a window's end mid-test: then try once more
            window = int(time.time()) // 60
            address = from_(f"198.51.100.{attempt + 20}")
            codes = []
            for srv in (a, b, a, b):
                with srv.client("wrong") as http:
                    codes.append(http.get("/api/me", headers=address).status_code)
            with a.admin() as ha, b.admin() as hb:
                after = [
                    ha.get("/api/me", headers=address).status_code,
                    hb.get("/api/me", headers=address).status_code,
                ]
                elsewhere = hb.get("/api/me", headers=from_("198.51.100.99")).status_code
            with a.client("wrong") as wa, b.client("wrong") as wb:
                after += [
                    wa.get("/api/me", headers=address).status_code,
                    wb.get("/api/me", headers=address).status_code,
                ]
            if int(time.time()) // 60 == window:
                break
        assert codes == [401, 401, 401, 401]
        # four failures, two in each process: more wrong bearers are 429 in both; the right one still works
        assert after == [200, 200, 429, 429]
        assert elsewhere == 200
    finally:
        for srv in servers:
            srv.stop()
