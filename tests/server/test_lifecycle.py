"""The server process: first start, health, logs, SIGTERM, several processes on one database."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from serve_support import serve_in, stop_serving

from conftest import ROOT, enroll, free_port


def test_health_and_readiness(server):
    with server.client() as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json() == {"status": "ready"}


def test_first_start_without_config_writes_a_dev_config_and_prints_the_token_once(tmp_path):
    port = free_port()
    proc, lines = serve_in(tmp_path, port)
    try:
        token = (tmp_path / "management-token").read_text().strip()
        assert oct((tmp_path / "management-token").stat().st_mode & 0o777) == "0o600"
        config = (tmp_path / "grantd.toml").read_text()
        assert token not in config and 'management_token = "file:management-token"' in config
        r = httpx.get(
            f"http://127.0.0.1:{port}/api/admin/agents", headers={"Authorization": f"Bearer {token}"}
        )
        assert r.status_code == 200
        assert (tmp_path / "grantd.db").exists()
    finally:
        stderr = stop_serving(proc, lines)
    assert stderr.count(token) == 1, "the token is printed exactly once"
    assert str(tmp_path / "management-token") in stderr
    assert f"http://localhost:{port}" in stderr  # the dev issuer: passkeys need a name, not an IP address


def test_sigterm_shuts_down_gracefully_with_exit_code_0(server_factory):
    srv = server_factory().start()
    with srv.client() as http:
        assert http.get("/healthz").status_code == 200
    started = time.monotonic()
    assert srv.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 10


def test_json_log_format_has_one_line_per_request_with_request_id(server_factory):
    srv = server_factory(log_format="json").start()
    with srv.client() as http:
        http.get("/healthz", headers={"X-Request-ID": "abc-123"})
        http.post("/api/agent/challenge", content=b"{broken")
    srv.stop()
    entries = [json.loads(line) for line in srv.log().splitlines() if line.startswith("{")]
    access = [e for e in entries if e["logger"] == "grantd.access"]
    assert any(
        e["request_id"] == "abc-123" and e["path"] == "/healthz" and e["status"] == 200 for e in access
    )
    assert any(e["path"] == "/api/agent/challenge" and e["status"] == 400 for e in access)
    assert all(isinstance(e["duration_ms"], float | int) for e in access)


@pytest.mark.slow
def test_one_challenge_is_single_use_across_two_server_processes(server_factory, tmp_path):
    """20 concurrent authenticates of one challenge against [server] workers = 2: exactly one 200."""
    srv = server_factory(workers=2).start()
    agent = enroll(srv, tmp_path)
    pids = set()
    for _ in range(3):
        challenge = httpx.post(f"{srv.url}/api/agent/challenge", json={"agent_id": agent.email}).json()[
            "challenge"
        ]
        body = {"agent_id": agent.email, "challenge": challenge, "signature": agent.sign_raw(challenge)}

        async def attempt(client: httpx.AsyncClient) -> int:
            return (await client.post("/api/agent/authenticate", json=body)).status_code

        async def race() -> list[int]:
            # Separate connections so the requests spread over both worker processes.
            clients = [httpx.AsyncClient(base_url=srv.url, timeout=30) for _ in range(20)]
            try:
                return await asyncio.gather(*(attempt(c) for c in clients))
            finally:
                await asyncio.gather(*(c.aclose() for c in clients))

        statuses = asyncio.run(race())
        assert sorted(statuses) == [200] + [401] * 19, statuses
    pids = set(re.findall(r"Starting worker \[(\d+)\]", srv.log()))
    assert len(pids) == 2, srv.log()


def test_python_m_grantd_is_the_grantd_command():
    out = subprocess.run(
        [sys.executable, "-m", "grantd", "--version"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout.startswith("grantd ")


def test_a_get_with_an_empty_body_is_not_an_error_in_the_log(server):
    # Some HTTP clients send Content-Length: 0 on every GET; Sanic would log an ERROR for each.
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    time.sleep(0.2)
    assert "body not consumed" not in server.log()
