"""The notification channel type "ntfy": a notice published to the person's own ntfy topic
(https://docs.ntfy.sh/publish/, "publish as JSON").

Each person names their topic (``Recipient.topic``; on ``/account`` once that is wired): topics on
a public server are readable by anyone who knows the name, so the message carries only the summary
(the command only with ``include_command = true``) and never anything that approves. It is sent
as JSON (no header encoding of untrusted text) with ``markdown`` off; the actions are a ``view`` of
the review link and, with ``deny_from_chat = true``, an ``http`` POST to the single-use deny link.
``token`` (an ntfy access token, ``Authorization: Bearer``) comes only from ``file:``/``env:``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from grantd.hookspecs import ChannelContext, ChannelType, DeliveryResult, Notice, Recipient, hookimpl
from grantd.notify import TableReader
from grantd.plugins.federation_oidc import transport_ok

TYPE = "ntfy"
KEYS = ("url", "token", "priority", "include_command", "deny_from_chat", "timeout")
SECRETS = ("token",)
TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")  # ntfy's own topic rule
PRIORITY_RESOLVED = 2


@dataclass
class NtfyChannel:
    id: str
    url: str
    token: str | None = field(default=None, repr=False)
    priority: int = 4
    timeout: int = 10
    options: dict[str, Any] = field(default_factory=dict)
    type: str = TYPE

    def public_info(self) -> dict[str, Any]:
        return {"id": self.id, "type": TYPE, "url": self.url}

    def body(self, notice: Notice, topic: str) -> dict[str, Any]:
        message = "\n".join([*(f"{label}: {value}" for label, value in notice.fields), "", notice.text])
        data: dict[str, Any] = {
            "topic": topic,
            "title": notice.title,
            "message": message,
            "markdown": False,
            "priority": self.priority if notice.urgency == "high" else PRIORITY_RESOLVED,
            "tags": ["lock"] if notice.kind != "resolved" else ["white_check_mark"],
        }
        actions: list[dict[str, Any]] = []
        if notice.link:
            data["click"] = notice.link
            actions.append({"action": "view", "label": "Review", "url": notice.link, "clear": False})
        if notice.deny_link:
            actions.append(
                {"action": "http", "label": "Deny", "url": notice.deny_link, "method": "POST", "clear": True}
            )
        if actions:
            data["actions"] = actions
        return data

    async def send(self, ctx: ChannelContext, notice: Notice, recipient: Recipient) -> DeliveryResult:
        topic = recipient.topic
        if not topic or not TOPIC.match(topic):
            return DeliveryResult.failed("no usable ntfy topic for this person", retryable=False)
        headers = {"User-Agent": "grantd (notify)"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            async with httpx.AsyncClient(
                timeout=self.timeout, follow_redirects=False, trust_env=False
            ) as http:
                response = await http.post(self.url, json=self.body(notice, topic), headers=headers)
        except httpx.HTTPError as exc:
            return DeliveryResult.down(f"ntfy server unreachable ({type(exc).__name__})")
        if response.status_code == 200:
            return DeliveryResult.sent()
        error = f"ntfy server answered {response.status_code}"
        if response.status_code == 429 or response.status_code >= 500:
            return DeliveryResult.down(error)  # one server for every topic: it would answer them all alike
        return DeliveryResult.failed(error, retryable=False)


def make_channel(table: dict[str, Any], read_secret: Callable[[str], str]) -> NtfyChannel:
    read = TableReader(table)
    url = read.string("url", required=True)
    if url:
        parts = urlsplit(url)
        if not transport_ok(url) or parts.query or parts.fragment or "@" in parts.netloc:
            read.problems.append("url: must be the server's https URL (http only on a loopback host)")
    token = read.secret("token", read_secret, required=False)
    priority = read.integer("priority", 4, 1, 5)
    timeout = read.integer("timeout", 10, 1, 60)
    options = {
        "include_command": read.boolean("include_command", False),
        "deny_from_chat": read.boolean("deny_from_chat", False),
    }
    read.done()
    assert url is not None
    return NtfyChannel(
        id=table["id"],
        url=url.rstrip("/") + "/",
        token=token,
        priority=priority,
        timeout=timeout,
        options=options,
    )


CHANNEL_TYPE = ChannelType(
    keys=KEYS, build=make_channel, secrets=SECRETS, description="a message to each person's own ntfy topic"
)


@hookimpl
def notification_channel_types() -> dict[str, ChannelType]:
    return {TYPE: CHANNEL_TYPE}


__all__ = ["NtfyChannel", "make_channel"]
