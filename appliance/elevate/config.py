"""The elevation config (/etc/grantd/elevate.toml): read only when root owns it and its folder and
nobody else can change them; every key typed and bounded, an unknown key refused with a hint."""

from __future__ import annotations

import os
import socket
import stat
import tomllib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from grantd.elevate.approvals import MAX_APPROVALS, MODES, POLICY_PREFIX, RULE_ID
from grantd.elevate.errors import config_error

DEFAULT_CONFIG = "/etc/grantd/elevate.toml"
DEFAULT_AUDIT_LOG = "/var/log/grantd/elevate.log"
DEFAULT_CACHE_DIR = "/var/cache/grantd"
DEFAULT_HOST_KEY = "/etc/grantd/host_ed25519"
DEFAULT_RECEIPT_SPOOL = "/var/lib/grantd/receipts"
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class ElevateConfig:
    path: str
    allowed_issuers: list[str]
    allowed_approvers: list[str]
    allowed_audiences: list[str] = field(default_factory=lambda: ["escapes", "grantd"])
    min_approvals: int = 1  # distinct approving persons a grant must name (D13)
    approvers_mode: str = "any"  # "any": one approver allowed is enough; "all": every approver must be
    host: str = field(default_factory=socket.gethostname)
    audit_log: str = DEFAULT_AUDIT_LOG
    timeout: float = 10.0
    jwks_cache_dir: str = DEFAULT_CACHE_DIR
    jwks_refresh: int = 300
    jwks_max_stale: int = 86400
    offline_grant_types: list[str] = field(default_factory=list)  # opt-in only (D10)
    leeway: int = 30
    plugins: list[str] = field(default_factory=list)
    plugin_dirs: list[str] = field(default_factory=list)
    ca_bundle: str | None = None
    env_keep: list[str] = field(default_factory=list)
    path_env: str = SAFE_PATH
    host_key: str = DEFAULT_HOST_KEY
    receipt_spool: str = DEFAULT_RECEIPT_SPOOL
    receipts: bool | None = None  # None: on when the host key exists (D14 "Hosts")
    receipt_timeout: float = 3.0
    raw: dict[str, Any] = field(default_factory=dict)


# key -> (type check, description); tables (dicts) are left to site plugins.
_KEYS: dict[str, tuple[str, str]] = {
    "allowed_issuers": ("urls", "issuer URLs accepted, exactly as the token's iss (required)"),
    "allowed_approvers": (
        "approvers",
        'e-mails whose decisions are accepted, or "*"; policy:<rule id> or '
        "policy:* to accept rule-approved grants (required)",
    ),
    "min_approvals": ("count", "distinct people who must have approved a grant (default 1)"),
    "approvers_mode": (
        "mode",
        '"any" (default): one approver in allowed_approvers is enough; "all": every approver must be in it',
    ),
    "allowed_audiences": ("strs", "token audiences accepted"),
    "host": ("str", "this host's name as grants name it (default: the system host name)"),
    "audit_log": ("str", "audit log file, one JSON line per attempt"),
    "timeout": ("num", "seconds for every network call (and reading the grant)"),
    "jwks_cache_dir": ("str", 'directory for cached JWKS ("" disables the cache)'),
    "jwks_refresh": ("int", "seconds a cached JWKS is used without asking the issuer"),
    "jwks_max_stale": ("int", "seconds a cached JWKS may still be used while the issuer is unreachable"),
    "offline_grant_types": (
        "types",
        "grant types (timed, always) that may run on cached keys when the issuer "
        "cannot be connected to at all (default none; never once)",
    ),
    "leeway": ("int", "seconds of clock skew allowed on exp/nbf"),
    "plugins": ("strs", "site plugin modules implementing elevate_verify"),
    "plugin_dirs": ("strs", "root-owned directories searched for those modules"),
    "ca_bundle": ("str", "CA bundle for https issuers (default: the system's)"),
    "env_keep": ("strs", "extra environment variable names passed to the command"),
    "path": ("str", "PATH for the command (default: a fixed safe PATH)"),
    "host_key": (
        "str",
        f"this host's Ed25519 key, made by --init-host, root 0600 (default {DEFAULT_HOST_KEY})",
    ),
    "receipt_spool": (
        "str",
        "root 0700 directory where receipts wait while the issuer cannot be reached "
        f"(default {DEFAULT_RECEIPT_SPOOL})",
    ),
    "receipts": ("bool", "post a signed receipt after every attempt (default: on when host_key exists)"),
    "receipt_timeout": ("num", "seconds for posting one receipt (default 3); then it is spooled"),
}


def check_root_owned(path: str, what: str, *, st: os.stat_result | None = None) -> None:
    """Refuse a file or directory root does not own or that others could change."""
    st = st or os.stat(path)
    if st.st_uid != 0:
        raise config_error(f"{what} {path} is not owned by root (uid {st.st_uid})")
    if st.st_mode & 0o022 and not (
        stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_mode & 0o020 == 0
    ):
        raise config_error(f"{what} {path} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o})")


def load_config(path: str) -> ElevateConfig:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise config_error(f"config {path} does not exist") from None
    except OSError as exc:
        raise config_error(f"cannot open config {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise config_error(f"config {path} is not a regular file")
        check_root_owned(path, "config", st=st)
        check_root_owned(os.path.dirname(os.path.abspath(path)), "config directory")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(1024 * 1024)
    finally:
        os.close(fd)
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise config_error(f"config {path} is not valid TOML: {exc}") from None
    return validate_config(raw, path)


def validate_config(raw: dict[str, Any], path: str) -> ElevateConfig:
    import difflib

    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            continue  # a table for a site plugin
        if key not in _KEYS:
            hint = difflib.get_close_matches(key, list(_KEYS), n=1)
            problems.append(f"unknown key {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
            continue
        kind = _KEYS[key][0]
        ok = {
            "bool": isinstance(value, bool),
            "str": isinstance(value, str),
            "num": isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 300,
            "int": isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10 * 365 * 86400,
            "strs": isinstance(value, list) and all(isinstance(v, str) and v for v in value),
            "urls": isinstance(value, list)
            and all(isinstance(v, str) and urlsplit(v).scheme in ("http", "https") for v in value),
            "types": isinstance(value, list) and all(v in ("timed", "always") for v in value),
            "approvers": isinstance(value, list)
            and all(isinstance(v, str) and v and _approver_ok(v) for v in value),
            "count": isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_APPROVALS,
            "mode": value in MODES,
        }[kind]
        if not ok:
            problems.append(f"{key}: {_describe_kind(kind)}")
            continue
        if kind == "str" and key in ("host_key", "receipt_spool") and not value.startswith("/"):
            problems.append(f"{key}: must be an absolute path")
            continue
        values["path_env" if key == "path" else key] = value
    for required in ("allowed_issuers", "allowed_approvers"):
        if not values.get(required) and not any(p.startswith(required) for p in problems):
            problems.append(f"{required}: required, a non-empty list")
    if problems:
        raise config_error(f"config {path}: " + "; ".join(problems))
    return ElevateConfig(path=path, raw=raw, **values)


def _approver_ok(value: str) -> bool:
    """An e-mail, "*", or policy:<rule id> / policy:* (a rule id has the server's form)."""
    if value.startswith(POLICY_PREFIX):
        rule = value[len(POLICY_PREFIX) :]
        return rule == "*" or RULE_ID.fullmatch(rule) is not None
    return value == value.strip()


def approvals_summary(cfg: ElevateConfig) -> str:
    """What --check-config says about approvals: the quorum, the mode and the rule opt-in."""
    rules = [a[len(POLICY_PREFIX) :] for a in cfg.allowed_approvers if a.startswith(POLICY_PREFIX)]
    people = "at least " + (f"{cfg.min_approvals} distinct people" if cfg.min_approvals > 1 else "one person")
    mode = (
        "every approver must be in allowed_approvers"
        if cfg.approvers_mode == "all"
        else "one approver in allowed_approvers is enough"
    )
    if "*" in rules:
        opt_in = "rule-approved grants run (policy:*)"
    elif rules:
        opt_in = "rule-approved grants run only for rules " + ", ".join(rules)
    else:
        opt_in = "rule-approved grants are refused (no policy:<rule id> in allowed_approvers)"
    return f"{people} must have approved; {mode}; {opt_in}"


def _describe_kind(kind: str) -> str:
    return {
        "bool": "must be true or false",
        "str": "must be a string",
        "num": "must be a number of seconds between 0 and 300",
        "int": "must be a non-negative integer",
        "strs": "must be a list of non-empty strings",
        "urls": "must be a list of http(s) URLs",
        "types": 'must be a list of "timed" and/or "always"',
        "approvers": (
            'must be a list of e-mails, "*", "policy:<rule id>" or "policy:*" (a rule id: letters, '
            'digits, ".", "_", "-", at most 64, no spaces)'
        ),
        "count": f"must be an integer from 1 to {MAX_APPROVALS}",
        "mode": 'must be "any" or "all"',
    }[kind]
