"""The built-in plugins' hooks, called through the plugin manager as the server calls them (DDISA
discovery, once tested here, has tests/unit/test_ddisa.py)."""

from __future__ import annotations

from grantd.plugin_manager import build_plugin_manager


def test_federation_provider_types_offers_oidc_without_leaking_secrets():
    pm = build_plugin_manager(None)
    types: dict = {}
    for provided in pm.hook.federation_provider_types():
        types.update(provided)
    table = {
        "id": "corp",
        "type": "oidc",
        "name": "Corp SSO",
        "issuer": "https://sso.example.com/",
        "client_id": "grantd",
        "client_secret": "env:X",
    }
    provider = types["oidc"](table, lambda key: "s3cret")
    assert provider.public_info() == {
        "id": "corp",
        "name": "Corp SSO",
        "type": "oidc",
        "issuer": "https://sso.example.com",
    }
    assert provider.issuer == "https://sso.example.com" and provider.client_secret == "s3cret"
    assert provider.scopes == ("openid", "email", "profile") and provider.create_unknown is False
    assert "s3cret" not in repr(provider)


def test_elevate_verify_default_checks_pass_a_matching_grant_and_refuse_another_host():
    pm = build_plugin_manager(None)
    claims = {
        "iss": "https://idp.example.com",
        "aud": "grantd",
        "target_host": "web1",
        "decided_by": "alice@example.com",
        "command": ["systemctl", "restart", "nginx"],
        "cmd_hash": "sha256:x",
    }
    context = {
        "allowed_issuers": ["https://idp.example.com"],
        "allowed_audiences": ["grantd"],
        "host": "web1",
        "allowed_approvers": ["alice@example.com"],
    }
    argv = ["systemctl", "restart", "nginx"]
    assert not any(pm.hook.elevate_verify(claims=claims, argv=argv, context=context))
    refused = [
        r
        for rs in pm.hook.elevate_verify(claims=claims, argv=argv, context={**context, "host": "db1"})
        for r in rs or []
    ]
    assert refused and "target_host" in refused[0]
