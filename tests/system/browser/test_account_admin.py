"""The account page (passkeys, sessions), enrolment by an owner, the admin page, and sessions that
end while a page is open (an administrator's revocation)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from conftest import ssh_keygen
from system.browser.conftest import registration_url, shoot


def b64url(standard: str) -> str:
    """CDP reports credential ids in standard base64; grantd and the page use base64url."""
    return standard.replace("+", "-").replace("/", "_").rstrip("=")


def test_add_a_second_passkey_then_delete_the_first_but_never_the_last(registered):
    person = registered
    person.goto("/account")
    first_id = b64url(person.credentials()[0]["credentialId"])
    rows = person.page.locator("[data-list=credentials] li")
    assert rows.count() == 1 and "your only passkey" in rows.first.inner_text()

    # Adding one first asks the existing passkey (user verified: the session alone is not enough);
    # then a second device registers the new one: the first device goes away between the two
    # steps (it would refuse a second credential for this account: excludeCredentials).
    def second_device(route):  # the page asks for creation options: the assertion is made by now
        person.remove_authenticator()
        person.add_authenticator()
        route.continue_()

    person.page.route("**/api/webauthn/credentials/add/options", second_device)
    person.page.get_by_label("Name of the new passkey").fill("Phone")
    person.page.get_by_role("button", name="Add a passkey").click()
    person.page.get_by_role("button", name="Delete passkey Phone").wait_for()
    assert rows.count() == 2
    shoot(person, "account")
    person.page.unroute("**/api/webauthn/credentials/add/options")
    second_id = b64url(person.credentials()[0]["credentialId"])
    assert second_id != first_id
    person.page.locator(f"[data-action=delete-credential][data-id='{first_id}']").click()
    # this browser's session was started with the first passkey (registration): it ended with it
    person.page.wait_for_url(re.compile(re.escape(person.origin) + r"/login"))
    person.sign_in(next_path="/account")  # with the new passkey
    expect(rows).to_have_count(1)
    assert "Phone" in rows.first.inner_text() and "your only passkey" in rows.first.inner_text()
    # The last passkey cannot go, not even through the API.
    refused = person.fetch("DELETE", f"/api/webauthn/credentials/{second_id}")
    assert refused["status"] in (400, 409), refused
    # The new passkey signs in (it just did) and again.
    person.sign_out()
    person.sign_in()


def test_an_owner_enrols_an_agent_from_the_link_the_cli_opens(site, registered, tmp_path):
    person = registered
    _, public = ssh_keygen(tmp_path, "bot_key")
    key_line = " ".join(public.split()[:2]) + " deploy-bot"
    from urllib.parse import urlencode

    person.goto("/enroll?" + urlencode({"name": "deploy-bot", "key": key_line}))
    assert person.page.get_by_label("Name").input_value() == "deploy-bot"
    assert person.page.get_by_label("Public key").input_value() == key_line
    email_field = person.page.get_by_label("E-mail address of the agent")
    agent_email = "agent+deploy-bot@" + person.email.rpartition("@")[2]
    assert email_field.input_value() == "" and email_field.get_attribute("placeholder") == agent_email
    shoot(person, "enroll")
    person.page.get_by_role("button", name="Enrol agent").click()
    done = person.page.locator("[data-enrolled]")
    done.wait_for()
    assert person.email in done.inner_text() and agent_email in done.inner_text()
    with site.admin() as http:
        agent = http.get(f"/api/admin/agents/{agent_email}").json()
    assert (
        agent["owner"] == person.email and agent["approver"] == person.email and agent["name"] == "deploy-bot"
    )


def test_an_administrator_ends_a_session_and_the_open_page_is_signed_out(site, registered):
    person = registered
    person.goto("/account")
    with site.admin() as http:
        sessions = http.get("/api/admin/sessions", params={"user": person.email}).json()["data"]
        assert len(sessions) == 1
        assert http.delete(f"/api/admin/sessions/{sessions[0]['family_id']}").status_code == 200
    # The next action of the open page finds itself signed out and goes to the sign-in page.
    person.page.get_by_role("button", name="Add a passkey").click()
    person.page.wait_for_url(re.compile(r"/login\?next=%2Faccount$"))
    person.goto("/grants")
    assert person.page.url.endswith("/login?next=/grants")


def test_the_admin_page_for_administrators_only(site, new_person):
    admin = new_person(site)
    admin.register(registration_url(site, admin.email, admin=True, name="Ada Admin"))
    other = new_person(site)
    other.register(registration_url(site, other.email, name="Olli Other"))

    response = other.goto("/admin")
    assert response.status == 403 and "Administrators only" in other.page.content()
    assert other.page.get_by_role("link", name="Admin").count() == 0
    shoot(other, "admin-forbidden")

    admin.goto("/admin")
    assert admin.page.get_by_role("link", name="Admin").count() == 1
    table = admin.page.locator("section[aria-labelledby=people-h] table")
    assert other.email in table.inner_text() and admin.email in table.inner_text()
    # Add a person: the registration link is shown once, for this server.
    new_email = "newcomer+" + admin.email.split("+", 1)[1]
    admin.page.get_by_label("E-mail address").fill(new_email)
    admin.page.get_by_role("button", name="Add and make a registration link").click()
    link = admin.page.locator("[data-new-link] input")
    link.wait_for()
    new_link = link.input_value()
    assert new_link.startswith(f"{admin.origin}/register?token=")
    shoot(admin, "admin")
    # End the other person's session from the sessions list; their open page is signed out.
    other.goto("/account")
    admin.page.reload()
    row = admin.page.locator("section[aria-labelledby=sessions-h] tr", has_text=other.email)
    assert row.count() == 1
    row.get_by_role("button", name=re.compile("^End")).click()
    admin.page.wait_for_load_state()
    admin.page.locator("section[aria-labelledby=sessions-h] tr", has_text=other.email).wait_for(
        state="detached"
    )
    other.page.reload()
    assert "/login?next=" in other.page.url
    # The newcomer registers with the link.
    newcomer = new_person(site, email=new_email)
    newcomer.register(new_link)
    assert newcomer.fetch("GET", "/api/me")["status"] == 200
