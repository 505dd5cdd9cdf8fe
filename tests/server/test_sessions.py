"""Browser sessions and the cross-site check (D8) over HTTP against an in-process server
(ManualClock): the cookie's flags, /api/me and /api/logout, revocation and expiry effective on the
next request, a bearer request never using the cookie, and cookie-authenticated state changes
refused from other origins or with non-JSON bodies."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import httpx
import pytest
from inproc import InProcessServer
from support.soft_webauthn import PasskeyBrowser, SoftAuthenticator, make_registration

from conftest import problem

LIMITS_OFF = "[limits]\npasskey_per_address = 0\n"
_n = iter(range(10**6))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path_factory.mktemp("sessions"), extra=LIMITS_OFF).start()
    yield srv
    srv.stop()


def signed_in(server: InProcessServer, email: str | None = None, **kw: object) -> PasskeyBrowser:
    b = PasskeyBrowser(server.url, server.url)
    answer = b.register(make_registration(server, email or f"s{next(_n)}@example.com", **kw))  # type: ignore[arg-type]
    assert answer.status_code == 200, answer.text
    return b


def cookie_attributes(response: httpx.Response) -> dict[str, str]:
    header = response.headers["set-cookie"]
    name_value, *attributes = [part.strip() for part in header.split(";")]
    assert name_value.startswith("grantd_session=")
    found = {"value": name_value.split("=", 1)[1].strip('"')}
    for attribute in attributes:
        key, _, value = attribute.partition("=")
        found[key.lower()] = value
    return found


def test_the_cookie_flags_on_http(server: InProcessServer) -> None:
    b = PasskeyBrowser(server.url, server.url)
    answer = b.register(make_registration(server, f"flags{next(_n)}@example.com"))
    flags = cookie_attributes(answer)
    assert len(flags["value"]) == 43
    assert "httponly" in flags and flags["samesite"] == "Lax" and flags["path"] == "/"
    assert flags["max-age"] == "28800" and "secure" not in flags
    # the store holds the SHA-256 of the cookie, never the cookie itself
    services = server.services
    now = services.clock.now_ms()
    stored = server.call(
        services.store.sessions.get(hashlib.sha256(flags["value"].encode()).hexdigest(), now)
    )
    assert stored is not None and stored["expires_at"] == now + 28_800_000 and stored["family_id"]


def test_the_cookie_is_secure_when_the_issuer_is_https(tmp_path) -> None:  # type: ignore[no-untyped-def]
    srv = InProcessServer(tmp_path / "https", extra=LIMITS_OFF + "[sessions]\nttl = 3600\n")
    text = srv.config_path.read_text()
    srv.config_path.write_text(text.replace("[server]\n", '[server]\nissuer = "https://grantd.test"\n', 1))
    srv.start()
    try:
        b = PasskeyBrowser(srv.url, "https://grantd.test")
        answer = b.register(make_registration(srv, "secure@example.com"))
        assert answer.status_code == 200, answer.text
        flags = cookie_attributes(answer)
        assert (
            "secure" in flags
            and "httponly" in flags
            and flags["samesite"] == "Lax"
            and flags["max-age"] == "3600"
        )
        assert b.me().json()["email"] == "secure@example.com"
        # the origin the passkey was made for is the https one; a page on http is another origin
        assert b.request("POST", "/api/logout", headers={"Origin": "http://grantd.test"}).status_code == 403
        logout = b.request("POST", "/api/logout")
        assert logout.status_code == 200 and "secure" in cookie_attributes(logout)
    finally:
        srv.stop()


def test_me_for_a_person_an_agent_and_the_management_token(server: InProcessServer) -> None:
    email = f"Me{next(_n)}@Example.com"
    b = signed_in(server, email, admin=False)
    me = b.me()
    assert me.status_code == 200 and me.headers["cache-control"] == "no-store"
    body = me.json()
    assert (
        body["sub"] == body["email"] == email.lower() and body["act"] == "human" and body["kind"] == "person"
    )
    assert body["id"].startswith("usr_") and body["admin"] is False and body["name"]
    management = httpx.get(server.url + "/api/me", headers={"Authorization": f"Bearer {server.token}"}).json()
    assert management["kind"] == "management" and management["act"] == "management"
    assert httpx.get(server.url + "/api/me").status_code == 401


def test_admin_emails_make_a_person_an_administrator(server: InProcessServer) -> None:
    b = signed_in(server, "root@example.com")  # in admin.emails of the test config
    assert b.me().json()["admin"] is True


def test_logout_ends_the_session_on_the_next_request(server: InProcessServer) -> None:
    b = signed_in(server)
    old = b.cookie
    assert b.me().status_code == 200
    answer = b.request("POST", "/api/logout")
    assert answer.status_code == 200 and answer.json() == {"ok": True}
    cleared = cookie_attributes(answer)
    assert cleared["value"] == "" and cleared["max-age"] == "0"
    b.cookie = old  # a browser that kept the cookie anyway
    again = b.me()
    assert again.status_code == 401
    assert cookie_attributes(again)["max-age"] == "0"  # told to drop it
    # idempotent: logging out again, or without any session, is fine
    assert b.request("POST", "/api/logout").json() == {"ok": True}
    assert httpx.post(server.url + "/api/logout").json() == {"ok": True}


def test_logout_ends_the_whole_family_and_only_it(server: InProcessServer) -> None:
    b = signed_in(server)
    other_device = PasskeyBrowser(server.url, server.url, b.authenticator)
    assert other_device.login().status_code == 200
    assert b.request("POST", "/api/logout").status_code == 200
    assert other_device.me().status_code == 200  # another sign-in is another family


def test_a_new_sign_in_replaces_the_session_the_browser_had(server: InProcessServer) -> None:
    b = signed_in(server)
    before = b.cookie
    assert b.login().status_code == 200 and b.cookie != before
    stale = PasskeyBrowser(server.url, server.url)
    stale.cookie = before
    assert stale.me().status_code == 401


def test_admin_revocation_takes_effect_on_the_next_request(server: InProcessServer) -> None:
    b = signed_in(server)
    person_id = b.me().json()["id"]
    services = server.services
    assert server.call(services.store.sessions.revoke_person(person_id, services.clock.now_ms())) == 1
    assert b.me().status_code == 401

    b2 = signed_in(server)
    sessions, _ = server.call(
        services.store.sessions.list(_page(), b2.me().json()["id"], services.clock.now_ms())
    )
    server.call(services.store.sessions.revoke_family(sessions[0]["family_id"], services.clock.now_ms()))
    assert b2.me().status_code == 401


def _page():  # type: ignore[no-untyped-def]
    from grantd.core.paging import PageRequest

    return PageRequest(100, None)


def test_deleting_a_person_ends_their_session(server: InProcessServer) -> None:
    b = signed_in(server)
    person_id = b.me().json()["id"]
    services = server.services
    server.call(services.store.people.delete(person_id, services.clock.now_ms()))
    assert b.me().status_code == 401


def test_a_session_expires_after_its_ttl_absolutely(server: InProcessServer) -> None:
    b = signed_in(server)
    server.clock.advance(8 * 3600 - 60)
    assert b.me().status_code == 200  # activity does not extend it ...
    server.clock.advance(59)
    assert b.me().status_code == 200
    server.clock.advance(1)
    answer = b.me()
    assert answer.status_code == 401 and cookie_attributes(answer)["max-age"] == "0"


@pytest.mark.parametrize("value", ["garbage", "A" * 43, "", "x" * 5000, "%00"])
def test_an_unknown_cookie_is_anonymous_and_cleared(server: InProcessServer, value: str) -> None:
    answer = httpx.get(server.url + "/api/me", headers={"Cookie": f"grantd_session={value}"})
    assert answer.status_code == 401
    problem(answer)


def test_a_bearer_request_never_uses_the_cookie(server: InProcessServer) -> None:
    b = signed_in(server)
    # a bad bearer with a good cookie: the bearer decides (401), the cookie is not consulted
    answer = b.request("GET", "/api/me", headers={"Authorization": "Bearer nope"})
    assert answer.status_code == 401
    answer = b.request("GET", "/api/me", headers={"Authorization": f"Bearer {server.token}"})
    assert answer.json()["kind"] == "management"
    # and logout with a bearer leaves the session alone
    assert b.request("POST", "/api/logout", headers={"Authorization": f"Bearer {server.token}"}).json() == {
        "ok": True
    }
    assert b.me().status_code == 200


# -- CSRF (D8) ------------------------------------------------------------------------------------
def test_a_cross_origin_post_with_the_cookie_is_refused(server: InProcessServer) -> None:
    b = signed_in(server)
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": f"http://localhost:{server.port}"},
        {"Origin": f"https://127.0.0.1:{server.port}"},
    ):
        answer = b.request("POST", "/api/logout", headers=headers)
        assert answer.status_code == 403 and problem(answer)["detail"] == "cross-site request refused", (
            headers
        )
    for referer in ("http://evil.example/page", f"http://127.0.0.1:{server.port}.evil.example/", "not a url"):
        answer = b.request("POST", "/api/logout", origin=False, headers={"Referer": referer})
        assert answer.status_code == 403, referer
    answer = b.request("DELETE", "/api/webauthn/credentials/x", headers={"Origin": "http://evil.example"})
    assert answer.status_code == 403
    assert b.me().status_code == 200  # still signed in: none of them acted


def test_same_origin_and_headerless_requests_are_allowed(server: InProcessServer) -> None:
    b = signed_in(server)
    assert b.add_passkey(SoftAuthenticator()).status_code == 201  # Origin = ours
    answer = b.request(
        "POST",
        "/api/webauthn/credentials/add/reauth",
        origin=False,
        headers={"Referer": f"{server.url}/account"},
        json_body={},
    )
    assert answer.status_code == 200
    answer = b.request("POST", "/api/webauthn/credentials/add/reauth", origin=False, json_body={})
    assert answer.status_code == 200  # neither Origin nor Referer: not a browser
    assert b.request("POST", "/api/logout", origin=False).status_code == 200


def test_cookie_authenticated_api_bodies_must_be_json(server: InProcessServer) -> None:
    b = signed_in(server)
    for content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain",
        None,
    ):
        headers = {"Content-Type": content_type} if content_type else {}
        answer = b.request("POST", "/api/webauthn/credentials/add/reauth", content=b"{}", headers=headers)
        assert (
            answer.status_code == 415 and problem(answer)["detail"] == "request body must be application/json"
        )
    answer = b.request(
        "POST",
        "/api/webauthn/credentials/add/reauth",
        content=b"{}",
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert answer.status_code == 200
    # a form post to logout (body, form type) is refused even from our own origin
    answer = b.request(
        "POST", "/api/logout", content=b"a=b", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert answer.status_code == 415
    assert b.me().status_code == 200


def test_bearer_requests_are_not_affected(server: InProcessServer) -> None:
    b = signed_in(server)
    headers = {"Authorization": f"Bearer {server.token}", "Origin": "http://evil.example"}
    answer = b.request("POST", "/api/agent/enroll", headers=headers, json_body={"email": "bad"})
    assert answer.status_code == 400  # validated, not refused as cross-site
    answer = httpx.post(
        server.url + "/api/grants/verify",
        content=b"x=1",
        headers={**headers, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code != 415 and answer.status_code != 403
    # and without the cookie nothing is refused as cross-site (no session to abuse) — except the
    # passkey routes, which start sessions (issue 19: tests/server/test_login_csrf.py)
    answer = httpx.post(
        server.url + "/api/agent/challenge",
        json={"agent_id": "nobody@example.com"},
        headers={"Origin": "http://evil.example"},
    )
    assert answer.status_code not in (403, 415)
    answer = httpx.post(
        server.url + "/api/webauthn/login/options", json={}, headers={"Origin": "http://evil.example"}
    )
    assert answer.status_code == 403
