"""A federation provider type written only from docs/plugins.md: "static-example".

A provider of this type sends people to a login page (``login_url``) that knows them and shares a
secret with grantd (``api_key``: file:PATH or env:NAME). grantd's ``state``, the callback URL
and a fresh ``nonce`` go to that page; it sends the browser back to the callback with ``state``,
``email``, ``name`` and ``sig`` = hex HMAC-SHA256(api_key, nonce + "\\n" + email + "\\n" + name).
The nonce stays server-side (``kept``), so a signature is good for one sign-in only. Only
``login_url`` is public. ``login_url`` must be https (http only on a loopback host, for tests).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from grantd.hookspecs import FederatedIdentity, FederationContext, FederationError, FederationStart, hookimpl

__version__ = "0.2.0"

KEYS = {"id", "type", "name", "login_url", "api_key", "create_unknown", "allowed_domains"}
LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def signature(api_key: str, nonce: str, email: str, name: str) -> str:
    return hmac.new(api_key.encode(), f"{nonce}\n{email}\n{name}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class StaticProvider:
    id: str
    name: str
    login_url: str
    api_key: str = field(repr=False)
    create_unknown: bool = False  # read by grantd: unknown verified e-mails become new persons
    allowed_domains: tuple[str, ...] = ()  # read by grantd: empty means any domain

    def public_info(self) -> dict[str, Any]:
        return {"login_url": self.login_url}

    async def begin(self, ctx: FederationContext, *, redirect_uri: str, state: str) -> FederationStart:
        nonce = secrets.token_urlsafe(24)
        query = urlencode({"state": state, "redirect_uri": redirect_uri, "nonce": nonce})
        return FederationStart(url=f"{self.login_url}?{query}", kept={"nonce": nonce})

    async def finish(
        self, ctx: FederationContext, *, redirect_uri: str, params: Mapping[str, str], kept: dict[str, Any]
    ) -> FederatedIdentity:
        email, name, sig = params.get("email", ""), params.get("name", ""), params.get("sig", "")
        if not email or not sig:
            raise FederationError(f"{self.name} sent you back without an e-mail address.")
        expected = signature(self.api_key, str(kept.get("nonce", "")), email, name)
        if not hmac.compare_digest(expected, sig):
            raise FederationError(f"{self.name}'s answer is not signed with the shared key.")
        # the login page only signs addresses it has verified
        return FederatedIdentity(subject=email, email=email, email_verified=True, name=name or None)


def make_static_provider(table: dict[str, Any], read_secret: Callable[[str], str]) -> StaticProvider:
    problems = [f"{key}: unknown key" for key in table if key not in KEYS]
    login_url = table.get("login_url")
    parts = urlsplit(login_url) if isinstance(login_url, str) else None
    if parts is None or not (
        parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)
    ):
        problems.append(f"login_url: must be an https URL, got {login_url!r}")
    create_unknown = table.get("create_unknown", False)
    if not isinstance(create_unknown, bool):
        problems.append("create_unknown: must be true or false")
    domains = table.get("allowed_domains", [])
    if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
        problems.append("allowed_domains: must be a list of domain names")
    api_key = ""
    try:
        api_key = read_secret("api_key")
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise ValueError("\n".join(problems))
    return StaticProvider(
        id=table["id"],
        name=table["name"],
        login_url=str(login_url),
        api_key=api_key,
        create_unknown=create_unknown,
        allowed_domains=tuple(d.lower() for d in domains),
    )


@hookimpl
def federation_provider_types() -> dict[str, Any]:
    return {"static-example": make_static_provider}
