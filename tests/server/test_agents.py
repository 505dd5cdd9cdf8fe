"""Agent enrolment, challenge-response sign-in and admin management, over real HTTP (D5)."""

from __future__ import annotations

import base64
import re
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.postgres import server_sql

from conftest import Agent, enroll, problem, sign_in, ssh_keygen, unique_email

# -- 1. enroll ------------------------------------------------------------------------------------


def test_enroll_returns_201_with_the_spec_body_and_admin_defaults(server, tmp_path):
    email = unique_email()
    _, public = ssh_keygen(tmp_path)
    with server.admin() as http:
        r = http.post(
            "/api/agent/enroll", json={"email": email.upper(), "name": "Deploy bot", "publicKey": public}
        )
    assert r.status_code == 201
    body = r.json()
    assert set(body) == {"agent_id", "email", "name", "owner", "approver", "status"}
    assert body["email"] == email.lower()
    assert body["status"] == "active"
    assert body["owner"] == body["approver"] == "admin@example.com"  # admin.management_identity
    assert re.fullmatch(r"agt_[A-Za-z0-9_-]{22}", body["agent_id"])


def test_enroll_keeps_given_owner_and_approver(server, tmp_path):
    agent = enroll(server, tmp_path, owner="Alice@Example.com", approver="bob@example.com")
    with server.admin() as http:
        body = http.get(f"/api/admin/agents/{agent.agent_id}").json()
    assert (body["owner"], body["approver"]) == ("alice@example.com", "bob@example.com")


def test_enroll_conflicts_on_duplicate_email_and_on_duplicate_key(server, tmp_path):
    agent = enroll(server, tmp_path)
    other_key = ssh_keygen(tmp_path, "other")[1]
    with server.admin() as http:
        r = http.post("/api/agent/enroll", json={"email": agent.email, "name": "x", "publicKey": other_key})
        assert r.status_code == 409
        assert "email" in problem(r)["detail"]
        # The same key with another comment is the same key.
        same_key = agent.public_key.rsplit(" ", 1)[0] + " another-comment"
        r = http.post("/api/agent/enroll", json={"email": unique_email(), "name": "x", "publicKey": same_key})
        assert r.status_code == 409
        assert "key" in problem(r)["detail"]


@pytest.mark.parametrize("key_type", ["rsa", "ecdsa"])
def test_enroll_refuses_keys_other_than_ed25519(server, tmp_path, key_type):
    _, public = ssh_keygen(tmp_path, f"k_{key_type}", key_type=key_type)
    with server.admin() as http:
        r = http.post("/api/agent/enroll", json={"email": unique_email(), "name": "x", "publicKey": public})
    assert r.status_code == 400
    assert problem(r)["field"] == "publicKey"


@pytest.mark.parametrize(
    "public_key",
    [
        "garbage",
        "ssh-ed25519 AAAA",
        "ssh-ed25519 !!!notbase64",
        "ssh-ed25519 " + base64.b64encode(b"x" * 51).decode(),
        42,
        "",
    ],
)
def test_enroll_refuses_keys_that_do_not_parse(server, public_key):
    with server.admin() as http:
        r = http.post(
            "/api/agent/enroll", json={"email": unique_email(), "name": "x", "publicKey": public_key}
        )
    assert r.status_code == 400, r.text
    problem(r)


@pytest.mark.parametrize("missing", ["email", "name", "publicKey"])
def test_enroll_names_the_missing_field(server, tmp_path, missing):
    body = {"email": unique_email(), "name": "x", "publicKey": ssh_keygen(tmp_path)[1]}
    del body[missing]
    with server.admin() as http:
        r = http.post("/api/agent/enroll", json=body)
    assert r.status_code == 400
    assert problem(r)["field"] == missing


def test_enroll_needs_admin_credentials(server, tmp_path, agent):
    body = {"email": unique_email(), "name": "x", "publicKey": ssh_keygen(tmp_path)[1]}
    with server.client() as http:
        r = http.post("/api/agent/enroll", json=body)
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        problem(r)
    with server.client(agent.token) as http:
        r = http.post("/api/agent/enroll", json=body)
        assert r.status_code == 403
        problem(r)
    with server.client("not-the-management-token") as http:
        r = http.post("/api/agent/enroll", json=body)
        assert r.status_code == 401
        problem(r)


# -- 2. challenge ---------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["/api/agent/challenge", "/api/auth/challenge"])
@pytest.mark.parametrize("field", ["agent_id", "id"])
@pytest.mark.parametrize("by", ["email", "agent_id"])
def test_challenge_accepts_id_or_email_in_either_field_on_both_routes(server, tmp_path, route, field, by):
    agent = enroll(server, tmp_path)
    with server.client() as http:
        r = http.post(route, json={field: getattr(agent, by)})
    assert r.status_code == 200
    assert re.fullmatch(r"[0-9a-f]{64}", r.json()["challenge"])


def test_challenge_for_unknown_agent_is_404(server):
    with server.client() as http:
        r = http.post("/api/agent/challenge", json={"agent_id": "nobody@example.com"})
    assert r.status_code == 404
    assert problem(r)["detail"] == "agent not found"


def test_challenge_without_identifier_is_400(server):
    with server.client() as http:
        r = http.post("/api/agent/challenge", json={})
    assert r.status_code == 400
    problem(r)


# -- 3. authenticate ------------------------------------------------------------------------------


def _challenge(server, agent: Agent) -> str:
    with server.client() as http:
        return http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]


def _authenticate(
    server, agent: Agent, challenge: str, signature: str, route="/api/agent/authenticate", field="agent_id"
):
    with server.client() as http:
        return http.post(route, json={field: agent.email, "challenge": challenge, "signature": signature})


@pytest.mark.parametrize("encoding", ["standard", "urlsafe", "unpadded"])
def test_authenticate_with_a_raw_signature_in_any_base64_form(server, tmp_path, encoding):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    raw = agent.private_key().sign(challenge.encode())
    sig = {
        "standard": base64.b64encode(raw).decode(),
        "urlsafe": base64.urlsafe_b64encode(raw).decode(),
        "unpadded": base64.b64encode(raw).decode().rstrip("="),
    }[encoding]
    r = _authenticate(server, agent, challenge, sig)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"token", "agent_id", "email", "name", "expires_in"}
    assert body["agent_id"] == agent.agent_id and body["email"] == agent.email and body["expires_in"] == 3600


def test_authenticate_with_ssh_keygen_signature_armored_and_bare(server, tmp_path):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    assert _authenticate(server, agent, challenge, agent.sign_ssh(challenge)).status_code == 200
    challenge = _challenge(server, agent)
    armored = agent.sign_ssh(challenge)
    bare = "".join(line for line in armored.splitlines() if not line.startswith("-----"))
    assert (
        _authenticate(server, agent, challenge, bare, route="/api/auth/authenticate", field="id").status_code
        == 200
    )


def test_ssh_signature_made_by_echo_with_a_newline_is_accepted(server, tmp_path):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    assert _authenticate(server, agent, challenge, agent.sign_ssh(challenge + "\n")).status_code == 200


def test_ssh_signature_in_another_namespace_is_refused(server, tmp_path):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    r = _authenticate(server, agent, challenge, agent.sign_ssh(challenge, namespace="file"))
    assert r.status_code == 401
    assert problem(r)["detail"] == "invalid signature"


def test_wrong_key_is_invalid_signature_and_burns_the_challenge(server, tmp_path):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    forged = base64.b64encode(Ed25519PrivateKey.generate().sign(challenge.encode())).decode()
    r = _authenticate(server, agent, challenge, forged)
    assert r.status_code == 401
    assert problem(r)["detail"] == "invalid signature"
    # Even the right signature cannot use a challenge that a failed attempt burnt.
    r = _authenticate(server, agent, challenge, agent.sign_raw(challenge))
    assert r.status_code == 401
    assert problem(r)["detail"] == "expired challenge"


def test_signature_over_something_else_is_refused(server, tmp_path):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    r = _authenticate(server, agent, challenge, agent.sign_raw(challenge + "\n"))
    assert r.status_code == 401 and problem(r)["detail"] == "invalid signature"


def test_used_challenge_is_expired(server, tmp_path):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    assert _authenticate(server, agent, challenge, agent.sign_raw(challenge)).status_code == 200
    r = _authenticate(server, agent, challenge, agent.sign_raw(challenge))
    assert r.status_code == 401
    assert problem(r)["detail"] == "expired challenge"


def test_challenge_older_than_60_seconds_is_expired(server, tmp_path):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    # Age the challenge in the server's real database (SQLite or PostgreSQL) instead of sleeping a minute.
    server_sql(
        server.directory,
        "UPDATE challenges SET expires_at = ? WHERE challenge = ?",
        (int(time.time() * 1000) - 1, challenge),
    )
    r = _authenticate(server, agent, challenge, agent.sign_raw(challenge))
    assert r.status_code == 401
    assert problem(r)["detail"] == "expired challenge"


def test_challenge_lifetime_is_60_seconds(server, tmp_path):
    agent = enroll(server, tmp_path)
    before = int(time.time() * 1000)
    challenge = _challenge(server, agent)
    ((expires_at,),) = server_sql(
        server.directory, "SELECT expires_at FROM challenges WHERE challenge = ?", (challenge,)
    )
    assert 59_000 <= expires_at - before <= 61_000


def test_challenge_of_one_agent_cannot_sign_in_another(server, tmp_path):
    alice, bob = enroll(server, tmp_path / "a"), enroll(server, tmp_path / "b")
    challenge = _challenge(server, alice)
    r = _authenticate(server, bob, challenge, bob.sign_raw(challenge))
    assert r.status_code == 401
    assert problem(r)["detail"] == "expired challenge"


@pytest.mark.parametrize("signature", ["", "AAAA", "not base64 at all ###", "A" * 9000, None, 12])
def test_malformed_signatures_are_4xx_never_500(server, tmp_path, signature):
    agent = enroll(server, tmp_path)
    challenge = _challenge(server, agent)
    r = _authenticate(server, agent, challenge, signature)
    assert r.status_code in (400, 401), r.text
    problem(r)


# -- 4. the token ---------------------------------------------------------------------------------


def test_token_is_an_eddsa_authn_jwt_that_verifies_against_the_jwks(server, agent):
    jwks = jwt.PyJWKSet.from_dict(server.admin().get("/.well-known/jwks.json").json())
    header = jwt.get_unverified_header(agent.token)
    assert header["alg"] == "EdDSA" and header["typ"] == "JWT"
    key = next(k for k in jwks.keys if k.key_id == header["kid"])
    claims = jwt.decode(agent.token, key.key, algorithms=["EdDSA"], audience="apes-cli", issuer=server.url)
    assert claims["sub"] == agent.email and claims["act"] == "agent"
    assert claims["exp"] - claims["iat"] == 3600 and claims["jti"]


def test_jwks_publishes_standard_okp_members_only(server):
    for key in server.client().get("/.well-known/jwks.json").json()["keys"]:
        assert set(key) == {"kty", "crv", "x", "kid", "alg", "use"}
        assert (key["kty"], key["crv"], key["alg"], key["use"]) == ("OKP", "Ed25519", "EdDSA", "sig")


def test_token_is_accepted_as_bearer(server, agent):
    with server.client(agent.token) as http:
        r = http.get("/api/me")
    assert r.status_code == 200
    assert r.json()["email"] == agent.email and r.json()["act"] == "agent"


def test_tampered_or_foreign_tokens_are_refused(server, agent):
    header, payload, sig = agent.token.split(".")
    forged_payload = (
        base64.urlsafe_b64encode(b'{"sub":"admin@example.com","act":"agent"}').decode().rstrip("=")
    )
    foreign = jwt.encode(
        {
            "sub": agent.email,
            "act": "agent",
            "iss": server.url,
            "aud": "apes-cli",
            "iat": int(time.time()),
            "exp": int(time.time()) + 60,
        },
        Ed25519PrivateKey.generate(),
        algorithm="EdDSA",
        headers={"kid": jwt.get_unverified_header(agent.token)["kid"]},
    )
    for token in (f"{header}.{forged_payload}.{sig}", foreign, agent.token + "x", "a.b.c"):
        with server.client(token) as http:
            r = http.get("/api/me")
        assert r.status_code == 401, token
        assert problem(r)["detail"].startswith("invalid token")


# -- 5. admin agent management --------------------------------------------------------------------


def test_admin_lists_gets_updates_and_deletes_agents(server, tmp_path):
    agent = enroll(server, tmp_path)
    with server.admin() as http:
        listed = http.get("/api/admin/agents", params={"limit": 100}).json()
        assert any(a["agent_id"] == agent.agent_id for a in listed["data"])
        assert set(listed["pagination"]) == {"cursor", "has_more"}
        by_email = http.get(f"/api/admin/agents/{agent.email}").json()
        assert by_email["agent_id"] == agent.agent_id and by_email["publicKey"].startswith("ssh-ed25519 ")
        r = http.put(
            f"/api/admin/agents/{agent.agent_id}",
            json={"name": "Renamed", "owner": "o@example.com", "approver": "a@example.com"},
        )
        assert r.status_code == 200
        assert (r.json()["name"], r.json()["owner"], r.json()["approver"]) == (
            "Renamed",
            "o@example.com",
            "a@example.com",
        )
        r = http.post(
            "/api/admin/agents",
            json={"email": unique_email(), "name": "via admin", "publicKey": ssh_keygen(tmp_path, "k2")[1]},
        )
        assert r.status_code == 201
        assert http.delete(f"/api/admin/agents/{agent.agent_id}").status_code == 200
        assert problem(http.get(f"/api/admin/agents/{agent.agent_id}"))["status"] == 404
        assert http.delete(f"/api/admin/agents/{agent.agent_id}").status_code == 404
    with server.client() as http:
        assert http.post("/api/agent/challenge", json={"agent_id": agent.email}).status_code == 404


def test_admin_list_paginates(server, tmp_path):
    for i in range(3):
        enroll(server, tmp_path / str(i))
    seen: list[dict] = []
    cursor = None
    with server.admin() as http:
        while True:
            page = http.get(
                "/api/admin/agents", params={"limit": 2, **({"cursor": cursor} if cursor else {})}
            ).json()
            seen += page["data"]
            if not page["pagination"]["has_more"]:
                break
            cursor = page["pagination"]["cursor"]
    # newest first, like every list (grantd.core.paging), each agent once
    order = [(a["created_at"], a["agent_id"]) for a in seen]
    assert order == sorted(order, reverse=True) and len(set(order)) == len(order) >= 3


def test_disabled_agent_gets_no_challenge_and_its_token_stops_working(server, tmp_path):
    agent = enroll(server, tmp_path)
    sign_in(server, agent)
    with server.admin() as http:
        assert (
            http.put(f"/api/admin/agents/{agent.agent_id}", json={"status": "disabled"}).json()["status"]
            == "disabled"
        )
    with server.client() as http:
        r = http.post("/api/agent/challenge", json={"agent_id": agent.email})
        assert r.status_code == 403 and problem(r)["detail"] == "agent is disabled"
    with server.client(agent.token) as http:
        assert http.get("/api/me").status_code == 401
    with server.admin() as http:
        assert (
            http.put(f"/api/admin/agents/{agent.agent_id}", json={"isActive": True}).json()["status"]
            == "active"
        )
    sign_in(server, agent)


def test_key_replacement_switches_the_key_that_signs_in(server, tmp_path):
    agent = enroll(server, tmp_path)
    new_path, new_public = ssh_keygen(tmp_path, "replacement")
    with server.admin() as http:
        assert http.put(f"/api/admin/agents/{agent.email}", json={"publicKey": new_public}).status_code == 200
    challenge = _challenge(server, agent)
    assert _authenticate(server, agent, challenge, agent.sign_raw(challenge)).status_code == 401
    agent.key_path = new_path
    sign_in(server, agent)


def test_update_refuses_bad_values_and_key_of_another_agent(server, tmp_path):
    alice, bob = enroll(server, tmp_path / "a"), enroll(server, tmp_path / "b")
    with server.admin() as http:
        assert (
            http.put(f"/api/admin/agents/{alice.agent_id}", json={"publicKey": bob.public_key}).status_code
            == 409
        )
        assert http.put(f"/api/admin/agents/{alice.agent_id}", json={"status": "sleeping"}).status_code == 400
        assert (
            http.put(f"/api/admin/agents/{alice.agent_id}", json={"owner": "not-an-email"}).status_code == 400
        )
        assert http.put(f"/api/admin/agents/{alice.agent_id}", json={"colour": "red"}).status_code == 400
        assert http.put(f"/api/admin/agents/{alice.agent_id}", content=b"[1,2]").status_code == 400


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/admin/agents"),
        ("POST", "/api/admin/agents"),
        ("GET", "/api/admin/agents/x"),
        ("PUT", "/api/admin/agents/x"),
        ("DELETE", "/api/admin/agents/x"),
    ],
)
def test_admin_routes_need_admin_credentials(server, agent, method, path):
    with server.client() as http:
        assert http.request(method, path, json={}).status_code == 401
    with server.client(agent.token) as http:
        assert http.request(method, path, json={}).status_code == 403
