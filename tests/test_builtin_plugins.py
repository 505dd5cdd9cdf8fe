"""The built-in plugins' hooks, called through the plugin manager as the server calls them, and the
DDISA discovery library (grantd.sp.ddisa) that SP login will use."""

from __future__ import annotations

import pytest

from grantd.plugin_manager import build_plugin_manager
from grantd.sp.ddisa import discover_idp, parse_record

from dns_server import TxtDnsServer


def test_federation_provider_types_offers_oidc_without_leaking_secrets():
    pm = build_plugin_manager(None)
    types: dict = {}
    for provided in pm.hook.federation_provider_types():
        types.update(provided)
    table = {"id": "corp", "type": "oidc", "name": "Corp SSO", "issuer": "https://sso.example.com/", "client_id": "grantd",
             "client_secret": "env:X"}
    provider = types["oidc"](table, lambda key: "s3cret")
    assert provider.public_info() == {"id": "corp", "name": "Corp SSO", "type": "oidc", "issuer": "https://sso.example.com"}
    assert provider.issuer == "https://sso.example.com" and provider.client_secret == "s3cret"
    assert provider.scopes == ("openid", "email", "profile") and provider.create_unknown is False
    assert "s3cret" not in repr(provider)


@pytest.mark.parametrize(
    ("record", "idp", "mode"),
    [
        ("v=ddisa1 idp=https://idp.example.com; mode=open", "https://idp.example.com", "open"),
        ("v=ddisa1; idp=https://idp.example.com; priority=5", "https://idp.example.com", None),  # spec-repo form
        ("v=ddisa1 idp=https://idp.example.com mode=bogus", "https://idp.example.com", None),
    ],
)
def test_ddisa_records_in_both_forms_parse(record, idp, mode):
    parsed = parse_record(record)
    assert parsed is not None and parsed.idp == idp and parsed.mode == mode


@pytest.mark.parametrize(
    "record",
    [
        "v=ddisa2 idp=https://idp.example.com",
        "v=ddisa1 idp=http://idp.example.com",
        "v=ddisa1 idp=javascript:alert(1)",
        "v=ddisa1 idp=https://user:pw@idp.example.com",
        "v=ddisa1 idp=https://idp.exаmple.com",  # Cyrillic a: homograph
        "v=ddisa1 mode=open",
    ],
)
def test_unsafe_or_foreign_ddisa_records_are_ignored(record):
    assert parse_record(record) is None


def test_ddisa_discovery_asks_a_real_dns_server_and_takes_the_lowest_priority():
    records = {
        "_ddisa.example.org": ["v=ddisa1 idp=https://backup.example.org; priority=20", "v=ddisa1 idp=https://idp.example.org; priority=1"],
        "_ddisa.http.test": ["v=ddisa1 idp=http://127.0.0.1:9999"],
        "_ddisa.denied.test": ["v=ddisa1 idp=https://idp.denied.test; mode=deny"],
    }
    with TxtDnsServer(records) as dns:
        ns = [dns.address]
        assert discover_idp("Alice@Example.org", nameservers=ns) == "https://idp.example.org"
        assert "_ddisa.example.org" in dns.queries
        # No record and no fallback: nothing; with a fallback: the fallback.
        assert discover_idp("bob@nowhere.test", nameservers=ns) is None
        assert discover_idp("bob@nowhere.test", nameservers=ns, fallback_idp="https://fallback.example.com") == "https://fallback.example.com"
        # A domain that denies: never its IdP.
        assert discover_idp("eve@denied.test", nameservers=ns) is None
        # http IdPs only when the operator allows them (tests).
        assert discover_idp("x@http.test", nameservers=ns) is None
        assert discover_idp("x@http.test", nameservers=ns, allow_http=True) == "http://127.0.0.1:9999"


def test_elevate_verify_default_checks_pass_a_matching_grant_and_refuse_another_host():
    pm = build_plugin_manager(None)
    claims = {"iss": "https://idp.example.com", "aud": "grantd", "target_host": "web1", "decided_by": "alice@example.com",
              "command": ["systemctl", "restart", "nginx"], "cmd_hash": "sha256:x"}
    context = {"allowed_issuers": ["https://idp.example.com"], "allowed_audiences": ["grantd"], "host": "web1",
               "allowed_approvers": ["alice@example.com"]}
    argv = ["systemctl", "restart", "nginx"]
    assert not any(pm.hook.elevate_verify(claims=claims, argv=argv, context=context))
    refused = [r for rs in pm.hook.elevate_verify(claims=claims, argv=argv, context={**context, "host": "db1"}) for r in rs or []]
    assert refused and "target_host" in refused[0]
