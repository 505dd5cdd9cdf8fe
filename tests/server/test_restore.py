"""`grantd db restore` (issue 12) and the restore drill of docs/operations.md, run as written against
a real server (a stand-in `systemctl` starts and stops it)."""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import postgres as pg

from conftest import ROOT, Server

OPERATIONS = ROOT / "docs" / "operations.md"

# `systemctl stop|start grantd` for the drill: this test's server, by pid file.
FAKE_SYSTEMCTL = """#!/bin/sh
set -eu
case "$1" in
  stop)
    pid=$(cat "$GRANTD_PIDFILE")
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done ;;
  start)
    setsid "$GRANTD_PYTHON" -m grantd serve --config "$GRANTD_CONFIG" >>"$GRANTD_LOG" 2>&1 &
    echo $! >"$GRANTD_PIDFILE"
    i=0
    until curl -fs "$GRANTD_URL/readyz" >/dev/null; do
      i=$((i+1)); [ $i -lt 300 ] || { echo "grantd did not start" >&2; exit 1; }; sleep 0.1
    done ;;
  *) echo "fake systemctl: $*" >&2; exit 2 ;;
esac
"""


def drill_script() -> str:
    text = OPERATIONS.read_text()
    found = re.search(
        r"<!-- restore-drill:start -->\s*```sh\n(.*?)```\s*<!-- restore-drill:end -->", text, re.S
    )
    assert found, "docs/operations.md lost its restore drill block"
    return found.group(1)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pg.sqlite_only(
    "docs/operations.md's restore drill backs up and restores a SQLite file and checks its modes "
    "(PostgreSQL's pg_dump/restore: tests/system/test_nodes.py::test_backup_is_a_private_pg_dump_that_restores)"
)
@pytest.mark.slow
def test_the_documented_restore_drill_runs(server_factory, tmp_path: Path) -> None:
    srv: Server = server_factory("drill")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    (bin_dir / "grantd").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m grantd "$@"\n')
    (bin_dir / "grantd").chmod(0o755)
    pidfile = tmp_path / "grantd.pid"
    env = {
        **srv.env,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "GRANTD_CONFIG": str(srv.config_path),
        "BACKUP": str(tmp_path / "backups" / "drill.db"),
        "GRANTD_PIDFILE": str(pidfile),
        "GRANTD_PYTHON": sys.executable,
        "GRANTD_LOG": str(srv.log_path),
        "GRANTD_URL": srv.url,
    }
    (tmp_path / "backups").mkdir(mode=0o700)
    start = subprocess.run(
        [str(bin_dir / "systemctl"), "start", "grantd"],
        env=env,
        cwd=srv.directory,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert start.returncode == 0, start.stderr + srv.log()
    try:
        result = subprocess.run(
            ["bash", "-c", drill_script()],
            env=env,
            cwd=srv.directory,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{srv.log()[-3000:]}"
        assert "restore drill: OK" in result.stdout
        assert "restored" in result.stdout and "previous contents are kept in" in result.stdout
    finally:
        if pidfile.exists():
            subprocess.run([str(bin_dir / "systemctl"), "stop", "grantd"], env=env, timeout=60)
    db = srv.directory / "grantd.db"
    kept = Path(f"{db}.before-restore")
    assert mode(kept) == 0o600 and mode(db) == 0o600 and mode(tmp_path / "backups" / "drill.db") == 0o600
    assert "Traceback" not in srv.log()


@pytest.mark.slow
def test_restore_is_refused_while_the_server_runs(server_factory, tmp_path: Path) -> None:
    srv: Server = server_factory("running").start()
    backup = tmp_path / "backup.db"
    srv.grantd("db", "backup", "--config", str(srv.config_path), str(backup))
    srv.grantd("keys", "rotate", "--config", str(srv.config_path))
    keys = srv.grantd("keys", "list", "--json", "--config", str(srv.config_path)).stdout
    result = srv.grantd("db", "restore", "--config", str(srv.config_path), str(backup), check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "restore refused" in result.stderr and "in use by another" in result.stderr
    )  # process (SQLite), session (PostgreSQL)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not Path(f"{srv.directory / 'grantd.db'}.before-restore").exists()
    assert (
        srv.grantd("keys", "list", "--json", "--config", str(srv.config_path)).stdout == keys
    )  # nothing changed


@pytest.mark.slow
@pg.sqlite_only("forges SQLite files with sqlite3 (a newer schema, a foreign database) as restore sources")
def test_restore_refuses_files_that_are_not_grantd_backups(server_factory, tmp_path: Path) -> None:
    srv: Server = server_factory("files").start()
    backup = tmp_path / "backup.db"
    srv.grantd("db", "backup", "--config", str(srv.config_path), str(backup))
    srv.stop()
    newer = tmp_path / "newer.db"
    newer.write_bytes(backup.read_bytes())
    with sqlite3.connect(newer) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'from the future', 0)"
        )
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x)")
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all\n" * 200)
    for source, reason in [
        (newer, "newer than this grantd knows"),
        (other, "not a grantd one"),
        (text, "not a grantd database"),
        (tmp_path / "missing.db", "no such file"),
    ]:
        result = srv.grantd("db", "restore", "--config", str(srv.config_path), str(source), check=False)
        assert result.returncode == 1 and reason in result.stderr, (source, result.stderr)
        assert "Traceback" not in result.stderr
    assert not Path(f"{srv.directory / 'grantd.db'}.before-restore").exists()


@pg.sqlite_only(
    "flock on the SQLite file is what a SQLite restore holds (PostgreSQL's restore refuses while any "
    "session uses the database: tests/system/test_nodes.py::test_restore_refuses_while_a_node_uses_the_database)"
)
@pytest.mark.parametrize("log_format", ["text"])
def test_a_server_does_not_start_on_a_database_being_restored(
    server_factory, tmp_path: Path, log_format: str
) -> None:
    """The restore's exclusive lock keeps a starting server out (one line, exit 1)."""
    import fcntl

    srv: Server = server_factory("locked", log_format=log_format).start()
    srv.stop()
    db = srv.directory / "grantd.db"
    fd = os.open(db, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a restore holds
        result = subprocess.run(
            [*srv.command, "serve", "--config", str(srv.config_path)],
            cwd=srv.directory,
            env=srv.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(fd)
    assert result.returncode == 1, result.stderr
    assert "is being restored" in result.stderr and "Traceback" not in result.stderr
