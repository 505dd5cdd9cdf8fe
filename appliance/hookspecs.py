"""pluggy hook specifications: the contract between grantd and its plugins.

One prefix per kind of plugin: ``storage_*``, ``federation_*``, ``elevate_*`` (defined in
grantd.elevate.hookspecs and named here), plus ``startup`` and ``register_routes``. Hook
implementations take only the parameters they need and never give them defaults (pluggy does
not pass defaults). Keep imports here light: this module is imported by every plugin.

Every hook below is described for plugin authors in docs/plugins.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

# The elevation tool's spec lives with the tool (it runs as root and imports nothing of the server);
# named here too, so that the server's plugin manager, which adds this module, knows every hook.
from grantd.elevate.hookspecs import PROJECT
from grantd.elevate.hookspecs import elevate_verify as elevate_verify

if TYPE_CHECKING:
    from collections.abc import Callable

    from sanic import Sanic

    from grantd.config import Config
    from grantd.store import Store

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def storage_backends() -> dict[str, Callable[[Config], Store]]:
    """Storage backends this plugin provides: ``{name: factory(config) -> Store}``.

    The backend named by ``[storage] plugin`` in the config is used. A factory must return an
    object implementing :class:`grantd.store.Store`; it is called once per server process.
    """


@hookspec
def federation_provider_types() -> dict[str, Callable[[dict[str, Any], Callable[[str], str]], Any]]:
    """Kinds of upstream identity providers this plugin can federate to: ``{type: factory}``.

    ``factory(table, read_secret)`` receives one ``[[federation.providers]]`` table whose
    ``type`` names it (``id``, ``type`` and ``name`` already checked by grantd) and a function
    ``read_secret(key)`` that resolves a ``file:PATH`` / ``env:NAME`` value of that table. It
    returns a provider object with ``id``, ``name`` and ``public_info() -> dict`` (JSON, no
    secrets), or raises ``ValueError("key: what is wrong")`` (several problems: one per line),
    which grantd reports as a config error at ``federation.providers[N].key``. Called when the
    server starts and by ``grantd config validate``.
    """


@hookspec
def startup(app: Sanic, config: Config) -> None:
    """Called in every server process once the app is built, before it serves requests."""


@hookspec
def register_routes(app: Sanic, config: Config) -> None:
    """Add routes or blueprints to the app. Routes under /api/ should answer problem+json errors."""
