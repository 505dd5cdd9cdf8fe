"""Verified AuthZ-JWTs are remembered by a digest of the token (issue 14), like identity tokens: the
remembered verdict must never outlive what would refuse the token uncached — its expiry, its
key's revocation, its grant's revocation, consumption or lapse — and a once grant stays consumable
exactly once however often its token was verified first."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from inproc import InProcessServer

from authz_world import NO_LIMITS

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ["systemctl", "restart", "nginx"]


class Kit:
    def __init__(self, srv: InProcessServer):
        self.srv = srv
        key = Ed25519PrivateKey.generate()
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        email = f"cache-{os.urandom(4).hex()}@example.com"
        with srv.admin() as http:
            r = http.post(
                "/api/agent/enroll", json={"email": email, "name": "cache", "publicKey": public.decode()}
            )
            assert r.status_code == 201, r.text
        agent_id = r.json()["agent_id"]
        with srv.client() as http:
            challenge = http.post("/api/agent/challenge", json={"agent_id": agent_id}).json()["challenge"]
            signature = base64.b64encode(key.sign(challenge.encode())).decode()
            r = http.post(
                "/api/agent/authenticate",
                json={"agent_id": agent_id, "challenge": challenge, "signature": signature},
            )
            assert r.status_code == 200, r.text
        self.token = r.json()["token"]

    def approved(self, **fields: Any) -> tuple[str, str]:
        """(AuthZ-JWT, grant id) of a freshly approved grant."""
        body = {
            "target_host": "web-1",
            "audience": "escapes",
            "command": COMMAND,
            "grant_type": "once",
            **fields,
        }
        with self.srv.client(self.token) as http:
            r = http.post("/api/grants", json=body)
            assert r.status_code == 201, r.text
        with self.srv.admin() as http:
            r = http.post(f"/api/grants/{r.json()['id']}/approve", json={})
            assert r.status_code == 200, r.text
        return r.json()["authz_jwt"], r.json()["grant"]["id"]

    def verify(self, token: str) -> dict[str, Any]:
        with self.srv.client() as http:
            return http.post("/api/grants/verify", json={"token": token}).json()  # type: ignore[no-any-return]

    def consume(self, grant_id: str, token: str) -> httpx.Response:
        with self.srv.client(token) as http:
            return http.post(f"/api/grants/{grant_id}/consume")

    def warm(self, grant_id: str, token: str, times: int = 3) -> None:
        """Verified several times: from here on the server answers from what it remembered."""
        for _ in range(times):
            assert self.verify(token)["valid"] is True


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    srv = InProcessServer(tmp_path / "srv", extra=NO_LIMITS).start()
    try:
        yield Kit(srv)
    finally:
        srv.stop()


def test_a_once_grant_is_consumed_once_however_often_its_token_was_verified(kit: Kit) -> None:
    token, grant_id = kit.approved()
    kit.warm(grant_id, token)
    first = kit.consume(grant_id, token)
    assert first.status_code == 200 and first.json()["status"] == "consumed", first.text
    again = kit.consume(grant_id, token)
    assert again.status_code == 200 and again.json()["status"] == "consumed" and again.json()["error"], (
        again.text
    )
    assert kit.verify(token)["valid"] is False


def test_an_always_grant_revoked_after_its_token_was_remembered_is_refused_at_once(kit: Kit) -> None:
    token, grant_id = kit.approved(grant_type="always")
    kit.warm(grant_id, token)
    assert kit.consume(grant_id, token).json()["status"] == "valid"
    with kit.srv.admin() as http:
        assert http.post(f"/api/grants/{grant_id}/revoke", json={}).status_code == 200
    answer = kit.verify(token)
    assert answer["valid"] is False and answer["status"] == "revoked"
    assert kit.consume(grant_id, token).json().get("status") == "revoked"


def test_a_remembered_token_expires_on_time(kit: Kit) -> None:
    token, grant_id = kit.approved(grant_type="always")  # its token lives an hour; the grant for ever
    kit.warm(grant_id, token)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    kit.srv.clock.advance(exp - kit.srv.clock.now_s())  # exactly at exp: expired (PyJWT's rule)
    assert kit.verify(token) == {"valid": False, "error": "token expired"}
    assert kit.consume(grant_id, token).status_code == 401


def test_a_remembered_token_dies_with_its_key(kit: Kit) -> None:
    token, grant_id = kit.approved(grant_type="always")
    kit.warm(grant_id, token)
    assert kit.consume(grant_id, token).json()["status"] == "valid"
    kid = jwt.get_unverified_header(token)["kid"]
    done = subprocess.run(
        [sys.executable, "-m", "grantd", "keys", "revoke", kid, "--config", str(kit.srv.config_path)],
        cwd=kit.srv.directory,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    kit.srv.clock.advance(2)  # the keyring re-reads its keys within a second
    assert kit.verify(token)["valid"] is False
    assert kit.consume(grant_id, token).status_code == 401


def test_a_changed_token_is_not_the_remembered_one(kit: Kit) -> None:
    """Only the exact string is remembered: any other spelling is verified in full (and refused)."""
    token, grant_id = kit.approved(grant_type="always")
    kit.warm(grant_id, token)
    head, payload, signature = token.split(".")
    claims = jwt.decode(token, options={"verify_signature": False})
    forged = base64.urlsafe_b64encode(json.dumps({**claims, "target_host": "web-2"}).encode()).rstrip(b"=")
    flipped = signature[:10] + ("B" if signature[10] != "B" else "C") + signature[11:]
    for other in (f"{head}.{forged.decode()}.{signature}", f"{head}.{payload}.{flipped}", token + "="):
        assert kit.verify(other)["valid"] is False
        assert kit.consume(grant_id, other).status_code in (400, 401)
