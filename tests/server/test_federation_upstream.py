"""Federation (D9) against upstreams that differ: the client authentication method the upstream advertises, client_id always, trust_email per provider, and the worked plugin example signing people in. Shared fixtures: test_federation."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest
from inproc import InProcessServer
from people_support import create_person, fresh

from grantd.config import ConfigError

from server import test_federation

# fixtures and helpers shared with the other parts (pytest finds a fixture by its module-level name)
oidc_secret = test_federation.oidc_secret  # autouse: the providers' secret in the environment
API_KEY = test_federation.API_KEY
CLIENT_ID = test_federation.CLIENT_ID
Flow = test_federation.Flow
UPSTREAM_SECRET = test_federation.UPSTREAM_SECRET
Upstream = test_federation.Upstream
_b64 = test_federation._b64
_build = test_federation._build
_config = test_federation._config
_forget_discovery = test_federation._forget_discovery
_new_key = test_federation._new_key
_oidc = test_federation._oidc
_oidc_table = test_federation._oidc_table
_refused = test_federation._refused
_site_plugins = test_federation._site_plugins
fed = test_federation.fed
up = test_federation.up
upstream = test_federation.upstream


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
