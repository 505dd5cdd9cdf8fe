"""Web Push end to end (D15, issue 24): a person subscribes through the API (as the /account page
does), a grant's notices reach the push service emulator, which verifies the VAPID JWT and
decrypts the aes128gcm payload with the subscription's keys; ``resolved`` has the pending notice's
Topic; 404/410 removes the subscription; endpoints are checked against SSRF (https, allowed hosts,
public addresses) before anything is stored."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from people_support import enrol_agent, fresh, request_grant, signed_in_person
from support.notify_doubles import PushService

from grantd.notify.message import topic_for

from server.test_notify_outbox import rows_of, wait_for

CONFIG = """
[notify]
poll_ms = 50
vapid_private_key = "file:vapid.pem"
vapid_subject = "mailto:ops@example.com"
allowed_push_hosts = {hosts}
allow_private_push_hosts = {private}

[[notify.channels]]
id = "push"
type = "webpush"
"""


def _server(directory: Any, hosts: str, private: bool) -> Any:
    from inproc import InProcessServer

    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (directory / "vapid.pem").write_bytes(key)
    (directory / "vapid.pem").chmod(0o600)
    extra = CONFIG.format(hosts=hosts, private="true" if private else "false")
    return InProcessServer(directory, extra=extra).start()


@pytest.fixture
def push() -> Iterator[PushService]:
    service = PushService().start()
    yield service
    service.stop()


@pytest.fixture
def srv(tmp_path) -> Iterator[Any]:
    server = _server(tmp_path / "srv", '["127.0.0.1"]', True)
    try:
        yield server
    finally:
        server.stop()


def subscribe(srv: Any, push: PushService, browser: Any) -> dict[str, Any]:
    key = browser.get("/api/push/vapid").json()["publicKey"]
    sub = push.subscribe(application_server_key=key)
    r = browser.post("/api/push/subscriptions", json=sub, headers={"Origin": srv.url})
    assert r.status_code == 201, r.text
    return r.json()


def test_a_subscribed_approver_gets_an_encrypted_notice_and_resolved_replaces_it(srv, push):
    owner, browser = signed_in_person(srv, fresh("owner"))
    subscribe(srv, push, browser)
    listed = browser.get("/api/push/subscriptions").json()["data"]
    assert len(listed) == 1
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token, command=["systemctl", "restart", "nginx", "--secret=x"])
    (first,) = wait_for(lambda: push.received)
    assert first.payload["kind"] == "review_requested" and first.payload["url"].startswith(f"{srv.url}/r/")
    assert "secret" not in first.payload["body"] and "Program: systemctl" in first.payload["body"]
    assert first.headers["topic"] == topic_for(grant["id"]) and first.headers["urgency"] == "high"
    assert first.claims["sub"] == "mailto:ops@example.com"
    r = browser.post(f"/api/grants/{grant['id']}/approve", json={}, headers={"Origin": srv.url})
    assert r.status_code == 200, r.text
    wait_for(lambda: len(push.received) == 2)
    resolved = push.received[1]
    assert resolved.payload["kind"] == "resolved" and resolved.headers["topic"] == first.headers["topic"]
    assert (
        push.pending[(resolved.subscription, first.headers["topic"])] is resolved
    )  # replaces the pending one


def test_a_gone_subscription_is_removed(srv, push):
    owner, browser = signed_in_person(srv, fresh("owner"))
    sub = subscribe(srv, push, browser)
    push.mark_gone(sub["endpoint"])
    _, token = enrol_agent(srv, owner=owner["email"])
    grant = request_grant(srv, token)
    wait_for(lambda: browser.get("/api/push/subscriptions").json()["data"] == [])
    (row,) = [r for r in rows_of(srv, grant["id"]) if r["recipient"] == owner["email"]]
    wait_for(lambda: rows_of(srv, grant["id"])[0]["status"] == "failed")
    assert (410, "subscription expired") in push.refusals
    assert row["channel"] == "push"


def test_unsubscribe_is_the_persons_own(srv, push):
    _, browser = signed_in_person(srv, fresh("a"))
    _, other = signed_in_person(srv, fresh("b"))
    sub = subscribe(srv, push, browser)
    headers = {"Origin": srv.url}
    assert other.delete(f"/api/push/subscriptions/{sub['id']}", headers=headers).status_code == 404
    assert browser.delete(f"/api/push/subscriptions/{sub['id']}", headers=headers).status_code == 200
    assert browser.delete(f"/api/push/subscriptions/{sub['id']}", headers=headers).status_code == 404


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("http://push.example.com/x", "https"),
        ("https://evil.example.com/x", "allowed_push_hosts"),
        ("https://localhost/x", "non-public address"),  # allowed by name, but resolves to loopback
        ("https://127.0.0.1/x", "non-public address"),
        ("https://user@localhost/x", "user information"),
        ("javascript:alert(1)", "https"),
    ],
)
def test_push_endpoints_are_checked_against_ssrf(tmp_path, push, endpoint, why):
    server = _server(tmp_path / "strict", '["localhost", "127.0.0.1", "push.example.com"]', False)
    try:
        _, browser = signed_in_person(server, fresh("p"))
        sub = push.subscribe()
        sub["endpoint"] = endpoint
        r = browser.post("/api/push/subscriptions", json=sub, headers={"Origin": server.url})
        assert r.status_code == 400, r.text
        assert r.json()["field"] == "endpoint" and why in r.json()["detail"]
        assert browser.get("/api/push/subscriptions").json()["data"] == []
    finally:
        server.stop()


def test_a_host_name_dns_cannot_hold_is_400_not_500(tmp_path, push):
    """A 300-character label matches ``*.push.example.com`` but no resolver takes it (IDNA refuses
    labels over 63): 400 naming the endpoint, never a 500 with a traceback in the log."""
    server = _server(tmp_path / "long", '["*.push.example.com"]', False)
    try:
        _, browser = signed_in_person(server, fresh("p"))
        sub = push.subscribe()
        sub["endpoint"] = f"https://{'a' * 300}.push.example.com/x"
        r = browser.post("/api/push/subscriptions", json=sub, headers={"Origin": server.url})
        assert r.status_code == 400 and r.json()["field"] == "endpoint", r.text
        assert "Traceback" not in server.log() and "unhandled error" not in server.log()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "keys",
    [{"p256dh": "AAAA", "auth": "AAAAAAAAAAAAAAAAAAAAAA"}, {"p256dh": None, "auth": "x"}, "nope"],
)
def test_bad_subscription_keys_are_400(srv, push, keys):
    _, browser = signed_in_person(srv, fresh("p"))
    sub = push.subscribe()
    sub["keys"] = keys
    r = browser.post("/api/push/subscriptions", json=sub, headers={"Origin": srv.url})
    assert r.status_code == 400 and r.json()["field"] == "keys"


def test_without_a_webpush_channel_vapid_is_404(tmp_path):
    from inproc import InProcessServer

    server = InProcessServer(tmp_path / "plain").start()
    try:
        with server.client() as http:
            assert http.get("/api/push/vapid").status_code == 404
    finally:
        server.stop()


def test_the_service_worker_is_served_from_the_root(srv):
    with srv.client() as http:
        r = http.get("/sw.js")
    assert r.status_code == 200 and "javascript" in r.headers["content-type"]
    assert "notificationclick" in r.text and "self.location.origin" in r.text
