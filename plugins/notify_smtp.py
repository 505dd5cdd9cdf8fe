"""The notification channel type "smtp": a notice as a plain-text e-mail (aiosmtplib).

Transport: ``starttls = true`` (the default: port 587, STARTTLS required, not merely tried) or
``tls = true`` (implicit TLS, port 465); the server's certificate is checked against the system's
CAs or ``ca_file``. Neither is allowed only for a loopback host (a relay on the same machine):
otherwise the password and the notices would cross the network in clear. For a loopback host the
default is STARTTLS when the server offers it, plain otherwise (a local MTA often offers none). ``password`` comes only
from ``file:PATH`` or ``env:NAME`` and is never logged or shown.

The mail is built with ``email.message.EmailMessage`` (its headers refuse CR/LF: no header
injection; the notice's values are already escaped). One thread per grant and person: the first
notice's ``Message-ID`` is derived from the grant and the recipient, later ones answer it
(``In-Reply-To``, ``References``); the same notice sent again (a retry) has the same Message-ID,
so a mailbox can drop the duplicate.
"""

from __future__ import annotations

import hashlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from pathlib import Path
from typing import Any

from grantd.hookspecs import ChannelContext, ChannelType, DeliveryResult, Notice, Recipient, hookimpl
from grantd.notify import TableReader
from grantd.notify.message import plain_text
from grantd.plugins.federation_oidc import is_loopback_host

TYPE = "smtp"
KEYS = (
    "host",
    "port",
    "starttls",
    "tls",
    "username",
    "password",
    "from",
    "reply_to",
    "ca_file",
    "timeout",
    "include_command",
)
SECRETS = ("password",)


def _address_ok(value: str) -> bool:
    local, at, domain = value.rpartition("@")
    return bool(at and local and domain and ("." in domain.strip(".") or domain == "localhost")) and all(
        c.isprintable() and c not in ' <>,;"' for c in value
    )


@dataclass
class SmtpChannel:
    id: str
    host: str
    port: int
    starttls: bool | None  # None: STARTTLS when the (loopback) server offers it
    tls: bool
    sender: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    reply_to: str | None = None
    ca_file: str | None = None
    timeout: int = 10
    options: dict[str, Any] = field(default_factory=dict)
    type: str = TYPE

    def public_info(self) -> dict[str, Any]:
        return {"id": self.id, "type": TYPE}

    @property
    def domain(self) -> str:
        return self.sender.rpartition("@")[2]

    def message(self, ctx: ChannelContext, notice: Notice, recipient: Recipient) -> EmailMessage:
        """The e-mail of ``notice`` for ``recipient`` (module docstring)."""
        mail = EmailMessage()
        mail["From"] = self.sender
        mail["To"] = recipient.email
        if self.reply_to:
            mail["Reply-To"] = self.reply_to
        mail["Subject"] = f"[grantd] {notice.title}"
        mail["Date"] = formatdate(ctx.now(), usegmt=True)
        mail["Auto-Submitted"] = "auto-generated"
        if notice.kind == "digest" or len(notice.grant_ids) != 1:
            mail["Message-ID"] = make_msgid("grantd-digest", self.domain)
        else:
            person = hashlib.sha256(recipient.email.lower().encode()).hexdigest()[:16]
            root = f"<grantd.{notice.grant_ids[0]}.{person}@{self.domain}>"
            if notice.kind == "review_requested":
                mail["Message-ID"] = root
            else:
                which = hashlib.sha256(f"{notice.kind}\x00{notice.title}".encode()).hexdigest()[:12]
                mail["Message-ID"] = f"<grantd.{notice.grant_ids[0]}.{person}.{which}@{self.domain}>"
                mail["In-Reply-To"] = root
                mail["References"] = root
        mail.set_content(plain_text(notice) + "\n")
        return mail

    def _tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)

    async def send(self, ctx: ChannelContext, notice: Notice, recipient: Recipient) -> DeliveryResult:
        import aiosmtplib

        client = aiosmtplib.SMTP(
            hostname=self.host,
            port=self.port,
            username=self.username,
            password=self.password,
            use_tls=self.tls,
            start_tls=self.starttls,
            tls_context=self._tls_context() if (self.tls or self.starttls is not False) else None,
            timeout=self.timeout,
        )
        try:
            # Connected (TLS, login) first, the mail built after: building it costs about 1 ms of
            # CPU (the email package's headers), which a server that is down would otherwise
            # cost on every retry of every notice (issue 27; docs/performance.md).
            async with client:
                try:
                    mail = self.message(ctx, notice, recipient)
                except ValueError as exc:  # an address the mail headers refuse
                    return DeliveryResult.failed(f"cannot address the mail: {exc}", retryable=False)
                await client.send_message(mail)
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = sorted({r.code for r in exc.recipients})
            return DeliveryResult.failed(
                f"the mail server refused the recipient ({codes})",
                retryable=all(400 <= c < 500 for c in codes),
            )
        except aiosmtplib.SMTPResponseException as exc:
            return DeliveryResult.failed(
                f"the mail server answered {exc.code} ({type(exc).__name__})", retryable=400 <= exc.code < 500
            )
        except (aiosmtplib.SMTPException, OSError, ssl.SSLError) as exc:
            # the connection, TLS or the session failed: every notice would fail alike now
            return DeliveryResult.down(f"cannot reach the mail server ({type(exc).__name__})")
        return DeliveryResult.sent()


def make_channel(table: dict[str, Any], read_secret: Callable[[str], str]) -> SmtpChannel:
    read = TableReader(table)
    host = read.string("host", required=True) or ""
    # STARTTLS required by default; to a loopback relay only if it offers it (None: a local MTA often
    # does not, and nothing crosses the network there). An explicit setting wins either way.
    no_tls = "tls" not in table or table.get("tls") is False
    starttls: bool | None = read.boolean("starttls", no_tls)
    if "starttls" not in table and no_tls and host and is_loopback_host(host):
        starttls = None
    tls = read.boolean("tls", False)
    if starttls and tls:
        read.problems.append(
            "tls: starttls and tls exclude each other (tls = true is implicit TLS, port 465)"
        )
    if host and not (starttls or tls) and not is_loopback_host(host):
        read.problems.append(
            "starttls: a mail server other than a loopback one needs starttls = true or tls = true"
        )
    port = read.integer("port", 465 if tls else 587, 1, 65535)
    sender = read.string("from", required=True)
    if sender and not _address_ok(sender):
        read.problems.append("from: must be an e-mail address")
    reply_to = read.string("reply_to")
    if reply_to and not _address_ok(reply_to):
        read.problems.append("reply_to: must be an e-mail address")
    username = read.string("username")
    password = read.secret("password", read_secret, required=username is not None)
    if password is not None and username is None:
        read.problems.append("username: missing (a password is given)")
    ca_file = read.string("ca_file")
    if ca_file and not (Path(ca_file).is_absolute() and Path(ca_file).is_file()):
        read.problems.append("ca_file: must be the absolute path of a PEM file of CA certificates")
    timeout = read.integer("timeout", 10, 1, 120)
    include_command = read.boolean("include_command", False)
    read.done()
    return SmtpChannel(
        id=table["id"],
        host=host,
        port=port,
        starttls=starttls,
        tls=tls,
        sender=sender or "",
        username=username,
        password=password,
        reply_to=reply_to,
        ca_file=ca_file,
        timeout=timeout,
        options={"include_command": include_command},
    )


CHANNEL_TYPE = ChannelType(
    keys=KEYS,
    build=make_channel,
    secrets=SECRETS,
    description="e-mail through an SMTP server (STARTTLS or TLS)",
)


@hookimpl
def notification_channel_types() -> dict[str, ChannelType]:
    return {TYPE: CHANNEL_TYPE}


__all__ = ["SmtpChannel", "make_channel"]
