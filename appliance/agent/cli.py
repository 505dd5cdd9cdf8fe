"""The agent's side: `grantd agent ...`, `grantd grant ...` and `grantd run`.

    grantd agent keygen                       Ed25519 key (OpenSSH format, 0600) + the line to enrol
    grantd agent login --idp URL --key FILE --email E
    grantd grant request|status|list|wait|token
    grantd run [--as USER] [--type once|timed|always] [--duration 1h] [--wait] -- CMD ARGS...

State lives in $XDG_CONFIG_HOME/grantd (default ~/.config/grantd): `agent.json` (0600) holds the
IdP, e-mail, key path and the current agent token, so an expiring token is renewed silently by
signing a fresh challenge; `agent.toml` (optional) holds defaults (idp, email, key, audience,
elevate_command, wait_timeout).

`grantd run` never puts the AuthZ-JWT on a command line: as root it hands the token to
`grantd elevate --grant-fd N` through a pipe and execs it; otherwise it runs
`sudo -n /usr/local/bin/grantd elevate --grant-file FIFO` and writes the token into a FIFO in a
private (0700) directory. Exit codes: 0 ok, 1 error, 2 usage, 75 grant still pending; under
`run` the command's own exit status (and elevate's 5/126/127).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from grantd.core.display import escape_text, summarize_argv

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PENDING = 75  # EX_TEMPFAIL, what the peer CLI uses for "ask again later"

DEFAULT_AUDIENCE = "grantd"
DEFAULT_ELEVATE_PATH = "/usr/local/bin/grantd"
DEFAULT_WAIT = 15 * 60
RELOGIN_MARGIN = 60  # seconds before exp at which a token counts as expired
HTTP_TIMEOUT = float(os.environ.get("GRANTD_HTTP_TIMEOUT") or 15)
POLL_INTERVAL = 3.0
FINAL = ("approved", "denied", "revoked", "consumed", "expired")


class CliError(Exception):
    """A failure with a readable message, a stable kind for --json and an exit code."""

    def __init__(self, message: str, *, kind: str = "error", exit_code: int = EXIT_ERROR, **extra: Any):
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.exit_code = exit_code
        self.extra = extra


# -- files -------------------------------------------------------------------------------------------


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "grantd"


def _private_dir() -> Path:
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read, atomically (no window with wider permissions)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def agent_settings() -> dict[str, Any]:
    path = config_dir() / "agent.toml"
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: {exc}", kind="config") from None


@dataclass
class State:
    idp: str = ""
    issuer: str = ""  # the token's `iss`: where people go (links are printed on it, D18), may differ from idp
    email: str = ""
    key_path: str = ""
    agent_id: str = ""
    token: str = ""
    expires_at: int = 0

    @staticmethod
    def path() -> Path:
        return config_dir() / "agent.json"

    @classmethod
    def load(cls) -> State:
        try:
            data = json.loads(cls.path().read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read {cls.path()}: {exc}; run grantd agent login again", kind="config") from None
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def save(self) -> None:
        _private_dir()
        write_private(self.path(), json.dumps(asdict(self), indent=2).encode())

    def public(self) -> dict[str, Any]:
        return {"idp": self.idp, "issuer": self.issuer or self.idp, "email": self.email, "agent_id": self.agent_id, "key_path": self.key_path,
                "expires_at": self.expires_at, "logged_in": bool(self.token) and self.expires_at > time.time()}


# -- keys --------------------------------------------------------------------------------------------


def load_private_key(path: str) -> Any:
    """An Ed25519 private key from an OpenSSH or PKCS#8 PEM file; clear errors otherwise."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CliError(f"key file {path} does not exist (make one with: grantd agent keygen)", kind="key") from None
    except OSError as exc:
        raise CliError(f"cannot read key file {path}: {exc.strerror}", kind="key") from None
    encrypted = CliError(f"key file {path} is encrypted (has a passphrase); grantd needs an unencrypted agent key: "
                         "make one with grantd agent keygen, or remove the passphrase with ssh-keygen -p -N '' -f FILE",
                         kind="key")
    try:
        if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
            key: Any = serialization.load_ssh_private_key(data, password=None)
        elif b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in data:
            raise encrypted
        elif b"-----BEGIN PRIVATE KEY-----" in data:
            key = serialization.load_pem_private_key(data, password=None)
        else:
            raise CliError(f"key file {path} is neither an OpenSSH nor a PKCS#8 PEM private key", kind="key")
    except TypeError:
        raise encrypted from None  # cryptography: "Key is password-protected"
    except (ValueError, Exception) as exc:
        if isinstance(exc, CliError):
            raise
        if "encrypt" in str(exc).lower() or "password" in str(exc).lower() or "bcrypt" in str(exc).lower():
            raise encrypted from None
        raise CliError(f"key file {path} cannot be read as a private key: {exc}", kind="key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CliError(f"key file {path} holds a {type(key).__name__.replace('_', '')}; agents use Ed25519 keys", kind="key")
    return key


def public_line(key: Any, comment: str) -> str:
    from cryptography.hazmat.primitives import serialization

    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode() + (
        f" {comment}" if comment else "")


# -- HTTP --------------------------------------------------------------------------------------------


def problem_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("detail", "error_description", "title", "message", "error"):
            if isinstance(body.get(key), str) and body[key]:
                return escape_text(body[key])  # the server's words, never raw on a terminal (D18)
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


class Api:
    """The IdP with the agent's token: renews the token silently before it expires or after a 401."""

    def __init__(self, idp: str, state: State | None = None, *, timeout: float = HTTP_TIMEOUT):
        self.idp = idp.rstrip("/")
        self.state = state
        self.client = httpx.Client(base_url=self.idp, timeout=timeout, headers={"User-Agent": "grantd-agent"})

    def close(self) -> None:
        self.client.close()

    @property
    def issuer(self) -> str:
        """The server's issuer, the base of every link printed for a person (D18): the agent may reach
        the server at another address (``--idp http://127.0.0.1:8000`` for ``http://localhost:8000``),
        where passkeys do not work. From the token's ``iss``, else from discovery, else the IdP URL."""
        state = self.state
        if state is not None and state.idp == self.idp:
            if not state.issuer and state.token:
                state.issuer = issuer_of(state.token)
            if state.issuer:
                return state.issuer
        try:
            answer = self.client.get("/.well-known/openid-configuration", headers={"Accept": "application/json"})
            found = answer.json().get("issuer") if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            found = None
        return found.rstrip("/") if isinstance(found, str) and found.startswith(("http://", "https://")) else self.idp

    def _transport_error(self, exc: Exception) -> CliError:
        if isinstance(exc, httpx.TimeoutException):
            return CliError(f"the IdP {self.idp} did not answer in time ({exc.__class__.__name__})", kind="unreachable")
        return CliError(f"cannot reach the IdP {self.idp}: {escape_text(str(exc))}", kind="unreachable")

    def raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None

    def token(self, *, force: bool = False) -> str:
        state = self.state
        if state is None or not state.email:
            raise CliError("not logged in: run grantd agent login --idp URL --key FILE --email E", kind="auth")
        if not force and state.token and state.expires_at - time.time() > RELOGIN_MARGIN:
            return state.token
        if not state.key_path:
            raise CliError("the agent token expired and no key is known: run grantd agent login again", kind="auth")
        login(self, state.email, state.key_path)
        return state.token

    def call(self, method: str, path: str, *, headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
        all_headers = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
        response = self.raw(method, path, headers={**all_headers, "Authorization": f"Bearer {self.token()}"}, **kwargs)
        if response.status_code == 401:  # e.g. the server's keys rotated: one fresh sign-in, then give up
            response = self.raw(method, path, headers={**all_headers, "Authorization": f"Bearer {self.token(force=True)}"},
                                **kwargs)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        return expect_json(response, what=f"{method} {path}")

    @contextlib.contextmanager
    def stream(self, path: str, *, headers: dict[str, str], read_timeout: float) -> Iterator[httpx.Response]:
        timeout = httpx.Timeout(HTTP_TIMEOUT, read=read_timeout)
        all_headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {self.token()}", **headers}
        with self.client.stream("GET", path, headers=all_headers, timeout=timeout) as response:
            yield response


def expect_json(response: httpx.Response, *, what: str) -> Any:
    if response.status_code >= 400:
        kind = {401: "auth", 403: "forbidden", 404: "not_found"}.get(response.status_code, "http")
        raise CliError(f"{problem_text(response)} ({what}: HTTP {response.status_code})", kind=kind,
                       status=response.status_code)
    try:
        return response.json()
    except ValueError:
        raise CliError(f"{what}: the IdP answered HTTP {response.status_code} without JSON", kind="http") from None


def issuer_of(token: str) -> str:
    """The ``iss`` claim of a JWT, read without checking the signature: the agent only prints links on
    it (the server that issued the token is the one the agent already talks to)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, UnicodeDecodeError):
        return ""
    iss = claims.get("iss") if isinstance(claims, dict) else None
    return iss.rstrip("/") if isinstance(iss, str) and iss.startswith(("http://", "https://")) else ""


def login(api: Api, email: str, key_path: str) -> State:
    """Challenge-response (D5): sign the challenge string with the agent's Ed25519 key."""
    key = load_private_key(key_path)
    response = api.raw("POST", "/api/agent/challenge", json={"agent_id": email})
    if response.status_code == 404:
        raise CliError(f"{email} is not enrolled at {api.idp} (ask an admin to enrol the public key)", kind="auth")
    challenge = expect_json(response, what="challenge").get("challenge")
    if not isinstance(challenge, str):
        raise CliError("the IdP sent no challenge", kind="http")
    signature = base64.b64encode(key.sign(challenge.encode())).decode()
    response = api.raw("POST", "/api/agent/authenticate", json={"agent_id": email, "challenge": challenge,
                                                                "signature": signature})
    if response.status_code in (400, 401, 403):
        raise CliError(f"sign-in refused for {email}: {problem_text(response)} (is {key_path} the enrolled key?)", kind="auth")
    answer = expect_json(response, what="authenticate")
    state = api.state or State()
    state.idp, state.email, state.key_path = api.idp, email, str(Path(key_path).resolve())
    state.token = answer["token"]
    state.issuer = issuer_of(state.token) or state.issuer
    state.agent_id = answer.get("agent_id") or state.agent_id
    state.expires_at = int(time.time()) + int(answer.get("expires_in") or 3600)
    state.save()
    api.state = state
    return state


# -- output ------------------------------------------------------------------------------------------


def _ms(value: Any) -> str:
    if not isinstance(value, int | float) or not value:
        return "-"
    return datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def shown(value: Any) -> str:
    """A value the server sent, as one line a terminal shows as it is (grantd.core.display, D18)."""
    return escape_text("" if value is None else str(value))


def command_line(req: dict[str, Any]) -> str:
    """The command (each argument escaped, quoted when needed) or the permissions."""
    command = req.get("command")
    if isinstance(command, list) and command:
        return summarize_argv([str(arg) for arg in command])
    return ", ".join(shown(p) for p in req.get("permissions") or [])


def describe_grant(grant: dict[str, Any]) -> str:
    req = grant.get("request") or {}
    lines = [
        f"grant {shown(grant.get('id'))}: {shown(grant.get('status'))}",
        f"  {shown(req.get('grant_type', 'once'))} on {shown(req.get('target_host'))} for {shown(req.get('audience'))}"
        + (f" as {shown(req['run_as'])}" if req.get("run_as") else ""),
        f"  command: {command_line(req) or '-'}",
    ]
    if req.get("reason"):
        lines.append(f"  reason: {shown(req['reason'])}")
    if grant.get("decided_by"):
        lines.append(f"  decided by {shown(grant['decided_by'])} at {_ms(grant.get('decided_at'))}"
                     + (f": {shown(grant['decision_reason'])}" if grant.get("decision_reason") else ""))
    if grant.get("expires_at"):
        lines.append(f"  expires {_ms(grant['expires_at'])}")
    return "\n".join(lines)


def approval_hint(issuer: str, grant_id: str) -> str:
    return (f"grantd: grant {shown(grant_id)} waits for a human decision. An approver can decide\n"
            f"  in the console:  grantd tui\n"
            f"  in a browser:    {shown(approval_url(issuer, grant_id))}")


def approval_url(issuer: str, grant_id: str) -> str:
    return f"{issuer}/grant-approval?grant_id={quote(grant_id)}"


def not_usable(grant: dict[str, Any]) -> CliError:
    status = shown(grant.get("status"))
    gid = shown(grant.get("id"))
    by = shown(grant.get("decided_by"))
    why = shown(grant.get("decision_reason"))
    if status == "denied":
        message = f"grant {gid} was denied" + (f" by {by}" if by else "") + (f": {why}" if why else "")
    elif status == "revoked":
        message = f"grant {gid} was revoked" + (f" (approved by {by})" if by else "")
    elif status == "expired":
        message = f"grant {gid} expired" + (" before anyone decided" if not by else "")
    elif status == "consumed":
        message = f"grant {gid} was already consumed (a once grant runs one time): request a new one"
    else:
        message = f"grant {gid} is {status}"
    return CliError(message, kind=str(grant.get("status")), grant=grant)


# -- waiting -----------------------------------------------------------------------------------------


class EventsUnavailable(Exception):
    pass


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """Server-Sent Events: yields {"event", "data", "id"} per event and {"comment": ...} per comment line."""
    event: dict[str, str] = {}
    data: list[str] = []
    for line in lines:
        if line == "":
            if data or event:
                yield {**event, "data": "\n".join(data)}
            event, data = {}, []
        elif line.startswith(":"):
            yield {"comment": line[1:].strip()}
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name in ("event", "id"):
                event[name] = value


def transient(exc: CliError) -> bool:
    """A failure that goes away by itself: the IdP restarting, or a proxy in front of it."""
    return exc.kind == "unreachable" or (exc.kind == "http" and exc.extra.get("status") in (502, 503, 504))


class Waiter:
    """Waits for a decision: follows GET /api/grants/events, re-checks the grant with ETag polling
    after connecting and on every heartbeat, and falls back to polling when there is no stream."""

    def __init__(self, api: Api, grant_id: str, *, timeout: float, interval: float = POLL_INTERVAL,
                 progress: Any = None):
        self.api = api
        self.grant_id = grant_id
        self.deadline = time.monotonic() + timeout
        self.interval = interval
        self.etag: str | None = None
        self.grant: dict[str, Any] | None = None
        self.last_event_id: str | None = None
        self.progress = progress

    def poll(self) -> dict[str, Any]:
        headers = {"If-None-Match": self.etag} if self.etag and self.grant else {}
        response = self.api.call("GET", f"/api/grants/{quote(self.grant_id, safe='')}", headers=headers)
        if response.status_code == 304 and self.grant is not None:
            return self.grant
        self.grant = expect_json(response, what=f"grant {self.grant_id}")
        self.etag = response.headers.get("etag")
        return self.grant

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def pause(self, seconds: float) -> None:
        time.sleep(min(seconds, max(self.remaining(), 0)))

    def wait(self) -> dict[str, Any]:
        grant = self.poll()  # an IdP that cannot be reached at all is an error at once
        if grant.get("status") != "pending":
            return grant
        use_events = True
        backoff = 1.0
        outage = False
        while self.remaining() > 0:
            try:
                if use_events:
                    try:
                        found = self.follow_events()
                        if found is not None:
                            return found
                    except EventsUnavailable:
                        use_events = False
                        if self.progress:
                            self.progress("no event stream; polling")
                    except httpx.HTTPError:
                        self.pause(1.0)  # reconnect after a short pause
                else:
                    self.pause(self.interval)
                grant = self.poll()
                if grant.get("status") != "pending":
                    return grant
                outage, backoff = False, 1.0
            except CliError as exc:
                # A restarting IdP (refused connections, 502/503/504 from it or a proxy) is waited out
                # until the deadline; anything else (401, 403, 404, ...) ends the wait.
                if not transient(exc):
                    raise
                if not outage and self.progress:
                    self.progress(f"{exc.message}; retrying until the wait times out")
                outage = True
                self.pause(backoff)
                backoff = min(backoff * 2, 10.0)
        raise CliError(f"grant {shown(self.grant_id)} is still pending", kind="pending", exit_code=EXIT_PENDING,
                       grant=self.grant)

    def follow_events(self) -> dict[str, Any] | None:
        headers = {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}
        read_timeout = max(min(40.0, self.remaining()), 0.5)
        with self.api.stream("/api/grants/events", headers=headers, read_timeout=read_timeout) as response:
            if response.status_code in (404, 405, 406, 501) or (
                    response.status_code == 200 and "text/event-stream" not in response.headers.get("content-type", "")):
                raise EventsUnavailable()
            if response.status_code != 200:
                response.read()
                raise CliError(f"event stream: {problem_text(response)}", kind="http", status=response.status_code)
            # Subscribed: a decision made before this point is seen by this check, later ones as events.
            grant = self.poll()
            if grant.get("status") != "pending":
                return grant
            for event in sse_events(response.iter_lines()):
                if self.remaining() <= 0:
                    return None
                if "comment" in event:  # heartbeat: a cheap ETag check covers anything a proxy dropped
                    grant = self.poll()
                    if grant.get("status") != "pending":
                        return grant
                    continue
                if event.get("id"):
                    self.last_event_id = event["id"]
                try:
                    payload = json.loads(event.get("data") or "{}")
                except ValueError:
                    continue
                changed = payload.get("grant") if isinstance(payload, dict) else None
                if isinstance(changed, dict) and changed.get("id") == self.grant_id and changed.get("status") != "pending":
                    return self.poll()
        return None


# -- hand-off to grantd elevate ------------------------------------------------------------------------


def self_command() -> list[str]:
    """This grantd program, started so that the current directory and PYTHON* cannot change it."""
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-I", "-m", "grantd"]


def elevate_prefix(settings: dict[str, Any], given: str | None = None) -> tuple[list[str], bool]:
    """(command that runs `grantd`, whether we may exec it directly with an inherited pipe).

    The command is, first found: ``--elevate-command``, ``GRANTD_ELEVATE_COMMAND``, agent.toml's
    ``elevate_command``; else, as root, this very program; else ``sudo -n`` and agent.toml's
    ``elevate_path`` (default /usr/local/bin/grantd, where packaging/install puts it)."""
    configured = given or os.environ.get("GRANTD_ELEVATE_COMMAND") or settings.get("elevate_command")
    if configured:
        return (shlex.split(configured) if isinstance(configured, str) else [str(c) for c in configured]), False
    if os.geteuid() == 0:
        return self_command(), True
    return ["sudo", "-n", str(settings.get("elevate_path") or DEFAULT_ELEVATE_PATH)], False


ELEVATE_HOW = ("name the command that runs grantd with --elevate-command CMD, GRANTD_ELEVATE_COMMAND or "
               "elevate_command in agent.toml (e.g. \"sudo -n /opt/grantd/grantd\"; as root, grantd run starts "
               "elevate itself), or install the bundle (sudo packaging/install)")


def elevate_missing(prefix: list[str]) -> str | None:
    """What is missing to start ``grantd elevate`` through ``prefix``, said before any grant is
    requested (a source checkout has no /usr/local/bin/grantd); None when every program is there."""
    if not prefix:
        return f"the elevate command is empty: {ELEVATE_HOW}"
    program = prefix[0]
    found = shutil.which(program)
    if found is None:
        return f"cannot run grantd elevate: {program} not found; {ELEVATE_HOW}"
    if os.path.basename(program) == "sudo":
        target = next((a for a in prefix[1:] if not a.startswith("-")), None)
        if target is None:
            return f"cannot run grantd elevate: {shlex.join(prefix)} names no program after sudo; {ELEVATE_HOW}"
        if os.path.isabs(target) and not os.access(target, os.X_OK):
            return (f"cannot run grantd elevate: it is reached through `{shlex.join(prefix)} elevate`, and {target} "
                    f"does not exist or is not executable; {ELEVATE_HOW}")
    return None


def hand_off(token: str, argv: list[str], settings: dict[str, Any], *, elevate_command: str | None = None,
             config: str | None = None) -> int:
    prefix, direct = elevate_prefix(settings, elevate_command)
    config_args = ["--config", config] if config else []
    sys.stdout.flush()
    sys.stderr.flush()
    if direct:
        # Root: the token goes into a pipe (it fits the pipe buffer), the read end is inherited.
        read_fd, write_fd = os.pipe()
        os.write(write_fd, token.encode())
        os.close(write_fd)
        os.set_inheritable(read_fd, True)
        command = [*prefix, "elevate", "--grant-fd", str(read_fd), *config_args, "--", *argv]
        try:
            os.execv(command[0], command)  # noqa: S606 - a fixed program and the user's argv, no shell
        except OSError as exc:
            raise CliError(f"cannot start {command[0]}: {exc.strerror}", kind="exec") from None
    # Through sudo: sudo closes inherited descriptors, so the token goes through a FIFO in a
    # directory only we can enter; elevate opens it with our permissions.
    directory = tempfile.mkdtemp(prefix="grantd-run-")
    fifo = os.path.join(directory, "grant")
    os.mkfifo(fifo, 0o600)
    command = [*prefix, "elevate", "--grant-file", fifo, *config_args, "--", *argv]
    try:
        try:
            child = subprocess.Popen(command)
        except OSError as exc:
            raise CliError(f"cannot start {command[0]}: {exc.strerror}", kind="exec") from None
        writer = threading.Thread(target=_feed_fifo, args=(fifo, token, child), daemon=True)
        writer.start()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's ^C reaches the child itself
        try:
            signal.signal(signal.SIGTERM, lambda *_: child.terminate())
            code = child.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        return code if code >= 0 else 128 - code
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fifo)
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _feed_fifo(fifo: str, token: str, child: subprocess.Popen[bytes]) -> None:
    while child.poll() is None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.05)
            continue
        try:
            os.set_blocking(fd, True)
            os.write(fd, token.encode())
        except OSError as exc:  # elevate then reads an empty FIFO and stays quiet: this is the one message
            print(f"grantd: could not hand the token to grantd elevate: {exc.strerror}", file=sys.stderr)
        finally:
            os.close(fd)
        return


# -- commands ----------------------------------------------------------------------------------------


def _emit(args: argparse.Namespace, data: Any, human: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data))
    elif human:
        print(human)


def _info(args: argparse.Namespace, message: str, **data: Any) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"event": data.pop("event", "info"), "message": message, **data}), file=sys.stderr)
    else:
        print(message, file=sys.stderr)


def _idp_for(args: argparse.Namespace, state: State, settings: dict[str, Any]) -> str:
    idp = getattr(args, "idp", None) or os.environ.get("GRANTD_IDP") or state.idp or settings.get("idp")
    if not idp:
        raise CliError("no IdP known: pass --idp URL (or run grantd agent login --idp URL first)", kind="usage",
                       exit_code=EXIT_USAGE)
    return str(idp).rstrip("/")


def _api(args: argparse.Namespace) -> Api:
    settings = agent_settings()
    state = State.load()
    idp = _idp_for(args, state, settings)
    if state.idp and state.idp != idp:
        raise CliError(f"logged in at {state.idp}, not {idp}: run grantd agent login --idp {idp} ...", kind="auth")
    return Api(idp, state)


def cmd_keygen(args: argparse.Namespace) -> int:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(args.output) if args.output else _private_dir() / "agent_ed25519"
    if path.exists() and not args.force:
        raise CliError(f"{path} exists; use --force to replace it (the IdP knows the old public key)", kind="exists")
    comment = args.comment or os.environ.get("GRANTD_EMAIL") or f"grantd-agent@{socket.gethostname()}"
    key = Ed25519PrivateKey.generate()
    write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    line = public_line(key, comment)
    pub = path.with_name(path.name + ".pub")
    pub.write_text(line + "\n")
    _emit(args, {"private_key": str(path.resolve()), "public_key_file": str(pub.resolve()), "public_key": line},
          f"{line}\n\nprivate key: {path} (0600)\npublic key:  {pub}\n"
          "Give the public key line to an admin to enrol (POST /api/agent/enroll, field publicKey),\n"
          f"then: grantd agent login --idp URL --key {path} --email AGENT_EMAIL")
    return EXIT_OK


def cmd_login(args: argparse.Namespace) -> int:
    settings = agent_settings()
    state = State.load()
    idp = _idp_for(args, state, settings)
    key = args.key or os.environ.get("GRANTD_KEY") or settings.get("key") or (
        state.key_path if state.key_path and Path(state.key_path).exists() else None)
    if not key:
        default = config_dir() / "agent_ed25519"
        key = str(default) if default.exists() else os.path.expanduser("~/.ssh/id_ed25519")
    email = args.email or os.environ.get("GRANTD_EMAIL") or settings.get("email") or _email_from_pub(key) or state.email
    if not email:
        raise CliError("no agent e-mail: pass --email", kind="usage", exit_code=EXIT_USAGE)
    fresh = State() if (state.idp and state.idp != idp) or (state.email and state.email != email) else state
    api = Api(idp, fresh)
    try:
        state = login(api, email, key)
    finally:
        api.close()
    _emit(args, state.public(), f"logged in as {state.email} at {state.idp} (token valid until "
                                f"{datetime.fromtimestamp(state.expires_at, UTC):%H:%M:%S} UTC; renewed automatically)")
    return EXIT_OK


def _email_from_pub(key: str) -> str | None:
    try:
        parts = Path(key + ".pub").read_text().split()
    except OSError:
        return None
    return parts[2] if len(parts) > 2 and "@" in parts[2] else None


def cmd_whoami(args: argparse.Namespace) -> int:
    """Asks the IdP who the cached token belongs to (renewing it first if it is about to expire)."""
    api = _api(args)
    try:
        me = api.json("GET", "/api/me")
    finally:
        api.close()
    info = {**api.state.public(), "server": me} if api.state else {"server": me}
    _emit(args, info, f"{shown(info.get('email'))} at {shown(info.get('idp'))} (token valid until "
                      f"{datetime.fromtimestamp(int(info.get('expires_at') or 0), UTC):%Y-%m-%d %H:%M:%S} UTC)")
    return EXIT_OK


def cmd_logout(args: argparse.Namespace) -> int:
    State.path().unlink(missing_ok=True)
    _emit(args, {"logged_out": True}, "logged out")
    return EXIT_OK


_DURATION = re.compile(r"(\d+)([smhdw]?)")


def parse_duration(text: str) -> int:
    """"3600", "90s", "5m", "1h30m", "7d" -> seconds."""
    units = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    pos, total = 0, 0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += int(match.group(1)) * units[match.group(2)]
        pos = match.end()
    if pos != len(text) or total <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (examples: 3600, 90s, 5m, 1h, 7d)")
    return total


def _command_of(args: argparse.Namespace) -> list[str]:
    argv = list(args.argv or [])
    if argv and argv[0] == "--":
        argv = argv[1:]
    return argv


def _grant_body(args: argparse.Namespace, *, audience: str, host: str, argv: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {"target_host": host, "audience": audience, "grant_type": args.type}
    if argv:
        body["command"] = argv
    if getattr(args, "permission", None):
        body["permissions"] = args.permission
    if not argv and not body.get("permissions"):
        raise CliError("nothing to grant: give a command after -- (or --permission)", kind="usage", exit_code=EXIT_USAGE)
    if args.duration:
        body["duration"] = args.duration
    run_as = getattr(args, "run_as", None)
    if run_as:
        body["run_as"] = run_as
    body["reason"] = args.reason or (shlex.join(argv) if argv else "")
    return body


def request_grant(api: Api, args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    """POST /api/grants. A timed request without --duration is fine when it reuses an approved grant;
    the server refuses it only for a new one, which the CLI then words as a usage error."""
    try:
        return dict(api.json("POST", "/api/grants", json=body))
    except CliError as exc:
        if args.type == "timed" and "duration" not in body and exc.extra.get("status") == 400 and "duration" in exc.message:
            raise CliError("--type timed needs --duration (e.g. 1h): no approved timed grant for this command to reuse",
                           kind="usage", exit_code=EXIT_USAGE) from None
        raise


def _wait(api: Api, args: argparse.Namespace, grant: dict[str, Any]) -> dict[str, Any]:
    timeout = float(args.timeout) if getattr(args, "timeout", None) else float(agent_settings().get("wait_timeout", DEFAULT_WAIT))
    waiter = Waiter(api, str(grant["id"]), timeout=timeout, progress=lambda m: _info(args, f"grantd: {m}"))
    return waiter.wait()


def cmd_grant_request(args: argparse.Namespace) -> int:
    argv = _command_of(args)
    api = _api(args)
    try:
        body = _grant_body(args, audience=args.audience, host=args.host, argv=argv)
        grant = request_grant(api, args, body)
        if grant.get("status") == "pending" and args.wait:
            _info(args, approval_hint(api.issuer, grant["id"]), event="pending", id=grant["id"],
                  approval_url=approval_url(api.issuer, grant["id"]))
            grant = _wait(api, args, grant)
        _emit(args, grant, describe_grant(grant))
        if grant.get("status") == "pending":
            if not args.json:
                print(approval_hint(api.issuer, grant["id"]), file=sys.stderr)
            return EXIT_PENDING
        return EXIT_OK if grant.get("status") == "approved" else EXIT_ERROR
    finally:
        api.close()


def cmd_grant_status(args: argparse.Namespace) -> int:
    api = _api(args)
    try:
        grant = api.json("GET", f"/api/grants/{quote(args.id, safe='')}")
    finally:
        api.close()
    _emit(args, grant, describe_grant(grant))
    return EXIT_OK


def cmd_grant_list(args: argparse.Namespace) -> int:
    api = _api(args)
    params: dict[str, Any] = {"limit": args.limit}
    if args.status:
        params["status"] = args.status
    try:
        answer = api.json("GET", "/api/grants", params=params)
    finally:
        api.close()
    items = answer.get("data", []) if isinstance(answer, dict) else answer
    if args.json:
        print(json.dumps(answer))
        return EXIT_OK
    if not items:
        print("no grants")
    for g in items:
        req = g.get("request") or {}
        print(f"{shown(g.get('id'))}  {shown(g.get('status')):9}  {shown(req.get('grant_type', 'once')):6}  "
              f"{shown(req.get('target_host'))}  {command_line(req)}")
    return EXIT_OK


def cmd_grant_wait(args: argparse.Namespace) -> int:
    api = _api(args)
    try:
        grant = _wait(api, args, {"id": args.id})
    finally:
        api.close()
    _emit(args, grant, describe_grant(grant))
    if grant.get("status") != "approved":
        raise not_usable(grant)
    return EXIT_OK


def fetch_token(api: Api, grant_id: str) -> str:
    try:
        answer = api.json("POST", f"/api/grants/{quote(grant_id, safe='')}/token")
    except CliError as exc:
        if exc.extra.get("status") != 400:
            raise
        # The grant is no longer usable (consumed, revoked, ...): say so in the words `grantd run`
        # uses, once. Piped into `grantd elevate --grant-stdin`, this line is the only one: elevate
        # stays quiet about a pipe that closed without a token.
        try:
            grant = api.json("GET", f"/api/grants/{quote(grant_id, safe='')}")
        except CliError:
            raise exc from None
        if isinstance(grant, dict) and grant.get("status") != "approved":
            raise not_usable(grant) from None
        raise
    token = answer.get("authz_jwt") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise CliError(f"the IdP returned no token for grant {shown(grant_id)}", kind="http")
    return token


def cmd_grant_token(args: argparse.Namespace) -> int:
    api = _api(args)
    try:
        token = fetch_token(api, args.id)
    finally:
        api.close()
    _emit(args, {"id": args.id, "authz_jwt": token}, shown(token))  # a JWT is ASCII: escaping changes only a forgery
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    argv = _command_of(args)
    if not argv:
        raise CliError("no command: grantd run [--as USER] -- CMD ARGS...", kind="usage", exit_code=EXIT_USAGE)
    settings = agent_settings()
    audience = args.audience or os.environ.get("GRANTD_AUDIENCE") or settings.get("audience") or DEFAULT_AUDIENCE
    host = args.host or socket.gethostname()
    elevate_config = args.elevate_config or os.environ.get("GRANTD_ELEVATE_CONFIG") or None
    missing = elevate_missing(elevate_prefix(settings, args.elevate_command)[0])
    if missing:  # before a person is asked to approve something that cannot run
        raise CliError(missing, kind="elevate", exit_code=EXIT_ERROR)
    api = _api(args)
    try:
        args.run_as = args.as_user
        body = _grant_body(args, audience=audience, host=host, argv=argv)
        grant = request_grant(api, args, body)
        if grant.get("status") == "pending":
            url = approval_url(api.issuer, grant["id"])
            if not args.wait:
                data = {"id": grant["id"], "status": "pending", "approval_url": url, "exit_code": EXIT_PENDING}
                _emit(args, data, "")
                if not args.json:
                    print(approval_hint(api.issuer, grant["id"]), file=sys.stderr)
                    print(f"grantd: run again when it is approved, or: grantd grant wait {shown(grant['id'])}",
                          file=sys.stderr)
                return EXIT_PENDING
            _info(args, approval_hint(api.issuer, grant["id"]), event="pending", id=grant["id"], approval_url=url)
            grant = _wait(api, args, grant)
        if grant.get("status") != "approved":
            raise not_usable(grant)
        token = fetch_token(api, grant["id"])
    finally:
        api.close()
    kind = (grant.get("request") or {}).get("grant_type", args.type)
    reused = bool(grant.get("reused"))
    _info(args, f"grantd: {'reusing grant' if reused else 'grant'} {shown(grant['id'])} ({shown(kind)}) approved by "
                f"{shown(grant.get('decided_by') or 'delegation')}; running as {shown(args.as_user or 'root')}",
          event="approved", id=grant["id"], grant_type=kind, decided_by=grant.get("decided_by"), reused=reused)
    return hand_off(token, argv, settings, elevate_command=args.elevate_command, config=elevate_config)


# -- wiring ------------------------------------------------------------------------------------------


def _run_safely(func: Any) -> Any:
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except CliError as exc:
            if getattr(args, "json", False):
                print(json.dumps({"error": exc.kind, "message": exc.message,
                                  **{k: v for k, v in exc.extra.items() if k != "grant" or v}}), file=sys.stderr)
            else:
                print(f"grantd: {exc.message}", file=sys.stderr)
                if exc.kind == "pending" and exc.extra.get("grant"):
                    grant = exc.extra["grant"]
                    print(f"grantd: still waiting after the timeout; approve it at "
                          f"{shown(approval_url(_safe_issuer(args), str(grant.get('id'))))}", file=sys.stderr)
            return exc.exit_code

    wrapper.__doc__ = func.__doc__
    return wrapper


def _safe_issuer(args: argparse.Namespace) -> str:
    """The issuer for a link in an error message, without asking the server again."""
    try:
        state = State.load()
        idp = _idp_for(args, state, agent_settings())
    except CliError:
        return "ISSUER"
    return (state.issuer or issuer_of(state.token) or idp) if state.idp == idp else idp


def _common(p: argparse.ArgumentParser, *, idp: bool = True) -> argparse.ArgumentParser:
    p.add_argument("--json", action="store_true", help="machine-readable output (errors as JSON on stderr)")
    if idp:
        p.add_argument("--idp", help="IdP base URL (default: the one you logged in at; env GRANTD_IDP)")
    return p


def _grant_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type", choices=("once", "timed", "always"), default="once", help="grant type (default once)")
    p.add_argument("--duration", type=parse_duration, help="for timed grants: 3600, 30m, 1h, 7d")
    p.add_argument("--reason", help="shown to the approver (default: the command)")
    p.add_argument("--wait", action="store_true", help="wait for the decision instead of exiting 75")
    p.add_argument("--timeout", type=parse_duration, help=f"how long --wait waits (default {DEFAULT_WAIT // 60} min)")


def register(subparsers: Any) -> None:
    agent = subparsers.add_parser("agent", help="agent identity: key, sign-in")
    asub = agent.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    p = _common(asub.add_parser("keygen", help="make an Ed25519 agent key (OpenSSH format, 0600)"), idp=False)
    p.add_argument("--output", "-f", help="private key file (default: ~/.config/grantd/agent_ed25519)")
    p.add_argument("--comment", "-C", help="comment of the public key (use the agent's e-mail)")
    p.add_argument("--force", action="store_true", help="replace an existing key")
    p.set_defaults(func=_run_safely(cmd_keygen))
    p = _common(asub.add_parser("login", help="sign in by challenge-response; the token is cached and renewed"))
    p.add_argument("--key", help="private key: OpenSSH or PKCS#8, unencrypted, Ed25519")
    p.add_argument("--email", help="the agent's enrolled e-mail")
    p.set_defaults(func=_run_safely(cmd_login))
    p = _common(asub.add_parser("whoami", help="who is logged in where (asks the IdP; renews the token)"))
    p.set_defaults(func=_run_safely(cmd_whoami))
    p = _common(asub.add_parser("logout", help="forget the cached token"), idp=False)
    p.set_defaults(func=_run_safely(cmd_logout))

    grant = subparsers.add_parser("grant", help="request and follow grants")
    gsub = grant.add_subparsers(dest="grant_command", metavar="ACTION", required=True)
    p = _common(gsub.add_parser("request", help="ask for a grant: --audience A --host H [...] -- CMD ARGS..."))
    p.add_argument("--audience", required=True, help="service the grant is for (e.g. grantd, escapes)")
    p.add_argument("--host", required=True, help="target host")
    p.add_argument("--run-as", help="user to run the command as on the target")
    p.add_argument("--permission", action="append", help="a permission string (repeatable)")
    _grant_options(p)
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=_run_safely(cmd_grant_request))
    p = _common(gsub.add_parser("status", help="show one grant"))
    p.add_argument("id")
    p.set_defaults(func=_run_safely(cmd_grant_status))
    p = _common(gsub.add_parser("list", help="list your grants"))
    p.add_argument("--status", choices=("pending", *FINAL))
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=_run_safely(cmd_grant_list))
    p = _common(gsub.add_parser("wait", help="wait for a decision (event stream, falls back to polling)"))
    p.add_argument("id")
    p.add_argument("--timeout", type=parse_duration, help=f"default {DEFAULT_WAIT // 60} min; exit 75 when it passes")
    p.set_defaults(func=_run_safely(cmd_grant_wait))
    p = _common(gsub.add_parser("token", help="print the grant's AuthZ-JWT (pipe it; never put it on a command line)"))
    p.add_argument("id")
    p.set_defaults(func=_run_safely(cmd_grant_token))

    p = _common(subparsers.add_parser(
        "run", help="run a command with a grant: request (or reuse), wait, then grantd elevate",
        description="Requests a grant for CMD on this host (audience 'grantd'), reuses an approved timed/always "
                    "grant, waits with --wait (else exits 75), then runs `grantd elevate` (directly as root, "
                    "else through `sudo -n /usr/local/bin/grantd`, or the command --elevate-command names) and "
                    "passes the token through a pipe. Exit status: the command's; 5 refused by elevate; "
                    "75 pending; 1 errors."))
    p.add_argument("--as", dest="as_user", metavar="USER", help="run as USER (default root)")
    p.add_argument("--audience", help=f"grant audience (default {DEFAULT_AUDIENCE}; agent.toml audience)")
    p.add_argument("--host", help="target host (default: this host's name)")
    p.add_argument("--elevate-command", metavar="CMD",
                   help="the command that runs grantd for `grantd elevate` (e.g. \"sudo -n /opt/grantd/grantd\"; "
                        "env GRANTD_ELEVATE_COMMAND, agent.toml elevate_command; default: this grantd as root, "
                        f"else sudo -n {DEFAULT_ELEVATE_PATH})")
    p.add_argument("--elevate-config", metavar="FILE",
                   help="elevate.toml for `grantd elevate --config` (env GRANTD_ELEVATE_CONFIG; default "
                        "/etc/grantd/elevate.toml; through sudo only files in /etc/grantd/)")
    _grant_options(p)
    p.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=_run_safely(cmd_run))
