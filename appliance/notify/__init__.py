"""Reaching approvers (D15): the channel types plugins offer and the channels a config builds.

The channel types come from ``notification_channel_types`` (built-ins ``smtp``, ``webpush``,
``ntfy``, ``webhook`` in grantd.plugins.notify_*); the message a notice carries is
grantd.notify.message, the webhook signature grantd.notify.signature. The outbox, routes and
delivery are grantd.services.notify; ``[notify]`` is a section of the config (grantd.config), whose
channel tables this module checks and builds (``startup_problems`` for ``grantd config validate``
and ``grantd serve``, ``configured_channels`` for the server).

A ``[[notify.channels]]`` table is checked here the way ``[[federation.providers]]`` tables are
(grantd.plugin_manager.build_federation_providers): every problem at once, each at its key path
``notify.channels[N].key``. Secrets (``ChannelType.secrets``) come only from ``file:PATH`` or
``env:NAME``: a password written into the config file would end up in backups and diffs. A type
may also offer ``file:``/``env:`` for a key that is a secret only sometimes (a webhook URL that
embeds its token) by calling ``read_secret`` for it when the value has that prefix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grantd.config import ConfigError, resolve_secret
from grantd.hookspecs import ChannelType, NotificationChannel

if TYPE_CHECKING:
    import pluggy

COMMON_KEYS = ("id", "type")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_PROBLEM_KEY = re.compile(r"^[A-Za-z0-9_.\[\]-]+$")


class EndpointRefused(ValueError):
    """A push endpoint grantd will not send to (not https, not an allowed host, a private
    address...). ``reason`` is safe to show: a route answers it as a 400."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def channel_types(pm: pluggy.PluginManager) -> dict[str, ChannelType]:
    """Every channel type the loaded plugins offer (``notification_channel_types``), by name.
    A later plugin's entry of the same name wins, as with the other ``*_types`` hooks."""
    types: dict[str, ChannelType] = {}
    for provided in pm.hook.notification_channel_types():
        for name, kind in (provided or {}).items():
            if not isinstance(kind, ChannelType):
                raise TypeError(f"notification channel type {name!r} is not a grantd.hookspecs.ChannelType")
            types[name] = kind
    return types


def _read_secret(table: Mapping[str, Any], key: str, base_dir: Path, warnings: list[str], where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key}: missing or not a string (a secret: file:PATH or env:NAME)")
    if not value.startswith(("file:", "env:")):
        raise ValueError(f"{key}: a secret must come from file:PATH or env:NAME, never written inline")
    found: list[str] = []
    warned: list[str] = []
    secret = resolve_secret(key, value, base_dir, found, warned)
    warnings.extend(f"{where}.{warning}" for warning in warned)
    if secret is None:
        raise ValueError(found[0])
    return secret


def check_channels(
    types: Mapping[str, ChannelType],
    tables: Sequence[Mapping[str, Any]],
    *,
    base_dir: Path,
    warnings: list[str] | None = None,
    where: str = "notify.channels",
) -> tuple[list[NotificationChannel], list[str]]:
    """(the channels built, the problems found): every table through its type (module docstring)."""
    warnings = warnings if warnings is not None else []
    problems: list[str] = []
    built: list[NotificationChannel] = []
    seen: set[str] = set()
    kinds_seen: set[str] = set()
    second_push: list[str] = []
    for index, table in enumerate(tables):
        at = f"{where}[{index}]"
        if not isinstance(table, Mapping):
            problems.append(f"{at}: must be a table")
            continue
        channel_id, kind = table.get("id"), table.get("type")
        count = len(problems)
        if not isinstance(channel_id, str) or not _ID.match(channel_id):
            problems.append(f"{at}.id: missing or not an id (lowercase letters, digits, - and _, at most 32)")
        elif channel_id in seen:
            problems.append(f"{at}.id: {channel_id!r} is used by another channel")
        else:
            seen.add(channel_id)
        if not isinstance(kind, str) or kind not in types:
            hint = difflib.get_close_matches(kind, list(types), n=1) if isinstance(kind, str) else []
            extra = f' (did you mean "{hint[0]}"?)' if hint else ""
            problems.append(
                f"{at}.type: no channel type named {kind!r}{extra}; available: "
                f"{', '.join(sorted(types)) or 'none'}"
            )
            continue
        if kind == "webpush" and kind in kinds_seen:
            second_push.append(at)  # reported after the table's own problems
        kinds_seen.add(kind)
        channel_type = types[kind]
        allowed = (*COMMON_KEYS, *channel_type.keys)
        unknown = [key for key in table if key not in allowed]
        for key in unknown:
            hint = difflib.get_close_matches(str(key), list(allowed), n=1)
            extra = f' (did you mean "{hint[0]}"?)' if hint else ""
            problems.append(f"{at}.{key}: not a key of a {kind} channel{extra}")
        if len(problems) > count:
            continue

        for key in channel_type.secrets:
            value = table.get(key)
            if isinstance(value, str) and value and not value.startswith(("file:", "env:")):
                problems.append(
                    f"{at}.{key}: a secret must come from file:PATH or env:NAME, never written inline"
                )

        def read_secret(
            key: str,
            table: Mapping[str, Any] = table,
            at: str = at,
            keys: tuple[str, ...] = channel_type.keys,
        ) -> str:
            if key not in keys:
                raise ValueError(f"{key}: not a key of this channel type")
            return _read_secret(table, key, base_dir, warnings, at)

        try:
            channel = channel_type.build(dict(table), read_secret)
        except ValueError as exc:
            for line in str(exc).splitlines() or ["refused by its channel type"]:
                key, sep, message = line.partition(": ")
                problems.append(
                    f"{at}.{key}: {message}" if sep and _PROBLEM_KEY.match(key) else f"{at}: {line}"
                )
            continue
        except KeyError as exc:
            problems.append(f"{at}.{exc.args[0] if exc.args else '?'}: missing")
            continue
        if len(problems) == count:  # a type that ignored an inline secret still gets no channel
            built.append(channel)
    # browsers subscribe with one application server key (GET /api/push/vapid): a second webpush
    # channel's pushes would be refused by every push service
    problems += [
        f"{at}.type: a second webpush channel (browsers subscribe with one VAPID key)" for at in second_push
    ]
    return built, list(dict.fromkeys(problems))  # an inline secret is found twice: before build and by it


class TableReader:
    """Reads a channel table's keys for a ChannelType's ``build``, collecting every problem;
    ``done()`` raises them as one ``ValueError`` (one ``key: what is wrong`` per line)."""

    def __init__(self, table: Mapping[str, Any]):
        self.table = table
        self.problems: list[str] = []

    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.table.get(key, default)
        if value is None:
            if required:
                self.problems.append(f"{key}: missing")
            return None
        if not isinstance(value, str) or not value.strip() or not value.isprintable():
            self.problems.append(f"{key}: must be a non-empty string")
            return None
        return value

    def boolean(self, key: str, default: bool = False) -> bool:
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            self.problems.append(f"{key}: must be true or false")
            return default
        return value

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problems.append(f"{key}: must be a whole number from {low} to {high}")
            return default
        return value

    def choice(self, key: str, default: str, choices: Sequence[str]) -> str:
        value = self.table.get(key, default)
        if value not in choices:
            self.problems.append(f"{key}: must be one of {', '.join(choices)}")
            return default
        return str(value)

    def strings(self, key: str, default: Sequence[str] = ()) -> tuple[str, ...]:
        value = self.table.get(key, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self.problems.append(f"{key}: must be a list of non-empty strings")
            return tuple(default)
        return tuple(value)

    def secret(self, key: str, read_secret: Any, *, required: bool = True) -> str | None:
        if key not in self.table and not required:
            return None
        try:
            return str(read_secret(key))
        except ValueError as exc:
            self.problems.append(str(exc))
            return None

    def done(self) -> None:
        if self.problems:
            raise ValueError("\n".join(self.problems))


def build_channels(
    pm: pluggy.PluginManager,
    tables: Sequence[Mapping[str, Any]],
    *,
    base_dir: Path,
    warnings: list[str] | None = None,
    path: Path | None = None,
) -> tuple[NotificationChannel, ...]:
    """The channels of ``[[notify.channels]]`` tables, or a ConfigError listing every problem."""
    built, problems = check_channels(channel_types(pm), tables, base_dir=base_dir, warnings=warnings)
    if problems:
        raise ConfigError(problems, path)
    return tuple(built)


# ``[notify]`` keys that are defaults of keys of the channel tables: {type: {[notify] key: table key}}
# (a table's own value wins; an empty list or an unset key is no default).
NOTIFY_DEFAULTS = {
    "webpush": {
        "vapid_private_key": "vapid_private_key",
        "vapid_subject": "subject",
        "allowed_push_hosts": "allowed_push_hosts",
        "allow_private_push_hosts": "allow_private_push_hosts",
    },
    "ntfy": {"deny_from_chat": "deny_from_chat"},
    "webhook": {"deny_from_chat": "deny_from_chat"},
}


def channel_tables(defaults: Mapping[str, Any], tables: Sequence[Any]) -> list[Any]:
    """The ``[[notify.channels]]`` tables with the ``[notify]`` defaults filled in (NOTIFY_DEFAULTS).
    ``allow_private_push_hosts = true`` under ``[notify]`` (tests only) reaches every webpush channel."""
    out = []
    for table in tables:
        if isinstance(table, Mapping):
            kind = str(table.get("type"))
            filled = {
                key: defaults[name]
                for name, key in NOTIFY_DEFAULTS.get(kind, {}).items()
                if defaults.get(name) not in (None, [], False)
            }
            table = {**filled, **table}
            if kind == "webpush" and defaults.get("allow_private_push_hosts") is True:
                table["allow_private_push_hosts"] = True
        out.append(table)
    return out


def startup_problems(pm: pluggy.PluginManager, raw: dict[str, Any], base_dir: Path) -> list[str]:
    """Every problem of the file's ``[[notify.channels]]`` tables (with the ``[notify]`` defaults
    filled in): an unknown type, a key the type does not have, a value or a secret it refuses. A
    ``grantd.plugin_manager.check_startup`` check: runs whether or not the rest of the file is valid."""
    notify = raw.get("notify")
    if not isinstance(notify, dict) or not isinstance(notify.get("channels"), list):
        return []
    tables = channel_tables(notify, notify["channels"])
    return check_channels(channel_types(pm), tables, base_dir=base_dir)[1]


def configured_channels(pm: pluggy.PluginManager, config: Any) -> dict[str, NotificationChannel]:
    """The channels of a checked config, by id (a ConfigError if one is refused)."""
    notify = config.notify
    defaults = {
        "vapid_private_key": notify.vapid_private_key,
        "vapid_subject": notify.vapid_subject,
        "allowed_push_hosts": notify.allowed_push_hosts,
        "allow_private_push_hosts": notify.allow_private_push_hosts,
        "deny_from_chat": notify.deny_from_chat,
    }
    tables = channel_tables(defaults, notify.channels)
    built = build_channels(pm, tables, base_dir=config.base_dir, warnings=config.warnings)
    return {channel.id: channel for channel in built}


__all__ = [
    "EndpointRefused",
    "TableReader",
    "build_channels",
    "channel_types",
    "check_channels",
    "configured_channels",
    "startup_problems",
]
