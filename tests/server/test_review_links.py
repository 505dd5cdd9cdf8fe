"""Review links (D15, issue 24): the link a notice carries opens the grant's page for its one
person and changes nothing; deciding from it needs that person's passkey with user verification
over the grant's digest and a single-use nonce, and the assertion is the vote's evidence; another
person gets 403, an expired link 410, a forged one 404; a chat's deny link denies once, never
approves. Real parts: a real server, mail through a real SMTP server, a software authenticator."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from people_support import enrol_agent, fresh, request_grant
from support.notify_doubles import SmtpSink
from support.soft_webauthn import PasskeyBrowser, make_registration

from grantd.core.review_digest import grant_digest, review_challenge

from server.test_notify_outbox import CHANNELS, mails_to, wait_for


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    smtp = SmtpSink().start()
    yield smtp
    smtp.stop()


@pytest.fixture
def srv(tmp_path, sink) -> Iterator[Any]:
    from inproc import InProcessServer

    server = InProcessServer(tmp_path / "srv", extra=CHANNELS.format(port=sink.port)).start()
    try:
        yield server
    finally:
        server.stop()


def person(srv: Any, prefix: str) -> tuple[PasskeyBrowser, str]:
    """A person with a passkey, signed in in their browser: (browser, e-mail)."""
    email = fresh(prefix)
    browser = PasskeyBrowser(srv.url, srv.url)
    answer = browser.register(make_registration(srv, email))
    assert answer.status_code == 200, answer.text
    return browser, email


def link_from_mail(sink: SmtpSink, email: str, srv: Any, count: int = 1) -> str:
    mails = wait_for(lambda: len(mails_to(sink, email)) >= count and mails_to(sink, email))
    body = mails[count - 1].message.get_content()
    found = re.search(re.escape(srv.url) + r"/r/([A-Za-z0-9_-]+)", body)
    assert found, body
    return found.group(1)


def status_of(srv: Any, grant_id: str) -> str:
    return str(srv.call(srv.services.store.grants.get(grant_id))["status"])


def pending_grant_with_link(srv: Any, sink: SmtpSink) -> tuple[PasskeyBrowser, str, dict[str, Any], str]:
    browser, email = person(srv, "owner")
    _, token = enrol_agent(srv, owner=email)
    grant = request_grant(srv, token, command=["systemctl", "restart", "nginx"], run_as="root")
    return browser, email, grant, link_from_mail(sink, email, srv)


def decide(browser: PasskeyBrowser, token: str, decision: str = "approve", **extra: Any) -> httpx.Response:
    options = browser.request("POST", f"/r/{token}/options", json_body={})
    assert options.status_code == 200, options.text
    credential = browser.authenticator.get(options.json(), browser.origin)
    return browser.request(
        "POST", f"/r/{token}", json_body={"decision": decision, "credential": credential, **extra}
    )


def test_opening_a_link_changes_nothing_and_approving_needs_the_passkey(srv, sink):
    browser, email, grant, token = pending_grant_with_link(srv, sink)
    anonymous = httpx.get(f"{srv.url}/r/{token}", follow_redirects=False)
    assert anonymous.status_code in (302, 303) and "/login" in anonymous.headers["location"]
    for _ in range(2):  # a mail scanner, then the person: nothing changes
        page = browser.request("GET", f"/r/{token}")
        assert page.status_code == 200 and "Approve with passkey" in page.text
    assert status_of(srv, grant["id"]) == "pending"
    bare = browser.request("POST", f"/r/{token}", json_body={"decision": "approve"})
    assert bare.status_code == 403 and bare.json()["detail"] == "fresh passkey required"
    assert status_of(srv, grant["id"]) == "pending"
    options = browser.request("POST", f"/r/{token}/options", json_body={})
    assert options.json()["userVerification"] == "required"
    nonce = options.json()["nonce"]
    stored = srv.call(srv.services.store.grants.get(grant["id"]))
    digest = grant_digest(stored)
    assert options.json()["grantDigest"] == digest.decode()
    from support.soft_webauthn import b64url, unb64url

    assert options.json()["challenge"] == b64url(review_challenge(digest, unb64url(nonce)))
    credential = browser.authenticator.get(options.json(), browser.origin)
    done = browser.request("POST", f"/r/{token}", json_body={"decision": "approve", "credential": credential})
    assert done.status_code == 200, done.text
    assert done.json()["grant"]["status"] == "approved" and done.json()["authz_jwt"]
    (vote,) = srv.call(srv.services.store.grants.votes(grant["id"]))
    evidence = vote["evidence"]["webauthn"]
    assert vote["email"] == email and evidence["grant_digest"] == digest.decode()
    assert evidence["signature"] == credential["response"]["signature"]
    assert evidence["client_data_json"] == credential["response"]["clientDataJSON"]
    # the vote's leaf in the decision log carries the assertion over the digest (D14, D15)
    leaf = _reviewed_leaf(srv, grant["id"])
    assert leaf["data"]["grant_digest"] == digest.decode()
    assert leaf["data"]["evidence"]["webauthn"]["signature"] == credential["response"]["signature"]
    client_data = json.loads(unb64url(leaf["data"]["evidence"]["webauthn"]["client_data_json"]))
    assert client_data["challenge"] == b64url(review_challenge(digest, unb64url(nonce)))


def _reviewed_leaf(srv: Any, grant_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """The ``grant.reviewed`` leaf of a grant, once a signed checkpoint holds it."""
    from server.test_audit_log import all_entries, checkpoint

    deadline = time.monotonic() + timeout
    while True:
        _, size = checkpoint(srv, 1)
        for entry in all_entries(srv, size):
            leaf = json.loads(entry["leaf"])
            if leaf.get("kind") == "grant.reviewed" and leaf.get("grant_id") == grant_id:
                return leaf
        assert time.monotonic() < deadline, "no grant.reviewed leaf for the grant"
        time.sleep(0.1)


def test_an_assertion_without_user_verification_is_refused(srv, sink):
    browser, _, grant, token = pending_grant_with_link(srv, sink)
    browser.authenticator.user_verified = False  # a tap without PIN or biometrics
    refused = decide(browser, token)
    assert refused.status_code == 403 and refused.json()["detail"] == "fresh passkey required"
    assert status_of(srv, grant["id"]) == "pending"
    browser.authenticator.user_verified = True
    assert decide(browser, token, "deny").json()["grant"]["status"] == "denied"


def test_a_review_link_decides_the_request_as_the_passkey_signed_it(srv, sink):
    """The assertion signs the digest's grant type and duration: a vote from the link that asks
    for another type or duration (wider than what was signed) is 400 and records nothing."""
    browser, _, grant, token = pending_grant_with_link(srv, sink)
    for override in ({"grant_type": "always"}, {"duration": 2_592_000}):
        refused = decide(browser, token, **override)
        assert refused.status_code == 400, refused.text
        assert refused.json()["field"] == next(iter(override)), refused.text
        assert status_of(srv, grant["id"]) == "pending"
        assert srv.call(srv.services.store.grants.votes(grant["id"])) == []
    same = decide(browser, token, grant_type=grant["request"]["grant_type"], reason="as asked")
    assert same.status_code == 200, same.text
    assert same.json()["grant"]["status"] == "approved"
    assert same.json()["grant"]["request"]["grant_type"] == grant["request"]["grant_type"]


def test_an_assertion_is_for_one_grant_and_one_use(srv, sink):
    browser, email, first, first_token = pending_grant_with_link(srv, sink)
    _, agent_token = enrol_agent(srv, owner=email)
    second = request_grant(srv, agent_token, command=["reboot"])
    second_token = link_from_mail(sink, email, srv, count=2)
    options = browser.request("POST", f"/r/{first_token}/options", json_body={}).json()
    credential = browser.authenticator.get(options, browser.origin)
    crossed = browser.request(
        "POST", f"/r/{second_token}", json_body={"decision": "approve", "credential": credential}
    )
    assert crossed.status_code == 403  # signed over the first grant's digest: nothing for the second
    again = browser.request(
        "POST", f"/r/{first_token}", json_body={"decision": "approve", "credential": credential}
    )
    assert again.status_code == 403  # the nonce went with the refused attempt: single use
    assert status_of(srv, first["id"]) == "pending" and status_of(srv, second["id"]) == "pending"


def test_another_person_403_forged_404_expired_410(srv, sink):
    _, _, grant, token = pending_grant_with_link(srv, sink)
    other, _ = person(srv, "other")
    page = other.request("GET", f"/r/{token}")
    assert page.status_code == 403 and "this link was sent to" in page.text
    assert other.request("POST", f"/r/{token}/options", json_body={}).status_code == 403
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert other.request("GET", f"/r/{forged}").status_code == 404
    assert other.request("POST", f"/r/{forged}/options", json_body={}).status_code == 404
    srv.clock.advance(srv.services.config.notify.link_ttl + 1)
    assert other.request("GET", f"/r/{token}").status_code == 410
    assert other.request("POST", f"/r/{token}/options", json_body={}).status_code == 410
    assert status_of(srv, grant["id"]) == "pending"


def test_a_person_created_later_with_the_same_e_mail_gets_nothing_from_an_old_link(srv, sink):
    """D11: the link is bound to the person it was sent to, by id: after that person is deleted, a new
    person with the same e-mail is refused (the options would name the grant's host and command)."""
    _, email, grant, token = pending_grant_with_link(srv, sink)
    with srv.admin() as http:
        assert http.delete(f"/api/admin/users/{email}").status_code == 200
    newcomer = PasskeyBrowser(srv.url, srv.url)
    assert newcomer.register(make_registration(srv, email)).status_code == 200
    answer = newcomer.request("POST", f"/r/{token}/options", json_body={})
    assert answer.status_code in (403, 404), answer.text
    assert grant["request"]["target_host"] not in answer.text
    assert newcomer.request("GET", f"/r/{token}").status_code in (403, 404)


def test_a_deny_link_denies_once_and_never_approves(srv, sink):
    from grantd.services import review_links

    browser, email, grant, review_token = pending_grant_with_link(srv, sink)
    record = srv.call(srv.services.store.grants.get(grant["id"]))
    person_record = srv.call(srv.services.store.people.get(email))
    deny = srv.call(review_links.create(srv.services, record, email, person_record["person_id"], "deny"))
    assert httpx.get(f"{srv.url}/r/{deny}/deny").status_code == 405  # a GET (an unfurler) does nothing
    assert httpx.post(f"{srv.url}/r/{review_token}/deny").status_code == 404  # a review link cannot deny so
    assert browser.request("GET", f"/r/{deny}").status_code == 404  # nor show an approve button
    assert status_of(srv, grant["id"]) == "pending"
    first = httpx.post(f"{srv.url}/r/{deny}/deny")  # from a chat or a phone: no session
    assert first.status_code == 200 and first.json()["grant"]["status"] == "denied"
    assert httpx.post(f"{srv.url}/r/{deny}/deny").status_code == 410
    assert status_of(srv, grant["id"]) == "denied"


def test_a_person_without_a_passkey_is_told_to_add_one(srv, sink):
    from people_support import signed_in_person

    from grantd.services import review_links

    owner, browser = signed_in_person(srv, fresh("owner"))  # a session, no passkey
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = srv.call(srv.services.store.grants.get(request_grant(srv, token)["id"]))
    link = srv.call(review_links.create(srv.services, grant, owner["email"], owner["person_id"], "review"))
    r = browser.post(f"/r/{link}/options", json={}, headers={"Origin": srv.url})
    assert r.status_code == 409 and "add one on /account" in r.json()["detail"]


WEBHOOK = """
[notify]
poll_ms = 50

[[notify.channels]]
id = "chat"
type = "webhook"
url = "{url}"
secret = "file:hook-secret"
format = "generic"
deny_from_chat = true
"""


def test_a_chat_deny_must_be_signed_once_within_the_window(tmp_path):
    import hashlib
    import hmac
    import json as jsonlib

    from inproc import InProcessServer
    from people_support import create_person
    from support.notify_doubles import WebhookReceiver

    secret = "s3cret-for-the-chat-relay-0123456789"
    receiver = WebhookReceiver(secret=secret).start()
    directory = tmp_path / "srv"
    directory.mkdir()
    (directory / "hook-secret").write_text(secret)
    (directory / "hook-secret").chmod(0o600)
    srv = InProcessServer(directory, extra=WEBHOOK.format(url=f"{receiver.origin}/hook")).start()
    try:
        owner = create_person(srv, fresh("owner"))
        _, token = enrol_agent(srv, owner=owner["email"])
        grant = request_grant(srv, token)
        (posted,) = wait_for(
            lambda: [r for r in receiver.received if r["json"]["recipient"] == owner["email"]]
        )
        deny = posted["json"]["deny"]
        assert deny["method"] == "POST"  # what the chat relay posts back, signed

        def signed(body: bytes, at: int, key: str = secret) -> dict[str, str]:
            mac = hmac.new(key.encode(), str(at).encode() + b"." + body, hashlib.sha256).hexdigest()
            return {"X-Grantd-Signature": f"t={at},v1={mac}", "Content-Type": "application/json"}

        # grantd's own message posted back, with grantd's own signature, is no callback: a replay
        own = {
            "X-Grantd-Signature": posted["headers"]["x-grantd-signature"],
            "Content-Type": "application/json",
        }
        reflected = httpx.post(deny["url"], content=posted["body"], headers=own)
        assert reflected.status_code == 401 and "replay" in reflected.json()["detail"], reflected.text
        body = jsonlib.dumps({"action": "deny", "user": "U123"}).encode()
        now = srv.clock.now_ms() // 1000
        assert httpx.post(deny["url"], content=body).status_code == 401  # unsigned
        assert (
            httpx.post(deny["url"], content=body, headers=signed(body, now, "wrong-key")).status_code == 401
        )
        stale = httpx.post(deny["url"], content=body, headers=signed(body, now - 301))
        assert stale.status_code == 401 and "window" in stale.json()["detail"]
        tampered = signed(body, now)
        assert httpx.post(deny["url"], content=body + b" ", headers=tampered).status_code == 401
        assert status_of(srv, grant["id"]) == "pending"
        good = signed(body, now)
        first = httpx.post(deny["url"], content=body, headers=good)
        assert first.status_code == 200 and first.json()["grant"]["status"] == "denied"
        replay = httpx.post(deny["url"], content=body, headers=good)
        assert replay.status_code == 401 and "replay" in replay.json()["detail"]
        # the same signature spelled otherwise (upper-case hex, a second v1) is the same signature
        at, mac = good["X-Grantd-Signature"].split(",v1=")
        for spelling in (f"{at},v1={mac.upper()}", f"{at},v1={'0' * 64},v1={mac}"):
            again = httpx.post(deny["url"], content=body, headers={**good, "X-Grantd-Signature": spelling})
            assert again.status_code == 401 and "replay" in again.json()["detail"], spelling
        later = signed(body, now + 1)
        assert httpx.post(deny["url"], content=body, headers=later).status_code == 410  # used once
    finally:
        srv.stop()
        receiver.stop()
