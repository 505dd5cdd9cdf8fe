"""Attacks on grantd's OAuth tokens (issue 19): refresh tokens, which tokens are bearers, SP-login guests, the device grant and client_credentials assertions. Shared fixtures: test_oauth_attacks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from inproc import InProcessServer
from oauth_support import (
    TOOL,
    WIKI,
    Person,
    authorize_params,
    login,
    query_of,
    token_post,
)
from people_support import SESSION_COOKIE, new_public_key

from server import test_oauth_attacks

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
SECRET = test_oauth_attacks.SECRET
bearer = test_oauth_attacks.bearer
claims_of = test_oauth_attacks.claims_of
code_login = test_oauth_attacks.code_login
person = test_oauth_attacks.person
srv = test_oauth_attacks.srv


# -- refresh tokens ---------------------------------------------------------------------------------


def test_racing_refreshes_of_one_token_have_one_winner_and_then_the_family_dies(
    srv: InProcessServer, person: Person
) -> None:
    tokens = login(srv, person)
    results: list[httpx.Response] = []

    def go() -> None:
        results.append(
            token_post(
                srv,
                {
                    "grant_type": "refresh_token",
                    "refresh_token": tokens["refresh_token"],
                    "client_id": "apes-cli",
                },
            )
        )

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.status_code == 200]
    assert len(winners) <= 1
    for won in winners:  # a reuse happened: the winner's tokens are dead too
        assert bearer(srv, won.json()["access_token"]).status_code == 401
        again = token_post(
            srv,
            {
                "grant_type": "refresh_token",
                "refresh_token": won.json()["refresh_token"],
                "client_id": "apes-cli",
            },
        )
        assert again.json()["error"] == "invalid_grant"


def test_a_confidential_clients_refresh_token_needs_its_secret(srv: InProcessServer, person: Person) -> None:
    tokens = code_login(srv, person, "wiki", WIKI, scope="openid offline_access")
    body = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
    assert token_post(srv, {**body, "client_id": "wiki"}).status_code == 401
    assert token_post(srv, {**body, "client_id": "apes-cli"}).json()["error"] == "invalid_grant"
    # no client named at all: the family's client is confidential, so it must still authenticate (D9)
    anonymous = token_post(srv, body)
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "invalid_client"
    assert "confidential" in anonymous.json()["error_description"]
    assert token_post(srv, {**body, "client_id": "wiki", "client_secret": SECRET}).status_code == 200


def test_refresh_cannot_widen_by_repeats_or_case(srv: InProcessServer, person: Person) -> None:
    tokens = code_login(srv, person, "wiki", WIKI, scope="openid offline_access")
    for scope in ("openid email", "OPENID", "openid openid email"):
        refused = token_post(
            srv,
            {
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": "wiki",
                "client_secret": SECRET,
                "scope": scope,
            },
        )
        assert refused.json()["error"] == "invalid_scope", refused.text


# -- which tokens are bearers --------------------------------------------------------------------------


def test_no_sp_or_id_or_refresh_token_is_an_api_bearer(srv: InProcessServer, person: Person) -> None:
    wiki = code_login(srv, person, "wiki", WIKI, scope="openid email profile offline_access")
    apes = login(srv, person)
    for token in (
        wiki["access_token"],
        wiki["id_token"],
        wiki["refresh_token"],
        apes["id_token"],
        apes["refresh_token"],
    ):
        assert bearer(srv, token).status_code == 401
        assert bearer(srv, token, "/api/grants").status_code == 401
    for token in (wiki["id_token"], apes["id_token"], apes["refresh_token"]):
        assert bearer(srv, token, "/userinfo").status_code == 401


def test_an_agents_identity_token_is_no_userinfo_bearer(srv: InProcessServer) -> None:
    key, public = new_public_key()
    with srv.admin() as http:
        r = http.post(
            "/api/agent/enroll",
            json={"email": f"agent+ui{uuid.uuid4().hex[:6]}@example.com", "name": "ui", "publicKey": public},
        )
    assert r.status_code == 201
    from people_support import agent_token

    token = agent_token(srv, r.json()["agent_id"], key)
    assert bearer(srv, token, "/userinfo").status_code == 401
    assert bearer(srv, srv.token, "/userinfo").status_code == 401


def test_a_device_clients_token_cannot_approve_another_terminal(srv: InProcessServer, person: Person) -> None:
    apes = login(srv, person)
    with httpx.Client(base_url=srv.url) as http:
        started = http.post("/device_authorization", data={"client_id": "grantd-cli"}).json()
    refused = bearer(
        srv,
        apes["access_token"],
        "/api/device/decide",
        "POST",
        json={"user_code": started["user_code"], "approve": True},
    )
    assert refused.status_code == 403


def test_a_withdrawn_consent_ends_a_refreshless_token_at_userinfo(
    srv: InProcessServer, person: Person
) -> None:
    tokens = code_login(
        srv, person, "wiki", WIKI, scope="openid email"
    )  # no offline_access: no refresh token
    assert (
        "refresh_token" not in tokens and claims_of(tokens["access_token"])["sid"]
    )  # but a family all the same
    assert bearer(srv, tokens["access_token"], "/userinfo").status_code == 200
    with person.http() as http:
        assert http.delete("/api/account/consents/wiki", headers={"Origin": srv.url}).status_code == 200
    assert bearer(srv, tokens["access_token"], "/userinfo").status_code == 401
    srv.clock.advance(2)
    fresh = code_login(srv, person, "wiki", WIKI, scope="openid email")  # consent given anew
    assert bearer(srv, fresh["access_token"], "/userinfo").status_code == 200
    assert bearer(srv, tokens["access_token"], "/userinfo").status_code == 401  # the old one stays dead


def test_a_withdrawn_consent_ends_a_refreshless_token_on_the_api(
    srv: InProcessServer, person: Person
) -> None:
    tokens = code_login(srv, person, "tool", TOOL, scope="openid email")
    assert "refresh_token" not in tokens and claims_of(tokens["access_token"])["sid"]
    assert bearer(srv, tokens["access_token"]).status_code == 200
    with person.http() as http:
        assert http.delete("/api/account/consents/tool", headers={"Origin": srv.url}).status_code == 200
    assert bearer(srv, tokens["access_token"]).status_code == 401


# -- guests of SP login ---------------------------------------------------------------------------------


@pytest.fixture
def guest(srv: InProcessServer) -> httpx.Client:
    from grantd.services import sessions

    cookie, _ = srv.call(
        sessions.start_guest(
            srv.services,
            idp="https://idp.evil.example",
            email="root@example.com",
            name="Root",
            user_agent="pytest",
        )
    )
    return httpx.Client(
        base_url=srv.url, cookies={SESSION_COOKIE: cookie}, timeout=10, follow_redirects=False
    )


def test_a_guest_session_gets_no_code_no_consent_no_device_approval(
    srv: InProcessServer, guest: httpx.Client
) -> None:
    with guest as http:
        assert http.get("/api/me").json()["kind"] == "guest"
        answer = http.get("/authorize?" + urlencode(authorize_params()))
        assert answer.status_code == 303 and answer.headers["location"].startswith("/login?")
        silent = http.get("/authorize?" + urlencode(authorize_params(prompt="none")))
        assert query_of(silent.headers["location"])["error"] == "login_required"
        consent = http.post(
            "/authorize/consent",
            json={"request": urlencode(authorize_params()), "approve": True},
            headers={"Origin": srv.url},
        )
        assert consent.status_code == 401
        started = httpx.post(f"{srv.url}/device_authorization", data={"client_id": "grantd-cli"}).json()
        decided = http.post(
            "/api/device/decide",
            json={"user_code": started["user_code"], "approve": True},
            headers={"Origin": srv.url},
        )
        assert decided.status_code == 403
        assert http.get("/api/account/consents").status_code == 403
        assert http.get("/device", params={"user_code": started["user_code"]}).status_code in (303, 403)


# -- device grant --------------------------------------------------------------------------------------


def test_a_device_decision_cannot_be_forged_cross_site(srv: InProcessServer, person: Person) -> None:
    with httpx.Client(base_url=srv.url) as http:
        started = http.post("/device_authorization", data={"client_id": "grantd-cli"}).json()
    with person.http() as http:
        cross = http.post(
            "/api/device/decide",
            json={"user_code": started["user_code"], "approve": True},
            headers={"Origin": "https://evil.example"},
        )
        assert cross.status_code == 403
        form = http.post("/api/device/decide", data={"user_code": started["user_code"], "approve": "true"})
        assert form.status_code in (400, 415)
        got = http.get("/api/device/decide", params={"user_code": started["user_code"], "approve": "true"})
        assert got.status_code in (404, 405)
    poll = token_post(
        srv,
        {
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": started["device_code"],
            "client_id": "grantd-cli",
        },
    )
    assert poll.json()["error"] == "authorization_pending"


def test_another_person_cannot_redecide_a_device_request(srv: InProcessServer, person: Person) -> None:
    with httpx.Client(base_url=srv.url) as http:
        started = http.post("/device_authorization", data={"client_id": "grantd-cli"}).json()
    with person.http() as http:
        assert (
            http.post(
                "/api/device/decide",
                json={"user_code": started["user_code"], "approve": False},
                headers={"Origin": srv.url},
            ).status_code
            == 200
        )
    other = Person(srv)
    with other.http() as http:
        assert (
            http.post(
                "/api/device/decide",
                json={"user_code": started["user_code"], "approve": True},
                headers={"Origin": srv.url},
            ).status_code
            == 409
        )
    poll = token_post(
        srv,
        {
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": started["device_code"],
            "client_id": "grantd-cli",
        },
    )
    assert poll.json()["error"] == "access_denied"


def test_device_user_codes_cannot_be_guessed_at_speed(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path, extra="[limits]\ndevice_code_per_address = 5\n").start()
    try:
        victim = Person(server)
        started = httpx.post(f"{server.url}/device_authorization", data={"client_id": "grantd-cli"}).json()
        with victim.http() as http:
            for _ in range(5):
                http.post(
                    "/api/device/decide",
                    json={"user_code": "BBBB-BBBB", "approve": True},
                    headers={"Origin": server.url},
                )
            right = http.post(
                "/api/device/decide",
                json={"user_code": started["user_code"], "approve": True},
                headers={"Origin": server.url},
            )
            assert right.status_code == 429  # even the right code, once over the limit
            assert http.get("/device", params={"user_code": started["user_code"]}).status_code == 429
    finally:
        server.stop()


# -- client_credentials assertions --------------------------------------------------------------------


@pytest.fixture
def agent(srv: InProcessServer) -> tuple[dict[str, Any], Any, str]:
    key, public = new_public_key()
    email = f"agent+atk{uuid.uuid4().hex[:8]}@example.com"
    with srv.admin() as http:
        r = http.post("/api/agent/enroll", json={"email": email, "name": "atk", "publicKey": public})
    assert r.status_code == 201, r.text
    return r.json(), key, public


def claims_for(srv: InProcessServer, ident: str, **change: Any) -> dict[str, Any]:
    now = srv.clock.now_s()
    claims = {
        "iss": ident,
        "sub": ident,
        "aud": f"{srv.url}/token",
        "iat": now,
        "exp": now + 120,
        "jti": uuid.uuid4().hex,
        **change,
    }
    return {k: v for k, v in claims.items() if v is not None}


def cc(srv: InProcessServer, assertion: str, **extra: str) -> httpx.Response:
    return token_post(
        srv,
        {
            "grant_type": "client_credentials",
            "client_assertion": assertion,
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            **extra,
        },
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"") -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}.{_b64(signature)}"


def test_assertion_alg_confusion_is_refused(srv: InProcessServer, agent: Any) -> None:
    record, _, public = agent
    claims = claims_for(srv, record["email"])
    assert cc(srv, unsigned({"alg": "none", "typ": "JWT"}, claims)).status_code == 401
    assert cc(srv, unsigned({"alg": "None"}, claims)).status_code == 401
    for secret in (public.encode(), public.split()[1].encode()):  # HS256 keyed with the public key
        header = _b64(b'{"alg":"HS256","typ":"JWT"}')
        body = _b64(json.dumps(claims).encode())
        mac = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
        assert cc(srv, f"{header}.{body}.{_b64(mac)}").status_code == 401
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert cc(srv, jwt.encode(claims, rsa_key, algorithm="RS256")).status_code == 401
    pem = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert (
        cc(srv, jwt.encode(claims, pem, algorithm="RS256", headers={"jwk": {"kty": "RSA"}})).status_code
        == 401
    )


def test_assertion_audience_and_replay_tricks(srv: InProcessServer, agent: Any) -> None:
    record, key, _ = agent
    for aud in (srv.url, f"{srv.url}/token/", f"{srv.url}/userinfo", "apes-cli", [f"{srv.url}/x"]):
        assert (
            cc(srv, jwt.encode(claims_for(srv, record["email"], aud=aud), key, algorithm="EdDSA")).status_code
            == 401
        )
    jti = uuid.uuid4().hex
    assert (
        cc(srv, jwt.encode(claims_for(srv, record["email"], jti=jti), key, algorithm="EdDSA")).status_code
        == 200
    )
    # the same jti under the agent's other name, or with another exp: still a replay
    assert (
        cc(srv, jwt.encode(claims_for(srv, record["agent_id"], jti=jti), key, algorithm="EdDSA")).status_code
        == 401
    )
    later = claims_for(srv, record["email"], jti=jti, exp=srv.clock.now_s() + 200)
    assert cc(srv, jwt.encode(later, key, algorithm="EdDSA")).status_code == 401
    for exp in (srv.clock.now_s() + 10**9, float(srv.clock.now_s() + 60), str(srv.clock.now_s() + 60), True):
        odd = claims_for(srv, record["email"], exp=exp)
        assert cc(srv, jwt.encode(odd, key, algorithm="EdDSA")).status_code == 401
    other = claims_for(srv, record["email"])
    assert cc(srv, jwt.encode(other, key, algorithm="EdDSA"), client_id="apes-cli").status_code == 401


def test_an_assertion_naming_an_agent_by_a_person_or_the_management_identity_is_refused(
    srv: InProcessServer, person: Person
) -> None:
    key, _ = new_public_key()
    for ident in (person.email, "admin@example.com", "root@example.com"):
        assert cc(srv, jwt.encode(claims_for(srv, ident), key, algorithm="EdDSA")).status_code == 401
