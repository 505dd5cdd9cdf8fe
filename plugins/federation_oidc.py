"""Upstream OpenID Connect providers (federated login): the provider type "oidc".

This release registers the type and describes configured providers publicly (id and name,
never secrets); the login round trip arrives with human sign-in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grantd.hookspecs import hookimpl


@dataclass(frozen=True)
class OidcProvider:
    id: str
    name: str
    issuer: str
    client_id: str
    client_secret: str = field(repr=False, default="")
    scopes: tuple[str, ...] = ("openid", "email", "profile")

    def public_info(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "type": "oidc"}


def make_provider(table: dict[str, Any]) -> OidcProvider:
    return OidcProvider(
        id=str(table["id"]),
        name=str(table.get("name") or table["id"]),
        issuer=str(table["issuer"]).rstrip("/"),
        client_id=str(table["client_id"]),
        client_secret=str(table.get("client_secret", "")),
        scopes=tuple(table.get("scopes") or ("openid", "email", "profile")),
    )


@hookimpl
def federation_provider_types() -> dict[str, Any]:
    return {"oidc": make_provider}
