"""The account page's sessions (issue 19 item 10) in Chromium: a person sees every browser signed in
as them and ends another one from /account; that browser is signed out at its next page."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from system.browser.conftest import shoot


def second_browser(site: Any, new_person: Any, person: Any) -> Any:
    """The same person on another device: the passkey copied to that device's authenticator (as a
    synced passkey would be), signed in there."""
    other = new_person(site, email=person.email)
    for credential in person.credentials():
        other.cdp.send(
            "WebAuthn.addCredential",
            {
                "authenticatorId": other.authenticator,
                "credential": {
                    key: credential[key]
                    for key in (
                        "credentialId",
                        "isResidentCredential",
                        "rpId",
                        "privateKey",
                        "userHandle",
                        "signCount",
                    )
                    if key in credential
                },
            },
        )
    other.sign_in()
    return other


def test_a_person_ends_another_browsers_session_from_the_account_page(
    site: Any, new_person: Any, registered: Any
) -> None:
    here = registered
    there = second_browser(site, new_person, here)
    assert there.fetch("GET", "/api/me")["status"] == 200
    here.goto("/account")
    rows = here.page.locator("[data-list=sessions] li")
    expect(rows).to_have_count(2)
    assert here.page.locator("[data-list=sessions] .badge", has_text="this browser").count() == 1
    shoot(here, "account-sessions")
    end = here.page.locator("[data-action=end-session]")
    expect(end).to_have_count(1)  # only the other browser's: this one signs out with "Sign out"
    end.click()
    expect(rows).to_have_count(1)
    assert here.fetch("GET", "/api/me")["status"] == 200
    there.goto("/account")
    expect(there.page).to_have_url(re.compile(re.escape(there.origin) + r"/login"))
    assert there.fetch("GET", "/api/me")["status"] == 401
