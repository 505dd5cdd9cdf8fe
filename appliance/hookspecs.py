"""pluggy hook specifications: the contract between grantd and its plugins.

One prefix per kind of plugin: ``storage_*``, ``federation_*``, ``sp_login_*``, ``elevate_*``,
plus ``startup`` and ``register_routes``. Hook implementations take only the parameters they
need and never give them defaults (pluggy does not pass defaults). Keep imports here light: this
module is imported by every plugin.

Every hook below is described for plugin authors in docs/plugins.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Callable

    from sanic import Sanic

    from grantd.config import Config
    from grantd.store import Store

PROJECT = "grantd"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def storage_backends() -> dict[str, Callable[[Config], Store]]:
    """Storage backends this plugin provides: ``{name: factory(config) -> Store}``.

    The backend named by ``[storage] plugin`` in the config is used. A factory must return an
    object implementing :class:`grantd.store.Store`; it is called once per server process.
    """


@hookspec
def federation_provider_types() -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Kinds of upstream identity providers this plugin can federate to: ``{type: factory}``.

    A factory receives one provider's configuration table and returns a provider object with
    ``id``, ``name`` and ``public_info() -> dict`` (no secrets in it).
    """


@hookspec(firstresult=True)
def sp_login_discover_idp(email: str, config: Config) -> str | None:
    """Return the IdP base URL that logs in users with this e-mail, or None to let others try.

    The default plugin implements DDISA DNS discovery (TXT ``_ddisa.<domain>``) and the
    configured fallback IdP.
    """


@hookspec
def elevate_verify(claims: dict[str, Any], argv: list[str], context: dict[str, Any]) -> list[str] | None:
    """Check an AuthZ-JWT (already signature-verified) before ``grantd elevate`` runs a command.

    ``claims`` are the token's claims, ``argv`` the command to run, ``context`` holds the
    elevation config (``allowed_issuers``, ``allowed_approvers``, ``allowed_audiences``,
    ``host``), the real uid and the current time. Return a list of refusal reasons (empty or
    None means "no objection"); any reason refuses the elevation with exit code 5.
    """


@hookspec
def startup(app: Sanic, config: Config) -> None:
    """Called in every server process once the app is built, before it serves requests."""


@hookspec
def register_routes(app: Sanic, config: Config) -> None:
    """Add routes or blueprints to the app. Routes under /api/ should answer problem+json errors."""
