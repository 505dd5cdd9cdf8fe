"""Upstream OpenID Connect providers (federated login): the provider type "oidc".

A ``[[federation.providers]]`` table of type "oidc" is checked here when the server starts (and
by ``grantd config validate``): every problem is reported at once, and a configured provider is
listed publicly (id, type, name; never the secret) at ``GET /api/federation/providers``.

The login round trip itself (redirect to the provider, code exchange, ID token checks against
``issuer``, ``email_claim``, ``allowed_domains`` and ``create_unknown``) is not in this release:
it arrives with human sign-in, which will use the provider objects built here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from grantd.hookspecs import hookimpl

TYPE = "oidc"
DEFAULT_SCOPES = ("openid", "email", "profile")
KEYS = ("id", "type", "name", "issuer", "client_id", "client_secret", "scopes", "email_claim", "allowed_domains",
        "create_unknown")
_SCOPE = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+$")  # RFC 6749 scope-token
_DOMAIN = re.compile(r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")


@dataclass(frozen=True)
class OidcProvider:
    id: str
    name: str
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    email_claim: str = "email"
    allowed_domains: tuple[str, ...] = ()  # empty: any e-mail domain
    create_unknown: bool = False  # sign in people grantd does not know yet (as new persons)

    def public_info(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "type": TYPE, "issuer": self.issuer}


def _issuer(value: Any) -> str | None:
    if not isinstance(value, str):
        return "must be a string: the provider's https issuer URL"
    parts = urlsplit(value)
    if parts.scheme != "https" or not parts.hostname:
        return f"must be an https URL such as https://sso.example.com, got {value!r}"
    if parts.username or parts.password or parts.query or parts.fragment:
        return "must not carry credentials, a query or a fragment"
    return None


def _string_list(value: Any, pattern: re.Pattern[str], one: str) -> str | None:
    if not isinstance(value, list) or not value:
        return f"must be a non-empty list of {one}s"
    bad = [v for v in value if not isinstance(v, str) or not pattern.match(v)]
    return f"{bad[0]!r} is not a {one}" if bad else None


def make_provider(table: dict[str, Any], read_secret: Callable[[str], str]) -> OidcProvider:
    """Check one "oidc" table and build its provider; ValueError lists every problem, one per line."""
    problems: list[str] = []
    for key in table:
        if key not in KEYS:
            hint = difflib.get_close_matches(key, KEYS, n=1)
            problems.append(f"{key}: unknown key for type oidc" + (f' (did you mean "{hint[0]}"?)' if hint else ""))
    if "issuer" not in table:
        problems.append("issuer: missing (the provider's https issuer URL)")
    elif msg := _issuer(table["issuer"]):
        problems.append(f"issuer: {msg}")
    client_id = table.get("client_id")
    if not isinstance(client_id, str) or not client_id.strip():
        problems.append("client_id: missing or empty (the client id the provider gave grantd)")
    client_secret = ""
    try:
        client_secret = read_secret("client_secret")
    except ValueError as exc:
        problems.append(str(exc))
    scopes = table.get("scopes", list(DEFAULT_SCOPES))
    if msg := _string_list(scopes, _SCOPE, "scope"):
        problems.append(f"scopes: {msg}")
    elif "openid" not in scopes:
        problems.append('scopes: must include "openid"')
    email_claim = table.get("email_claim", "email")
    if not isinstance(email_claim, str) or not email_claim.strip():
        problems.append("email_claim: must be a non-empty string (the ID token claim holding the e-mail)")
    domains = table.get("allowed_domains", [])
    if domains != [] and (msg := _string_list(domains, _DOMAIN, "domain")):
        problems.append(f"allowed_domains: {msg} (lower-case domain names such as example.com)")
    create_unknown = table.get("create_unknown", False)
    if not isinstance(create_unknown, bool):
        problems.append(f"create_unknown: must be true or false, got {create_unknown!r}")
    if problems:
        raise ValueError("\n".join(problems))
    return OidcProvider(
        id=table["id"],
        name=table["name"],
        issuer=table["issuer"].rstrip("/"),
        client_id=str(client_id).strip(),
        client_secret=client_secret,
        scopes=tuple(scopes),
        email_claim=email_claim,
        allowed_domains=tuple(domains),
        create_unknown=create_unknown,
    )


@hookimpl
def federation_provider_types() -> dict[str, Any]:
    return {TYPE: make_provider}
