"""The storage contract suite (``grantd.testing``) in grantd's own suite: every test of it runs here
against SQLite, PostgreSQL and the in-memory example, under tests/contract/ (thin modules that
import the shipped tests).

``postgres`` runs every test on a real PostgreSQL server that the session starts (Debian's
``postgresql`` package; tests/support/postgres.py), each test in an empty schema of its own.
Where the server programs are missing the backend is skipped with the reason, except in CI
(``CI`` set), where that is a failure: ``scripts/bootstrap test`` installs them.
A plugin author runs the same suite against their backend with ``GRANTD_CONTRACT_STORE`` (docs/plugins.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import postgres as pg

from grantd.testing import postgres as contract_postgres
from grantd.testing.conftest import (  # noqa: F401 - the suite's fixtures and its backend parametrisation
    anyio_backend,
    pytest_generate_tests,
    store,
)

_SERVER: dict[str, pg.Postgres] = {}


def postgres_server() -> pg.Postgres:
    """This test process's PostgreSQL server, started on first use, stopped by ``postgres_session``."""
    if "server" not in _SERVER:
        pg.require()
        _SERVER["server"] = pg.Postgres().start()
    return _SERVER["server"]


contract_postgres.use(postgres_server)


@pytest.fixture(scope="session", autouse=True)
def postgres_session() -> Iterator[None]:
    yield
    server = _SERVER.pop("server", None)
    if server is not None:
        server.stop()
