"""Passkeys in the browser: register through a registration link, sign out, sign in again (with a
discoverable passkey and by e-mail), ``?next=``, and the account page's passkeys."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from system.browser.conftest import origin_of, registration_url, shoot


def test_register_through_a_link_then_sign_out_and_in_again(site, new_person):
    person = new_person(site)
    url = registration_url(site, person.email, name="Pat Example")
    person.page.goto(url)
    shoot(person, "register")
    person.page.get_by_role("button", name="Register a passkey").click()
    person.page.wait_for_url(f"{person.origin}/grants")
    assert len(person.credentials()) == 1  # the passkey lives on the (virtual) device
    cookie = person.session_cookie()
    assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["secure"] is False
    me = person.fetch("GET", "/api/me")
    assert me["status"] == 200 and person.email in me["body"]

    person.sign_out()
    assert person.session_cookie() is None
    assert person.fetch("GET", "/api/me")["status"] == 401
    shoot(person, "login")

    person.sign_in()  # discoverable: no e-mail typed
    assert person.fetch("GET", "/api/me")["status"] == 200
    person.sign_out()
    person.sign_in(email=person.email.upper())  # by e-mail (case does not matter)
    assert person.page.url == f"{person.origin}/grants"


def test_a_page_without_a_session_goes_to_login_and_back_after_sign_in(registered):
    person = registered
    person.sign_out()
    person.goto("/account")
    assert person.page.url == f"{person.origin}/login?next=/account"
    person.sign_in(next_path="/account")
    assert person.page.get_by_role("heading", name="Your account").is_visible()


def test_next_never_leaves_the_site(registered):
    person = registered
    person.sign_out()
    for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)"):
        person.page.goto(f"{person.origin}/login?next={evil}")
        assert person.page.locator("[data-next]").get_attribute("data-next") == "/grants"
    person.sign_in()
    assert person.page.url == f"{person.origin}/grants"


def test_a_registration_link_works_once(site, new_person):
    first = new_person(site)
    url = registration_url(site, first.email)
    first.register(url)
    other = new_person(site)
    answer = other.page.goto(url)
    # a used link says so at once (issue 20 item 10): no form to fill in that fails only after the click
    assert answer is not None and answer.status == 404
    expect(other.page.locator("[data-link-invalid]")).to_contain_text(
        re.compile(r"not valid.*already\s+used", re.I | re.S)
    )
    expect(other.page.get_by_role("button", name="Register a passkey")).to_have_count(0)
    assert other.page.url.startswith(f"{origin_of(site)}/register")
    assert other.session_cookie() is None


def test_signing_in_works_from_the_keyboard_alone(registered):
    person = registered
    person.sign_out()
    page = person.page
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    for _ in range(5):  # skip link, brand, then the sign-in button: reached in a few steps
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.action") == "login-discoverable":
            break
    assert page.evaluate("document.activeElement.matches(':focus-visible')")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{person.origin}/grants")
