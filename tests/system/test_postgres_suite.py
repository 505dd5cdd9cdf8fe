"""The HTTP suite on PostgreSQL, in CI (issue 12), bounded.

CI runs ``scripts/test`` once, on SQLite. This test runs a representative part of the HTTP suite a
second time with ``GRANTD_TEST_STORAGE=postgres`` (every test server on a fresh database of one
private PostgreSQL server, tests/support/postgres.py): grants, agents, delegations, people admin,
passkeys, sessions, limits and the authorization matrix — the files where every kind of record
and every conditional write goes through the store — in one subprocess, one pytest process
(``-n 0``: the outer run already uses both cores). It is marked slow (a few minutes); the whole
HTTP suite on PostgreSQL is one command (README, Storage):

    GRANTD_TEST_STORAGE=postgres scripts/test -m "not slow"
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import postgres as pg

from conftest import ROOT

pytestmark = pytest.mark.slow

FILES = [
    "tests/server/test_grants.py",
    "tests/server/test_agents.py",
    "tests/server/test_delegations.py",
    "tests/server/test_people_admin.py",
    "tests/server/test_passkeys.py",
    "tests/server/test_sessions.py",
    "tests/server/test_limits.py",
    "tests/system/test_authz_matrix.py",
]
TIMEOUT = 900  # seconds; about four minutes on the 2-core CI machine


def test_the_http_suite_passes_on_postgres(tmp_path: Path) -> None:
    pg.require()
    if pg.suite_storage() == "postgres":
        pytest.skip("this run is on PostgreSQL already: the files below run in it themselves")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env[pg.STORAGE_ENV] = "postgres"
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-q",
            "--basetemp",
            str(tmp_path / "run"),
            *FILES,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    took = time.monotonic() - started
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    print(f"HTTP suite on PostgreSQL ({len(FILES)} files): {summary} [{took:.0f} s]")
    assert result.returncode == 0, f"{result.stdout[-12000:]}\n{result.stderr[-3000:]}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) > 500, summary  # the files really ran
