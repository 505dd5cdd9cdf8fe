"""Upstream identity providers and federated sign-in (docs/federation.md).

[[federation.providers]] tables are built through the plugins' federation_provider_types
factories at start, reported as config errors when wrong, and listed publicly (without secrets)
at GET /api/federation/providers. The sign-in round trip runs against a tiny real OpenID provider
on 127.0.0.1 (``Upstream`` below) and against the worked example type of docs/plugins.md; every
id_token check and every rule of who may sign in has a test that tries to break it."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from inproc import InProcessServer
from people_support import create_person, fresh

from grantd.config import ConfigError, validate
from grantd.plugin_manager import build_federation_providers, build_plugin_manager

from conftest import ROOT

TOKEN = {"management_token": "x" * 20}
SECRET = "oidc-client-secret-value-1234"
API_KEY = "static-api-key-value-5678"


def _config(*providers: dict, tmp_path=None, modules=()):
    raw = {
        "version": 1,
        "admin": TOKEN,
        "federation": {"providers": list(providers)},
        "plugins": {"modules": list(modules)},
    }
    return validate(raw, (tmp_path / "grantd.toml") if tmp_path else None)


def _oidc(**overrides) -> dict:
    return {
        "id": "corp",
        "type": "oidc",
        "issuer": "https://sso.example.com",
        "client_id": "grantd",
        "client_secret": "env:TEST_OIDC_SECRET",
        **overrides,
    }


@pytest.fixture(autouse=True)
def oidc_secret(monkeypatch):
    monkeypatch.setenv("TEST_OIDC_SECRET", SECRET)


def _build(config):
    return build_federation_providers(build_plugin_manager(config), config)


def test_an_oidc_provider_is_built_with_its_secret_and_defaults(tmp_path):
    (tmp_path / "corp-secret").write_text(SECRET + "\n")
    (tmp_path / "corp-secret").chmod(0o600)
    config = _config(
        _oidc(name="Corp SSO", client_secret="file:corp-secret", allowed_domains=["example.com"]),
        tmp_path=tmp_path,
    )
    (built,) = _build(config)
    assert built.provider.client_secret == SECRET and built.provider.allowed_domains == ("example.com",)
    assert built.public_info() == {
        "id": "corp",
        "type": "oidc",
        "name": "Corp SSO",
        "issuer": "https://sso.example.com",
    }
    assert not [w for w in config.warnings if w.startswith("federation")]


def test_an_inline_secret_works_with_a_warning():
    config = _config(_oidc(client_secret=SECRET))
    (built,) = _build(config)
    assert built.provider.client_secret == SECRET
    assert [w for w in config.warnings if w.startswith("federation")] == [
        "federation.providers[0].client_secret: the secret is written inline; prefer file:PATH or env:NAME"
    ]


def test_every_bad_oidc_key_is_reported_at_once_with_its_path(monkeypatch):
    monkeypatch.delenv("TEST_OIDC_SECRET")
    config = _config(
        _oidc(),
        _oidc(
            id="second",
            issuer="http://sso.example.com",
            client_id=" ",
            scopes=["email"],
            email_claim="",
            allowed_domains=["Not A Domain"],
            create_unknown="yes",
            client_secrte="x",
        ),
        _oidc(id="third", scopes="openid"),
    )
    with pytest.raises(ConfigError) as caught:
        _build(config)
    assert caught.value.problems == [
        "federation.providers[0].client_secret: environment variable TEST_OIDC_SECRET is not set or empty",
        'federation.providers[1].client_secrte: unknown key for type oidc (did you mean "client_secret"?)',
        "federation.providers[1].issuer: must be an https URL such as https://sso.example.com (http only on a loopback "
        "host), got 'http://sso.example.com'",
        "federation.providers[1].client_id: missing or empty (the client id the provider gave grantd)",
        "federation.providers[1].client_secret: environment variable TEST_OIDC_SECRET is not set or empty",
        'federation.providers[1].scopes: must include "openid"',
        "federation.providers[1].email_claim: must be a non-empty string (the ID token claim holding the e-mail)",
        "federation.providers[1].allowed_domains: 'Not A Domain' is not a domain (lower-case domain names such as example.com)",
        "federation.providers[1].create_unknown: must be true or false, got 'yes'",
        "federation.providers[2].client_secret: environment variable TEST_OIDC_SECRET is not set or empty",
        "federation.providers[2].scopes: must be a non-empty list of scopes",
    ]


def test_missing_oidc_keys_are_named():
    config = _config({"id": "bare", "type": "oidc"})
    with pytest.raises(ConfigError) as caught:
        _build(config)
    assert (
        caught.value.problems
        == [
            "federation.providers[0].issuer: missing (the provider's https issuer URL)",
            "federation.providers[0].client_id: missing or empty (the client id the provider gave grantd)",
        ]
    )  # client_secret is optional (D9: an upstream offering "none" needs none); checked against discovery at sign-in


def test_an_unknown_provider_type_is_a_config_error_with_a_suggestion():
    with pytest.raises(ConfigError) as caught:
        _build(_config(_oidc(type="oicd")))
    assert caught.value.problems == [
        "federation.providers[0].type: no provider type named 'oicd' (did you mean \"oidc\"?); available: oidc"
    ]


def test_a_factory_s_other_errors_are_reported_too(tmp_path, monkeypatch):
    """A KeyError is a missing key; a ValueError line without "key: " names the table."""
    (tmp_path / "odd_provider.py").write_text(
        "from grantd.hookspecs import hookimpl\n"
        "def needs_url(table, read_secret):\n    return table['url']\n"
        "def refuses(table, read_secret):\n    raise ValueError('this provider is switched off')\n"
        "@hookimpl\ndef federation_provider_types():\n    return {'needs-url': needs_url, 'refuses': refuses}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = _config(
        {"id": "a", "type": "needs-url"}, {"id": "b", "type": "refuses"}, modules=["odd_provider"]
    )
    with pytest.raises(ConfigError) as caught:
        _build(config)
    assert caught.value.problems == [
        "federation.providers[0].url: missing",
        "federation.providers[1]: this provider is switched off",
    ]


# -- the worked example from docs/plugins.md, through a real server ------------------------------

EXAMPLE = """
[[federation.providers]]
id = "corp"
type = "oidc"
name = "Corp SSO"
issuer = "https://sso.example.com"
client_id = "grantd"
client_secret = "file:corp-secret"

[[federation.providers]]
id = "static-1"
type = "static-example"
name = "Static login"
login_url = "https://login.example.com/start"
api_key = "env:TEST_STATIC_API_KEY"
"""


def _site_plugins(tmp_path):
    site = tmp_path / "site-plugins"
    site.mkdir(mode=0o755)
    shutil.copy(ROOT / "tests" / "plugins" / "federation_example.py", site / "federation_example.py")
    return site


def test_a_provider_type_from_a_site_plugin_is_listed_without_secrets(server_factory, tmp_path):
    site = _site_plugins(tmp_path)
    srv = server_factory(extra=f'[plugins]\nmodules = ["federation_example"]\npaths = ["{site}"]\n{EXAMPLE}')
    srv.env["PYTHONPATH"] = str(ROOT)  # found through [plugins] paths only
    srv.env["TEST_STATIC_API_KEY"] = API_KEY
    (srv.directory / "corp-secret").write_text(SECRET + "\n")
    (srv.directory / "corp-secret").chmod(0o600)
    validated = srv.grantd("config", "validate", str(srv.config_path))
    assert "valid" in validated.stdout
    srv.start()
    with srv.client() as http:  # no credential: a login page lists them
        r = http.get("/api/federation/providers")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "providers": [
            {"id": "corp", "type": "oidc", "name": "Corp SSO", "issuer": "https://sso.example.com"},
            {
                "id": "static-1",
                "type": "static-example",
                "name": "Static login",
                "login_url": "https://login.example.com/start",
            },
        ]
    }
    assert SECRET not in r.text and API_KEY not in r.text and "corp-secret" not in r.text
    assert SECRET not in srv.log() and API_KEY not in srv.log()


def test_no_providers_is_an_empty_list(server_factory):
    srv = server_factory().start()
    with srv.client() as http:
        assert http.get("/api/federation/providers").json() == {"providers": []}


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        (
            'type = "static-exampel"\nlogin_url = "https://l.example.com"\napi_key = "env:TEST_STATIC_API_KEY"',
            "federation.providers[0].type: no provider type named 'static-exampel' (did you mean \"static-example\"?); "
            "available: oidc, static-example",
        ),
        (
            'type = "static-example"\nlogin_url = "http://l.example.com"\napi_key = "env:TEST_STATIC_API_KEY"',
            "federation.providers[0].login_url: must be an https URL, got 'http://l.example.com'",
        ),
        (
            'type = "static-example"\nlogin_url = "https://l.example.com"\napi_key = "env:NO_SUCH_VARIABLE_X"',
            "federation.providers[0].api_key: environment variable NO_SUCH_VARIABLE_X is not set or empty",
        ),
    ],
)
def test_a_bad_provider_table_stops_serve_and_fails_validate(server_factory, table, problem):
    srv = server_factory(
        extra=f'[plugins]\nmodules = ["federation_example"]\n[[federation.providers]]\nid = "x"\n{table}\n'
    )
    srv.env["TEST_STATIC_API_KEY"] = API_KEY
    validated = srv.grantd("config", "validate", str(srv.config_path), check=False)
    assert validated.returncode == 1 and problem in validated.stderr, validated.stderr
    served = srv.grantd("serve", "--config", str(srv.config_path), check=False)
    assert served.returncode == 1 and problem in served.stderr, served.stderr


# -- the round trip against a tiny real OpenID provider ------------------------------------------
#
# ``Upstream`` is an OpenID provider on 127.0.0.1 (http.server in a thread; loopback http is allowed
# for issuers) whose answers a test shapes: discovery, JWKS, /authorize (answers at once with a
# code, as if the person had signed in there), /token (checks the client secret, the code, PKCE
# S256 and redirect_uri, then mints the id_token a test asks for) and /userinfo. grantd runs in
# process (tests.inproc) with its ManualClock; the upstream mints its times from the same clock.


CLIENT_ID = "grantd-test"
UPSTREAM_SECRET = "upstream-client-secret-0123456789"


def _new_key(alg: str) -> Any:
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _public_jwk(alg: str, key: Any, kid: str) -> dict[str, Any]:
    algorithm = jwt.get_algorithm_by_name(alg)
    jwk = algorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Upstream:
    """The tiny OpenID provider. ``reset()`` before each test; tests change the attributes."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.now: Callable[[], int] = lambda: 0
        self.keys: dict[str, tuple[str, Any]] = {}  # kid -> (alg, private key)
        self.reset()

    def reset(self) -> None:
        self.alg = "EdDSA"
        for alg in ("EdDSA", "ES256", "RS256"):
            if not any(a == alg for a, _ in self.keys.values()):
                self.keys[f"{alg.lower()}-1"] = (alg, _new_key(alg))
        self.auth_methods: list[str] = ["client_secret_basic", "client_secret_post"]
        self.discovery_issuer: str | None = None
        self.discovery_extra: dict[str, Any] = {}
        self.email = ""
        self.email_verified: Any = True
        self.name = "Federated Person"
        self.claims: dict[str, Any] = {}  # merged into the id_token's claims (None deletes one)
        self.mint: Callable[[dict[str, Any]], str] | None = None  # replaces the signing
        self.authorize_error: str | None = None
        self.authorize_error_description: str | None = None
        self.token_error: str | None = None  # /token answers 400 {error: this}
        self.userinfo: dict[str, Any] | None = None
        self.codes: dict[str, dict[str, Any]] = {}
        self.jwks_fetches = 0
        self.token_requests: list[dict[str, Any]] = []

    def current_kid(self) -> str:
        return next(kid for kid, (alg, _) in reversed(list(self.keys.items())) if alg == self.alg)

    def rotate(self) -> str:
        kid = f"{self.alg.lower()}-{secrets.token_hex(4)}"
        self.keys[kid] = (self.alg, _new_key(self.alg))
        return kid

    def sign(self, claims: dict[str, Any], kid: str | None = None) -> str:
        kid = kid or self.current_kid()
        alg, key = self.keys[kid]
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})

    def id_token_claims(self, request: dict[str, Any]) -> dict[str, Any]:
        now = self.now()
        claims = {
            "iss": self.issuer,
            "sub": "upstream-" + self.email,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": request["nonce"],
            "email": self.email,
            "email_verified": self.email_verified,
            "name": self.name,
        }
        for key, value in self.claims.items():
            if value is None:
                claims.pop(key, None)
            else:
                claims[key] = value
        return claims

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/.well-known/openid-configuration":
                    self._json(
                        200,
                        {
                            "issuer": upstream.discovery_issuer or upstream.issuer,
                            "authorization_endpoint": f"{upstream.issuer}/authorize",
                            "token_endpoint": f"{upstream.issuer}/token",
                            "jwks_uri": f"{upstream.issuer}/jwks",
                            "userinfo_endpoint": f"{upstream.issuer}/userinfo",
                            "token_endpoint_auth_methods_supported": upstream.auth_methods,
                            "id_token_signing_alg_values_supported": ["EdDSA", "ES256", "RS256"],
                            **upstream.discovery_extra,
                        },
                    )
                elif url.path == "/jwks":
                    upstream.jwks_fetches += 1
                    self._json(
                        200,
                        {"keys": [_public_jwk(alg, key, kid) for kid, (alg, key) in upstream.keys.items()]},
                    )
                elif url.path == "/authorize":
                    assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID
                    assert query["code_challenge_method"] == "S256" and set(query["scope"].split()) >= {
                        "openid",
                        "email",
                    }
                    back = query["redirect_uri"]
                    if upstream.authorize_error:
                        refusal = {"error": upstream.authorize_error, "state": query["state"]}
                        if upstream.authorize_error_description:
                            refusal["error_description"] = upstream.authorize_error_description
                        self._redirect(back + "?" + urlencode(refusal))
                        return
                    code = secrets.token_urlsafe(16)
                    upstream.codes[code] = query
                    self._redirect(back + "?" + urlencode({"code": code, "state": query["state"]}))
                elif url.path == "/userinfo":
                    if (
                        upstream.userinfo is None
                        or self.headers.get("Authorization") != "Bearer upstream-access"
                    ):
                        self._json(401, {"error": "invalid_token"})
                    else:
                        self._json(200, upstream.userinfo)
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                authorization = self.headers.get("Authorization")
                upstream.token_requests.append({"form": form, "authorization": authorization})
                # strict, as the peer's IdP is: client_id always in the form, and only an advertised
                # method counts (Basic header, client_secret in the form, or neither: "none")
                method = (
                    "client_secret_basic"
                    if authorization
                    else "client_secret_post"
                    if "client_secret" in form
                    else "none"
                )
                basic = "Basic " + base64.b64encode(f"{CLIENT_ID}:{UPSTREAM_SECRET}".encode()).decode()
                proved = {
                    "client_secret_basic": authorization == basic,
                    "client_secret_post": form.get("client_secret") == UPSTREAM_SECRET,
                    "none": True,
                }[method]
                if form.get("client_id") != CLIENT_ID or method not in upstream.auth_methods or not proved:
                    self._json(401, {"error": "invalid_client", "error_description": f"{method} refused"})
                    return
                if upstream.token_error:
                    self._json(400, {"error": upstream.token_error, "error_description": "as the test asked"})
                    return
                request = upstream.codes.pop(form.get("code", ""), None)
                if request is None or form.get("grant_type") != "authorization_code":
                    self._json(400, {"error": "invalid_grant", "error_description": "unknown code"})
                    return
                challenge = _b64(hashlib.sha256(form.get("code_verifier", "").encode()).digest())
                if (
                    challenge != request["code_challenge"]
                    or form.get("redirect_uri") != request["redirect_uri"]
                ):
                    self._json(
                        400, {"error": "invalid_grant", "error_description": "PKCE or redirect_uri mismatch"}
                    )
                    return
                claims = upstream.id_token_claims(request)
                token = upstream.mint(claims) if upstream.mint else upstream.sign(claims)
                self._json(
                    200,
                    {
                        "access_token": "upstream-access",
                        "token_type": "Bearer",
                        "expires_in": 300,
                        "id_token": token,
                    },
                )

        return Handler

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _oidc_table(provider_id: str, issuer: str, *, secret: bool = True, **keys: Any) -> str:
    lines = [
        f'id = "{provider_id}"',
        'type = "oidc"',
        f'name = "{provider_id.title()} SSO"',
        f'issuer = "{issuer}"',
        f'client_id = "{CLIENT_ID}"',
    ] + (['client_secret = "file:upstream-secret"'] if secret else [])
    lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "[[federation.providers]]\n" + "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    found = Upstream()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream) -> Iterator[InProcessServer]:
    """grantd with five providers on the same upstream: ``corp`` (known people only), ``open``
    (create_unknown), ``narrow`` (create_unknown, example.org only), ``public`` (no client_secret)
    and ``trusting`` (trust_email, example.org only)."""
    extra = (
        "[limits]\npasskey_per_address = 0\n\n"
        + _oidc_table("corp", upstream.issuer)
        + _oidc_table("open", upstream.issuer, create_unknown=True)
        + _oidc_table("narrow", upstream.issuer, create_unknown=True, allowed_domains=["example.org"])
        + _oidc_table("public", upstream.issuer, secret=False)
        + _oidc_table("trusting", upstream.issuer, trust_email=True, allowed_domains=["example.org"])
    )
    server = InProcessServer(tmp_path_factory.mktemp("federation") / "srv", extra=extra)
    secret = server.directory / "upstream-secret"
    secret.write_text(UPSTREAM_SECRET + "\n")
    secret.chmod(0o600)
    server.start()
    upstream.now = server.clock.now_s
    yield server
    server.stop()


@pytest.fixture
def up(upstream: Upstream, fed: InProcessServer) -> Upstream:
    upstream.reset()
    upstream.email = fresh("fed")
    return upstream


class Flow:
    """One browser's sign-in: the answers of grantd's start, the upstream's /authorize and grantd's
    callback, and the client (its cookies) to look around afterwards."""

    def __init__(
        self,
        srv: InProcessServer,
        provider: str = "corp",
        *,
        next_path: str | None = None,
        http: httpx.Client | None = None,
    ):
        self.http = http or httpx.Client(base_url=srv.url, timeout=10)
        self.start = self.http.get(
            f"/auth/federated/{provider}", params={"next": next_path} if next_path else None
        )
        self.authorize: httpx.Response | None = None
        self.callback: httpx.Response | None = None
        if self.start.status_code == 302 and self.start.headers["location"].startswith("http://127.0.0.1"):
            self.authorize = self.http.get(self.start.headers["location"])
            if self.authorize.status_code == 302:
                self.callback_url = self.authorize.headers["location"]
                self.callback = self.http.get(self.callback_url)

    def me(self) -> httpx.Response:
        return self.http.get("/api/me")

    def signed_in(self) -> bool:
        return self.callback is not None and self.callback.status_code == 303 and self.me().status_code == 200


def _refused(flow: Flow, status: int, *words: str) -> None:
    answer = flow.callback
    assert answer is not None, (flow.start.status_code, flow.start.text[:300])
    assert answer.status_code == status, (answer.status_code, answer.text[:2000])
    assert answer.headers["content-type"].startswith("text/html")
    assert "Traceback" not in answer.text
    text = " ".join(answer.text.split())
    for word in words:
        assert word in text, (word, text[-1500:])
    assert "grantd_session" not in answer.headers.get("set-cookie", "")
    assert flow.me().status_code == 401


@pytest.mark.parametrize("alg", ["EdDSA", "ES256", "RS256"])
def test_a_known_person_signs_in_through_the_upstream(fed, up, alg):
    up.alg = alg
    person = create_person(fed, up.email, name="Known Person")
    flow = Flow(fed, next_path="/account?tab=keys")
    start = urlsplit(flow.start.headers["location"])
    query = parse_qs(start.query)
    assert start.path == "/authorize" and query["code_challenge_method"] == ["S256"] and query["nonce"][0]
    assert query["redirect_uri"] == [f"{fed.url}/auth/federated/corp/callback"]
    assert query["scope"] == ["openid email profile"] and len(query["state"][0]) >= 43
    assert flow.start.headers["cache-control"] == "no-store"
    binding = flow.start.headers["set-cookie"]
    assert "grantd_federation=" in binding and "HttpOnly" in binding and "Path=/auth/federated/" in binding
    assert flow.callback is not None and flow.callback.status_code == 303, flow.callback.text[:2000]
    assert flow.callback.headers["location"] == "/account?tab=keys"
    me = flow.me().json()
    assert me["email"] == up.email and me.get("person_id", person["person_id"]) == person["person_id"]
    # the code was exchanged with the client secret (Basic) and the PKCE verifier
    (exchange,) = [r for r in up.token_requests if r["form"].get("code_verifier")]
    assert exchange["authorization"].startswith("Basic ") and "client_secret" not in exchange["form"]
    assert 43 <= len(exchange["form"]["code_verifier"]) <= 128


def _forget_discovery(srv: InProcessServer) -> None:
    """Drop the cached discovery documents (kept an hour), so a changed upstream is read again."""
    for entry in srv.app.ctx.services.federation:
        entry.provider._discovery = None


def test_client_secret_post_when_the_upstream_offers_only_that(fed, up):
    up.auth_methods = ["client_secret_post"]
    _forget_discovery(fed)
    create_person(fed, up.email)
    flow = Flow(fed)
    assert flow.signed_in()
    (exchange,) = up.token_requests
    assert exchange["authorization"] is None and exchange["form"]["client_secret"] == UPSTREAM_SECRET
    assert exchange["form"]["client_id"] == CLIENT_ID
    up.reset()
    _forget_discovery(fed)


# -- D9: the method the upstream advertises, client_id always; trust_email ---------------------------


def _exchange_of(up: Upstream) -> dict[str, Any]:
    (exchange,) = [r for r in up.token_requests if r["form"].get("code_verifier")]
    return exchange


@pytest.mark.parametrize(
    ("advertised", "provider", "sent"),
    [
        # the peer's IdP: none and private_key_jwt only. Before D9 grantd sent Basic without client_id: 401
        (["none", "private_key_jwt"], "corp", "none"),
        (["none", "private_key_jwt"], "public", "none"),
        (["private_key_jwt", "client_secret_basic", "none"], "corp", "client_secret_basic"),
        (["client_secret_basic"], "corp", "client_secret_basic"),
        (["client_secret_post", "none"], "corp", "client_secret_post"),
        (["client_secret_basic", "client_secret_post", "none"], "public", "none"),
        (None, "corp", "client_secret_basic"),  # not advertised: the OpenID Connect Discovery default
    ],
)
def test_the_code_exchange_uses_an_advertised_method_and_always_sends_client_id(
    fed, up, advertised, provider, sent
):
    up.auth_methods = advertised if advertised is not None else ["client_secret_basic"]
    if advertised is None:
        up.discovery_extra = {"token_endpoint_auth_methods_supported": None}
    _forget_discovery(fed)
    try:
        create_person(fed, up.email)
        flow = Flow(fed, provider)
        assert flow.signed_in(), (
            (flow.callback.status_code, flow.callback.text[-800:]) if flow.callback else flow.start.text
        )
        exchange = _exchange_of(up)
        assert exchange["form"]["client_id"] == CLIENT_ID
        if sent == "none":  # no secret at all: neither a Basic header nor a form member
            assert exchange["authorization"] is None and "client_secret" not in exchange["form"]
            assert UPSTREAM_SECRET not in json.dumps(exchange)
        elif sent == "client_secret_basic":
            assert exchange["authorization"].startswith("Basic ") and "client_secret" not in exchange["form"]
        else:
            assert exchange["authorization"] is None and exchange["form"]["client_secret"] == UPSTREAM_SECRET
    finally:
        up.reset()
        _forget_discovery(fed)


@pytest.mark.parametrize(
    ("advertised", "provider", "words"),
    [
        (["client_secret_basic", "client_secret_post"], "public", "has no client_secret"),
        (["private_key_jwt"], "corp", "offers no client authentication grantd can use"),
        (["tls_client_auth", "private_key_jwt"], "public", "offers no client authentication grantd can use"),
    ],
)
def test_no_usable_method_is_refused_before_the_browser_leaves(fed, up, advertised, provider, words):
    up.auth_methods = advertised
    _forget_discovery(fed)
    try:
        flow = Flow(fed, provider)
        assert flow.start.status_code == 503 and words in " ".join(flow.start.text.split()), flow.start.text[
            -800:
        ]
        assert flow.authorize is None and up.token_requests == []
    finally:
        up.reset()
        _forget_discovery(fed)


def test_a_public_provider_without_a_secret_is_built_and_listed(tmp_path):
    config = _config({k: v for k, v in _oidc().items() if k != "client_secret"})
    (built,) = _build(config)
    assert built.provider.client_secret is None and built.provider.trust_email is False
    bad = _config(_oidc(trust_email="yes"))
    with pytest.raises(ConfigError) as caught:
        _build(bad)
    assert caught.value.problems == ["federation.providers[0].trust_email: must be true or false, got 'yes'"]


@pytest.mark.parametrize(
    ("claims", "userinfo", "signed_in"),
    [
        ({"email_verified": None}, None, True),  # never sent: trust_email vouches
        ({"email_verified": False}, None, False),  # an explicit false is always refused
        ({"email_verified": "false"}, None, False),
        ({"email_verified": True}, None, True),
        (
            {"email": None, "email_verified": None},
            {"email_verified": None},
            True,
        ),  # from userinfo, never sent
        ({"email": None, "email_verified": None}, {"email_verified": False}, False),  # userinfo says false
    ],
)
def test_trust_email_accepts_a_missing_email_verified_but_never_false(fed, up, claims, userinfo, signed_in):
    up.email = fresh("trusted", "example.org")
    create_person(fed, up.email)
    _mutated(up, **claims)
    if userinfo is not None:
        up.userinfo = {"sub": "upstream-" + up.email, "email": up.email, **userinfo}
        if userinfo.get("email_verified") is None:
            up.userinfo.pop("email_verified")
    flow = Flow(fed, "trusting")
    if signed_in:
        assert flow.signed_in(), flow.callback.text[-800:] if flow.callback else flow.start.text
    else:
        _refused(flow, 403, "has not verified")


def test_trust_email_is_per_provider_and_allowed_domains_still_apply(fed, up):
    create_person(fed, up.email)  # an example.com address
    _mutated(up, email_verified=None)
    _refused(Flow(fed, "corp"), 403, "has not verified")  # corp does not trust: a missing claim is refused
    _refused(Flow(fed, "trusting"), 403, "may not sign in addresses of example.com")


def test_the_login_page_offers_the_providers_with_next(fed, up):
    page = httpx.get(f"{fed.url}/login", params={"next": "/account"})
    assert page.status_code == 200
    for provider in ("corp", "open", "narrow"):
        assert f'href="/auth/federated/{provider}?next=/account"' in page.text
    assert "Sign in with Corp SSO" in page.text
    plain = httpx.get(f"{fed.url}/login")
    assert 'href="/auth/federated/corp"' in plain.text


def test_next_never_leaves_the_site(fed, up):
    create_person(fed, up.email)
    for evil in ("//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:alert(1)"):
        flow = Flow(fed, next_path=evil)
        assert flow.callback is not None and flow.callback.status_code == 303
        assert flow.callback.headers["location"] == "/grants", evil


def _mutated(up: Upstream, **claims: Any) -> None:
    up.claims = claims


@pytest.mark.parametrize(
    ("change", "status", "words"),
    [
        ({"iss": "http://127.0.0.1:1/other"}, 400, ["issued by someone else"]),
        ({"aud": "someone-else"}, 400, ["not meant for grantd"]),
        ({"aud": [CLIENT_ID, "someone-else"]}, 400, ["another client", "azp"]),
        ({"aud": [CLIENT_ID, "someone-else"], "azp": "someone-else"}, 400, ["another client"]),
        ({"nonce": "not-the-nonce"}, 400, ["nonce differs"]),
        ({"nonce": None}, 400, ["nonce differs"]),
        ({"exp": 1_000_000}, 400, ["has expired"]),
        ({"iat": 4_000_000_000, "exp": 4_000_000_300}, 400, ["issued in the future"]),
        ({"sub": None}, 400, ["lacks the sub claim"]),
        ({"email_verified": False}, 403, ["has not verified the e-mail address"]),
        ({"email_verified": None}, 403, ["has not verified"]),
        ({"email_verified": "false"}, 403, ["has not verified"]),
    ],
)
def test_an_id_token_that_does_not_check_out_is_refused(fed, up, change, status, words):
    create_person(fed, up.email)
    _mutated(up, **change)
    _refused(Flow(fed), status, *words)


def test_the_e_mail_is_compared_without_case(fed, up):
    create_person(fed, up.email)
    _mutated(up, email="  " + up.email.upper() + " ")
    flow = Flow(fed)
    assert flow.signed_in() and flow.me().json()["email"] == up.email


def test_allowed_domains_match_exactly_not_subdomains(fed, up):
    up.email = fresh("fed", domain="sub.example.org")
    _refused(Flow(fed, "narrow"), 403, "may not sign in addresses of sub.example.org")


def test_several_audiences_with_our_azp_are_accepted(fed, up):
    create_person(fed, up.email)
    _mutated(up, aud=[CLIENT_ID, "someone-else"], azp=CLIENT_ID)
    assert Flow(fed).signed_in()


def test_a_signature_by_another_key_is_refused(fed, up):
    create_person(fed, up.email)
    stranger = _new_key("EdDSA")
    up.mint = lambda claims: jwt.encode(
        claims, stranger, algorithm="EdDSA", headers={"kid": up.current_kid()}
    )
    _refused(Flow(fed), 400, "signature does not verify")


def test_a_tampered_payload_is_refused(fed, up):
    create_person(fed, up.email)
    victim = fresh("victim")
    create_person(fed, victim)

    def tamper(claims: dict[str, Any]) -> str:
        header, _, signature = up.sign(claims).split(".")
        body = _b64(json.dumps({**claims, "email": victim}).encode())
        return f"{header}.{body}.{signature}"

    up.mint = tamper
    _refused(Flow(fed), 400, "signature does not verify")


@pytest.mark.parametrize("alg", ["none", "HS256"])
def test_alg_none_and_hmac_are_refused(fed, up, alg):
    """alg confusion: an HMAC keyed with something public (the client secret here), or no signature."""
    create_person(fed, up.email)
    kid = up.current_kid()
    if alg == "none":
        up.mint = lambda claims: (
            _b64(json.dumps({"alg": "none", "kid": kid}).encode())
            + "."
            + _b64(json.dumps(claims).encode())
            + "."
        )
    else:
        up.mint = lambda claims: jwt.encode(claims, UPSTREAM_SECRET, algorithm="HS256", headers={"kid": kid})
    _refused(Flow(fed), 400, "grantd accepts EdDSA, ES256, RS256")


def test_an_alg_that_does_not_fit_the_key_is_refused(fed, up):
    """The header says RS256 but names the Ed25519 key's kid."""
    create_person(fed, up.email)
    rsa_kid = next(kid for kid, (alg, _) in up.keys.items() if alg == "RS256")
    ed_kid = up.current_kid()
    up.mint = lambda claims: jwt.encode(
        claims, up.keys[rsa_kid][1], algorithm="RS256", headers={"kid": ed_kid}
    )
    _refused(Flow(fed), 400, "names alg RS256")


def test_an_unknown_kid_makes_grantd_fetch_the_keys_again(fed, up):
    create_person(fed, up.email)
    assert Flow(fed).signed_in()  # the JWKS is cached now
    before = up.jwks_fetches
    assert Flow(fed).signed_in()
    assert up.jwks_fetches == before  # cached
    up.rotate()  # the upstream signs with a new key from now on
    assert Flow(fed).signed_in()
    assert up.jwks_fetches == before + 1
    # a kid the upstream does not publish even after a fresh fetch
    up.mint = lambda claims: jwt.encode(
        claims, _new_key("EdDSA"), algorithm="EdDSA", headers={"kid": "nobody"}
    )
    _refused(Flow(fed), 400, "a key its JWKS does not publish")
    assert up.jwks_fetches == before + 2


def test_an_unknown_person_is_refused_unless_create_unknown(fed, up):
    _refused(Flow(fed, "corp"), 403, "There is no account for", up.email)
    with fed.admin() as http:
        assert http.get(f"/api/admin/users/{up.email}").status_code == 404
    flow = Flow(fed, "open")
    assert flow.signed_in()
    assert flow.me().json()["email"] == up.email
    with fed.admin() as http:
        created = http.get(f"/api/admin/users/{up.email}")
    assert created.status_code == 200 and created.json()["name"] == "Federated Person"
    assert created.json()["admin"] is False


def test_create_unknown_never_creates_an_administrator(fed, up):
    up.email = "root@example.com"  # in admin.emails of the test config
    _refused(Flow(fed, "open"), 403, "never created by a sign-in")


def test_allowed_domains(fed, up):
    _refused(Flow(fed, "narrow"), 403, "may not sign in addresses of example.com")
    up.email = fresh("fed", domain="example.org")
    assert Flow(fed, "narrow").signed_in()


def test_a_disabled_person_and_an_agent_are_refused(fed, up, tmp_path):
    create_person(fed, up.email)
    with fed.admin() as http:
        assert http.patch(f"/api/admin/users/{up.email}", json={"status": "disabled"}).status_code == 200
    _refused(Flow(fed, "open"), 403, "This account is disabled")
    from conftest import signed_in

    agent = signed_in(fed, tmp_path / "agent")  # type: ignore[arg-type]
    up.email = agent.email
    _refused(Flow(fed, "open"), 403, "is an agent")


def test_an_upstream_that_refuses_is_a_readable_page(fed, up):
    create_person(fed, up.email)
    up.authorize_error = "access_denied"
    _refused(Flow(fed), 403, "did not sign you in: access_denied")


def test_a_refusal_shows_only_oauth_error_codes_never_free_text(fed, up):
    """Content spoofing (issue 19): the callback's ``error_description`` and unknown ``error``
    values are the query's words, not ours: they never reach the page."""
    create_person(fed, up.email)
    up.authorize_error, up.authorize_error_description = (
        "server_error",
        "Your account is locked, call +1 555 0100",
    )
    flow = Flow(fed)
    _refused(flow, 400, "did not sign you in: server_error")
    assert "locked" not in flow.callback.text
    up.authorize_error, up.authorize_error_description = "Your_account_is_locked_call_+1_555_0100", None
    flow = Flow(fed)
    _refused(flow, 400, "did not sign you in: an error")
    assert "locked" not in flow.callback.text
    up.authorize_error = None


def test_a_refused_code_exchange_is_a_readable_page(fed, up):
    create_person(fed, up.email)
    up.token_error = "invalid_grant"
    _refused(Flow(fed), 400, "refused the authorization code: invalid_grant", "Start again")
    up.token_error = None
    corp = next(e.provider for e in fed.app.ctx.services.federation if e.id == "corp")
    right, corp.client_secret = corp.client_secret, "not-the-secret"
    try:
        _refused(Flow(fed), 503, "refused to exchange the authorization code: invalid_client")
    finally:
        corp.client_secret = right
    assert UPSTREAM_SECRET not in Flow(fed).callback.text  # type: ignore[union-attr]


def test_a_provider_object_that_misbehaves_is_a_page_and_a_log_line(fed, up):
    """A plugin's bug (an exception, or not a FederatedIdentity) is never a 500."""
    corp = next(e.provider for e in fed.app.ctx.services.federation if e.id == "corp")
    create_person(fed, up.email)

    async def broken(*args, **kwargs):
        raise RuntimeError("plugin bug")

    async def odd(*args, **kwargs):
        return {"email": up.email}

    for replacement in (broken, odd):
        corp.finish = replacement
        try:
            _refused(Flow(fed), 503, "Signing in through Corp SSO failed")
        finally:
            del corp.finish
    from grantd.hookspecs import FederationError, FederationStart

    async def unkeepable(*args, **kwargs):
        return FederationStart(url="https://sso.example.com/authorize", kept={"x": object()})

    async def odd_status(*args, **kwargs):
        raise FederationError("odd", status="teapot")  # type: ignore[arg-type]

    for replacement, status in ((broken, 503), (unkeepable, 503), (odd_status, 400)):
        corp.begin = replacement
        try:
            r = httpx.get(f"{fed.url}/auth/federated/corp")
            assert r.status_code == status and "plugin bug" not in r.text and "Traceback" not in r.text
        finally:
            del corp.begin


def test_the_state_is_single_use_and_bound_to_the_browser(fed, up):
    create_person(fed, up.email)
    flow = Flow(fed)
    assert flow.signed_in()
    replay = flow.http.get(flow.callback_url)
    assert replay.status_code == 400 and "already used or has expired" in " ".join(replay.text.split())
    # a callback link opened in another browser (an attacker sending the victim their own link)
    first = httpx.Client(base_url=fed.url, timeout=10)
    started = first.get("/auth/federated/corp")
    authorized = first.get(started.headers["location"])
    other = httpx.Client(base_url=fed.url, timeout=10)
    answer = other.get(authorized.headers["location"])
    assert answer.status_code == 400 and "started in another browser" in " ".join(answer.text.split())
    assert other.get("/api/me").status_code == 401
    # the link is used up by that attempt, even in the right browser
    assert first.get(authorized.headers["location"]).status_code == 400


def test_a_flow_older_than_ten_minutes_is_refused(fed, up):
    create_person(fed, up.email)
    http = httpx.Client(base_url=fed.url, timeout=10)
    started = http.get("/auth/federated/corp")
    authorized = http.get(started.headers["location"])
    fed.clock.advance(601)
    try:
        answer = http.get(authorized.headers["location"])
    finally:
        fed.clock.advance(-601)
    assert answer.status_code == 400 and "has expired" in answer.text


def test_bad_links_are_html_pages_not_errors(fed, up):
    for path, status in [
        ("/auth/federated/nobody", 404),
        ("/auth/federated/nobody/callback?state=x", 404),
        ("/auth/federated/corp/callback", 400),
        ("/auth/federated/corp/callback?state=forged", 400),
        ("/auth/federated/corp/callback?code=x&state=" + "a" * 500, 400),
        ("/auth/federated/corp/callback?error=access_denied", 400),
    ]:
        r = httpx.get(fed.url + path)
        assert r.status_code == status, (path, r.status_code, r.text[:300])
        assert r.headers["content-type"].startswith("text/html") and "Traceback" not in r.text


def test_the_state_of_one_provider_does_not_finish_another(fed, up):
    create_person(fed, up.email)
    http = httpx.Client(base_url=fed.url, timeout=10)
    started = http.get("/auth/federated/corp")
    callback = http.get(started.headers["location"]).headers["location"]
    answer = http.get(callback.replace("/auth/federated/corp/", "/auth/federated/open/"))
    assert answer.status_code == 400 and http.get("/api/me").status_code == 401


def test_the_e_mail_may_come_from_userinfo(fed, up):
    create_person(fed, up.email)
    up.userinfo = {"sub": "upstream-" + up.email, "email": up.email, "email_verified": True}
    _mutated(up, email=None, email_verified=None)
    assert Flow(fed).signed_in()
    up.userinfo = {"sub": "someone-else", "email": up.email, "email_verified": True}
    _refused(Flow(fed), 503, "about someone else")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"discovery_issuer": "https://evil.example"}, "names another issuer"),
        ({"discovery_extra": {"padding": "x" * 600_000}}, "too large"),
        ({"discovery_extra": {"token_endpoint": "http://sso.example.com/token"}}, "no usable token_endpoint"),
    ],
)
def test_a_discovery_document_that_does_not_check_out_is_refused(tmp_path, upstream, change, words):
    upstream.reset()
    for key, value in change.items():
        setattr(upstream, key, value)
    server = InProcessServer(tmp_path / "srv", extra=_oidc_table("corp", upstream.issuer))
    (server.directory / "upstream-secret").write_text(UPSTREAM_SECRET)
    (server.directory / "upstream-secret").chmod(0o600)
    server.start()
    try:
        r = httpx.get(f"{server.url}/auth/federated/corp")
        assert r.status_code == 503 and words in r.text, r.text[-800:]
    finally:
        server.stop()
        upstream.reset()


def test_an_upstream_that_is_down_is_a_readable_page(tmp_path):
    from conftest import free_port

    server = InProcessServer(tmp_path / "srv", extra=_oidc_table("corp", f"http://127.0.0.1:{free_port()}"))
    (server.directory / "upstream-secret").write_text(UPSTREAM_SECRET)
    (server.directory / "upstream-secret").chmod(0o600)
    server.start()
    try:
        r = httpx.get(f"{server.url}/auth/federated/corp")
        assert r.status_code == 503 and "cannot be reached right now" in r.text
        assert r.headers["content-type"].startswith("text/html")
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("issuer", "ok"),
    [
        ("http://localhost:8080", True),
        ("http://127.0.0.1:9000/realms/x", True),
        ("http://[::1]:9000", True),
        ("https://sso.example.com/", True),
        ("http://sso.example.com", False),
        ("http://localhost.evil.example", False),
        ("http://127.0.0.1.nip.io", False),
        ("ftp://localhost", False),
    ],
)
def test_http_issuers_only_on_a_loopback_host(issuer, ok):
    config = _config(_oidc(issuer=issuer))
    if ok:
        (built,) = _build(config)
        assert built.provider.issuer == issuer.rstrip("/") and issuer in built.provider.issuers
    else:
        with pytest.raises(ConfigError):
            _build(config)


# -- the worked example of docs/plugins.md, signing people in ------------------------------------


class ExampleLoginPage:
    """The login page a "static-example" provider sends people to: it signs ``email`` for the
    nonce grantd sent, and sends the browser back."""

    def __init__(self, api_key: str):
        self.email = ""
        page = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                from federation_example import signature  # the module grantd loaded through [plugins]

                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                name = "Example Person"
                sig = signature(api_key, query["nonce"], page.email, name)
                back = (
                    query["redirect_uri"]
                    + "?"
                    + urlencode({"state": query["state"], "email": page.email, "name": name, "sig": sig})
                )
                self.send_response(302)
                self.send_header("Location", back)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/start"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_worked_example_provider_type_signs_people_in(tmp_path):
    site = _site_plugins(tmp_path)
    page = ExampleLoginPage(API_KEY)
    (tmp_path / "api-key").write_text(API_KEY)
    extra = (
        f'[plugins]\nmodules = ["federation_example"]\npaths = ["{site}"]\n'
        f'[[federation.providers]]\nid = "static-1"\ntype = "static-example"\nname = "Static login"\n'
        f'login_url = "{page.url}"\napi_key = "file:{tmp_path / "api-key"}"\ncreate_unknown = true\n'
    )
    server = InProcessServer(tmp_path / "srv", extra=extra).start()
    try:
        page.email = fresh("example")
        flow = Flow(server, "static-1", next_path="/account")
        assert flow.callback is not None and flow.callback.status_code == 303, (
            flow.callback.text if flow.callback else flow.start.text
        )
        assert flow.callback.headers["location"] == "/account"
        assert flow.me().json()["email"] == page.email
        # a forged signature is refused readably
        http = httpx.Client(base_url=server.url, timeout=10)
        started = http.get("/auth/federated/static-1")
        back = http.get(started.headers["location"]).headers["location"].replace("sig=", "sig=00")
        answer = http.get(back)
        assert answer.status_code == 400 and "not signed with the shared key" in answer.text
    finally:
        server.stop()
        page.server.shutdown()


def test_starting_sign_ins_is_limited_per_address(tmp_path, upstream):
    upstream.reset()
    extra = "[limits]\npasskey_per_address = 2\n\n" + _oidc_table("corp", upstream.issuer)
    server = InProcessServer(tmp_path / "srv", extra=extra)
    (server.directory / "upstream-secret").write_text(UPSTREAM_SECRET)
    (server.directory / "upstream-secret").chmod(0o600)
    server.start()
    try:
        answers = [httpx.get(f"{server.url}/auth/federated/corp") for _ in range(3)]
        assert [a.status_code for a in answers] == [302, 302, 429]
        assert (
            answers[2].headers["content-type"].startswith("text/html") and "Retry-After" in answers[2].headers
        )
        assert "Too many sign-in attempts" in answers[2].text
    finally:
        server.stop()


@pytest.mark.slow
def test_an_upstream_that_drips_its_discovery_is_cut_off_at_the_deadline(tmp_path):
    """D12: the upstream's documents are fetched under one overall deadline (5 s), so an upstream that
    sends its discovery document a byte a second cannot hold a sign-in (httpx's per-read timeout never
    fires on it)."""
    import time

    from oauth_support import DrippingServer

    drip = DrippingServer(every=1.0)
    server = InProcessServer(tmp_path / "srv", extra=_oidc_table("corp", f"http://127.0.0.1:{drip.port}"))
    (server.directory / "upstream-secret").write_text(UPSTREAM_SECRET)
    (server.directory / "upstream-secret").chmod(0o600)
    server.start()
    try:
        started = time.monotonic()
        r = httpx.get(f"{server.url}/auth/federated/corp", timeout=30)
        took = time.monotonic() - started
        assert r.status_code == 503 and "cannot be reached right now" in r.text, r.text[-800:]
        assert 4.5 <= took < 9, took
    finally:
        server.stop()
        drip.close()
