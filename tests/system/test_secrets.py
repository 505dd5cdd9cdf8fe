"""No secret in the logs or in CLI output, and secret files are private (D12, README "Logging").

A full flow runs against a real `grantd serve` in each log format (text, JSON; access lines on,
debug level): enrol, sign in with both signature forms, a refused sign-in, request, approve, token,
verify, consume, delegations, a wrong management token, a couple of errors; then `grantd keys
rotate` and `grantd db backup`. Every secret the flow handled is collected — the management token,
identity tokens, AuthZ-JWTs, signatures (raw and SSH), challenges, the guessed token, the agent's
and the server's private keys (PEM and raw bytes in base64/base64url) — and neither the server log
nor those CLI outputs may contain any of them, any JWT-shaped string or a PEM private-key header.
Then the database, its -wal/-shm files, the backup and the management-token file must be 0600 and
their directories not world-writable.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support import postgres as pg

from conftest import GRANTD, Agent, Server, enroll, make_server
from grants_support import grant_body

JWT_SHAPE = re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}")
PEM_PRIVATE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|BEGIN SSH SIGNATURE")


def forms(raw: bytes) -> list[str]:
    """The ways raw bytes appear as text: base64 and base64url, padded or not."""
    std = base64.b64encode(raw).decode()
    url = base64.urlsafe_b64encode(raw).decode()
    return sorted({std, std.rstrip("="), url, url.rstrip("="), raw.hex()})


def private_raw(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


class Secrets:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def add(self, what: str, value: str) -> None:
        assert value and len(value) >= 8, (what, value)
        self.values[f"{what} #{len(self.values)}"] = value

    def add_raw(self, what: str, raw: bytes) -> None:
        for form in forms(raw):
            self.add(what, form)

    def found_in(self, text: str) -> list[str]:
        leaks = [what for what, value in self.values.items() if value in text]
        leaks += [f"JWT-shaped: {m[:20]}..." for m in JWT_SHAPE.findall(text)]
        leaks += [f"PEM header: {m}" for m in PEM_PRIVATE.findall(text)]
        return leaks


def sign_in(srv: Server, agent: Agent, secrets: Secrets, *, ssh: bool) -> str:
    with srv.client() as http:
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
        signature = agent.sign_ssh(challenge) if ssh else agent.sign_raw(challenge)
        r = http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": challenge, "signature": signature},
        )
    assert r.status_code == 200, r.text
    secrets.add("challenge", challenge)
    if ssh:
        for line in signature.splitlines():
            if not line.startswith("-----") and len(line) >= 16:
                secrets.add("ssh signature line", line)
    else:
        secrets.add("raw signature", signature)
        secrets.add_raw("raw signature bytes", base64.b64decode(signature))
    token = r.json()["token"]
    secrets.add("identity token", token)
    secrets.add("identity token signature", token.rsplit(".", 1)[1])
    return token


def flow(srv: Server, tmp: Path, secrets: Secrets) -> Path:
    """Every secret-handling step; returns where `grantd db backup` wrote."""
    secrets.add("management token", srv.token)
    agent = enroll(srv, tmp / "keys")
    secrets.add_raw("agent private key", private_raw(agent.private_key()))
    for line in agent.key_path.read_text().splitlines():
        if not line.startswith("-----") and len(line) >= 16:
            secrets.add("agent key file line", line)
    sign_in(srv, agent, secrets, ssh=True)
    token = sign_in(srv, agent, secrets, ssh=False)
    with srv.client() as http:  # a refused sign-in: a signature over another challenge
        challenge = http.post("/api/agent/challenge", json={"agent_id": agent.email}).json()["challenge"]
        wrong = agent.sign_raw("0" * 64)
        secrets.add("refused signature", wrong)
        r = http.post(
            "/api/agent/authenticate",
            json={"agent_id": agent.email, "challenge": challenge, "signature": wrong},
        )
        assert r.status_code == 401
    guess = "guessed-management-token-" + srv.token[::-1]
    secrets.add("guessed management token", guess)
    with srv.client(guess) as http:
        assert http.get("/api/admin/agents").status_code == 401
    with srv.client(token) as http, srv.admin() as admin:
        grant = http.post("/api/grants", json=grant_body()).json()
        approved = admin.post(f"/api/grants/{grant['id']}/approve", json={})
        assert approved.status_code == 200, approved.text
        secrets.add("authz jwt (approve)", approved.json()["authz_jwt"])
        authz = http.post(f"/api/grants/{grant['id']}/token").json()["authz_jwt"]
        secrets.add("authz jwt (token)", authz)
        assert httpx.post(f"{srv.url}/api/grants/verify", json={"token": authz}).json()["valid"] is True
        consumed = httpx.post(
            f"{srv.url}/api/grants/{grant['id']}/consume", headers={"Authorization": f"Bearer {authz}"}
        )
        assert consumed.json()["status"] == "consumed"
        again = httpx.post(
            f"{srv.url}/api/grants/{grant['id']}/consume?token={authz}",
            headers={"Authorization": f"Bearer {authz}"},
        )
        assert again.json()["error"] == "already_consumed"
        delegation = admin.post("/api/delegations", json={"delegate": agent.email, "audience": "other"})
        assert delegation.status_code == 201, delegation.text
        did = delegation.json()["id"]
        assert admin.get("/api/delegations").status_code == 200
        assert (
            admin.post(
                f"/api/delegations/{did}/validate", json={"delegate": agent.email, "audience": "other"}
            ).status_code
            == 200
        )
        assert admin.delete(f"/api/delegations/{did}").status_code == 200
        # errors: unknown grant, malformed JSON, a bad token in a query string and a body
        assert http.get("/api/grants/no-such-grant").status_code == 404
        assert admin.post("/api/grants", content=b'{"target_host": ' + token.encode()).status_code == 400
        assert httpx.get(f"{srv.url}/api/me?access_token={token}").status_code == 401
        assert httpx.get(f"{srv.url}/api/me", headers={"Authorization": f"Bearer {authz}"}).status_code == 401
    rotated = srv.grantd("keys", "rotate", "--config", str(srv.config_path))
    backup = srv.directory / "backups" / "grantd-backup.db"
    backup.parent.mkdir(mode=0o700)
    backed = srv.grantd("db", "backup", str(backup), "--config", str(srv.config_path))
    for name, result in (("keys rotate", rotated), ("db backup", backed)):
        leaks = secrets.found_in(result.stdout + result.stderr)
        assert not leaks, f"grantd {name} printed secrets: {leaks}"
    return backup


def server_keys(directory: Path, secrets: Secrets) -> int:
    """The server's signing keys: their PEM and raw private bytes are secrets too."""
    pems = [row[0] for row in pg.server_sql(directory, "SELECT private_pem FROM signing_keys")]
    for pem in pems:
        if not pem.strip():
            continue  # a retired key's private half is deleted when it retires (D12)
        key = serialization.load_pem_private_key(pem.encode(), password=None)
        assert isinstance(key, Ed25519PrivateKey)
        secrets.add_raw("server signing key", private_raw(key))
        for line in pem.splitlines():
            if not line.startswith("-----") and len(line) >= 16:
                secrets.add("server signing key PEM line", line)
    return len(pems)


def assert_private(path: Path) -> None:
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o600, f"{path.name} is {oct(mode)}"
    parent = stat.S_IMODE(path.parent.stat().st_mode)
    assert not parent & stat.S_IWOTH, f"{path.parent} is world-writable ({oct(parent)})"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_secret_in_logs_or_cli_output_and_files_are_private(tmp_path: Path, log_format: str) -> None:
    srv = make_server(tmp_path / "srv", log_format=log_format)
    config = srv.config_path.read_text().replace(
        f'format = "{log_format}"\n', f'format = "{log_format}"\nlevel = "debug"\naccess = true\n'
    )
    srv.config_path.write_text(config)
    srv.start()
    secrets = Secrets()
    try:
        backup = flow(srv, tmp_path, secrets)
        db = srv.directory / "grantd.db"
        # the SQLite files, or (GRANTD_TEST_STORAGE=postgres) the file that holds the DSN
        stored = (
            [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
            if pg.suite_storage() == "sqlite"
            else [srv.directory / "postgres-dsn"]
        )
        for path in (*stored, backup, srv.directory / "management-token"):
            assert path.exists(), path
            assert_private(path)
    finally:
        srv.stop()
    assert server_keys(srv.directory, secrets) >= 2  # the rotation made a second one
    log = srv.log()
    assert "/api/grants/verify" in log and "/api/agent/authenticate" in log, "access lines are on"
    if log_format == "json":
        access = [
            json.loads(line) for line in log.splitlines() if line.startswith("{") and '"status"' in line
        ]
        assert access and all("path" in line for line in access)
    assert " 401 " in log or '"status": 401' in log or '"status":401' in log
    leaks = secrets.found_in(log)
    assert not leaks, f"the server log holds secrets: {leaks}"
    assert len(secrets.values) > 25


def test_config_init_writes_a_private_token_file(tmp_path: Path) -> None:
    """The token file `grantd config init` writes (the one operators keep) is 0600; the command
    shows the token once on purpose, so its output is not searched."""
    target = tmp_path / "etc" / "grantd.toml"
    subprocess.run(
        [*GRANTD, "config", "init", "--path", str(target)],
        check=True,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert_private(target.parent / "management-token")
    assert "management-token" in target.read_text()


def test_the_search_finds_what_it_looks_for() -> None:
    """The detector itself: a planted secret, a JWT-shaped string and a PEM header are found."""
    secrets = Secrets()
    secrets.add("token", "s3cr3t-value-123")
    key = Ed25519PrivateKey.generate()
    secrets.add_raw("key", private_raw(key))
    raw_b64url = base64.urlsafe_b64encode(private_raw(key)).decode().rstrip("=")
    text = f"x s3cr3t-value-123 y {raw_b64url} eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLWJ5dGVz -----BEGIN OPENSSH PRIVATE KEY-----"
    leaks = secrets.found_in(text)
    assert any(w.startswith("token") for w in leaks) and any(w.startswith("key") for w in leaks)
    assert any(w.startswith("JWT-shaped") for w in leaks) and any(w.startswith("PEM header") for w in leaks)
    assert secrets.found_in("GET /api/grants 200 1.2ms") == []
