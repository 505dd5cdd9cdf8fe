"""The notification channel types against doubles that check what the real services check
(tests/support/notify_doubles.py): real SMTP over STARTTLS with AUTH, a Web Push service emulator
that verifies VAPID and decrypts aes128gcm, an ntfy-like server, a signature-checking webhook
receiver; all on 127.0.0.1. Also the ``notification_channel_types`` hook and how
``[[notify.channels]]`` tables are checked, and the SSRF rules for push endpoints.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
from support.notify_doubles import NtfyServer, SmtpSink, WebhookReceiver

from grantd.config import ConfigError
from grantd.hookspecs import ChannelContext, ChannelType, DeliveryResult, Recipient, hookimpl
from grantd.notify import build_channels, channel_types, check_channels
from grantd.notify.message import render
from grantd.plugin_manager import build_plugin_manager

ARGV = ["systemctl", "restart", "nginx", "--secret-token=hunter2"]
GRANT = {
    "id": "4f1c2a9e-0000-4000-8000-000000000001",
    "requester": "deploy-bot@agents.example.com",
    "status": "pending",
    "request": {"command": ARGV, "target_host": "web1", "run_as": "root"},
}
LINK = "https://grantd.example.com/r/tok3n"
DENY = "https://grantd.example.com/r/tok3n/deny"
ALICE = Recipient(email="alice@example.com", name="Alice")


def ctx(offset: int = 0) -> ChannelContext:
    return ChannelContext("https://grantd.example.com", lambda: int(time.time()) + offset)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def secret_file(tmp_path: Path, name: str, value: str) -> str:
    path = tmp_path / name
    path.write_text(value)
    path.chmod(0o600)
    return f"file:{path}"


def build(tables: list[dict[str, Any]], tmp_path: Path) -> tuple[Any, ...]:
    return build_channels(build_plugin_manager(None), tables, base_dir=tmp_path)


def local_smtp(port: int, channel_id: str = "mail", **keys: Any) -> dict[str, Any]:
    """An smtp channel's table for the SmtpSink on 127.0.0.1:``port``, with ``keys`` added."""
    return {
        "id": channel_id,
        "type": "smtp",
        "host": "127.0.0.1",
        "port": port,
        "from": "grantd@example.com",
        **keys,
    }


def problems(tables: list[dict[str, Any]], tmp_path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        build(tables, tmp_path)
    return caught.value.problems


def notice(kind: str = "review_requested", channel: Any = None, **kwargs: Any) -> Any:
    options = channel.options if channel is not None else {}
    grant = (
        {**GRANT, "status": "approved", "decided_by": "alice@example.com"} if kind == "resolved" else GRANT
    )
    return render(kind, [grant], link=LINK, options=options, deny_link=DENY, **kwargs)


# -- the hook and the tables ----------------------------------------------------------------------


def test_notification_channel_types_offers_the_builtins_and_a_plugins_own():
    pm = build_plugin_manager(None)

    class ShoutPlugin:
        @hookimpl
        def notification_channel_types(self) -> dict[str, ChannelType]:
            return {"shout": ChannelType(keys=("volume",), build=lambda table, read_secret: table)}

    pm.register(ShoutPlugin(), name="shout")
    types = channel_types(pm)
    assert {"smtp", "webpush", "ntfy", "webhook", "shout"} <= set(types)
    assert types["shout"].keys == ("volume",)


def test_channel_tables_are_checked_with_key_paths_and_did_you_mean(tmp_path):
    found = problems(
        [
            {"id": "mail", "type": "smpt", "host": "x"},
            {"id": "mail2", "type": "smtp", "hots": "smtp.example.com", "from": "g@example.com"},
            {"id": "Bad Id", "type": "ntfy", "url": "https://ntfy.example.com"},
            {
                "id": "chat",
                "type": "webhook",
                "url": "https://chat.example.com/hook",
                "secret": "inline-secret-value",
            },
            {
                "id": "chat",
                "type": "webhook",
                "url": "http://chat.example.com/hook",
                "format": "teams",
                "secret": "env:GRANTD_TEST_NO_SUCH_VARIABLE",
            },
        ],
        tmp_path,
    )
    text = "\n".join(found)
    assert "notify.channels[0].type: no channel type named 'smpt' (did you mean \"smtp\"?)" in text
    assert 'notify.channels[1].hots: not a key of a smtp channel (did you mean "host"?)' in text
    assert "notify.channels[2].id: missing or not an id" in text
    assert (
        "notify.channels[3].secret: a secret must come from file:PATH or env:NAME, never written inline"
        in text
    )
    assert "notify.channels[4].id: 'chat' is used by another channel" in text
    channels, found = check_channels(
        channel_types(build_plugin_manager(None)),
        [
            {
                "id": "chat",
                "type": "webhook",
                "url": "http://chat.example.com/hook",
                "format": "teams",
                "secret": "env:GRANTD_TEST_NO_SUCH_VARIABLE",
                "deny_from_chat": "yes",
            }
        ],
        base_dir=tmp_path,
    )
    text = "\n".join(found)
    assert not channels
    assert "notify.channels[0].url: must be an https URL" in text
    assert "notify.channels[0].format: must be one of generic, slack, matrix" in text
    assert "notify.channels[0].secret: environment variable GRANTD_TEST_NO_SUCH_VARIABLE is not set" in text
    assert "notify.channels[0].deny_from_chat: must be true or false" in text


def test_smtp_tables_refuse_plaintext_off_loopback_and_an_inline_password(tmp_path):
    found = "\n".join(
        problems(
            [
                {
                    "id": "a",
                    "type": "smtp",
                    "host": "smtp.example.com",
                    "from": "grantd@example.com",
                    "starttls": False,
                },
                {
                    "id": "b",
                    "type": "smtp",
                    "host": "smtp.example.com",
                    "from": "grantd@example.com",
                    "username": "u",
                    "password": "hunter2",
                },
                {
                    "id": "c",
                    "type": "smtp",
                    "host": "smtp.example.com",
                    "from": "not an address",
                    "tls": True,
                    "starttls": True,
                },
            ],
            tmp_path,
        )
    )
    assert "notify.channels[0].starttls: a mail server other than a loopback one needs" in found
    assert "notify.channels[1].password: a secret must come from file:PATH or env:NAME" in found
    assert "notify.channels[2].from: must be an e-mail address" in found
    assert "notify.channels[2].tls: starttls and tls exclude each other" in found
    assert "hunter2" not in found
    # a relay on the same machine may go without TLS
    (channel,) = build(
        [
            {
                "id": "local",
                "type": "smtp",
                "host": "127.0.0.1",
                "port": 25,
                "starttls": False,
                "from": "grantd@example.com",
            }
        ],
        tmp_path,
    )
    assert (channel.starttls, channel.tls, channel.port) == (False, False, 25)


# -- smtp ---------------------------------------------------------------------------------------


def test_smtp_sends_real_mail_over_starttls_with_auth_and_threads_a_grant(tmp_path):
    sink = SmtpSink(tmp_path, tls=True, user=("grantd", "s3cret-pass")).start()
    try:
        (channel,) = build(
            [
                local_smtp(
                    sink.port,
                    ca_file=str(sink.ca_file),
                    username="grantd",
                    password=secret_file(tmp_path, "smtp-password", "s3cret-pass"),
                    reply_to="ops@example.com",
                )
            ],
            tmp_path,
        )
        assert "s3cret-pass" not in repr(channel) and "s3cret-pass" not in json.dumps(channel.public_info())
        assert run(channel.send(ctx(), notice(channel=channel), ALICE)) == DeliveryResult.sent()
        assert run(channel.send(ctx(), notice("resolved", channel=channel), ALICE)) == DeliveryResult.sent()
    finally:
        sink.stop()
    first, second = sink.messages
    assert first.tls and first.authenticated_as == "grantd"
    assert first.recipients == ["alice@example.com"] and first.sender == "grantd@example.com"
    mail = first.message
    assert mail["Subject"] == "[grantd] Approval wanted: systemctl on web1"
    assert mail["Reply-To"] == "ops@example.com" and mail["Auto-Submitted"] == "auto-generated"
    body = mail.get_content()
    assert LINK in body and "deploy-bot@agents.example.com" in body and "Run as: root" in body
    assert "hunter2" not in body and "restart" not in body  # no full command without include_command
    assert DENY not in body  # mail is no chat: no deny link
    assert second.message["In-Reply-To"] == mail["Message-ID"] == second.message["References"]
    assert GRANT["id"] in mail["Message-ID"]


def test_smtp_wrong_password_is_a_failure_not_worth_retrying(tmp_path):
    sink = SmtpSink(tmp_path, tls=True, user=("grantd", "right")).start()
    try:
        (channel,) = build(
            [
                local_smtp(
                    sink.port,
                    ca_file=str(sink.ca_file),
                    username="grantd",
                    password=secret_file(tmp_path, "pw", "wrong-password"),
                )
            ],
            tmp_path,
        )
        result = run(channel.send(ctx(), notice(channel=channel), ALICE))
    finally:
        sink.stop()
    assert result.status == "failed" and not result.retryable and "535" in (result.error or "")
    assert not result.channel_down  # the server answered: it is up, the setting is wrong
    assert "wrong-password" not in (result.error or "") and not sink.messages


def test_smtp_refuses_a_server_whose_certificate_it_cannot_verify(tmp_path):
    sink = SmtpSink(tmp_path, tls=True).start()
    try:
        (channel,) = build(
            [local_smtp(sink.port)],
            tmp_path,
        )  # no ca_file: the system's CAs
        result = run(channel.send(ctx(), notice(channel=channel), ALICE))
    finally:
        sink.stop()
    assert result.status == "failed" and result.retryable and not sink.messages
    assert result.channel_down  # no session can start: every notice would fail alike


def test_smtp_sink_down_is_retryable_and_the_mail_goes_once_it_is_back(tmp_path):
    sink = SmtpSink()
    (channel,) = build(
        [local_smtp(sink.port, starttls=False)],
        tmp_path,
    )
    down = run(channel.send(ctx(), notice(channel=channel), ALICE))
    assert down.status == "failed" and down.retryable and down.channel_down  # the worker rests the channel
    sink.start()
    try:
        assert run(channel.send(ctx(), notice(channel=channel), ALICE)).status == "sent"
    finally:
        sink.stop()
    assert len(sink.messages) == 1 and not sink.messages[0].tls


def test_smtp_builds_no_mail_while_its_server_is_down_and_still_refuses_a_bad_address(tmp_path):
    """Issue 27: building the mail costs about 1 ms of CPU; a server that is down is found before
    it, so the retries of every notice while it is down cost a refused connection only."""
    sink = SmtpSink()
    (channel,) = build(
        [local_smtp(sink.port, starttls=False)],
        tmp_path,
    )
    built: list[str] = []
    make = channel.message
    channel.message = lambda c, n, r: built.append(r.email) or make(c, n, r)
    down = run(channel.send(ctx(), notice(channel=channel), ALICE))
    assert down.status == "failed" and down.retryable and built == []
    sink.start()
    try:
        bad = run(
            channel.send(ctx(), notice(channel=channel), Recipient(email="eve@example.com\nBcc: x@y.z"))
        )
        assert bad.status == "failed" and not bad.retryable and "cannot address the mail" in (bad.error or "")
        assert run(channel.send(ctx(), notice(channel=channel), ALICE)).status == "sent"
    finally:
        sink.stop()
    assert len(built) == 2 and len(sink.messages) == 1


def test_smtp_to_a_loopback_relay_uses_starttls_when_offered_and_plain_otherwise(tmp_path):
    """A loopback relay (a local MTA) gets STARTTLS when it offers it, plain mail otherwise; any other
    host needs it (or implicit TLS); an explicit setting wins."""
    from grantd.plugins.notify_smtp import make_channel

    def channel(host: str, **extra: object) -> object:
        table = {"id": "mail", "type": "smtp", "host": host, "from": "grantd@example.com", **extra}
        return make_channel(table, lambda ref: "")

    assert channel("127.0.0.1").starttls is None  # type: ignore[attr-defined]
    assert channel("mail.example.com").starttls is True  # type: ignore[attr-defined]
    assert channel("127.0.0.1", starttls=True).starttls is True  # type: ignore[attr-defined]
    assert channel("127.0.0.1", starttls=False).starttls is False  # type: ignore[attr-defined]
    assert channel("127.0.0.1", tls=True).starttls is False  # type: ignore[attr-defined]
    plain = SmtpSink(tmp_path).start()  # a relay that offers no STARTTLS: the mail goes plain
    try:
        (mail,) = build(
            [
                {
                    "id": "mail",
                    "type": "smtp",
                    "host": "127.0.0.1",
                    "port": plain.port,
                    "from": "grantd@example.com",
                }
            ],
            tmp_path,
        )
        assert run(mail.send(ctx(), notice(channel=mail), ALICE)) == DeliveryResult.sent()
    finally:
        plain.stop()
    assert len(plain.messages) == 1 and not plain.messages[0].tls


# -- ntfy ---------------------------------------------------------------------------------------


@pytest.fixture
def ntfy():
    server = NtfyServer(token="tk_abc123").start()
    yield server
    server.stop()


def test_ntfy_publishes_to_the_persons_topic_with_a_deny_that_needs_a_post(tmp_path, ntfy):
    (channel,) = build(
        [
            {
                "id": "phone",
                "type": "ntfy",
                "url": ntfy.origin,
                "deny_from_chat": True,
                "token": secret_file(tmp_path, "ntfy-token", "tk_abc123"),
            }
        ],
        tmp_path,
    )
    person = Recipient(email="alice@example.com", topic="alice-grantd-7f3a")
    assert run(channel.send(ctx(), notice(channel=channel), person)) == DeliveryResult.sent()
    (published,) = ntfy.published
    assert published["topic"] == "alice-grantd-7f3a" and published["markdown"] is False
    assert published["click"] == LINK and published["priority"] == 4
    assert published["actions"] == [
        {"action": "view", "label": "Review", "url": LINK, "clear": False},
        {"action": "http", "label": "Deny", "url": DENY, "method": "POST", "clear": True},
    ]
    assert "hunter2" not in json.dumps(published)


def test_ntfy_without_a_topic_or_with_a_wrong_token_fails_for_good(tmp_path, ntfy):
    (channel,) = build(
        [
            {
                "id": "phone",
                "type": "ntfy",
                "url": ntfy.origin,
                "token": secret_file(tmp_path, "t", "tk_wrong"),
            }
        ],
        tmp_path,
    )
    assert (
        run(channel.send(ctx(), notice(channel=channel), ALICE)).error
        == "no usable ntfy topic for this person"
    )
    result = run(channel.send(ctx(), notice(channel=channel), Recipient("a@example.com", topic="alice")))
    assert result.status == "failed" and not result.retryable and "401" in (result.error or "")
    assert not result.channel_down
    assert "tk_wrong" not in repr(channel) and not ntfy.published


# -- webhook ------------------------------------------------------------------------------------

SECRET = "whsec_0123456789abcdef"


@pytest.fixture
def receiver():
    double = WebhookReceiver(secret=SECRET).start()
    yield double
    double.stop()


def hook(tmp_path: Path, receiver: WebhookReceiver, **extra: Any) -> Any:
    (channel,) = build(
        [
            {
                "id": "chat",
                "type": "webhook",
                "url": f"{receiver.origin}/hook",
                "secret": secret_file(tmp_path, "hook-secret", SECRET),
                **extra,
            }
        ],
        tmp_path,
    )
    return channel


def test_webhook_generic_body_is_signed_and_carries_no_approve_action(tmp_path, receiver):
    channel = hook(tmp_path, receiver, deny_from_chat=True)
    assert run(channel.send(ctx(), notice(channel=channel), ALICE)) == DeliveryResult.sent(), receiver.refused
    body = receiver.received[0]["json"]
    assert body["kind"] == "review_requested" and body["grants"] == [GRANT["id"]] and body["link"] == LINK
    assert body["deny"] == {"url": DENY, "method": "POST"} and body["recipient"] == "alice@example.com"
    assert {"label": "Program", "value": "systemctl"} in body["fields"]
    assert "approve" not in json.dumps({k: v for k, v in body.items() if k != "text"}).lower()
    assert body["text"].startswith("Open the link to review this request. Approving needs your passkey")


def test_webhook_slack_format_escapes_mrkdwn_and_offers_only_review_and_deny(tmp_path, receiver):
    channel = hook(tmp_path, receiver, format="slack", deny_from_chat=True)
    grant = {
        **GRANT,
        "requester": "bot@example.com",
        "request": {**GRANT["request"], "command": ["<!channel>", "x"]},
    }
    sent = render(
        "review_requested",
        [grant],
        link=LINK,
        options=channel.options,
        deny_link=DENY,
        agents={"bot@example.com": "<https://evil.example|click me> & co"},
    )
    assert run(channel.send(ctx(), sent, ALICE)).status == "sent"
    body = receiver.received[0]["json"]
    text = json.dumps(body)
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    assert "<https://evil" not in text and "&lt;https://evil.example|click me&gt; &amp; co" in text
    (actions,) = [b for b in body["blocks"] if b["type"] == "actions"]
    assert [(e["action_id"], e["url"]) for e in actions["elements"]] == [
        ("grantd_review", LINK),
        ("grantd_deny", DENY),
    ]


def test_webhook_matrix_format_escapes_html(tmp_path, receiver):
    channel = hook(tmp_path, receiver, format="matrix")
    grant = {
        **GRANT,
        "request": {**GRANT["request"], "target_host": "web1", "command": ["<img src=x onerror=alert(1)>"]},
    }
    assert (
        run(channel.send(ctx(), render("review_requested", [grant], link=LINK, options={}), ALICE)).status
        == "sent"
    )
    body = receiver.received[0]["json"]
    assert body["msgtype"] == "m.text" and body["format"] == "org.matrix.custom.html"
    assert (
        "<img" not in body["formatted_body"]
        and "&lt;img src=x onerror=alert(1)&gt;" in body["formatted_body"]
    )
    assert f'<a href="{LINK}">Review</a>' in body["formatted_body"] and "Deny" not in body["formatted_body"]


def test_webhook_receiver_refuses_a_wrong_secret_and_failures_say_whether_to_retry(tmp_path, receiver):
    (wrong,) = build(
        [
            {
                "id": "chat",
                "type": "webhook",
                "url": f"{receiver.origin}/hook",
                "secret": secret_file(tmp_path, "other", "another-secret-0123"),
            }
        ],
        tmp_path,
    )
    refused = run(wrong.send(ctx(), notice(), ALICE))
    assert refused.status == "failed" and not refused.retryable and receiver.refused == ["bad signature"]
    stale = run(hook(tmp_path, receiver).send(ctx(offset=-3600), notice(), ALICE))  # a clock an hour behind
    assert stale.status == "failed" and receiver.refused[-1] == "stale"
    assert not refused.channel_down and not stale.channel_down
    receiver.status = 503
    unavailable = run(hook(tmp_path, receiver).send(ctx(), notice(), ALICE))
    assert unavailable.retryable is True and unavailable.channel_down  # one URL: every notice alike
    receiver.status = 400
    bad = run(hook(tmp_path, receiver).send(ctx(), notice(), ALICE))
    assert bad.retryable is False and not bad.channel_down
    assert not receiver.received


def test_an_http_channel_whose_service_refuses_connections_says_it_is_down(tmp_path):
    """Nothing listens: a webhook's or an ntfy server's refused connection fails every notice
    alike, so the result says the channel is down (the delivery worker rests it)."""
    gone = WebhookReceiver(secret=SECRET).start()
    origin = gone.origin
    gone.stop()
    chat = build(
        [
            {
                "id": "chat",
                "type": "webhook",
                "url": f"{origin}/hook",
                "secret": secret_file(tmp_path, "s", SECRET),
            }
        ],
        tmp_path,
    )[0]
    phone = build([{"id": "phone", "type": "ntfy", "url": origin}], tmp_path)[0]
    for result in (
        run(chat.send(ctx(), notice(), ALICE)),
        run(phone.send(ctx(), notice(channel=phone), Recipient("a@example.com", topic="alice"))),
    ):
        assert result.status == "failed" and result.retryable and result.channel_down, result
        assert "unreachable" in (result.error or "")


def test_the_plugin_guides_worked_channel_type_loads_builds_and_sends(tmp_path):
    """docs/plugins.md's example for notification_channel_types, run as written."""
    from conftest import ROOT

    guide = (ROOT / "docs" / "plugins.md").read_text()
    section = guide.split("### `notification_channel_types")[1].split("\n### ")[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("jsonl_channel_example")
    exec(compile(code, "docs/plugins.md", "exec"), module.__dict__)
    pm = build_plugin_manager(None)
    pm.register(module, name="jsonl_channel_example")
    with pytest.raises(ConfigError, match=r"notify.channels\[0\].path: must be absolute"):
        build_channels(pm, [{"id": "audit", "type": "jsonl", "path": "relative.jsonl"}], base_dir=tmp_path)
    (channel,) = build_channels(
        pm, [{"id": "audit", "type": "jsonl", "path": str(tmp_path / "n.jsonl")}], base_dir=tmp_path
    )
    assert run(channel.send(ctx(), notice(channel=channel), ALICE)) == DeliveryResult.sent()
    line = json.loads((tmp_path / "n.jsonl").read_text())
    assert line["to"] == "alice@example.com" and line["link"] == LINK and line["fields"]["Host"] == "web1"


def test_grantd_plugins_lists_the_notification_channel_types():
    result = subprocess.run(
        [sys.executable, "-m", "grantd", "plugins"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    listed = result.stdout.split("notification channel types:\n")[1]
    assert "    smtp: e-mail through an SMTP server" in listed and "    webhook: a signed JSON POST" in listed
    assert "    webpush: " in listed and "    ntfy: " in listed
    assert (
        "grantd.plugins.notify_smtp 0" in result.stdout
        and "hooks: notification_channel_types" in result.stdout
    )


def test_a_webhook_url_may_be_a_secret_and_is_then_never_shown(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("GRANTD_TEST_HOOK_URL", f"{receiver.origin}/services/T0/B0/tok3n-in-url")
    channel = hook(tmp_path, receiver, url="env:GRANTD_TEST_HOOK_URL")
    assert "tok3n-in-url" not in repr(channel) and "tok3n-in-url" not in json.dumps(channel.public_info())
    assert run(channel.send(ctx(), notice(), ALICE)).status == "sent"
    assert receiver.received[0]["path"] == "/services/T0/B0/tok3n-in-url"
