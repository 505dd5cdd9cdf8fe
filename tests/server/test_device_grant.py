"""The device authorization grant (RFC 8628) over HTTP: /device_authorization, /token's device_code
grant, the /device page and POST /api/device/decide; the terminal's session file and refresh
rotation (grantd.tui.signin); `grantd login` and `grantd logout` as processes against a server.

Time-dependent rules (interval, slow_down, expiry) run on an in-process server whose clock the test
moves (tests/inproc.py); the CLI tests use the real clock (the CLI really waits between polls)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from people_support import (
    enrol_agent,
    request_grant,
    signed_in_person,
)

from grantd.oauth.device import GRANT_TYPE, normalize_user_code
from grantd.services.clients import DEVICE_GRANT as CLIENT_DEVICE_GRANT
from grantd.services.clients import Client

USER_CODE = re.compile(r"^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$")
OTHER_DEVICE_CLIENT = "other-terminal"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("device")).start()
    # A second public client allowed the device grant (config cannot name grant types): the one
    # that must not redeem grantd-cli's codes.
    server.services.oauth_clients.configured[OTHER_DEVICE_CLIENT] = Client(
        OTHER_DEVICE_CLIENT,
        "Other terminal",
        (),
        public=True,
        api_access=True,
        grant_types=(CLIENT_DEVICE_GRANT, "refresh_token"),
        source="config",
    )
    yield server
    server.stop()


def start(srv: Any, client_id: str = "grantd-cli", *, as_json: bool = False, **extra: str) -> httpx.Response:
    body = {"client_id": client_id, **extra}
    with srv.client() as http:
        return (
            http.post("/device_authorization", json=body)
            if as_json
            else http.post("/device_authorization", data=body)
        )


def started(srv: Any, client_id: str = "grantd-cli", **extra: str) -> dict[str, Any]:
    r = start(srv, client_id, **extra)
    assert r.status_code == 200, r.text
    return dict(r.json())


def poll(srv: Any, device_code: str, client_id: str = "grantd-cli") -> httpx.Response:
    with srv.client() as http:
        return http.post(
            "/token", data={"grant_type": GRANT_TYPE, "device_code": device_code, "client_id": client_id}
        )


def error_of(response: httpx.Response) -> str:
    assert response.headers.get("cache-control") == "no-store", response.headers
    body = response.json()
    assert set(body) >= {"error", "error_description"}, body
    return str(body["error"])


def decide(http: httpx.Client, user_code: str, approve: bool) -> httpx.Response:
    return http.post("/api/device/decide", json={"user_code": user_code, "approve": approve})


def person_browser(srv: Any) -> tuple[dict[str, Any], httpx.Client]:
    return signed_in_person(srv)


# -- starting -------------------------------------------------------------------------------------


def test_start_answers_the_rfc_8628_fields_and_stores_only_a_hash(srv):
    r = start(srv)
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    body = r.json()
    assert set(body) == {
        "device_code",
        "user_code",
        "verification_uri",
        "verification_uri_complete",
        "expires_in",
        "interval",
    }
    assert USER_CODE.match(body["user_code"]), body["user_code"]
    issuer = srv.services.issuer.rstrip("/")
    assert body["verification_uri"] == f"{issuer}/device"
    assert body["verification_uri_complete"] == f"{issuer}/device?user_code={body['user_code']}"
    assert (body["expires_in"], body["interval"]) == (600, 5)
    assert len(body["device_code"]) >= 43
    record = srv.call(
        srv.services.store.device_codes.get_by_user_code(
            body["user_code"].replace("-", ""), srv.clock.now_ms()
        )
    )
    assert record["device_code_hash"] == hashlib.sha256(body["device_code"].encode()).hexdigest()
    assert body["device_code"] not in json.dumps(record)
    assert record["status"] == "pending" and record["client_id"] == "grantd-cli"
    # JSON works as well as the form; every code pair is new.
    again = start(srv, as_json=True)
    assert again.status_code == 200 and again.json()["user_code"] != body["user_code"]


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({}, 400, "invalid_request"),
        ({"client_id": "no-such-client"}, 401, "invalid_client"),
        ({"client_id": "apes-cli"}, 400, "unauthorized_client"),  # a code-flow client: not the device grant
        ({"client_id": "grantd-cli", "scope": "openid root"}, 400, "invalid_scope"),
    ],
)
def test_start_refuses(srv, body, status, error):
    with srv.client() as http:
        r = http.post("/device_authorization", data=body)
    assert r.status_code == status, r.text
    assert error_of(r) == error
    if status == 401:
        assert r.headers["www-authenticate"].startswith("Basic")


def test_start_refuses_repeated_parameters_and_other_bodies(srv):
    with srv.client() as http:
        repeated = http.post(
            "/device_authorization",
            content="client_id=grantd-cli&client_id=apes-cli",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        xml = http.post("/device_authorization", content="<a/>", headers={"Content-Type": "text/xml"})
        not_string = http.post("/device_authorization", json={"client_id": ["grantd-cli"]})
    for r in (repeated, xml, not_string):
        assert r.status_code == 400 and error_of(r) == "invalid_request", r.text


def test_user_codes_are_typed_any_way_people_type_them():
    assert normalize_user_code("bcdf-ghjk") == "BCDFGHJK"
    assert normalize_user_code(" BCDF GHJK ") == "BCDFGHJK"
    assert normalize_user_code("bcdfghjk") == "BCDFGHJK"
    for bad in ("BCDF-GHJA", "BCDF-GHJ", "BCDF-GHJKL", "", None, 12345678, "B" * 100, "BCDF\x00GHJK"):
        assert normalize_user_code(bad) is None, bad


# -- polling --------------------------------------------------------------------------------------


def test_pending_then_slow_down_when_polled_faster_than_the_interval(srv):
    pair = started(srv)
    assert error_of(poll(srv, pair["device_code"])) == "authorization_pending"
    srv.clock.advance(2)  # faster than the 5 s interval
    assert error_of(poll(srv, pair["device_code"])) == "slow_down"
    record = srv.call(
        srv.services.store.device_codes.get_by_user_code(
            pair["user_code"].replace("-", ""), srv.clock.now_ms()
        )
    )
    assert record["interval"] == pair["interval"] + 5  # stored: every later poll must wait 10 s
    srv.clock.advance(pair["interval"])  # the old interval is too fast now: slow_down again, 15 s
    assert error_of(poll(srv, pair["device_code"])) == "slow_down"
    srv.clock.advance(pair["interval"] + 10)  # a client that slows down as told is answered normally
    assert error_of(poll(srv, pair["device_code"])) == "authorization_pending"


def test_denied_is_access_denied(srv):
    pair = started(srv)
    _, browser = person_browser(srv)
    with browser:
        r = decide(browser, pair["user_code"].lower(), False)
    assert r.status_code == 200 and r.json()["status"] == "denied", r.text
    assert error_of(poll(srv, pair["device_code"])) == "access_denied"


def test_an_expired_code_is_expired_token_and_cannot_be_approved(srv):
    pair = started(srv)
    srv.clock.advance(601)
    assert error_of(poll(srv, pair["device_code"])) == "expired_token"
    _, browser = person_browser(srv)
    with browser:
        r = decide(browser, pair["user_code"], True)
    assert r.status_code == 404, r.text


def test_approved_once_gives_the_persons_tokens_exactly_once(srv):
    pair = started(srv)
    person, browser = person_browser(srv)
    with browser:
        page = browser.get("/device", params={"user_code": pair["user_code"]})
        assert page.status_code == 200 and "grantd (terminal)" in page.text and pair["user_code"] in page.text
        r = decide(browser, pair["user_code"].replace("-", " "), True)
        assert r.status_code == 200, r.text
        assert r.json() == {
            "status": "approved",
            "client_id": "grantd-cli",
            "client_name": "grantd (terminal)",
            "scope": "openid email profile offline_access",
        }
        again = decide(browser, pair["user_code"], False)
        assert again.status_code == 409  # decided once; never flipped
    srv.clock.advance(pair["interval"])
    r = poll(srv, pair["device_code"])
    assert r.status_code == 200, r.text
    tokens = r.json()
    assert {"access_token", "refresh_token", "id_token", "expires_in"} <= set(tokens)
    assert tokens["token_type"].lower() == "bearer"
    # The access token is the person on grantd's API.
    with srv.client(tokens["access_token"]) as http:
        me = http.get("/api/me")
    assert me.status_code == 200 and me.json()["email"] == person["email"], me.text
    srv.clock.advance(pair["interval"])
    assert error_of(poll(srv, pair["device_code"])) == "invalid_grant"  # single use


def test_another_client_cannot_redeem_the_code(srv):
    pair = started(srv)
    _, browser = person_browser(srv)
    with browser:
        assert decide(browser, pair["user_code"], True).status_code == 200
    srv.clock.advance(pair["interval"])
    assert error_of(poll(srv, pair["device_code"], client_id=OTHER_DEVICE_CLIENT)) == "invalid_grant"
    refused = poll(srv, pair["device_code"], client_id="apes-cli")
    assert refused.status_code in (400, 401) and error_of(refused) in (
        "unauthorized_client",
        "invalid_client",
    )
    assert error_of(poll(srv, "x" * 43)) == "invalid_grant"  # an unknown code
    srv.clock.advance(pair["interval"])
    assert poll(srv, pair["device_code"]).status_code == 200  # still there for its own client


# -- the person's side ------------------------------------------------------------------------------


def test_the_page_needs_a_signed_in_person(srv):
    with srv.client() as http:
        r = http.get("/device", params={"user_code": "BCDF-GHJK"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=/device")


def test_only_a_browser_session_of_a_person_may_decide(srv):
    pair = started(srv)
    with srv.admin() as http:  # the management token is not a person
        assert decide(http, pair["user_code"], True).status_code == 403
    with srv.client() as http:
        assert decide(http, pair["user_code"], True).status_code == 401
    _, browser = person_browser(srv)
    with browser:  # another site's page cannot make a signed-in person's browser approve (D8)
        r = browser.post(
            "/api/device/decide",
            json={"user_code": pair["user_code"], "approve": True},
            headers={"Origin": "https://evil.example"},
        )
        assert r.status_code == 403, r.text
        r = browser.post(
            "/api/device/decide",
            content=f"user_code={pair['user_code']}&approve=true",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 415, r.text
    # A person's access token (another terminal of theirs) cannot approve a new terminal.
    other = started(srv)
    _, browser = person_browser(srv)
    with browser:
        assert decide(browser, other["user_code"], True).status_code == 200
    srv.clock.advance(other["interval"])
    token = poll(srv, other["device_code"]).json()["access_token"]
    with srv.client(token) as http:
        assert decide(http, pair["user_code"], True).status_code == 403
    record = srv.call(
        srv.services.store.device_codes.get_by_user_code(
            pair["user_code"].replace("-", ""), srv.clock.now_ms()
        )
    )
    assert record["status"] == "pending"


def test_decide_refuses_malformed_bodies(srv):
    _, browser = person_browser(srv)
    with browser:
        for body in (
            {},
            {"user_code": "BCDF-GHJK"},
            {"user_code": "BCDF-GHJK", "approve": "yes"},
            {"user_code": "AAAA-AAAA", "approve": True},
            {"user_code": 5, "approve": True},
        ):
            r = browser.post("/api/device/decide", json=body)
            assert r.status_code == 400, (body, r.text)
        assert decide(browser, "BCDF-GHJK", True).status_code == 404  # well formed, no such request


def test_guessing_user_codes_is_rate_limited_per_address(tmp_path):
    limited = InProcessServer(tmp_path / "limited", extra="[limits]\ndevice_code_per_address = 5\n").start()
    try:
        _, browser = person_browser(limited)
        pair = started(limited)
        with browser:
            answers = [decide(browser, f"BCDF-GHJ{c}", True).status_code for c in "BCDFG"]
            assert answers == [404] * 5
            assert decide(browser, "BCDF-GHJH", True).status_code == 429
            page = browser.get("/device", params={"user_code": "BCDF-GHJL"})
            assert page.status_code == 429
            # Even the right code is refused until the window ends: a lucky guess is not told apart.
            blocked = decide(browser, pair["user_code"], True)
            assert blocked.status_code == 429 and "retry-after" in blocked.headers
            limited.clock.advance(60)
            assert decide(browser, pair["user_code"], True).status_code == 200
        # Starting device sign-ins has its own counter: a flood of live codes is refused too.
        assert [start(limited).status_code for _ in range(5)] == [200] * 5  # a new window (the clock moved)
        refused = start(limited)
        assert (
            refused.status_code == 429
            and error_of(refused) == "slow_down"
            and "retry-after" in refused.headers
        )
    finally:
        limited.stop()


# -- issue 19 item 7: device-code phishing of an administrator ---------------------------------------


def approved_tokens(srv: Any, browser: httpx.Client, pair: dict[str, Any]) -> dict[str, Any]:
    r = decide(browser, pair["user_code"], True)
    assert r.status_code == 200, r.text
    srv.clock.advance(pair["interval"])
    answer = poll(srv, pair["device_code"])
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def refreshed(srv: Any, tokens: dict[str, Any]) -> dict[str, Any]:
    with srv.client() as http:
        r = http.post(
            "/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": tokens["refresh_token"],
                "client_id": "grantd-cli",
            },
        )
    assert r.status_code == 200, r.text
    return dict(r.json())


ADMIN_ROUTES = (
    ("GET", "/api/admin/users", None),
    ("GET", "/api/admin/agents", None),
    ("POST", "/api/admin/users", {"email": "mallory-made@example.com"}),
    ("POST", "/api/admin/registration-urls", {"email": "mallory-made@example.com"}),
)


def test_an_admin_approving_a_code_that_did_not_ask_for_admin_hands_out_no_admin_rights(srv):
    """The attack: Mallory starts a device sign-in and sends the administrator the link. The admin
    approves. Mallory's token acts as the admin in every way a person may — deciding the grants of
    agents the admin owns — but cannot call an admin route (403), before and after a refresh."""
    admin, browser = person_browser_admin(srv)
    own_agent, own_token = enrol_agent(srv, owner=admin["email"])
    others_agent, others_token = enrol_agent(srv, owner="someone-else@example.com")
    pair = started(srv)  # Mallory's terminal: the default scope, no "admin"
    with browser:
        page = browser.get("/device", params={"user_code": pair["user_code"]})
        assert page.status_code == 200
        assert 'data-device-admin="none"' in page.text and "did not ask for them" in page.text
        assert 'data-device-admin="granted"' not in page.text
        tokens = approved_tokens(srv, browser, pair)
        # the admin's own browser session is still an administrator
        assert browser.get("/api/admin/users").status_code == 200
    assert "admin" not in tokens["scope"].split()
    for access in (tokens["access_token"], refreshed(srv, tokens)["access_token"]):
        with srv.client(access) as http:
            me = http.get("/api/me").json()
            assert me["email"] == admin["email"] and me["admin"] is False, me
            for method, path, body in ADMIN_ROUTES:
                r = http.request(method, path, json=body)
                assert r.status_code == 403, (method, path, r.status_code, r.text)
            # someone else's agent: only an administrator could decide it
            theirs = request_grant(srv, others_token)
            assert http.post(f"/api/grants/{theirs['id']}/approve", json={}).status_code in (
                403,
                404,
            )  # not even seen
            assert srv.call(srv.services.store.grants.get(theirs["id"]))["status"] == "pending"
            # the admin's own agent: decided as that person
            mine = request_grant(srv, own_token)
            decided = http.post(f"/api/grants/{mine['id']}/approve", json={})
            assert decided.status_code == 200, decided.text
            assert decided.json()["grant"]["decided_by"] == admin["email"]
    assert others_agent["agent_id"] != own_agent["agent_id"]
    assert srv.call(srv.services.store.people.get("mallory-made@example.com")) is None


def test_a_device_that_asks_for_admin_gets_it_only_from_an_admin_and_the_page_says_so(srv):
    admin_scope = "openid email profile offline_access admin"
    pair = started(srv, scope=admin_scope)
    admin, browser = person_browser_admin(srv)
    with browser:
        page = browser.get("/device", params={"user_code": pair["user_code"]})
        assert page.status_code == 200
        assert 'data-device-admin="granted"' in page.text and "asks for administrator rights" in page.text
        for power in ("delete people", "delete any agent", "every agent", "signing keys"):
            assert power in page.text, power
        tokens = approved_tokens(srv, browser, pair)
    assert "admin" in tokens["scope"].split()
    for access in (tokens["access_token"], refreshed(srv, tokens)["access_token"]):
        with srv.client(access) as http:
            assert http.get("/api/me").json()["admin"] is True
            assert http.get("/api/admin/users").status_code == 200
    # A person who is not an administrator is told the device gets no such rights, and it gets none.
    pair = started(srv, scope=admin_scope)
    _, browser = person_browser(srv)
    with browser:
        page = browser.get("/device", params={"user_code": pair["user_code"]})
        assert 'data-device-admin="refused"' in page.text and 'data-device-admin="granted"' not in page.text
        tokens = approved_tokens(srv, browser, pair)
    with srv.client(tokens["access_token"]) as http:
        assert http.get("/api/admin/users").status_code == 403


def test_the_page_names_the_client_the_address_and_the_time_the_request_came_from(tmp_path):
    proxied = InProcessServer(tmp_path / "proxied")
    text = proxied.config_path.read_text()
    proxied.config_path.write_text(
        text.replace("[server]\n", '[server]\ntrusted_proxies = ["127.0.0.1"]\n', 1)
    )
    proxied.start()
    try:
        began = proxied.clock.now_ms()
        with proxied.client() as http:
            r = http.post(
                "/device_authorization",
                data={"client_id": "grantd-cli"},
                headers={"X-Forwarded-For": "2001:db8:bad::66"},
            )
        assert r.status_code == 200, r.text
        pair = r.json()
        proxied.clock.advance(90)
        _, browser = person_browser(proxied)
        with browser:
            page = browser.get("/device", params={"user_code": pair["user_code"]})
        assert page.status_code == 200
        assert "grantd (terminal)" in page.text
        assert '<code data-field="client_address">2001:db8:bad::66</code>' in page.text
        from grantd.web.views import format_ms, iso_ms

        assert f'datetime="{iso_ms(began)}"' in page.text and format_ms(began) in page.text
    finally:
        proxied.stop()


def person_browser_admin(srv: Any) -> tuple[dict[str, Any], httpx.Client]:
    return signed_in_person(srv, admin=True)
