"""The device authorization grant (RFC 8628) over HTTP: /device_authorization, /token's device_code
grant, the /device page and POST /api/device/decide; the terminal's session file and refresh
rotation (grantd.tui.signin); `grantd login` and `grantd logout` as processes against a server.

Time-dependent rules (interval, slow_down, expiry) run on an in-process server whose clock the test
moves (tests/inproc.py); the CLI tests use the real clock (the CLI really waits between polls)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from inproc import InProcessServer
from people_support import (
    cookie_client,
    create_person,
    enrol_agent,
    request_grant,
    signed_in_person,
    start_session,
)

from grantd.core.clock import SYSTEM_CLOCK
from grantd.oauth.device import GRANT_TYPE, normalize_user_code
from grantd.services.clients import DEVICE_GRANT as CLIENT_DEVICE_GRANT
from grantd.services.clients import Client
from grantd.tui.signin import (
    DeviceSignIn,
    SessionCredential,
    SessionFile,
    SignInError,
    SignInRequired,
    StoredSession,
    current_session,
)

from conftest import GRANTD, ROOT, TESTS

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


# -- the terminal's session (grantd.tui.signin) ------------------------------------------------------


def test_the_session_file_is_0600_in_a_0700_directory(tmp_path, monkeypatch):
    store = SessionFile(tmp_path / "cfg" / "grantd" / "session.json")
    session = StoredSession(
        "http://127.0.0.1:1", "refresh-secret", "access-secret", 10, "pat@example.com", "Pat"
    )
    old_umask = os.umask(0o022)
    try:
        store.save(session)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    assert store.load() == session
    assert "secret" not in repr(session)
    # A rewrite stays 0600 and leaves no temporary file behind.
    store.save(session)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["session.json"]
    assert store.delete() and store.load() is None
    # grantd's own directory is tightened if someone loosened it; another existing directory is
    # never chmod-ed (--session-file /tmp/x must not touch /tmp), but one others may write to is refused.
    home = tmp_path / "xdg"
    monkeypatch.delenv("GRANTD_SESSION_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    own = SessionFile()
    assert own.path == home / "grantd" / "session.json"
    own.path.parent.mkdir(parents=True)
    own.path.parent.chmod(0o755)
    own.save(session)
    assert stat.S_IMODE(own.path.parent.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    SessionFile(shared / "s.json").save(session)
    assert (
        stat.S_IMODE(shared.stat().st_mode) == 0o755
        and stat.S_IMODE((shared / "s.json").stat().st_mode) == 0o600
    )
    shared.chmod(0o777)
    with pytest.raises(SignInError, match="writable by others"):
        SessionFile(shared / "s.json").save(session)


def device_session(srv: Any, person: dict[str, Any] | None = None) -> tuple[dict[str, Any], StoredSession]:
    """A person signed in on a terminal through the real flow (grantd.tui.signin against srv)."""
    if person is None:
        person = create_person(srv)
    browser = cookie_client(srv, start_session(srv, person["email"]))

    async def flow() -> StoredSession:
        async def approve_and_wait(seconds: float) -> None:
            srv.clock.advance(seconds)  # the server's clock moves as far as the client waits
            await asyncio.sleep(0)

        async with DeviceSignIn(srv.url, sleep=approve_and_wait) as signin:

            def show(authorization: Any) -> None:
                with browser:
                    assert decide(browser, authorization.user_code, True).status_code == 200

            return await signin.sign_in(show)

    return person, asyncio.run(flow())


def test_the_cli_module_signs_in_and_refresh_rotates(srv, tmp_path):
    person, session = device_session(srv)
    assert (session.email, session.issuer) == (person["email"], srv.url)
    store = SessionFile(tmp_path / "s" / "session.json")
    store.save(session)

    async def refresh_twice() -> tuple[StoredSession, StoredSession]:
        async with DeviceSignIn(srv.url) as signin:
            first = await signin.refresh(session, store)
            second = await signin.refresh(first, store)
            return first, second

    first, second = asyncio.run(refresh_twice())
    assert len({session.refresh_token, first.refresh_token, second.refresh_token}) == 3  # rotated every time
    assert store.load() == second  # the newest is the one stored
    with srv.client(second.access_token) as http:
        assert http.get("/api/me").json()["email"] == person["email"]

    # Presenting an old refresh token again is refused, revokes the family, and deletes the stored session.
    async def replay() -> None:
        async with DeviceSignIn(srv.url) as signin:
            await signin.refresh(first, store)

    with pytest.raises(SignInRequired):
        asyncio.run(replay())
    assert store.load() is None
    store.save(second)  # even the newest one is dead now (its family was revoked)

    async def again() -> StoredSession:
        async with DeviceSignIn(srv.url) as signin:
            return await current_session(signin, store, wall_clock=lambda: time.time() + 10**6)

    with pytest.raises(SignInRequired):
        asyncio.run(again())
    assert not store.path.exists()


def test_the_tuis_credential_refreshes_once_for_concurrent_requests(srv, tmp_path):
    """Five requests at once with an expired access token: one refresh (a second presentation of the
    same refresh token would revoke the family), the rotated token stored, every request the person."""
    person, session = device_session(srv)
    store = SessionFile(tmp_path / "s" / "session.json")
    stale = dataclasses.replace(session, expires_at=0)
    store.save(stale)

    async def run() -> tuple[list[httpx.Response], SessionCredential]:
        credential = SessionCredential(DeviceSignIn(srv.url), store, stale)
        async with httpx.AsyncClient(base_url=srv.url, auth=credential) as http:
            answers = await asyncio.gather(*(http.get("/api/me") for _ in range(5)))
        await credential.signin.aclose()
        return list(answers), credential

    answers, credential = asyncio.run(run())
    assert [r.status_code for r in answers] == [200] * 5
    assert {r.json()["email"] for r in answers} == {person["email"]}
    stored = store.load()
    assert (
        stored is not None and stored == credential.session and stored.refresh_token != session.refresh_token
    )

    async def refresh_again() -> StoredSession:
        async with DeviceSignIn(srv.url) as signin:
            return await signin.refresh(stored, store)

    renewed = asyncio.run(refresh_again())
    assert renewed.refresh_token != stored.refresh_token  # the family is still live

    # The server says the access token has expired (its clock ran ahead): one 401, a refresh, a retry.
    srv.clock.advance(srv.services.config.oauth.access_token_ttl + 60)

    async def after_expiry() -> httpx.Response:
        credential = SessionCredential(DeviceSignIn(srv.url), store, renewed)
        async with httpx.AsyncClient(base_url=srv.url, auth=credential) as http:
            answer = await http.get("/api/me")
        await credential.signin.aclose()
        return answer

    assert asyncio.run(after_expiry()).status_code == 200
    assert store.load().refresh_token not in (renewed.refresh_token, stored.refresh_token)  # type: ignore[union-attr]


def test_two_consoles_sharing_the_session_file_refresh_once(srv, tmp_path):
    """Two `grantd tui` windows (two credentials, as two processes would have) with the same expired
    session: the session file's lock lets one refresh; the other takes its result, so the refresh
    token is never presented twice and the family stays live."""
    person, session = device_session(srv)
    store = SessionFile(tmp_path / "s" / "session.json")
    stale = dataclasses.replace(session, expires_at=0)
    store.save(stale)

    async def console() -> list[int]:
        credential = SessionCredential(DeviceSignIn(srv.url), store, stale)
        async with httpx.AsyncClient(base_url=srv.url, auth=credential) as http:
            answers = [(await http.get("/api/me")).status_code for _ in range(2)]
        await credential.signin.aclose()
        return answers

    async def both() -> list[list[int]]:
        return list(await asyncio.gather(console(), console()))

    assert asyncio.run(both()) == [[200, 200], [200, 200]]
    stored = store.load()
    assert stored is not None and stored.refresh_token != session.refresh_token
    with srv.client(stored.access_token) as http:
        assert http.get("/api/me").json()["email"] == person["email"]  # the family was not revoked
    assert stat.S_IMODE((store.path.parent / "session.json.lock").stat().st_mode) == 0o600


# -- `grantd login` and `grantd logout` as processes ------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    """A real-time server (the CLI waits between polls for real): interval 1 s."""
    server = InProcessServer(
        tmp_path_factory.mktemp("live"), extra="[oauth]\ndevice_poll_interval = 1\n", clock=SYSTEM_CLOCK
    )  # type: ignore[arg-type]
    yield server.start()
    server.stop()


def grantd_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[str]:
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS / "plugins")]),
        **(env or {}),
    }
    full_env.pop("GRANTD_CONFIG", None)
    return subprocess.Popen(
        [*GRANTD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=cwd
    )


def test_grantd_login_and_logout_as_processes(live, tmp_path):
    person = create_person(live)
    browser = cookie_client(live, start_session(live, person["email"]))
    session_file = tmp_path / "home" / ".config" / "grantd" / "session.json"
    proc = grantd_cli("login", "--url", live.url, "--session-file", str(session_file), cwd=tmp_path)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"open (\S+) and enter the code ([A-Z]{4}-[A-Z]{4})", line)
        assert found, line
        assert found.group(1) == f"{live.url}/device"
        with browser:
            assert decide(browser, found.group(2), True).status_code == 200
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out) == {
        "issuer": live.url,
        "email": person["email"],
        "name": person.get("name") or person["email"],
    }
    assert stat.S_IMODE(session_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(session_file.parent.stat().st_mode) == 0o700
    stored = json.loads(session_file.read_text())
    assert set(stored) >= {"issuer", "refresh_token", "access_token", "expires_at", "email", "name"}

    # Signed in already: a second login says so without a new code.
    again = grantd_cli("login", "--url", live.url, "--session-file", str(session_file))
    out, err = again.communicate(timeout=60)
    assert (
        again.returncode == 0 and "Already signed in" in err and json.loads(out)["email"] == person["email"]
    )

    # logout revokes at the server (the refresh token no longer works) and deletes the file.
    out_proc = grantd_cli("logout", "--session-file", str(session_file))
    _, err = out_proc.communicate(timeout=60)
    assert out_proc.returncode == 0 and "Signed out" in err and "could not" not in err, err
    assert not session_file.exists()
    with live.client() as http:
        r = http.post(
            "/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": stored["refresh_token"],
                "client_id": "grantd-cli",
            },
        )
    assert r.status_code == 400 and r.json()["error"] == "invalid_grant", r.text


def _login_process(live: Any, session_file: Path, browser: httpx.Client, *flags: str) -> tuple[str, str, str]:
    """`grantd login` as a process, approved in ``browser``: (stdout, stderr, the /device page it was approved on)."""
    proc = grantd_cli("login", "--url", live.url, "--session-file", str(session_file), *flags)
    try:
        assert proc.stderr is not None
        code = re.search(r"code ([A-Z]{4}-[A-Z]{4})", proc.stderr.readline())
        assert code
        page = browser.get("/device", params={"user_code": code.group(1)}).text
        assert decide(browser, code.group(1), True).status_code == 200
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    return out, err, page


@pytest.mark.slow
def test_grantd_login_asks_for_admin_rights_only_with_admin(live, tmp_path):
    """Issue 19 item 7: `grantd login` signs an administrator in without administrator rights;
    `grantd login --admin` asks for them (the page says so) and replaces a stored session that did
    not ask for them; the TUI's sign-in asks likewise with `grantd tui --admin`."""
    admin = create_person(live, admin=True)
    browser = cookie_client(live, start_session(live, admin["email"]))
    session_file = tmp_path / "admin-session.json"
    with browser:
        _, _, page = _login_process(live, session_file, browser)
        assert 'data-device-admin="none"' in page
        plain = json.loads(session_file.read_text())
        assert "admin" not in plain["scope"].split()
        with live.client(plain["access_token"]) as http:
            assert http.get("/api/admin/users").status_code == 403
        # --admin: the stored session did not ask for admin rights, so a new sign-in asks for them
        _, err, page = _login_process(live, session_file, browser, "--admin")
        assert "Signed in as" in err and 'data-device-admin="granted"' in page
        elevated = json.loads(session_file.read_text())
        assert "admin" in elevated["scope"].split()
        with live.client(elevated["access_token"]) as http:
            assert http.get("/api/admin/users").status_code == 200
    # with an admin session stored, `grantd login --admin` and `grantd login` both keep it
    for flags in (("--admin",), ()):
        again = grantd_cli("login", "--url", live.url, "--session-file", str(session_file), *flags)
        _, err = again.communicate(timeout=60)
        assert again.returncode == 0 and "Already signed in" in err, err
    # the console: --admin asks for the scope; a stored session without it is not used
    from grantd.tui.cli import person_credential
    from grantd.tui.signin import ADMIN_SCOPE, SCOPE, StoredSession

    assert person_credential(live.url, session_file, admin=True).session is not None  # type: ignore[attr-defined]
    session_file.write_text(json.dumps(plain))
    assert StoredSession.from_json(plain).scope == SCOPE
    console = person_credential(live.url, session_file, admin=True)
    assert console.session is None and console.scope == ADMIN_SCOPE  # type: ignore[attr-defined]
    assert person_credential(live.url, session_file).session is not None  # type: ignore[attr-defined]


def test_grantd_login_reports_a_denial(live, tmp_path):
    person = create_person(live)
    browser = cookie_client(live, start_session(live, person["email"]))
    proc = grantd_cli("login", "--url", live.url, "--session-file", str(tmp_path / "s.json"))
    try:
        assert proc.stderr is not None
        code = re.search(r"code ([A-Z]{4}-[A-Z]{4})", proc.stderr.readline())
        assert code
        with browser:
            assert decide(browser, code.group(1), False).status_code == 200
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "denied" in err
    assert not (tmp_path / "s.json").exists()


def test_grantd_tui_as_a_process_signs_a_person_in(live, tmp_path):
    """`grantd tui` on a terminal with no session: it shows the code, a person approves, and the
    console's header names them; q quits with status 0 and the session stays stored for next time."""
    from system.test_bundle import Terminal

    person = create_person(live, name="Pat Example")
    browser = cookie_client(live, start_session(live, person["email"]))
    session_file = tmp_path / "cfg" / "session.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRANTD_", "PYTEST"))}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", LANG="C.UTF-8")
    terminal = Terminal(
        [sys.executable, "-m", "grantd", "tui", "--url", live.url, "--session-file", str(session_file)],
        env,
        tmp_path,
    )
    try:
        terminal.wait_for("enter this code")
        terminal.wait_for("Waiting for approval")
        code = re.findall(r"\b([BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4})\b", terminal.text())[-1]
        with browser:
            assert decide(browser, code, True).status_code == 200
        terminal.wait_for(f"{live.url} · Pat Example")  # the header (its e-mail is cut off at 80 columns)
        terminal.press("q")
        assert terminal.exit_status() == 0
    finally:
        terminal.close()
    assert json.loads(session_file.read_text())["email"] == person["email"]


def test_grantd_login_does_not_import_textual():
    probe = (
        "import sys, runpy; sys.argv = ['grantd', 'login', '--help']\n"
        "try:\n    runpy.run_module('grantd', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('textual' in sys.modules, 'sanic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stderr


def test_a_grant_decided_with_the_terminal_session_is_recorded_under_the_person(srv):
    """What the TUI does with the session, over plain HTTP: the person's access token lists only
    their agents' grants and decides them as the person."""
    person = create_person(srv)
    _, session = device_session(srv, person)
    _, mine = enrol_agent(srv, owner=person["email"])
    _, foreign = enrol_agent(srv, owner=create_person(srv)["email"])
    own_grant = request_grant(srv, mine)
    other_grant = request_grant(srv, foreign)
    with srv.client(session.access_token) as http:
        listed = {g["id"] for g in http.get("/api/grants", params={"status": "pending"}).json()["data"]}
        assert own_grant["id"] in listed and other_grant["id"] not in listed
        assert http.post(f"/api/grants/{other_grant['id']}/approve", json={}).status_code in (403, 404)
        r = http.post(f"/api/grants/{own_grant['id']}/approve", json={})
    assert r.status_code == 200, r.text
    assert r.json()["grant"]["decided_by"] == person["email"]
