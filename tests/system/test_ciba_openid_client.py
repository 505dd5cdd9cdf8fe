"""A real third-party CIBA client completes the poll flow (issue 25): npm `openid-client` 6 (with
oauth4webapi underneath) run by Node against a real grantd, authenticating with `private_key_jwt`
signed by the agent's enrolled Ed25519 key (RFC 9864's `Ed25519` alg, as oauth4webapi sends it),
while an approver decides in parallel. The packages are installed from tests/node/package.json
(pinned by its package-lock.json) with npm on first use."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from conftest import ROOT, enroll, make_server

NODE_DIR = ROOT / "tests" / "node"
COMMAND = ["systemctl", "restart", "nginx"]


def node_clients() -> Path:
    """tests/node with its node_modules (npm ci on first use: the registry is an ordinary client's)."""
    assert shutil.which("node") and shutil.which("npm"), (
        "node and npm are needed (scripts/bootstrap test installs them: apt nodejs npm)"
    )
    if not (NODE_DIR / "node_modules" / "openid-client").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, timeout=300)
    return NODE_DIR


@pytest.mark.slow
def test_openid_client_completes_the_ciba_poll_flow(tmp_path):
    node_dir = node_clients()
    srv = make_server(tmp_path / "srv").start()
    try:
        agent = enroll(srv, tmp_path / "keys")
        pem = tmp_path / "agent.pk8.pem"
        pem.write_bytes(
            agent.private_key().private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        details = json.dumps(
            [
                {
                    "type": "grantd_command",
                    "locations": ["web-1"],
                    "actions": ["execute"],
                    "command": COMMAND,
                    "audience": "escapes",
                    "grant_type": "once",
                }
            ]
        )
        proc = subprocess.Popen(
            ["node", str(node_dir / "ciba_poll.mjs"), srv.url, agent.email, str(pem), details],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        ack = json.loads(proc.stdout.readline())
        assert ack["step"] == "ack" and ack["interval"] == 5, ack
        # the approver decides while the client polls
        with srv.admin() as http:
            deadline = time.monotonic() + 20
            while True:
                grants = http.get(
                    "/api/grants", params={"requester": agent.email, "status": "pending"}
                ).json()
                if grants["data"] or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            grant = grants["data"][0]
            assert grant["request"]["binding_message"] == "node ciba"
            assert http.post(f"/api/grants/{grant['id']}/approve", json={}).status_code == 200
        out, err = proc.communicate(timeout=60)
        tokens = json.loads(out.splitlines()[-1])
        assert tokens["step"] == "tokens", (tokens, err)
        claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
        assert claims["grant_id"] == grant["id"] and claims["command"] == COMMAND
        assert tokens["id_token_claims"]["sub"] == "admin@example.com"
        assert tokens["id_token_claims"]["aud"] == agent.email
        assert tokens["authorization_details"][0]["grant_id"] == grant["id"]
        # what the client got is an ordinary AuthZ-JWT: the target host consumes it once
        with srv.client(tokens["access_token"]) as http:
            assert http.post(f"/api/grants/{grant['id']}/consume").json()["status"] == "consumed"
    finally:
        srv.stop()
