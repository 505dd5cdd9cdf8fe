"""`grantd users` (add, list, delete, link) against a real server's database, and the first admin in
a minute: `grantd serve` in a fresh directory writes a development config naming a first admin,
creates them and prints a registration link on its terminal while they have no passkey."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import serve_in, stop_serving

from conftest import Server, free_port

LINK = re.compile(r"(http://(?:localhost|127\.0\.0\.1):\d+)/register\?token=([A-Za-z0-9_-]{43})")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from conftest import make_server

    server = make_server(tmp_path_factory.mktemp("users-cli"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def users(srv: Server, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return srv.grantd("users", *args, "--config", str(srv.config_path), check=check)


def test_users_add_creates_an_admin_and_prints_a_one_time_link(srv: Server) -> None:
    out = users(srv, "add", "Boss@Example.com", "--admin", "--name", "The Boss").stdout
    assert "created administrator boss@example.com" in out
    match = LINK.search(out)
    assert match and match[1] == srv.url, out
    with srv.admin() as http:
        user = http.get("/api/admin/users/boss@example.com").json()
        assert user["admin"] is True and user["name"] == "The Boss"
        pending = [
            r
            for r in http.get("/api/admin/registration-urls", params={"limit": "100"}).json()["data"]
            if r["email"] == "boss@example.com"
        ]
    assert len(pending) == 1 and pending[0]["created_by"] == "grantd users" and pending[0]["admin"] is True
    assert match[2] not in json.dumps(pending)


@pytest.mark.slow
def test_users_json_output_list_link_and_delete(srv: Server) -> None:
    added = json.loads(users(srv, "add", "json-user@example.com", "--json", "--ttl", "600").stdout)
    assert added["created"] is True and added["user"]["email"] == "json-user@example.com"
    reg = added["registration"]
    assert (
        reg["purpose"] == "register"
        and reg["expires_at"] - reg["created_at"] == 600_000
        and LINK.fullmatch(reg["url"])
    )
    again = json.loads(users(srv, "add", "json-user@example.com", "--json").stdout)
    assert again["created"] is False and again["registration"]["url"] != reg["url"]
    listed = json.loads(users(srv, "list", "--json", "--search", "json-user").stdout)
    assert [u["email"] for u in listed] == ["json-user@example.com"] and listed[0]["passkeys"] == 0
    text = users(srv, "list").stdout
    assert "json-user@example.com" in text
    link = json.loads(users(srv, "link", "json-user@example.com", "--add-device", "--json").stdout)
    assert link["purpose"] == "add-device" and LINK.fullmatch(link["url"])
    assert "add-device link" in users(srv, "link", "json-user@example.com", "--add-device").stdout
    deleted = json.loads(users(srv, "delete", "json-user@example.com", "--json").stdout)
    assert deleted["deleted"] is True
    assert json.loads(users(srv, "list", "--json", "--search", "json-user").stdout) == []
    with srv.admin() as http:
        assert http.get("/api/admin/users/json-user@example.com").status_code == 404


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("delete", "nobody@example.com"), "user not found"),
        (("link", "nobody@example.com"), "user not found"),
        (("add", "not-an-email"), "email must be an e-mail address"),
        (("add", "admin@example.com"), "management identity"),
        (("add", "x@example.com", "--ttl", "0"), "expires_in"),
    ],
)
def test_refusals_are_one_line_and_exit_1(srv: Server, args: tuple[str, ...], message: str) -> None:
    result = users(srv, *args, check=False)
    assert result.returncode == 1, result
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_users_add_refuses_an_agents_email(srv: Server, tmp_path: Path) -> None:
    from conftest import enroll

    agent = enroll(srv, tmp_path)
    result = users(srv, "add", agent.email, check=False)
    assert result.returncode == 1 and "already belongs" in result.stderr


def test_users_help_is_the_dispatchers(srv: Server) -> None:
    from grantd.cli import COMMANDS

    top = srv.grantd("--help").stdout
    assert "users" in top and COMMANDS["users"].help in " ".join(top.split())
    for action in ("add", "list", "delete", "link"):
        assert action in srv.grantd("users", "--help").stdout


# -- the first admin in a minute ------------------------------------------------------------------------


def _add_passkey(directory: Path, email: str) -> None:
    """A passkey for the first admin, written to the database as a registration would (server stopped)."""
    from grantd.config import load
    from grantd.plugin_manager import build_plugin_manager
    from grantd.services.context import open_services

    async def run() -> None:
        config = load(directory / "grantd.toml")
        services = await open_services(config, build_plugin_manager(config))
        try:
            person = await services.store.people.get(email)
            assert person is not None
            await services.store.credentials.add(
                {
                    "credential_id": "Y3JlZA",
                    "person_id": person["person_id"],
                    "rp_id": "localhost",
                    "public_key": "cGs",
                    "sign_count": 0,
                    "transports": [],
                    "aaguid": "",
                    "name": "Passkey 1",
                    "backed_up": False,
                    "created_at": 1,
                    "last_used_at": None,
                }
            )
        finally:
            services.store.close()

    asyncio.run(run())


@pytest.mark.slow
def test_first_start_makes_the_first_admin_and_prints_their_registration_link(tmp_path: Path) -> None:
    port = free_port()
    proc, lines = serve_in(tmp_path, port)
    try:
        token = (tmp_path / "management-token").read_text().strip()
        banner = "".join(lines)
        match = LINK.search(banner)
        assert match and match[1] == f"http://localhost:{port}", banner
        assert f"open http://localhost:{port}/register?token={match[2]} to register your passkey" in banner
        assert "first administrator admin@localhost" in banner
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}
        ) as http:
            user = http.get("/api/admin/users/admin@localhost").json()
            assert user["admin"] is True and user["status"] == "active"
            regs = http.get("/api/admin/registration-urls").json()["data"]
            assert [(r["email"], r["purpose"], r["status"]) for r in regs] == [
                ("admin@localhost", "register", "pending")
            ]
        assert 'first_admin = "admin@localhost"' in (tmp_path / "grantd.toml").read_text()
    finally:
        output = stop_serving(proc, lines)
    first_token = match[2]
    assert output.count(first_token) == 1, "the link is printed once, on the terminal, never in a log line"
    for path in tmp_path.iterdir():  # nor in any file: config, database, WAL
        assert first_token.encode() not in path.read_bytes(), path

    # the next start, still without a passkey: a fresh link, the old one gone
    proc, lines = serve_in(tmp_path, port)
    try:
        second = LINK.search("".join(lines))
        assert second and second[2] != first_token
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}
        ) as http:
            regs = http.get("/api/admin/registration-urls").json()["data"]
            assert [r["status"] for r in regs] == ["pending"]
            assert http.delete(f"/api/admin/registration-urls/{first_token}").status_code == 404
    finally:
        stop_serving(proc, lines)

    # once the admin has a passkey, no more links
    _add_passkey(tmp_path, "admin@localhost")
    proc, lines = serve_in(tmp_path, port)
    output = stop_serving(proc, lines)
    assert "register your passkey" not in output and not LINK.search(output)
