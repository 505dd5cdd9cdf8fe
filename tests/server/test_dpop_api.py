"""DPoP (RFC 9449, D16) wired into grantd: agent tokens bound to the enrolled key (`cnf.jkt`) at
/api/agent/authenticate and /token, checked on the API and at consume, with the replay table in the
store. Each rule is tried with the one thing a thief or a buggy client would change."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from inproc import InProcessServer

from grantd.dpop import ath_of, make_proof, thumbprint_of_ssh_key

from authz_world import NO_LIMITS
from conftest import Agent, enroll, ssh_keygen

COMMAND = ["systemctl", "restart", "nginx"]


def proof(
    srv: InProcessServer,
    agent: Agent,
    method: str,
    path: str,
    *,
    token: str | None = None,
    key: Ed25519PrivateKey | None = None,
    url: str | None = None,
    iat: int | None = None,
    nonce: str | None = None,
    **extra: Any,
) -> str:
    return make_proof(
        key or agent.private_key(),
        method=method,
        url=url or srv.url + path,
        iat=iat if iat is not None else srv.clock.now_s(),
        jti=str(uuid.uuid4()),
        access_token=token,
        nonce=nonce,
        **extra,
    )


def bound_sign_in(srv: InProcessServer, agent: Agent, *, nonce: str | None = None) -> httpx.Response:
    with srv.client() as http:
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
        return http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": challenge, "signature": agent.sign_raw(challenge)},
            headers={"DPoP": proof(srv, agent, "POST", "/api/agent/authenticate", nonce=nonce)},
        )


def plain_sign_in(srv: InProcessServer, agent: Agent) -> httpx.Response:
    with srv.client() as http:
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
        return http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": challenge, "signature": agent.sign_raw(challenge)},
        )


def dpop_call(
    srv: InProcessServer, method: str, path: str, token: str, dpop: str | None, **kw: Any
) -> httpx.Response:
    headers = {"Authorization": f"DPoP {token}"}
    if dpop is not None:
        headers["DPoP"] = dpop
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        return http.request(method, path, headers=headers, **kw)


def claims(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("dpop"), extra=NO_LIMITS).start()
    yield server
    server.stop()


@pytest.fixture
def agent(srv: InProcessServer, tmp_path: Path) -> Agent:
    return enroll(srv, tmp_path)  # type: ignore[arg-type]


@pytest.fixture
def bound(srv: InProcessServer, agent: Agent) -> Agent:
    r = bound_sign_in(srv, agent)
    assert r.status_code == 200, r.text
    agent.token = r.json()["token"]
    return agent


def test_a_proof_at_sign_in_binds_the_token_to_the_enrolled_key(srv, agent):
    r = bound_sign_in(srv, agent)
    assert r.status_code == 200, r.text
    assert r.json()["token_type"] == "DPoP"
    assert claims(r.json()["token"])["cnf"] == {"jkt": thumbprint_of_ssh_key(agent.public_key)}


def test_without_a_proof_the_token_stays_a_bearer_by_default(srv, agent):
    """`agent_dpop = "optional"` (the default): the peer CLI's sign-in and bearer calls work."""
    r = plain_sign_in(srv, agent)
    assert r.status_code == 200, r.text
    assert "cnf" not in claims(r.json()["token"]) and "token_type" not in r.json()
    with srv.client(r.json()["token"]) as http:
        assert http.get("/api/me").status_code == 200


def test_a_bound_token_works_with_a_fresh_proof(srv, bound):
    r = dpop_call(srv, "GET", "/api/me", bound.token, proof(srv, bound, "GET", "/api/me", token=bound.token))
    assert r.status_code == 200, r.text
    assert r.json()["email"] == bound.email


def test_a_bound_token_sent_as_bearer_is_401(srv, bound):
    with srv.client(bound.token) as http:
        r = http.get("/api/me", headers={"DPoP": proof(srv, bound, "GET", "/api/me", token=bound.token)})
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("DPoP ")
    assert 'error="invalid_token"' in r.headers["www-authenticate"]


def test_an_unbound_token_sent_as_dpop_is_401(srv, agent):
    token = plain_sign_in(srv, agent).json()["token"]
    r = dpop_call(srv, "GET", "/api/me", token, proof(srv, agent, "GET", "/api/me", token=token))
    assert r.status_code == 401


def test_a_bound_token_without_a_proof_is_401(srv, bound):
    r = dpop_call(srv, "GET", "/api/me", bound.token, None)
    assert r.status_code == 401
    assert 'DPoP error="invalid_dpop_proof"' in r.headers["www-authenticate"]


def test_a_replayed_proof_is_401(srv, bound):
    p = proof(srv, bound, "GET", "/api/me", token=bound.token)
    assert dpop_call(srv, "GET", "/api/me", bound.token, p).status_code == 200
    r = dpop_call(srv, "GET", "/api/me", bound.token, p)
    assert r.status_code == 401
    assert 'error="invalid_dpop_proof"' in r.headers["www-authenticate"]
    assert "replayed" in r.json()["detail"]


def test_two_dpop_headers_are_401(srv, bound):
    headers = [
        ("Authorization", f"DPoP {bound.token}"),
        ("DPoP", proof(srv, bound, "GET", "/api/me", token=bound.token)),
        ("DPoP", proof(srv, bound, "GET", "/api/me", token=bound.token)),
    ]
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        r = http.get("/api/me", headers=httpx.Headers(headers))
    assert r.status_code == 401


def test_htu_is_the_issuer_not_the_host_header(srv, bound):
    """A proof for the URL the client reached through another Host (`localhost` instead of the
    issuer's 127.0.0.1) is refused, and the Host header cannot make it right."""
    other = srv.url.replace("127.0.0.1", "localhost") + "/api/me"
    p = proof(srv, bound, "GET", "/api/me", token=bound.token, url=other)
    headers = {"Authorization": f"DPoP {bound.token}", "DPoP": p, "Host": f"localhost:{srv.port}"}
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        r = http.get("/api/me", headers=headers)
    assert r.status_code == 401
    assert "htu" in r.json()["detail"]


@pytest.mark.parametrize(
    "change",
    ["htm", "path", "ath", "stale", "future", "other_key", "typ", "alg", "private_jwk"],
)
def test_a_proof_that_does_not_hold_is_401(srv, bound, tmp_path, change):
    kw: dict[str, Any] = {"token": bound.token}
    method, path = "GET", "/api/me"
    if change == "htm":
        method = "POST"
    elif change == "path":
        path = "/api/grants"
    elif change == "ath":
        kw["token"] = bound.token + "x"
    elif change == "stale":
        kw["iat"] = srv.clock.now_s() - 120
    elif change == "future":
        kw["iat"] = srv.clock.now_s() + 120
    elif change == "other_key":
        other = enroll(srv, tmp_path / "other")  # type: ignore[arg-type]
        kw["key"] = other.private_key()
    elif change == "typ":
        kw["header_extra"] = {"typ": "JWT"}
    elif change == "alg":
        kw["header_extra"] = {"alg": "ES256"}
    elif change == "private_jwk":
        from grantd.dpop import b64url

        raw = bound.private_key().private_bytes_raw()
        jwk = {"kty": "OKP", "crv": "Ed25519", "x": claims_x(bound), "d": b64url(raw)}
        kw["header_extra"] = {"jwk": jwk}
    r = dpop_call(srv, "GET", "/api/me", bound.token, proof(srv, bound, method, path, **kw))
    assert r.status_code == 401, r.text
    assert 'error="invalid_dpop_proof"' in r.headers["www-authenticate"]


def claims_x(agent: Agent) -> str:
    from cryptography.hazmat.primitives import serialization

    from grantd.dpop import b64url

    raw = (
        agent.private_key()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return b64url(raw)


def test_a_key_replaced_mid_session_kills_the_bound_token(srv, bound, tmp_path):
    _, public = ssh_keygen(tmp_path / "new", name="replacement")
    with srv.admin() as http:
        r = http.put(f"/api/admin/agents/{bound.agent_id}", json={"publicKey": public})
    assert r.status_code == 200, r.text
    r = dpop_call(srv, "GET", "/api/me", bound.token, proof(srv, bound, "GET", "/api/me", token=bound.token))
    assert r.status_code == 401


def _approved_bound_grant(srv: InProcessServer, agent: Agent) -> tuple[str, str]:
    p = proof(srv, agent, "POST", "/api/grants", token=agent.token)
    body = {"target_host": "web-1", "audience": "escapes", "command": COMMAND}
    r = dpop_call(srv, "POST", "/api/grants", agent.token, p, json=body)
    assert r.status_code == 201, r.text
    grant_id = r.json()["id"]
    with srv.admin() as http:
        r = http.post(f"/api/grants/{grant_id}/approve", json={})
    assert r.status_code == 200, r.text
    return grant_id, r.json()["authz_jwt"]


def test_a_grant_requested_with_a_bound_token_gets_a_bound_authz_jwt(srv, bound):
    grant_id, authz = _approved_bound_grant(srv, bound)
    assert claims(authz)["cnf"] == {"jkt": thumbprint_of_ssh_key(bound.public_key)}
    path = f"/api/grants/{grant_id}/consume"
    # the bare JWT (a copy from a log) is refused, as Bearer and as DPoP without a proof
    with srv.client(authz) as http:
        assert http.post(path).status_code == 401
    assert dpop_call(srv, "POST", path, authz, None).status_code == 401
    # a proof for another token, or replayed, is refused; a fresh one consumes it once
    assert (
        dpop_call(srv, "POST", path, authz, proof(srv, bound, "POST", path, token=bound.token)).status_code
        == 401
    )
    good = proof(srv, bound, "POST", path, token=authz)
    r = dpop_call(srv, "POST", path, authz, good)
    assert r.status_code == 200 and r.json()["status"] == "consumed", r.text
    assert ath_of(authz) == claims(good)["ath"]
    assert dpop_call(srv, "POST", path, authz, good).status_code == 401  # replay


def test_an_unbound_grant_consumes_as_before(srv, agent):
    token = plain_sign_in(srv, agent).json()["token"]
    with srv.client(token) as http:
        r = http.post("/api/grants", json={"target_host": "web-1", "audience": "escapes", "command": COMMAND})
    grant_id = r.json()["id"]
    with srv.admin() as http:
        authz = http.post(f"/api/grants/{grant_id}/approve", json={}).json()["authz_jwt"]
    assert "cnf" not in claims(authz)
    with srv.client(authz) as http:
        assert http.post(f"/api/grants/{grant_id}/consume").json()["status"] == "consumed"


def _assertion(srv: InProcessServer, agent: Agent) -> dict[str, str]:
    now = srv.clock.now_s()
    assertion = jwt.encode(
        {
            "iss": agent.email,
            "sub": agent.email,
            "aud": f"{srv.url}/token",
            "exp": now + 60,
            "jti": str(uuid.uuid4()),
        },
        agent.private_key(),
        algorithm="EdDSA",
    )
    return {
        "grant_type": "client_credentials",
        "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        "client_assertion": assertion,
    }


def test_token_endpoint_binds_with_a_proof_and_refuses_a_bad_one(srv, agent):
    with srv.client() as http:
        r = http.post(
            "/token", data=_assertion(srv, agent), headers={"DPoP": proof(srv, agent, "POST", "/token")}
        )
        assert r.status_code == 200, r.text
        assert r.json()["token_type"] == "DPoP"
        assert claims(r.json()["access_token"])["cnf"]["jkt"] == thumbprint_of_ssh_key(agent.public_key)
        bad = proof(srv, agent, "POST", "/api/me")
        r = http.post("/token", data=_assertion(srv, agent), headers={"DPoP": bad})
        assert r.status_code == 400
        assert r.json()["error"] == "invalid_dpop_proof"
        r = http.post("/token", data=_assertion(srv, agent))
        assert r.status_code == 200 and r.json()["token_type"] == "Bearer"


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    extra = NO_LIMITS + '\n[tokens]\nagent_dpop = "required"\ndpop_nonce = true\n'
    server = InProcessServer(tmp_path_factory.mktemp("dpop-strict"), extra=extra).start()
    yield server
    server.stop()


def test_required_refuses_unbound_agent_tokens(strict, tmp_path):
    agent = enroll(strict, tmp_path)  # type: ignore[arg-type]
    r = plain_sign_in(strict, agent)
    assert r.status_code == 401
    assert 'error="invalid_dpop_proof"' in r.headers["www-authenticate"]
    with strict.client() as http:
        r = http.post("/token", data=_assertion(strict, agent))
    assert r.status_code == 400 and r.json()["error"] == "invalid_dpop_proof"


def test_server_nonces_are_required_and_offered(strict, tmp_path):
    agent = enroll(strict, tmp_path)  # type: ignore[arg-type]
    with strict.client() as http:
        r = http.post(
            "/token", data=_assertion(strict, agent), headers={"DPoP": proof(strict, agent, "POST", "/token")}
        )
        assert r.status_code == 400 and r.json()["error"] == "use_dpop_nonce", r.text
        nonce = r.headers["dpop-nonce"]
        r = http.post(
            "/token",
            data=_assertion(strict, agent),
            headers={"DPoP": proof(strict, agent, "POST", "/token", nonce=nonce)},
        )
        assert r.status_code == 200, r.text
    token = r.json()["access_token"]
    r = dpop_call(strict, "GET", "/api/me", token, proof(strict, agent, "GET", "/api/me", token=token))
    assert r.status_code == 401 and 'error="use_dpop_nonce"' in r.headers["www-authenticate"]
    assert r.headers["dpop-nonce"] == nonce
    good = proof(strict, agent, "GET", "/api/me", token=token, nonce=nonce)
    assert dpop_call(strict, "GET", "/api/me", token, good).status_code == 200
    # an old nonce (two time steps later) is refused
    strict.clock.advance(700)
    late = proof(strict, agent, "GET", "/api/me", token=token, nonce=nonce)
    r = dpop_call(strict, "GET", "/api/me", token, late)
    assert r.status_code == 401 and r.headers["dpop-nonce"] != nonce


def test_a_proof_replayed_at_another_node_is_refused(srv, bound, tmp_path):
    """Two nodes (two servers, one issuer, one SQLite database): a proof used at one is a replay at
    the other — the replay table is the database's, not a process's memory."""
    db = tmp_path / "shared.db"
    first = InProcessServer(tmp_path / "n1", extra=NO_LIMITS, storage=f'plugin = "sqlite"\npath = "{db}"')
    second = InProcessServer(tmp_path / "n2", extra=NO_LIMITS, storage=f'plugin = "sqlite"\npath = "{db}"')
    for node in (first, second):
        text = node.config_path.read_text().replace("[server]\n", f'[server]\nissuer = "{first.url}"\n', 1)
        node.config_path.write_text(text)
    first.start()
    try:
        second.token = first.token
        (second.directory / "management-token").write_text(first.token + "\n")
        second.start()
        try:
            agent = enroll(first, tmp_path / "keys")  # type: ignore[arg-type]
            r = bound_sign_in(first, agent)
            assert r.status_code == 200, r.text
            token = r.json()["token"]
            p = proof(first, agent, "GET", "/api/me", token=token)  # htu: the shared issuer
            assert dpop_call(first, "GET", "/api/me", token, p).status_code == 200
            r = dpop_call(second, "GET", "/api/me", token, p)
            assert r.status_code == 401 and "replayed" in r.json()["detail"], r.text
            fresh = proof(first, agent, "GET", "/api/me", token=token)
            assert dpop_call(second, "GET", "/api/me", token, fresh).status_code == 200  # the node works
        finally:
            second.stop()
    finally:
        first.stop()


def test_a_bound_agents_event_stream_outlives_its_proof(srv, bound):
    """The stream's credential is checked again while it runs (D11); the proof it began with is not
    replayed for that (its jti is spent), but the binding still is: a re-key ends the stream."""
    path = "/api/grants/events"
    headers = {
        "Authorization": f"DPoP {bound.token}",
        "DPoP": proof(srv, bound, "GET", path, token=bound.token),
    }
    body = {"target_host": "web-1", "audience": "escapes", "command": COMMAND}
    with (
        httpx.Client(base_url=srv.url, timeout=10) as http,
        http.stream("GET", path, headers=headers) as stream,
    ):
        assert stream.status_code == 200
        lines = stream.iter_lines()
        for _ in range(3):  # events after the credential re-check interval (the clock moves 2 s each)
            srv.clock.advance(2)
            r = dpop_call(
                srv,
                "POST",
                "/api/grants",
                bound.token,
                proof(srv, bound, "POST", "/api/grants", token=bound.token),
                json=body,
            )
            assert r.status_code in (200, 201), r.text
            found = False
            for line in lines:
                if line.startswith("data:") and r.json()["id"] in line:
                    found = True
                    break
            assert found, "the stream ended"
