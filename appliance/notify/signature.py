"""The webhook signature (D15): ``X-Grantd-Signature: t=<ts>,v1=<hex HMAC-SHA256(secret, ts + "." + body)>``.

``sign`` makes the header for what grantd sends; ``verify`` checks one on a callback (a chat
system posting back, e.g. a deny from chat, when those routes exist): the HMAC over the exact body
bytes and the timestamp, compared in constant time; a timestamp outside the window (default 300 s
either way) is refused, so a captured request cannot be replayed later; within the window, the
caller's ``first_use`` decides (the store keeps the signatures seen, so that a replay is refused
across processes). Several ``v1=`` values are accepted (a sender rotating its secret signs with
both). ``SignatureError.reason`` is safe to show: it never holds a secret or the expected value.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

HEADER = "X-Grantd-Signature"
WINDOW_S = 300
MAX_HEADER = 1024


class SignatureError(Exception):
    """The signature does not hold (an HTTP route answers 401 with ``reason``)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _mac(secret: str | bytes, timestamp: int, body: bytes) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, body: bytes, timestamp: int) -> str:
    """The header value for ``body`` sent at ``timestamp`` (seconds since the epoch)."""
    if not secret:
        raise ValueError("an empty secret signs nothing")
    return f"t={int(timestamp)},v1={_mac(secret, int(timestamp), body)}"


def verify(
    secret: str | bytes,
    header: str | None,
    body: bytes,
    *,
    now: int,
    window: int = WINDOW_S,
    first_use: Callable[[str, int], bool] | None = None,
) -> int:
    """The timestamp of a valid signature of ``body``, or SignatureError (module docstring).

    ``first_use(signature, timestamp)`` returns False when that signature was seen before (a
    replay); it is asked only once the signature is known to be good."""
    if not secret:
        raise ValueError("an empty secret verifies nothing")
    if not header or len(header) > MAX_HEADER or not header.isascii():
        raise SignatureError("missing or malformed signature")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError("missing or malformed signature")
        if name == "t":
            if timestamp is not None or not value.isdigit() or len(value) > 12:
                raise SignatureError("missing or malformed signature")
            timestamp = int(value)
        elif name == "v1":
            candidates.append(value.lower())
    if timestamp is None or not candidates:
        raise SignatureError("missing or malformed signature")
    expected = _mac(secret, timestamp, body)
    matched = next((c for c in candidates if hmac.compare_digest(c.encode(), expected.encode())), None)
    if matched is None:
        raise SignatureError("bad signature")
    if abs(now - timestamp) > window:
        raise SignatureError("timestamp outside the accepted window (a replay or a wrong clock)")
    if first_use is not None and not first_use(matched, timestamp):
        raise SignatureError("signature already used (a replay)")
    return timestamp


__all__ = ["HEADER", "WINDOW_S", "SignatureError", "sign", "verify"]
