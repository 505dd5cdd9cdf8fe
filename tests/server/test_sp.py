"""SP login end to end (D9, docs/sp.md): grantd B is the service provider, grantd A the identity
provider, found through a real DNS server on 127.0.0.1 serving ``_ddisa.<domain>`` TXT records.

Both are real in-process servers (tests/inproc.py): A's ManualClock ages authorization codes without
sleeping. A person of A has a session at A (tests/people_support.py: no browser needed) and
consents the way A's consent page does (JSON POST /authorize/consent). The browser at B is an
httpx client with its own cookie jar (cookies ignore ports, so A and B never share a client).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import pytest
from inproc import InProcessServer
from markupsafe import escape
from people_support import cookie_client, create_person, start_session

from dns_server import TxtDnsServer

SP_FLOW_COOKIE = "grantd_sp_flow"


def sp_config(dns: TxtDnsServer, **extra: Any) -> str:
    lines = ["", "[sp]", "enabled = true", f'nameservers = ["{dns.address}"]']
    for key, value in extra.items():
        rendered = "true" if value is True else "false" if value is False else f'"{value}"'
        lines.append(f"{key} = {rendered}")
    return "\n".join(lines) + "\n"


IDP_CONFIG = "\n[oauth]\nallow_private_metadata_hosts = true\n"


@pytest.fixture(scope="module")
def dns() -> Iterator[TxtDnsServer]:
    with TxtDnsServer({}) as server:
        yield server


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory, dns: TxtDnsServer) -> Iterator[InProcessServer]:
    server = InProcessServer(tmp_path_factory.mktemp("idp-a"), extra=IDP_CONFIG).start()
    dns.records.update(
        {
            "_ddisa.a.test": [f"v=ddisa1 idp={server.url}; mode=open"],
            # the spec repo's spelling; two records, the lowest priority names A
            "_ddisa.prio.test": [
                "v=ddisa1; idp=https://unused.prio.test; priority=20",
                f"v=ddisa1; idp={server.url}; priority=3",
            ],
            "_ddisa.example.com": [
                f"v=ddisa1 idp={server.url}"
            ],  # the domain of B's configured administrators
            "_ddisa.deny.test": [f"v=ddisa1 idp={server.url}; mode=deny"],
            "_ddisa.closed.test": ["v=ddisa1 idp=https://idp.closed.test; mode=deny"],
        }
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sp(
    tmp_path_factory: pytest.TempPathFactory, dns: TxtDnsServer, idp: InProcessServer
) -> Iterator[InProcessServer]:
    server = InProcessServer(
        tmp_path_factory.mktemp("sp-b"), extra=sp_config(dns, allow_http_idp=True)
    ).start()
    yield server
    server.stop()


def browser(sp: InProcessServer) -> httpx.Client:
    return httpx.Client(base_url=sp.url, timeout=15)


def begin(http: httpx.Client, email: str, **body: Any) -> httpx.Response:
    return http.post("/api/login", json={"email": email, **body})


def at_idp(idp: InProcessServer, idp_cookie: str, redirect_url: str, *, approve: bool = True) -> str:
    """The person at A: follow the authorization URL with A's session, consent as A's consent
    page does, and return where A sends the browser back (B's callback with code and state)."""
    with cookie_client(idp, idp_cookie) as http:
        r = http.get(redirect_url)
        if r.status_code == 200:  # A's consent page
            assert "text/html" in r.headers["content-type"]
            r = http.post(
                "/authorize/consent", json={"request": urlsplit(redirect_url).query, "approve": approve}
            )
            assert r.status_code == 200, r.text
            return str(r.json()["location"])
        assert r.status_code in (302, 303), (r.status_code, r.text[:300])
        return r.headers["location"]


def callback_path(location: str, sp: InProcessServer) -> str:
    assert location.startswith(sp.url + "/api/callback?"), location
    return location[len(sp.url) :]


def error_of(response: httpx.Response) -> str:
    assert response.status_code == 303, (response.status_code, response.text[:300])
    location = response.headers["location"]
    assert location.startswith("/?error="), location
    from grantd.sp.login import LOGIN_ERRORS

    message = unquote(location[len("/?error=") :])
    # D9: the readable message of the specification's error table; issue 19: only the fixed table's
    assert message in LOGIN_ERRORS.values(), message
    return message


def person_at(idp: InProcessServer, email: str) -> str:
    """A person of A with a session at A: the cookie value."""
    if idp.call(idp.services.store.people.get(email)) is None:
        create_person(idp, email, name="Person " + email.split("@")[0])
    return start_session(idp, email)


def login(sp: InProcessServer, idp: InProcessServer, http: httpx.Client, email: str) -> httpx.Response:
    r = begin(http, email)
    assert r.status_code == 200, r.text
    location = at_idp(idp, person_at(idp, email), r.json()["redirectUrl"])
    return http.get(callback_path(location, sp))


# -- the round trip ---------------------------------------------------------------------------------


def test_a_person_of_a_logs_in_to_b_found_through_dns(
    sp: InProcessServer, idp: InProcessServer, dns: TxtDnsServer
) -> None:
    with browser(sp) as http:
        r = begin(http, "Alice@A.test")
        assert r.status_code == 200, r.text
        assert r.headers["cache-control"] == "no-store"
        url = r.json()["redirectUrl"]
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" == idp.url and parts.path == "/authorize"
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        client_id = urlsplit(sp.url).netloc
        assert query["client_id"] == client_id and query["redirect_uri"] == sp.url + "/api/callback"
        assert query["response_type"] == "code" and query["code_challenge_method"] == "S256"
        assert query["scope"] == "openid email profile" and query["login_hint"] == "alice@a.test"
        assert len(query["state"]) >= 43 and len(query["nonce"]) >= 43 and len(query["code_challenge"]) == 43
        flow_cookie = next(c for c in http.cookies.jar if c.name == SP_FLOW_COOKIE)
        assert flow_cookie.path == "/api/callback"
        assert "_ddisa.a.test" in dns.queries

        location = at_idp(idp, person_at(idp, "alice@a.test"), url)
        r = http.get(callback_path(location, sp))
        assert r.status_code == 303 and r.headers["location"] == "/", r.text
        me = http.get("/api/me")
        assert me.status_code == 200, me.text
        body = me.json()
        assert body["kind"] == "guest" and body["act"] == "human" and body["admin"] is False
        assert body["sub"] == body["email"] == "alice@a.test" and body["name"] == "Person alice"
        assert body["idp"] == idp.url and body["id"].startswith("guest:")

        home = http.get("/")  # the guest's home page: who, through which IdP
        assert home.status_code == 200 and "alice@a.test" in home.text and idp.url in home.text

        # the flow is single use: the same callback again is refused (state replay)
        assert "already used" in error_of(http.get(callback_path(location, sp)))
        assert http.get("/api/me").json()["kind"] == "guest"  # and it did not end the session

        assert http.post("/api/logout", json={}).json() == {"ok": True}
        assert http.get("/api/me").status_code == 401


def test_the_lowest_priority_record_names_the_idp(sp: InProcessServer, idp: InProcessServer) -> None:
    with browser(sp) as http:
        r = begin(http, "carol@prio.test")
        assert r.status_code == 200, r.text
        assert r.json()["redirectUrl"].startswith(idp.url + "/authorize?")
        r = login(sp, idp, http, "dave@prio.test")
        assert r.status_code == 303 and r.headers["location"] == "/"
        assert http.get("/api/me").json()["idp"] == idp.url


def test_return_to_is_a_local_path_only(sp: InProcessServer, idp: InProcessServer) -> None:
    with browser(sp) as http:
        for wanted, landed in (
            ("/account?tab=1", "/account?tab=1"),
            ("https://evil.example/", "/grants"),
            ("//evil.example", "/grants"),
        ):
            r = begin(http, "erin@a.test", returnTo=wanted)
            location = at_idp(idp, person_at(idp, "erin@a.test"), r.json()["redirectUrl"])
            r = http.get(callback_path(location, sp))
            assert r.status_code == 303 and r.headers["location"] == landed


# -- discovery outcomes ---------------------------------------------------------------------------


def test_mode_deny_is_refused_readably(sp: InProcessServer) -> None:
    with browser(sp) as http:
        r = begin(http, "mallory@deny.test")
    assert r.status_code == 403 and r.headers["content-type"].startswith("application/problem+json")
    assert "mode=deny" in r.json()["detail"]


def test_no_record_and_no_fallback_is_the_specifications_message(sp: InProcessServer) -> None:
    with browser(sp) as http:
        r = begin(http, "nobody@nowhere.test")
        assert r.status_code == 404 and r.json()["detail"] == "could not discover IdP for this email domain"
        assert begin(http, "not an e-mail").status_code == 400
        assert http.post("/api/login", json={}).status_code == 400
        assert http.post("/api/login", content=b"{").status_code == 400


def test_no_record_goes_to_the_fallback_idp(tmp_path: Path, dns: TxtDnsServer, idp: InProcessServer) -> None:
    server = InProcessServer(tmp_path / "fallback", extra=sp_config(dns, fallback_idp=idp.url)).start()
    try:
        with browser(server) as http:
            r = begin(http, "frank@fallback-only.test")
            assert r.status_code == 200, r.text
            assert r.json()["redirectUrl"].startswith(idp.url + "/authorize?")
            r = login(server, idp, http, "grace@fallback-only.test")
            assert r.status_code == 303 and r.headers["location"] == "/", r.headers
            assert http.get("/api/me").json()["email"] == "grace@fallback-only.test"
            assert begin(http, "mallory@closed.test").status_code == 403  # a denying domain never falls back
    finally:
        server.stop()


def test_an_http_idp_is_refused_unless_allowed(
    tmp_path: Path, dns: TxtDnsServer, idp: InProcessServer
) -> None:
    """Without ``sp.allow_http_idp`` the record naming A (http://127.0.0.1:…) is no record (peer bug 8)."""
    server = InProcessServer(tmp_path / "strict", extra=sp_config(dns)).start()
    try:
        with browser(server) as http:
            r = begin(http, "alice@a.test")
        assert r.status_code == 404 and r.json()["detail"] == "could not discover IdP for this email domain"
    finally:
        server.stop()


# -- the callback's checks --------------------------------------------------------------------------


def _state_of(redirect_url: str) -> str:
    return parse_qs(urlsplit(redirect_url).query)["state"][0]


def test_a_pkce_mismatch_is_a_code_exchange_error(sp: InProcessServer, idp: InProcessServer) -> None:
    with browser(sp) as http:
        url = begin(http, "heidi@a.test").json()["redirectUrl"]
        key = hashlib.sha256(_state_of(url).encode()).hexdigest()
        store, now = sp.services.store, sp.clock.now_ms()
        flow = sp.call(store.onetime.take("sp", key, now))
        flow["verifier"] = "x" * 86  # another verifier than the challenge A bound the code to
        sp.call(store.onetime.put("sp", key, flow, now + 600_000, now))
        location = at_idp(idp, person_at(idp, "heidi@a.test"), url)
        assert error_of(http.get(callback_path(location, sp))) == "code exchange error"
        assert http.get("/api/me").status_code == 401


def test_an_expired_code_is_the_specifications_message(sp: InProcessServer, idp: InProcessServer) -> None:
    with browser(sp) as http:
        url = begin(http, "ivan@a.test").json()["redirectUrl"]
        location = at_idp(idp, person_at(idp, "ivan@a.test"), url)
        idp.clock.advance(61)  # A's codes live 60 s
        try:
            assert error_of(http.get(callback_path(location, sp))) == "expired authorization code"
        finally:
            idp.clock.advance(-61)
        assert http.get("/api/me").status_code == 401


def test_a_client_id_other_than_the_one_a_issued_for_is_the_audience_message(
    tmp_path: Path, sp: InProcessServer, idp: InProcessServer, dns: TxtDnsServer
) -> None:
    """A second node of B's deployment (same database) configured with another client id handles
    the callback: A issued the ID token for B's client id, so its audience is not this node's."""
    import tomllib

    table = tomllib.loads(sp.config_path.read_text())["storage"]  # B's database, SQLite or PostgreSQL
    if table.get("plugin", "sqlite") == "sqlite":
        table["path"] = str(sp.directory / table.get("path", "grantd.db"))
    elif str(table.get("dsn", "")).startswith("file:"):
        table["dsn"] = "file:" + str(sp.directory / table["dsn"][5:])
    storage = "\n".join(f"{key} = {json.dumps(value)}" for key, value in table.items())
    node = InProcessServer(
        tmp_path / "node2",
        storage=storage,
        extra=sp_config(dns, allow_http_idp=True, client_id="sp-node-2.example"),
    ).start()
    try:
        with browser(sp) as http:
            url = begin(http, "judy@a.test").json()["redirectUrl"]
            location = at_idp(idp, person_at(idp, "judy@a.test"), url)
            path = callback_path(location, sp)
            flow = next(c for c in http.cookies.jar if c.name == SP_FLOW_COOKIE)
        with httpx.Client(base_url=node.url, timeout=15, cookies={SP_FLOW_COOKIE: flow.value or ""}) as other:
            assert error_of(other.get(path)) == "JWT audience does not match client ID"
            assert other.get("/api/me").status_code == 401
    finally:
        node.stop()


def test_a_callback_in_another_browser_or_without_state_signs_nobody_in(
    sp: InProcessServer, idp: InProcessServer
) -> None:
    with browser(sp) as http:
        url = begin(http, "ken@a.test").json()["redirectUrl"]
        location = at_idp(idp, person_at(idp, "ken@a.test"), url)
    with browser(sp) as elsewhere:  # the callback URL carried to another browser (login CSRF)
        assert "another browser" in error_of(elsewhere.get(callback_path(location, sp)))
        assert elsewhere.get("/api/me").status_code == 401
        assert "start again" in error_of(elsewhere.get("/api/callback?code=x&state=unknown"))
        assert "start again" in error_of(elsewhere.get("/api/callback"))


def test_a_refusal_at_the_idp_comes_back_readably(sp: InProcessServer, idp: InProcessServer) -> None:
    with browser(sp) as http:
        url = begin(http, "leo@a.test").json()["redirectUrl"]
        location = at_idp(idp, person_at(idp, "leo@a.test"), url, approve=False)
        answer = http.get(callback_path(location, sp))
        assert error_of(answer) == "the IdP refused the login: access_denied"
        page = http.get(answer.headers["location"])
        assert page.status_code == 200 and "the IdP refused the login: access_denied" in page.text


SPOOFS = (
    "Your account is locked, call +1 555 0100",
    "<script>alert(1)</script>\x1b[31m",
    "LOGIN_FAILED",
    "login_failed ",
    "__class__",
    "a" * 5000,
)
SPOOF_IDS = ("phone", "script", "upper-case", "trailing-space", "dunder", "long")


@pytest.mark.parametrize("text", SPOOFS, ids=SPOOF_IDS)
def test_the_home_page_never_shows_the_query_text(sp: InProcessServer, text: str) -> None:
    """Content spoofing (issue 19): ``/?error=`` shows the fixed message of a known code, and the
    generic one for anything else — the link's own words never appear on our origin."""
    from grantd.sp.login import LOGIN_ERRORS

    with browser(sp) as http:
        r = http.get("/", params={"error": text})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    shown = re.search(r"<p class=\"error-detail\" data-login-error>(.*?)</p>", r.text, re.S)
    assert shown is not None and shown.group(1) == LOGIN_ERRORS["login_failed"]
    for fragment in ("locked", "+1 555", "alert(", "aaaaaaaa", "\x1b", "__class__"):
        assert fragment not in r.text.lower()


def test_the_home_page_shows_the_message_of_each_known_code(sp: InProcessServer) -> None:
    from grantd.sp.login import LOGIN_ERRORS

    with browser(sp) as http:
        for code, message in LOGIN_ERRORS.items():
            for given in (code, message):  # the message itself (what callbacks send, D9) or its code
                r = http.get("/", params={"error": given})
                assert r.status_code == 200 and str(escape(message)) in r.text, given


# -- a guest has no rights at B ---------------------------------------------------------------------


def test_a_guest_is_nobody_here_even_with_an_administrators_email(
    sp: InProcessServer, idp: InProcessServer
) -> None:
    """B knows boss@a.test as an administrator and root@example.com is in B's admin.emails; both
    log in through A (another IdP's word) and may do nothing at B but say who they are."""
    create_person(sp, "boss@a.test", admin=True)
    with sp.admin() as admin:
        _, public = __import__("people_support").new_public_key()
        agent = admin.post(
            "/api/agent/enroll",
            json={
                "email": "agent+bot@a.test",
                "name": "bot",
                "publicKey": public,
                "owner": "boss@a.test",
                "approver": "boss@a.test",
            },
        )
        assert agent.status_code == 201, agent.text
        grant = admin.post(
            "/api/grants",
            json={
                "requester": "agent+bot@a.test",
                "target_host": "web-1",
                "audience": "escapes",
                "command": ["true"],
                "grant_type": "once",
            },
        )
        assert grant.status_code in (200, 201), grant.text
        grant_id = grant.json()["id"]
    for email in ("boss@a.test", "root@example.com"):
        with browser(sp) as http:
            assert login(sp, idp, http, email).headers["location"] == "/"
            me = http.get("/api/me").json()
            assert me["kind"] == "guest" and me["admin"] is False and me["email"] == email
            assert http.post(f"/api/grants/{grant_id}/approve", json={}).status_code == 403
            assert (
                http.post(
                    "/api/grants/batch", json={"operations": [{"id": grant_id, "action": "approve"}]}
                ).status_code
                == 403
            )
            assert http.get(f"/api/grants/{grant_id}").status_code == 403
            assert http.get("/api/grants").status_code == 403
            assert http.get("/api/admin/users").status_code == 403
            assert http.get("/api/admin/agents").status_code == 403
            assert (
                http.post(
                    "/api/grants",
                    json={
                        "target_host": "web-1",
                        "audience": "escapes",
                        "command": ["id"],
                        "grant_type": "once",
                    },
                ).status_code
                == 403
            )
            assert (
                http.post(
                    "/api/delegations", json={"delegate": "agent+bot@a.test", "audience": "x"}
                ).status_code
                == 403
            )
            assert http.get("/api/webauthn/credentials").status_code == 403
            page = http.get("/grants")
            assert page.status_code == 303 and page.headers["location"].startswith("/login")
            assert http.get("/admin").status_code == 303
    with sp.admin() as admin:
        assert admin.get(f"/api/grants/{grant_id}").json()["status"] == "pending"


# -- the SP's documents -----------------------------------------------------------------------------


def test_the_well_known_documents(sp: InProcessServer, idp: InProcessServer) -> None:
    with browser(sp) as http:
        meta = http.get("/.well-known/oauth-client-metadata")
        assert meta.status_code == 200 and meta.headers["access-control-allow-origin"] == "*"
        assert meta.headers["cache-control"].startswith("public")
        body = meta.json()
        assert body["client_id"] == urlsplit(sp.url).netloc
        assert body["redirect_uris"] == [sp.url + "/api/callback"] and body["contacts"] == []
        assert body["token_endpoint_auth_method"] == "none" and body["client_uri"] == sp.url
        assert body["grant_types"] == ["authorization_code"] and body["response_types"] == ["code"]
        auth = http.get("/.well-known/auth.md")
        assert auth.status_code == 200 and auth.headers["content-type"].startswith("text/markdown")
        assert (
            "/api/login" in auth.text
            and "_ddisa." in auth.text
            and auth.headers["access-control-allow-origin"] == "*"
        )
        manifest = http.get("/.well-known/grantd.json")
        assert manifest.status_code == 200 and manifest.json() == http.get("/.well-known/service.json").json()
        assert manifest.json()["auth"]["supported_methods"] == ["ddisa"]
        assert manifest.json()["endpoints"]["login"] == sp.url + "/api/login"
    with httpx.Client(base_url=idp.url, timeout=10) as off:  # [sp] off on A: every SP route is 404
        for method, path in (
            ("GET", "/.well-known/oauth-client-metadata"),
            ("GET", "/.well-known/auth.md"),
            ("GET", "/.well-known/grantd.json"),
            ("GET", "/.well-known/service.json"),
            ("GET", "/api/callback?code=x&state=y"),
        ):
            assert off.request(method, path).status_code == 404, path
        assert off.post("/api/login", json={"email": "a@a.test"}).status_code == 404
