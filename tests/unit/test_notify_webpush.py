"""The webpush channel type against a Web Push service emulator that checks what a real one checks
(tests/support/notify_doubles.py: VAPID verified, aes128gcm decrypted): delivery, Topic, gone
subscriptions, the SSRF rules for push endpoints, the key and subject a table needs, and one
webpush channel at most. (The other channel types: tests/unit/test_notify_channels.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from support.notify_doubles import PushService, SmtpSink

from grantd.hookspecs import DeliveryResult, Recipient
from grantd.notify import EndpointRefused
from grantd.notify.message import render, topic_for
from grantd.plugins.notify_webpush import host_allowed

from unit.test_notify_channels import (
    ALICE,
    GRANT,
    LINK,
    build,
    ctx,
    local_smtp,
    notice,
    problems,
    run,
    secret_file,
)

# -- webpush ------------------------------------------------------------------------------------


def vapid_pem(tmp_path: Path, name: str = "vapid.pem") -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return secret_file(tmp_path, name, pem)


def push_channel(tmp_path: Path, **extra: Any) -> Any:
    table = {
        "id": "push",
        "type": "webpush",
        "vapid_private_key": vapid_pem(tmp_path),
        "subject": "mailto:ops@example.com",
        "allowed_push_hosts": ["127.0.0.1"],
        "allow_private_push_hosts": True,
        **extra,
    }
    (channel,) = build([table], tmp_path)
    return channel


@pytest.fixture
def push_service():
    service = PushService().start()
    yield service
    service.stop()


def test_webpush_message_passes_the_emulators_vapid_and_decryption_checks(tmp_path, push_service):
    channel = push_channel(tmp_path)
    subscription = push_service.subscribe(application_server_key=channel.public_key)
    person = Recipient(email="alice@example.com", subscription=subscription)
    assert run(channel.send(ctx(), notice(channel=channel), person)) == DeliveryResult.sent(), (
        push_service.refusals
    )
    (message,) = push_service.received
    assert message.claims["aud"] == push_service.origin and message.claims["sub"] == "mailto:ops@example.com"
    assert time.time() < message.claims["exp"] <= time.time() + 24 * 3600
    assert message.headers["ttl"] == "1800" and message.headers["urgency"] == "high"
    assert message.headers["topic"] == topic_for(GRANT["id"]) and len(message.headers["topic"]) <= 32
    payload = message.payload
    assert payload["url"] == LINK and payload["title"] == "Approval wanted: systemctl on web1"
    assert "hunter2" not in json.dumps(payload) and "restart" not in payload["body"]


def test_webpush_resolved_replaces_the_pending_notice_by_topic(tmp_path, push_service):
    channel = push_channel(tmp_path)
    person = Recipient(email="alice@example.com", subscription=push_service.subscribe(channel.public_key))
    run(channel.send(ctx(), notice(channel=channel), person))
    run(channel.send(ctx(), notice("resolved", channel=channel), person))
    assert len(push_service.received) == 2
    (latest,) = push_service.pending.values()
    assert latest.payload["kind"] == "resolved" and latest.headers["urgency"] == "normal"


def test_webpush_gone_subscriptions_are_reported_gone(tmp_path, push_service):
    channel = push_channel(tmp_path)
    subscription = push_service.subscribe(channel.public_key)
    push_service.mark_gone(subscription["endpoint"])
    person = Recipient(email="alice@example.com", subscription=subscription)
    result = run(channel.send(ctx(), notice(channel=channel), person))
    assert result.status == "gone" and "410" in (result.error or "")
    unknown = {**subscription, "endpoint": f"{push_service.origin}/push/nobody"}
    assert (
        run(
            channel.send(ctx(), notice(channel=channel), Recipient("a@example.com", subscription=unknown))
        ).status
        == "gone"
    )


def test_webpush_emulator_refuses_another_application_server_key_and_a_far_exp(tmp_path, push_service):
    channel = push_channel(tmp_path)
    other = push_channel(tmp_path)
    person = Recipient(email="alice@example.com", subscription=push_service.subscribe(channel.public_key))
    refused = run(other.send(ctx(), notice(channel=other), person))
    assert refused.status == "failed" and not refused.retryable and "403" in (refused.error or "")
    far = run(
        channel.send(ctx(offset=2 * 86400), notice(channel=channel), person)
    )  # grantd's clock two days ahead
    assert far.status == "failed" and "401" in (far.error or "")
    assert [status for status, _ in push_service.refusals] == [403, 401] and not push_service.received


def test_webpush_bad_subscription_keys_fail_without_a_request(tmp_path, push_service):
    channel = push_channel(tmp_path)
    subscription = push_service.subscribe(channel.public_key)
    broken = {**subscription, "keys": {"p256dh": "bm90IGEga2V5", "auth": subscription["keys"]["auth"]}}
    result = run(
        channel.send(ctx(), notice(channel=channel), Recipient("a@example.com", subscription=broken))
    )
    assert result.status == "failed" and not result.retryable
    assert not push_service.received and not push_service.refusals


@pytest.mark.parametrize(
    ("endpoint", "allowed", "reason"),
    [
        ("http://fcm.googleapis.com/fcm/send/x", ["fcm.googleapis.com"], "must be https"),
        ("https://evil.example.com/push", ["fcm.googleapis.com"], "not an allowed push service"),
        (
            "https://fcm.googleapis.com.evil.example.com/x",
            ["fcm.googleapis.com"],
            "not an allowed push service",
        ),
        ("https://push.apple.com.evil.example/x", ["*.push.apple.com"], "not an allowed push service"),
        ("https://127.0.0.1/push", ["127.0.0.1"], "non-public address"),
        ("https://169.254.169.254/latest/meta-data", ["169.254.169.254"], "non-public address"),
        ("https://10.1.2.3/push", ["10.1.2.3"], "non-public address"),
        ("https://[::1]/push", ["fcm.googleapis.com"], "not an allowed push service"),
        ("https://localhost/push", ["localhost"], "non-public address"),
        ("https://user@fcm.googleapis.com/x", ["fcm.googleapis.com"], "without user information"),
        ("javascript:alert(1)", ["fcm.googleapis.com"], "must be https"),
        ("https://fcm.googleapis.com:99999/x", ["fcm.googleapis.com"], "must be a URL"),
        ("https://fcm.googleapis.com/a b", ["fcm.googleapis.com"], "must be a URL"),
        (None, ["fcm.googleapis.com"], "must be a URL"),
    ],
)
def test_push_endpoints_are_refused_by_the_ssrf_rules(tmp_path, endpoint, allowed, reason):
    channel = push_channel(tmp_path, allowed_push_hosts=allowed, allow_private_push_hosts=False)
    with pytest.raises(EndpointRefused, match=reason):
        run(channel.check_endpoint(endpoint))


def test_a_refused_endpoint_is_never_contacted_and_http_loopback_needs_the_test_flag(tmp_path, push_service):
    strict = push_channel(tmp_path, allow_private_push_hosts=False)
    subscription = push_service.subscribe(strict.public_key)
    result = run(
        strict.send(ctx(), notice(channel=strict), Recipient("a@example.com", subscription=subscription))
    )
    assert result.status == "failed" and not result.retryable and "must be https" in (result.error or "")
    https_loopback = {**subscription, "endpoint": subscription["endpoint"].replace("http://", "https://")}
    result = run(
        strict.send(ctx(), notice(channel=strict), Recipient("a@example.com", subscription=https_loopback))
    )
    assert result.status == "failed" and "non-public address" in (result.error or "")
    assert not push_service.received and not push_service.refusals


def test_allowed_push_hosts_wildcards_match_only_names_below_them():
    assert host_allowed("api.push.apple.com", ["*.push.apple.com"])
    assert not host_allowed("push.apple.com", ["*.push.apple.com"])
    assert not host_allowed("evilpush.apple.com", ["*.push.apple.com"])
    assert host_allowed("FCM.googleapis.com.", ["fcm.googleapis.com"])


def test_webpush_tables_need_a_p256_key_from_a_file_and_a_contact_subject(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    p384 = (
        ec.generate_private_key(ec.SECP384R1())
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode()
    )
    found = "\n".join(
        problems(
            [
                {"id": "a", "type": "webpush", "vapid_private_key": "inline", "subject": "ops@example.com"},
                {
                    "id": "b",
                    "type": "webpush",
                    "vapid_private_key": secret_file(tmp_path, "p384", p384),
                    "subject": "https://x.example",
                },
                {
                    "id": "c",
                    "type": "webpush",
                    "vapid_private_key": secret_file(tmp_path, "junk", "not a key"),
                    "subject": "mailto:ops@example.com",
                    "allowed_push_hosts": ["https://fcm.googleapis.com/"],
                },
            ],
            tmp_path,
        )
    )
    assert "notify.channels[0].vapid_private_key: a secret must come from file:PATH or env:NAME" in found
    assert "notify.channels[0].subject: must be a mailto: or https: URI" in found
    assert "notify.channels[1].vapid_private_key: VAPID needs a P-256 (prime256v1) key" in found
    assert "notify.channels[2].vapid_private_key: not a P-256 private key" in found
    assert "notify.channels[2].allowed_push_hosts: 'https://fcm.googleapis.com/' is not a host name" in found
    assert "notify.channels[1].type: a second webpush channel" in found  # and after its own problems
    raw = secret_file(tmp_path, "raw", "3Uqw5dIk1rw3vSAq9eFWQXn6-FO1WjHe_tfSuAYzsQA")  # a base64url raw key
    (channel,) = build(
        [{"id": "p", "type": "webpush", "vapid_private_key": raw, "subject": "mailto:a@example.com"}],
        tmp_path,
    )
    assert len(channel.public_info()["publicKey"]) == 87 and channel.allow_private_push_hosts is False


def test_the_push_emulator_refuses_a_body_encrypted_to_other_keys(tmp_path, push_service):
    """The emulator really decrypts: keys of another subscription give a body it cannot open."""
    channel = push_channel(tmp_path)
    mine, other = push_service.subscribe(channel.public_key), push_service.subscribe(channel.public_key)
    crossed = {**mine, "keys": other["keys"]}
    result = run(
        channel.send(ctx(), notice(channel=channel), Recipient("a@example.com", subscription=crossed))
    )
    assert result.status == "failed" and not result.retryable and "400" in (result.error or "")
    assert push_service.refusals == [(400, "cannot decrypt: ECEException")] and not push_service.received


def test_a_digest_goes_through_push_without_a_topic_and_by_mail_outside_the_grant_threads(
    tmp_path, push_service
):
    grants = [{**GRANT, "id": f"g{i}"} for i in range(3)]
    digest = render("digest", grants, link="https://grantd.example.com/grants", options={})
    channel = push_channel(tmp_path)
    person = Recipient(email="alice@example.com", subscription=push_service.subscribe(channel.public_key))
    assert run(channel.send(ctx(), digest, person)).status == "sent", push_service.refusals
    (message,) = push_service.received
    assert "topic" not in message.headers and message.payload["title"] == "3 requests wait for your decision"
    sink = SmtpSink().start()
    try:
        (mail,) = build(
            [local_smtp(sink.port, "m", starttls=False)],
            tmp_path,
        )
        assert run(mail.send(ctx(), digest, ALICE)).status == "sent"
    finally:
        sink.stop()
    received = sink.messages[0].message
    assert received["In-Reply-To"] is None and "grantd-digest" in received["Message-ID"]


def test_a_second_webpush_channel_is_refused(tmp_path):
    """Browsers subscribe with the one key GET /api/push/vapid publishes: a second webpush channel
    (another key) could never deliver, so config validate and serve refuse it."""
    tables = [
        {
            "id": f"push{i}",
            "type": "webpush",
            "vapid_private_key": vapid_pem(tmp_path, f"vapid{i}.pem"),
            "subject": "mailto:ops@example.com",
            "allowed_push_hosts": ["fcm.googleapis.com"],
        }
        for i in range(2)
    ]
    found = problems(tables, tmp_path)
    assert found == [
        "notify.channels[1].type: a second webpush channel (browsers subscribe with one VAPID key)"
    ]
