"""Shared test fixtures: real grantd servers on free ports, real SQLite files, real ssh-keygen."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import settings
from support import ports
from support import postgres as pg

# Property tests are deterministic: the same examples every run, no example database between runs,
# and no per-example deadline: speed is measured by bench/, and on a busy machine hypothesis's 200 ms
# deadline failed a correct property (DeadlineExceeded, seen when CI shared its cores).
settings.register_profile("grantd", derandomize=True, database=None, deadline=None)
settings.load_profile("grantd")

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def free_port() -> int:
    """A port for a server this test starts (tests/support/ports.py: why not port 0)."""
    return ports.free_port()


def toml_config(
    port: int,
    *,
    db: str = "grantd.db",
    extra: str = "",
    workers: int = 1,
    log_format: str = "text",
    storage: str | None = None,
) -> str:
    """``storage``: the lines of the ``[storage]`` table instead of SQLite at ``db``."""
    storage = storage if storage is not None else f'plugin = "sqlite"\npath = "{db}"'
    return f"""version = 1

[server]
host = "127.0.0.1"
port = {port}
workers = {workers}
graceful_shutdown_timeout = 3

[log]
format = "{log_format}"

[admin]
management_token = "file:management-token"
management_identity = "admin@example.com"
emails = ["root@example.com"]

[storage]
{storage}
{extra}
"""


@dataclass
class Server:
    """A real `grantd serve` process."""

    directory: Path
    port: int
    token: str
    command: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.directory / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "grantd.toml"

    def start(self, timeout: float = 30.0) -> Server:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [*self.command, "serve", "--config", str(self.config_path)],
            cwd=self.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"grantd exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"grantd did not become ready:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        os.killpg(self.proc.pid, sig) if sig == signal.SIGKILL else self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def admin(self) -> httpx.Client:
        return self.client(self.token)

    def grantd(self, *args: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """Run a grantd CLI command against this server's config."""
        result = subprocess.run(
            [*self.command, *args],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            **kwargs,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"grantd {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result


GRANTD = [sys.executable, "-m", "grantd"]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop this process's PostgreSQL of GRANTD_TEST_STORAGE=postgres (started on first use)."""
    pg.stop_suite_server()


def make_server(
    directory: Path,
    *,
    workers: int = 1,
    extra: str = "",
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
    log_format: str = "text",
    storage: str | None = None,
) -> Server:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    token = base64.urlsafe_b64encode(os.urandom(24)).decode()
    token_file = directory / "management-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    if (
        storage is None
    ):  # GRANTD_TEST_STORAGE=postgres: a fresh PostgreSQL database (tests/support/postgres.py)
        storage = pg.storage_for(directory)
    (directory / "grantd.toml").write_text(
        toml_config(port, workers=workers, extra=extra, log_format=log_format, storage=storage)
    )
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS / "plugins")])}
    full_env.update(env or {})
    return Server(directory, port, token, command or GRANTD, full_env)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("grantd")).start()
    yield srv
    srv.stop()


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[Server] = []

    def factory(name: str = "srv", **kwargs: Any) -> Server:
        srv = make_server(tmp_path / name, **kwargs)
        started.append(srv)
        return srv

    yield factory
    for srv in started:
        srv.stop()


@pytest.fixture
def grantd_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` listening on grantd's own logger, from WARNING up. That logger does not propagate
    to the root once a server's logging was configured in this process (``grantd.logs``; another
    test of the same worker may have done it), so the root's capture alone would miss it."""
    logger = logging.getLogger("grantd")
    caplog.set_level(logging.WARNING, logger="grantd")
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


@pytest.fixture
def black_hole() -> Iterator[str]:
    """The URL of a server that accepts connections and never answers (for timeout tests)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    listener.close()


# -- agents --------------------------------------------------------------------------------------


@dataclass
class Agent:
    email: str
    key_path: Path
    public_key: str
    agent_id: str = ""
    token: str = ""

    def private_key(self) -> Ed25519PrivateKey:
        key = serialization.load_ssh_private_key(self.key_path.read_bytes(), password=None)
        assert isinstance(key, Ed25519PrivateKey)
        return key

    def sign_raw(self, challenge: str) -> str:
        return base64.b64encode(self.private_key().sign(challenge.encode())).decode()

    def sign_ssh(self, challenge: str, namespace: str = "grantd") -> str:
        """Sign with the real ssh-keygen -Y sign, as an operator would by hand."""
        result = subprocess.run(
            ["ssh-keygen", "-Y", "sign", "-n", namespace, "-f", str(self.key_path), "-q"],
            input=challenge.encode(),
            capture_output=True,
            check=True,
        )
        return result.stdout.decode()


def ssh_keygen(directory: Path, name: str = "agent_key", key_type: str = "ed25519") -> tuple[Path, str]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    if path.exists():
        path.unlink()
        (directory / f"{name}.pub").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", "test", "-f", str(path)], check=True)
    return path, (directory / f"{name}.pub").read_text().strip()


_counter = 0


def unique_email(prefix: str = "agent") -> str:
    global _counter
    _counter += 1
    return f"{prefix}+{os.getpid()}-{_counter}-{time.monotonic_ns() % 100000}@example.com"


def enroll(server: Server, directory: Path, *, email: str | None = None, **fields: Any) -> Agent:
    email = email or unique_email()
    key_path, public = ssh_keygen(directory, name=email.split("@")[0].replace("+", "_"))
    with server.admin() as http:
        r = http.post(
            "/api/agent/enroll", json={"email": email, "name": "Test agent", "publicKey": public, **fields}
        )
    assert r.status_code == 201, r.text
    return Agent(email=email, key_path=key_path, public_key=public, agent_id=r.json()["agent_id"])


def sign_in(server: Server, agent: Agent, *, ssh: bool = False) -> str:
    with server.client() as http:
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
        signature = agent.sign_ssh(challenge) if ssh else agent.sign_raw(challenge)
        r = http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": challenge, "signature": signature},
        )
    assert r.status_code == 200, r.text
    agent.token = r.json()["token"]
    return agent.token


def signed_in(server: Server, directory: Path, **fields: Any) -> Agent:
    """A freshly enrolled agent with an identity token (enroll + sign_in)."""
    a = enroll(server, directory, **fields)
    sign_in(server, a)
    return a


@pytest.fixture
def agent(server: Server, tmp_path: Path) -> Agent:
    """A freshly enrolled and signed-in agent on the module's server."""
    return signed_in(server, tmp_path / "keys")


def problem(response: httpx.Response) -> dict[str, Any]:
    """Assert a response is problem+json and return its body."""
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = json.loads(response.text)
    assert {"type", "title", "status", "detail"} <= set(body), body
    assert body["status"] == response.status_code
    return body


# -- tiers --------------------------------------------------------------------------------------------
# The folders are the tiers (README, docs/architecture.md "Tests"):
#   tests/unit/      no grantd server or process: pure modules, the house checks (ruff, mypy, layers),
#                    real helpers where the module talks to one (a DNS server, an SMTP sink)
#   tests/contract/  the storage contract (grantd.testing) against SQLite, the memory example and,
#                    in the slow tier, PostgreSQL
#   tests/server/    real grantd servers (in-process and `grantd serve`) and the CLI as processes
#   tests/system/    the slow tier: the whole system end to end and the exhaustive sweeps: the bundle,
#                    browsers, real elevate runs as root, third-party clients (authlib, openid-client),
#                    several nodes, the PostgreSQL suite, schemathesis, crash and shutdown timing, every
#                    route x every caller
# The fast tier is `scripts/test -m "not slow"`: everything outside tests/system except the few tests
# marked slow where they stand (PostgreSQL variants, and tests that take seconds each). The full suite
# (scripts/test, CI) runs all of it.
SYSTEM_TIER = Path(__file__).resolve().parent / "system"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(SYSTEM_TIER) or "[postgres" in item.nodeid:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[pg.Postgres]:
    """A private PostgreSQL server for the module (tests/support/postgres.py)."""
    pg.require()
    started = pg.Postgres().start()
    yield started
    started.stop()


@pytest.fixture
def pg_dsn(own_postgres: pg.Postgres) -> Iterator[str]:
    """A fresh schema on it, dropped after the test."""
    made = own_postgres.create_schema()
    yield made
    own_postgres.drop_schema(made)
