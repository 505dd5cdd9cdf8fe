"""Checking `[[mcp.resources]]` (D17): the resources grantd issues RFC 9068 tokens for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from grantd.config.secretfiles import resolve_secret

RESOURCE_KEYS = frozenset({"resource", "name", "scopes", "credential", "grant_scopes"})
GRANT_SCOPE_KEYS = frozenset({"policy", "grant_type"})
GRANT_TYPES = ("once", "timed", "always")
RESERVED_SCOPES = frozenset({"openid", "email", "profile", "offline_access"})
SCOPE_TOKEN = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]{1,64}$")  # RFC 6749 §3.3 scope-token, bounded
MAX_RESOURCE = 512


def canonical_resource(value: str) -> str | None:
    """The resource URI as compared (D17, beyond.md §5): scheme and host lower-cased; None when it
    is no absolute http(s) URI, has a fragment, userinfo, or a trailing slash after a path."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_RESOURCE or not value.isprintable():
        return None
    if " " in value:
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    if parts.fragment or "#" in value or (parts.path.endswith("/") and parts.path != "/"):
        return None
    path = "" if parts.path == "/" else parts.path
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def mcp_resources(
    tables: list[Any], base_dir: Path, problems: list[str], warnings: list[str]
) -> tuple[dict[str, Any], ...]:
    """Check every `[[mcp.resources]]` table; resolve its credential (file:/env:)."""
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, table in enumerate(tables):
        where = f"mcp.resources[{index}]"
        if not isinstance(table, dict):
            continue  # already reported: every item must be a table
        for name in table:
            if name not in RESOURCE_KEYS:
                problems.append(f"{where}.{name}: unknown key (known: {', '.join(sorted(RESOURCE_KEYS))})")
        resource = canonical_resource(table.get("resource"))  # type: ignore[arg-type]
        if resource is None:
            problems.append(
                f"{where}.resource: must be an absolute https URI without fragment, userinfo or trailing "
                f"slash, got {table.get('resource')!r}"
            )
            continue
        if resource in seen:
            problems.append(f"{where}.resource: {resource!r} is listed twice")
        seen.add(resource)
        name = table.get("name", resource)
        if not isinstance(name, str) or not name.strip() or not name.isprintable():
            problems.append(f"{where}.name: must be a non-empty printable string, got {name!r}")
            name = resource
        scopes = table.get("scopes", [])
        if not isinstance(scopes, list) or not all(
            isinstance(s, str) and SCOPE_TOKEN.match(s) for s in scopes
        ):
            problems.append(
                f"{where}.scopes: must be a list of scope names (1-64 printable, no spaces or quotes)"
            )
            scopes = []
        clash = sorted(set(scopes) & RESERVED_SCOPES)
        if clash:
            problems.append(f"{where}.scopes: {clash[0]!r} is grantd's own (OpenID) scope")
        credential = table.get("credential")
        if credential is not None:
            if not isinstance(credential, str) or not credential:
                problems.append(f"{where}.credential: must be a string (file:PATH or env:NAME)")
                credential = None
            else:
                credential = resolve_secret(f"{where}.credential", credential, base_dir, problems, warnings)
        grant_scopes = _grant_scopes(where, table.get("grant_scopes", {}), scopes, problems)
        checked.append(
            {
                "resource": resource,
                "name": name.strip(),
                "scopes": tuple(dict.fromkeys(scopes)),
                "credential": credential,
                "grant_scopes": grant_scopes,
            }
        )
    return tuple(checked)


def _grant_scopes(
    where: str, table: Any, scopes: list[str], problems: list[str]
) -> dict[str, dict[str, Any]]:
    if not isinstance(table, dict):
        problems.append(f"{where}.grant_scopes: must be a table (scope = {{policy?, grant_type}})")
        return {}
    found: dict[str, dict[str, Any]] = {}
    for scope, spec in table.items():
        here = f"{where}.grant_scopes.{scope}"
        if scope not in scopes:
            problems.append(f"{here}: not one of this resource's scopes")
            continue
        if not isinstance(spec, dict):
            problems.append(f"{here}: must be a table {{policy?, grant_type}}")
            continue
        for name in spec:
            if name not in GRANT_SCOPE_KEYS:
                problems.append(f"{here}.{name}: unknown key (known: {', '.join(sorted(GRANT_SCOPE_KEYS))})")
        grant_type = spec.get("grant_type", "once")
        if grant_type not in GRANT_TYPES:
            problems.append(f"{here}.grant_type: must be one of {', '.join(GRANT_TYPES)}, got {grant_type!r}")
        policy = spec.get("policy")
        if policy is not None and (not isinstance(policy, str) or not policy):
            problems.append(f"{here}.policy: must be a policy id")
            policy = None
        found[scope] = {"grant_type": grant_type, "policy": policy}
    return found


def check_policies(resources: Any, review: Any, problems: list[str]) -> None:
    """A grant scope's ``policy`` must name a ``[[policies]]`` entry of the file (D13)."""
    if not isinstance(resources, tuple):
        return  # already reported
    known = {p.id for p in getattr(review, "policies", ())}
    for index, table in enumerate(resources):
        for scope, spec in table["grant_scopes"].items():
            policy = spec.get("policy")
            if policy is not None and policy not in known:
                problems.append(
                    f"mcp.resources[{index}].grant_scopes.{scope}.policy: {policy!r} is not the id of a [[policies]] entry"
                )
