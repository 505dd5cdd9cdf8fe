"""SP login in Chromium (D9, docs/sp.md): B is a service provider, A the identity provider that a
real DNS server on 127.0.0.1 names for the person's e-mail domain (``_ddisa.sp-browser.test``).

A (``http://localhost:PA``, a secure context for WebAuthn) fetches B's client metadata from
``http://127.0.0.1:PB`` (``oauth.allow_private_metadata_hosts``); B (``http://127.0.0.1:PB``:
another host name, so the two session cookies never meet) has ``[sp] enabled`` with the test DNS
server and ``allow_http_idp``. The person registers a passkey at A, opens B's /login, types their
e-mail in the SP form, allows B on A's consent page and lands on B's home page as a guest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from conftest import make_server
from dns_server import TxtDnsServer
from system.browser.conftest import localhost_server, origin_of, registration_url, shoot

DOMAIN = "sp-browser.test"


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, str]]:
    root = tmp_path_factory.mktemp("sp")
    with TxtDnsServer({}) as dns:
        a = localhost_server(root / "a", extra="\n[oauth]\nallow_private_metadata_hosts = true\n")
        b = make_server(
            root / "b",
            extra=f'\n[sp]\nenabled = true\nallow_http_idp = true\nnameservers = ["{dns.address}"]\n',
        )
        dns.records[f"_ddisa.{DOMAIN}"] = [f"v=ddisa1 idp={origin_of(a)}; mode=open"]
        a.start()
        try:
            b.start()
        except BaseException:
            a.stop()
            raise
        yield a, b, f"http://127.0.0.1:{b.port}"
        b.stop()
        a.stop()


def test_a_person_of_a_logs_in_to_b_through_dns(instances: Any, new_person: Any) -> None:
    a, _, b_origin = instances
    person = new_person(a, email=f"pat-{id(instances) % 10_000}@{DOMAIN}")
    person.register(registration_url(a, person.email, name="Pat at A"))  # a passkey at A, signed in at A
    page = person.page

    page.goto(f"{b_origin}/login")
    form = page.locator("form[data-form=sp-login]")
    expect(form).to_be_visible()
    form.get_by_label("E-mail address").fill(person.email)
    shoot(person, "sp-login-b")
    form.get_by_role("button", name="Continue at your identity provider").click()

    # at A (signed in there): A's consent page for B
    allow = page.get_by_role("button", name="Allow")
    expect(allow).to_be_visible()
    expect(page).to_have_url(re.compile(re.escape(person.origin) + r"/authorize\?"))
    allow.click()

    # back at B: the home page of a guest
    page.wait_for_url(f"{b_origin}/")
    guest = page.locator("[data-guest]")
    expect(guest).to_contain_text(person.email)
    expect(guest).to_contain_text(person.origin)
    shoot(person, "sp-guest-home-b")
    me = json.loads(person.fetch("GET", "/api/me")["body"])
    assert me["kind"] == "guest" and me["idp"] == person.origin and me["name"] == "Pat at A"
    # a guest is nobody here: the pages of people send them to sign in
    page.goto(f"{b_origin}/grants")
    page.wait_for_url(re.compile(re.escape(b_origin) + r"/login"))

    # sign out from the guest page
    page.goto(f"{b_origin}/")
    page.get_by_role("button", name="Sign out").first.click()
    expect(page).to_have_url(
        re.compile(re.escape(b_origin) + r"/login"), timeout=15_000
    )  # polls (conftest.py)
    assert person.fetch("GET", "/api/me")["status"] == 401


def test_failures_reach_the_person_readably(instances: Any, new_person: Any) -> None:
    a, _, b_origin = instances
    person = new_person(a)
    page = person.page
    # no IdP for the domain: the login form says so (the specification's message)
    page.goto(f"{b_origin}/login")
    form = page.locator("form[data-form=sp-login]")
    form.get_by_label("E-mail address").fill("nobody@no-ddisa.test")
    form.get_by_role("button", name="Continue at your identity provider").click()
    expect(page.locator("[data-status]")).to_contain_text("could not discover IdP for this email domain")
    # a callback that no login of this browser started: the home page shows why, escaped
    page.goto(f"{b_origin}/api/callback?code=forged&state=forged")
    page.wait_for_url(re.compile(re.escape(b_origin) + r"/\?error="))
    expect(page.locator("[data-login-error]")).to_contain_text("start again")
    shoot(person, "sp-error-b")
    page.goto(f"{b_origin}/?error=Your%20account%20is%20locked%2C%20call%20%2B1%20555%200100")
    expect(page.locator("[data-login-error]")).to_have_text(
        "the login did not complete"
    )  # never the link's words
    assert "locked" not in page.content()
    assert person.fetch("GET", "/api/me")["status"] == 401
