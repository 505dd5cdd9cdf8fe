"""Attacks on grantd as OAuth 2.0 / OIDC provider, device grant, SP and federation client (issue 11),
against a real in-process server (ManualClock). Every test tries one attack; the ones that hold
stay as regression tests, the ones that found a weakness prove its fix."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from inproc import InProcessServer
from oauth_support import (
    APES_REDIRECT,
    TOOL,
    WIKI,
    WIKI_SECRET,
    DrippingServer,
    MetadataServer,
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
from people_support import SESSION_COOKIE, new_public_key

from grantd.services import clients as oauth_clients
from grantd.web.views import safe_next

SECRET = WIKI_SECRET
CONFIG = """
[limits]
failed_bearer_per_address = 0
passkey_per_address = 0
token_per_address = 0
device_code_per_address = 0

[oauth]
access_token_ttl = 600
allow_private_metadata_hosts = true
""" + wiki_and_tool_clients()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = start_with_secrets(tmp_path_factory.mktemp("oauth-attacks"), CONFIG, {"wiki-secret": SECRET})
    yield server
    server.stop()


@pytest.fixture
def person(srv: InProcessServer) -> Person:
    return Person(srv)


def claims_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})  # type: ignore[no-any-return]


def bearer(
    srv: InProcessServer, token: str, path: str = "/api/me", method: str = "GET", **kwargs: Any
) -> httpx.Response:
    with srv.client(token) as http:
        return http.request(method, path, **kwargs)


def no_redirect_page(answer: httpx.Response) -> None:
    assert answer.status_code == 400, (answer.status_code, answer.headers.get("location"))
    assert "location" not in answer.headers
    assert answer.headers["content-type"].startswith("text/html")


def code_login(
    srv: InProcessServer, person: Person, client_id: str, redirect_uri: str, **extra: Any
) -> dict[str, Any]:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(client_id, redirect_uri, challenge, **extra))
    secret = {"client_secret": SECRET} if client_id == "wiki" else {}
    answer = exchange(srv, code, verifier, client_id=client_id, redirect_uri=redirect_uri, **secret)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


# -- redirect_uri tricks: never a redirect to an unproven URI -----------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "http://localhost:9876/callback/",
        "http://localhost:9876/Callback",
        "http://localhost:9876/%63allback",
        "http://localhost:9876/callback%2F..%2F",
        "http://localhost:9876//callback",
        "http://localhost:9876/callback?x=1",
        "http://localhost:9876/callback#frag",
        "http://localhost:9876/callback;x",
        "http://localhost.evil.com:9876/callback",
        "http://127.0.0.1.nip.io:9876/callback",
        "http://localhost:9876@evil.com/callback",
        "http://evil.com@localhost:9876/callback",
        "http://evil.com:x@127.0.0.1:9876/callback",
        "http://127.0.0.1:9876\\@evil.com/callback",
        "http://127.0.0.1:9876\\.evil.com/callback",
        "http://[::ffff:127.0.0.1]:9876/callback",
        "http://[::ffff:7f00:1]:9876/callback",
        "http://127.0.0.2:9876/callback",
        "http://0x7f000001:9876/callback",
        "http://2130706433:9876/callback",
        "http://0177.0.0.1:9876/callback",
        "http://127.1:9876/callback",
        "http://0.0.0.0:9876/callback",
        "http://localhost./callback",
        "http://localhost.:9876/callback",
        "http://localhost/callback",
        "http://localhost:65536/callback",
        "http://localhost:-1/callback",
        "http://localhost:9876 /callback",
        "https://localhost:9876/callback",
        "HTTP://evil.com/callback",
        "//localhost:9876/callback",
        "/callback",
        "javascript://localhost:9876/callback",
        "http://local\thost:9876/callback",
        "http://localhost:98\n76/callback",
        "http://localhost:9876/call\rback",
        "http://loc%61lhost:9876/callback",
        "http://xn--localhost-:9876/callback",
        "http://localhost:9876/callback\x00",
    ],
)
def test_apes_cli_redirect_uri_tricks_are_refused_on_grantds_own_page(
    srv: InProcessServer, person: Person, uri: str
) -> None:
    no_redirect_page(person.authorize(authorize_params(redirect_uri=uri)))


@pytest.mark.parametrize(
    "uri",
    [
        "https://WIKI.example.com/cb",
        "https://wiki.example.com/cb/",
        "https://wiki.example.com/cb?x=1",
        "https://wiki.example.com/cb#",
        "https://wiki.example.com:443/cb",
        "https://wiki.example.com/CB",
        "https://wiki.example.com/cb/../cb",
        "https://wiki.example.com.evil.com/cb",
        "https://evil.com/cb",
        "https://wiki.example.com@evil.com/cb",
        "http://wiki.example.com/cb",
        "https://wiki.example.com/%63b",
        " https://wiki.example.com/cb",
        "https://wiki.example.com/cb ",
    ],
)
def test_configured_redirect_uris_match_exactly(srv: InProcessServer, person: Person, uri: str) -> None:
    no_redirect_page(person.authorize(authorize_params("wiki", uri)))


def test_a_bad_client_with_a_bad_everything_never_redirects(srv: InProcessServer, person: Person) -> None:
    for params in (
        {"client_id": "evil.example", "redirect_uri": "https://evil.example/cb", "response_type": "token"},
        {
            "client_id": "wiki",
            "redirect_uri": "https://evil.example/cb",
            "response_type": "token",
            "prompt": "none",
        },
        {
            "client_id": "wiki",
            "redirect_uri": WIKI,
            "client_id ": "x",
            "redirect_uri ": "https://evil.example/cb",
        },
    ):
        answer = person.authorize(params)
        if answer.status_code == 302:  # only ever back to the registered URI
            assert answer.headers["location"].startswith(WIKI + "?"), answer.headers["location"]
        else:
            no_redirect_page(answer)


def test_a_repeated_redirect_uri_or_client_id_is_a_page_not_a_redirect(
    srv: InProcessServer, person: Person
) -> None:
    base = authorize_params("wiki", WIKI)
    for extra in (("redirect_uri", "https://evil.example/cb"), ("client_id", "apes-cli")):
        query = urlencode(base) + "&" + urlencode([extra])
        with person.http() as http:
            no_redirect_page(http.get("/authorize?" + query))


# -- next= / returnTo: local paths only -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "//evil.com",
        "///evil.com",
        "/\\evil.com",
        "/\\/evil.com",
        "\\\\evil.com",
        "https://evil.com",
        "http:evil.com",
        "javascript:alert(1)",
        "/\t/evil.com",
        "/\n/evil.com",
        "/\r\n//evil.com",
        " //evil.com",
        "\x00//evil.com",
        "/%0a/evil.com\n",
        "evil.com",
        "/" + "a" * 5000,
        "/\u2028//evil.com",
        "\u3000//evil.com",
    ],
    ids=repr,
)
def test_next_is_a_local_path_only(value: str) -> None:
    from grantd.web.views import DEFAULT_NEXT

    assert safe_next(value) == DEFAULT_NEXT


@pytest.mark.parametrize("value", ["//evil.com", "/\\evil.com", "https://evil.com", "/\t/evil.com"])
def test_login_next_never_leads_off_site(srv: InProcessServer, value: str) -> None:
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        page = http.get("/login", params={"next": value})
    assert page.status_code == 200
    assert "evil.com" not in page.text


# -- PKCE ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"code_challenge_method": "plain"},
        {"code_challenge_method": "s256"},
        {"code_challenge_method": None},
        {"code_challenge": None, "code_challenge_method": None},
        {"code_challenge": "short"},
        {"code_challenge": "a" * 129},
        {"code_challenge": "a" * 42 + "="},
        {"code_challenge": "a" * 42 + "+"},
    ],
)
def test_pkce_downgrades_are_refused_at_the_client(
    srv: InProcessServer, person: Person, change: dict[str, Any]
) -> None:
    params = authorize_params(**change) if "code_challenge" in change else {**authorize_params(), **change}
    params = {k: v for k, v in params.items() if v is not None}
    answer = person.authorize(params)
    assert answer.status_code == 302
    found = query_of(answer.headers["location"])
    assert answer.headers["location"].startswith(APES_REDIRECT + "?")
    assert found["error"] == "invalid_request" and "code" not in found


def test_the_challenge_itself_is_no_verifier(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    answer = exchange(srv, code, challenge)  # a "plain" downgrade at the token endpoint
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant"
    assert exchange(srv, code, verifier).status_code == 400  # and the code is burnt


@pytest.mark.parametrize("verifier", ["a" * 42, "a" * 129, "ä" * 43, "a" * 42 + " ", "a" * 42 + "\x00", ""])
def test_odd_verifiers_are_refused_without_a_5xx(srv: InProcessServer, person: Person, verifier: str) -> None:
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    code = person.code_for(authorize_params(challenge=challenge))
    answer = exchange(srv, code, verifier or None)
    assert answer.status_code == 400 and answer.json()["error"] in ("invalid_grant", "invalid_request"), (
        answer.text
    )


# -- codes across clients, replay ---------------------------------------------------------------------


def test_a_public_clients_code_cannot_be_taken_by_a_confidential_one_and_vice_versa(
    srv: InProcessServer, person: Person
) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    stolen = exchange(srv, code, verifier, client_id="wiki", redirect_uri=APES_REDIRECT, client_secret=SECRET)
    assert stolen.json()["error"] == "invalid_grant"
    assert exchange(srv, code, verifier).json()["error"] == "invalid_grant"  # burnt by the theft attempt
    verifier, challenge = pkce()
    code = person.code_for(authorize_params("wiki", WIKI, challenge))
    assert exchange(srv, code, verifier, client_id="wiki", redirect_uri=WIKI).status_code == 401  # no secret
    code = person.code_for(authorize_params("wiki", WIKI, challenge))
    assert (
        exchange(srv, code, verifier, client_id="tool", redirect_uri=WIKI).json()["error"] == "invalid_grant"
    )


def test_racing_exchanges_of_one_code_have_one_winner(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    statuses: list[int] = []

    def go() -> None:
        statuses.append(exchange(srv, code, verifier).status_code)

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200] + [400] * 7


# -- consent ------------------------------------------------------------------------------------------


def test_consent_for_a_smaller_scope_is_not_reused_for_a_bigger_one(
    srv: InProcessServer, person: Person
) -> None:
    code_login(srv, person, "wiki", WIKI, scope="openid")
    answer = person.authorize(authorize_params("wiki", WIKI, scope="openid email profile offline_access"))
    assert answer.status_code == 200 and "data-consent" in answer.text
    silent = person.authorize(authorize_params("wiki", WIKI, scope="openid offline_access", prompt="none"))
    assert query_of(silent.headers["location"])["error"] == "consent_required"


@pytest.mark.parametrize(
    "headers, body_kind",
    [
        ({"Origin": "https://evil.example"}, "json"),
        ({"Origin": "null"}, "json"),
        ({"Referer": "https://evil.example/page"}, "json"),
        ({"Origin": "http://127.0.0.1.evil.example"}, "json"),
        ({}, "form"),
        ({}, "text"),
        ({"Content-Type": "application/json-patch+json"}, "raw"),
    ],
)
def test_consent_cannot_be_forged_cross_site(
    srv: InProcessServer, person: Person, headers: dict[str, str], body_kind: str
) -> None:
    query = urlencode(authorize_params("wiki", WIKI))
    payload = json.dumps({"request": query, "approve": True})
    with person.http() as http:
        if body_kind == "json":
            answer = http.post(
                "/authorize/consent", json={"request": query, "approve": True}, headers=headers
            )
        elif body_kind == "form":
            answer = http.post(
                "/authorize/consent", data={"request": query, "approve": "true"}, headers=headers
            )
        elif body_kind == "text":
            answer = http.post("/authorize/consent", content=payload, headers={"Content-Type": "text/plain"})
        else:
            answer = http.post("/authorize/consent", content=payload, headers=headers)
    assert answer.status_code in (403, 415), answer.text
    again = person.authorize(authorize_params("wiki", WIKI))
    assert "data-consent" in again.text  # nothing was remembered


def test_a_get_of_the_consent_endpoint_approves_nothing(srv: InProcessServer, person: Person) -> None:
    query = urlencode(authorize_params("wiki", WIKI))
    with person.http() as http:
        got = http.get("/authorize/consent", params={"request": query, "approve": "true"})
    assert got.status_code in (404, 405)
    assert "data-consent" in person.authorize(authorize_params("wiki", WIKI)).text


def test_a_consent_post_with_a_bearer_and_the_cookie_uses_no_cookie(
    srv: InProcessServer, person: Person
) -> None:
    query = urlencode(authorize_params("wiki", WIKI))
    with person.http() as http:
        answer = http.post(
            "/authorize/consent",
            json={"request": query, "approve": True},
            headers={"Authorization": f"Bearer {srv.token}"},
        )
    assert answer.status_code == 401


# -- apes-cli: never a code without the person's click (issue 19 item 4; RFC 8252 §8.6, D8) ----------


@pytest.mark.parametrize(
    "client_id, redirect_uri",
    [
        ("apes-cli", "http://127.0.0.1:{port}/callback"),
        ("apes-cli", "http://localhost:{port}/callback"),
        ("tool", TOOL),
    ],
)
def test_apes_cli_never_gets_a_code_without_the_persons_click(
    srv: InProcessServer, person: Person, client_id: str, redirect_uri: str
) -> None:
    """After one consent, a web page navigating the person's browser to /authorize for a public
    client with API access (any loopback port, the attacker's code_challenge) gets no code: the
    consent page is shown again, and prompt=none answers consent_required."""
    login(srv, person, client_id=client_id, redirect_uri=redirect_uri.format(port=9876))  # consented once
    with person.http() as http:
        assert [c["client_id"] for c in http.get("/api/account/consents").json()["data"]] == [client_id]
    _, attackers_challenge = pkce()
    uri = redirect_uri.format(port=49152 + uuid.uuid4().int % 10000)
    for extra in (
        {},
        {"prompt": "none"},
        {"scope": "openid"},
        {"scope": "openid email profile offline_access"},
    ):
        answer = person.authorize(authorize_params(client_id, uri, attackers_challenge, **extra))
        if extra.get("prompt") == "none":
            assert answer.status_code == 302, answer.text
            found = query_of(answer.headers["location"])
            assert found["error"] in ("consent_required", "interaction_required") and "code" not in found
        else:
            assert answer.status_code == 200 and "data-consent" in answer.text, (
                answer.status_code,
                answer.headers,
            )
            assert "code=" not in answer.headers.get("location", "")
            assert "asks you every time" in answer.text


def test_an_apes_cli_approval_needs_the_ticket_of_the_page_shown_for_that_request(
    srv: InProcessServer, person: Person
) -> None:
    """The click must be on the consent page grantd showed for this very request: an approval
    POST without its one-time ticket, with the ticket of another request or person, or with a
    used one, gets no code (403) and remembers nothing."""
    _, challenge = pkce()
    params = authorize_params("apes-cli", "http://127.0.0.1:51234/callback", challenge)
    query = urlencode(params)
    page = person.authorize(params)
    ticket = ticket_of(page.text)
    assert page.status_code == 200 and ticket
    other_page = person.authorize(authorize_params("apes-cli", "http://127.0.0.1:51235/callback", challenge))
    other_person = Person(srv)
    theirs = ticket_of(other_person.authorize(params).text)
    for wrong in (None, "", "x" * 101, ticket_of(other_page.text), theirs, ["a"], 7):
        refused = person.consent(query, ticket=wrong) if not isinstance(wrong, list | int) else None
        if refused is None:
            with person.http() as http:
                refused = http.post(
                    "/authorize/consent",
                    json={"request": query, "approve": True, "ticket": wrong},
                    headers={"Origin": srv.url},
                )
        assert refused.status_code == 403, (wrong, refused.text)
        assert "code=" not in refused.text
    with person.http() as http:
        assert http.get("/api/account/consents").json()["data"] == []  # nothing remembered either
    approved = person.consent(query, ticket=ticket)
    assert approved.status_code == 200 and "code" in query_of(approved.json()["location"])
    again = person.consent(query, ticket=ticket)  # single use
    assert again.status_code == 403
    # denying needs no ticket: it gives nothing away
    denied = person.consent(query, approve=False)
    assert query_of(denied.json()["location"])["error"] == "access_denied"


def test_a_remembered_consent_still_spares_a_confidential_client_the_page(
    srv: InProcessServer, person: Person
) -> None:
    """The control: the rule is about public clients with API access, not every client."""
    code_login(srv, person, "wiki", WIKI, scope="openid email")
    again = person.authorize(authorize_params("wiki", WIKI, scope="openid email", prompt="none"))
    assert again.status_code == 302 and "code" in query_of(again.headers["location"])


# -- a replayed authorization code ends what it issued (issue 19 item 9; RFC 6749 §4.1.2) ------------


@pytest.mark.parametrize(
    "client_id, redirect_uri, scope",
    [
        ("apes-cli", APES_REDIRECT, "openid email profile offline_access"),  # API bearer + refresh token
        ("tool", TOOL, "openid email"),  # API bearer, no refresh token
        ("wiki", WIKI, "openid email"),  # /userinfo only, no refresh token
        ("wiki", WIKI, "openid email offline_access"),  # /userinfo + refresh token
    ],
)
def test_a_replayed_code_revokes_every_token_it_issued(
    srv: InProcessServer, person: Person, client_id: str, redirect_uri: str, scope: str
) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(client_id, redirect_uri, challenge, scope=scope))
    secret = {"client_secret": SECRET} if client_id == "wiki" else {}
    first = exchange(srv, code, verifier, client_id=client_id, redirect_uri=redirect_uri, **secret)
    assert first.status_code == 200, first.text
    tokens = first.json()
    api = client_id != "wiki"
    assert bearer(srv, tokens["access_token"], "/userinfo").status_code == 200
    if api:
        assert bearer(srv, tokens["access_token"]).status_code == 200
    replay = exchange(srv, code, verifier, client_id=client_id, redirect_uri=redirect_uri, **secret)
    assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
    assert bearer(srv, tokens["access_token"], "/userinfo").status_code == 401
    if api:
        assert bearer(srv, tokens["access_token"]).status_code == 401
    if "refresh_token" in tokens:
        refreshed = token_post(
            srv,
            {
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": client_id,
                **secret,
            },
        )
        assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"
    else:
        assert client_id != "apes-cli"


def test_a_code_replayed_long_after_still_ends_the_refresh_family(
    srv: InProcessServer, person: Person
) -> None:
    """The code lived 60 s, but its refresh token lives for weeks: a replay while it is alive ends it."""
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    tokens = exchange(srv, code, verifier).json()
    srv.clock.advance(1200)  # past the code's record (600 s) and its access token (600 s here)
    assert exchange(srv, code, verifier).json()["error"] == "invalid_grant"
    refreshed = token_post(
        srv,
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": "apes-cli"},
    )
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"


def test_a_code_replayed_by_someone_without_the_verifier_still_ends_its_tokens(
    srv: InProcessServer, person: Person
) -> None:
    """The replay proves the code leaked, whoever presents it (RFC 6749 §4.1.2: "SHOULD revoke")."""
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    tokens = exchange(srv, code, verifier).json()
    wrong_verifier, _ = pkce()
    assert exchange(srv, code, wrong_verifier).json()["error"] == "invalid_grant"
    assert bearer(srv, tokens["access_token"]).status_code == 401
    assert (
        token_post(
            srv,
            {
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": "apes-cli",
            },
        ).json()["error"]
        == "invalid_grant"
    )


def test_a_replay_ends_only_that_codes_sign_in(srv: InProcessServer, person: Person) -> None:
    other = login(srv, person)
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    assert exchange(srv, code, verifier).status_code == 200
    assert exchange(srv, code, verifier).status_code == 400
    assert bearer(srv, other["access_token"]).status_code == 200
    refreshed = token_post(
        srv, {"grant_type": "refresh_token", "refresh_token": other["refresh_token"], "client_id": "apes-cli"}
    )
    assert refreshed.status_code == 200, refreshed.text


def test_racing_replays_of_one_code_leave_no_live_token(srv: InProcessServer, person: Person) -> None:
    """Whoever wins the race, once the code was presented twice nothing it issued works."""
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    answers: list[httpx.Response] = []

    def go() -> None:
        answers.append(exchange(srv, code, verifier))

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    issued = [a.json() for a in answers if a.status_code == 200]
    assert len(issued) <= 1
    for tokens in issued:
        assert bearer(srv, tokens["access_token"]).status_code == 401
        assert (
            token_post(
                srv,
                {
                    "grant_type": "refresh_token",
                    "refresh_token": tokens["refresh_token"],
                    "client_id": "apes-cli",
                },
            ).json()["error"]
            == "invalid_grant"
        )


def test_a_replay_between_the_take_and_the_mark_still_ends_the_family(
    srv: InProcessServer, person: Person
) -> None:
    """The interleaving a race can produce, forced: the replay is seen after the first redeemer took
    the code but before it recorded its family; the redeemer then finds the replay and revokes."""
    from grantd.oauth import token as oauth_token
    from grantd.oauth.issue import secret_hash

    tokens = login(srv, person)
    family_id = claims_of(tokens["access_token"])["sid"]
    services = srv.services
    code_hash = secret_hash("a code that was taken a moment ago " + uuid.uuid4().hex)
    now = srv.clock.now_ms()
    srv.call(oauth_token._code_replayed(services, code_hash, now))  # finds no family yet
    assert bearer(srv, tokens["access_token"]).status_code == 200
    assert srv.call(oauth_token._code_redeemed(services, code_hash, family_id, now + 60_000, now)) is True
    assert bearer(srv, tokens["access_token"]).status_code == 401


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


# -- SSRF guard of the client metadata fetch --------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::127.0.0.1",
        "2002:7f00:1::",
        "2002:a9fe:a9fe::",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b:1::a00:1",
        "ff02::1",
        "fe80::1%eth0",
        "198.18.0.1",
        "192.0.0.170",
        "240.0.0.1",
        "100::1",
        "2001:db8::1",
    ],
)
def test_non_public_addresses_in_every_form_are_refused(address: str) -> None:
    assert oauth_clients.public_address(address) is False


def test_a_domain_client_resolving_to_a_private_address_is_never_fetched(srv: InProcessServer) -> None:
    import asyncio

    from grantd.services.clients import MetadataError, fetch_metadata

    tried: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        tried.append(host)
        return ["93.184.216.34", "127.0.0.1"]  # one public, one loopback: refused as a whole

    with pytest.raises(MetadataError, match="non-public"):
        asyncio.run(fetch_metadata("sp.example.com", allow_private=False, resolver=resolver))
    assert tried == ["sp.example.com"]


@pytest.mark.parametrize(
    "client_id",
    [
        "2130706433",
        "0x7f000001",
        "[::1]",
        "127.0.0.1:80@evil.com",
        "evil.com/x",
        "evil.com#",
        "evil.com?x",
        "EVIL.com",
        "evil.com.",
        "user@evil.com",
        "evil.com:99999x",
        "evil.com:80:80",
        "-evil.com",
        "evil..com",
    ],
)
def test_odd_client_ids_are_not_domain_clients(client_id: str) -> None:
    assert not oauth_clients.is_domain_client_id(client_id)


# -- a domain client's metadata on the consent page ---------------------------------------------------


def test_metadata_cannot_inject_markup_or_script_links(srv: InProcessServer, person: Person) -> None:
    sp = MetadataServer()
    try:
        sp.document = {
            **sp.document,
            "client_name": '<script>alert(1)</script>"><img src=x onerror=alert(2)>',
            "client_uri": "javascript:alert(3)//http://x",
        }
        page = person.authorize(authorize_params(sp.client_id, sp.redirect_uri))
        assert page.status_code == 200, page.text[:400]
        assert "<script>alert" not in page.text and "<img" not in page.text
        assert "javascript:" not in page.text
    finally:
        sp.close()


def test_metadata_redirect_uris_must_be_http_urls(srv: InProcessServer, person: Person) -> None:
    sp = MetadataServer()
    try:
        sp.document = {**sp.document, "redirect_uris": ["javascript:alert(1)//", sp.redirect_uri]}
        no_redirect_page(person.authorize(authorize_params(sp.client_id, "javascript:alert(1)//")))
    finally:
        sp.close()


# -- odd input: never a 5xx, never a secret in an answer ----------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "client_id=%ff%fe&redirect_uri=%c0%af",
        "client_id=apes-cli&redirect_uri=" + "x" * 20000,
        "client_id=" + "a." * 130 + "com",
        "&".join(["scope=openid"] * 500),
        "client_id=apes-cli&redirect_uri=http%3A%2F%2Flocalhost%3A9876%2Fcallback&response_type=code&state=%00%ff",
        "client_id=apes-cli&redirect_uri=http%3A%2F%2Flocalhost%3A9876%2Fcallback&response_type=code&code_challenge_method=S256"
        "&code_challenge=" + "A" * 43 + "&nonce=%ed%a0%80&login_hint=%ed%a0%80",
        "client_id=%00",
        "client_id=a%0d%0aSet-Cookie:%20x=y",
        "%ff=%ff",
        "client_id",
    ],
    ids=lambda q: q[:40],
)
def test_odd_authorize_queries_never_5xx(srv: InProcessServer, person: Person, query: str) -> None:
    with person.http() as http:
        answer = http.get("/authorize?" + query)
    assert answer.status_code < 500, answer.text[:300]
    if answer.status_code in (413, 414):  # refused by the HTTP server before any route: nothing to cache
        return
    assert "set-cookie" not in {k.lower() for k in answer.headers if answer.headers[k].startswith("x=")}
    assert answer.headers.get("cache-control", "").startswith("no-store")


@pytest.mark.parametrize("path", ["/token", "/revoke", "/userinfo", "/device_authorization"])
@pytest.mark.parametrize(
    "content, ctype",
    [
        (b"\xff\xfe=\xff", "application/x-www-form-urlencoded"),
        (b"grant_type=authorization_code&" + b"a=b&" * 2000, "application/x-www-form-urlencoded"),
        (b'{"grant_type": {"x": 1}}', "application/json"),
        (b'{"grant_type": 1e999}', "application/json"),
        (b'{"client_id": "\\ud800"}', "application/json"),
        (b"[" * 100000, "application/json"),
        (
            b'{"grant_type": "refresh_token", "refresh_token": "'
            + b"a" * 100000
            + b'", "client_id": "apes-cli"}',
            "application/json",
        ),
        (
            b"grant_type=client_credentials&client_assertion=a.b.c&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3A"
            b"client-assertion-type%3Ajwt-bearer",
            "application/x-www-form-urlencoded",
        ),
        (
            b"grant_type=client_credentials&client_assertion=eyJhbGciOiJFZERTQSJ9.eyJpc3MiOlsxXX0.AA&client_assertion_type=urn"
            b"%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer",
            "application/x-www-form-urlencoded",
        ),
        (
            b"grant_type=client_credentials&client_assertion=eyJhbGciOiJFZERTQSJ9.eyJpc3MiOnsiYSI6MX0sInN1YiI6eyJhIjoxfX0.AA"
            b"&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer",
            "application/x-www-form-urlencoded",
        ),
        (b"token=a.b.c&client_id=%ff", "application/x-www-form-urlencoded"),
        (b"client_id=grantd-cli&scope=" + b"openid%20" * 400, "application/x-www-form-urlencoded"),
        (
            b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&client_id=grantd-cli&device_code=%ed%a0%80",
            "application/x-www-form-urlencoded",
        ),
    ],
    ids=lambda v: repr(v[:30]) if isinstance(v, bytes) else v,
)
def test_odd_bodies_never_5xx_and_are_never_cached(
    srv: InProcessServer, path: str, content: bytes, ctype: str
) -> None:
    with httpx.Client(base_url=srv.url, timeout=20) as http:
        answer = http.post(path, content=content, headers={"Content-Type": ctype})
    assert answer.status_code < 500, answer.text[:300]
    assert answer.headers.get("cache-control", "").startswith("no-store"), dict(answer.headers)


@pytest.mark.parametrize(
    "header",
    [
        "Basic " + base64.b64encode(b"\xff\xfe:\xff").decode(),
        "Basic " + base64.b64encode(b"wiki").decode(),
        "Basic ===",
        "Basic " + base64.b64encode(b"wiki:%ff%fe").decode(),
        "Basic " + base64.b64encode(b"%00:x").decode(),
        "Basic " + base64.b64encode(("a" * 5000 + ":b").encode()).decode(),
    ],
)
def test_odd_basic_credentials_never_5xx(srv: InProcessServer, header: str) -> None:
    with httpx.Client(base_url=srv.url, timeout=10) as http:
        answer = http.post(
            "/token",
            data={"grant_type": "authorization_code", "code": "x"},
            headers={"Authorization": header},
        )
    assert answer.status_code == 401, answer.text
    assert "www-authenticate" in answer.headers


def test_errors_never_echo_a_secret(srv: InProcessServer, person: Person) -> None:
    wrong = "wrong-secret-" + uuid.uuid4().hex
    answers = [
        token_post(
            srv,
            {"grant_type": "authorization_code", "code": "x", "client_id": "wiki", "client_secret": wrong},
        ),
        token_post(srv, {"grant_type": "refresh_token", "refresh_token": wrong, "client_id": "apes-cli"}),
        token_post(srv, {"grant_type": "authorization_code", "code": wrong, "client_id": "apes-cli"}),
        token_post(
            srv,
            {"grant_type": "authorization_code", "code": "x"},
            headers={"Authorization": "Basic " + base64.b64encode(f"wiki:{wrong}".encode()).decode()},
        ),
    ]
    with httpx.Client(base_url=srv.url) as http:
        answers.append(http.get("/userinfo", headers={"Authorization": f"Bearer {wrong}.{wrong}.{wrong}"}))
    for answer in answers:
        assert wrong not in answer.text and wrong not in str(answer.headers), answer.text
        assert SECRET not in answer.text


def test_token_answers_are_never_cached(srv: InProcessServer, person: Person) -> None:
    verifier, challenge = pkce()
    code = person.code_for(authorize_params(challenge=challenge))
    answers = [exchange(srv, code, verifier), exchange(srv, code, verifier)]
    with httpx.Client(base_url=srv.url) as http:
        answers.append(http.post("/device_authorization", data={"client_id": "grantd-cli"}))
        answers.append(http.post("/revoke", data={"token": "x"}))
        answers.append(
            http.get("/userinfo", headers={"Authorization": f"Bearer {answers[0].json()['access_token']}"})
        )
    for answer in answers:
        assert answer.headers["cache-control"] == "no-store" and answer.headers["pragma"] == "no-cache", (
            answer.headers
        )
    assert person.authorize(authorize_params()).headers["cache-control"] == "no-store"


def test_state_is_returned_verbatim_and_cannot_split_headers(srv: InProcessServer, person: Person) -> None:
    for state in ("a&code=injected", "x\r\nSet-Cookie: a=b", "é%20/?#", "<script>"):
        params = authorize_params(state=state, scope="openid email profile offline_access")
        answer = person.authorize(params)
        if answer.status_code == 200:  # consent first: answer it (on the page of this very request)
            location = person.consent(urlencode(params), ticket=ticket_of(answer.text)).json()["location"]
        else:
            location = answer.headers["location"]
        found = query_of(location)
        assert "set-cookie" not in {k.lower() for k in answer.headers}
        if "\r" in state:
            assert found.get("error") == "invalid_request"
        else:
            assert found["state"] == state and found.get("code", "").count("injected") == 0


def test_an_id_token_for_a_domain_client_cannot_become_an_api_bearer_by_client_id(
    srv: InProcessServer, person: Person
) -> None:
    # a domain client named like the API audience would get ID tokens with aud = the API audience
    assert not oauth_clients.is_domain_client_id(
        srv.services.tokens.agent_audience
    ) or srv.services.tokens.agent_audience in ("apes-cli",)
    tokens = login(srv, person)
    assert claims_of(tokens["id_token"])["aud"] == "apes-cli"
    assert bearer(srv, tokens["id_token"]).status_code == 401


# -- forged bearers -------------------------------------------------------------------------------------


def _forge(header: dict[str, Any], claims: dict[str, Any], key: bytes | None = None) -> str:
    head = _b64(json.dumps(header).encode())
    body = _b64(json.dumps(claims).encode())
    mac = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest() if key is not None else b""
    return f"{head}.{body}.{_b64(mac)}"


def test_forged_access_tokens_are_refused(srv: InProcessServer, person: Person) -> None:
    real = login(srv, person)
    claims = claims_of(real["access_token"])
    kid = jwt.get_unverified_header(real["access_token"])["kid"]
    with httpx.Client(base_url=srv.url) as http:
        jwks = http.get("/.well-known/jwks.json").json()["keys"]
    secrets_to_try = (
        [kid.encode(), b""]
        + [json.dumps(k).encode() for k in jwks]
        + [base64.urlsafe_b64decode(k["x"] + "==") for k in jwks if "x" in k]
    )
    forged = [_forge({"alg": "none", "kid": kid, "typ": "JWT"}, claims), _forge({"alg": "none"}, claims)]
    forged += [_forge({"alg": "HS256", "kid": kid, "typ": "JWT"}, claims, s) for s in secrets_to_try]
    attacker = Ed25519PrivateKey.generate()
    raw = attacker.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    embedded = {"kty": "OKP", "crv": "Ed25519", "x": _b64(raw)}
    forged.append(jwt.encode(claims, attacker, algorithm="EdDSA", headers={"kid": kid, "jwk": embedded}))
    forged.append(
        jwt.encode(
            claims, attacker, algorithm="EdDSA", headers={"kid": "attacker", "jku": "https://evil.example/j"}
        )
    )
    other_kids = [k["kid"] for k in jwks if k.get("kty") != "OKP"]
    for other in other_kids:
        forged.append(_forge({"alg": "RS256", "kid": other}, claims, b"x"))
    head, body, signature = real["access_token"].split(".")
    forged.append(f"{head}.{body}.{signature}=")  # another spelling of the same token
    forged.append(f"{head}.{body}.{signature[:-2]}")
    for token in forged:
        assert bearer(srv, token).status_code == 401, token
        assert bearer(srv, token, "/userinfo").status_code == 401, token


def test_an_expired_access_token_is_refused_everywhere(tmp_path: Path) -> None:
    server = InProcessServer(tmp_path, extra="[limits]\nfailed_bearer_per_address = 0\n").start()
    try:
        person = Person(server)
        tokens = login(server, person)
        assert bearer(server, tokens["access_token"]).status_code == 200
        server.clock.advance(tokens["expires_in"] + 1)
        assert bearer(server, tokens["access_token"]).status_code == 401
        assert bearer(server, tokens["access_token"], "/userinfo").status_code == 401
    finally:
        server.stop()


def test_a_bearer_plus_a_junk_cookie_cannot_approve_a_terminal(srv: InProcessServer, person: Person) -> None:
    apes = login(srv, person)
    started = httpx.post(f"{srv.url}/device_authorization", data={"client_id": "grantd-cli"}).json()
    for cookie in ("junk", person.cookie):
        with httpx.Client(base_url=srv.url, cookies={SESSION_COOKIE: cookie}) as http:
            answer = http.post(
                "/api/device/decide",
                json={"user_code": started["user_code"], "approve": True},
                headers={"Authorization": f"Bearer {apes['access_token']}"},
            )
        assert answer.status_code == 403, answer.text


def test_a_guest_is_never_an_administrator(srv: InProcessServer, guest: httpx.Client) -> None:
    with guest as http:
        assert http.get("/api/admin/users").status_code == 403
        assert (
            http.post(
                "/api/agent/enroll",
                json={"email": "agent+g@example.com", "name": "g", "publicKey": new_public_key()[1]},
                headers={"Origin": srv.url},
            ).status_code
            == 403
        )
        assert http.get("/api/grants").status_code == 403


@pytest.mark.parametrize(
    "body", [b"[" * 100000, b'{"a":' * 50000 + b"1" + b"}" * 50000], ids=["array", "object"]
)
def test_deep_json_at_the_consent_and_device_routes_is_a_4xx(
    srv: InProcessServer, person: Person, body: bytes
) -> None:
    with person.http() as http:
        for path in ("/authorize/consent", "/api/device/decide"):
            answer = http.post(
                path, content=body, headers={"Content-Type": "application/json", "Origin": srv.url}
            )
            assert 400 <= answer.status_code < 500, (path, answer.status_code)


def test_metadata_fetches_for_made_up_client_ids_are_limited_per_address(tmp_path: Path) -> None:
    """Wildcard DNS gives an attacker endless client_ids: each unknown one costs grantd a DNS lookup
    and an HTTPS request. They count against the address (``limits.sp_login_per_address``, the
    limit of the other "a DNS lookup and a request" route) at /authorize and /revoke. (Each under
    its own registrable domain here: names under one failed domain are not fetched at all, see
    test_a_failing_domain_is_not_fetched_again_under_any_name.)"""
    server = InProcessServer(tmp_path, extra="[limits]\nsp_login_per_address = 5\n").start()
    try:
        resolved: list[str] = []

        async def resolver(host: str, port: int) -> list[str]:
            resolved.append(host)
            raise oauth_clients.MetadataError(f"cannot resolve {host}")

        server.services.oauth_clients.resolver = resolver
        statuses = []
        with httpx.Client(base_url=server.url, timeout=10) as http:
            for n in range(8):
                statuses.append(
                    http.get(
                        "/authorize",
                        params={"client_id": f"x{n}.attacker{n}.example", "redirect_uri": "https://x/cb"},
                    ).status_code
                )
            for n in range(8):
                statuses.append(
                    http.post(
                        "/revoke", data={"client_id": f"r{n}.attacker-r{n}.example", "token": "t"}
                    ).status_code
                )
            for n in range(4):
                basic = base64.b64encode(f"b{n}.attacker-b{n}.example:s".encode()).decode()
                statuses.append(
                    http.post(
                        "/revoke", data={"token": "t"}, headers={"Authorization": f"Basic {basic}"}
                    ).status_code
                )
                statuses.append(
                    http.post(
                        "/token",
                        data={
                            "grant_type": "refresh_token",
                            "refresh_token": "t",
                            "client_id": f"t{n}.attacker-t{n}.example",
                        },
                    ).status_code
                )
            # a client already known (cached, even negatively) costs nothing: no count
            again = http.get(
                "/authorize", params={"client_id": "x0.attacker0.example", "redirect_uri": "https://x/cb"}
            )
        assert len(resolved) <= 5, resolved
        assert statuses.count(429) >= 19 and again.status_code == 400
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/token", "/revoke", "/device_authorization"])
def test_a_json_member_given_twice_is_refused_like_a_repeated_form_parameter(
    srv: InProcessServer, path: str
) -> None:
    """RFC 6749 §3.2: a parameter given twice is refused; a JSON body must not let the last one win."""
    body = b'{"grant_type": "refresh_token", "client_id": "grantd-cli", "client_id": "wiki", "token": "t", "refresh_token": "t"}'
    with httpx.Client(base_url=srv.url) as http:
        answer = http.post(path, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_request", answer.text


# -- slow client metadata (issue 19 item 5; D12): one deadline, a bound, failures per domain ------------


@pytest.mark.slow
def test_a_dripping_metadata_server_is_cut_off_at_one_overall_deadline(
    srv: InProcessServer, person: Person
) -> None:
    """One byte a second never trips a 3 s read timeout; the whole fetch still ends at 5 s, the
    unauthenticated /authorize answers with a clear page, and grantd hangs up on the server."""
    import time

    drip = DrippingServer(every=1.0)
    try:
        client_id = f"127.0.0.1:{drip.port}"
        started = time.monotonic()
        with httpx.Client(base_url=srv.url, timeout=20) as http:
            answer = http.get("/authorize", params=authorize_params(client_id, f"http://{client_id}/cb"))
        took = time.monotonic() - started
        assert answer.status_code == 400 and "within 5 s" in answer.text, answer.text[-600:]
        assert 4.5 <= took < 9, took
        deadline = time.monotonic() + 5
        while drip.open and time.monotonic() < deadline:
            time.sleep(0.1)
        assert drip.open == 0, "grantd still holds the connection"
        # remembered: asking again fetches nothing and answers at once
        started = time.monotonic()
        with httpx.Client(base_url=srv.url, timeout=20) as http:
            again = http.get("/authorize", params=authorize_params(client_id, f"http://{client_id}/cb"))
        assert again.status_code == 400 and time.monotonic() - started < 2 and drip.connections == 1
    finally:
        drip.close()


def _registry(config_text: str, directory: Path, resolver: Any) -> tuple[Any, Any]:
    from grantd.config import load
    from grantd.core.clock import ManualClock

    path = directory / "grantd.toml"
    path.write_text(
        f'version = 1\n[server]\nissuer = "http://127.0.0.1:1"\n[admin]\nmanagement_token = "{"m" * 32}"\n'
        f"[oauth]\nallow_private_metadata_hosts = true\n{config_text}"
    )
    clock = ManualClock()
    return oauth_clients.ClientRegistry(load(path), clock, resolver=resolver), clock


def test_a_failing_domain_is_not_fetched_again_under_any_name(tmp_path: Path) -> None:
    """Wildcard DNS: every name under evil.example resolves (here to a real local server that fails).
    The first failure keeps the whole registrable domain from being fetched for
    ``oauth.metadata_failure_ttl``; then it is asked again. Other domains are not affected."""
    import asyncio

    sp = MetadataServer()
    sp.mode = "status"
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    try:
        registry, clock = _registry("metadata_failure_ttl = 60\n", tmp_path, resolver)

        async def scenario() -> None:
            assert await registry.get(f"a.evil.example:{sp.port}") is None
            assert sp.hits == 1
            for name in ("b.evil.example", "c.d.evil.example", "evil.example", "x.EVIL.example".lower()):
                assert await registry.get(f"{name}:{sp.port}") is None
                assert "failed recently" in registry.why_unknown(f"{name}:{sp.port}")
                assert not registry.would_fetch(f"{name}:{sp.port}")
            assert sp.hits == 1 and asked == ["a.evil.example"]
            sp.mode = "ok"
            sp.document = {**sp.document, "client_id": f"good.other.example:{sp.port}"}
            assert await registry.get(f"good.other.example:{sp.port}") is not None  # another domain
            clock.advance(61)
            sp.document = {**sp.document, "client_id": f"b.evil.example:{sp.port}"}
            assert await registry.get(f"b.evil.example:{sp.port}") is not None  # asked again after the ttl

        asyncio.run(scenario())
        assert sp.hits == 3
    finally:
        sp.close()


@pytest.mark.slow
def test_fetches_over_the_bound_are_refused_at_once_not_queued(tmp_path: Path) -> None:
    """``oauth.fetches_at_once``: with the bound taken by dripping fetches, one more client is
    refused at once (a clear reason), and it is not remembered as the domain's failure."""
    import asyncio
    import time

    drip = DrippingServer(every=0.5)

    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    try:
        registry, _ = _registry("fetches_at_once = 2\n", tmp_path, resolver)

        async def scenario() -> None:
            slow = [asyncio.create_task(registry.get(f"s{n}.slow{n}.example:{drip.port}")) for n in range(2)]
            while drip.open < 2:
                await asyncio.sleep(0.05)
            started = time.monotonic()
            assert await registry.get(f"one.more.example:{drip.port}") is None
            assert time.monotonic() - started < 1
            assert "too many fetches at once" in registry.why_unknown(f"one.more.example:{drip.port}")
            assert registry.fetches.failed("more.example") is None
            assert await asyncio.gather(*slow) == [None, None]  # the deadline ended them
            assert registry.fetches.running == 0

        asyncio.run(scenario())
    finally:
        drip.close()


@pytest.mark.parametrize(
    "host, expected",
    [
        ("a.b.example.com", "example.com"),
        ("example.com", "example.com"),
        ("x.example.co.uk", "example.co.uk"),
        ("deep.x.example.com.au", "example.com.au"),
        ("127.0.0.1", "127.0.0.1:8443"),
        ("localhost", "localhost:8443"),
        ("EXAMPLE.com.", "example.com"),
    ],
)
def test_failures_are_remembered_per_registrable_domain(host: str, expected: str) -> None:
    from grantd.services.outbound import registrable_domain

    assert registrable_domain(host, 8443 if expected.endswith(":8443") else None) == expected
