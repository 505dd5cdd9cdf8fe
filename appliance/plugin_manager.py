"""The plugin manager: built-ins by import, third-party by entry point, config-named modules."""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from grantd import hookspecs
from grantd.config import (
    BUILTIN_SECTIONS,
    CURRENT_VERSION,
    ConfigError,
    ConfigSection,
    read_toml,
    resolve_secret,
    validate,
)

if TYPE_CHECKING:
    from grantd.config import Config

# Built-ins are imported and registered by name: a frozen bundle does not see entry points,
# and packaging/grantd.spec collects every module of the plugins package.
BUILTIN_PLUGINS = (
    "grantd.plugins.storage_sqlite",
    "grantd.plugins.storage_postgres",
    "grantd.plugins.federation_oidc",
    "grantd.plugins.elevate_default",
    "grantd.plugins.notify_smtp",
    "grantd.plugins.notify_webpush",
    "grantd.plugins.notify_ntfy",
    "grantd.plugins.notify_webhook",
)
ENTRY_POINT_GROUP = "grantd"


@dataclass(frozen=True)
class PluginInfo:
    name: str
    source: str  # builtin | entry point | config
    version: str
    hooks: tuple[str, ...]


def _dist_version(module: Any) -> str:
    top = getattr(module, "__name__", "").split(".")[0]
    if top == "grantd":
        from grantd import __version__

        return __version__
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    try:
        for dist, tops in importlib.metadata.packages_distributions().items():
            if dist == top or top in tops:
                return importlib.metadata.version(tops[0] if dist == top else dist)
    except Exception:  # noqa: BLE001, S110 - metadata is best effort
        pass
    return "unknown"


def _add_plugin_paths(config: Config) -> list[str]:
    """Make `[plugins] paths` importable. A directory others may write to would let them run code
    in the server (often root), so it is refused, as is a missing one."""
    problems = []
    for raw in config.plugins.paths:
        directory = config.resolve_path(raw).resolve()
        if not directory.is_dir():
            problems.append(f"plugins.paths: {raw!r} is not a directory")
            continue
        mode = directory.stat().st_mode
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            problems.append(f"plugins.paths: {raw!r} is writable by other users; refusing to import from it")
            continue
        if str(directory) not in sys.path:
            sys.path.append(str(directory))  # after our own packages: a site plugin cannot shadow them
    return problems


def build_plugin_manager(
    config: Config | None = None, *, extra_modules: tuple[str, ...] = ()
) -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(
        hookspecs
    )  # every spec: grantd.hookspecs names the elevation tool's (grantd.elevate.hookspecs) too
    pm._grantd_sources = {}  # type: ignore[attr-defined]
    for name in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(name), name=name)
        pm._grantd_sources[name] = "builtin"  # type: ignore[attr-defined]
    pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    for name, _ in pm.list_name_plugin():
        pm._grantd_sources.setdefault(name, "entry point")  # type: ignore[attr-defined]
    modules = list(config.plugins.modules) if config else []
    problems = _add_plugin_paths(config) if config else []
    for module_name in [*modules, *extra_modules]:
        if pm.has_plugin(module_name):
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - reported as a config problem
            problems.append(f"plugins.modules: cannot import {module_name!r}: {exc}")
            continue
        pm.register(module, name=module_name)
        pm._grantd_sources[module_name] = "config"  # type: ignore[attr-defined]
    if problems:
        raise ConfigError(problems, config.path if config else None)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise ConfigError([f"plugins: {exc}"], config.path if config else None) from None
    return pm


def describe_plugins(pm: pluggy.PluginManager) -> list[PluginInfo]:
    sources = getattr(pm, "_grantd_sources", {})
    out = []
    for name, plugin in pm.list_name_plugin():
        hooks = tuple(sorted(h.name for h in pm.get_hookcallers(plugin) or []))
        out.append(PluginInfo(name, sources.get(name, "entry point"), _dist_version(plugin), hooks))
    return out


async def call_async_hook(hook: Any, **kwargs: Any) -> list[Any]:
    """Call a hook whose implementations may be sync or async; await every coroutine result."""
    results = []
    for result in hook(**kwargs):
        if inspect.isawaitable(result):
            result = await result
        results.append(result)
    return results


def _storage_backends(pm: pluggy.PluginManager) -> dict[str, Any]:
    backends: dict[str, Any] = {}
    for provided in pm.hook.storage_backends():
        backends.update(provided or {})
    return backends


def _unknown_storage(name: str, backends: dict[str, Any]) -> str:
    hint = difflib.get_close_matches(name, list(backends), n=1)
    extra = f' (did you mean "{hint[0]}"?)' if hint else ""
    return (
        f"storage.plugin: no storage plugin named {name!r}{extra}; available: {', '.join(sorted(backends))}"
    )


def storage_factory(pm: pluggy.PluginManager, config: Config) -> Any:
    backends = _storage_backends(pm)
    name = config.storage.plugin
    if name not in backends:
        raise ConfigError([_unknown_storage(name, backends)], config.path)
    return backends[name]


def _storage_problems(pm: pluggy.PluginManager, name: str, config: Config | None) -> list[str]:
    """The storage plugin is known and, when the rest of the file is valid, its own preconditions
    hold (a backend factory may have ``check_config(config) -> list[str]``: a driver installed, a
    database file or directory usable, a server reachable) -- without creating or writing anything."""
    backends = _storage_backends(pm)
    if name not in backends:
        return [_unknown_storage(name, backends)]
    check = getattr(backends[name], "check_config", None)
    return list(check(config)) if check is not None and config is not None else []


def _plugins_only(raw: dict[str, Any], path: Path) -> Config | None:
    """The ``[plugins]`` table of a file whose other keys do not validate, as a Config of its own, so
    that plugin problems are reported with the others; None when that table itself is wrong."""
    plugins = raw.get("plugins")
    if not isinstance(plugins, dict):
        return None
    try:
        return validate(
            {"version": CURRENT_VERSION, "admin": {"management_token": "-" * 16}, "plugins": plugins}, path
        )
    except ConfigError:
        return None


def declared_sections(pm: pluggy.PluginManager) -> tuple[ConfigSection, ...]:
    """The built-in declared config sections and those of the plugins (hook ``config_sections``)."""
    declared = list(BUILTIN_SECTIONS)
    for provided in pm.hook.config_sections():
        declared.extend(provided or ())
    return tuple(declared)


# `grantd serve --host/--port` overrides [server] for its run: the table it runs with, as JSON, for
# every process of that server that reads the file again (the other server processes, the decision
# log's sequencer), so all of them listen, issue and sign with the same issuer as the banner's.
SERVE_SERVER_ENV = "GRANTD_SERVE_SERVER_TABLE"


def load_with_plugins(path: str | os.PathLike[str]) -> Config:
    """The config file checked with the sections its plugins declare (the server's processes; the
    CLI's ``load`` knows only the built-in ones), with ``grantd serve``'s overrides of [server]."""
    p, raw = read_toml(path)
    overridden = os.environ.get(SERVE_SERVER_ENV)
    if overridden:
        raw = {**raw, "server": json.loads(overridden)}
    return validate(raw, p, declared_sections(build_plugin_manager(_plugins_only(raw, p))))


# A check of the file that needs the plugins, from a layer above this one (the notification
# channels: grantd.notify.startup_problems): (plugins, raw document, config file's directory) -> problems.
StartupCheck = Callable[[pluggy.PluginManager, dict[str, Any], Path], list[str]]


def check_startup(
    path: str | os.PathLike[str], *, storage: bool = True, checks: Sequence[StartupCheck] = ()
) -> Config:
    """D18: everything ``grantd serve`` checks short of binding the port, for ``serve`` and ``grantd
    config validate`` alike, every problem in one ConfigError: the file's keys (and the secrets and
    files they name), the plugins (modules importable, paths safe), the storage plugin known, each
    federation provider's type known and its table and secrets accepted by that type. Plugin checks
    run even when other keys are wrong. ``storage``: also the storage plugin's own preconditions
    (its ``check_config``: a driver installed, a database file or directory usable, a database server
    reachable) without creating or writing anything; ``serve`` leaves them to its preflight, which opens the storage right after and says what
    is wrong in its one start-up line."""
    p, raw = read_toml(path)
    problems: list[str] = []
    config: Config | None = None
    try:  # the sections the file's plugins declare (a plugin that does not load is reported below)
        sections = declared_sections(build_plugin_manager(_plugins_only(raw, p)))
    except ConfigError:
        sections = declared_sections(build_plugin_manager(None))
    try:
        config = validate(raw, p, sections)
    except ConfigError as exc:
        problems.extend(exc.problems)
    try:
        pm = build_plugin_manager(config if config is not None else _plugins_only(raw, p))
    except ConfigError as exc:
        problems.extend(q for q in exc.problems if q not in problems)
        pm = build_plugin_manager(None)
    if config is not None:
        problems.extend(_storage_problems(pm, config.storage.plugin, config if storage else None))
        try:
            build_federation_providers(pm, config)
        except ConfigError as exc:
            problems.extend(exc.problems)
    else:  # only what can be told from the raw tables
        storage_table = raw.get("storage")
        name = storage_table.get("plugin", "sqlite") if isinstance(storage_table, dict) else "sqlite"
        if isinstance(name, str) and name:
            problems.extend(_storage_problems(pm, name, None))
        federation = raw.get("federation")
        tables = federation.get("providers") if isinstance(federation, dict) else None
        types = _provider_types(pm)
        for index, table in enumerate(tables if isinstance(tables, list) else []):
            kind = table.get("type") if isinstance(table, dict) else None
            if isinstance(kind, str) and kind and kind not in types:
                problems.append(_unknown_type(f"federation.providers[{index}]", kind, types))
    for check in checks:  # with or without a valid file: every problem at once (D18)
        problems.extend(q for q in check(pm, raw, p.parent) if q not in problems)
    if problems:
        raise ConfigError(problems, p)
    assert config is not None
    return config


@dataclass(frozen=True)
class FederationProvider:
    """One `[[federation.providers]]` table, built by its type's factory (`federation_provider_types`)."""

    id: str
    type: str
    name: str
    provider: Any  # what the factory returned

    @property
    def can_sign_in(self) -> bool:
        """Provider objects without the round trip (``begin``/``finish``) are listed but not offered."""
        return callable(getattr(self.provider, "begin", None)) and callable(
            getattr(self.provider, "finish", None)
        )

    def public_info(self) -> dict[str, Any]:
        """What anyone may see (GET /api/federation/providers): the provider's own public_info(),
        with id, type and name always those of the config."""
        return {**dict(self.provider.public_info()), "id": self.id, "type": self.type, "name": self.name}


_PROBLEM_KEY = re.compile(r"^[A-Za-z0-9_.\[\]-]+$")


def _provider_types(pm: pluggy.PluginManager) -> dict[str, Any]:
    types: dict[str, Any] = {}
    for provided in pm.hook.federation_provider_types():
        types.update(provided or {})
    return types


def _unknown_type(where: str, kind: str, types: dict[str, Any]) -> str:
    hint = difflib.get_close_matches(kind, list(types), n=1)
    extra = f' (did you mean "{hint[0]}"?)' if hint else ""
    available = ", ".join(sorted(types)) or "none"
    return f"{where}.type: no provider type named {kind!r}{extra}; available: {available}"


def build_federation_providers(pm: pluggy.PluginManager, config: Config) -> tuple[FederationProvider, ...]:
    """Build every configured upstream provider through its type's factory.

    grantd.config has checked the keys every table has (id, type, name); the factory checks the rest.
    Every problem becomes a ConfigError line at ``federation.providers[N].key``: an unknown type
    (with a "did you mean"), a factory's ``ValueError("key: what is wrong")`` (one problem per
    line), a ``KeyError(key)`` (a missing key) and a secret that cannot be read.
    """
    types = _provider_types(pm)
    problems: list[str] = []
    built: list[FederationProvider] = []
    for index, table in enumerate(config.federation.providers):
        where = f"federation.providers[{index}]"
        kind = table["type"]
        factory = types.get(kind)
        if factory is None:
            problems.append(_unknown_type(where, kind, types))
            continue

        def read_secret(key: str, table: dict[str, Any] = table, where: str = where) -> str:
            value = table.get(key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{key}: missing or not a string (a secret: file:PATH or env:NAME)")
            found: list[str] = []
            warned: list[str] = []
            secret = resolve_secret(key, value, config.base_dir, found, warned)
            config.warnings.extend(f"{where}.{warning}" for warning in warned)
            if secret is None:
                raise ValueError(found[0])
            return secret

        try:
            provider = factory(dict(table), read_secret)
        except ValueError as exc:
            for line in str(exc).splitlines() or ["refused by its provider type"]:
                key, sep, message = line.partition(": ")
                problems.append(
                    f"{where}.{key}: {message}" if sep and _PROBLEM_KEY.match(key) else f"{where}: {line}"
                )
            continue
        except KeyError as exc:
            problems.append(f"{where}.{exc.args[0] if exc.args else '?'}: missing")
            continue
        built.append(FederationProvider(table["id"], kind, table["name"], provider))
    if problems:
        raise ConfigError(problems, config.path)
    return tuple(built)
