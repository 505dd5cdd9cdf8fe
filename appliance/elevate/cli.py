"""`grantd elevate`: run one command as another user, if and only if an AuthZ-JWT allows it (D10).

    sudo -n grantd elevate [--config FILE] (--grant-stdin | --grant-fd N | --grant-file F | --grant JWT) -- CMD ARGS...

It runs as root through a narrow sudoers rule (packaging/sudoers.grantd, installed by packaging/install), never setuid.
Order of work, every step fail-closed:

  1. must be root; config (/etc/grantd/elevate.toml) root-owned, not group/world-writable;
     the audit log is opened before anything else can happen (no audit -> no elevation)
  2. the grant is read: never from argv under sudo (/proc/PID/cmdline is readable by every local
     user); a --grant-file is opened as the calling user and must be theirs and private (0600)
  3. issuer allowed -> signature (JWKS of the issuer, cached on disk with a bound) -> exp
     -> the `elevate_verify` hook: audience -> target_host -> approver -> exact command, then
     any site plugin's checks
  4. the run_as user exists and the command is found (before consuming a `once` grant)
  5. consume at the issuer: only a 200 answer with a JSON object counts. A 5xx, a timeout, a
     redirect or a body that is not JSON fails (exit 1). A `timed`/`always` grant runs without the
     issuer only when the config's `offline_grant_types` (default empty) names its type and the
     issuer cannot be connected to at all (refused, unresolvable, no route); `once` never does
  6. one audit line (event "attempt", result "allowed"), then the command as a child: fork, then
     in the child a sanitised environment, fixed PATH, initgroups + setgid + setuid and execve;
     the parent (still root, holding nothing the child can reach) forwards signals to it, waits,
     writes a second audit line (event "exit": the status or the signal) and exits with the
     command's status (128+N when a signal N ended it)

Exit codes: 5 refused (one JSON line on stderr: {"error": code, "reason": text}); 1 config,
usage or network errors; 126 not executable; 127 not found; otherwise the command's own. Every
attempt is one JSON line in the audit log, and an allowed one gets a second when the command ends.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import grp
import hashlib
import json
import os
import pwd
import re
import signal
import socket
import stat
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn
from urllib.parse import quote, urlsplit

EXIT_REFUSED = 5
EXIT_ERROR = 1
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127

DEFAULT_CONFIG = "/etc/grantd/elevate.toml"
DEFAULT_AUDIT_LOG = "/var/log/grantd/elevate.log"
DEFAULT_CACHE_DIR = "/var/cache/grantd"
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_TOKEN_BYTES = 16 * 1024
MAX_JWKS_BYTES = 64 * 1024
MAX_CONSUME_BYTES = 16 * 1024
GRANT_TYPES = ("once", "timed", "always")

# Reason texts (the specification's Errors section) -> stable codes for the JSON line.
REASON_CODES = {
    "issuer not in allowed issuers": "issuer_not_allowed",
    "audience mismatch": "audience_mismatch",
    "target_host differs from the system host name": "target_host_mismatch",
    "approver not allowed": "approver_not_allowed",
    "cmd_hash mismatch (command differs from the granted command)": "cmd_hash_mismatch",
}
CONSUME_ERRORS = {
    "already_consumed": "grant already consumed",
    "revoked": "grant revoked",
    "denied": "grant denied",
    "expired": "grant expired",
    "not_approved": "grant not approved",
}


class Stop(Exception):
    """Ends an attempt: exit code, stable error code and a readable reason."""

    def __init__(self, exit_code: int, error: str, reason: str):
        super().__init__(reason)
        self.exit_code = exit_code
        self.error = error
        self.reason = reason
        self.reasons: list[str] = [reason]
        self.quiet = False  # audited, but nothing on stderr: someone else already said why


def refused(error: str, reason: str) -> Stop:
    return Stop(EXIT_REFUSED, error, reason)


def config_error(reason: str) -> Stop:
    return Stop(EXIT_ERROR, "config", reason)


class NetworkError(Exception):
    """A failed exchange. ``unreachable``: no connection could be made at all (refused, unresolvable,
    no route) -- the only failure that may count as "the issuer is away" (offline_grant_types)."""

    def __init__(self, message: str, *, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


# errno values of a connection that could not be made at all. A timeout (a silent or overloaded
# issuer, a dropped packet) and a TLS failure are not among them: those fail closed.
_UNREACHABLE_ERRNOS = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH}


def _could_not_connect(exc: BaseException) -> bool:
    """True when the httpx error was caused by a refused connection, an unresolvable name or no route."""
    import ssl

    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLError):
            return False
        if isinstance(cause, socket.gaierror) or (isinstance(cause, OSError) and cause.errno in _UNREACHABLE_ERRNOS):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


# -- configuration -----------------------------------------------------------------------------------


@dataclass
class ElevateConfig:
    path: str
    allowed_issuers: list[str]
    allowed_approvers: list[str]
    allowed_audiences: list[str] = field(default_factory=lambda: ["escapes", "grantd"])
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
    raw: dict[str, Any] = field(default_factory=dict)


# key -> (type check, description); tables (dicts) are left to site plugins.
_KEYS: dict[str, tuple[str, str]] = {
    "allowed_issuers": ("urls", "issuer URLs accepted, exactly as the token's iss (required)"),
    "allowed_approvers": ("strs", "e-mails whose decisions are accepted, or \"*\" (required)"),
    "allowed_audiences": ("strs", "token audiences accepted"),
    "host": ("str", "this host's name as grants name it (default: the system host name)"),
    "audit_log": ("str", "audit log file, one JSON line per attempt"),
    "timeout": ("num", "seconds for every network call (and reading the grant)"),
    "jwks_cache_dir": ("str", "directory for cached JWKS (\"\" disables the cache)"),
    "jwks_refresh": ("int", "seconds a cached JWKS is used without asking the issuer"),
    "jwks_max_stale": ("int", "seconds a cached JWKS may still be used while the issuer is unreachable"),
    "offline_grant_types": ("types", "grant types (timed, always) that may run on cached keys when the issuer "
                                     "cannot be connected to at all (default none; never once)"),
    "leeway": ("int", "seconds of clock skew allowed on exp/nbf"),
    "plugins": ("strs", "site plugin modules implementing elevate_verify"),
    "plugin_dirs": ("strs", "root-owned directories searched for those modules"),
    "ca_bundle": ("str", "CA bundle for https issuers (default: the system's)"),
    "env_keep": ("strs", "extra environment variable names passed to the command"),
    "path": ("str", "PATH for the command (default: a fixed safe PATH)"),
}


def check_root_owned(path: str, what: str, *, st: os.stat_result | None = None) -> None:
    """Refuse a file or directory root does not own or that others could change."""
    st = st or os.stat(path)
    if st.st_uid != 0:
        raise config_error(f"{what} {path} is not owned by root (uid {st.st_uid})")
    if st.st_mode & 0o022 and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_mode & 0o020 == 0):
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
            "str": isinstance(value, str),
            "num": isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 300,
            "int": isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10 * 365 * 86400,
            "strs": isinstance(value, list) and all(isinstance(v, str) and v for v in value),
            "urls": isinstance(value, list) and all(isinstance(v, str) and urlsplit(v).scheme in ("http", "https") for v in value),
            "types": isinstance(value, list) and all(v in ("timed", "always") for v in value),
        }[kind]
        if not ok:
            problems.append(f"{key}: {_describe_kind(kind)}")
            continue
        values["path_env" if key == "path" else key] = value
    for required in ("allowed_issuers", "allowed_approvers"):
        if not values.get(required) and not any(p.startswith(required) for p in problems):
            problems.append(f"{required}: required, a non-empty list")
    if problems:
        raise config_error(f"config {path}: " + "; ".join(problems))
    return ElevateConfig(path=path, raw=raw, **values)


def _describe_kind(kind: str) -> str:
    return {
        "str": "must be a string",
        "num": "must be a number of seconds between 0 and 300",
        "int": "must be a non-negative integer",
        "strs": "must be a list of non-empty strings",
        "urls": "must be a list of http(s) URLs",
        "types": 'must be a list of "timed" and/or "always"',
    }[kind]


# -- audit log ---------------------------------------------------------------------------------------


class Audit:
    """One JSON line per attempt (event "attempt": result allowed, refused or error), and for an
    allowed one a second when the command has ended (event "exit"). Appended with O_APPEND, one
    write(2) per line, so lines of concurrent runs never mix."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None
        self.record: dict[str, Any] = {}
        self.written = False

    def open(self) -> None:
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o750, exist_ok=True)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
        st = os.fstat(self.fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            os.close(self.fd)
            self.fd = None
            raise config_error(f"audit log {self.path} must be a regular root-owned file, not group/world-writable")

    def write(self, result: str, reason: str | None, **extra: Any) -> None:
        if self.fd is None or self.written:
            return
        self._line({"event": "attempt", **extra, "result": result, "reason": reason})
        self.written = True

    def exit(self, result: str, reason: str | None, **extra: Any) -> None:
        """How an allowed command ended: its exit status or the signal that ended it."""
        if self.fd is not None:
            self._line({"event": "exit", **extra, "result": result, "reason": reason})

    def _line(self, fields: dict[str, Any]) -> None:
        assert self.fd is not None
        line = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), **self.record, **fields}
        os.write(self.fd, (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode())


def through_sudo() -> bool:
    """Started by sudo (or any set-uid path): the caller is not root itself. The SUDO_* variables
    can be forged only by making this answer stricter, never laxer."""
    return bool(os.environ.get("SUDO_UID") or os.environ.get("SUDO_USER")) or os.getuid() != os.geteuid()


def caller_ids() -> tuple[int, int | None, str | None]:
    """(real uid, uid of the user who ran sudo, their name). Under sudo the real uid is 0."""
    uid = os.getuid()
    sudo_uid = os.environ.get("SUDO_UID")
    if uid == 0 and sudo_uid and sudo_uid.isdigit():
        return uid, int(sudo_uid), os.environ.get("SUDO_USER")
    return uid, None, None


# -- reading the grant -------------------------------------------------------------------------------


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """A hard bound on blocking work in the main thread (DNS, a FIFO nobody writes, a slow peer)."""

    def expired(signum: int, frame: Any) -> None:
        raise _Timeout()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def as_caller() -> Iterator[None]:
    """Open files with the permissions of the user who ran sudo, not root's."""
    _, sudo_uid, _ = caller_ids()
    if os.geteuid() != 0 or sudo_uid is None or sudo_uid == 0:
        yield
        return
    sudo_gid = int(os.environ.get("SUDO_GID", "") or pwd.getpwuid(sudo_uid).pw_gid)
    groups = os.getgroups()
    try:
        name = pwd.getpwuid(sudo_uid).pw_name
        os.setgroups(os.getgrouplist(name, sudo_gid))
    except KeyError:
        os.setgroups([sudo_gid])
    os.setegid(sudo_gid)
    os.seteuid(sudo_uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


def _read_fd(fd: int, *, one_line: bool) -> bytes:
    data = bytearray()
    while len(data) <= MAX_TOKEN_BYTES:
        chunk = os.read(fd, 1 if one_line else 4096)
        if not chunk:
            break
        if one_line and chunk == b"\n":
            break
        data += chunk
    if len(data) > MAX_TOKEN_BYTES:
        raise Stop(EXIT_ERROR, "usage", "grant is larger than 16 KiB")
    return bytes(data)


GRANT_IN_ARGV = ("--grant puts the token into the process list (/proc/PID/cmdline), where every local user can "
                 "read and reuse it: under sudo use --grant-stdin, --grant-fd N or --grant-file FILE (0600, yours)")


def _is_stream(fd: int) -> bool:
    with contextlib.suppress(OSError):
        mode = os.fstat(fd).st_mode
        return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
    return False


def _check_grant_file(fd: int, path: str) -> None:
    """A grant file must belong to the caller and be private: a token others can read is a token
    others can use (grantd run's FIFO is 0600 in a 0700 directory)."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise Stop(EXIT_ERROR, "usage", "--grant-file names a directory")
    uid, sudo_uid, _ = caller_ids()
    caller = sudo_uid if sudo_uid is not None else uid
    if st.st_uid != caller:
        raise Stop(EXIT_ERROR, "usage", f"--grant-file {path} is not owned by you (uid {caller}) but by uid {st.st_uid}")
    if st.st_mode & 0o077:
        raise Stop(EXIT_ERROR, "usage", f"--grant-file {path} is readable or writable by others "
                                        f"(mode {stat.S_IMODE(st.st_mode):04o}): make it 0600")


def read_grant(args: argparse.Namespace, timeout: float) -> str:
    stream = False
    try:
        with deadline(timeout):
            if args.grant is not None:
                raw = args.grant.encode()
            elif args.grant_fd is not None:
                if args.grant_fd < 3:
                    raise Stop(EXIT_ERROR, "usage", "--grant-fd must be 3 or higher (use --grant-stdin for stdin)")
                try:
                    stream = _is_stream(args.grant_fd)
                    raw = _read_fd(args.grant_fd, one_line=False)
                finally:
                    with contextlib.suppress(OSError):
                        os.close(args.grant_fd)
            elif args.grant_stdin:
                # Byte by byte up to the first newline: whatever follows stays for the command.
                stream = _is_stream(0)
                raw = _read_fd(0, one_line=True)
            elif args.grant_file is not None:
                with as_caller():
                    fd = os.open(args.grant_file, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    _check_grant_file(fd, args.grant_file)
                    stream = _is_stream(fd)
                    raw = _read_fd(fd, one_line=False)
                finally:
                    os.close(fd)
            else:
                raise Stop(EXIT_ERROR, "usage", "no grant given (--grant-stdin, --grant-fd, --grant-file or --grant)")
    except _Timeout:
        raise Stop(EXIT_ERROR, "usage", f"no grant arrived within {timeout:g} s") from None
    except OSError as exc:
        raise Stop(EXIT_ERROR, "usage", f"cannot read the grant: {exc.strerror}") from None
    if not raw and stream:
        # The writer closed the pipe without writing a byte: it failed, and said why itself (as in
        # `grantd grant token ID | sudo -n grantd elevate --grant-stdin -- CMD` for a used once grant).
        # A second message from us would only confuse, so this one goes to the audit log alone.
        stop = Stop(EXIT_ERROR, "no_grant", "no grant: the sender closed the pipe without writing one")
        stop.quiet = True
        raise stop
    token = raw.decode("utf-8", "replace").strip()
    if not token:
        raise Stop(EXIT_ERROR, "usage", "the grant is empty")
    return token


# -- network -----------------------------------------------------------------------------------------


def http_request(cfg: ElevateConfig, method: str, url: str, *, headers: dict[str, str], max_bytes: int) -> tuple[int, bytes]:
    """One bounded HTTP exchange: timeouts on every phase, an overall deadline, a size cap.

    No proxies or CA overrides from the environment (trust_env=False), no redirects."""
    import httpx

    verify: Any = cfg.ca_bundle or True
    try:
        with deadline(cfg.timeout), httpx.Client(timeout=httpx.Timeout(cfg.timeout), trust_env=False, verify=verify,
                                                  follow_redirects=False) as client:
            with client.stream(method, url, headers={"Accept-Encoding": "identity", **headers}) as response:
                body = bytearray()
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > max_bytes:
                        raise NetworkError(f"{url}: answer larger than {max_bytes} bytes")
                return response.status_code, bytes(body)
    except _Timeout:
        raise NetworkError(f"{url}: no answer within {cfg.timeout:g} s") from None
    except httpx.TimeoutException:
        raise NetworkError(f"{url}: timed out after {cfg.timeout:g} s") from None
    except httpx.ConnectError as exc:
        raise NetworkError(f"{url}: cannot connect: {exc}", unreachable=_could_not_connect(exc)) from None
    except httpx.HTTPError as exc:
        raise NetworkError(f"{url}: {exc.__class__.__name__}: {exc}") from None


class JwksCache:
    """The issuer's JWKS on disk: fresh for `jwks_refresh` seconds; while the issuer cannot be
    reached, usable until `jwks_max_stale` seconds after the last successful fetch."""

    def __init__(self, cfg: ElevateConfig):
        self.cfg = cfg
        self.dir = cfg.jwks_cache_dir
        self.note: str | None = None

    def _file(self, issuer: str) -> str:
        return os.path.join(self.dir, "jwks-" + hashlib.sha256(issuer.encode()).hexdigest()[:32] + ".json")

    def _usable_dir(self) -> bool:
        if not self.dir:
            return False
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            check_root_owned(self.dir, "JWKS cache directory")
            return True
        except (OSError, Stop) as exc:
            print(json.dumps({"warning": f"JWKS cache disabled: {exc}"}), file=sys.stderr)
            return False

    def load(self, issuer: str) -> dict[str, Any] | None:
        if not self._usable_dir():
            return None
        try:
            fd = os.open(self._file(issuer), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_uid != 0 or st.st_mode & 0o022:
                return None
            with os.fdopen(os.dup(fd), "rb") as fh:
                entry = json.loads(fh.read(MAX_JWKS_BYTES * 2))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if not isinstance(entry, dict) or entry.get("issuer") != issuer or not isinstance(entry.get("fetched_at"), int | float):
            return None
        return entry

    def store(self, issuer: str, jwks: dict[str, Any]) -> None:
        if not self._usable_dir():
            return
        target = self._file(issuer)
        tmp = f"{target}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"issuer": issuer, "fetched_at": time.time(), "jwks": jwks}, fh)
            os.replace(tmp, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            print(json.dumps({"warning": f"cannot write the JWKS cache: {exc}"}), file=sys.stderr)

    def fetch(self, issuer: str) -> dict[str, Any]:
        status, body = http_request(self.cfg, "GET", f"{issuer}/.well-known/jwks.json",
                                    headers={"Accept": "application/json"}, max_bytes=MAX_JWKS_BYTES)
        if status != 200:
            raise NetworkError(f"{issuer}/.well-known/jwks.json answered HTTP {status}")
        try:
            jwks = json.loads(body)
        except ValueError:
            raise NetworkError(f"{issuer}/.well-known/jwks.json is not JSON") from None
        if not isinstance(jwks, dict) or not isinstance(jwks.get("keys"), list):
            raise NetworkError(f"{issuer}/.well-known/jwks.json has no keys array")
        return jwks

    def key(self, issuer: str, kid: str) -> Any:
        cached = self.load(issuer)
        age = time.time() - cached["fetched_at"] if cached else None
        if cached and age is not None and age < self.cfg.jwks_refresh:
            key = _find_key(cached["jwks"], kid)
            if key is not None:
                self.note = "jwks from cache"
                return key
        try:
            jwks = self.fetch(issuer)
        except NetworkError as exc:
            if cached and age is not None and age < self.cfg.jwks_max_stale:
                key = _find_key(cached["jwks"], kid)
                if key is not None:
                    self.note = f"issuer unreachable, jwks from cache ({int(age)} s old): {exc}"
                    return key
            raise Stop(EXIT_ERROR, "network", f"cannot fetch the issuer's keys: {exc}") from None
        self.store(issuer, jwks)
        self.note = "jwks fetched"
        key = _find_key(jwks, kid)
        if key is None:
            raise refused("bad_signature", "bad signature (the issuer does not publish the token's key)")
        return key


def _find_key(jwks: Any, kid: str) -> Any:
    from jwt.algorithms import OKPAlgorithm

    for jwk in jwks.get("keys", []) if isinstance(jwks, dict) else []:
        if isinstance(jwk, dict) and jwk.get("kid") == kid and jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519":
            try:
                return OKPAlgorithm.from_jwk(json.dumps(jwk))
            except Exception:  # noqa: BLE001 - a malformed key is a missing key
                return None
    return None


# -- verification ------------------------------------------------------------------------------------


def decode_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    import jwt

    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise refused("malformed_token", "malformed token (not a JWT)") from None
    if not isinstance(claims, dict) or not isinstance(claims.get("iss"), str):
        raise refused("malformed_token", "malformed token (no iss)")
    typ = header.get("typ")
    if isinstance(typ, str) and typ.strip().lower().removeprefix("application/") == "at+jwt":
        # an OAuth access token (RFC 9068, D3) is never a grant token, whatever claims it carries
        raise refused("malformed_token", "malformed token (an access token, not a grant token)")
    return header, claims


def verify_signature(token: str, header: dict[str, Any], issuer: str, cache: JwksCache) -> None:
    import jwt

    if header.get("alg") != "EdDSA":
        raise refused("bad_signature", "bad signature (algorithm must be EdDSA)")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise refused("bad_signature", "bad signature (no kid)")
    key = cache.key(issuer, kid)
    try:
        jwt.decode(token, key, algorithms=["EdDSA"],
                   options={"verify_exp": False, "verify_aud": False, "verify_iss": False, "verify_nbf": False,
                            "verify_iat": False})
    except jwt.InvalidSignatureError:
        raise refused("bad_signature", "bad signature") from None
    except jwt.PyJWTError as exc:
        raise refused("bad_signature", f"bad signature ({exc})") from None


def check_times(claims: dict[str, Any], leeway: int, now: float) -> None:
    exp = claims.get("exp")
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise refused("malformed_token", "malformed token (exp must be an integer)")
    if now > exp + leeway:
        raise refused("expired", "expired")
    nbf = claims.get("nbf")
    if isinstance(nbf, int) and now + leeway < nbf:
        raise refused("not_yet_valid", "token not yet valid")


def check_shape(claims: dict[str, Any]) -> None:
    for name in ("sub", "aud", "target_host", "grant_id", "grant_type", "decided_by"):
        if not isinstance(claims.get(name), str) or not claims[name]:
            raise refused("malformed_token", f"malformed token (claim {name} missing or not a string)")
    if claims["grant_type"] not in GRANT_TYPES:
        raise refused("malformed_token", "malformed token (unknown grant_type)")
    run_as = claims.get("run_as")
    if run_as is not None and (not isinstance(run_as, str) or not run_as):
        raise refused("malformed_token", "malformed token (run_as must be a user name)")


def plugin_manager(cfg: ElevateConfig) -> Any:
    """The default checks plus the site plugins the config names; nothing picked up implicitly."""
    import importlib

    import pluggy

    from grantd.elevate import hookspecs

    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(importlib.import_module("grantd.plugins.elevate_default"), name="grantd.plugins.elevate_default")
    for directory in cfg.plugin_dirs:
        try:
            check_root_owned(directory, "plugin directory")
        except FileNotFoundError:
            raise config_error(f"plugin directory {directory} does not exist") from None
        if directory not in sys.path:
            sys.path.insert(0, directory)
    for name in cfg.plugins:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported as a config error
            raise config_error(f"cannot import plugin {name!r}: {exc}") from None
        source = getattr(module, "__file__", None)
        if source:
            check_root_owned(source, "plugin file")
        pm.register(module, name=name)
    return pm


def run_checks(pm: Any, claims: dict[str, Any], argv: list[str], context: dict[str, Any]) -> None:
    try:
        results = pm.hook.elevate_verify(claims=claims, argv=argv, context=context)
    except Exception as exc:  # noqa: BLE001 - a broken plugin refuses, never allows
        raise Stop(EXIT_ERROR, "plugin", f"an elevate_verify plugin failed: {exc.__class__.__name__}: {exc}") from None
    reasons: list[str] = []
    for result in results:
        if isinstance(result, str):
            reasons.append(result)
        elif result:
            reasons.extend(str(r) for r in result)
    if reasons:
        stop = refused(REASON_CODES.get(reasons[0], "refused_by_plugin"), reasons[0])
        stop.reasons = reasons
        raise stop


CONSUME_ANSWERS = {"once": "consumed", "timed": "valid", "always": "valid"}


def consume(cfg: ElevateConfig, claims: dict[str, Any], token: str) -> str:
    """Ask the issuer; returns a note for the audit line.

    Only a 200 answer with a JSON object counts: ``{"status": "consumed"}`` for once grants,
    ``{"status": "valid"}`` for timed/always, ``{"error": ...}`` refuses (exit 5), and so does any
    4xx. A 5xx, a redirect, a body that is not JSON or a timeout is a failure (exit 1), never "the
    issuer is away": only a connection that cannot be made at all lets a grant whose type
    ``offline_grant_types`` names run on its signature; a once grant never does."""
    url = f"{claims['iss']}/api/grants/{quote(claims['grant_id'], safe='')}/consume"
    grant_type = claims["grant_type"]
    try:
        status, body = http_request(cfg, "POST", url, headers={"Authorization": f"Bearer {token}",
                                                                "Content-Type": "application/json",
                                                                "Accept": "application/json"},
                                    max_bytes=MAX_CONSUME_BYTES)
    except NetworkError as exc:
        if exc.unreachable and grant_type in cfg.offline_grant_types:
            return f"issuer unreachable, {grant_type} grant accepted on its signature (offline_grant_types): {exc}"
        why = ""
        if exc.unreachable and grant_type != "once":
            why = f" ({grant_type} grants run without the issuer only when offline_grant_types names them)"
        elif exc.unreachable:
            why = " (once grants always need the issuer)"
        raise Stop(EXIT_ERROR, "network", f"cannot consume the grant at the issuer: {exc}{why}") from None
    try:
        answer = json.loads(body) if body else None
    except ValueError:
        answer = None
    if status != 200 and not 400 <= status < 500:  # a redirect, a 5xx, a 204...: no answer to count on
        raise Stop(EXIT_ERROR, "consume_failed", f"cannot consume the grant at the issuer: {url} answered HTTP {status} "
                                                 "(consume must answer 200 with JSON)")
    if status != 200:
        detail = answer.get("detail") if isinstance(answer, dict) else None
        raise refused("rejected_by_issuer", f"the issuer refused the grant (HTTP {status}{': ' + str(detail) if detail else ''})")
    if not isinstance(answer, dict):
        raise Stop(EXIT_ERROR, "consume_failed", f"cannot consume the grant at the issuer: {url} answered 200 without "
                                                 "a JSON object (consume must answer 200 with JSON)")
    error = answer.get("error")
    if isinstance(error, str):
        raise refused(error if error in CONSUME_ERRORS else "consume_refused",
                      CONSUME_ERRORS.get(error, f"the issuer refused the grant: {error}"))
    if answer.get("status") != CONSUME_ANSWERS[grant_type]:
        raise Stop(EXIT_ERROR, "consume_failed", f"cannot consume the grant at the issuer: {url} answered status "
                                                 f"{str(answer.get('status'))[:40]!r} for a {grant_type} grant "
                                                 f"(expected {CONSUME_ANSWERS[grant_type]!r})")
    return f"consume: {answer['status']}"


# -- running the command -----------------------------------------------------------------------------

_KEEP = {"TERM", "LANG", "LANGUAGE", "TZ", "COLORTERM", "NO_COLOR", "COLUMNS", "LINES", "SUDO_USER", "SUDO_UID", "SUDO_GID"}
_NEVER_PREFIXES = ("LD_", "DYLD_", "PYTHON", "PERL", "RUBY", "GEM_", "NODE_", "BASH_FUNC_", "MALLOC_", "GCONV",
                   "JAVA", "_JAVA", "GIT_", "SSL_", "OPENSSL_", "NLSPATH")
_NEVER = {"IFS", "BASH_ENV", "ENV", "CDPATH", "SHELLOPTS", "BASHOPTS", "PS4", "GLOBIGNORE", "GLIBC_TUNABLES", "LOCPATH",
          "HOSTALIASES", "RES_OPTIONS", "LOCALDOMAIN", "TMPDIR", "PATH", "HOME", "USER", "LOGNAME", "SHELL", "MAIL",
          "ZDOTDIR", "INPUTRC", "PROMPT_COMMAND", "EDITOR", "VISUAL", "PAGER", "LESSOPEN", "LESSCLOSE"}
_SAFE_VALUE = {"TERM": re.compile(r"[A-Za-z0-9_.+-]{1,64}"), "TZ": re.compile(r"[A-Za-z0-9_+:-][A-Za-z0-9_+:/-]{0,63}")}
_LOCALE_VALUE = re.compile(r"[A-Za-z0-9_.@:-]{1,64}")


def _dangerous(name: str) -> bool:
    return name in _NEVER or name.startswith(_NEVER_PREFIXES)


def sanitized_env(caller: dict[str, str], user: pwd.struct_passwd, cfg: ElevateConfig) -> dict[str, str]:
    """An allow-list of harmless variables from the caller (values checked), then fixed ones.

    LD_*, PYTHON*, IFS, BASH_ENV, ENV, CDPATH and friends never pass, not even through env_keep."""
    env: dict[str, str] = {}
    for name, value in caller.items():
        if _dangerous(name) or not (name in _KEEP or name.startswith("LC_") or name in cfg.env_keep):
            continue
        if name in _SAFE_VALUE and (not _SAFE_VALUE[name].fullmatch(value) or ".." in value):
            continue
        if (name.startswith("LC_") or name in ("LANG", "LANGUAGE")) and not _LOCALE_VALUE.fullmatch(value):
            continue
        env[name] = value
    env.update({"PATH": cfg.path_env, "HOME": user.pw_dir or "/", "USER": user.pw_name, "LOGNAME": user.pw_name,
                "SHELL": user.pw_shell or "/bin/sh"})
    return env


def resolve_command(name: str, search_path: str) -> str:
    """Absolute path of the program, or Stop 127 (not found) / 126 (not executable)."""
    if "/" in name:
        if not os.path.exists(name):
            raise Stop(EXIT_NOT_FOUND, "not_found", f"command not found: {name}")
        if os.path.isdir(name) or not os.access(name, os.X_OK):
            raise Stop(EXIT_NOT_EXECUTABLE, "not_executable", f"not executable: {name}")
        return os.path.abspath(name)
    blocked = None
    for directory in search_path.split(":"):
        if not directory.startswith("/"):
            continue  # never the current directory
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            blocked = blocked or candidate
    if blocked:
        raise Stop(EXIT_NOT_EXECUTABLE, "not_executable", f"not executable: {blocked}")
    raise Stop(EXIT_NOT_FOUND, "not_found", f"command not found: {name}")


def switch_user(user: pwd.struct_passwd) -> None:
    os.initgroups(user.pw_name, user.pw_gid)
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    if user.pw_uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise Stop(EXIT_ERROR, "internal", "could not drop root privileges")


# -- the command -------------------------------------------------------------------------------------


def _emit(stop: Stop) -> None:
    if stop.quiet:
        return
    line: dict[str, Any] = {"error": stop.error, "reason": stop.reason}
    if len(stop.reasons) > 1:
        line["reasons"] = stop.reasons
    print(json.dumps(line), file=sys.stderr, flush=True)


def cmd_elevate(args: argparse.Namespace) -> int:
    argv = list(args.argv or [])
    if argv and argv[0] == "--":
        argv = argv[1:]
    config_path = args.config or os.environ.get("GRANTD_ELEVATE_CONFIG") or DEFAULT_CONFIG
    uid, sudo_uid, sudo_user = caller_ids()
    audit = Audit(DEFAULT_AUDIT_LOG)
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    audit.record = {"real_uid": sudo_uid if sudo_uid is not None else uid, "sudo_user": sudo_user, "pid": os.getpid(),
                    "command": argv, "cmd_hash": None, "cwd": cwd, "agent": None, "grant_id": None, "grant_type": None,
                    "decided_by": None, "issuer": None, "audience": None, "jti": None, "run_as": None, "host": None}
    try:
        return _elevate(args, argv, config_path, audit)
    except Stop as stop:
        _emit(stop)
        if audit.fd is None and config_path == DEFAULT_CONFIG:
            with contextlib.suppress(OSError, Stop):
                audit.open()  # the default log, so that a broken installation or call is still audited
        try:
            audit.write("refused" if stop.exit_code == EXIT_REFUSED else "error", stop.reason, exit_code=stop.exit_code)
        except OSError as exc:
            print(json.dumps({"warning": f"cannot write the audit log: {exc}"}), file=sys.stderr)
        return stop.exit_code


def _elevate(args: argparse.Namespace, argv: list[str], config_path: str, audit: Audit) -> int:
    from grantd.commands import cmd_hash

    if os.geteuid() != 0:
        raise Stop(EXIT_ERROR, "config", "grantd elevate must run as root: use sudo -n grantd elevate ...")
    if args.grant is not None:
        if through_sudo():
            raise Stop(EXIT_ERROR, "grant_in_argv", GRANT_IN_ARGV)
        print(json.dumps({"warning": "--grant shows the token to every local user in the process list while the "
                                     "command runs; prefer --grant-stdin, --grant-fd N or --grant-file FILE"}),
              file=sys.stderr, flush=True)
    _, sudo_uid, _ = caller_ids()
    if sudo_uid not in (None, 0) and os.path.dirname(os.path.abspath(config_path)) != os.path.dirname(DEFAULT_CONFIG):
        # A sudo caller may pick another config only among the ones root put into /etc/grantd.
        raise config_error(f"--config outside {os.path.dirname(DEFAULT_CONFIG)}/ is for root only")
    cfg = load_config(config_path)
    audit.path = cfg.audit_log
    try:
        audit.open()
    except OSError as exc:
        raise config_error(f"cannot open the audit log {cfg.audit_log}: {exc.strerror}") from None
    audit.record["host"] = cfg.host
    if args.check_config:
        plugin_manager(cfg)
        print(json.dumps({"config": cfg.path, "allowed_issuers": cfg.allowed_issuers, "allowed_approvers": cfg.allowed_approvers,
                          "allowed_audiences": cfg.allowed_audiences, "host": cfg.host, "audit_log": cfg.audit_log,
                          "timeout": cfg.timeout, "offline_grant_types": cfg.offline_grant_types,
                          "offline": (f"{' and '.join(cfg.offline_grant_types)} grants run on cached keys when the issuer "
                                      "cannot be connected to at all; once grants always need the issuer"
                                      if cfg.offline_grant_types else "every grant needs the issuer (consume)"),
                          "jwks_refresh": cfg.jwks_refresh, "jwks_max_stale": cfg.jwks_max_stale,
                          "plugins": cfg.plugins}))
        audit.written = True  # not an attempt
        return 0
    if not argv:
        raise Stop(EXIT_ERROR, "usage", "no command given after --")
    audit.record["cmd_hash"] = cmd_hash(argv)
    pm = plugin_manager(cfg)
    token = read_grant(args, cfg.timeout)
    header, claims = decode_unverified(token)
    audit.record.update({k: claims.get(c) if isinstance(claims.get(c), str) else None for k, c in (
        ("agent", "sub"), ("grant_id", "grant_id"), ("grant_type", "grant_type"), ("decided_by", "decided_by"),
        ("issuer", "iss"), ("audience", "aud"), ("jti", "jti"))})
    audit.record["run_as"] = claims.get("run_as") if isinstance(claims.get("run_as"), str) else "root"
    issuer = claims["iss"]
    # 1. issuer, before any network call: a token never makes us talk to a server we do not trust.
    if issuer not in cfg.allowed_issuers:
        raise refused("issuer_not_allowed", "issuer not in allowed issuers")
    # 2. signature, 3. expiry
    cache = JwksCache(cfg)
    verify_signature(token, header, issuer, cache)
    now = time.time()
    check_times(claims, cfg.leeway, now)
    check_shape(claims)
    # 4.-7. audience, host, approver, command (plugins.elevate_default), then site plugins
    context = {"allowed_issuers": cfg.allowed_issuers, "allowed_approvers": cfg.allowed_approvers,
               "allowed_audiences": cfg.allowed_audiences, "host": cfg.host, "real_uid": audit.record["real_uid"],
               "now": now, "config": cfg.raw}
    run_checks(pm, claims, argv, context)
    # Before consuming a once grant: the user exists and the program can be found.
    run_as = claims.get("run_as") or "root"
    try:
        user = pwd.getpwnam(run_as)
    except KeyError:
        raise Stop(EXIT_ERROR, "unknown_user", f"run_as user {run_as!r} does not exist on this host") from None
    audit.record["run_as"] = user.pw_name
    program = resolve_command(argv[0], cfg.path_env)
    # 8. consume
    note = consume(cfg, claims, token)
    env = sanitized_env(dict(os.environ), user, cfg)
    groups = sorted({_group_name(g) for g in os.getgrouplist(user.pw_name, user.pw_gid)})
    try:
        audit.write("allowed", None, uid=user.pw_uid, gid=user.pw_gid, groups=groups, program=program,
                    jwks=cache.note, consume=note)
    except OSError as exc:  # no audit, no elevation
        raise Stop(EXIT_ERROR, "audit", f"cannot write the audit log {audit.path}: {exc.strerror}") from None
    return run_command(program, argv, env, user, audit)


# -- running the command as a child ------------------------------------------------------------------

# Signals passed on to the command when someone sends them to us (kill, sudo relaying its own).
# Job control (TSTP, CONT, TTIN, TTOU) and WINCH are left alone: they reach the whole foreground
# process group, the command included, directly from the terminal.
FORWARDED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
_SI_KERNEL = 0x80  # si_code of a signal the kernel (a terminal) generated for the whole process group


def run_command(program: str, argv: list[str], env: dict[str, str], user: pwd.struct_passwd, audit: Audit) -> int:
    """fork; the child drops to `user` and execs; we wait, forwarding signals, then audit how it ended.

    The forwarded signals stay blocked here from before the fork (the child unblocks them), so
    none is lost and each is taken with sigtimedwait together with who sent it: a signal the
    terminal sent to the whole group already reached the command and is not sent twice."""
    err_read, err_write = os.pipe()  # close-on-exec: EOF without a byte means execve succeeded
    sys.stdout.flush()
    sys.stderr.flush()
    waited = {*FORWARDED, signal.SIGCHLD}
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    started = time.monotonic()
    try:
        pid = os.fork()
    except OSError as exc:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        os.close(err_read)
        os.close(err_write)
        reason = f"cannot start the command: {exc.strerror}"
        audit.exit("error", reason, status=EXIT_ERROR, exit_code=EXIT_ERROR, duration_ms=0)
        raise Stop(EXIT_ERROR, "exec", reason) from None
    if pid == 0:  # the child: never returns
        _child(program, argv, env, user, err_write, previous_mask)
    os.close(err_write)
    report = bytearray()
    with os.fdopen(err_read, "rb") as fh:
        report += fh.read(4096)
    if report:  # the child could not exec: it said why and exits with 126/127/1
        os.waitpid(pid, 0)
        code_text, _, reason = bytes(report).decode("utf-8", "replace").partition(":")
        code = int(code_text) if code_text.isdigit() else EXIT_ERROR
        stop = Stop(code, {EXIT_NOT_FOUND: "not_found", EXIT_NOT_EXECUTABLE: "not_executable"}.get(code, "exec"), reason)
        _emit(stop)
        audit.exit("error", reason, child_pid=pid, status=code, exit_code=code,
                   duration_ms=int((time.monotonic() - started) * 1000))
        return code
    status = _wait_forwarding(pid, waited)
    duration_ms = int((time.monotonic() - started) * 1000)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        code = 128 + number
        audit.exit("signalled", None, child_pid=pid, signal=number, signal_name=_signal_name(number), exit_code=code,
                   duration_ms=duration_ms)
    else:
        code = os.waitstatus_to_exitcode(status)
        audit.exit("exited", None, child_pid=pid, status=code, exit_code=code, duration_ms=duration_ms)
    return code


def _wait_forwarding(pid: int, waited: set[signal.Signals]) -> int:
    while True:
        info = signal.sigtimedwait(waited, 1.0)  # the timeout also covers a SIGCHLD merged with another
        if info is not None and info.si_signo != signal.SIGCHLD:
            if info.si_code != _SI_KERNEL and info.si_pid != pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, info.si_signo)  # not reaped yet, so the pid is still the command's
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status


def _child(program: str, argv: list[str], env: dict[str, str], user: pwd.struct_passwd, err_write: int,
           mask: set[int | signal.Signals]) -> NoReturn:
    """Between fork and exec: default signal dispositions, the caller's signal mask, the user's
    ids and groups, a sane umask; then execve. Any failure is reported through err_write."""
    code, reason = EXIT_ERROR, "internal error before exec"
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, *FORWARDED, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        switch_user(user)
        os.umask(os.umask(0o022) | 0o022)
        if not os.access(program, os.X_OK):
            code, reason = EXIT_NOT_EXECUTABLE, f"not executable by {user.pw_name}: {program}"
        else:
            os.execve(program, argv, env)  # noqa: S606 - the verified argv, no shell
    except Stop as stop:
        code, reason = stop.exit_code, stop.reason
    except OSError as exc:
        code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
        reason = f"cannot execute {program}: {exc.strerror}"
    except BaseException as exc:  # noqa: BLE001 - nothing may escape a forked child
        reason = f"internal error before exec: {exc.__class__.__name__}"
    finally:
        with contextlib.suppress(BaseException):
            os.write(err_write, f"{code}:{reason}".encode()[:4000])
        os._exit(code)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "elevate",
        help="run a command as root (or the grant's run_as) if an AuthZ-JWT allows it; run through sudo",
        description="Verify an AuthZ-JWT (issuer, signature, expiry, audience, host, approver, exact command), "
                    "consume it at the issuer, then run the command and wait for it. Exit status: the command's "
                    "(128+N when signal N ended it); 5 = refused (JSON line on stderr), 1 = config/network error, "
                    "126 = not executable, 127 = not found. "
                    "Usage: sudo -n grantd elevate --grant-stdin -- CMD ARGS...",
    )
    p.add_argument("--config", help=f"elevation config (default {DEFAULT_CONFIG})")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--grant-stdin", action="store_true", help="read the token from the first line of stdin")
    source.add_argument("--grant-fd", type=int, metavar="N", help="read the token from file descriptor N (until EOF)")
    source.add_argument("--grant-file", metavar="FILE", help="read the token from a file or FIFO: opened as the caller, "
                                                             "must be the caller's and 0600")
    source.add_argument("--grant", metavar="JWT", help="the token itself: refused under sudo, since every local user "
                                                        "can read it in the process list")
    p.add_argument("--check-config", action="store_true", help="validate the config and plugins, print them, run nothing")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=cmd_elevate)

