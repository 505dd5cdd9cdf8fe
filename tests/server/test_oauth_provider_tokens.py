"""grantd's OAuth provider after the code exchange: which tokens are bearers where, refresh, /revoke, /userinfo, client_credentials with RFC 7523 assertions, discovery and keys, the peer CLI's way and several processes. Shared fixtures: test_oauth_provider."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from inproc import InProcessServer
from oauth_support import (
    Person,
    authorize_params,
    exchange,
    login,
    pkce,
    query_of,
    ticket_of,
    token_post,
)
from people_support import new_public_key

from conftest import problem
from server import test_oauth_provider

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
SECRET = test_oauth_provider.SECRET
bearer = test_oauth_provider.bearer
claims_of = test_oauth_provider.claims_of
error_of = test_oauth_provider.error_of
person = test_oauth_provider.person
srv = test_oauth_provider.srv
wiki_login = test_oauth_provider.wiki_login


# -- which tokens are bearers where (peer bug 27) ------------------------------------------------------


def test_an_apes_cli_access_token_is_a_bearer_on_the_api(srv: InProcessServer, person: Person) -> None:
    tokens = login(srv, person)
    claims = claims_of(tokens["access_token"])
    assert claims["aud"] == "apes-cli" and claims["token_use"] == "access" and claims["act"] == "human"
    assert claims["sub"] == person.email and claims["sid"].startswith("rtf_")
    me = bearer(srv, tokens["access_token"]).json()
    assert me["kind"] == "person" and me["email"] == person.email
    assert bearer(srv, tokens["access_token"], "/api/grants").status_code == 200


def test_an_id_token_is_never_a_bearer(srv: InProcessServer, person: Person) -> None:
    tokens = login(srv, person)
    assert (
        claims_of(tokens["id_token"])["aud"] == "apes-cli"
    )  # the same audience as API tokens: the kind decides
    for path in ("/api/me", "/api/grants"):
        assert bearer(srv, tokens["id_token"], path).status_code == 401
    assert bearer(srv, tokens["id_token"], "/userinfo").status_code == 401


def test_an_sp_access_token_is_refused_on_the_api(srv: InProcessServer, person: Person) -> None:
    tokens = wiki_login(srv, person)
    assert claims_of(tokens["access_token"])["aud"] == f"{srv.url}/userinfo"
    for path in ("/api/me", "/api/grants", "/api/account/consents"):
        answer = bearer(srv, tokens["access_token"], path)
        assert answer.status_code == 401, path
        assert "not for grantd's API" in problem(answer)["detail"]
    assert bearer(srv, tokens["access_token"], "/userinfo").status_code == 200


def test_a_config_client_with_api_access_gets_api_tokens(srv: InProcessServer, person: Person) -> None:
    tokens = login(srv, person, client_id="tool", redirect_uri="https://tool.example.com/cb")
    assert claims_of(tokens["access_token"])["aud"] == "apes-cli"
    assert bearer(srv, tokens["access_token"]).status_code == 200


def test_access_tokens_end_with_their_person(srv: InProcessServer) -> None:
    person = Person(srv)
    tokens = login(srv, person)
    with srv.admin() as http:
        assert http.patch(f"/api/admin/users/{person.email}", json={"status": "disabled"}).status_code == 200
    assert bearer(srv, tokens["access_token"]).status_code == 401
    assert bearer(srv, tokens["access_token"], "/userinfo").status_code == 401


# -- refresh tokens ------------------------------------------------------------------------------------


def refresh(srv: InProcessServer, token: str, client_id: str = "apes-cli", **extra: Any) -> httpx.Response:
    return token_post(
        srv, {"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id, **extra}
    )


def test_refresh_rotates_and_reuse_revokes_the_family(srv: InProcessServer, person: Person) -> None:
    first = login(srv, person)
    second = refresh(srv, first["refresh_token"]).json()
    assert second["refresh_token"] != first["refresh_token"]
    assert claims_of(second["access_token"])["sid"] == claims_of(first["access_token"])["sid"]
    assert "nonce" not in claims_of(second["id_token"])
    third = refresh(srv, second["refresh_token"])
    assert third.status_code == 200
    newest = third.json()
    # the first token again (a thief or a replay): the whole family dies, the newest tokens too
    assert "already used" in error_of(refresh(srv, first["refresh_token"]))["error_description"]
    assert error_of(refresh(srv, newest["refresh_token"]))["error"] == "invalid_grant"
    assert bearer(srv, newest["access_token"]).status_code == 401


def test_refresh_by_another_client_is_refused_and_leaves_the_token_alone(
    srv: InProcessServer, person: Person
) -> None:
    tokens = login(srv, person)
    assert "another client" in error_of(refresh(srv, tokens["refresh_token"], "tool"))["error_description"]
    assert refresh(srv, tokens["refresh_token"]).status_code == 200


def test_a_public_clients_refresh_may_omit_client_id(srv: InProcessServer, person: Person) -> None:
    """The peer CLI refreshes with grant_type and refresh_token only (RFC 6749 §3.2.1; D9): the family
    names the client. Before: 400 invalid_request, and the CLI deleted its refresh token."""
    first = login(srv, person)
    body = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]}
    second = token_post(srv, body)
    assert second.status_code == 200, second.text
    renewed = second.json()
    assert claims_of(renewed["access_token"])["aud"] == "apes-cli"
    assert bearer(srv, renewed["access_token"]).status_code == 200
    assert claims_of(renewed["access_token"])["sid"] == claims_of(first["access_token"])["sid"]
    # the rotation and reuse rules are the same without client_id: the old token again kills the family
    assert "already used" in error_of(token_post(srv, body))["error_description"]
    assert (
        error_of(token_post(srv, {**body, "refresh_token": renewed["refresh_token"]}))["error"]
        == "invalid_grant"
    )
    assert bearer(srv, renewed["access_token"]).status_code == 401


def test_a_refresh_without_client_id_names_no_client_by_a_bad_token(srv: InProcessServer) -> None:
    for token in ("not-a-refresh-token", "x" * 300):
        assert (
            error_of(token_post(srv, {"grant_type": "refresh_token", "refresh_token": token}))["error"]
            == "invalid_grant"
        )
    assert (
        "refresh_token is required"
        in error_of(token_post(srv, {"grant_type": "refresh_token"}))["error_description"]
    )


def test_refresh_of_a_disabled_person_is_refused_and_revokes_the_family(srv: InProcessServer) -> None:
    person = Person(srv)
    tokens = login(srv, person)
    with srv.admin() as http:
        http.patch(f"/api/admin/users/{person.email}", json={"status": "disabled"})
    assert "disabled" in error_of(refresh(srv, tokens["refresh_token"]))["error_description"]
    with srv.admin() as http:
        http.patch(f"/api/admin/users/{person.email}", json={"status": "active"})
    assert "revoked" in error_of(refresh(srv, tokens["refresh_token"]))["error_description"]


def test_a_refresh_family_has_an_absolute_end(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path / "short", extra="[oauth]\nrefresh_token_ttl = 3600\n").start()
    try:
        person = Person(server)
        tokens = login(server, person)
        server.clock.advance(1800)
        tokens = refresh(server, tokens["refresh_token"]).json()
        server.clock.advance(1801)
        assert "expired" in error_of(refresh(server, tokens["refresh_token"]))["error_description"]
    finally:
        server.stop()


def test_refresh_may_narrow_the_scope_only(srv: InProcessServer, person: Person) -> None:
    tokens = login(srv, person)
    narrowed = refresh(srv, tokens["refresh_token"], scope="openid email").json()
    assert narrowed["scope"] == "openid email" and "name" not in claims_of(narrowed["id_token"])
    assert error_of(refresh(srv, narrowed["refresh_token"], scope="openid admin"))["error"] == "invalid_scope"


# -- /revoke -----------------------------------------------------------------------------------------


def revoke(srv: InProcessServer, body: dict[str, str], **kwargs: Any) -> httpx.Response:
    with httpx.Client(base_url=srv.url) as http:
        return http.post("/revoke", data=body, **kwargs)


def test_revoking_a_refresh_token_ends_its_family(srv: InProcessServer, person: Person) -> None:
    tokens = login(srv, person)
    answer = revoke(
        srv, {"token": tokens["refresh_token"], "token_type_hint": "refresh_token", "client_id": "apes-cli"}
    )
    assert answer.status_code == 200 and answer.json() == {}
    assert error_of(refresh(srv, tokens["refresh_token"]))["error"] == "invalid_grant"
    assert bearer(srv, tokens["access_token"]).status_code == 401


def test_revoking_an_access_token_ends_its_family(srv: InProcessServer, person: Person) -> None:
    tokens = login(srv, person)
    assert revoke(srv, {"token": tokens["access_token"]}).status_code == 200
    assert bearer(srv, tokens["access_token"]).status_code == 401
    assert error_of(refresh(srv, tokens["refresh_token"]))["error"] == "invalid_grant"


def test_revoke_answers_200_for_unknown_tokens_and_ignores_other_clients_tokens(
    srv: InProcessServer, person: Person
) -> None:
    assert revoke(srv, {"token": "no-such-token"}).status_code == 200
    assert revoke(srv, {"token": "a.b.c"}).status_code == 200
    tokens = login(srv, person)
    assert revoke(srv, {"token": tokens["refresh_token"], "client_id": "tool"}).status_code == 200
    assert refresh(srv, tokens["refresh_token"]).status_code == 200  # not the tool's to end


def test_revoke_needs_a_token_and_a_confidential_clients_secret(srv: InProcessServer) -> None:
    assert error_of(revoke(srv, {}))["error"] == "invalid_request"
    assert error_of(revoke(srv, {"token": "x", "client_id": "wiki"}), 401)["error"] == "invalid_client"
    assert revoke(srv, {"token": "x", "client_id": "wiki", "client_secret": SECRET}).status_code == 200
    assert (
        error_of(revoke(srv, {"token": "x", "token_type_hint": "id_token"}))["error"]
        == "unsupported_token_type"
    )


# -- /userinfo -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scope, expected",
    [
        ("openid", {"sub"}),
        ("openid email", {"sub", "email", "email_verified"}),
        ("openid profile", {"sub", "name"}),
        ("openid email profile offline_access", {"sub", "email", "email_verified", "name"}),
    ],
)
def test_userinfo_answers_per_scope(
    srv: InProcessServer, person: Person, scope: str, expected: set[str]
) -> None:
    tokens = wiki_login(srv, person, scope=scope)
    with httpx.Client(base_url=srv.url) as http:
        got = http.get("/userinfo", headers={"Authorization": f"Bearer {tokens['access_token']}"})
        posted = http.post("/userinfo", data={"access_token": tokens["access_token"]})
    assert got.status_code == 200 and set(got.json()) == expected and got.json()["sub"] == person.email
    assert posted.json() == got.json()
    assert got.headers["cache-control"].startswith("no-store")


def test_refused_userinfo_bearers_count_against_the_address(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path / "bearers", extra="[limits]\nfailed_bearer_per_address = 2\n").start()
    try:
        with httpx.Client(base_url=server.url) as http:
            answers = [
                http.get("/userinfo", headers={"Authorization": "Bearer a.b.c"}).status_code for _ in range(3)
            ]
        assert answers == [401, 401, 429]
    finally:
        server.stop()


def test_userinfo_refusals_carry_www_authenticate(srv: InProcessServer, person: Person) -> None:
    with httpx.Client(base_url=srv.url) as http:
        missing = http.get("/userinfo")
        assert error_of(missing, 401)["error"] == "invalid_token"
        assert missing.headers["www-authenticate"].startswith("Bearer")
        bad = http.get("/userinfo", headers={"Authorization": "Bearer x.y.z"})
        assert 'error="invalid_token"' in bad.headers["www-authenticate"]
        assert (
            error_of(http.get("/userinfo", headers={"Authorization": f"Bearer {srv.token}"}), 401)["error"]
            == "invalid_token"
        )
    tokens = wiki_login(srv, person, scope="email")
    with httpx.Client(base_url=srv.url) as http:
        assert (
            error_of(
                http.get("/userinfo", headers={"Authorization": f"Bearer {tokens['access_token']}"}), 403
            )["error"]
            == "insufficient_scope"
        )


# -- client_credentials: agents with RFC 7523 assertions -----------------------------------------------


@pytest.fixture
def agent(srv: InProcessServer) -> tuple[dict[str, Any], Any]:
    key, public = new_public_key()
    email = f"agent+cc{uuid.uuid4().hex[:8]}@example.com"
    with srv.admin() as http:
        r = http.post("/api/agent/enroll", json={"email": email, "name": "cc", "publicKey": public})
    assert r.status_code == 201, r.text
    return r.json(), key


def assertion(srv: InProcessServer, ident: str, key: Any, **change: Any) -> str:
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
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm="EdDSA")


def client_credentials(srv: InProcessServer, token: str) -> httpx.Response:
    return token_post(
        srv,
        {
            "grant_type": "client_credentials",
            "client_assertion": token,
            "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        },
    )


def test_client_credentials_gives_an_agent_its_identity_token(srv: InProcessServer, agent: Any) -> None:
    record, key = agent
    for ident in (record["email"], record["agent_id"]):
        answer = client_credentials(srv, assertion(srv, ident, key))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["token_type"] == "Bearer" and body["expires_in"] == 3600
        me = bearer(srv, body["access_token"]).json()
        assert me["kind"] == "agent" and me["email"] == record["email"]


def test_a_replayed_assertion_is_refused(srv: InProcessServer, agent: Any) -> None:
    record, key = agent
    token = assertion(srv, record["email"], key)
    assert client_credentials(srv, token).status_code == 200
    assert "replay" in error_of(client_credentials(srv, token), 401)["error_description"]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"aud": "https://elsewhere.example/token"}, "aud"),
        ({"aud": None}, "does not verify"),
        ({"exp": -10}, "expired"),
        ({"exp": 600}, "at most 300"),
        ({"jti": None}, "does not verify"),
        ({"sub": "agent+someone-else@example.com"}, "iss = sub"),
    ],
)
def test_bad_assertions_are_refused(
    srv: InProcessServer, agent: Any, change: dict[str, Any], words: str
) -> None:
    record, key = agent
    if "exp" in change and change["exp"] is not None:
        change = {"exp": srv.clock.now_s() + change["exp"]}
    found = error_of(client_credentials(srv, assertion(srv, record["email"], key, **change)), 401)
    assert found["error"] == "invalid_client" and words in found["error_description"], found


def test_an_assertion_signed_by_another_agents_key_is_refused(srv: InProcessServer, agent: Any) -> None:
    record, _ = agent
    other, _ = new_public_key()
    assert (
        "does not verify"
        in error_of(client_credentials(srv, assertion(srv, record["email"], other)), 401)["error_description"]
    )


def test_a_disabled_agent_gets_no_token(srv: InProcessServer, agent: Any) -> None:
    record, key = agent
    with srv.admin() as http:
        assert (
            http.put(f"/api/admin/agents/{record['agent_id']}", json={"status": "disabled"}).status_code
            == 200
        )
    assert (
        "disabled"
        in error_of(client_credentials(srv, assertion(srv, record["email"], key)), 401)["error_description"]
    )


def test_client_credentials_needs_the_jwt_bearer_assertion_type(srv: InProcessServer, agent: Any) -> None:
    record, key = agent
    answer = token_post(
        srv, {"grant_type": "client_credentials", "client_assertion": assertion(srv, record["email"], key)}
    )
    assert error_of(answer, 401)["error"] == "invalid_client"
    assert error_of(client_credentials(srv, "not-a-jwt"), 401)["error"] == "invalid_client"


# -- discovery and keys ------------------------------------------------------------------------------


def test_discovery_lists_every_endpoint(srv: InProcessServer) -> None:
    with httpx.Client(base_url=srv.url) as http:
        answer = http.get("/.well-known/openid-configuration")
    doc = answer.json()
    issuer = srv.url
    assert doc["issuer"] == issuer
    for name, path in (
        ("authorization_endpoint", "/authorize"),
        ("token_endpoint", "/token"),
        ("userinfo_endpoint", "/userinfo"),
        ("revocation_endpoint", "/revoke"),
        ("device_authorization_endpoint", "/device_authorization"),
        ("jwks_uri", "/.well-known/jwks.json"),
        ("openape_grants_endpoint", "/api/grants"),
        ("ddisa_agent_challenge_endpoint", "/api/agent/challenge"),
    ):
        assert doc[name] == issuer + path
    assert doc["id_token_signing_alg_values_supported"] == ["EdDSA", "ES256", "RS256"]
    assert set(doc["grant_types_supported"]) == {
        "authorization_code",
        "refresh_token",
        "client_credentials",
        "urn:ietf:params:oauth:grant-type:device_code",
        "urn:openid:params:grant-type:ciba",  # D16
        "urn:ietf:params:oauth:grant-type:token-exchange",  # D16
    }
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert {"client_secret_basic", "client_secret_post", "none"} <= set(
        doc["token_endpoint_auth_methods_supported"]
    )
    assert answer.headers["access-control-allow-origin"] == "*"


def test_the_token_endpoint_is_rate_limited_per_address(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path / "limited", extra="[limits]\ntoken_per_address = 3\n").start()
    try:
        answers = [
            token_post(server, {"grant_type": "refresh_token", "refresh_token": "x", "client_id": "apes-cli"})
            for _ in range(4)
        ]
        assert [a.status_code for a in answers] == [400, 400, 400, 429]
        assert int(answers[-1].headers["retry-after"]) >= 1
        assert problem(answers[-1])["status"] == 429
        server.clock.advance(60)
        assert token_post(server, {"grant_type": "x"}).status_code == 400
    finally:
        server.stop()


def test_cors_and_no_store_on_the_token_endpoint(srv: InProcessServer) -> None:
    answer = token_post(srv, {"grant_type": "x"})
    assert answer.headers["access-control-allow-origin"] == "*"
    assert answer.headers["cache-control"].startswith("no-store")
    with httpx.Client(base_url=srv.url) as http:
        for path, method in (("/token", "POST"), ("/revoke", "POST"), ("/userinfo", "GET")):
            preflight = http.options(
                path,
                headers={
                    "Origin": "https://spa.example",
                    "Access-Control-Request-Method": method,
                    "Access-Control-Request-Headers": "authorization, content-type",
                },
            )
            assert preflight.status_code == 200
            assert preflight.headers["access-control-allow-origin"] == "*"
            assert method in preflight.headers["access-control-allow-methods"]
            assert "Authorization" in preflight.headers["access-control-allow-headers"]
            assert "access-control-allow-credentials" not in preflight.headers


# -- the peer CLI's way, and several processes -----------------------------------------------------------


def test_apes_login_browser_as_apes_sends_it(srv: InProcessServer, person: Person) -> None:
    """`apes login --browser --idp http://host:port/`: paths start with `//`, a JSON body to /token
    (Node's headers), the access token as API bearer, then a form-encoded refresh."""
    verifier, challenge = pkce()
    params = authorize_params(challenge=challenge, scope="openid email profile offline_access")
    page = httpx.get(
        srv.url + "//authorize?" + urlencode(params), headers={"Cookie": f"grantd_session={person.cookie}"}
    )
    assert page.status_code == 200 and "data-consent" in page.text
    location = person.consent(urlencode(params), ticket=ticket_of(page.text)).json()["location"]
    assert location.startswith("http://localhost:9876/callback?code=")
    node = {
        "Accept": "*/*",
        "User-Agent": "node",
        "Content-Type": "application/json",
        "Sec-Fetch-Mode": "cors",
    }
    with httpx.Client() as http:
        answer = http.post(
            srv.url + "//token",
            headers=node,
            json={
                "grant_type": "authorization_code",
                "code": query_of(location)["code"],
                "code_verifier": verifier,
                "redirect_uri": "http://localhost:9876/callback",
                "client_id": "apes-cli",
            },
        )
        assert answer.status_code == 200, answer.text
        tokens = answer.json()
        assert (
            http.get(
                srv.url + "//api/grants", headers={"Authorization": f"Bearer {tokens['access_token']}"}
            ).status_code
            == 200
        )
        renewed = http.post(
            srv.url + "//token",
            content=urlencode(
                {
                    "grant_type": "refresh_token",
                    "refresh_token": tokens["refresh_token"],
                    "client_id": "apes-cli",
                }
            ),
            headers={"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "node"},
        )
    assert renewed.status_code == 200 and renewed.json()["refresh_token"] != tokens["refresh_token"]


def test_codes_and_refresh_tokens_are_single_use_across_processes(server_factory: Any) -> None:
    """A real `grantd serve` with two worker processes: concurrent redemptions of one code, and of
    one refresh token, have exactly one winner (the store decides, not a process's memory)."""
    from concurrent.futures import ThreadPoolExecutor

    from support.soft_webauthn import PasskeyBrowser

    server = server_factory(workers=2).start()
    with server.admin() as http:
        created = http.post(
            "/api/admin/registration-urls", json={"email": f"multi-{uuid.uuid4().hex[:6]}@example.com"}
        )
    assert created.status_code == 201, created.text
    browser = PasskeyBrowser(server.url, server.url)
    assert browser.register(created.json()["token"]).status_code == 200

    def code() -> tuple[str, str]:
        verifier, challenge = pkce()
        params = authorize_params(challenge=challenge)
        answer = browser.request("GET", "/authorize?" + urlencode(params), follow_redirects=False)
        if answer.status_code == 200:
            answer = browser.request(
                "POST",
                "/authorize/consent",
                json_body={"request": urlencode(params), "approve": True, "ticket": ticket_of(answer.text)},
            )
            return query_of(answer.json()["location"])["code"], verifier
        return query_of(answer.headers["location"])["code"], verifier

    with ThreadPoolExecutor(8) as pool:
        for _ in range(3):
            found, verifier = code()
            answers = list(pool.map(lambda _: exchange(server, found, verifier), range(6)))
            statuses = sorted(a.status_code for a in answers)
            # one taker at most; and since the code was presented six times, every token it issued
            # ends (RFC 6749 4.1.2): the winner may already hear 400 if a replay's mark came first
            assert statuses in ([200, 400, 400, 400, 400, 400], [400] * 6), statuses
            for won in (a for a in answers if a.status_code == 200):
                assert bearer(server, won.json()["access_token"], "/userinfo").status_code == 401
        found, verifier = code()
        tokens = exchange(server, found, verifier).json()
        body = {
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": "apes-cli",
        }
        answers = list(pool.map(lambda _: token_post(server, body), range(6)))
    winners = [a for a in answers if a.status_code == 200]
    assert len(winners) == 1, [a.text for a in answers]
    # the losers presented a used token: the family is revoked, the winner's new token with it
    refused = token_post(server, {**body, "refresh_token": winners[0].json()["refresh_token"]})
    assert error_of(refused)["error"] == "invalid_grant"


def test_revoking_an_id_token_key_makes_a_new_one(srv: InProcessServer) -> None:
    services = srv.services
    es = srv.call(services.keyring.signing_key("ES256"))
    existed, new_kid = srv.call(services.keyring.revoke(es.kid))
    assert existed and new_kid and new_kid != es.kid
    with httpx.Client(base_url=srv.url) as http:
        kids = {k["kid"] for k in http.get("/.well-known/jwks.json").json()["keys"]}
    assert es.kid not in kids and new_kid in kids
    assert srv.call(services.keyring.signing_key("ES256")).kid == new_kid
    assert srv.call(services.keyring.signing_key()).alg == "EdDSA"
