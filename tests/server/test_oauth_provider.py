"""grantd as OAuth 2.0 authorization server / OpenID provider, over HTTP against an in-process server
(ManualClock): every error row of /authorize and /token, refresh rotation and family revocation,
/revoke, /userinfo, which tokens are API bearers (peer bug 27), consent, client authentication and
agents' client_credentials with RFC 7523 assertions."""

from __future__ import annotations

import base64
from collections.abc import Iterator
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
    token_post,
    wiki_and_tool_clients,
)

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
