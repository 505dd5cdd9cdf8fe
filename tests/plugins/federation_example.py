"""A federation provider type written only from docs/plugins.md: "static-example".

A provider of this type sends people to a fixed login page (``login_url``, https) and holds an
``api_key`` (a secret: file:PATH or env:NAME). Only ``login_url`` is public.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from grantd.hookspecs import hookimpl

__version__ = "0.1.0"

KEYS = {"id", "type", "name", "login_url", "api_key"}


@dataclass(frozen=True)
class StaticProvider:
    id: str
    name: str
    login_url: str
    api_key: str = field(repr=False)

    def public_info(self) -> dict[str, Any]:
        return {"login_url": self.login_url}


def make_static_provider(table: dict[str, Any], read_secret: Callable[[str], str]) -> StaticProvider:
    problems = [f"{key}: unknown key" for key in table if key not in KEYS]
    login_url = table.get("login_url")
    if not isinstance(login_url, str) or urlsplit(login_url).scheme != "https":
        problems.append(f"login_url: must be an https URL, got {login_url!r}")
    api_key = ""
    try:
        api_key = read_secret("api_key")
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise ValueError("\n".join(problems))
    return StaticProvider(id=table["id"], name=table["name"], login_url=str(login_url), api_key=api_key)


@hookimpl
def federation_provider_types() -> dict[str, Any]:
    return {"static-example": make_static_provider}
