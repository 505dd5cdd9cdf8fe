"""The notification channel type "webhook": a notice POSTed as JSON to one URL (a chat room's
incoming webhook, or any receiver), signed.

Every body is signed (grantd.notify.signature): ``X-Grantd-Signature: t=<ts>,v1=<hex
HMAC-SHA256(secret, ts + "." + body)>``, so a receiver can tell grantd's messages from anyone
else's and refuse a replay outside the window; ``secret`` comes only from ``file:``/``env:``, and
``url`` may too (an incoming-webhook URL of Slack or Matrix bridges embeds its token); neither is
ever shown or put in an error.

``format``:

- ``generic``: ``{kind, grants, title, fields: [{label, value}], text, link, deny, recipient}``;
- ``slack``: Block Kit (``text`` and ``blocks``); values escaped for mrkdwn (``& < >``, so an
  agent's name cannot make a link or a mention); a "Review" link button;
- ``matrix``: the content of an ``m.room.message`` (``body`` and HTML ``formatted_body``, every
  value HTML-escaped).

Chat never approves: no format carries an approve action. With ``deny_from_chat = true`` a
pending notice carries the single-use deny link (``deny: {url, method: "POST"}``; a "Deny" button
or link): opening it changes nothing, only a POST denies.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from grantd.hookspecs import ChannelContext, ChannelType, DeliveryResult, Notice, Recipient, hookimpl
from grantd.notify import TableReader
from grantd.notify.message import plain_text
from grantd.notify.signature import HEADER, sign
from grantd.plugins.federation_oidc import transport_ok

TYPE = "webhook"
FORMATS = ("generic", "slack", "matrix")
KEYS = ("url", "secret", "format", "include_command", "deny_from_chat", "timeout")
SECRETS = ("secret",)


def slack_escape(text: str) -> str:
    """Slack's own rule for text in mrkdwn: ``&``, ``<`` and ``>`` as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def generic_body(notice: Notice, recipient: Recipient) -> dict[str, Any]:
    return {
        "kind": notice.kind,
        "grants": list(notice.grant_ids),
        "title": notice.title,
        "fields": [{"label": label, "value": value} for label, value in notice.fields],
        "text": notice.text,
        "link": notice.link,
        "deny": {"url": notice.deny_link, "method": "POST"} if notice.deny_link else None,
        "recipient": recipient.email,
    }


def slack_body(notice: Notice, recipient: Recipient) -> dict[str, Any]:
    lines = "\n".join(f"*{label}:* {slack_escape(value)}" for label, value in notice.fields)
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{slack_escape(notice.title)}*"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": lines}},
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": slack_escape(f"{notice.text} (for {recipient.email})")}],
        },
    ]
    buttons: list[dict[str, Any]] = []
    if notice.link:
        buttons.append(
            {
                "type": "button",
                "action_id": "grantd_review",
                "url": notice.link,
                "text": {"type": "plain_text", "text": "Review"},
            }
        )
    if notice.deny_link:
        buttons.append(
            {
                "type": "button",
                "action_id": "grantd_deny",
                "url": notice.deny_link,
                "style": "danger",
                "text": {"type": "plain_text", "text": "Deny"},
            }
        )
    if buttons:
        blocks.append({"type": "actions", "elements": buttons})
    return {"text": slack_escape(notice.title), "blocks": blocks}


def matrix_body(notice: Notice, recipient: Recipient) -> dict[str, Any]:
    escape = html.escape
    rows = "".join(
        f"<li><b>{escape(label)}:</b> <code>{escape(value)}</code></li>" for label, value in notice.fields
    )
    links = ""
    if notice.link:
        links += f'<p><a href="{escape(notice.link)}">Review</a></p>'
    if notice.deny_link:
        links += f'<p><a href="{escape(notice.deny_link)}">Deny</a> (a POST denies; opening it changes nothing)</p>'
    formatted = (
        f"<p><b>{escape(notice.title)}</b></p><ul>{rows}</ul>"
        f"<p>{escape(notice.text)} (for {escape(recipient.email)})</p>{links}"
    )
    return {
        "msgtype": "m.text",
        "body": plain_text(notice),
        "format": "org.matrix.custom.html",
        "formatted_body": formatted,
    }


BODIES = {"generic": generic_body, "slack": slack_body, "matrix": matrix_body}


@dataclass
class WebhookChannel:
    id: str
    url: str = field(repr=False)  # Slack's and others' incoming webhook URLs are credentials
    secret: str = field(repr=False)
    format: str = "generic"
    timeout: int = 10
    options: dict[str, Any] = field(default_factory=dict)
    type: str = TYPE

    def public_info(self) -> dict[str, Any]:
        return {"id": self.id, "type": TYPE, "format": self.format}

    def body(self, notice: Notice, recipient: Recipient) -> bytes:
        return json.dumps(
            BODIES[self.format](notice, recipient), ensure_ascii=False, separators=(",", ":")
        ).encode()

    async def send(self, ctx: ChannelContext, notice: Notice, recipient: Recipient) -> DeliveryResult:
        body = self.body(notice, recipient)
        signature = sign(self.secret, body, ctx.now())
        if ctx.spend_signature is not None:  # this very message, posted back, is no deny callback
            await ctx.spend_signature(signature)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "grantd (notify)",
            HEADER: signature,
        }
        try:
            async with httpx.AsyncClient(
                timeout=self.timeout, follow_redirects=False, trust_env=False
            ) as http:
                response = await http.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return DeliveryResult.down(f"webhook unreachable ({type(exc).__name__})")
        if 200 <= response.status_code < 300:
            return DeliveryResult.sent()
        error = f"webhook answered {response.status_code}"
        if response.status_code in (408, 429) or response.status_code >= 500:
            return DeliveryResult.down(error)  # one URL for every notice: it would answer them all alike
        return DeliveryResult.failed(error, retryable=False)


def make_channel(table: dict[str, Any], read_secret: Callable[[str], str]) -> WebhookChannel:
    read = TableReader(table)
    url = read.string("url", required=True)
    if url and url.startswith(("file:", "env:")):  # a chat webhook URL that embeds its token is a secret
        url = read.secret("url", read_secret)
    if url and (not transport_ok(url) or "@" in urlsplit(url).netloc):
        read.problems.append("url: must be an https URL (http only on a loopback host)")
    secret = read.secret("secret", read_secret)
    if secret is not None and len(secret) < 16:
        read.problems.append("secret: at least 16 characters")
    body_format = read.choice("format", "generic", FORMATS)
    timeout = read.integer("timeout", 10, 1, 60)
    options = {
        "include_command": read.boolean("include_command", False),
        "deny_from_chat": read.boolean("deny_from_chat", False),
    }
    read.done()
    assert url is not None and secret is not None
    return WebhookChannel(
        id=table["id"], url=url, secret=secret, format=body_format, timeout=timeout, options=options
    )


CHANNEL_TYPE = ChannelType(
    keys=KEYS,
    build=make_channel,
    secrets=SECRETS,
    description="a signed JSON POST (generic, Slack or Matrix format)",
)


@hookimpl
def notification_channel_types() -> dict[str, ChannelType]:
    return {TYPE: CHANNEL_TYPE}


__all__ = ["WebhookChannel", "make_channel", "slack_escape"]
