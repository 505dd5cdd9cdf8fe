"""Attacks on grantd as OAuth 2.0 / OIDC provider, device grant, SP and federation client (issue 11),
against a real in-process server (ManualClock). Every test tries one attack; the ones that hold
stay as regression tests, the ones that found a weakness prove its fix."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import httpx
import jwt
import pytest
from inproc import InProcessServer
from oauth_support import (
    APES_REDIRECT,
    TOOL,
    WIKI,
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
    answers: list[tuple[int, str]] = []

    def go() -> None:
        r = exchange(srv, code, verifier)
        answers.append((r.status_code, r.json().get("error_description", "") if r.status_code == 400 else ""))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    statuses = sorted(status for status, _ in answers)
    if statuses[0] == 200:
        assert statuses == [200] + [400] * 7
    else:
        # The exchange that took the code was still issuing when a replay came: the replay ended
        # what it issued (RFC 6749 §4.1.2), so it is refused as well, saying why. Only a backend
        # whose writes overlap (PostgreSQL) gets here; never two winners either way.
        assert statuses == [400] * 8
        assert sum("presented twice" in why for _, why in answers) == 1, answers  # the one that took it


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
