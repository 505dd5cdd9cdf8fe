"""The pages over plain HTTP (no browser): redirects without a session, the page security headers,
static files, and that the API under /api/ keeps answering problem+json."""

from __future__ import annotations

import re

import httpx
import pytest

from grantd.web.views import PAGE_CSP, safe_next

from system.browser.conftest import problem_json

PAGES = [
    "/grants",
    "/account",
    "/enroll?name=bot&key=ssh-ed25519%20AAAA",
    "/admin",
    "/grant-approval?grant_id=abc",
]


@pytest.fixture(scope="module")
def http(site):
    # At the issuer's address (Host), as a browser has it: elsewhere /login points there (D18).
    with httpx.Client(
        base_url=site.url, timeout=10, follow_redirects=False, headers={"Host": f"localhost:{site.port}"}
    ) as client:
        yield client


def test_root_sends_a_visitor_to_sign_in(http):
    r = http.get("/")
    assert r.status_code == 303 and r.headers["location"] == "/login"


@pytest.mark.parametrize("path", PAGES)
def test_pages_need_a_session_and_come_back_after_sign_in(http, path):
    r = http.get(path)
    assert r.status_code == 303
    location = r.headers["location"]
    assert location.startswith("/login?next=")
    back = httpx.URL(location).params["next"]
    assert back == str(httpx.URL(path).raw_path.decode())  # the same path and query, nothing else


@pytest.mark.parametrize("path", PAGES)
def test_a_bearer_or_a_stale_cookie_is_no_session_for_pages(site, http, path):
    r = http.get(path, headers={"Authorization": f"Bearer {site.token}"})  # the management token
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
    r = http.get(path, headers={"Cookie": "grantd_session=" + "A" * 43})
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")


def test_pages_carry_a_strict_content_security_policy(http):
    for path, status in (("/login", 200), ("/register?token=abc", 404)):  # abc: no such registration URL
        r = http.get(path)
        assert r.status_code == status and r.headers["content-type"].startswith("text/html")
        assert r.headers["content-security-policy"] == PAGE_CSP
        assert "script-src 'self'" in PAGE_CSP and "'unsafe-inline'" not in PAGE_CSP
        assert r.headers["x-frame-options"] == "DENY" and r.headers["cache-control"] == "no-store"
        assert r.headers["referrer-policy"] == "same-origin"  # the registration token stays here
        # Nothing inline, nothing from another host.
        assert not re.search(r"<script(?![^>]*\bsrc=)", r.text)
        assert not re.search(r"\bon[a-z]+=", r.text) and "style=" not in r.text
        assert not re.search(r"(src|href)=\"(https?:)?//", r.text)


def test_next_is_only_ever_a_local_path(http):
    for evil in (
        "//evil.example",
        "https://evil.example/",
        "/\\evil.example",
        "javascript:alert(1)",
        "/\x00x",
        "/a\nb",
        "\\\\evil",
        "http:/x",
        " /x",
    ):
        assert safe_next(evil) == "/grants", evil
    assert safe_next("/grant-approval?grant_id=a%2Fb") == "/grant-approval?grant_id=a%2Fb"
    r = http.get("/login", params={"next": "//evil.example/"})
    assert 'data-next="/grants"' in r.text
    r = http.get("/login", params={"next": '/x"><script>alert(1)</script>'})
    assert "<script>alert" not in r.text and "&#34;&gt;&lt;script&gt;" in r.text


def test_a_registration_page_without_a_sane_token_says_so(http):
    assert http.get("/register").status_code == 400
    assert http.get("/register", params={"token": "a\x1bb"}).status_code == 400
    assert http.get("/register", params={"token": "x" * 500}).status_code == 400


def test_static_files_are_served_from_memory_with_validators(http):
    r = http.get("/static/grantd.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert r.headers["x-content-type-options"] == "nosniff"
    again = http.get("/static/grantd.js", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304
    assert http.get("/static/grantd.css").headers["content-type"].startswith("text/css")
    for missing in (
        "/static/nothing.js",
        "/static/..%2Fpages.py",
        "/static/%2e%2e%2Fgrantd.toml",
        "/static/",
    ):
        assert http.get(missing).status_code == 404, missing


def test_the_api_keeps_its_problem_json(http):
    for path in ("/api/nothing-here", "/api/grants"):
        r = http.get(path)
        body = problem_json(r)
        assert body["status"] == r.status_code and r.status_code in (401, 404)
    # A cross-site page cannot use a person's cookie on the API (D8): refused before anything.
    r = http.post(
        "/api/logout", headers={"Cookie": "grantd_session=" + "A" * 43, "Origin": "https://evil.example"}
    )
    assert r.status_code == 403 and problem_json(r)["detail"] == "cross-site request refused"
