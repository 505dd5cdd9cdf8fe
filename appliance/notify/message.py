"""What a notice says: one pure function, ``render``, for every channel (D15, beyond.md §3).

A notice names the agent, the target host, the run-as user and the program (the first argument of
the command; for a permissions grant the first permission and how many more). The whole command
(or every permission) is in it only when the channel says ``include_command = true``: mail relays,
public ntfy topics and chat rooms are third parties, and a command line can carry paths, hosts or
secrets. Every value is written with the one escaping rule (grantd.core.display), so a newline, an
ESC sequence or a bidi override in an agent's name or argv cannot rewrite what an approver reads;
channels escape for their own markup on top (Slack mrkdwn, Matrix HTML) and never render Markdown.

A notice never approves: it carries the review link, which opens the review page, where approving
needs the intended person's passkey with user verification over the grant's digest. With the
channel's ``deny_from_chat = true``, a pending notice also carries a single-use deny link that
works only with a POST (deny is the fail-safe direction; a GET never changes anything, because mail
scanners and chat unfurlers open links).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from grantd.core.display import escape_text, summarize_argv
from grantd.hookspecs import Notice

KINDS = ("review_requested", "escalated", "resolved", "digest")
PENDING_KINDS = ("review_requested", "escalated")
MAX_VALUE = 200  # characters of one escaped value (agent, host, program)
MAX_COMMAND = 1000  # characters of the escaped whole command, when a channel carries it
MAX_DIGEST_LINES = 10
TOPIC_LENGTH = 32  # RFC 8030 §5.4: a Topic is at most 32 base64url characters

REVIEW_TEXT = (
    "Open the link to review this request. Approving needs your passkey; the link alone approves nothing."
)
RESOLVED_TEXT = "This request has been decided; nothing is left to do."
DIGEST_TEXT = (
    "More requests wait for your decision than this channel sends one by one. Open the link to review them."
)


def topic_for(grant_id: str) -> str:
    """The Web Push ``Topic`` of every notice of one grant, so a ``resolved`` notice replaces a
    pending one still undelivered: 32 base64url characters of a hash of the grant id (the push
    service sees the Topic in clear; it learns nothing from it)."""
    digest = hashlib.sha256(b"grantd notice topic\x00" + grant_id.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()[:TOPIC_LENGTH]


def _clip(escaped: str, limit: int) -> str:
    if len(escaped) <= limit:
        return escaped
    cut = escaped[:limit]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut) + " …"


def _value(value: Any, limit: int = MAX_VALUE) -> str:
    return _clip(escape_text(str(value)), limit)


def _flag(options: Mapping[str, Any], key: str) -> bool:
    value = options.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false")
    return value


def _link(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname or not value.isprintable() or " " in value:
        raise ValueError(f"{name} must be an http(s) URL")
    return value


def _what(request: Mapping[str, Any], include_command: bool) -> tuple[str, str | None]:
    """(the program or first permission, the whole command or permission list when carried)."""
    command = request.get("command")
    if command:
        whole = _clip(summarize_argv(command), MAX_COMMAND) if include_command else None
        return _clip(summarize_argv(command[:1]), MAX_VALUE), whole
    permissions = list(request.get("permissions") or [])
    if not permissions:
        return "(nothing)", None
    first = _value(permissions[0])
    more = f" (+{len(permissions) - 1} more)" if len(permissions) > 1 else ""
    whole = _clip(", ".join(escape_text(p) for p in permissions), MAX_COMMAND) if include_command else None
    return first + more, whole


def _summary(
    grant: Mapping[str, Any], agent: str | None, include_command: bool
) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    request = grant.get("request") or {}
    program, whole = _what(request, include_command)
    host = _value(request.get("target_host", "?"))
    fields: list[tuple[str, str]] = [
        ("Agent", _value(agent if agent else grant.get("requester", "?"))),
        ("Host", host),
        ("Run as", _value(request.get("run_as") or "root")),
        ("Program" if request.get("command") else "Permission", program),
    ]
    if whole is not None:
        fields.append(("Command" if request.get("command") else "Permissions", whole))
    return program, host, tuple(fields)


def render(
    kind: str,
    grants: Sequence[Mapping[str, Any]],
    *,
    link: str | None,
    options: Mapping[str, Any],
    agents: Mapping[str, str] | None = None,
    deny_link: str | None = None,
    level: int | None = None,
) -> Notice:
    """The notice of ``kind`` about ``grants`` (exactly one, except for a ``digest``) for a channel
    with ``options`` (``include_command``, ``deny_from_chat``; module docstring).

    ``link``: the review link (or, for a digest, the page listing what waits); ``agents``: display
    names by requester e-mail; ``deny_link``: the single-use POST-only deny link, carried only on a
    pending notice of a channel with ``deny_from_chat = true``; ``level``: the escalation level."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    if not grants or (kind != "digest" and len(grants) != 1):
        raise ValueError("a notice is about one grant (a digest: one or more)")
    include_command = _flag(options, "include_command")
    deny_from_chat = _flag(options, "deny_from_chat")
    link = _link(link, "link")
    deny_link = _link(deny_link, "deny_link")
    names = agents or {}
    ids = tuple(str(g["id"]) for g in grants)

    if kind == "digest":
        lines = []
        for grant in grants[:MAX_DIGEST_LINES]:
            program, host, _ = _summary(grant, names.get(str(grant.get("requester"))), False)
            agent = _value(names.get(str(grant.get("requester"))) or grant.get("requester", "?"))
            lines.append(("Waiting", f"{agent}: {program} on {host}"))
        if len(grants) > MAX_DIGEST_LINES:
            lines.append(("Waiting", f"and {len(grants) - MAX_DIGEST_LINES} more"))
        count = len(grants)
        title = (
            f"{count} request{'s' if count != 1 else ''} wait{'s' if count == 1 else ''} for your decision"
        )
        return Notice(kind, ids, None, title, tuple(lines), DIGEST_TEXT, link, None, "high")

    grant = grants[0]
    program, host, fields = _summary(grant, names.get(str(grant.get("requester"))), include_command)
    topic = topic_for(ids[0])
    if kind == "resolved":
        status = _value(grant.get("status", "decided"))
        decided = [("Decision", status)]
        if grant.get("decided_by"):
            decided.append(("Decided by", _value(grant["decided_by"])))
        title = f"Decided ({status}): {program} on {host}"
        return Notice(kind, ids, topic, title, (*fields, *decided), RESOLVED_TEXT, link, None, "normal")
    if kind == "escalated":
        title = f"Still waiting{f' (level {int(level)})' if level is not None else ''}: {program} on {host}"
    else:
        title = f"Approval wanted: {program} on {host}"
    carried_deny = deny_link if deny_from_chat else None
    return Notice(kind, ids, topic, title, fields, REVIEW_TEXT, link, carried_deny, "high")


def plain_text(notice: Notice) -> str:
    """The notice as plain text lines (mail bodies, ntfy messages): already escaped, no markup."""
    lines = [notice.title, ""]
    lines += [f"{label}: {value}" for label, value in notice.fields]
    lines += ["", notice.text]
    if notice.link:
        lines += ["", f"Review: {notice.link}"]
    if notice.deny_link:
        lines += [f"Deny (a POST; opening it changes nothing): {notice.deny_link}"]
    return "\n".join(lines)


__all__ = ["KINDS", "plain_text", "render", "topic_for"]
