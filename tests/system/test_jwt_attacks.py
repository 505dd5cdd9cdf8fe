"""JWT attacks at every place that accepts a token: the bearer of an authenticated route
(GET /api/me), POST /api/grants/:id/consume, POST /api/grants/verify and `grantd elevate`.

Every variant starts from a real token of a running server (an agent's identity token, or the
AuthZ-JWT of an approved `timed` grant for `id -u` on this host) and changes one thing. Variants
that an outsider can make (no key) and variants signed with the server's own key (what a verifier
must refuse even from us: a parser difference between signer and verifier, or a minting bug, must
not turn into access) are both here. Every one must be refused (401 / `{valid: false}` / elevate
exit 5; a token too large to read is elevate's usage error, exit 1) and never answered with a 5xx.
A positive control per place shows the unmodified token is accepted, so no refusal is vacuous.

Decided here (docs/security.md): `nbf` in the future is refused (RFC 7519 4.1.5); `iat` more than
a minute in the future is refused (we never mint one; it is forged or from a broken clock); `jku`,
`x5u` and `jwk` headers are ignored and never fetched (a listener proves no connection was made);
the only accepted header algorithm is EdDSA with a `kid` the issuer publishes; tokens are compact
base64url without padding (RFC 7515), so a padded or standard-alphabet form of a token is not
the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from inproc import InProcessServer

from authz_world import NO_LIMITS
from conftest import ROOT
from elevate_support import HOST, Target, elevate, make_target

ARGV = ["id", "-u"]

# -- building tokens -------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def compact(
    header: dict[str, Any], payload: dict[str, Any] | str, sign: Callable[[bytes], bytes] | None
) -> str:
    """A JWS compact serialisation of exactly these bytes (payload may be raw JSON text)."""
    body = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    signing_input = f"{b64url(json.dumps(header, separators=(',', ':')).encode())}.{b64url(body.encode())}"
    return f"{signing_input}.{b64url(sign(signing_input.encode())) if sign else ''}"


class Sink:
    """A TCP listener that only counts connections: where `jku`/`x5u` point (nothing may connect)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@dataclass
class Kit:
    srv: Any
    private: Ed25519PrivateKey  # the server's active signing key (to forge what a verifier must refuse)
    kid: str
    sink: Sink
    tokens: dict[str, str] = field(default_factory=dict)  # kind ("identity" | "authz") -> a real token
    grant_id: str = ""
    foreign: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)

    def claims(self, kind: str) -> dict[str, Any]:
        return jwt.decode(self.tokens[kind], options={"verify_signature": False})  # type: ignore[no-any-return]

    def ours(self, payload: dict[str, Any] | str, **header: Any) -> str:
        full = {"alg": "EdDSA", "typ": "JWT", "kid": self.kid, **header}
        return compact({k: v for k, v in full.items() if v is not None}, payload, self.private.sign)

    def by_foreign(self, payload: dict[str, Any], **header: Any) -> str:
        full = {"alg": "EdDSA", "typ": "JWT", "kid": self.kid, **header}
        return compact({k: v for k, v in full.items() if v is not None}, payload, self.foreign.sign)

    def public_x(self) -> str:
        raw = self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return b64url(raw)


def _hs256(kit: Kit, kind: str, secret: bytes) -> str:
    return compact(
        {"alg": "HS256", "typ": "JWT", "kid": kit.kid},
        kit.claims(kind),
        lambda data: hmac.new(secret, data, hashlib.sha256).digest(),
    )


def _swap_header(token: str, **changes: Any) -> str:
    header, payload, signature = token.split(".")
    fields = {**json.loads(b64url_decode(header)), **changes}
    return f"{b64url(json.dumps(fields).encode())}.{payload}.{signature}"


def _tamper(kit: Kit, kind: str) -> str:
    header, _, signature = kit.tokens[kind].split(".")
    claims = kit.claims(kind)
    if kind == "authz":
        claims["command"] = ["id", "-g"]  # same length class, another command
    else:
        claims["sub"] = "root@example.com"
    return f"{header}.{b64url(json.dumps(claims).encode())}.{signature}"


def _other_signature(kit: Kit, kind: str) -> str:
    other = kit.tokens["identity" if kind == "authz" else "authz"]
    header, payload, _ = kit.tokens[kind].split(".")
    return f"{header}.{payload}.{other.split('.')[2]}"


def _with_signature_chars(kit: Kit, kind: str) -> str:
    """A token of ours (fresh jti) whose signature segment contains '-' or '_'."""
    for _ in range(200):
        token = kit.ours(
            {**kit.claims(kind), "jti": b64url(hashlib.sha256(str(time.monotonic_ns()).encode()).digest())}
        )
        if set(token.split(".")[2]) & {"-", "_"}:
            return token
    raise AssertionError("no signature with - or _ in 200 tries")


def _standard_alphabet(kit: Kit, kind: str) -> str:
    token = _with_signature_chars(kit, kind)
    header, payload, signature = token.split(".")
    return f"{header}.{payload}.{signature.replace('-', '+').replace('_', '/')}"


def _padded(segment_index: int) -> Callable[[Kit, str], str]:
    def make(kit: Kit, kind: str) -> str:
        parts = kit.tokens[kind].split(".")
        parts[segment_index] += "=" * (-len(parts[segment_index]) % 4 or 4)
        return ".".join(parts)

    return make


def _duplicate(key: str) -> Callable[[Kit, str], str]:
    """A payload with `key` twice: first a value of the attacker's choosing, last the real one
    (a first-wins and a last-wins parser read different tokens)."""

    def make(kit: Kit, kind: str) -> str:
        claims = kit.claims(kind)
        if key not in claims:
            claims[key] = "x"
        real = claims.pop(key)
        rest = json.dumps(claims, separators=(",", ":"))[1:-1]
        text = (
            "{"
            + f"{json.dumps(key)}:{json.dumps('attacker@example.com')},{rest},{json.dumps(key)}:{json.dumps(real)}"
            + "}"
        )
        return kit.ours(text)

    return make


def _without(name: str) -> Callable[[Kit, str], str]:
    return lambda kit, kind: kit.ours({k: v for k, v in kit.claims(kind).items() if k != name})


def _claim(**changes: Any) -> Callable[[Kit, str], str]:
    def make(kit: Kit, kind: str) -> str:
        now = kit.srv.clock.now_s()
        values = {k: (v(now) if callable(v) else v) for k, v in changes.items()}
        return kit.ours({**kit.claims(kind), **values})

    return make


def _main_claim(value: Any) -> Callable[[Kit, str], str]:
    """The claim that names what the token is about (identity: sub; AuthZ-JWT: grant_id) as `value`."""

    def make(kit: Kit, kind: str) -> str:
        claims = kit.claims(kind)
        name = "grant_id" if kind == "authz" else "sub"
        return kit.ours({**claims, name: value(claims[name]) if callable(value) else value})

    return make


def _ec_signed(kit: Kit, kind: str) -> str:
    return jwt.encode(
        kit.claims(kind), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": kit.kid}
    )


def _rsa_signed(kit: Kit, kind: str) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(kit.claims(kind), key, algorithm="RS256", headers={"kid": kit.kid})


def _foreign_jwk(kit: Kit) -> dict[str, Any]:
    raw = kit.foreign.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw), "kid": "attacker", "alg": "EdDSA", "use": "sig"}


VARIANTS: dict[str, Callable[[Kit, str], str]] = {
    "alg none": lambda kit, kind: compact({"alg": "none", "typ": "JWT"}, kit.claims(kind), None),
    "alg none with our kid": lambda kit, kind: compact(
        {"alg": "none", "typ": "JWT", "kid": kit.kid}, kit.claims(kind), None
    ),
    "alg None (capitalised) with a signature": lambda kit, kind: _swap_header(kit.tokens[kind], alg="None"),
    "HS256 keyed with our public key (JWK x)": lambda kit, kind: _hs256(kit, kind, kit.public_x().encode()),
    "HS256 keyed with our raw public key bytes": lambda kit, kind: _hs256(
        kit, kind, b64url_decode(kit.public_x())
    ),
    "HS256 keyed with our JWK as JSON": lambda kit, kind: _hs256(
        kit, kind, json.dumps({"kty": "OKP", "crv": "Ed25519", "x": kit.public_x()}).encode()
    ),
    "header alg ES256, original signature": lambda kit, kind: _swap_header(kit.tokens[kind], alg="ES256"),
    "header alg RS256, original signature": lambda kit, kind: _swap_header(kit.tokens[kind], alg="RS256"),
    "ES256 signed by a P-256 key under our kid": _ec_signed,
    "RS256 signed by an RSA key under our kid": _rsa_signed,
    "unknown kid, foreign key": lambda kit, kind: kit.by_foreign(kit.claims(kind), kid="key-nobody"),
    "our kid, foreign key": lambda kit, kind: kit.by_foreign(kit.claims(kind)),
    "missing kid (our key)": lambda kit, kind: kit.ours(kit.claims(kind), kid=None),
    "kid null (our key)": lambda kit, kind: compact(
        {"alg": "EdDSA", "typ": "JWT", "kid": None}, kit.claims(kind), kit.private.sign
    ),
    "kid a number (our key)": lambda kit, kind: kit.ours(kit.claims(kind), kid=1),
    "kid path traversal (our key)": lambda kit, kind: kit.ours(
        kit.claims(kind), kid="../../../../../../etc/passwd"
    ),
    "kid SQL text (our key)": lambda kit, kind: kit.ours(kit.claims(kind), kid="' OR '1'='1' -- "),
    "kid ours plus SQL (our key)": lambda kit, kind: kit.ours(kit.claims(kind), kid=kit.kid + "' OR 1=1 --"),
    "jku pointing elsewhere (foreign key)": lambda kit, kind: kit.by_foreign(
        kit.claims(kind), kid="attacker", jku=kit.sink.url + "/jwks.json"
    ),
    "x5u pointing elsewhere (foreign key)": lambda kit, kind: kit.by_foreign(
        kit.claims(kind), kid="attacker", x5u=kit.sink.url + "/cert.pem"
    ),
    "embedded jwk (foreign key)": lambda kit, kind: kit.by_foreign(
        kit.claims(kind), kid="attacker", jwk=_foreign_jwk(kit)
    ),
    "embedded jwk under our kid (foreign key)": lambda kit, kind: kit.by_foreign(
        kit.claims(kind), jwk={**_foreign_jwk(kit), "kid": kit.kid}, jku=kit.sink.url + "/jwks.json"
    ),
    "crit names an unknown extension (our key)": lambda kit, kind: kit.ours(
        kit.claims(kind), crit=["urn:example:must-understand"], **{"urn:example:must-understand": True}
    ),
    "crit names exp (our key, exp in the past)": lambda kit, kind: kit.ours(
        {**kit.claims(kind), "exp": kit.srv.clock.now_s() - 600}, crit=["exp"]
    ),
    "expired (our key)": _claim(iat=lambda now: now - 7200, exp=lambda now: now - 3600),
    "expired by one second (our key)": _claim(exp=lambda now: now - 1),
    "exp as a string (our key)": _claim(exp=lambda now: str(now + 600)),
    "nbf an hour in the future (our key)": _claim(nbf=lambda now: now + 3600),
    "iat an hour in the future (our key)": _claim(iat=lambda now: now + 3600, exp=lambda now: now + 7200),
    "wrong iss (our key)": _claim(iss="https://evil.example.com"),
    "iss with a trailing slash (our key)": lambda kit, kind: kit.ours(
        {**kit.claims(kind), "iss": kit.claims(kind)["iss"] + "/"}
    ),
    "wrong aud (our key)": _claim(aud="someone-else"),
    "aud as a list with ours and another (our key)": lambda kit, kind: kit.ours(
        {**kit.claims(kind), "aud": [kit.claims(kind)["aud"], "someone-else"]}
    ),
    "missing exp (our key)": _without("exp"),
    "missing iss (our key)": _without("iss"),
    "missing sub (our key)": _without("sub"),
    "tampered payload, original signature": _tamper,
    "signature stripped": lambda kit, kind: kit.tokens[kind].rsplit(".", 1)[0] + ".",
    "signature segment missing": lambda kit, kind: kit.tokens[kind].rsplit(".", 1)[0],
    "signature of another token": _other_signature,
    "a token of the other kind": lambda kit, kind: kit.tokens["identity" if kind == "authz" else "authz"],
    "'=' padding on the signature": _padded(2),
    "'=' padding on the payload": _padded(1),
    "standard base64 alphabet (+ /) in the signature": _standard_alphabet,
    "100 KB token (our key)": lambda kit, kind: kit.ours({**kit.claims(kind), "pad": "A" * 100_000}),
    "100 KB of garbage": lambda kit, kind: "eyJ" + "A" * 100_000 + ".e30.AAAA",
    "duplicate sub in the payload (our key)": _duplicate("sub"),
    "duplicate grant_id in the payload (our key)": _duplicate("grant_id"),
    "sub / grant_id a number (our key)": _main_claim(12345),
    "sub / grant_id a list (our key)": _main_claim(lambda real: [real]),
    "sub / grant_id an object (our key)": _main_claim(lambda real: {"$ne": None, "id": real}),
    "sub / grant_id null (our key)": _main_claim(None),
}

OVERSIZED = {"100 KB token (our key)", "100 KB of garbage"}

# -- the server, a grant for this host and a target -------------------------------------------------


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kit]:
    from authz_world import build_world

    srv = InProcessServer(tmp_path_factory.mktemp("jwt"), extra=NO_LIMITS).start()
    sink = Sink()
    try:
        world = build_world(srv)
        key = srv.call(srv.services.keyring.signing_key())
        k = Kit(srv, key.private, key.kid, sink)
        agent = world.agents["self"]
        k.tokens["identity"] = agent.token
        token, grant_id = world.approved(
            agent, target_host=HOST, audience="escapes", command=ARGV, grant_type="timed", duration=3600
        )
        k.tokens["authz"], k.grant_id = token, grant_id
        yield k
        assert sink.connections == 0, "a verifier followed a jku/x5u header"
    finally:
        sink.close()
        srv.stop()


@pytest.fixture(scope="module")
def target(kit: Kit, tmp_path_factory: pytest.TempPathFactory) -> Target:
    issuer = kit.claims("authz")["iss"]
    return make_target(tmp_path_factory.mktemp("elevate-target"), [issuer], allowed_audiences=["escapes"])


def at_me(kit: Kit, token: str) -> Any:
    with kit.srv.client(token) as http:
        return http.get("/api/me")


def at_consume(kit: Kit, token: str) -> Any:
    with kit.srv.client(token) as http:
        return http.post(f"/api/grants/{kit.grant_id}/consume")


def at_verify(kit: Kit, token: str) -> Any:
    with kit.srv.client() as http:
        return http.post("/api/grants/verify", json={"token": token})


def refused_as_bearer(response: Any, variant: str) -> None:
    assert response.status_code < 500, response.text
    if variant in OVERSIZED:
        assert 400 <= response.status_code < 500, response.text  # an oversized header may stop earlier
        return
    assert response.status_code == 401, response.text
    assert response.headers.get("www-authenticate", "").startswith("Bearer"), response.headers


# -- positive controls -----------------------------------------------------------------------------


def test_the_unmodified_tokens_are_accepted_everywhere(kit: Kit, target: Target) -> None:
    assert at_me(kit, kit.tokens["identity"]).status_code == 200
    r = at_consume(kit, kit.tokens["authz"])
    assert r.status_code == 200 and r.json()["status"] == "valid", r.text
    assert at_verify(kit, kit.tokens["authz"]).json()["valid"] is True
    ran = elevate(target, ARGV, token=kit.tokens["authz"])
    assert ran.returncode == 0 and ran.stdout.strip() == "0", ran.stderr
    # and the helpers make tokens the server accepts when nothing is wrong
    assert at_me(kit, kit.ours(kit.claims("identity"))).status_code == 200
    assert at_verify(kit, kit.ours(kit.claims("authz"))).json()["valid"] is True


# -- the attacks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_bearer_on_an_authenticated_route(kit: Kit, variant: str) -> None:
    refused_as_bearer(at_me(kit, VARIANTS[variant](kit, "identity")), variant)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_consume(kit: Kit, variant: str) -> None:
    refused_as_bearer(at_consume(kit, VARIANTS[variant](kit, "authz")), variant)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_verify(kit: Kit, variant: str) -> None:
    r = at_verify(kit, VARIANTS[variant](kit, "authz"))
    assert r.status_code == 200, r.text
    assert r.json()["valid"] is False, r.json()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_elevate(kit: Kit, target: Target, variant: str) -> None:
    result = elevate(target, ARGV, token=VARIANTS[variant](kit, "authz"))
    allowed = (5, 1) if variant in OVERSIZED else (5,)
    assert result.returncode in allowed, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.strip() != "0", "the command ran"


# -- a retired key that was dropped ------------------------------------------------------------------


def test_tokens_of_a_retired_and_dropped_key_are_refused_everywhere(tmp_path: Path) -> None:
    from authz_world import build_world

    srv = InProcessServer(tmp_path / "srv", extra=NO_LIMITS).start()
    try:
        world = build_world(srv)
        old = srv.call(srv.services.keyring.signing_key())
        agent = world.agents["self"]
        authz, grant_id = world.approved(
            agent, target_host=HOST, audience="escapes", command=ARGV, grant_type="always"
        )
        identity_claims = jwt.decode(agent.token, options={"verify_signature": False})
        authz_claims = jwt.decode(authz, options={"verify_signature": False})
        srv.call(srv.services.keyring.rotate())
        # Past the retention (every token the old key signed has expired): the key is dropped.
        srv.clock.advance(srv.services.keyring.retention_ms / 1000 + 60)
        srv.call(srv.services.keyring.rotate())  # rotation is when dropping happens
        with srv.client() as http:
            assert old.kid not in {k["kid"] for k in http.get("/.well-known/jwks.json").json()["keys"]}
        now = srv.clock.now_s()
        fresh = {"iat": now, "exp": now + 600}
        identity = jwt.encode(
            {**identity_claims, **fresh}, old.private, algorithm="EdDSA", headers={"kid": old.kid}
        )
        late = jwt.encode({**authz_claims, **fresh}, old.private, algorithm="EdDSA", headers={"kid": old.kid})
        new_identity = world.sign_in(agent)  # the agent itself still signs in (with the new key)
        with srv.client(new_identity) as http:
            assert http.get("/api/me").status_code == 200
        with srv.client(identity) as http:
            assert http.get("/api/me").status_code == 401
        with srv.client(late) as http:
            assert http.post(f"/api/grants/{grant_id}/consume").status_code == 401
        with srv.client() as http:
            assert http.post("/api/grants/verify", json={"token": late}).json()["valid"] is False
        target = make_target(tmp_path / "target", [authz_claims["iss"]], allowed_audiences=["escapes"])
        result = elevate(target, ARGV, token=late)
        assert result.returncode == 5 and result.stdout.strip() != "0", result.stderr
    finally:
        srv.stop()


def test_tokens_in_flight_die_when_their_key_is_revoked(tmp_path: Path) -> None:
    """`grantd keys revoke KID` (run as the operator would, in another process): tokens the key
    signed, still unexpired, are refused everywhere; the agent signs in again and works."""
    from authz_world import build_world

    srv = InProcessServer(tmp_path / "srv", extra=NO_LIMITS).start()
    try:
        world = build_world(srv)
        agent = world.agents["self"]
        authz, grant_id = world.approved(
            agent, target_host=HOST, audience="escapes", command=ARGV, grant_type="timed", duration=3600
        )
        kid = jwt.get_unverified_header(authz)["kid"]
        done = subprocess.run(
            [sys.executable, "-m", "grantd", "keys", "revoke", kid, "--config", str(srv.config_path)],
            cwd=srv.directory,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 0, done.stderr
        srv.clock.advance(2)  # "in every server process within a second"
        with srv.client(agent.token) as http:
            assert http.get("/api/me").status_code == 401
        with srv.client(authz) as http:
            assert http.post(f"/api/grants/{grant_id}/consume").status_code == 401
        with srv.client() as http:
            assert http.post("/api/grants/verify", json={"token": authz}).json()["valid"] is False
            assert kid not in {k["kid"] for k in http.get("/.well-known/jwks.json").json()["keys"]}
        target = make_target(
            tmp_path / "target",
            [jwt.decode(authz, options={"verify_signature": False})["iss"]],
            allowed_audiences=["escapes"],
        )
        result = elevate(target, ARGV, token=authz)
        assert result.returncode == 5 and result.stdout.strip() != "0", result.stderr
        world.sign_in(agent)
        with srv.client(agent.token) as http:
            assert http.get("/api/me").status_code == 200
            assert (
                http.post(f"/api/grants/{grant_id}/token").status_code == 200
            )  # grants survive; tokens are re-minted
    finally:
        srv.stop()


def test_a_key_made_elsewhere_never_reaches_the_jwks(kit: Kit) -> None:
    """The JWKS publishes only keys from storage: a token cannot talk its own key into it."""
    token = VARIANTS["embedded jwk under our kid (foreign key)"](kit, "identity")
    at_me(kit, token)
    with kit.srv.client() as http:
        xs = {k["x"] for k in http.get("/.well-known/jwks.json").json()["keys"]}
    assert _foreign_jwk(kit)["x"] not in xs
