"""The storage contract suite ships with grantd as ``grantd.testing`` (issue 21): run from any
directory, by the project's interpreter, with nothing installed for it, it passes against the
built-in SQLite backend and the in-memory example, against PostgreSQL given a DSN, and against a
third-party backend that names its store; a backend that breaks the contract fails it."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support import postgres as pg

# Each runs the whole contract suite in a fresh interpreter (20-30 s): the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow

THIRD_PARTY = '''
from grantd.testing.memory_store import MemoryStore


def open_for_contract(tmp_path):
    return MemoryStore()


class _Forgetful(MemoryStore):
    """Breaks the contract: a rate counter that never counts past one."""

    def __init__(self):
        super().__init__()
        hit = self.rates.hit

        async def once(key, window_start, window_ms, now):
            await hit(key, window_start, window_ms, now)
            return 1

        self.rates.hit = once


def open_broken(tmp_path):
    return _Forgetful()
'''


def run_suite(where: Path, *args: str, **env: str) -> tuple[int, str, dict[str, str]]:
    """``python -m pytest --pyargs grantd.testing`` in ``where``; (exit code, output, test id -> outcome)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GRANTD_", "PYTEST", "PYTHONPATH"))}
    report = where / "report.xml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "--pyargs",
            "grantd.testing",
            *args,
        ],
        cwd=where,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        module = str(case.get("classname")).rpartition(".")[2]  # the report names the module by its path
        outcomes[f"{module}::{case.get('name')}"] = kinds.pop() if kinds else "passed"
    return done.returncode, done.stdout + done.stderr, outcomes


def test_the_shipped_suite_passes_from_any_directory_on_sqlite_and_the_example(tmp_path):
    code, output, outcomes = run_suite(tmp_path)
    assert code == 0, output
    assert not (tmp_path / "tests").exists() and "grantd/testing" not in str(tmp_path)
    ran = {name for name, outcome in outcomes.items() if outcome == "passed"}
    assert any(n.endswith("[sqlite]") for n in ran) and any(n.endswith("[example]") for n in ran)
    assert not any(
        n.startswith("test_keys::") and "[postgres]" in n for n in outcomes
    )  # no DSN: no PostgreSQL backend
    # the PostgreSQL-only tests say why they did not run
    assert {n for n, o in outcomes.items() if o == "skipped"} == {n for n in outcomes if "postgres" in n}
    assert "test_store::test_migrate_twice_is_a_no_op[sqlite]" in ran


def test_a_third_party_backend_runs_the_suite_by_naming_its_store(tmp_path):
    (tmp_path / "my_backend.py").write_text(THIRD_PARTY)
    code, output, outcomes = run_suite(
        tmp_path,
        "-k",
        "test_rates or test_keys",
        GRANTD_CONTRACT_STORE="my_backend:open_for_contract",
        PYTHONPATH=str(tmp_path),
    )
    assert code == 0, output
    assert outcomes and all(n.endswith("[plugin]") for n in outcomes) and set(outcomes.values()) == {"passed"}
    code, output, outcomes = run_suite(
        tmp_path, "-k", "test_rates", GRANTD_CONTRACT_STORE="my_backend:open_broken", PYTHONPATH=str(tmp_path)
    )
    assert code == 1, output
    assert "failure" in outcomes.values()


def test_the_shipped_suite_runs_on_postgresql_given_a_dsn(tmp_path):
    pg.require()
    server = pg.Postgres().start()
    try:
        dsn = server.create_database()
        code, output, outcomes = run_suite(
            tmp_path,
            "-k",
            "postgres and (test_keys or test_migrations_parties)",
            GRANTD_CONTRACT_POSTGRES_DSN=dsn,
        )
        assert code == 0, output
        assert outcomes and set(outcomes.values()) == {"passed"}
        assert any(n.endswith("[postgres]") for n in outcomes)
        assert "test_migrations_parties::test_postgres_migration_6_binds_existing_agents" in outcomes
    finally:
        server.stop()
