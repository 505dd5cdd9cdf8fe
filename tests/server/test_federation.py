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
