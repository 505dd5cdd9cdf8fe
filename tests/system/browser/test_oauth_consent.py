"""OAuth consent in Chromium: a person signs in with a passkey on the way through /authorize, is asked
for consent for a domain client (an SP whose metadata a tiny real HTTP server serves), approves,
and the code reaches the client; the second time no consent page; the consent withdrawn on
/account; then asked again."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from oauth_support import MetadataServer, authorize_params, exchange, pkce, query_of
from playwright.sync_api import expect

from conftest import Server
from system.browser.conftest import localhost_server, registration_url, shoot


@pytest.fixture(scope="module")
def sp() -> Iterator[MetadataServer]:
    server = MetadataServer()
    server.document["client_name"] = "Tiny SP"
    yield server
    server.close()


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = localhost_server(
        tmp_path_factory.mktemp("oauth-idp"), extra="[oauth]\nallow_private_metadata_hosts = true\n"
    ).start()
    yield server
    server.stop()


def test_consent_in_the_browser_remembered_withdrawn_and_asked_again(
    idp: Server, sp: MetadataServer, new_person: Any
) -> None:
    person = new_person(idp)
    person.register(registration_url(idp, person.email, name="Pat Example"))
    person.sign_out()

    verifier, challenge = pkce()
    params = authorize_params(sp.client_id, sp.redirect_uri, challenge, scope="openid email profile")
    person.goto("/authorize?" + urlencode(params))
    # nobody signed in: to /login, and back to /authorize after the passkey
    expect(person.page).to_have_url(re.compile(re.escape(person.origin) + r"/login\?next=/authorize"))
    person.page.get_by_role("button", name="Sign in with a passkey").click()
    expect(person.page).to_have_url(re.compile(re.escape(person.origin) + r"/authorize\?"))
    expect(person.page.get_by_role("heading", name="Tiny SP wants to sign you in")).to_be_visible()
    expect(person.page.locator("[data-scopes]")).to_contain_text("see your e-mail address")
    shoot(person, "oauth-consent")
    assert sp.callbacks == []  # nothing reached the client before the person answered

    person.page.get_by_role("button", name="Allow").click()
    expect(person.page).to_have_url(re.compile(re.escape(sp.redirect_uri) + r"\?code="))
    found = query_of(sp.callbacks[-1])
    assert found["state"] == params["state"] and found["iss"] == person.origin
    answer = exchange(
        idp, found["code"], verifier, client_id=sp.client_id, redirect_uri=sp.redirect_uri, as_json=True
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["id_token"]

    # the second time: no consent page, straight back to the client
    person.goto(
        "/authorize?" + urlencode(authorize_params(sp.client_id, sp.redirect_uri, scope="openid email"))
    )
    expect(person.page).to_have_url(re.compile(re.escape(sp.redirect_uri) + r"\?code="))
    assert len(sp.callbacks) == 2

    # withdraw on /account
    person.goto("/account")
    row = person.page.locator("[data-list=consents] li", has_text="Tiny SP")
    expect(row).to_be_visible()
    shoot(person, "account-consents")
    row.get_by_role("button", name="Withdraw").click()
    expect(person.page.locator("[data-list=consents]")).to_have_count(0)

    # asked again
    person.goto(
        "/authorize?" + urlencode(authorize_params(sp.client_id, sp.redirect_uri, scope="openid email"))
    )
    expect(person.page.get_by_role("heading", name="Tiny SP wants to sign you in")).to_be_visible()
    person.page.get_by_role("button", name="Deny").click()
    expect(person.page).to_have_url(re.compile(re.escape(sp.redirect_uri) + r"\?error=access_denied"))


def test_apes_cli_is_asked_in_the_browser_every_time(
    idp: Server, sp: MetadataServer, new_person: Any
) -> None:
    """Issue 19 item 4 in Chromium: apes-cli's consent page comes every time, even after an Allow,
    and its Allow (the page's script, with the page's one-time ticket) delivers the code to the
    loopback redirect; nothing reaches the listener before the click."""
    person = new_person(idp)
    person.register(registration_url(idp, person.email, name="Cli User"))
    loopback = f"http://127.0.0.1:{sp.port}/callback"  # a real listener (the SP's tiny server)

    def at_callback() -> int:  # not Chromium's own /favicon.ico after the last landing there
        return sum(1 for path in sp.paths if path.startswith("/callback"))

    for _ in range(2):
        hits = at_callback()
        person.goto("/authorize?" + urlencode(authorize_params("apes-cli", loopback)))
        expect(person.page.get_by_role("heading", name=re.compile("wants to sign you in"))).to_be_visible()
        expect(person.page.locator("[data-consent]")).to_contain_text("asks you every time")
        assert at_callback() == hits  # no request reached the loopback callback before the click
        person.page.get_by_role("button", name="Allow").click()
        expect(person.page).to_have_url(re.compile(re.escape(loopback) + r"\?code="))
