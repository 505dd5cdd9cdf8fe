"""Checking a parsed config file: every problem at once, each with its key path."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from grantd.client_address import parse_networks
from grantd.config.extensions import BUILTIN_SECTIONS, ConfigSection, owners
from grantd.config.mcp import check_policies, mcp_resources
from grantd.config.model import Config, ConfigError
from grantd.config.schema import SCHEMA, _origin, _rp_id
from grantd.config.secretfiles import resolve_secret
from grantd.config.sections import SECTION_TYPES
from grantd.core.config_keys import check_value


def validate(
    raw: dict[str, Any], path: Path | None = None, sections: Sequence[ConfigSection] = BUILTIN_SECTIONS
) -> Config:
    """Validate a parsed TOML document; raise ConfigError listing every problem. ``sections``: the
    parts declared outside the schema (grantd.config.extensions; plugins add theirs through
    grantd.plugin_manager.declared_sections)."""
    problems: list[str] = []
    warnings: list[str] = []
    base_dir = path.parent if path else Path.cwd()
    owned, clashes = owners(sections, [*(s for s in SCHEMA if s), *SCHEMA[""]])
    problems.extend(clashes)
    _top_level(raw, owned, problems)
    values = _schema_values(raw, base_dir, problems, warnings)
    if "version" not in raw:
        problems.append("version: missing (add `version = 1` at the top)")
    _derive_server_and_webauthn(values, problems)
    _derive_admin(raw, values, problems)
    _parse_tables(values, base_dir, problems, warnings)
    declared: dict[str, Any] = {}
    for part in sections:
        value, found = part.parse(raw)
        problems.extend(found)
        declared[part.name] = value
    check_policies(values["mcp"]["resources"], declared.get("review"), problems)
    if problems:
        raise ConfigError(problems, path)
    typed = {name: SECTION_TYPES[name](**vals) for name, vals in values.items()}
    return Config(path=path, raw=raw, sections=typed, warnings=warnings, extra=declared)


def _top_level(raw: dict[str, Any], owned: Mapping[str, ConfigSection], problems: list[str]) -> None:
    """Unknown top-level keys (with a "did you mean"), and sections that are not tables."""
    known_sections = [s for s in SCHEMA if s]
    for top_key, top_value in raw.items():
        if top_key in SCHEMA[""] or top_key in owned:
            continue
        if top_key in SCHEMA:
            if not isinstance(top_value, dict):
                problems.append(f"{top_key}: must be a table ([{top_key}])")
            continue
        hint = difflib.get_close_matches(top_key, known_sections + list(SCHEMA[""]) + list(owned), n=1)
        extra = f' (did you mean "{hint[0]}"?)' if hint else ""
        problems.append(f"{top_key}: unknown key{extra}")


def _schema_values(
    raw: dict[str, Any], base_dir: Path, problems: list[str], warnings: list[str]
) -> dict[str, dict[str, Any]]:
    """Each section's keys checked (unknown ones reported), defaults filled in, secrets resolved."""
    values: dict[str, dict[str, Any]] = {name: {} for name in SCHEMA}
    for section, keys in SCHEMA.items():
        table = raw if section == "" else raw.get(section, {})
        if not isinstance(table, dict):
            table = {}
        if section:
            for name in table:
                if name not in keys:
                    hint = difflib.get_close_matches(name, list(keys), n=1)
                    extra = f' (did you mean "{section}.{hint[0]}"?)' if hint else ""
                    problems.append(f"{section}.{name}: unknown key{extra}")
        for name, key in keys.items():
            dotted = f"{section}.{name}" if section else name
            if name in table:
                value = table[name]
                check_value(dotted, key, value, problems)
                if key.secret and isinstance(value, str):
                    value = resolve_secret(dotted, value, base_dir, problems, warnings)
            else:
                value = key.default
            values[section][name] = value
    return values


def _derive_server_and_webauthn(values: dict[str, dict[str, Any]], problems: list[str]) -> None:
    """The issuer from host and port when unset; the passkeys' origin and rp_id from the issuer."""
    server = values["server"]
    if server.get("issuer") is None and isinstance(server.get("port"), int):
        host = server["host"] if server["host"] not in ("0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
        server["issuer"] = f"http://{host}:{server['port']}"
    webauthn = values["webauthn"]
    if isinstance(server.get("issuer"), str) and all(
        isinstance(webauthn.get(k) or "", str) for k in ("origin", "rp_id")
    ):
        issuer = urlsplit(server["issuer"])
        if webauthn.get("origin") is None:
            webauthn["origin"] = f"{issuer.scheme}://{issuer.netloc.lower()}"  # browsers send it lowercased
        if webauthn.get("rp_id") is None:
            webauthn["rp_id"] = urlsplit(webauthn["origin"]).hostname
        host, rp_id = urlsplit(webauthn["origin"]).hostname or "", str(webauthn["rp_id"]).lower()
        if not _origin(webauthn["origin"]) and not _rp_id(rp_id):  # (bad values are reported above)
            webauthn["rp_id"] = rp_id
            if host != rp_id and not host.endswith("." + rp_id):
                problems.append(
                    f"webauthn.rp_id: {rp_id!r} is neither the host of {webauthn['origin']} nor a parent domain of it"
                )


def _derive_admin(raw: dict[str, Any], values: dict[str, dict[str, Any]], problems: list[str]) -> None:
    """The management token present and long enough; administrators' e-mails lowercased."""
    admin = values["admin"]
    if not admin.get("management_token"):
        if "management_token" not in raw.get("admin", {}):
            problems.append(
                'admin.management_token: missing (e.g. management_token = "file:management-token")'
            )
    elif len(admin["management_token"]) < 16:
        problems.append(
            "admin.management_token: too short (use at least 16 characters; `grantd config init` makes one)"
        )
    admin["emails"] = [e.lower() for e in admin["emails"] if isinstance(e, str)]
    if isinstance(admin["management_identity"], str):
        admin["management_identity"] = admin["management_identity"].lower()


def _parse_tables(
    values: dict[str, dict[str, Any]], base_dir: Path, problems: list[str], warnings: list[str]
) -> None:
    """Values that are parsed further: trusted proxies, federation providers, OAuth clients."""
    server = values["server"]
    if isinstance(server["trusted_proxies"], list):
        server["trusted_proxies"] = parse_networks(
            p for p in server["trusted_proxies"] if isinstance(p, str)
        )[0]
    if isinstance(values["federation"]["providers"], list):
        values["federation"]["providers"] = _federation_providers(values["federation"]["providers"], problems)
    if isinstance(values["oauth"]["clients"], list):
        values["oauth"]["clients"] = _oauth_clients(values["oauth"]["clients"], base_dir, problems, warnings)
    if isinstance(values["mcp"]["resources"], list):
        values["mcp"]["resources"] = mcp_resources(values["mcp"]["resources"], base_dir, problems, warnings)
    ca_file = values["oauth"]["ca_file"]
    if isinstance(ca_file, str):
        resolved = base_dir / ca_file
        if not resolved.is_file():
            problems.append(f"oauth.ca_file: {resolved} is not a readable file")
        values["oauth"]["ca_file"] = str(resolved)
    _notify(values["notify"], problems)


def _notify(notify: dict[str, Any], problems: list[str]) -> None:
    """`[[notify.routes]]` checked against the ids of `[[notify.channels]]` (the channel tables
    are checked by their types: grantd.notify.startup_problems)."""
    from grantd.core.notify_routes import parse_routes

    tables = notify["channels"] if isinstance(notify["channels"], list) else []
    notify["channels"] = tuple(tables)  # their types check them (grantd.notify, with the defaults)
    ids = [str(t.get("id")) for t in tables if isinstance(t, dict)]
    routes, found = parse_routes(notify["routes"], ids)
    problems.extend(found)
    notify["routes"] = routes


PROVIDER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _federation_providers(tables: list[Any], problems: list[str]) -> tuple[dict[str, Any], ...]:
    """Check the keys every `[[federation.providers]]` table has (id, type, name).

    The rest of a table depends on its type, so the type's factory checks it when the plugin
    manager builds the providers (`grantd.plugin_manager.build_federation_providers`).
    """
    checked: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for index, table in enumerate(tables):
        where = f"federation.providers[{index}]"
        if not isinstance(table, dict):
            continue  # already reported: every item must be a table
        provider_id, kind, name = table.get("id"), table.get("type"), table.get("name")
        if provider_id is None:
            problems.append(f"{where}.id: missing")
        elif not isinstance(provider_id, str) or not PROVIDER_ID.match(provider_id):
            problems.append(
                f"{where}.id: must be 1-64 letters, digits, '.', '_' or '-' (it is used in URLs), got {provider_id!r}"
            )
        elif provider_id in seen:
            problems.append(
                f"{where}.id: {provider_id!r} is already the id of federation.providers[{seen[provider_id]}]"
            )
        else:
            seen[provider_id] = index
        if kind is None:
            problems.append(
                f'{where}.type: missing (a provider type such as "oidc"; `grantd plugins` lists who provides which)'
            )
        elif not isinstance(kind, str) or not kind:
            problems.append(f"{where}.type: must be a non-empty string, got {kind!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            problems.append(f"{where}.name: must be a non-empty string, got {name!r}")
        checked.append({**table, "name": name if isinstance(name, str) and name.strip() else provider_id})
    return tuple(checked)


OAUTH_CLIENT_KEYS = frozenset(
    {"client_id", "name", "redirect_uris", "client_secret", "id_token_signed_response_alg", "api_access"}
)
OAUTH_CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
ID_TOKEN_ALGS = ("EdDSA", "ES256", "RS256")
BUILTIN_CLIENT_IDS = frozenset({"apes-cli", "grantd-cli"})


def _oauth_clients(
    tables: list[Any], base_dir: Path, problems: list[str], warnings: list[str]
) -> tuple[dict[str, Any], ...]:
    """Check every `[[oauth.clients]]` table; resolve its client_secret (file:/env:)."""
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, table in enumerate(tables):
        where = f"oauth.clients[{index}]"
        if not isinstance(table, dict):
            continue  # already reported: every item must be a table
        for name in table:
            if name not in OAUTH_CLIENT_KEYS:
                problems.append(
                    f"{where}.{name}: unknown key (known: {', '.join(sorted(OAUTH_CLIENT_KEYS))})"
                )
        client_id = table.get("client_id")
        if not isinstance(client_id, str) or not OAUTH_CLIENT_ID.match(client_id):
            problems.append(
                f"{where}.client_id: must be 1-128 letters, digits, '.', '_', ':' or '-', got {client_id!r}"
            )
            continue
        if client_id in BUILTIN_CLIENT_IDS or client_id in seen:
            problems.append(f"{where}.client_id: {client_id!r} is already taken (built in or listed twice)")
        seen.add(client_id)
        uris = table.get("redirect_uris", [])
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            problems.append(f"{where}.redirect_uris: must be a list of strings")
            uris = []
        for uri in uris:
            parts = urlsplit(uri)
            if (
                parts.scheme not in ("http", "https")
                or not parts.netloc
                or parts.fragment
                or "@" in parts.netloc
            ):
                problems.append(
                    f"{where}.redirect_uris: {uri!r} must be an absolute http(s) URL without userinfo or fragment"
                )
        alg = table.get("id_token_signed_response_alg", "EdDSA")
        if alg not in ID_TOKEN_ALGS:
            problems.append(
                f"{where}.id_token_signed_response_alg: must be one of {', '.join(ID_TOKEN_ALGS)}, got {alg!r}"
            )
        api_access = table.get("api_access", False)
        if not isinstance(api_access, bool):
            problems.append(f"{where}.api_access: must be true or false, got {api_access!r}")
        name = table.get("name", client_id)
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{where}.name: must be a non-empty string, got {name!r}")
            name = client_id
        secret = table.get("client_secret")
        if secret is not None:
            if not isinstance(secret, str) or not secret:
                problems.append(f"{where}.client_secret: must be a string (file:PATH or env:NAME)")
                secret = None
            else:
                secret = resolve_secret(f"{where}.client_secret", secret, base_dir, problems, warnings)
        checked.append(
            {
                "client_id": client_id,
                "name": name,
                "redirect_uris": tuple(uris),
                "client_secret": secret,
                "id_token_signed_response_alg": alg,
                "api_access": api_access is True,
            }
        )
    return tuple(checked)
