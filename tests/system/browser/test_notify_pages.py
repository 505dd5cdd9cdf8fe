"""Reaching approvers in Chromium (D15, issue 24): a person approves from the review link a mail
brought, with the virtual authenticator's user-verified passkey; and turns on Web Push on /account
through the page's own code (headless Chromium cannot subscribe offline: it needs FCM, so the
browser's ``PushManager.subscribe`` answers with a subscription of the local push service emulator),
after which a grant's notice reaches the emulator, VAPID-signed and encrypted to that subscription."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from people_support import enrol_agent, request_grant
from playwright.sync_api import expect
from support.notify_doubles import PushService, SmtpSink

from system.browser.conftest import localhost_server, registration_url, shoot

MAIL = """
[notify]
poll_ms = 50

[[notify.channels]]
id = "mail"
type = "smtp"
host = "127.0.0.1"
port = {port}
starttls = false
from = "grantd@example.com"
"""

PUSH = """
[notify]
poll_ms = 50
vapid_private_key = "file:vapid.pem"
vapid_subject = "mailto:ops@example.com"
allowed_push_hosts = ["127.0.0.1"]
allow_private_push_hosts = true

[[notify.channels]]
id = "push"
type = "webpush"
"""


def wait_for(predicate: Any, seconds: float = 15.0) -> Any:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    smtp = SmtpSink().start()
    yield smtp
    smtp.stop()


def test_a_person_approves_from_a_mailed_review_link_with_the_passkey(tmp_path, sink, new_person):
    server = localhost_server(tmp_path / "srv", extra=MAIL.format(port=sink.port)).start()
    try:
        person = new_person(server)
        person.register(registration_url(server, person.email))
        _, token = enrol_agent(server, owner=person.email)
        grant = request_grant(server, token, command=["systemctl", "restart", "nginx"])
        mails = wait_for(lambda: [m for m in sink.messages if person.email in m.recipients])
        link = re.search(r"http://localhost:\d+/r/[A-Za-z0-9_-]+", mails[0].message.get_content())
        assert link, mails[0].message.get_content()
        person.page.goto(link.group(0))
        expect(person.page.get_by_role("button", name="Approve with passkey")).to_be_visible()
        shoot(person, "review-link")
        with server.admin() as http:
            assert (
                http.get(f"/api/grants/{grant['id']}").json()["status"] == "pending"
            )  # opening changed nothing
        person.page.get_by_role("button", name="Approve with passkey").click()
        person.page.wait_for_url(re.compile(r"/grant-approval\?grant_id="))
        with server.admin() as http:
            assert http.get(f"/api/grants/{grant['id']}").json()["status"] == "approved"
    finally:
        server.stop()


FAKE_PUSH_MANAGER = """
(() => {
  const subscription = %s;
  PushManager.prototype.subscribe = async function (options) {
    const key = new Uint8Array(options.applicationServerKey);
    sessionStorage.setItem("pushOptions", JSON.stringify({
      userVisibleOnly: options.userVisibleOnly,
      key: btoa(String.fromCharCode.apply(null, key)).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, ""),
    }));
    return { endpoint: subscription.endpoint, expirationTime: null, toJSON: () => subscription };
  };
})();
"""


def test_a_person_turns_on_web_push_on_the_account_page(tmp_path, new_person):
    directory = tmp_path / "srv"
    server = localhost_server(directory, extra=PUSH)
    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (directory / "vapid.pem").write_bytes(key)
    (directory / "vapid.pem").chmod(0o600)
    push = PushService().start()
    server.start()
    try:
        person = new_person(server)
        person.register(registration_url(server, person.email))
        vapid = person.fetch("GET", "/api/push/vapid")
        public_key = json.loads(vapid["body"])["publicKey"]
        person.context.add_init_script(FAKE_PUSH_MANAGER % json.dumps(push.subscribe(public_key)))
        person.context.grant_permissions(["notifications"], origin=person.origin)
        person.goto("/account")
        person.page.get_by_role("button", name="Turn on notifications in this browser").click()
        expect(person.page.locator("[data-list=push-subscriptions] li")).to_have_count(1)
        shoot(person, "account-push")
        options = json.loads(person.page.evaluate("sessionStorage.getItem('pushOptions')"))
        assert options == {"userVisibleOnly": True, "key": public_key}  # what the page asked the browser for
        assert person.page.evaluate("navigator.serviceWorker.getRegistration('/').then(r => !!r)")
        _, token = enrol_agent(server, owner=person.email)
        request_grant(server, token)
        (message,) = wait_for(lambda: push.received)
        assert message.payload["kind"] == "review_requested"
        assert message.payload["url"].startswith(person.origin + "/r/")
    finally:
        push.stop()
        server.stop()
