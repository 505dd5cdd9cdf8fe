"""Test doubles for the notification channels that check what the real services check (test support).

All of them listen on 127.0.0.1 on a free port and speak real protocols to grantd's real clients:

- ``SmtpSink``: an aiosmtpd SMTP server (real SMTP; aiosmtplib on grantd's side). Optional
  STARTTLS with a self-signed certificate made here (``tls=True``: STARTTLS is then required before
  anything else, as a submission server does) and AUTH with one user (refused before TLS). It keeps
  every message parsed; ``stop()``/``start()`` make it go down and come back on the same port.
- ``PushService``: a Web Push service emulator (RFC 8030/8291/8292). ``subscribe()`` plays the
  browser: a P-256 key pair and a 16-byte auth secret, like ``PushManager.subscribe``, and returns
  the subscription JSON. A POST to an endpoint must carry ``Authorization: vapid t=<JWT>, k=<key>``
  whose JWT is ES256, verified against ``k`` with PyJWT, with ``aud`` = this service's origin,
  ``exp`` in the future and at most 24 h ahead, ``sub`` a ``mailto:`` or ``https:`` URI, and ``k``
  the application server key the subscription was made with; a ``TTL`` header; ``Urgency`` and
  ``Topic`` (≤ 32 base64url characters) well formed when present; ``Content-Encoding: aes128gcm``;
  a body that decrypts (http_ece) with the subscription's private key and auth secret. Answers 201,
  401/403 for VAPID problems, 400 for the rest, 404 for an unknown subscription and 410 for one
  marked ``gone``. A later message with the same Topic replaces an undelivered one (``pending``).
- ``NtfyServer``: what ntfy's JSON publishing checks (topic name, priority 1–5, at most 3 actions
  of the known kinds, the bearer token when one is set).
- ``WebhookReceiver``: checks ``X-Grantd-Signature`` with its own HMAC code (not grantd's) and a
  5-minute window; answers 401 otherwise, or ``status`` when set (to play a failing receiver).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import ipaddress
import json
import re
import secrets
import ssl
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import http_ece
import jwt
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.ports import free_port


def _free_port() -> int:
    return free_port()  # outside the ephemeral range (tests/support/ports.py)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def self_signed_certificate(directory: Path, name: str = "localhost") -> tuple[Path, Path]:
    """(certificate PEM, key PEM) for ``name`` and 127.0.0.1: the CA file a client trusts, too."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


# -- SMTP -------------------------------------------------------------------------------------------


@dataclass
class ReceivedMail:
    sender: str
    recipients: list[str]
    message: EmailMessage
    tls: bool
    authenticated_as: str | None


class SmtpSink:
    def __init__(
        self, directory: Path | None = None, *, tls: bool = False, user: tuple[str, str] | None = None
    ):
        self.port = _free_port()
        self.messages: list[ReceivedMail] = []
        self.user = user
        self.ca_file: Path | None = None
        kwargs: dict[str, Any] = {}
        if tls:
            assert directory is not None
            cert, key = self_signed_certificate(directory)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
            kwargs.update(tls_context=context, require_starttls=True)
            self.ca_file = cert
        if user is not None:
            kwargs.update(authenticator=self._authenticate, auth_required=True, auth_require_tls=tls)
        self._kwargs = kwargs
        self._controller: Controller | None = None

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert self.user is not None
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == self.user[0]
            and hmac.compare_digest(auth_data.password, self.user[1].encode())
        )
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        message = message_from_bytes(envelope.original_content or envelope.content, policy=policy.default)
        assert isinstance(message, EmailMessage)
        auth = getattr(session, "auth_data", None)
        login = auth.login.decode() if isinstance(auth, LoginPassword) else None
        self.messages.append(
            ReceivedMail(
                envelope.mail_from,
                list(envelope.rcpt_tos),
                message,
                session.ssl is not None,
                login if session.authenticated else None,
            )
        )
        return "250 OK"

    def start(self) -> SmtpSink:
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port, **self._kwargs)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None


# -- HTTP doubles -----------------------------------------------------------------------------------


class _HttpDouble:
    """A threaded HTTP server on 127.0.0.1 whose POSTs go to ``handle(path, headers, body)``."""

    def __init__(self) -> None:
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                status, answer = double.handle(
                    self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.lock = threading.Lock()

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        raise NotImplementedError

    def start(self) -> Any:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Subscription:
    id: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes
    application_server_key: str | None
    gone: bool = False


@dataclass
class PushMessage:
    subscription: str
    headers: dict[str, str]
    claims: dict[str, Any]
    payload: dict[str, Any]


_TOPIC = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
URGENCIES = ("very-low", "low", "normal", "high")


class PushService(_HttpDouble):
    def __init__(self) -> None:
        super().__init__()
        self.subscriptions: dict[str, Subscription] = {}
        self.received: list[PushMessage] = []
        self.refusals: list[tuple[int, str]] = []
        self.pending: dict[tuple[str, str], PushMessage] = {}  # (subscription, topic) -> the latest message

    def subscribe(self, application_server_key: str | None = None) -> dict[str, Any]:
        """What ``PushManager.subscribe`` gives a page: the endpoint and the keys (p256dh, auth)."""
        key = ec.generate_private_key(ec.SECP256R1())
        sub = Subscription(secrets.token_urlsafe(12), key, secrets.token_bytes(16), application_server_key)
        self.subscriptions[sub.id] = sub
        public = key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {
            "endpoint": f"{self.origin}/push/{sub.id}",
            "expirationTime": None,
            "keys": {"p256dh": b64url(public), "auth": b64url(sub.auth)},
        }

    def mark_gone(self, endpoint: str) -> None:
        self.subscriptions[endpoint.rsplit("/", 1)[1]].gone = True

    def _refuse(self, status: int, reason: str) -> tuple[int, Any]:
        with self.lock:
            self.refusals.append((status, reason))
        return status, {"error": reason}

    def _vapid(self, header: str, sub: Subscription) -> tuple[int, str] | dict[str, Any]:
        scheme, _, params = header.partition(" ")
        if scheme.lower() != "vapid":
            return 401, "Authorization is not vapid"
        values = {}
        for part in params.split(","):
            name, _, value = part.strip().partition("=")
            values[name] = value
        if "t" not in values or "k" not in values:
            return 401, "vapid needs t= and k="
        try:
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64url_decode(values["k"]))
        except ValueError:
            return 401, "k is not a P-256 public key"
        if sub.application_server_key is not None and values["k"] != sub.application_server_key:
            return 403, "k is not the application server key of the subscription"
        try:
            if jwt.get_unverified_header(values["t"]).get("alg") != "ES256":
                return 401, "the JWT is not ES256"
            claims = jwt.decode(
                values["t"],
                public,
                algorithms=["ES256"],
                audience=self.origin,
                options={"require": ["aud", "exp", "sub"]},
            )
        except jwt.InvalidTokenError as exc:
            return 401, f"bad VAPID JWT: {type(exc).__name__}"
        if claims["exp"] > time.time() + 24 * 3600:
            return 401, "exp more than 24 hours ahead"
        sub_claim = claims["sub"]
        if not (
            isinstance(sub_claim, str) and (sub_claim.startswith("mailto:") or sub_claim.startswith("https:"))
        ):
            return 401, "sub is not a mailto: or https: URI"
        return dict(claims)

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        match = re.fullmatch(r"/push/([A-Za-z0-9_-]+)", path)
        sub = self.subscriptions.get(match.group(1)) if match else None
        if sub is None:
            return self._refuse(404, "no such subscription")
        if sub.gone:
            return self._refuse(410, "subscription expired")
        checked = self._vapid(headers.get("authorization", ""), sub)
        if isinstance(checked, tuple):
            return self._refuse(*checked)
        ttl = headers.get("ttl")
        if ttl is None or not ttl.isdigit():
            return self._refuse(400, "TTL header missing or not a number")
        if "urgency" in headers and headers["urgency"] not in URGENCIES:
            return self._refuse(400, "bad Urgency")
        topic = headers.get("topic")
        if topic is not None and not _TOPIC.match(topic):
            return self._refuse(400, "Topic must be at most 32 base64url characters")
        if headers.get("content-encoding") != "aes128gcm":
            return self._refuse(400, "Content-Encoding must be aes128gcm")
        if len(body) > 4096:
            return self._refuse(413, "payload too large")
        try:
            plain = http_ece.decrypt(
                body, private_key=sub.private_key, auth_secret=sub.auth, version="aes128gcm"
            )
            payload = json.loads(plain)
        except Exception as exc:  # noqa: BLE001 - any failure to decrypt is the sender's
            return self._refuse(400, f"cannot decrypt: {type(exc).__name__}")
        message = PushMessage(sub.id, headers, checked, payload)
        with self.lock:
            self.received.append(message)
            if topic is not None:
                self.pending[(sub.id, topic)] = message
        return 201, {}


@dataclass
class NtfyServer(_HttpDouble):
    token: str | None = None
    published: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"code": 40101, "error": "unauthorized"}
        if path != "/":
            return 400, {"error": "this double takes JSON publishing at /"}
        try:
            data = json.loads(body)
        except ValueError:
            return 400, {"error": "invalid JSON"}
        if not isinstance(data, dict) or not re.fullmatch(r"[-_A-Za-z0-9]{1,64}", str(data.get("topic", ""))):
            return 400, {"error": "invalid topic"}
        if not isinstance(data.get("priority", 3), int) or not 1 <= data.get("priority", 3) <= 5:
            return 400, {"error": "invalid priority"}
        actions = data.get("actions", [])
        if not isinstance(actions, list) or len(actions) > 3:
            return 400, {"error": "too many actions"}
        for action in actions:
            if action.get("action") not in ("view", "http", "broadcast") or not action.get("label"):
                return 400, {"error": "invalid action"}
        if not isinstance(data.get("message", ""), str) or not isinstance(data.get("title", ""), str):
            return 400, {"error": "invalid message"}
        with self.lock:
            self.published.append(data)
        return 200, {"id": secrets.token_hex(6), "event": "message", "topic": data["topic"]}


@dataclass
class WebhookReceiver(_HttpDouble):
    secret: str = ""
    status: int | None = None  # answer this instead (a failing receiver)
    window: int = 300
    received: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def check(self, header: str | None, body: bytes) -> str | None:
        """Why the signature does not hold, or None (its own code, not grantd's)."""
        match = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", header or "")
        if not match:
            return "malformed"
        expected = hmac.new(
            self.secret.encode(), match.group(1).encode() + b"." + body, hashlib.sha256
        ).hexdigest()
        if not hmac.compare_digest(expected, match.group(2)):
            return "bad signature"
        if abs(time.time() - int(match.group(1))) > self.window:
            return "stale"
        return None

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        problem = self.check(headers.get("x-grantd-signature"), body)
        if problem is not None:
            with self.lock:
                self.refused.append(problem)
            return 401, {"error": problem}
        if self.status is not None:
            return self.status, {"error": "told to fail"}
        with self.lock:
            self.received.append({"path": path, "headers": headers, "json": json.loads(body), "body": body})
        return 200, {"ok": True}
