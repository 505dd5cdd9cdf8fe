"""DPoP proofs (RFC 9449, D16): verifying one, the RFC 7638 thumbprint of an agent's Ed25519 key,
the `ath` of an access token and the stateless server nonces. Pure: no storage, no request.

It sits outside grantd.core's package (like grantd.receipts) so that the target hosts'
`grantd elevate` may import it lazily to check the proof that comes with a bound AuthZ-JWT: one
verifier for the server and the hosts. It uses the standard library and `cryptography` only.

Decisions (docs/protocols.md):
- `alg` is ``EdDSA`` or RFC 9864's fully specified ``Ed25519`` (the same signature; oauth4webapi and
  other current clients send the latter for Ed25519 keys, beyond.md §6), and `jwk` an OKP Ed25519
  public key: agents hold enrolled Ed25519 keys
  and a proof counts only when its key is that key, so ES256 (or anything else) could never match
  and is refused up front.
- `htu` is compared with the URL the server itself makes from its configured issuer and the
  route's path (never a Host header), both normalised (RFC 9449 §4.3: scheme and host lower case,
  default port dropped, empty path "/", no query, no fragment; a userinfo part is refused).
- The replay check is the caller's callback ``first_use(key, expires_at) -> bool`` (the store makes
  it hold across processes and nodes); the key is ``<jkt>:<jti>`` so one agent's `jti` never
  collides with another's, and it may be forgotten after ``expires_at`` (iat + max_age + leeway).
- Nonces are stateless: base64url(HMAC-SHA256(secret, "grantd-dpop-nonce:<step>"))[:32] of the time
  step; the current and the previous step are accepted, so every process and node agrees.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

PROOF_TYP = "dpop+jwt"
PROOF_ALG = "EdDSA"  # what grantd's own proofs say
PROOF_ALGS = ("EdDSA", "Ed25519")  # what a proof may say (discovery lists them in this order)
MAX_PROOF_BYTES = 8 * 1024
MAX_JTI = 256
DEFAULT_MAX_AGE = 60  # seconds a proof is accepted after its iat
DEFAULT_LEEWAY = 5  # seconds of clock skew either way
NONCE_STEP = 300  # seconds per nonce time step
# JWK members that only a private (or symmetric) key has: a proof carrying one is refused.
PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_METHOD = re.compile(r"[A-Z]{1,16}")

FirstUse = Callable[[str, int], bool]


class DpopError(Exception):
    """A refused proof. ``error`` is the RFC 9449 code (``invalid_dpop_proof`` or
    ``use_dpop_nonce``), ``reason`` a short readable why (for ``error_description``)."""

    def __init__(self, reason: str, error: str = "invalid_dpop_proof"):
        super().__init__(f"{error}: {reason}")
        self.error = error
        self.reason = reason


@dataclass(frozen=True)
class DpopProof:
    """A verified proof: the key's thumbprint (what `cnf.jkt` binds to) and the claims checked."""

    jkt: str
    jti: str
    iat: int
    htm: str
    htu: str
    x: str  # the Ed25519 public key, base64url


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url without padding (RFC 7515 §2); anything else raises ValueError."""
    if not isinstance(text, str) or not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None
    if b64url(data) != text:  # non-canonical trailing bits
        raise ValueError("not canonical base64url")
    return data


def thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638 SHA-256 thumbprint of an OKP key: its required members {crv, kty, x} in
    lexicographic order, no whitespace."""
    if jwk.get("kty") != "OKP" or not isinstance(jwk.get("crv"), str) or not isinstance(jwk.get("x"), str):
        raise DpopError("jwk must be an OKP key with crv and x")
    canonical = json.dumps(
        {"crv": jwk["crv"], "kty": "OKP", "x": jwk["x"]},
        separators=(",", ":"),
        sort_keys=True,
        ensure_ascii=True,
    )
    return b64url(hashlib.sha256(canonical.encode("ascii")).digest())


def thumbprint_of_raw(public_bytes: bytes) -> str:
    """The thumbprint of a raw 32-byte Ed25519 public key (an enrolled agent key)."""
    return thumbprint({"kty": "OKP", "crv": "Ed25519", "x": b64url(public_bytes)})


def thumbprint_of_ssh_key(line: str) -> str:
    """The thumbprint of an enrolled `ssh-ed25519` key line (what `cnf.jkt` of an agent's tokens is)."""
    from cryptography.hazmat.primitives import serialization

    from grantd.sshkeys import parse_public_key

    key, _, _ = parse_public_key(line)
    return thumbprint_of_raw(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def is_enrolled_key(proof: DpopProof, enrolled_key_line: str) -> bool:
    """True when the proof was made with the agent's enrolled key (compared by thumbprint)."""
    try:
        expected = thumbprint_of_ssh_key(enrolled_key_line)
    except ValueError:
        return False
    return hmac.compare_digest(proof.jkt, expected)


def ath_of(access_token: str) -> str:
    """`ath`: base64url(SHA-256(ASCII access token)) (RFC 9449 §4.2)."""
    return b64url(hashlib.sha256(access_token.encode("ascii", "strict")).digest())


_DEFAULT_PORTS = {"https": 443, "http": 80}


def normalize_htu(url: str) -> str:
    """RFC 9449 §4.3: the URL without query and fragment, scheme and host lower case, the default
    port dropped, an empty path "/"; percent escapes upper case. ValueError when it is no absolute
    http(s) URL or carries a userinfo part."""
    if (
        not isinstance(url, str)
        or not url
        or len(url) > 2048
        or any(c.isspace() or ord(c) < 0x21 for c in url)
    ):
        raise ValueError("htu must be an absolute URL")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError("htu must be an absolute http(s) URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("htu must not carry a userinfo part")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("htu has a bad port") from None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = re.sub(r"%[0-9a-fA-F]{2}", lambda m: m.group(0).upper(), parts.path) or "/"
    return f"{scheme}://{netloc}{path}"


def expected_htu(issuer: str, path: str) -> str:
    """The one `htu` a route accepts: the configured issuer joined with the route's path."""
    return normalize_htu(issuer.rstrip("/") + "/" + path.lstrip("/"))


class Nonces:
    """Stateless server nonces: an HMAC of the time step with a server secret. The current and
    the previous step are accepted, so a nonce lives between ``step`` and ``2 * step`` seconds."""

    def __init__(self, secret: bytes, step: int = NONCE_STEP):
        if len(secret) < 16:
            raise ValueError("the nonce secret must be at least 16 bytes")
        if step < 1:
            raise ValueError("the nonce step must be at least one second")
        self._secret = secret
        self.step = step

    def _for_step(self, step: int) -> str:
        return b64url(hmac.new(self._secret, f"grantd-dpop-nonce:{step}".encode(), hashlib.sha256).digest())[
            :32
        ]

    def current(self, now: float) -> str:
        return self._for_step(int(now // self.step))

    def valid(self, nonce: object, now: float) -> bool:
        if not isinstance(nonce, str) or len(nonce) != 32:
            return False
        step = int(now // self.step)
        return any(hmac.compare_digest(nonce, self._for_step(s)) for s in (step, step - 1))


def _json_part(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(b64url_decode(text))
    except ValueError:
        raise DpopError(f"the proof's {what} is not base64url JSON") from None
    if not isinstance(value, dict):
        raise DpopError(f"the proof's {what} is not a JSON object")
    return value


def _public_key(jwk: object) -> tuple[Any, str]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if not isinstance(jwk, dict):
        raise DpopError("the proof's header has no jwk object")
    private = PRIVATE_MEMBERS & set(jwk)
    if private:
        raise DpopError(f"the proof's jwk holds a private key member ({', '.join(sorted(private))})")
    if jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise DpopError("the proof's jwk must be an OKP Ed25519 public key")
    x = jwk.get("x")
    try:
        raw = b64url_decode(x) if isinstance(x, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise DpopError("the proof's jwk x is not a 32-byte Ed25519 key")
    return Ed25519PublicKey.from_public_bytes(raw), str(x)


def verify_proof(
    proof: object,
    *,
    method: str,
    htu: str,
    now: float,
    access_token: str | None = None,
    first_use: FirstUse | None = None,
    nonces: Nonces | None = None,
    max_age: int = DEFAULT_MAX_AGE,
    leeway: int = DEFAULT_LEEWAY,
    expected_jkt: str | None = None,
) -> DpopProof:
    """Verify a DPoP proof for one request; DpopError (with its reason) when it does not hold.

    ``htu`` is the URL the server expects (``expected_htu(issuer, path)``), never one built from
    the request's Host. ``access_token``: the token presented with the proof (then `ath` must
    match). ``first_use``: the replay check (None only where no store exists: `grantd elevate`,
    whose issuer checks replay at consume). ``nonces``: server nonces are on. ``expected_jkt``: the
    key the token is bound to (`cnf.jkt`), or the agent's enrolled key's thumbprint."""
    from cryptography.exceptions import InvalidSignature

    if not isinstance(proof, str) or not proof:
        raise DpopError("no DPoP proof")
    if len(proof) > MAX_PROOF_BYTES:
        raise DpopError("the proof is larger than 8 KiB")
    parts = proof.split(".")
    if len(parts) != 3:
        raise DpopError("the proof is not a compact JWS (three dot-separated parts)")
    header = _json_part(parts[0], "header")
    if header.get("typ") != PROOF_TYP:
        raise DpopError(f"the proof's typ must be {PROOF_TYP}")
    if header.get("alg") not in PROOF_ALGS:
        raise DpopError("the proof's alg must be EdDSA or Ed25519")
    if "crit" in header:
        raise DpopError("the proof names critical header parameters grantd does not understand")
    key, x = _public_key(header.get("jwk"))
    try:
        signature = b64url_decode(parts[2])
    except ValueError:
        raise DpopError("the proof's signature is not base64url") from None
    try:
        key.verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"))
    except InvalidSignature:
        raise DpopError("the proof's signature does not verify with its jwk") from None
    claims = _json_part(parts[1], "payload")
    jkt = thumbprint({"kty": "OKP", "crv": "Ed25519", "x": x})
    if expected_jkt is not None and not hmac.compare_digest(jkt, expected_jkt):
        raise DpopError("the proof's key is not the key the token is bound to (or the agent's enrolled key)")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti or len(jti) > MAX_JTI:
        raise DpopError("the proof has no jti (a string of at most 256 characters)")
    htm = claims.get("htm")
    if not isinstance(htm, str) or htm != method.upper() or not _METHOD.fullmatch(htm):
        raise DpopError(f"the proof's htm is not {method.upper()}")
    claimed_htu = claims.get("htu")
    try:
        matches = isinstance(claimed_htu, str) and normalize_htu(claimed_htu) == normalize_htu(htu)
    except ValueError:
        matches = False
    if not matches:
        raise DpopError("the proof's htu is not this endpoint's URL at the issuer")
    iat = claims.get("iat")
    if not isinstance(iat, int) or isinstance(iat, bool):
        raise DpopError("the proof's iat must be an integer")
    if iat > now + leeway:
        raise DpopError("the proof's iat is in the future")
    if iat < now - max_age - leeway:
        raise DpopError(f"the proof is older than {max_age} s (iat)")
    if access_token is not None:
        ath = claims.get("ath")
        if not isinstance(ath, str) or not hmac.compare_digest(ath, ath_of(access_token)):
            raise DpopError("the proof's ath does not match the access token")
    if nonces is not None and not nonces.valid(claims.get("nonce"), now):
        raise DpopError("a current DPoP-Nonce is required", error="use_dpop_nonce")
    if first_use is not None and not first_use(f"{jkt}:{jti}", iat + max_age + 2 * leeway):
        raise DpopError("the proof was used before (jti replayed)")
    return DpopProof(jkt=jkt, jti=jti, iat=iat, htm=htm, htu=normalize_htu(str(claimed_htu)), x=x)


def make_proof(
    private_key: Any,
    *,
    method: str,
    url: str,
    iat: int,
    jti: str,
    access_token: str | None = None,
    nonce: str | None = None,
    header_extra: Mapping[str, Any] | None = None,
    claims_extra: Mapping[str, Any] | None = None,
) -> str:
    """A DPoP proof signed by an Ed25519 private key (agents, `grantd run`, tests)."""
    from cryptography.hazmat.primitives import serialization

    raw = private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    header: dict[str, Any] = {
        "typ": PROOF_TYP,
        "alg": PROOF_ALG,
        "jwk": {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)},
    }
    header.update(header_extra or {})
    claims: dict[str, Any] = {"jti": jti, "htm": method, "htu": url, "iat": iat}
    if access_token is not None:
        claims["ath"] = ath_of(access_token)
    if nonce is not None:
        claims["nonce"] = nonce
    claims.update(claims_extra or {})
    signing_input = (
        b64url(json.dumps(header, separators=(",", ":")).encode())
        + "."
        + b64url(json.dumps(claims, separators=(",", ":")).encode())
    )
    return signing_input + "." + b64url(private_key.sign(signing_input.encode("ascii")))
