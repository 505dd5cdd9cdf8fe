"""Execution receipts (D14): a target host's signed account of one attempt, a JWS (EdDSA) with
``typ: grantd-receipt+jwt``, built and checked with pyjwt.

Claims: ``iss`` ``host:<name>``, ``aud`` the issuer URL, ``iat``, ``grant_id``, ``authz_jti``, ``cmd_hash``,
``run_as``, ``result`` (exited | signaled | refused), ``exit_code`` (the status for exited, the signal
number for signaled, elevate's own status for refused), ``started_at``/``ended_at`` (Unix seconds),
``duration_ms``, ``seen_checkpoint`` ``{size, root}`` (the last checkpoint the host saw, base64 root)
and, optionally, ``reason`` (why refused) and ``audit_line_sha256``. Numbers are integers.

The host key is an Ed25519 key whose public half is enrolled as an OpenSSH ``ssh-ed25519`` line
(grantd.sshkeys reads it). A receipt authenticates itself: the server finds the host by ``iss``
(unknown → ``UnknownHost``, 403) and checks the signature with its enrolled key (bad → ``BadReceipt``,
401). ``receipt_key`` is what makes a repeat add nothing: ``(grant_id, authz_jti, result, digest
of every claim)``: the same receipt sent twice (a spool flushed after a post that did arrive) is one
leaf, while every attempt is its own receipt (each run of a timed or always grant, each refusal:
their times differ).
``iat`` is not held against the server's clock: a spooled receipt arrives late by design.

It sits outside grantd.core so that the target hosts' `grantd elevate` may import it (lazily, only when it
sends a receipt: tests/unit/test_layers.py); grantd.core.tlog.receipts names it for the log's code.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from grantd.sshkeys import KeyFormatError, parse_public_key

RECEIPT_TYP = "grantd-receipt+jwt"
RESULTS = ("exited", "signaled", "refused")
HOST_PREFIX = "host:"
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_MAX_RECEIPT = 16 * 1024
_INT_CLAIMS = ("iat", "started_at", "ended_at", "duration_ms")
_STR_CLAIMS = ("grant_id", "authz_jti", "cmd_hash", "run_as")


class BadReceipt(ValueError):
    """Not a receipt, a bad signature or bad claims (HTTP 401 for a signature, 400 for the shape)."""


class UnknownHost(BadReceipt):
    """The receipt names a host that is not enrolled (HTTP 403)."""


@dataclass(frozen=True)
class Receipt:
    token: str
    host: str
    claims: dict[str, Any]

    @property
    def key(self) -> tuple[str, str, str, str]:
        return receipt_key(self.claims)

    @property
    def result(self) -> str:
        return str(self.claims["result"])


def receipt_key(claims: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """What makes two receipts the same one (a repeat adds no leaf): all their claims alike."""
    digest = hashlib.sha256(
        json.dumps(dict(claims), sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return (str(claims["grant_id"]), str(claims["authz_jti"]), str(claims["result"]), digest)


def host_public_key_line(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The OpenSSH ``ssh-ed25519`` line an administrator enrols (``grantd elevate --init-host`` prints it)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def check_host_name(host: str) -> str:
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise BadReceipt("a host name is letters, digits, '.', '_' and '-' (at most 253)")
    return host


def _check_claims(claims: Mapping[str, Any]) -> None:
    for name in _STR_CLAIMS:
        if not isinstance(claims.get(name), str):
            raise BadReceipt(f"receipt claim {name} must be a string")
    for name in _INT_CLAIMS:
        value = claims.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadReceipt(f"receipt claim {name} must be a non-negative integer")
    result = claims.get("result")
    if result not in RESULTS:
        raise BadReceipt(f"receipt claim result must be one of {', '.join(RESULTS)}")
    if not claims["grant_id"] or (result != "refused" and not claims["authz_jti"]):
        raise BadReceipt("a receipt names its grant and, unless refused, the AuthZ-JWT's jti")
    code = claims.get("exit_code")
    if result == "exited" and (isinstance(code, bool) or not isinstance(code, int)):
        raise BadReceipt("an exited receipt carries its integer exit_code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        raise BadReceipt("exit_code must be an integer")
    if claims["ended_at"] < claims["started_at"]:
        raise BadReceipt("a receipt ends after it starts")
    seen = claims.get("seen_checkpoint")
    if seen is not None:
        if not isinstance(seen, Mapping) or set(seen) != {"size", "root"}:
            raise BadReceipt("seen_checkpoint is {size, root}")
        if isinstance(seen["size"], bool) or not isinstance(seen["size"], int) or seen["size"] < 0:
            raise BadReceipt("seen_checkpoint.size must be a non-negative integer")
        try:
            root = base64.b64decode(seen["root"], validate=True) if isinstance(seen["root"], str) else b""
        except ValueError:
            root = b""
        if len(root) != 32:
            raise BadReceipt("seen_checkpoint.root must be a base64 32-byte hash")
    if "reason" in claims and not isinstance(claims["reason"], str):
        raise BadReceipt("reason must be a string")


def build_receipt(
    key: Ed25519PrivateKey,
    *,
    host: str,
    audience: str,
    grant_id: str,
    authz_jti: str,
    cmd_hash: str,
    run_as: str,
    result: str,
    exit_code: int | None,
    started_at: int,
    ended_at: int,
    duration_ms: int,
    issued_at: int,
    seen_checkpoint: Mapping[str, Any] | None = None,
    reason: str | None = None,
    audit_line_sha256: str | None = None,
) -> str:
    claims: dict[str, Any] = {
        "iss": HOST_PREFIX + check_host_name(host),
        "aud": audience,
        "iat": issued_at,
        "grant_id": grant_id,
        "authz_jti": authz_jti,
        "cmd_hash": cmd_hash,
        "run_as": run_as,
        "result": result,
        "exit_code": exit_code,
        "started_at": started_at,
        "ended_at": ended_at,
        "duration_ms": duration_ms,
    }
    if seen_checkpoint is not None:
        claims["seen_checkpoint"] = dict(seen_checkpoint)
    if reason is not None:
        claims["reason"] = reason
    if audit_line_sha256 is not None:
        claims["audit_line_sha256"] = audit_line_sha256
    _check_claims(claims)
    return jwt.encode(claims, key, algorithm="EdDSA", headers={"typ": RECEIPT_TYP})


def receipt_host(token: str) -> str:
    """The host a receipt claims to come from (unverified: only to find its enrolled key)."""
    if not isinstance(token, str) or len(token) > _MAX_RECEIPT:
        raise BadReceipt("a receipt is a compact JWS of at most 16 KiB")
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise BadReceipt("not a JWS") from None
    if header.get("typ") != RECEIPT_TYP or header.get("alg") != "EdDSA":
        raise BadReceipt(f"a receipt is an EdDSA JWS with typ {RECEIPT_TYP}")
    iss = claims.get("iss")
    if not isinstance(iss, str) or not iss.startswith(HOST_PREFIX):
        raise BadReceipt("a receipt's iss is host:<name>")
    return check_host_name(iss.removeprefix(HOST_PREFIX))


def verify_receipt(token: str, audience: str | None, host_key: Callable[[str], str | None]) -> Receipt:
    """Check a receipt (for ``audience``, the issuer URL; None: any, as an offline verifier that does not
    know the URL): ``host_key(host)`` gives the enrolled ``ssh-ed25519`` line of a host (None when
    not enrolled → ``UnknownHost``); a signature that does not verify → ``BadReceipt``."""
    host = receipt_host(token)
    line = host_key(host)
    if line is None:
        raise UnknownHost(f"host {host} is not enrolled")
    try:
        public, _, _ = parse_public_key(line)
    except KeyFormatError:
        raise UnknownHost(f"host {host} has no usable enrolled key") from None
    try:
        claims = jwt.decode(
            token,
            public,
            algorithms=["EdDSA"],
            audience=audience,
            options={
                "require": ["iss", "aud", "iat"],
                "verify_iat": False,
                "verify_exp": True,
                "verify_aud": audience is not None,
            },
        )
    except jwt.InvalidAudienceError:
        raise BadReceipt("the receipt is for another issuer") from None
    except jwt.PyJWTError:
        raise BadReceipt("the receipt's signature does not verify") from None
    _check_claims(claims)
    return Receipt(token, host, claims)
