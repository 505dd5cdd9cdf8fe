"""Login CSRF (issue 19 item 3, D8): a site of the attacker's making must not sign a visitor's
browser in as the attacker. The attacker holds a perfectly valid passkey response (their own
passkey, signing options they fetched themselves) and makes the victim's browser post it.

Three locks, each tried on its own against a real in-process server: the passkey routes refuse a
cross-site ``Origin``/``Referer`` and ``Sec-Fetch-Site: cross-site`` with or without a cookie; their
bodies must be ``application/json`` (what an HTML form cannot send), as must every
cookie-authenticated body anywhere; and a challenge is bound to the browser that asked for it, so a
response posted from another browser is refused even as a well-formed same-origin JSON request.
What stays open: requests with an ``Authorization`` header, the agents' challenge and authenticate
routes (JSON under any content type, curl's ``-d``), and clients that send neither Origin nor
Referer. The same attack in Chromium is tests/system/browser/test_login_csrf.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from people_support import signed_in_person
from support.soft_webauthn import PasskeyBrowser, make_registration

from conftest import problem

LIMITS_OFF = "[limits]\npasskey_per_address = 0\n"
EVIL = "http://evil.example"
PASSKEY_ROUTES = (
    "/api/webauthn/login/options",
    "/api/webauthn/login/verify",
    "/api/webauthn/register/options",
    "/api/webauthn/register/verify",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path_factory.mktemp("login-csrf"), extra=LIMITS_OFF).start()
    yield srv
    srv.stop()


_serial = iter(range(10**6))


def attacker(server: InProcessServer) -> PasskeyBrowser:
    """The attacker, registered with their own passkey, in their own browser."""
    b = PasskeyBrowser(server.url, server.url)
    answer = b.register(make_registration(server, f"mallory{next(_serial)}@example.com"))
    assert answer.status_code == 200, answer.text
    return b


def forged_login(server: InProcessServer) -> dict[str, Any]:
    """A valid login response of the attacker's passkey, to options the attacker's browser fetched."""
    mallory = attacker(server)
    opts = mallory.request("POST", "/api/webauthn/login/options", json_body={})
    assert opts.status_code == 200, opts.text
    return {"response": mallory.authenticator.get(opts.json(), server.url)}


def forged_registration(server: InProcessServer) -> dict[str, Any]:
    """A registration URL the attacker holds, completed up to verify in the attacker's browser."""
    mallory = PasskeyBrowser(server.url, server.url)
    token = make_registration(server, f"mallory-reg{next(_serial)}@example.com")
    opts = mallory.request("POST", "/api/webauthn/register/options", json_body={"token": token})
    assert opts.status_code == 200, opts.text
    return {"token": token, "response": mallory.authenticator.create(opts.json(), server.url)}


def text_plain(body: dict[str, Any]) -> bytes:
    """What ``<form enctype="text/plain">`` with one field named ``{"x":"`` and the rest in its
    value sends: a JSON document with a junk member (``name=value``)."""
    encoded = json.dumps({**body, "x": "="})
    return encoded.encode()


def post(server: InProcessServer, path: str, content: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.url + path, content=content, headers=headers, timeout=10)


def signs_in(response: httpx.Response) -> bool:
    return any(
        c.startswith("grantd_session=")
        and not c.startswith("grantd_session=;")
        and "max-age=0" not in c.lower()
        for c in response.headers.get_list("set-cookie")
    )


# -- the cross-site form, as a browser sends it ----------------------------------------------------


@pytest.mark.parametrize("what", ["login", "register"])
def test_the_cross_site_text_plain_form_signs_nobody_in(server: InProcessServer, what: str) -> None:
    body = forged_login(server) if what == "login" else forged_registration(server)
    path = f"/api/webauthn/{what}/verify"
    browser_headers = {"Content-Type": "text/plain", "Origin": EVIL, "Sec-Fetch-Site": "cross-site"}
    answer = post(server, path, text_plain(body), browser_headers)
    assert answer.status_code == 403 and problem(answer)["detail"] == "cross-site request refused"
    assert not signs_in(answer)


@pytest.mark.parametrize("path", PASSKEY_ROUTES)
@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": EVIL},
        {"Origin": "null"},
        {"Referer": EVIL + "/page"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
    ids=["origin", "null-origin", "referer", "sec-fetch-site"],
)
def test_the_passkey_routes_refuse_cross_site_requests_without_a_cookie(
    server: InProcessServer, path: str, headers: dict[str, str]
) -> None:
    answer = post(server, path, b"{}", {"Content-Type": "application/json", **headers})
    assert answer.status_code == 403 and problem(answer)["detail"] == "cross-site request refused"


@pytest.mark.parametrize("path", PASSKEY_ROUTES)
@pytest.mark.parametrize(
    "media", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""]
)
def test_the_passkey_routes_take_only_json_bodies_without_a_cookie(
    server: InProcessServer, path: str, media: str
) -> None:
    """The form's Origin could be stripped (a privacy extension, an old browser): the body rule
    alone refuses it, on the same origin and with no header at all."""
    for headers in ({"Origin": server.url}, {}):
        sent = {**headers, "Content-Type": media} if media else headers
        answer = post(server, path, b'{"x": "="}', sent)
        assert (
            answer.status_code == 415 and problem(answer)["detail"] == "request body must be application/json"
        ), (headers, media)


def test_the_forged_login_is_refused_by_its_body_alone(server: InProcessServer) -> None:
    answer = post(
        server, "/api/webauthn/login/verify", text_plain(forged_login(server)), {"Content-Type": "text/plain"}
    )
    assert answer.status_code == 415 and not signs_in(answer)


# -- the challenge is bound to the browser that asked for it -------------------------------------


def test_a_login_response_from_another_browser_is_refused(server: InProcessServer) -> None:
    """Even a same-origin JSON request (as if the other locks were gone) cannot redeem a challenge
    that another browser asked for: with no binding cookie, nor with the victim's own."""
    victim = PasskeyBrowser(server.url, server.url)
    assert (
        victim.request("POST", "/api/webauthn/login/options", json_body={}).status_code == 200
    )  # its own binding
    for send_cookies in (False, True):
        answer = victim.request(
            "POST", "/api/webauthn/login/verify", json_body=forged_login(server), cookie=send_cookies
        )
        assert answer.status_code == 401 and "another browser" in problem(answer)["detail"]
        assert not signs_in(answer) and victim.cookie is None
    assert victim.me().status_code == 401


def test_a_registration_response_from_another_browser_is_refused(server: InProcessServer) -> None:
    victim = PasskeyBrowser(server.url, server.url)
    forged = forged_registration(server)
    answer = victim.request("POST", "/api/webauthn/register/verify", json_body=forged)
    assert answer.status_code == 400 and "another browser" in problem(answer)["detail"]
    assert not signs_in(answer) and victim.me().status_code == 401


def test_the_binding_cookie_is_httponly_strict_and_scoped(server: InProcessServer) -> None:
    answer = httpx.post(server.url + "/api/webauthn/login/options", json={}, timeout=10)
    cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("grantd_passkey="))
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "path", "max-age", "samesite"} <= attributes
    assert "SameSite=Strict" in cookie and "Path=/api/webauthn/" in cookie


def test_the_browser_that_asked_signs_in_and_two_tabs_both_work(server: InProcessServer) -> None:
    mallory = attacker(server)  # here simply a person signing in with their own browser
    mallory.cookie = None
    first = mallory.request("POST", "/api/webauthn/login/options", json_body={}).json()
    second = mallory.request("POST", "/api/webauthn/login/options", json_body={}).json()  # a second tab
    for opts in (first, second):
        answer = mallory.request(
            "POST",
            "/api/webauthn/login/verify",
            json_body={"response": mallory.authenticator.get(opts, server.url)},
        )
        assert answer.status_code == 200, answer.text


# -- cookie-authenticated bodies are JSON everywhere; what stays open ----------------------------


def test_cookie_authenticated_bodies_must_be_json_outside_the_api_too(server: InProcessServer) -> None:
    _, http = signed_in_person(server)
    with http:
        for path in ("/authorize/consent", "/account", "/grants"):
            answer = http.post(
                path, content=b"approve=true", headers={"Content-Type": "application/x-www-form-urlencoded"}
            )
            assert answer.status_code == 415, (path, answer.status_code)


def test_agents_sign_in_routes_and_bearers_keep_taking_json_under_any_content_type(
    server: InProcessServer,
) -> None:
    _, http = signed_in_person(server)
    body = json.dumps({"agent_id": "nobody@example.com"}).encode()
    for path in ("/api/agent/challenge", "/api/auth/challenge"):
        for cookies in ({}, dict(http.cookies)):  # curl -d, and a browser that happens to hold a session
            answer = httpx.post(
                server.url + path,
                content=body,
                cookies=cookies,
                timeout=10,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert answer.status_code != 415, (path, answer.text)
    answer = httpx.post(
        server.url + "/api/admin/users",
        content=json.dumps({"email": f"curl{next(_serial)}@example.com"}).encode(),
        headers={
            "Authorization": f"Bearer {server.token}",
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": f"grantd_session={http.cookies['grantd_session']}",
        },
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    http.close()


def test_a_client_without_origin_or_referer_signs_in(server: InProcessServer) -> None:
    """curl, scripts: no Origin, no Referer, JSON bodies — allowed (and bound by the cookie it keeps)."""
    mallory = attacker(server)
    mallory.cookie = None
    opts = mallory.request("POST", "/api/webauthn/login/options", json_body={}, origin=False)
    answer = mallory.request(
        "POST",
        "/api/webauthn/login/verify",
        origin=False,
        json_body={"response": mallory.authenticator.get(opts.json(), server.url)},
    )
    assert answer.status_code == 200 and signs_in(answer)
