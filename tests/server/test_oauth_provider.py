"""grantd as OAuth 2.0 authorization server / OpenID provider, over HTTP against an in-process server
(ManualClock): every error row of /authorize and /token, refresh rotation and family revocation,
/revoke, /userinfo, which tokens are API bearers (peer bug 27), consent, client authentication and
agents' client_credentials with RFC 7523 assertions."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from inproc import InProcessServer
from oauth_support import (
    APES_REDIRECT,
    WIKI_SECRET,
    Person,
    authorize_params,
    exchange,
    login,
    pkce,
    query_of,
    start_with_secrets,
    ticket_of,
    token_post,
    wiki_and_tool_clients,
)
from people_support import new_public_key

from conftest import problem

SECRET = WIKI_SECRET
CONFIG = """
[limits]
failed_bearer_per_address = 0
passkey_per_address = 0
token_per_address = 0

[oauth]
access_token_ttl = 600
""" + wiki_and_tool_clients(wiki_name="Team <b>wiki</b>")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = start_with_secrets(tmp_path_factory.mktemp("oauth"), CONFIG, {"wiki-secret": SECRET})
    yield server
    server.stop()


@pytest.fixture
def person(srv: InProcessServer) -> Person:
    return Person(srv)


def error_of(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["cache-control"].startswith("no-store")
    body = response.json()
    assert set(body) == {"error", "error_description"}, body
    return body  # type: ignore[no-any-return]


def claims_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})  # type: ignore[no-any-return]


def bearer(srv: InProcessServer, token: str, path: str = "/api/me", method: str = "GET") -> httpx.Response:
    with srv.client(token) as http:
        return http.request(method, path)


def wiki_login(srv: InProcessServer, person: Person, **extra: Any) -> dict[str, Any]:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params("wiki", "https://wiki.example.com/cb", challenge, **extra))
    answer = exchange(
        srv,
        code,
        verifier,
        client_id="wiki",
        redirect_uri="https://wiki.example.com/cb",
        client_secret=SECRET,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


# -- /authorize: errors before the redirect URI is proven are pages, never redirects ---------------


@pytest.mark.parametrize(
    "change, detail",
    [
        ({"client_id": None}, "client_id is missing"),
        ({"client_id": "no-such-client"}, "unknown client"),
        ({"redirect_uri": None}, "redirect_uri is missing"),
        ({"redirect_uri": "https://evil.example/callback"}, "not registered"),
        ({"redirect_uri": "http://localhost:9876/callback/../x"}, "not registered"),
        ({"redirect_uri": "http://localhost:9876/other"}, "not registered"),
        ({"redirect_uri": "http://evil.example:9876/callback"}, "not registered"),
        ({"redirect_uri": "http://user@localhost:9876/callback"}, "not registered"),
        ({"redirect_uri": "https://localhost:9876/callback"}, "not registered"),
        ({"client_id": "grantd-cli"}, "does not use the authorization code flow"),
    ],
)
def test_errors_before_the_redirect_uri_is_proven_are_shown_not_redirected(
    srv: InProcessServer, person: Person, change: dict[str, Any], detail: str
) -> None:
    answer = person.authorize(authorize_params(**change))
    assert answer.status_code == 400
    assert "location" not in answer.headers
    assert answer.headers["content-type"].startswith("text/html")
    assert detail in answer.text
    assert answer.headers["cache-control"].startswith("no-store")


def test_a_wrong_redirect_with_a_bad_response_type_still_does_not_redirect(
    srv: InProcessServer, person: Person
) -> None:
    answer = person.authorize(authorize_params(redirect_uri="https://evil.example/cb", response_type="token"))
    assert answer.status_code == 400 and "location" not in answer.headers


@pytest.mark.parametrize(
    "change, error, words",
    [
        ({"response_type": "token"}, "unsupported_response_type", "code"),
        ({"response_type": None}, "unsupported_response_type", "code"),
        ({"code_challenge_method": "plain"}, "invalid_request", "S256"),
        ({"code_challenge_method": None}, "invalid_request", "S256"),
        ({"code_challenge": None}, "invalid_request", "code_challenge"),
        ({"code_challenge": "short"}, "invalid_request", "code_challenge"),
        ({"authorization_details": '[{"type":"openape_grant"}]'}, "invalid_request", "authorization_details"),
        ({"scope": "openid admin"}, "invalid_scope", "admin"),
        ({"prompt": "select_account"}, "invalid_request", "prompt"),
        ({"prompt": "none login"}, "invalid_request", "prompt"),
        ({"request": "eyJ..."}, "request_not_supported", "request"),
        ({"response_mode": "fragment"}, "invalid_request", "response_mode"),
    ],
)
def test_errors_after_the_redirect_uri_is_proven_go_back_with_state(
    srv: InProcessServer, person: Person, change: dict[str, Any], error: str, words: str
) -> None:
    params = authorize_params(**change)
    answer = person.authorize(params)
    assert answer.status_code == 302, answer.text
    location = answer.headers["location"]
    assert location.startswith(APES_REDIRECT + "?")
    found = query_of(location)
    assert found["error"] == error and words in found["error_description"]
    assert found["state"] == params["state"] and found["iss"] == srv.url
    assert "code" not in found


def test_a_repeated_parameter_is_refused(srv: InProcessServer, person: Person) -> None:
    params = authorize_params()
    with person.http() as http:
        answer = http.get("/authorize?" + urlencode(params) + "&scope=openid")
    assert query_of(answer.headers["location"])["error"] == "invalid_request"
    with person.http() as http:
        answer = http.get("/authorize?" + urlencode(params) + "&client_id=apes-cli")
    assert answer.status_code == 400 and "location" not in answer.headers


@pytest.mark.parametrize(
    "redirect",
    [
        "http://localhost:9876/callback",
        "http://127.0.0.1:50123/callback",
        "http://[::1]:8080/callback",
        "http://localhost:1/callback",
    ],
)
def test_apes_cli_takes_loopback_redirects_on_any_port(
    srv: InProcessServer, person: Person, redirect: str
) -> None:
    tokens = login(srv, person, redirect_uri=redirect)
    assert tokens["token_type"] == "Bearer"


def test_an_unauthenticated_person_goes_to_login_and_comes_back(srv: InProcessServer) -> None:
    params = authorize_params()
    with httpx.Client(base_url=srv.url, follow_redirects=False) as http:
        answer = http.get("/authorize", params=params)
        assert answer.status_code == 303
        location = answer.headers["location"]
        assert location.startswith("/login?next=/authorize%3F")
        page = http.get(location)
        assert page.status_code == 200 and 'data-next="/authorize?' in page.text
        none = http.get("/authorize", params={**params, "prompt": "none"})
    found = query_of(none.headers["location"])
    assert found["error"] == "login_required" and found["state"] == params["state"]


def test_nothing_is_approved_by_a_get(srv: InProcessServer, person: Person) -> None:
    """The first visit shows the consent page (200, no code); prompt=none says consent_required."""
    params = authorize_params()
    page = person.authorize(params)
    assert (
        page.status_code == 200
        and "data-consent" in page.text
        and "code=" not in page.headers.get("location", "")
    )
    assert page.headers["cache-control"].startswith("no-store")
    refused = person.authorize({**params, "prompt": "none"})
    assert query_of(refused.headers["location"])["error"] == "consent_required"


def test_consent_is_remembered_denied_forced_and_withdrawn(srv: InProcessServer, person: Person) -> None:
    """Remembered consent, for a client that may have it (a confidential one; apes-cli always asks:
    test_oauth_attacks.test_apes_cli_never_gets_a_code_without_the_persons_click)."""
    wiki = "https://wiki.example.com/cb"

    def params_for(**extra: str) -> dict[str, str]:
        return authorize_params("wiki", wiki, **{"scope": "openid email", **extra})

    params = params_for()
    denied = person.consent(urlencode(params), approve=False)
    found = query_of(denied.json()["location"])
    assert found["error"] == "access_denied" and found["state"] == params["state"]
    person.code_for(params)  # consents
    second = person.authorize(params_for())
    assert second.status_code == 302 and "code" in query_of(second.headers["location"])
    assert person.authorize(params_for(prompt="none")).status_code == 302
    assert "data-consent" in person.authorize(params_for(prompt="consent")).text
    # more scopes than consented to: asked again
    assert "data-consent" in person.authorize(params_for(scope="openid email profile offline_access")).text
    with person.http() as http:
        listed = http.get("/api/account/consents").json()["data"]
        assert [c["client_id"] for c in listed] == ["wiki"]
        assert http.delete("/api/account/consents/wiki", headers={"Origin": srv.url}).status_code == 200
        assert http.delete("/api/account/consents/wiki", headers={"Origin": srv.url}).status_code == 404
    assert "data-consent" in person.authorize(params_for()).text


def test_withdrawing_consent_ends_the_clients_tokens(srv: InProcessServer, person: Person) -> None:
    tokens = login(srv, person)
    assert bearer(srv, tokens["access_token"]).status_code == 200
    with person.http() as http:
        assert (
            http.delete("/api/account/consents/apes-cli", headers={"Origin": srv.url}).json()["withdrawn"]
            is True
        )
    assert bearer(srv, tokens["access_token"]).status_code == 401
    refused = token_post(
        srv,
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": "apes-cli"},
    )
    assert error_of(refused)["error"] == "invalid_grant"


def test_the_consent_post_is_refused_cross_site_and_without_json(
    srv: InProcessServer, person: Person
) -> None:
    query = urlencode(authorize_params())
    with person.http() as http:
        cross = http.post(
            "/authorize/consent",
            json={"request": query, "approve": True},
            headers={"Origin": "https://evil.example"},
        )
        assert cross.status_code == 403
        form = http.post(
            "/authorize/consent", data={"request": query, "approve": "true"}, headers={"Origin": srv.url}
        )
        assert form.status_code == 415
    with httpx.Client(base_url=srv.url) as anonymous:
        assert (
            anonymous.post("/authorize/consent", json={"request": query, "approve": True}).status_code == 401
        )


def test_the_consent_page_escapes_the_client_name(srv: InProcessServer, person: Person) -> None:
    page = person.authorize(authorize_params("wiki", "https://wiki.example.com/cb"))
    assert "Team &lt;b&gt;wiki&lt;/b&gt;" in page.text and "<b>wiki</b>" not in page.text


def test_login_hint_is_compared_normalised(srv: InProcessServer) -> None:
    person = Person(srv)
    wiki = "https://wiki.example.com/cb"
    person.code_for(authorize_params("wiki", wiki))  # consent once (remembered: a confidential client)
    answer = person.authorize(authorize_params("wiki", wiki, login_hint=f"  {person.email.upper()} "))
    assert answer.status_code == 302 and "code" in query_of(answer.headers["location"])
    other = person.authorize(
        authorize_params("wiki", wiki, login_hint="someone-else@example.com", prompt="none")
    )
    assert query_of(other.headers["location"])["error"] == "login_required"


def test_prompt_login_asks_to_sign_in_again_without_signing_out(srv: InProcessServer) -> None:
    person = Person(srv)
    for params in (authorize_params(prompt="login"), authorize_params(login_hint="someone-else@example.com")):
        answer = person.authorize(params)
        assert answer.status_code == 200 and 'data-page="login"' in answer.text
        assert "Sign in with a passkey" in answer.text and "data-consent" not in answer.text
        nxt = answer.text.split('data-next="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
        assert nxt.startswith("/authorize?") and "prompt" not in nxt and "login_hint" not in nxt
        assert query_of(nxt)["state"] == params["state"]
    with person.http() as http:
        assert http.get("/api/me").status_code == 200  # a GET signs nobody out


def test_a_disabled_person_gets_no_code(srv: InProcessServer) -> None:
    person = Person(srv)
    with srv.admin() as http:
        assert http.patch(f"/api/admin/users/{person.email}", json={"status": "disabled"}).status_code == 200
    answer = person.authorize(authorize_params(prompt="none"))
    assert query_of(answer.headers["location"])["error"] == "login_required"


# -- /token: the code exchange -----------------------------------------------------------------------


def test_form_and_json_bodies_both_work(srv: InProcessServer, person: Person) -> None:
    for as_json in (False, True):
        verifier, challenge = pkce()
        code = person.code_for(authorize_params(challenge=challenge))
        answer = exchange(srv, code, verifier, as_json=as_json)
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"].startswith("no-store")
        body = answer.json()
        assert body["token_type"] == "Bearer" and body["expires_in"] == 600
        assert body["id_token"] == body["assertion"] and body["refresh_token"]
        assert body["scope"] == "openid email profile offline_access"


def test_a_code_is_single_use(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    assert exchange(srv, code, verifier).status_code == 200
    assert error_of(exchange(srv, code, verifier))["error"] == "invalid_grant"


def test_a_code_is_burnt_by_a_failed_presentation(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    assert (
        error_of(exchange(srv, code, pkce()[0]))["error_description"]
        == "code_verifier does not match the code_challenge"
    )
    assert error_of(exchange(srv, code, verifier))["error"] == "invalid_grant"


def test_a_code_expires_after_60_seconds(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    srv.clock.advance(61)
    assert error_of(exchange(srv, code, verifier))["error_description"] == "expired authorization code"
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    srv.clock.advance(59)
    assert exchange(srv, code, verifier).status_code == 200


@pytest.mark.parametrize(
    "change, description",
    [
        ({"redirect_uri": "http://127.0.0.1:9876/callback"}, "redirect_uri differs"),
        ({"redirect_uri": None}, "redirect_uri differs"),
        ({"code_verifier": None}, "code_verifier is required"),
        ({"code_verifier": "x" * 43}, "does not match"),
    ],
)
def test_code_exchange_refusals(
    srv: InProcessServer, person: Person, change: dict[str, Any], description: str
) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    body = {"code_verifier": verifier, **change}
    answer = exchange(
        srv, code, body.pop("code_verifier"), **{k: v for k, v in body.items() if k != "code_verifier"}
    )
    found = error_of(answer)
    assert found["error"] == "invalid_grant" and description in found["error_description"]


def test_a_code_of_another_client_is_refused(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params("tool", "https://tool.example.com/cb", challenge))
    found = error_of(
        exchange(srv, code, verifier, client_id="apes-cli", redirect_uri="https://tool.example.com/cb")
    )
    assert "another client" in found["error_description"]


@pytest.mark.parametrize(
    "body, error, status",
    [
        ({}, "invalid_request", 400),
        ({"grant_type": "password", "client_id": "apes-cli"}, "unsupported_grant_type", 400),
        ({"grant_type": "authorization_code", "code": "x"}, "invalid_request", 400),
        ({"grant_type": "authorization_code", "code": "x", "client_id": "nobody"}, "invalid_client", 401),
        ({"grant_type": "authorization_code", "code": "x", "client_id": "wiki"}, "invalid_client", 401),
        (
            {"grant_type": "authorization_code", "code": "x", "client_id": "wiki", "client_secret": "wrong"},
            "invalid_client",
            401,
        ),
        (
            {"grant_type": "authorization_code", "code": "x", "client_id": "apes-cli", "client_secret": "x"},
            "invalid_client",
            401,
        ),
        ({"grant_type": "authorization_code", "code": "nope", "client_id": "apes-cli"}, "invalid_grant", 400),
    ],
)
def test_token_request_errors(srv: InProcessServer, body: dict[str, str], error: str, status: int) -> None:
    assert error_of(token_post(srv, body), status)["error"] == error


def test_a_repeated_form_parameter_and_a_bad_body_are_invalid_requests(srv: InProcessServer) -> None:
    with httpx.Client(base_url=srv.url) as http:
        twice = http.post(
            "/token",
            content="grant_type=refresh_token&grant_type=refresh_token",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert error_of(twice)["error"] == "invalid_request"
        assert (
            error_of(http.post("/token", content=b"{", headers={"Content-Type": "application/json"}))["error"]
            == "invalid_request"
        )
        assert error_of(http.post("/token", json=["x"]))["error"] == "invalid_request"
        assert (
            error_of(http.post("/token", content=b"x", headers={"Content-Type": "text/plain"}))["error"]
            == "invalid_request"
        )


def test_a_confidential_client_authenticates_with_basic_or_post(srv: InProcessServer, person: Person) -> None:
    assert "refresh_token" not in wiki_login(
        srv, person, scope="openid email"
    )  # client_secret_post; no offline_access
    assert "refresh_token" in wiki_login(srv, person)
    verifier, challenge = pkce()
    code = person.code_for(authorize_params("wiki", "https://wiki.example.com/cb", challenge))
    basic = base64.b64encode(f"wiki:{SECRET}".encode()).decode()
    with httpx.Client(base_url=srv.url) as http:
        answer = http.post(
            "/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "code_verifier": verifier,
                "redirect_uri": "https://wiki.example.com/cb",
            },
            headers={"Authorization": f"Basic {basic}"},
        )
        assert answer.status_code == 200, answer.text
        wrong = base64.b64encode(b"wiki:nope").decode()
        refused = http.post(
            "/token",
            data={"grant_type": "authorization_code", "code": "x"},
            headers={"Authorization": f"Basic {wrong}"},
        )
    assert error_of(refused, 401)["error"] == "invalid_client"
    assert refused.headers["www-authenticate"].startswith("Basic")


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
