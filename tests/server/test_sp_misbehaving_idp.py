"""SP login (DDISA) against a misbehaving IdP: every check of the callback. Shared fixtures: test_sp."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from inproc import InProcessServer
from people_support import signed_in_person

from dns_server import TxtDnsServer
from server import test_sp

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
begin = test_sp.begin
browser = test_sp.browser
dns = test_sp.dns
error_of = test_sp.error_of
idp = test_sp.idp
login = test_sp.login
sp = test_sp.sp
sp_config = test_sp.sp_config


# -- a misbehaving IdP: every check of the callback -----------------------------------------------


class FakeIdp:
    """A tiny real OpenID provider over http on 127.0.0.1 whose /token answer each test shapes:
    the claims of the ID token it signs, the key it signs with, or a refusal."""

    def __init__(self, clock: Any) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self.clock = clock
        self.keys = {"k1": Ed25519PrivateKey.generate()}
        self.sign_with = ("k1", self.keys["k1"])
        self.claims: dict[str, Any] = {}
        self.refusal: tuple[int, dict[str, Any]] | None = None
        self.answer_field = "id_token"
        self.issuer: str | None = None  # what its discovery document claims (None: its own URL)
        self.requests: list[tuple[str, str]] = []
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                idp.requests.append(("GET", self.path))
                if self.path == "/.well-known/openid-configuration":
                    self._send(
                        200,
                        {
                            "issuer": idp.issuer or idp.url,
                            "authorization_endpoint": idp.url + "/authorize",
                            "token_endpoint": idp.url + "/token",
                            "jwks_uri": idp.url + "/jwks",
                        },
                    )
                elif self.path == "/jwks":
                    self._send(200, {"keys": [idp.jwk(kid, key) for kid, key in idp.keys.items()]})
                else:
                    self._send(404, {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                idp.requests.append(("POST", self.path))
                idp.form = form
                if idp.refusal is not None:
                    self._send(*idp.refusal)
                    return
                self._send(200, {idp.answer_field: idp.token(form), "token_type": "Bearer"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def jwk(kid: str, key: Any) -> dict[str, Any]:
        from jwt.algorithms import OKPAlgorithm

        return {
            **OKPAlgorithm.to_jwk(key.public_key(), as_dict=True),
            "kid": kid,
            "alg": "EdDSA",
            "use": "sig",
        }

    def token(self, form: dict[str, str]) -> str:
        import jwt

        now = self.clock.now_s()
        claims = {
            "iss": self.url,
            "aud": form["client_id"],
            "sub": self.email,
            "email": self.email,
            "name": "Fake Person",
            "iat": now,
            "exp": now + 300,
            "nonce": self.nonce,
            "act": "human",
        }
        claims.update(self.claims)
        claims = {k: v for k, v in claims.items() if v is not None}
        kid, key = self.sign_with
        return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def fake(sp: InProcessServer, dns: TxtDnsServer) -> Iterator[FakeIdp]:
    idp = FakeIdp(sp.clock)
    dns.records["_ddisa.fake.test"] = [f"v=ddisa1 idp={idp.url}"]
    made = sp.app.ctx.sp_login  # the SP's caches, once it served a login
    if made is not None:
        made.discovery._cache.pop("fake.test", None)  # a fresh fake IdP per test
    yield idp
    idp.close()


def via_fake(
    sp: InProcessServer, fake: FakeIdp, http: httpx.Client, email: str = "pat@fake.test"
) -> httpx.Response:
    r = begin(http, email)
    assert r.status_code == 200, r.text
    query = parse_qs(urlsplit(r.json()["redirectUrl"]).query)
    fake.email, fake.nonce = email, query["nonce"][0]
    return http.get("/api/callback", params={"code": "any-code", "state": query["state"][0]})


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"iss": "https://someone-else.example"}, "JWT issuer does not match the IdP"),
        ({"aud": "another-client.example"}, "JWT audience does not match client ID"),
        ({"aud": ["x.example", "y.example"]}, "JWT audience does not match client ID"),
        ({"nonce": "not-the-nonce"}, "JWT nonce does not match the login"),
        ({"nonce": None}, "JWT nonce does not match the login"),
        ({"delta": (-400, -100)}, "JWT has expired"),
        ({"delta": (0, 600)}, "JWT lifetime exceeds 300 seconds"),
        ({"delta": (120, 300)}, "the ID token was issued in the future"),
        ({"act": "agent"}, "only people sign in here (the ID token's act is not human)"),
        ({"act": {"sub": "agent+x@fake.test"}}, "only people sign in here (the ID token's act is not human)"),
        (
            {"email": "boss@a.test", "sub": "boss@a.test"},
            "the IdP signed in another e-mail address than the one entered",
        ),
        ({"exp": None}, "the ID token has no exp claim"),
    ],
)
def test_every_id_token_check_refuses(
    sp: InProcessServer, fake: FakeIdp, claims: dict[str, Any], message: str
) -> None:
    delta = claims.pop("delta", None)
    if delta is not None:
        now = sp.clock.now_s()
        claims.update({"iat": now + delta[0], "exp": now + delta[1]})
    fake.claims = claims
    with browser(sp) as http:
        assert error_of(via_fake(sp, fake, http)) == message
        assert http.get("/api/me").status_code == 401


def test_the_fake_idp_signs_people_in_and_a_code_exchange_is_standard(
    sp: InProcessServer, fake: FakeIdp
) -> None:
    with browser(sp) as http:
        r = via_fake(sp, fake, http)
        assert r.status_code == 303 and r.headers["location"] == "/", r.headers
        assert http.get("/api/me").json() == {
            "sub": "pat@fake.test",
            "email": "pat@fake.test",
            "name": "Fake Person",
            "act": "human",
            "kind": "guest",
            "admin": False,
            "idp": fake.url,
            "id": http.get("/api/me").json()["id"],
        }
    assert fake.form["grant_type"] == "authorization_code" and fake.form["code"] == "any-code"
    assert fake.form["redirect_uri"] == sp.url + "/api/callback" and len(fake.form["code_verifier"]) >= 43
    fake.answer_field = "assertion"  # the peer IdP's name for it
    fake.claims = {
        "aud": ["x.example", urlsplit(sp.url).netloc],
        "azp": urlsplit(sp.url).netloc,
    }  # a list with azp
    with browser(sp) as http:
        assert via_fake(sp, fake, http).headers["location"] == "/"


def test_signatures_keys_and_rotation(sp: InProcessServer, fake: FakeIdp) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    fake.sign_with = ("k1", Ed25519PrivateKey.generate())  # a forger's key under the IdP's kid
    with browser(sp) as http:
        assert error_of(via_fake(sp, fake, http)) == "JWT signature is not valid"
    fake.sign_with = ("k9", Ed25519PrivateKey.generate())  # an unknown kid, not in the JWKS either
    with browser(sp) as http:
        assert error_of(via_fake(sp, fake, http)) == "JWT signature is not valid (unknown key)"
    sp.clock.advance(31)  # the JWKS may be fetched again now
    try:
        fake.keys["k2"] = Ed25519PrivateKey.generate()  # the IdP rotates: the new kid is fetched once
        fake.sign_with = ("k2", fake.keys["k2"])
        fetched = fake.requests.count(("GET", "/jwks"))
        with browser(sp) as http:
            assert via_fake(sp, fake, http).headers["location"] == "/"
        assert fake.requests.count(("GET", "/jwks")) == fetched + 1
    finally:
        sp.clock.advance(-31)


def test_tokens_of_other_algorithms_are_refused(sp: InProcessServer, fake: FakeIdp) -> None:
    import jwt

    def unsigned(form: dict[str, str]) -> str:
        now = sp.clock.now_s()
        claims = {
            "iss": fake.url,
            "aud": form["client_id"],
            "sub": fake.email,
            "email": fake.email,
            "iat": now,
            "exp": now + 300,
            "nonce": fake.nonce,
        }
        return (
            jwt.encode(claims, None, algorithm="none")
            if fake.alg == "none"
            else jwt.encode(claims, "k" * 32, algorithm="HS256", headers={"kid": "k1"})
        )

    fake.token = unsigned  # type: ignore[method-assign]
    for alg in ("none", "HS256"):
        fake.alg = alg
        with browser(sp) as http:
            assert error_of(via_fake(sp, fake, http)).startswith("JWT signature is not valid"), alg


def test_token_endpoint_refusals(sp: InProcessServer, fake: FakeIdp) -> None:
    for refusal, message in (
        (
            (
                400,
                {
                    "error": "invalid_grant",
                    "error_description": "code_verifier does not match the code_challenge",
                },
            ),
            "code exchange error",
        ),
        (
            (400, {"error": "invalid_grant", "error_description": "expired authorization code"}),
            "expired authorization code",
        ),
        ((500, {}), "code exchange error"),
        ((200, {"token_type": "Bearer"}), "code exchange error: the IdP sent no ID token"),
    ):
        fake.refusal = refusal
        with browser(sp) as http:
            assert error_of(via_fake(sp, fake, http)) == message


def test_an_idp_on_a_private_address_is_not_asked_unless_allowed(tmp_path: Path, dns: TxtDnsServer) -> None:
    """SSRF: a DNS record (anyone's) naming an https IdP on a loopback address is not fetched."""
    dns.records["_ddisa.ssrf.test"] = ["v=ddisa1 idp=https://127.0.0.1:9"]
    server = InProcessServer(tmp_path / "strict", extra=sp_config(dns)).start()
    try:
        with browser(server) as http:
            r = begin(http, "eve@ssrf.test")
        assert r.status_code == 503 and r.json()["detail"] == "could not reach the IdP"
    finally:
        server.stop()


def test_guest_sessions_are_listed_and_ended_by_administrators(
    sp: InProcessServer, idp: InProcessServer
) -> None:
    with browser(sp) as http:
        assert login(sp, idp, http, "olga@a.test").headers["location"] == "/"
        with sp.admin() as admin:
            listed = admin.get("/api/admin/sessions", params={"limit": 100})
            assert listed.status_code == 200, listed.text
            family = http.get("/api/me").json()["id"].removeprefix("guest:")
            assert any(s.get("family_id", s.get("familyId")) == family for s in listed.json()["data"]), (
                listed.json()
            )
            guest = next(s for s in listed.json()["data"] if s["family_id"] == family)
            assert guest["person_id"] is None and guest["email"] == "olga@a.test" and guest["idp"] == idp.url
        _, page_client = signed_in_person(sp, admin=True)
        with page_client:
            page = page_client.get("/admin")  # the administrators' page lists guest sessions too
            assert page.status_code == 200 and "olga@a.test" in page.text
        with sp.admin() as admin:
            assert admin.delete(f"/api/admin/sessions/{family}").status_code == 200
        assert http.get("/api/me").status_code == 401


def test_logins_are_limited_per_address(tmp_path: Path, dns: TxtDnsServer) -> None:
    """D12: every login costs a DNS lookup and a request to an IdP; ``limits.sp_login_per_address``."""
    server = InProcessServer(
        tmp_path / "limited", extra=sp_config(dns) + "\n[limits]\nsp_login_per_address = 3\n"
    ).start()
    try:
        with browser(server) as http:
            answers = [begin(http, f"n{i}@nowhere.test").status_code for i in range(4)]
            assert answers == [404, 404, 404, 429]
            refused = begin(http, "n@nowhere.test")
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        server.clock.advance(60)
        with browser(server) as http:
            assert begin(http, "n@nowhere.test").status_code == 404
    finally:
        server.stop()


def test_the_idps_discovery_document_is_checked_and_cached(sp: InProcessServer, fake: FakeIdp) -> None:
    with browser(sp) as http:
        for _ in range(3):
            assert via_fake(sp, fake, http).headers["location"] == "/"
    assert fake.requests.count(("GET", "/.well-known/openid-configuration")) == 1  # cached (5 minutes)
    assert fake.requests.count(("GET", "/jwks")) == 1  # keys cached by kid
    sp.app.ctx.sp_login._endpoints.clear()
    fake.issuer = "https://impostor.example"  # a document naming another issuer than the DNS record's IdP
    with browser(sp) as http:
        r = begin(http, "pat@fake.test")
    assert r.status_code == 503 and r.json()["detail"] == "the IdP's discovery document names another issuer"


def test_a_new_login_replaces_the_browsers_session(sp: InProcessServer, idp: InProcessServer) -> None:
    with browser(sp) as http:
        login(sp, idp, http, "quinn@a.test")
        first = http.cookies["grantd_session"]
        login(sp, idp, http, "rita@a.test")
        assert http.get("/api/me").json()["email"] == "rita@a.test"
    with httpx.Client(base_url=sp.url, cookies={"grantd_session": first}, timeout=10) as old:
        assert old.get("/api/me").status_code == 401


@pytest.mark.slow
def test_a_dripping_idp_is_cut_off_at_the_deadline_and_not_asked_again(
    sp: InProcessServer, dns: TxtDnsServer
) -> None:
    """D12, issue 19 item 5: the IdP a DNS record names drips its discovery document a byte a
    second (no read timeout fires); the login answers 503 at the 5 s deadline, and for a while the
    IdP's domain is not asked again (no new connection)."""
    import time

    from oauth_support import DrippingServer

    drip = DrippingServer(every=1.0)
    dns.records["_ddisa.drip.test"] = [f"v=ddisa1 idp=http://127.0.0.1:{drip.port}"]
    try:
        with browser(sp) as http:
            started = time.monotonic()
            r = begin(http, "dee@drip.test")
            took = time.monotonic() - started
            assert r.status_code == 503 and r.json()["detail"] == "could not reach the IdP", r.text
            assert 4.5 <= took < 9, took
            started = time.monotonic()
            again = begin(http, "dee@drip.test")
            assert again.status_code == 503 and time.monotonic() - started < 2
        assert drip.connections == 1
    finally:
        drip.close()
