"""Issue 12: a start that cannot work fails with one clear line (text or JSON, as the logs are) and
a non-zero exit before any banner. Real `grantd serve` processes (tests/conftest.py `make_server`).
How a started server stops: test_stop_signals.py; its several processes: test_server_processes.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from support import postgres as pg
from support.serving import run_serve

from grantd.web.app import describe_startup_error

from conftest import Server, make_server

BANNERS = ("grantd: serving", "listening on")


def assert_one_line_failure(
    result: subprocess.CompletedProcess[str], *, contains: str, json_format: bool = False
) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output, output
    assert not any(b in output for b in BANNERS), output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, output
    line = lines[0]
    if json_format:
        entry = json.loads(line)
        assert entry["level"] == "error" and entry["logger"] == "grantd", entry
        assert entry["message"].startswith("cannot start: "), entry
        assert contains in entry["message"], entry
    else:
        assert line.startswith("grantd: cannot start: ") and contains in line, line
    return line


# -- start-up failures ---------------------------------------------------------------------------------
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_port_in_use_is_one_line_before_any_banner(tmp_path: Path, log_format: str) -> None:
    srv = make_server(tmp_path / "srv", log_format=log_format)
    with socket.create_server(("127.0.0.1", srv.port)):
        result = run_serve(srv)
    assert_one_line_failure(
        result,
        contains=f"cannot listen on 127.0.0.1:{srv.port}: the address is already in use",
        json_format=log_format == "json",
    )


def _without_root_bypass() -> list[str]:
    """Run as this user without the capabilities that let root ignore file modes (so modes bite)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise AssertionError(
            "as root, an unwritable directory needs setpriv (util-linux, installed by scripts/bootstrap)"
        )
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]


def _serve_with_database_directory(srv: Server, mode: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``grantd serve`` with its SQLite file in a directory of ``mode`` (as a user root's bypass does
    not help): its result, and that directory."""
    data = srv.directory / "data"
    data.mkdir(mode=mode)
    srv.config_path.write_text(
        srv.config_path.read_text().replace('path = "grantd.db"', 'path = "data/grantd.db"')
    )
    try:
        return run_serve(srv, wrap=_without_root_bypass()), data
    finally:
        data.chmod(0o700)


@pg.sqlite_only("SQLite's database directory without write permission (PostgreSQL has no file here)")
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_read_only_database_directory_is_one_line(tmp_path: Path, log_format: str) -> None:
    srv = make_server(tmp_path / "srv", log_format=log_format)
    result, data = _serve_with_database_directory(srv, 0o500)
    line = assert_one_line_failure(
        result, contains="cannot open the SQLite database", json_format=log_format == "json"
    )
    assert f"the directory {data} must be writable" in line


@pg.sqlite_only("SQLite's database directory without read permission (PostgreSQL has no file here)")
def test_an_unreadable_database_directory_is_one_line(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv")
    result, data = _serve_with_database_directory(srv, 0o000)
    line = assert_one_line_failure(result, contains="cannot open the SQLite database")
    assert "Permission denied" in line and str(data) in line


@pg.sqlite_only(
    "a read-only SQLite file and its -wal/-shm companions (PostgreSQL has no file here; an "
    "unreachable network database: test_a_storage_plugin_that_cannot_connect_is_one_line)"
)
def test_a_database_file_that_is_not_writable_is_one_line(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv").start()
    srv.stop()
    db = srv.directory / "grantd.db"
    for companion in (db.with_name("grantd.db-wal"), db.with_name("grantd.db-shm")):
        companion.unlink(missing_ok=True)
    db.chmod(0o400)
    try:
        result = run_serve(srv, wrap=_without_root_bypass())
    finally:
        db.chmod(0o600)
    line = assert_one_line_failure(result, contains="cannot open the SQLite database")
    assert str(db) in line


def test_a_bad_config_in_json_mode_is_one_json_line(tmp_path: Path) -> None:
    srv = make_server(tmp_path / "srv", log_format="json")
    srv.config_path.write_text(srv.config_path.read_text().replace("[server]\n", "[server]\nhots = 'x'\n"))
    result = run_serve(srv)
    line = assert_one_line_failure(result, contains="configuration invalid", json_format=True)
    entry = json.loads(line)
    assert entry["problems"] == ['server.hots: unknown key (did you mean "server.host"?)']


UNREACHABLE_PLUGIN = """
from grantd.hookspecs import hookimpl

@hookimpl
def storage_backends():
    def open_store(config):
        raise ConnectionRefusedError(
            "connection to server at \\"10.9.9.9\\", port 5432 failed: Connection refused\\n\\tIs the server running?")
    return {"unreachable": open_store}
"""


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_storage_plugin_that_cannot_connect_is_one_line(tmp_path: Path, log_format: str) -> None:
    """The hook for network databases: whatever open_services raises prints as one line."""
    srv = make_server(
        tmp_path / "srv",
        log_format=log_format,
        storage='plugin = "unreachable"\npath = "grantd.db"',
        extra='[plugins]\nmodules = ["unreachable_store"]\npaths = ["site-plugins"]\n',
    )
    (srv.directory / "site-plugins").mkdir()
    (srv.directory / "site-plugins" / "unreachable_store.py").write_text(UNREACHABLE_PLUGIN)
    result = run_serve(srv)
    line = assert_one_line_failure(
        result,
        contains="port 5432 failed: Connection refused Is the server running?",
        json_format=log_format == "json",
    )
    assert "10.9.9.9" in line


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_an_unreachable_postgresql_is_one_line(tmp_path: Path, log_format: str) -> None:
    """The real PostgreSQL backend against a port nobody listens on: one line, no pool noise."""
    pytest.importorskip("psycopg")
    with socket.socket() as probe:  # a free port, closed again: connecting to it is refused
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    srv = make_server(
        tmp_path / "srv", log_format=log_format, storage='plugin = "postgres"\ndsn = "file:dsn"'
    )
    dsn = srv.directory / "dsn"
    dsn.write_text(f"postgresql://grantd@127.0.0.1:{dead}/grantd?connect_timeout=3\n")
    dsn.chmod(0o600)
    result = run_serve(srv)
    assert_one_line_failure(result, contains="cannot connect to PostgreSQL", json_format=log_format == "json")


def test_describe_startup_error_is_always_one_line() -> None:
    class Weird(Exception):
        pass

    assert describe_startup_error(Weird("first\n  second\n")) == "Weird: first second"
    assert describe_startup_error(Weird()) == "Weird"
    assert describe_startup_error(PermissionError(13, "Permission denied", "/var/lib/grantd")).startswith(
        "Permission denied: /var/lib/grantd"
    )
