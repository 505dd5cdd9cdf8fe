"""A software WebAuthn authenticator (test support): what a browser with a platform passkey would
post to /api/webauthn/*, made from the server's options JSON.

- ES256 (P-256) keys from ``cryptography``; CBOR from ``cbor2``; attestation ``none``.
- ``create(options, origin)`` answers ``navigator.credentials.create``: authenticatorData with the
  RP id hash, flags UP|UV|AT (plus BE|BS when ``backed_up``), the counter, and the attested
  credential data (AAGUID, credential id, COSE public key); clientDataJSON of type
  ``webauthn.create`` with the challenge and the given origin. Every credential is discoverable
  (resident) and remembers its user handle.
- ``get(options, origin)`` answers ``navigator.credentials.get``: picks a credential named in
  ``allowCredentials`` (or, without any, a resident one for the RP), increments its counter (unless
  ``counter=False``: such authenticators always report 0) and signs authenticatorData ||
  SHA-256(clientDataJSON).
- Knobs for attacks: ``user_verified=False`` leaves the UV flag out, ``rp_id=`` overrides the RP id the authenticator scopes to (the hash it
  signs), ``origin`` is whatever the caller says, ``Credential.sign_count`` can be set back,
  ``user_handle=`` overrides the returned user handle.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

FLAG_UP, FLAG_UV, FLAG_BE, FLAG_BS, FLAG_AT = 0x01, 0x04, 0x08, 0x10, 0x40


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(value: str) -> bytes:
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))


class NotAllowed(Exception):
    """What a browser's NotAllowedError/InvalidStateError would be: the authenticator declines."""


@dataclass
class Credential:
    credential_id: bytes
    private_key: ec.EllipticCurvePrivateKey
    rp_id: str
    user_handle: bytes
    user_name: str
    sign_count: int = 0

    @property
    def id(self) -> str:
        return b64url(self.credential_id)


def _options(options: Any) -> dict[str, Any]:
    parsed = json.loads(options) if isinstance(options, str | bytes) else options
    assert isinstance(parsed, dict)
    return parsed


def _cose_key(private_key: ec.EllipticCurvePrivateKey) -> bytes:
    numbers = private_key.public_key().public_numbers()
    return cbor2.dumps(
        {1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"), -3: numbers.y.to_bytes(32, "big")}
    )


class SoftAuthenticator:
    def __init__(
        self,
        *,
        counter: bool = True,
        backed_up: bool = False,
        aaguid: bytes = bytes(16),
        user_verified: bool = True,
    ):
        self.counter = counter
        self.user_verified = user_verified  # False: assertions carry UP only (no PIN, no biometrics)
        self.backed_up = backed_up
        self.aaguid = aaguid
        self.credentials: list[Credential] = []

    def _flags(self, *, attested: bool) -> int:
        flags = FLAG_UP | (FLAG_UV if self.user_verified else 0)
        if self.backed_up:
            flags |= FLAG_BE | FLAG_BS
        if attested:
            flags |= FLAG_AT
        return flags

    def create(self, options: Any, origin: str, *, rp_id: str | None = None) -> dict[str, Any]:
        opts = _options(options)
        rp = rp_id or opts["rp"]["id"]
        excluded = {e["id"] for e in opts.get("excludeCredentials") or []}
        if any(c.id in excluded and c.rp_id == rp for c in self.credentials):
            raise NotAllowed("a credential on this authenticator is excluded (InvalidStateError)")
        assert any(p["alg"] == -7 for p in opts["pubKeyCredParams"]), "the RP must accept ES256"
        credential = Credential(
            credential_id=os.urandom(32),
            private_key=ec.generate_private_key(ec.SECP256R1()),
            rp_id=rp,
            user_handle=unb64url(opts["user"]["id"]),
            user_name=opts["user"]["name"],
        )
        count = 0  # a new credential's counter starts at 0
        auth_data = (
            hashlib.sha256(rp.encode()).digest()
            + bytes([self._flags(attested=True)])
            + count.to_bytes(4, "big")
            + self.aaguid
            + len(credential.credential_id).to_bytes(2, "big")
            + credential.credential_id
            + _cose_key(credential.private_key)
        )
        client_data = json.dumps(
            {
                "type": "webauthn.create",
                "challenge": opts["challenge"],
                "origin": origin,
                "crossOrigin": False,
            }
        ).encode()
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        self.credentials.append(credential)
        return {
            "id": credential.id,
            "rawId": credential.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "attestationObject": b64url(attestation),
                "transports": ["internal", "hybrid"],
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }

    def find(self, rp_id: str, allowed: list[str]) -> Credential:
        mine = [c for c in self.credentials if c.rp_id == rp_id and (not allowed or c.id in allowed)]
        if not mine:
            raise NotAllowed("no credential for this RP (NotAllowedError)")
        return mine[-1]

    def get(
        self,
        options: Any,
        origin: str,
        *,
        rp_id: str | None = None,
        credential: Credential | None = None,
        user_handle: bytes | None = None,
    ) -> dict[str, Any]:
        opts = _options(options)
        rp = rp_id or opts.get("rpId")
        assert rp, "request options name the RP id"
        chosen = credential or self.find(rp, [c["id"] for c in opts.get("allowCredentials") or []])
        if self.counter:
            chosen.sign_count += 1
        auth_data = (
            hashlib.sha256(rp.encode()).digest()
            + bytes([self._flags(attested=False)])
            + (chosen.sign_count if self.counter else 0).to_bytes(4, "big")
        )
        client_data = json.dumps(
            {"type": "webauthn.get", "challenge": opts["challenge"], "origin": origin, "crossOrigin": False}
        ).encode()
        signature = chosen.private_key.sign(
            auth_data + hashlib.sha256(client_data).digest(), ec.ECDSA(hashes.SHA256())
        )
        return {
            "id": chosen.id,
            "rawId": chosen.id,
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data),
                "authenticatorData": b64url(auth_data),
                "signature": b64url(signature),
                "userHandle": b64url(user_handle if user_handle is not None else chosen.user_handle),
            },
            "clientExtensionResults": {},
            "authenticatorAttachment": "platform",
        }


class PasskeyBrowser:
    """A browser at ``origin`` with a SoftAuthenticator, talking to a grantd at ``base_url`` over
    HTTP: it runs the ceremonies as the pages do (options, authenticator, verify) and keeps the
    session cookie it was given (sent back explicitly, as a browser would on this origin)."""

    def __init__(self, base_url: str, origin: str, authenticator: SoftAuthenticator | None = None):
        import httpx

        self.base_url = base_url
        self.origin = origin
        self.authenticator = authenticator or SoftAuthenticator()
        self.cookies: dict[str, str] = {}  # what this browser holds: the session, the passkey binding
        self._httpx = httpx

    @property
    def cookie(self) -> str | None:
        """The session cookie's value, if any."""
        return self.cookies.get("grantd_session")

    @cookie.setter
    def cookie(self, value: str | None) -> None:
        if value is None:
            self.cookies.pop("grantd_session", None)
        else:
            self.cookies["grantd_session"] = value

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
        cookie: bool = True,
        origin: bool = True,
        **kwargs: Any,
    ) -> Any:
        """``cookie=False``: send no cookie at all (another browser)."""
        sent = {"Origin": self.origin} if origin else {}
        if cookie and self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        sent.update(headers or {})
        response = self._httpx.request(
            method, self.base_url + path, json=json_body, headers=sent, timeout=10, **kwargs
        )
        for set_cookie in response.headers.get_list("set-cookie"):
            name, _, rest = set_cookie.partition("=")
            value = rest.split(";", 1)[0].strip('"')
            if value and "max-age=0" not in set_cookie.lower():
                self.cookies[name.strip()] = value
            else:
                self.cookies.pop(name.strip(), None)
        return response

    def register(self, token: str, **verify_fields: Any) -> Any:
        """register/options then register/verify; the verify response."""
        options = self.request("POST", "/api/webauthn/register/options", json_body={"token": token})
        assert options.status_code == 200, options.text
        response = self.authenticator.create(options.json(), self.origin)
        return self.request(
            "POST",
            "/api/webauthn/register/verify",
            json_body={"token": token, "response": response, **verify_fields},
        )

    def login(self, email: str | None = None) -> Any:
        options = self.request(
            "POST", "/api/webauthn/login/options", json_body={"email": email} if email else {}
        )
        assert options.status_code == 200, options.text
        return self.request(
            "POST",
            "/api/webauthn/login/verify",
            json_body={"response": self.authenticator.get(options.json(), self.origin)},
        )

    def confirm(self, authenticator: SoftAuthenticator | None = None) -> Any:
        """The fresh user-verified assertion adding a passkey needs: add/reauth, the authenticator
        (this browser's unless told), add/options; the add/options answer (creation options)."""
        reauth = self.request("POST", "/api/webauthn/credentials/add/reauth", json_body={})
        assert reauth.status_code == 200, reauth.text
        assertion = (authenticator or self.authenticator).get(reauth.json(), self.origin)
        return self.request(
            "POST", "/api/webauthn/credentials/add/options", json_body={"response": assertion}
        )

    def add_passkey(self, authenticator: SoftAuthenticator | None = None, **fields: Any) -> Any:
        options = self.confirm()
        assert options.status_code == 200, options.text
        response = (authenticator or self.authenticator).create(options.json(), self.origin)
        return self.request(
            "POST", "/api/webauthn/credentials/add/verify", json_body={"response": response, **fields}
        )

    def me(self) -> Any:
        return self.request("GET", "/api/me")


def make_registration(
    server: Any,
    email: str,
    *,
    admin: bool = False,
    purpose: str = "register",
    ttl: int = 86_400,
    rp_id: str | None = None,
) -> str:
    """A registration URL's token, written to the in-process server's store as an administrator's
    `grantd users add` would (the token itself is never stored, only its SHA-256)."""
    import secrets

    services = server.services
    token = secrets.token_urlsafe(32)
    now = services.clock.now_ms()
    record = {
        "id": "reg_" + secrets.token_urlsafe(16),
        "token_hash": hashlib.sha256(token.encode()).hexdigest(),
        "email": email.lower(),
        "admin": admin,
        "purpose": purpose,
        "rp_id": rp_id or str(services.config.webauthn.rp_id),
        "created_by": "admin@example.com",
        "created_at": now,
        "expires_at": now + ttl * 1000,
        "used_at": None,
    }
    server.call(services.store.registrations.create(record))
    return token
