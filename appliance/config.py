"""The one TOML configuration file: schema, loading, validation, secrets and the generated dev config.

Validation reports every problem at once (each with the key's dotted path and, for a typo, a
"did you mean"), so an operator fixes the file in one pass instead of one restart per mistake.

Secrets (`admin.management_token`, and the secret keys of `[[federation.providers]]` tables,
which the provider type's factory reads through `read_secret`) may be written as
  "file:PATH"  - read from a file (relative paths are relative to the config file), or
  "env:NAME"   - read from an environment variable, or
  a literal    - accepted, but `grantd config validate` warns: keep secrets out of the file.
"""

from __future__ import annotations

import difflib
import os
import re
import secrets
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomli_w

from grantd.client_address import parse_nameserver, parse_networks

CONFIG_ENV = "GRANTD_CONFIG"
DEFAULT_CONFIG_NAME = "grantd.toml"
CURRENT_VERSION = 1


class ConfigError(Exception):
    """Raised with every problem found in a configuration file."""

    def __init__(self, problems: list[str], path: Path | None = None):
        self.problems = problems
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(where + "; ".join(problems))


@dataclass(frozen=True)
class Key:
    """One configuration key: its type, default and meaning (the meaning is written into generated configs)."""

    kind: type
    default: Any
    help: str
    secret: bool = False
    choices: tuple[str, ...] | None = None
    item_kind: type | None = None  # for lists
    minimum: int | None = None
    maximum: int | None = None
    check: Callable[[Any], str | None] | None = None
    example: str | None = None  # written, commented out, below the key in generated configs


def _no_trailing_slash_url(value: Any) -> str | None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "must be an http(s) URL such as https://idp.example.com"
    if value.endswith("/"):
        return "must not end with a slash (tokens carry it byte for byte)"
    if parts.query or parts.fragment:
        return "must not carry a query or fragment"
    return None


def _networks(value: Any) -> str | None:
    problems = parse_networks(value)[1]
    return "; ".join(problems) if problems else None


def _email(value: Any) -> str | None:
    if "@" not in value or value.strip() != value or len(value) > 254:
        return "must be an e-mail address"
    return None


def _emails(value: Any) -> str | None:
    for item in value:
        if _email(item):
            return f"{item!r} is not an e-mail address"
    return None


def _origin(value: Any) -> str | None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or value != f"{parts.scheme}://{parts.netloc}":
        return "must be an origin such as https://idp.example.com (scheme://host[:port], no path or slash)"
    return None


def _client_id(value: Any) -> str | None:
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?", value):
        return "must be a lowercase host[:port] such as sp.example.com (no scheme or path)"
    return None


def _nameservers(value: Any) -> str | None:
    for item in value:
        if isinstance(item, str) and parse_nameserver(item) is None:
            return f"{item!r} is not an IP address with an optional port (IPv6 in brackets with a port)"
    return None


def _rp_id(value: Any) -> str | None:
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", value) or ".." in value:
        return "must be a bare host name such as idp.example.com (no scheme, port or path)"
    return None


# Section -> key -> Key.  Top-level scalar keys live under "".
SCHEMA: dict[str, dict[str, Key]] = {
    "": {
        "version": Key(int, CURRENT_VERSION, "Configuration format version.", minimum=1, maximum=CURRENT_VERSION),
    },
    "server": {
        "host": Key(str, "127.0.0.1", "Address to listen on."),
        "port": Key(int, 8000, "TCP port to listen on.", minimum=1, maximum=65535),
        "issuer": Key(
            str,
            None,
            "Public base URL of this server, exactly as clients reach it (no trailing slash). "
            "Default: http://HOST:PORT.",
            check=_no_trailing_slash_url,
        ),
        "workers": Key(int, 1, "Server processes sharing the port (and the database).", minimum=1, maximum=64),
        "max_body_bytes": Key(int, 1_048_576, "Largest accepted request body; larger bodies get 413.", minimum=1024),
        "request_timeout": Key(int, 60, "Seconds a client may take to send a request.", minimum=1),
        "graceful_shutdown_timeout": Key(int, 10, "Seconds in-flight requests get after SIGTERM.", minimum=0),
        "trusted_proxies": Key(
            list, [], "Reverse proxies (IP addresses or CIDR networks) whose X-Forwarded-For names the client "
            "(empty: the client is always the TCP peer).", item_kind=str, check=_networks,
        ),
    },
    "log": {
        "level": Key(str, "info", "Log level.", choices=("debug", "info", "warning", "error")),
        "format": Key(str, "text", "Log line format.", choices=("text", "json")),
        "access": Key(bool, True, "One log line per request (method, path, status, duration, request id)."),
    },
    "metrics": {
        "enabled": Key(bool, False, "Serve Prometheus metrics at GET /metrics (off: 404)."),
        "token": Key(
            str, None, "Bearer token a scrape must send (Authorization: Bearer ...). Use file:PATH or env:NAME. "
            "Unset: /metrics is open to whoever reaches the port.", secret=True,
        ),
    },
    "admin": {
        "management_token": Key(
            str,
            None,
            "Bearer token for administrators and deployment tools. Use file:PATH or env:NAME.",
            secret=True,
        ),
        "emails": Key(list, [], "E-mail addresses of human administrators.", item_kind=str, check=_emails),
        "management_identity": Key(
            str,
            "admin@grantd.local",
            "E-mail recorded as owner/approver/decider when the management token acts.",
            check=_email,
        ),
    },
    "storage": {
        "plugin": Key(str, "sqlite", "Storage plugin name (see `grantd plugins`)."),
        "path": Key(str, "grantd.db", "SQLite database file (relative to the config file)."),
        "dsn": Key(
            str, None, 'PostgreSQL connection (plugin = "postgres"): a libpq string or postgresql:// URI. '
            "A secret: use file:PATH or env:NAME.", secret=True,
        ),
        "pool_size": Key(
            int, 10, 'Database connections per server process at most (plugin = "postgres").', minimum=1, maximum=200,
        ),
    },
    "tokens": {
        "agent_token_ttl": Key(int, 3600, "Lifetime in seconds of an agent identity token.", minimum=60, maximum=86400),
        "agent_audience": Key(str, "apes-cli", "`aud` of agent identity tokens (the peer CLI expects apes-cli)."),
        "challenge_ttl": Key(int, 60, "Seconds an agent challenge stays valid.", minimum=5, maximum=600),
    },
    "grants": {
        "allow_unauthenticated": Key(bool, False, "Allow grant requests without a credential (not recommended)."),
        "pending_ttl": Key(int, 172_800, "Seconds a pending grant waits for a decision before it expires.", minimum=1),
        "max_duration": Key(int, 2_592_000, "Longest `timed` grant in seconds.", minimum=60),
        "once_ttl": Key(
            int, 3600, "Seconds an approved `once` grant stays usable; unused, it then expires (D6).",
            minimum=60, maximum=2_592_000,
        ),
        "events_heartbeat": Key(int, 15, "Seconds between heartbeat comments on GET /api/grants/events.", minimum=1, maximum=300),
        "events_poll_ms": Key(
            int, 200, "How often (ms) each server process looks for grant events written by other processes.",
            minimum=10, maximum=5000,
        ),
        "events_retention": Key(int, 86_400, "Seconds grant events are kept for Last-Event-ID resume.", minimum=60),
        "expiry_sweep_interval": Key(
            int, 5, "Seconds between sweeps that persist expiries (and send grant.expired events).", minimum=1, maximum=3600,
        ),
    },
    "limits": {
        # D12. Fixed windows of one minute, counted in the store (shared by every process and node);
        # a request over a limit gets 429 with Retry-After. 0 turns a limit off.
        "authenticate_per_agent": Key(
            int, 120, "Challenge requests, and authenticate requests, per agent per minute (each counted on its own).",
            minimum=0,
        ),
        "authenticate_per_address": Key(
            int, 300, "Challenge requests, and authenticate requests, per client address per minute.", minimum=0,
        ),
        "enroll_per_address": Key(int, 600, "Agent enrolments per client address per minute.", minimum=0),
        "failed_bearer_per_address": Key(
            int, 50, "Refused bearer tokens (management token or identity token) per client address per minute; "
            "then every further wrong bearer from that address gets 429 until the minute ends, and a possible "
            "management-token guess waits 1 s before it is compared. A valid bearer is always accepted.", minimum=0,
        ),
        "grants_per_agent": Key(int, 120, "Grant requests per agent per minute.", minimum=0),
        "pending_per_agent": Key(
            int, 100, "Pending (undecided, not expired) grants one agent may have at once.", minimum=0, maximum=1000,
        ),
        "agents_per_person": Key(
            int, 100, "Agents one owner may have enrolled at once (D11; counted in the database; 0 turns it off).",
            minimum=0,
        ),
        "pending_per_owner": Key(
            int, 200, "Pending grants across all agents of one owner (D11; counted in the database; 0 turns it off).",
            minimum=0,
        ),
        "verify_per_address": Key(int, 6000, "POST /api/grants/verify requests per client address per minute.", minimum=0),
        "streams_per_principal": Key(
            int, 8, "Open GET /api/grants/events streams per principal, per server process.", minimum=0,
        ),
        "streams_per_owner": Key(
            int, 32, "Open GET /api/grants/events streams per person, per server process: their own, those of "
            "every agent they own, and the management token's for the management identity, together (a person "
            "cannot escape streams_per_principal by streaming as many agents).", minimum=0,
        ),
        "streams_per_process": Key(int, 1000, "Open event streams per server process (all principals).", minimum=0),
        "passkey_per_address": Key(
            int, 60, "Passkey sign-in options, sign-in verifications and registration verifications per client "
            "address per minute (each counted on its own, apart from the agents' counters).", minimum=0,
        ),
        "device_code_per_address": Key(
            int, 30, "User codes of the device grant looked up or decided (GET /device?user_code=, POST "
            "/api/device/decide) per client address per minute: bounds guessing of user codes (RFC 8628 §5.1). "
            "Device authorizations started (POST /device_authorization) are counted apart, with the same limit.",
            minimum=0,
        ),
        "sp_login_per_address": Key(
            int, 60, "SP logins started (POST /api/login: a DNS lookup and a request to an IdP each) per client "
            "address per minute.", minimum=0,
        ),
        "ipv6_prefix": Key(
            int, 64, "Every per-address limit counts an IPv6 client by this prefix of its address (a client "
            "usually owns a whole /64); IPv4 addresses, and IPv4-mapped IPv6 addresses, count one by one.",
            minimum=32, maximum=128,
        ),
        "token_per_address": Key(
            int, 300, "Requests to the OAuth token endpoint (POST /token: code, refresh, client_credentials and "
            "device polls alike) per client address per minute.", minimum=0,
        ),
    },
    "webauthn": {
        "rp_id": Key(
            str, None, "Relying party id of passkeys: a bare host name, no scheme or port, equal to the origin's "
            "host or a parent domain of it. Default: the issuer's host name. Changing it orphans every passkey.",
            check=_rp_id,
        ),
        "origin": Key(
            str, None, "The exact origin browsers show for this server (scheme://host[:port], no path). "
            "Default: the issuer's origin.", check=_origin,
        ),
        "rp_name": Key(str, "grantd", "Name browsers show when they create a passkey."),
    },
    "sessions": {
        "ttl": Key(
            int, 28_800, "Seconds a browser session lives after sign-in (absolute: activity does not extend it).",
            minimum=300, maximum=2_592_000,
        ),
    },
    "people": {
        "registration_ttl": Key(
            int, 86_400, "Seconds a registration URL (/register?token=...) stays usable when its creator names "
            "no expiry; it is single use either way.", minimum=60, maximum=2_592_000,
        ),
        "first_admin": Key(
            str, None, "E-mail of an administrator that `grantd serve` creates at start and, while they have no "
            "passkey, prints a registration link for on its terminal (never in the log). The development config "
            "sets admin@localhost; unset: none.", check=_email,
        ),
    },
    "federation": {
        "providers": Key(
            list, [], "Upstream identity providers, one [[federation.providers]] table each: id (unique, "
            "letters, digits, . _ -), type (a provider type from a plugin; built in: oidc), name (shown on the "
            "login page; default: the id) and the type's own keys. Secrets as file:PATH or env:NAME. "
            "Listed publicly, without secrets, at GET /api/federation/providers; /login offers each as a button "
            "(docs/federation.md). Register {issuer}/auth/federated/<id>/callback as the redirect URI upstream.",
            item_kind=dict,
            example="""[[federation.providers]]
id = "corp"
type = "oidc"
name = "Corp SSO"
issuer = "https://sso.example.com"   # https; http only on localhost/127.0.0.1/::1
client_id = "grantd"
client_secret = "file:corp-sso-secret"   # optional when the upstream offers "none" (no secret is sent then)
# scopes = ["openid", "email", "profile"]
# email_claim = "email"                # the id_token claim with the e-mail (email_verified must be true)
# allowed_domains = ["example.com"]    # empty: any domain
# create_unknown = false               # true: a verified e-mail grantd does not know becomes a new person
# trust_email = false                  # true: the upstream never sends email_verified; absent counts as verified
#                                      # (an explicit false is always refused; allowed_domains still applies)""",
        ),
    },
    "oauth": {
        "access_token_ttl": Key(
            int, 900, "Lifetime in seconds of OAuth access tokens (and of ID tokens' refresh: ID tokens live 300 s).",
            minimum=60, maximum=86_400,
        ),
        "refresh_token_ttl": Key(
            int, 2_592_000, "Absolute lifetime in seconds of a refresh-token family (rotation does not extend it).",
            minimum=300, maximum=31_536_000,
        ),
        "metadata_cache_ttl": Key(
            int, 300, "Seconds a domain client's fetched /.well-known/oauth-client-metadata (or the failure to "
            "fetch it) is remembered.", minimum=0, maximum=86_400,
        ),
        "metadata_failure_ttl": Key(
            int, 120, "Seconds a registrable domain whose client metadata could not be fetched (not resolvable, "
            "no complete answer within 5 s, an error status, not JSON) is not asked again: every client_id under it is refused "
            "meanwhile (wildcard DNS makes endless names of one domain). 0: only the client_id's own cache.",
            minimum=0, maximum=86_400,
        ),
        "fetches_at_once": Key(
            int, 32, "How many fetches made for callers (client metadata; IdP discovery documents, JWKS and token "
            "requests of SP login) may run at once in one server process; one more is refused at once with a "
            "clear error, never queued. Each has one overall deadline of 5 s.", minimum=1, maximum=10_000,
        ),
        "device_code_ttl": Key(
            int, 600, "Seconds a device authorization request (RFC 8628: grantd login, grantd tui) waits for a "
            "person to enter its user code on /device.", minimum=60, maximum=3600,
        ),
        "device_poll_interval": Key(
            int, 5, "Seconds a device client must wait between polls of /token (faster polls get slow_down, "
            "which adds 5 s).", minimum=1, maximum=60,
        ),
        "allow_private_metadata_hosts": Key(
            bool, False, "Tests only: let client metadata come from loopback, private or link-local addresses, "
            "and over http. Never in production (it opens the metadata fetch to SSRF).",
        ),
        "clients": Key(
            list, [], "OAuth clients registered here, one [[oauth.clients]] table each: client_id, name, "
            "redirect_uris (exact), optional client_secret (file:PATH or env:NAME; then a confidential client "
            "using client_secret_basic or client_secret_post), id_token_signed_response_alg (EdDSA, ES256 or "
            "RS256), api_access (its access tokens may call grantd's /api as the person). Other clients are "
            "SPs identified by their domain, whose metadata is fetched.", item_kind=dict,
            example="""[[oauth.clients]]
client_id = "wiki"
name = "Team wiki"
redirect_uris = ["https://wiki.example.com/oauth/callback"]
client_secret = "file:wiki-client-secret"   # made by: grantd config secret wiki-client-secret (URL-safe: see docs/oauth.md)
# id_token_signed_response_alg = "RS256"
# api_access = false""",
        ),
    },
    "sp": {
        "enabled": Key(
            bool, False, "Be a service provider: people log in here at the identity provider their e-mail domain "
            "names in DNS (DDISA TXT _ddisa.<domain>) or at fallback_idp, as guests (POST /api/login, "
            "/api/callback, docs/sp.md). Off: those routes and the SP well-knowns answer 404.",
        ),
        "client_id": Key(
            str, None, "The client id this SP presents to identity providers (they fetch "
            "https://<client_id>/.well-known/oauth-client-metadata). Default: the issuer's host[:port].",
            check=_client_id,
        ),
        "fallback_idp": Key(
            str, None, "Identity provider (issuer URL) for e-mail domains without a DDISA record. Unset: such "
            "logins fail with \"could not discover IdP for this email domain\".", check=_no_trailing_slash_url,
        ),
        "nameservers": Key(
            list, [], "DNS servers for DDISA discovery: IP addresses, with an optional port (\"10.0.0.53\", "
            "\"127.0.0.1:5353\", \"[::1]:53\"). Default: the system's resolvers.", item_kind=str, check=_nameservers,
        ),
        "allow_http_idp": Key(
            bool, False, "Tests only: accept http:// identity providers and ones on loopback or private "
            "addresses. Never in production (plain http exposes codes and tokens; private addresses open "
            "discovery to SSRF).",
        ),
        "dns_cache_ttl": Key(
            int, 300, "Longest time in seconds a DDISA answer is remembered (shorter when the record's TTL is).",
            minimum=0, maximum=86_400,
        ),
        "dns_negative_cache_ttl": Key(
            int, 60, "Seconds the absence of a DDISA record (or a failed lookup) is remembered.",
            minimum=0, maximum=86_400,
        ),
    },
    "plugins": {
        "modules": Key(list, [], "Extra plugin modules to import and register (importable names).", item_kind=str),
        "paths": Key(
            list, [], "Directories to import those modules from (relative to this file; not writable by others). "
            "The bundle ignores PYTHONPATH, so this is how it finds site plugins.", item_kind=str,
        ),
    },
}

SECTION_HELP = {
    "server": "HTTP server",
    "log": "Logging",
    "metrics": "Prometheus metrics (docs/operations.md lists the series)",
    "admin": "Administration",
    "storage": "Storage",
    "tokens": "Agent identity tokens",
    "grants": "Grants",
    "limits": "Abuse limits (D12): per client address and per identity; 0 turns one off",
    "people": "People: persons, their registration URLs",
    "webauthn": "Passkeys (WebAuthn): relying party id and origin, checked exactly",
    "sessions": "Browser sessions of people (cookie grantd_session)",
    "federation": "Federation: people sign in through upstream identity providers",
    "oauth": "OAuth 2.0 / OpenID provider: tokens, clients (docs/oauth.md)",
    "sp": "Service provider: log people in at the IdP their e-mail domain names (DDISA; docs/sp.md)",
    "plugins": "Plugins",
}


class Section:
    """Attribute access to one section's resolved values."""

    def __init__(self, name: str, values: dict[str, Any], secret_keys: set[str]):
        self._name = name
        self._values = values
        self._secret_keys = secret_keys

    def __getattr__(self, item: str) -> Any:
        try:
            return self._values[item]
        except KeyError:
            raise AttributeError(f"{self._name}.{item}") from None

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __repr__(self) -> str:  # never print secrets
        shown = {k: ("***" if k in self._secret_keys and v else v) for k, v in self._values.items()}
        return f"Section({self._name}, {shown})"


@dataclass
class Config:
    path: Path | None
    raw: dict[str, Any]
    sections: dict[str, Section]
    warnings: list[str] = field(default_factory=list)

    def __getattr__(self, item: str) -> Any:
        sections = self.__dict__.get("sections", {})
        if item in sections:
            return sections[item]
        raise AttributeError(item)

    @property
    def version(self) -> int:
        return int(self.sections[""].version)

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def resolve_path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    def __repr__(self) -> str:
        return f"Config(path={self.path})"


def _type_name(kind: type) -> str:
    return {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a table"}[kind]


def _check_value(path: str, key: Key, value: Any, problems: list[str]) -> None:
    if key.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        problems.append(f"{path}: must be {_type_name(int)}, got {value!r}")
        return
    if key.kind is not int and not isinstance(value, key.kind):
        problems.append(f"{path}: must be {_type_name(key.kind)}, got {value!r}")
        return
    if key.kind is list and key.item_kind is not None:
        bad = [v for v in value if not isinstance(v, key.item_kind)]
        if bad:
            problems.append(f"{path}: every item must be {_type_name(key.item_kind)}, got {bad[0]!r}")
            return
    if key.kind is str and not key.secret and value == "" and key.default not in ("", None):
        problems.append(f"{path}: must not be empty")
        return
    if key.choices and value not in key.choices:
        hint = difflib.get_close_matches(str(value), key.choices, n=1)
        extra = f' (did you mean "{hint[0]}"?)' if hint else ""
        problems.append(f"{path}: must be one of {', '.join(key.choices)}, got {value!r}{extra}")
        return
    if key.minimum is not None and value < key.minimum:
        problems.append(f"{path}: must be at least {key.minimum}, got {value}")
    if key.maximum is not None and value > key.maximum:
        problems.append(f"{path}: must be at most {key.maximum}, got {value}")
    if key.check and value is not None:
        msg = key.check(value)
        if msg:
            problems.append(f"{path}: {msg}")


def resolve_secret(path: str, value: str, base_dir: Path, problems: list[str], warnings: list[str]) -> str | None:
    """Turn "file:PATH" / "env:NAME" / literal into the secret itself."""
    if value.startswith("file:"):
        p = Path(value[5:]).expanduser()
        p = p if p.is_absolute() else base_dir / p
        try:
            secret = p.read_text(encoding="utf-8").strip()
        except OSError as exc:
            problems.append(f"{path}: cannot read secret file {p}: {exc.strerror or exc}")
            return None
        if not secret:
            problems.append(f"{path}: secret file {p} is empty")
            return None
        try:
            if p.stat().st_mode & 0o077 and os.name == "posix":
                warnings.append(f"{path}: secret file {p} is readable by group or others (chmod 600 it)")
        except OSError:
            pass
        return secret
    if value.startswith("env:"):
        name = value[4:]
        secret = os.environ.get(name, "")
        if not secret:
            problems.append(f"{path}: environment variable {name} is not set or empty")
            return None
        return secret
    warnings.append(f"{path}: the secret is written inline; prefer file:PATH or env:NAME")
    return value


def validate(raw: dict[str, Any], path: Path | None = None) -> Config:
    """Validate a parsed TOML document; raise ConfigError listing every problem."""
    problems: list[str] = []
    warnings: list[str] = []
    base_dir = path.parent if path else Path.cwd()
    known_sections = [s for s in SCHEMA if s]
    values: dict[str, dict[str, Any]] = {name: {} for name in SCHEMA}

    for top_key, top_value in raw.items():
        if top_key in SCHEMA[""]:
            continue
        if top_key in SCHEMA:
            if not isinstance(top_value, dict):
                problems.append(f"{top_key}: must be a table ([{top_key}])")
            continue
        hint = difflib.get_close_matches(top_key, known_sections + list(SCHEMA[""]), n=1)
        extra = f' (did you mean "{hint[0]}"?)' if hint else ""
        problems.append(f"{top_key}: unknown key{extra}")

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
                _check_value(dotted, key, value, problems)
                if key.secret and isinstance(value, str):
                    value = resolve_secret(dotted, value, base_dir, problems, warnings)
            else:
                value = key.default
            values[section][name] = value

    if "version" not in raw:
        problems.append('version: missing (add `version = 1` at the top)')

    server = values["server"]
    if server.get("issuer") is None and isinstance(server.get("port"), int):
        host = server["host"] if server["host"] not in ("0.0.0.0", "::") else "127.0.0.1"  # noqa: S104
        server["issuer"] = f"http://{host}:{server['port']}"
    webauthn = values["webauthn"]
    if isinstance(server.get("issuer"), str) and all(isinstance(webauthn.get(k) or "", str) for k in ("origin", "rp_id")):
        issuer = urlsplit(server["issuer"])
        if webauthn.get("origin") is None:
            webauthn["origin"] = f"{issuer.scheme}://{issuer.netloc.lower()}"  # browsers send it lowercased
        if webauthn.get("rp_id") is None:
            webauthn["rp_id"] = urlsplit(webauthn["origin"]).hostname
        host, rp_id = urlsplit(webauthn["origin"]).hostname or "", str(webauthn["rp_id"]).lower()
        if not _origin(webauthn["origin"]) and not _rp_id(rp_id):  # (bad values are reported above)
            webauthn["rp_id"] = rp_id
            if host != rp_id and not host.endswith("." + rp_id):
                problems.append(f"webauthn.rp_id: {rp_id!r} is neither the host of {webauthn['origin']} nor a parent domain of it")
    if not values["admin"].get("management_token"):
        if "management_token" not in raw.get("admin", {}):
            problems.append('admin.management_token: missing (e.g. management_token = "file:management-token")')
    elif len(values["admin"]["management_token"]) < 16:
        problems.append("admin.management_token: too short (use at least 16 characters; `grantd config init` makes one)")
    values["admin"]["emails"] = [e.lower() for e in values["admin"]["emails"] if isinstance(e, str)]
    if isinstance(values["admin"]["management_identity"], str):
        values["admin"]["management_identity"] = values["admin"]["management_identity"].lower()
    if isinstance(server["trusted_proxies"], list):
        server["trusted_proxies"] = parse_networks(p for p in server["trusted_proxies"] if isinstance(p, str))[0]
    if isinstance(values["federation"]["providers"], list):
        values["federation"]["providers"] = _federation_providers(values["federation"]["providers"], problems)
    if isinstance(values["oauth"]["clients"], list):
        values["oauth"]["clients"] = _oauth_clients(values["oauth"]["clients"], base_dir, problems, warnings)

    if problems:
        raise ConfigError(problems, path)
    secret_keys = {name for keys in SCHEMA.values() for name, k in keys.items() if k.secret}
    sections = {name: Section(name or "root", vals, secret_keys) for name, vals in values.items()}
    return Config(path=path, raw=raw, sections=sections, warnings=warnings)


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
            problems.append(f"{where}.id: must be 1-64 letters, digits, '.', '_' or '-' (it is used in URLs), got {provider_id!r}")
        elif provider_id in seen:
            problems.append(f"{where}.id: {provider_id!r} is already the id of federation.providers[{seen[provider_id]}]")
        else:
            seen[provider_id] = index
        if kind is None:
            problems.append(f"{where}.type: missing (a provider type such as \"oidc\"; `grantd plugins` lists who provides which)")
        elif not isinstance(kind, str) or not kind:
            problems.append(f"{where}.type: must be a non-empty string, got {kind!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            problems.append(f"{where}.name: must be a non-empty string, got {name!r}")
        checked.append({**table, "name": name if isinstance(name, str) and name.strip() else provider_id})
    return tuple(checked)


OAUTH_CLIENT_KEYS = frozenset({"client_id", "name", "redirect_uris", "client_secret", "id_token_signed_response_alg",
                                "api_access"})
OAUTH_CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
ID_TOKEN_ALGS = ("EdDSA", "ES256", "RS256")
BUILTIN_CLIENT_IDS = frozenset({"apes-cli", "grantd-cli"})


def _oauth_clients(tables: list[Any], base_dir: Path, problems: list[str], warnings: list[str]) -> tuple[dict[str, Any], ...]:
    """Check every `[[oauth.clients]]` table; resolve its client_secret (file:/env:)."""
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, table in enumerate(tables):
        where = f"oauth.clients[{index}]"
        if not isinstance(table, dict):
            continue  # already reported: every item must be a table
        for name in table:
            if name not in OAUTH_CLIENT_KEYS:
                problems.append(f"{where}.{name}: unknown key (known: {', '.join(sorted(OAUTH_CLIENT_KEYS))})")
        client_id = table.get("client_id")
        if not isinstance(client_id, str) or not OAUTH_CLIENT_ID.match(client_id):
            problems.append(f"{where}.client_id: must be 1-128 letters, digits, '.', '_', ':' or '-', got {client_id!r}")
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
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment or "@" in parts.netloc:
                problems.append(f"{where}.redirect_uris: {uri!r} must be an absolute http(s) URL without userinfo or fragment")
        alg = table.get("id_token_signed_response_alg", "EdDSA")
        if alg not in ID_TOKEN_ALGS:
            problems.append(f"{where}.id_token_signed_response_alg: must be one of {', '.join(ID_TOKEN_ALGS)}, got {alg!r}")
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
        checked.append({"client_id": client_id, "name": name, "redirect_uris": tuple(uris), "client_secret": secret,
                        "id_token_signed_response_alg": alg, "api_access": api_access is True})
    return tuple(checked)


def read_toml(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The config file's absolute path and its parsed TOML (ConfigError when it cannot be read)."""
    p = Path(path).expanduser().resolve()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read config file: {exc.strerror or exc}"], p) from None
    try:
        return p, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"not valid TOML: {exc}"], p) from None


def load(path: str | os.PathLike[str]) -> Config:
    """The file's keys checked (grantd.plugin_manager.check_startup adds what needs the plugins)."""
    p, raw = read_toml(path)
    return validate(raw, p)


# ---------------------------------------------------------------------------------------------
# Writing configs: `grantd config init` and config.example.toml come from the same schema.


def _toml_value(value: Any) -> str:
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def render(overrides: dict[str, dict[str, Any]] | None = None, *, example: bool = False) -> str:
    """A commented TOML config: every key with its meaning; overridden keys set, the rest commented out."""
    overrides = overrides or {}
    lines = [
        "# grantd configuration. Every key is listed with its default; uncomment to change it.",
        "# Validate with: grantd config validate FILE",
        "",
    ]
    for section, keys in SCHEMA.items():
        if section:
            lines += ["", f"# {SECTION_HELP[section]}", f"[{section}]"]
        for name, key in keys.items():
            lines.append(f"# {key.help}")
            if key.choices:
                lines.append(f"# One of: {', '.join(key.choices)}.")
            chosen = overrides.get(section, {})
            if name in chosen:
                lines.append(f"{name} = {_toml_value(chosen[name])}")
            elif section == "" and name == "version":
                lines.append(f"version = {CURRENT_VERSION}")
            elif key.default is None:
                lines.append(f"# {name} =")
            else:
                lines.append(f"# {name} = {_toml_value(key.default)}")
            if key.example:
                lines.append("# For example:")
                lines += [line if line.startswith("#") else f"# {line}" for line in key.example.splitlines()]
    text = "\n".join(lines) + "\n"
    if not example:
        tomllib.loads(text)  # what we write must parse
    return text


def development_issuer(host: str, port: int) -> str:
    """The issuer of a generated development config: ``localhost`` for a loopback address, because
    browsers refuse an IP address as a passkey's relying-party id (http://localhost is a secure
    context, so passkeys work there without TLS)."""
    name = "localhost" if host in ("127.0.0.1", "localhost", "::1") else host
    return f"http://{name}:{port}"


def new_secret() -> str:
    """A fresh secret (the management token, an OAuth client's secret): 32 random bytes as URL-safe
    base64 without padding, so only ``A-Z a-z 0-9 - _``.

    URL-safe on purpose: a client secret travels in HTTP Basic credentials, which RFC 6749 §2.3.1
    wants form-encoded, and common clients (authlib's default ``client_secret_basic`` among them)
    send it unencoded. Ordinary base64 (``openssl rand -base64 32``: about half of its secrets hold a
    ``+`` or ``/``, and ``=`` padding) or a ``%`` then means one thing to the client and another to
    a server that decodes as the RFC says. A URL-safe secret is the same string encoded or not."""
    return secrets.token_urlsafe(32)


def write_secret_file(path: Path, *, force: bool = False) -> str:
    """Write ``new_secret()`` to ``path`` (mode 0600, created or, with ``force``, replaced); the secret."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (0 if force else os.O_EXCL)
    secret = new_secret()
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(secret + "\n")
    os.chmod(path, 0o600)
    return secret


def write_new_config(
    path: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    data_dir: Path | None = None,
    force: bool = False,
    first_admin: str | None = None,
) -> tuple[str, Path]:
    """Write a new config with a fresh management token kept in a 0600 file beside it.
    ``first_admin`` (the development config of ``grantd serve``) becomes ``people.first_admin``:
    ``grantd serve`` creates that administrator and prints their registration URL (D8).

    Returns (token, token_path). The token is returned so the caller can print it once.
    """
    path = path.expanduser().resolve()
    if path.exists() and not force:
        raise FileExistsError(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    token_path = path.parent / "management-token"
    token = write_secret_file(token_path, force=True)
    db = (data_dir / "grantd.db") if data_dir else Path("grantd.db")
    text = render(
        {
            "server": {"host": host, "port": port, "issuer": development_issuer(host, port)},
            "admin": {"management_token": f"file:{token_path.name}"},
            "storage": {"plugin": "sqlite", "path": str(db)},
            **({"people": {"first_admin": first_admin}} if first_admin else {}),
        }
    )
    path.write_text(text, encoding="utf-8")
    return token, token_path
