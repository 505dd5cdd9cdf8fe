"""Helpers for the elevate and agent CLI tests (no tests here).

Tokens are minted with the real server's signing key (read from its SQLite file through
grantd.services.keys/grantd.services.tokens), so `grantd elevate` checks them against the real JWKS the
server publishes.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grantd.plugins.elevate_default import cmd_hash

from conftest import ROOT, TESTS, Server

HOST = socket.gethostname()
APPROVER = "admin@example.com"
GRANTD = [sys.executable, "-m", "grantd"]


async def _mint(config_path: Path, claims: dict[str, Any]) -> str:
    from grantd.config import load
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services.context import open_services

    config = load(config_path)
    services = await open_services(config, build_plugin_manager(config))
    try:
        return await services.tokens._sign(claims)  # any claims: the tests forge what they need
    finally:
        services.store.close()


def claims_for(server: Server, argv: list[str], **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": server.url,
        "sub": "agent+test@example.com",
        "aud": "grantd",
        "target_host": HOST,
        "grant_id": str(uuid.uuid4()),
        "grant_type": "timed",
        "permissions": [],
        "command": argv,
        "cmd_hash": cmd_hash(argv),
        "decided_by": APPROVER,
        "iat": now,
        "exp": now + 300,
        "jti": str(uuid.uuid4()),
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def mint_token(server: Server, argv: list[str], **overrides: Any) -> str:
    return asyncio.run(_mint(server.config_path, claims_for(server, argv, **overrides)))


@dataclass
class Target:
    """A target host's elevate setup in a test directory: config, audit log, JWKS cache."""

    directory: Path
    config: Path
    audit_log: Path
    cache: Path

    def audit_lines(self) -> list[dict[str, Any]]:
        if not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines()]


def make_target(directory: Path, issuers: list[str], *, extra: str = "", **keys: Any) -> Target:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    etc = directory / "etc"
    etc.mkdir(exist_ok=True)
    etc.chmod(0o755)
    target = Target(directory, etc / "elevate.toml", directory / "log" / "elevate.log", directory / "cache")
    settings: dict[str, Any] = {
        "allowed_issuers": issuers,
        "allowed_approvers": [APPROVER],
        "host": HOST,
        "audit_log": str(target.audit_log),
        "jwks_cache_dir": str(target.cache),
        "timeout": 5,
    }
    settings.update(keys)
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items() if v is not None]
    target.config.write_text("\n".join(lines) + "\n" + extra)
    target.config.chmod(0o644)
    return target


def dirty_env(**extra: str) -> dict[str, str]:
    """The caller's environment with everything an attacker would like the root command to inherit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRANTD_", "PYTEST"))}
    env.update(
        {
            "LD_PRELOAD": "/nonexistent/evil.so",
            "LD_LIBRARY_PATH": "/tmp/evil",
            "PYTHONPATH": "/tmp/evil-python",
            "PYTHONSTARTUP": "/tmp/evil.py",
            "IFS": "x",
            "BASH_ENV": "/tmp/evil.sh",
            "ENV": "/tmp/evil.sh",
            "CDPATH": "/tmp",
            "PATH": "/tmp/evil-bin:" + os.environ.get("PATH", "/usr/bin:/bin"),
            "PERL5OPT": "-d",
            "LANG": "C.UTF-8",
            "TERM": "xterm",
        }
    )
    env.update(extra)
    return env


def elevate(
    target: Target | Path,
    argv: list[str],
    *,
    token: str | None = None,
    via: str = "stdin",
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
    extra_args: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `grantd elevate` as a separate process, the way sudo would start it."""
    config = target.config if isinstance(target, Target) else target
    args = [*GRANTD, "elevate", "--config", str(config), *(extra_args or [])]
    stdin: str | None = None
    pass_fds: tuple[int, ...] = ()
    read_fd = None
    if token is not None:
        if via == "stdin":
            args.append("--grant-stdin")
            stdin = token + "\n"
        elif via == "fd":
            read_fd, write_fd = os.pipe()
            os.write(write_fd, token.encode())
            os.close(write_fd)
            args += ["--grant-fd", str(read_fd)]
            pass_fds = (read_fd,)
        elif via == "file":
            path = (cwd or Path(config).parent.parent) / "grant.jwt"
            path.write_text(token)
            path.chmod(0o600)
            args += ["--grant-file", str(path)]
        else:
            args += ["--grant", token]
    # Without SUDO_* from however the suite was started: the tests that mean sudo say so.
    run_env = env if env is not None else {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
    run_env.setdefault("PYTHONPATH", str(ROOT))
    try:
        return subprocess.run(
            [*args, "--", *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=run_env,
            pass_fds=pass_fds,
            cwd=cwd or ROOT,
        )
    finally:
        if read_fd is not None:
            os.close(read_fd)


def error_line(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON line elevate writes on stderr for a refusal or an error."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("{") and '"error"' in line]
    assert len(lines) == 1, result.stderr
    return json.loads(lines[0])


PLUGIN_DIR = str(TESTS / "plugins")


def attempts(target: Target) -> list[dict[str, Any]]:
    """The audit log's decision lines (one per attempt: allowed, refused or error)."""
    return [line for line in target.audit_lines() if line.get("event") == "attempt"]


def exits(target: Target) -> list[dict[str, Any]]:
    """The audit log's lines that say how an allowed command ended."""
    return [line for line in target.audit_lines() if line.get("event") == "exit"]


# -- a hand-made issuer: its keys in the target's JWKS cache, its consume answer chosen by the test --


class FakeIssuer:
    """An issuer whose signing key the test holds. Its JWKS is put into a target's cache (so no
    JWKS fetch happens), and its consume endpoint, when `serve()` runs it, answers what the test
    sets in `answer`: (status, content type, body, extra headers)."""

    def __init__(self, url: str | None = None) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self.key = Ed25519PrivateKey.generate()
        self.kid = "fake-" + uuid.uuid4().hex[:8]
        self.url = url or ""
        self.answer: tuple[int, str, bytes, dict[str, str]] = (
            200,
            "application/json",
            b'{"status":"valid"}',
            {},
        )
        self.consumed: list[str] = []
        self.consume_headers: list[dict[str, str]] = []  # each consume request's headers
        self._server: Any = None

    def jwks(self) -> dict[str, Any]:
        import base64

        from cryptography.hazmat.primitives import serialization

        raw = self.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        return {
            "keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": self.kid, "alg": "EdDSA", "use": "sig"}]
        }

    def token(self, argv: list[str], **overrides: Any) -> str:
        import jwt

        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.url,
            "sub": "agent+fake@example.com",
            "aud": "grantd",
            "target_host": HOST,
            "grant_id": str(uuid.uuid4()),
            "grant_type": "timed",
            "command": argv,
            "cmd_hash": cmd_hash(argv),
            "decided_by": APPROVER,
            "iat": now,
            "exp": now + 300,
            "jti": str(uuid.uuid4()),
        }
        claims.update(overrides)
        return jwt.encode(claims, self.key, algorithm="EdDSA", headers={"kid": self.kid})

    def target(self, directory: Path, **keys: Any) -> Target:
        """A target trusting this issuer, with its keys already cached (fresh for an hour)."""
        import hashlib

        target = make_target(directory, [self.url], jwks_refresh=3600, **keys)
        target.cache.mkdir(mode=0o700, exist_ok=True)
        name = "jwks-" + hashlib.sha256(self.url.encode()).hexdigest()[:32] + ".json"
        entry = target.cache / name
        entry.write_text(json.dumps({"issuer": self.url, "fetched_at": time.time(), "jwks": self.jwks()}))
        entry.chmod(0o600)
        return target

    def serve(self) -> FakeIssuer:
        import http.server
        import threading

        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                issuer.consumed.append(self.path)
                issuer.consume_headers.append(dict(self.headers))
                status, content_type, body, headers = issuer.answer
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
