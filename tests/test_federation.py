"""Upstream identity providers: [[federation.providers]] tables built through the plugins'
federation_provider_types factories at start, reported as config errors when wrong, and listed
publicly (without secrets) at GET /api/federation/providers."""

from __future__ import annotations

import shutil

import pytest

from grantd.config import ConfigError, validate
from grantd.plugin_manager import build_federation_providers, build_plugin_manager

from conftest import ROOT

TOKEN = {"management_token": "x" * 20}
SECRET = "oidc-client-secret-value-1234"
API_KEY = "static-api-key-value-5678"


def _config(*providers: dict, tmp_path=None, modules=()):
    raw = {"version": 1, "admin": TOKEN, "federation": {"providers": list(providers)},
           "plugins": {"modules": list(modules)}}
    return validate(raw, (tmp_path / "grantd.toml") if tmp_path else None)


def _oidc(**overrides) -> dict:
    return {"id": "corp", "type": "oidc", "issuer": "https://sso.example.com", "client_id": "grantd",
            "client_secret": "env:TEST_OIDC_SECRET", **overrides}


@pytest.fixture(autouse=True)
def oidc_secret(monkeypatch):
    monkeypatch.setenv("TEST_OIDC_SECRET", SECRET)


def _build(config):
    return build_federation_providers(build_plugin_manager(config), config)


def test_an_oidc_provider_is_built_with_its_secret_and_defaults(tmp_path):
    (tmp_path / "corp-secret").write_text(SECRET + "\n")
    (tmp_path / "corp-secret").chmod(0o600)
    config = _config(_oidc(name="Corp SSO", client_secret="file:corp-secret", allowed_domains=["example.com"]),
                     tmp_path=tmp_path)
    (built,) = _build(config)
    assert built.provider.client_secret == SECRET and built.provider.allowed_domains == ("example.com",)
    assert built.public_info() == {"id": "corp", "type": "oidc", "name": "Corp SSO", "issuer": "https://sso.example.com"}
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
        _oidc(id="second", issuer="http://sso.example.com", client_id=" ", scopes=["email"], email_claim="",
              allowed_domains=["Not A Domain"], create_unknown="yes", client_secrte="x"),
        _oidc(id="third", scopes="openid"),
    )
    with pytest.raises(ConfigError) as caught:
        _build(config)
    assert caught.value.problems == [
        "federation.providers[0].client_secret: environment variable TEST_OIDC_SECRET is not set or empty",
        'federation.providers[1].client_secrte: unknown key for type oidc (did you mean "client_secret"?)',
        "federation.providers[1].issuer: must be an https URL such as https://sso.example.com, got 'http://sso.example.com'",
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
    assert caught.value.problems == [
        "federation.providers[0].issuer: missing (the provider's https issuer URL)",
        "federation.providers[0].client_id: missing or empty (the client id the provider gave grantd)",
        "federation.providers[0].client_secret: missing or not a string (a secret: file:PATH or env:NAME)",
    ]


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
    config = _config({"id": "a", "type": "needs-url"}, {"id": "b", "type": "refuses"}, modules=["odd_provider"])
    with pytest.raises(ConfigError) as caught:
        _build(config)
    assert caught.value.problems == ["federation.providers[0].url: missing",
                                     "federation.providers[1]: this provider is switched off"]


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
    assert r.json() == {"providers": [
        {"id": "corp", "type": "oidc", "name": "Corp SSO", "issuer": "https://sso.example.com"},
        {"id": "static-1", "type": "static-example", "name": "Static login", "login_url": "https://login.example.com/start"},
    ]}
    assert SECRET not in r.text and API_KEY not in r.text and "corp-secret" not in r.text
    assert SECRET not in srv.log() and API_KEY not in srv.log()


def test_no_providers_is_an_empty_list(server_factory):
    srv = server_factory().start()
    with srv.client() as http:
        assert http.get("/api/federation/providers").json() == {"providers": []}


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('type = "static-exampel"\nlogin_url = "https://l.example.com"\napi_key = "env:TEST_STATIC_API_KEY"',
         "federation.providers[0].type: no provider type named 'static-exampel' (did you mean \"static-example\"?); "
         "available: oidc, static-example"),
        ('type = "static-example"\nlogin_url = "http://l.example.com"\napi_key = "env:TEST_STATIC_API_KEY"',
         "federation.providers[0].login_url: must be an https URL, got 'http://l.example.com'"),
        ('type = "static-example"\nlogin_url = "https://l.example.com"\napi_key = "env:NO_SUCH_VARIABLE_X"',
         "federation.providers[0].api_key: environment variable NO_SUCH_VARIABLE_X is not set or empty"),
    ],
)
def test_a_bad_provider_table_stops_serve_and_fails_validate(server_factory, table, problem):
    srv = server_factory(extra=f'[plugins]\nmodules = ["federation_example"]\n[[federation.providers]]\nid = "x"\n{table}\n')
    srv.env["TEST_STATIC_API_KEY"] = API_KEY
    validated = srv.grantd("config", "validate", str(srv.config_path), check=False)
    assert validated.returncode == 1 and problem in validated.stderr, validated.stderr
    served = srv.grantd("serve", "--config", str(srv.config_path), check=False)
    assert served.returncode == 1 and problem in served.stderr, served.stderr
