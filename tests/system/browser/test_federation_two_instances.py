"""Two grantd instances in one Chromium: B federates to A, A is B's upstream OpenID provider.

A (``http://localhost:PA``, a secure context for WebAuthn) registers B as a confidential client
(``[[oauth.clients]]`` with a client secret and B's callback as its only redirect URI). B
(``http://127.0.0.1:PB``: another host name, so the two instances' session cookies never meet)
has a ``[[federation.providers]]`` table of type ``oidc`` whose issuer is A (http is allowed for
a loopback issuer). A person registers a passkey at A, signs out there, opens B's /login, picks
A's button, signs in at A with the passkey, allows B on A's consent page and lands at B signed in.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from conftest import make_server
from system.browser.conftest import localhost_server, origin_of, registration_url, shoot

B_PROVIDER = "a"


def _secret(directory: Path, name: str, value: str) -> None:
    path = directory / name
    path.write_text(value + "\n")
    path.chmod(0o600)


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("two")
    a = localhost_server(root / "a")
    b = make_server(root / "b")
    b_origin = f"http://127.0.0.1:{b.port}"
    secret = secrets.token_urlsafe(32)
    _secret(a.directory, "b-client-secret", secret)
    _secret(b.directory, "a-client-secret", secret)
    with a.config_path.open("a") as config:
        config.write(f'''
[[oauth.clients]]
client_id = "grantd-b"
name = "grantd B"
redirect_uris = ["{b_origin}/auth/federated/{B_PROVIDER}/callback"]
client_secret = "file:b-client-secret"
''')
    with b.config_path.open("a") as config:
        config.write(f'''
[[federation.providers]]
id = "{B_PROVIDER}"
type = "oidc"
name = "grantd A"
issuer = "{origin_of(a)}"
client_id = "grantd-b"
client_secret = "file:a-client-secret"
create_unknown = true
''')
    a.start()
    try:
        b.start()
    except BaseException:
        a.stop()
        raise
    yield a, b, b_origin
    b.stop()
    a.stop()


def test_a_person_with_a_passkey_at_a_signs_in_to_b(instances: Any, new_person: Any) -> None:
    a, b, b_origin = instances
    person = new_person(a)  # a browser context with a virtual authenticator
    person.register(registration_url(a, person.email, name="Fed Person"))  # passkey at A, signed in at A
    person.sign_out()  # so that the way to B goes through the passkey at A

    page = person.page
    page.goto(f"{b_origin}/login?next=/account")
    button = page.get_by_role("link", name="Sign in with grantd A")
    expect(button).to_be_visible()
    shoot(person, "federation-login-b")
    button.click()

    # at A: not signed in there, so A's /login, then back to /authorize
    page.wait_for_url(re.compile(re.escape(person.origin) + r"/login\?next="))
    page.get_by_role("button", name="Sign in with a passkey").click()
    allow = page.get_by_role("button", name="Allow")
    expect(allow).to_be_visible()
    expect(page.locator("[data-client-name]").first).to_have_text("grantd B")
    shoot(person, "federation-consent-a")
    allow.click()

    # back at B, signed in, on the page asked for
    page.wait_for_url(f"{b_origin}/account")
    expect(page.get_by_role("heading", name="Your account")).to_be_visible()
    me = person.fetch("GET", "/api/me")
    assert me["status"] == 200, me
    answer = json.loads(me["body"])
    assert answer["email"] == person.email
    # the person was created at B (create_unknown) with the name A vouched for
    with httpx.Client(base_url=b.url, headers={"Authorization": f"Bearer {b.token}"}, timeout=10) as http:
        created = http.get(f"/api/admin/users/{person.email}")
    assert created.status_code == 200 and created.json()["name"] == "Fed Person"
    # B's session cookie lives on B's host only; A's session is A's
    b_cookies = [c for c in person.context.cookies(b_origin) if c["name"] == "grantd_session"]
    assert len(b_cookies) == 1 and b_cookies[0]["domain"] == "127.0.0.1" and b_cookies[0]["httpOnly"]

    # a second sign-in to B needs no consent at A any more (remembered), and no passkey prompt
    # (A's session is live): B's button leads straight back to B
    page.get_by_role("button", name="Sign out").first.click()
    expect(page).to_have_url(f"{b_origin}/login", timeout=15_000)  # polls: an aborted redirect is no failure
    page.get_by_role("link", name="Sign in with grantd A").click()
    page.wait_for_url(f"{b_origin}/grants")
    assert person.fetch("GET", "/api/me")["status"] == 200


def test_b_refuses_a_callback_that_a_did_not_send(instances: Any, new_person: Any) -> None:
    """A forged callback at B (no flow started in this browser) is a readable page, not a session."""
    _, _, b_origin = instances
    person = new_person(instances[0])
    page = person.page
    page.goto(f"{b_origin}/auth/federated/{B_PROVIDER}/callback?code=forged&state=forged")
    expect(page.locator(".error-detail")).to_contain_text("incomplete, was already used or has expired")
    shoot(person, "federation-error")
    assert person.fetch("GET", "/api/me")["status"] == 401
