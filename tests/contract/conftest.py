"""The storage contract suite: every test runs against every backend in ``BACKENDS``.

A plugin author runs it against their backend without editing it (docs/plugins.md):

    GRANTD_CONTRACT_STORE=my_package.store:open_for_contract .venv/bin/python -m pytest tests/contract

``open_for_contract(tmp_path)`` returns a fresh, empty ``grantd.store.Store`` (it may use
``tmp_path`` for files); the suite migrates it. Or override the ``store`` fixture in a conftest.

``postgres`` runs every test on a real PostgreSQL server that the session starts (Debian's
``postgresql`` package; tests/support/postgres.py), each test in an empty schema of its own.
Where the server programs are missing the backend is skipped with the reason, except in CI
(``CI`` set), where that is a failure: ``scripts/bootstrap test`` installs them.
test_processes.py races several OS processes, each with its own store, on one SQLite file and on
one PostgreSQL database.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import postgres as pg
from support.memory_store import MemoryStore

from grantd.plugins.storage_sqlite import SQLiteStore
from grantd.store import Store


def _plugin_factory() -> Callable[[Path], Any] | None:
    spec = os.environ.get("GRANTD_CONTRACT_STORE")
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name or "open_for_contract")  # type: ignore[no-any-return]


FACTORIES: dict[str, Callable[[Path], Any]] = {
    "sqlite": lambda tmp: SQLiteStore(tmp / "data" / "grantd.db"),
    "postgres": lambda tmp: _open_postgres(),
    "example": lambda tmp: MemoryStore(),
}
if (plugin := _plugin_factory()) is not None:
    FACTORIES = {"plugin": plugin}
BACKENDS = list(FACTORIES)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_SERVER: dict[str, pg.Postgres] = {}
_DATABASES: dict[int, str] = {}


def postgres_server() -> pg.Postgres:
    """This test process's PostgreSQL server, started on first use, stopped by ``postgres_session``."""
    if "server" not in _SERVER:
        pg.require()
        _SERVER["server"] = pg.Postgres().start()
    return _SERVER["server"]


def _open_postgres() -> Any:
    from grantd.plugins.storage_postgres import PostgresStore

    dsn = postgres_server().create_schema()
    opened = PostgresStore(dsn, pool_size=20)
    _DATABASES[id(opened)] = dsn
    return opened


@pytest.fixture(scope="session", autouse=True)
def postgres_session() -> Iterator[None]:
    yield
    server = _SERVER.pop("server", None)
    if server is not None:
        server.stop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    opened = FACTORIES[backend](tmp_path)
    assert isinstance(opened, Store), "the backend must implement grantd.store.Store"
    await opened.migrate()
    try:
        yield opened
    finally:
        opened.close()
        dsn = _DATABASES.pop(id(opened), None)
        if dsn is not None:
            postgres_server().drop_schema(dsn)
