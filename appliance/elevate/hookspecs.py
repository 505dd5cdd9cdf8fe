"""The elevation tool's hook spec: ``elevate_verify``, the site checks `grantd elevate` runs.

Apart from grantd.hookspecs so that `grantd elevate`, which runs as root, imports pluggy and this
file but none of the server's contract (Sanic, the config, the store). grantd.hookspecs re-exports
the spec, so the server's plugin manager knows it too: `grantd plugins` lists elevate plugins and
``pm.check_pending()`` catches a misspelled ``elevate_*`` hook there as well.
Plugins mark implementations with this module's ``hookimpl`` or grantd.hookspecs' (the same
project name, so either works); described for plugin authors in docs/plugins.md.
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "grantd"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def elevate_verify(claims: dict[str, Any], argv: list[str], context: dict[str, Any]) -> list[str] | None:
    """Check an AuthZ-JWT (already signature-verified) before ``grantd elevate`` runs a command.

    ``claims`` are the token's claims, ``argv`` the command to run, ``context`` holds the
    elevation config (``allowed_issuers``, ``allowed_approvers``, ``allowed_audiences``,
    ``host``, ``min_approvals``, ``approvers_mode``), the real uid and the current time. Return a list of refusal reasons (empty or
    None means "no objection"); any reason refuses the elevation with exit code 5.
    """
